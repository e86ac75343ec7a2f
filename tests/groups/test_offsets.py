"""OffsetStore: commit/fetch/delete, metadata bound, expiry rules, records and replay."""

from snakka.groups.offsets import OffsetStore
from snakka.groups.types import GroupConfig
from snakka.protocol.errors import ErrorCode


class Clock:
    def __init__(self):
        self.now = 1_000

    def __call__(self):
        return self.now


def test_commit_fetch_delete_and_replay():
    clock = Clock()
    s = OffsetStore(GroupConfig(), clock)
    assert s.commit("g", [("t", 0, 10, 3, "m"), ("t", 1, 20, -1, None)]) == [0, 0]
    got = {(t, p): co for t, p, co in s.fetch("g", None)}
    assert got[("t", 0)].offset == 10 and got[("t", 0)].leader_epoch == 3
    assert got[("t", 0)].metadata == "m" and got[("t", 1)].metadata == ""
    assert s.fetch("g", [("t", 5)]) == [("t", 5, None)]
    s.delete("g", [("t", 1)])
    records = s.drain_records()
    assert [r.value is None for r in records] == [False, False, True]
    again = OffsetStore(GroupConfig(), clock)
    for r in records:
        again.replay(r)
    again.loaded()
    assert [(t, p, co.offset) for t, p, co in again.fetch("g", None)] == [("t", 0, 10)]
    assert again.groups() == {"g"}


def test_metadata_bound():
    s = OffsetStore(GroupConfig(offset_metadata_max_bytes=4), Clock())
    assert s.commit("g", [("t", 0, 1, -1, "12345"), ("t", 1, 1, -1, "1234")]) == [
        ErrorCode.OFFSET_METADATA_TOO_LARGE, ErrorCode.NONE]


def test_expiry_only_for_inactive_groups_after_retention():
    clock = Clock()
    s = OffsetStore(GroupConfig(offsets_retention_minutes=1), clock)
    s.commit("active", [("t", 0, 1, -1, "")])
    s.commit("idle", [("t", 0, 1, -1, "")])
    clock.now += 59_999
    assert s.expire(lambda g: g == "active") == 0
    clock.now += 1
    assert s.expire(lambda g: g == "active") == 1
    assert s.groups() == {"active"}


def test_delete_topic_and_group():
    s = OffsetStore(GroupConfig(), Clock())
    s.commit("a", [("x", 0, 1, -1, ""), ("y", 0, 1, -1, "")])
    s.commit("b", [("x", 0, 1, -1, "")])
    s.delete_topic("x")
    assert s.groups() == {"a"}
    s.delete_group("a")
    assert s.groups() == set()


def test_group_partition_matches_kafka():
    from snakka.groups.partitioning import offsets_partition
    from snakka.util.java import java_string_hash

    # Known java.lang.String.hashCode values.
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE
    assert offsets_partition("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    assert offsets_partition("hello", 50) == 99162322 % 50
