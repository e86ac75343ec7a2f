"""``__consumer_offsets`` in Kafka 4.0's record formats (snakka.groups.records).

- every kind of core record goes to Kafka's records and back (translate, bytes, replay) unchanged;
- the records are Kafka's field by field: a segment written by the reference Kafka 4.0
  (data/kafka40_consumer_offsets.log, made by data/gen_kafka40_offsets.py) decodes, re-encodes
  to the same bytes, and replays into the cores as the groups and offsets Kafka had;
- only what changed is written, and what a group or member no longer has is tombstoned.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest

from snakka.groups.classic import ClassicGroups
from snakka.groups.consumer import ConsumerGroups
from snakka.groups.offsets import OffsetStore
from snakka.groups.records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_REGULAR_EXPRESSION,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    GROUP_METADATA,
    KAFKA_SERDE,
    OFFSET_COMMIT,
    GroupRecordMapper,
)
from snakka.groups.types import GroupConfig, GroupRecord
from snakka.records import batch_records, iter_batches
from snakka.records.control import read_end_txn_marker

SEGMENT = Path(__file__).parent / "data" / "kafka40_consumer_offsets.log"
TID = uuid.UUID("e73174b3-8062-4f11-b1d2-e9943a252826")
T2 = uuid.UUID("00000000-0000-0000-0000-000000000002")


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


CLASSIC = GroupRecord(("classic", "cls"), {
    "version": 0, "protocol_type": "consumer", "generation": 3, "protocol": "range",
    "leader": "m1", "current_state_timestamp": 1234,
    "members": [{"member_id": "m1", "group_instance_id": "static-1", "client_id": "c1",
                 "client_host": "/10.0.0.1", "rebalance_timeout_ms": 300000,
                 "session_timeout_ms": 45000, "subscription": _b64(b"\x00\x01sub"),
                 "assignment": _b64(b"\x00\x01asg")},
                {"member_id": "m2", "group_instance_id": None, "client_id": "c2",
                 "client_host": "/10.0.0.2", "rebalance_timeout_ms": 1000,
                 "session_timeout_ms": 6000, "subscription": _b64(b""),
                 "assignment": _b64(b"")}]})
EMPTY_CLASSIC = GroupRecord(("classic", "empty"), {
    "version": 0, "protocol_type": "", "generation": 7, "protocol": None, "leader": None,
    "current_state_timestamp": -1, "members": []})
CONSUMER = GroupRecord(("consumer", "cg"), {
    "group_epoch": 5, "assignment_epoch": 5, "assignor": "range",
    "subscription_metadata": {"t": [str(TID), 3], "u": [str(T2), 1]},
    "resolved_regex": {"u.*": ["u"]}})
MEMBER = GroupRecord(("consumer_member", "cg", "mem-1"), {
    "instance_id": "i1", "rack_id": "r1", "client_id": "c", "client_host": "/h",
    "rebalance_timeout_ms": 5000, "subscribed_topic_names": ["t"],
    "subscribed_topic_regex": "u.*", "server_assignor": "range", "member_epoch": 5,
    "previous_member_epoch": 4, "state": "unrevoked_partitions",
    "assigned": {str(TID): [0, 1]}, "pending_revocation": {str(TID): [2]},
    "target": {str(TID): [0, 1], str(T2): [0]},
    "classic": {"session_timeout_ms": 10000, "protocols": [["range", _b64(b"\x00\x03m")]]}})
SHARE = GroupRecord(("share", "sg"), {
    "group_epoch": 2, "assignment_epoch": 2, "subscription_metadata": {"t": [str(TID), 3]}})
SHARE_MEMBER = GroupRecord(("share_member", "sg", "sm"), {
    "rack_id": None, "client_id": "sc", "client_host": "/s", "subscribed_topic_names": ["t"],
    "member_epoch": 2, "previous_member_epoch": 1, "assigned": {str(TID): [0, 1, 2]},
    "target": {str(TID): [0, 1, 2]}})
OFFSET = GroupRecord(("offset", "cls", "t", 1), {
    "offset": 42, "leader_epoch": 3, "metadata": "meta", "commit_timestamp_ms": 99, "seq": 1})
TXN_OFFSET = GroupRecord(("txn_offset", "cls", 7000, "t", 2), {
    "offset": 43, "leader_epoch": -1, "metadata": "", "commit_timestamp_ms": 100, "seq": 2,
    "producer_epoch": 4})
ALL = [CLASSIC, EMPTY_CLASSIC, CONSUMER, MEMBER, SHARE, SHARE_MEMBER, OFFSET, TXN_OFFSET]


def _through_bytes(records: list[GroupRecord]) -> tuple[list, list[GroupRecord]]:
    """Write ``records`` as Kafka's record bytes and replay those into a fresh mapper."""
    writes, owned = GroupRecordMapper().translate(records)
    replayer = GroupRecordMapper()
    out: list[GroupRecord] = []
    for key, value, producer in writes:
        kb, vb = KAFKA_SERDE.serialize(key, value)
        assert KAFKA_SERDE.recognizes(kb) and not kb.startswith(b"[")
        fact = KAFKA_SERDE.deserialize(kb, vb)
        assert fact is not None
        pid, epoch = producer if producer else (-1, -1)
        out.extend(replayer.replay(fact[0], fact[1], pid, epoch))
    out.extend(replayer.finish())
    return writes, out


def _latest(records: list[GroupRecord]) -> dict[tuple, dict | None]:
    out: dict[tuple, dict | None] = {}
    for gr in records:
        out[gr.key] = gr.value
    return out


@pytest.mark.parametrize("record", ALL, ids=lambda r: r.key[0])
def test_every_core_record_survives_kafkas_format(record):
    # A consumer group's assignor is not stored: replay derives it from its members.
    _writes, replayed = _through_bytes([record, MEMBER] if record is CONSUMER else [record])
    got = _latest(replayed)[record.key]
    if record.key[0] in ("offset", "txn_offset"):  # seq: renumbered in log order on replay
        assert got.pop("seq") >= 1
        assert got == {k: v for k, v in record.value.items() if k != "seq"}
    else:
        assert got == record.value


def test_replay_numbers_offsets_in_log_order_after_legacy_ones():
    m = GroupRecordMapper()
    m.note_seq(500)  # the last JSON offset record replayed before
    (gr,) = m.replay(*_fact(OFFSET))
    (gr2,) = m.replay(*_fact(TXN_OFFSET), 7000, 4)
    assert (gr.value["seq"], gr2.value["seq"]) == (501, 502)


def test_the_record_types_and_versions_are_kafka_40s():
    writes, _ = _through_bytes(ALL)
    got = {(k[0], None if v is None else v["version"]) for k, v, _p in writes}
    assert got == {(GROUP_METADATA, 3), (OFFSET_COMMIT, 3)} | {(t, 0) for t in (
        3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16)}
    # the transactional offset goes in its producer's batch; nothing else does
    assert [p for _k, _v, p in writes if p] == [(7000, 4)]


def test_only_changes_are_written_and_dropped_records_are_tombstoned():
    m = GroupRecordMapper()
    writes, owned = m.translate([CONSUMER, MEMBER])
    m.commit(owned)
    assert m.translate([CONSUMER, MEMBER])[0] == []  # steady: nothing to write
    moved = GroupRecord(MEMBER.key, dict(MEMBER.value, member_epoch=6))
    writes, owned = m.translate([moved])
    assert [k[0] for k, _v, _p in writes] == [CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT]
    m.commit(owned)
    no_regex = GroupRecord(CONSUMER.key, dict(CONSUMER.value, resolved_regex={}))
    writes, owned = m.translate([no_regex])
    assert [(k[0], v) for k, v, _p in writes] == [(CONSUMER_GROUP_REGULAR_EXPRESSION, None)]
    m.commit(owned)
    # a member leaving: its three records tombstoned in Kafka's order
    writes, owned = m.translate([GroupRecord(MEMBER.key, None)])
    assert [(k[0], v) for k, v, _p in writes] == [
        (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, None),
        (CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, None), (CONSUMER_GROUP_MEMBER_METADATA, None)]


def test_an_offset_tombstone_is_written_once_and_drops_pending_offsets_on_replay():
    m = GroupRecordMapper()
    delete = [GroupRecord(("offset", "cls", "t", 2), None),
              GroupRecord(("txn_offset", "cls", 7000, "t", 2), None)]
    writes, _ = m.translate(delete)
    assert writes == [((OFFSET_COMMIT, "cls", "t", 2), None, None)]
    r = GroupRecordMapper()
    r.replay(*_fact(TXN_OFFSET), 7000, 4)
    assert r.replay((OFFSET_COMMIT, "cls", "t", 2), None) == [
        GroupRecord(("offset", "cls", "t", 2), None),
        GroupRecord(("txn_offset", "cls", 7000, "t", 2), None)]


def _fact(record: GroupRecord):
    (key, value, _p), = GroupRecordMapper().translate([record])[0]
    return key, value


def test_unknown_and_later_record_types_are_skipped():
    assert KAFKA_SERDE.deserialize(b"\x00\x11\x00\x01g", b"\x00\x00") is None  # streams (17)
    assert KAFKA_SERDE.deserialize(b"\x00\x0f\x00\x01g", b"\x00\x00") is None  # 4.1's type 15


def test_legacy_key_type_0_and_every_offset_value_version_decode():
    from snakka.protocol.internal.group_coordinator import OffsetCommitKey, OffsetCommitValue

    key = b"\x00\x00" + OffsetCommitKey("g", "t", 4).encode(0)
    for version in range(0, 5):
        value = OffsetCommitValue(offset=9, leader_epoch=2 if version >= 3 else -1,
                                  metadata="m", commit_timestamp=5, expire_timestamp=6)
        fact = KAFKA_SERDE.deserialize(key, version.to_bytes(2, "big") + value.encode(version))
        assert fact is not None
        (rtype, group, topic, part), v = fact
        assert (rtype, group, topic, part) == (OFFSET_COMMIT, "g", "t", 4)
        assert (v["message"].offset, v["message"].metadata) == (9, "m")
        (gr,) = GroupRecordMapper().replay(*fact)
        assert gr.key == ("offset", "g", "t", 4) and gr.value["offset"] == 9


# -- Kafka 4.0's own segment --------------------------------------------------------------

def _kafka_segment():
    """(key bytes, value bytes, producer id, producer epoch) of every data record and
    (None, marker, producer id, epoch) of every control marker, in log order."""
    data = SEGMENT.read_bytes()
    for h, pos in iter_batches(data):
        if h.is_control:
            yield None, read_end_txn_marker(data, pos, h), h.producer_id, h.producer_epoch
            continue
        pid = h.producer_id if h.is_transactional else -1
        for rec in batch_records(data, pos, h):
            yield rec.key, rec.value, pid, h.producer_epoch


def test_kafka_40_records_reencode_to_the_same_bytes():
    n = 0
    for key, value, _pid, _epoch in _kafka_segment():
        if key is None:
            continue
        fact = KAFKA_SERDE.deserialize(key, value)
        assert fact is not None
        assert KAFKA_SERDE.serialize(*fact) == (key, value)
        n += 1
    assert n == 34


def test_kafka_40_segment_replays_to_kafkas_groups_and_offsets():
    clock = lambda: 1_000  # noqa: E731
    config = GroupConfig()
    classic = ClassicGroups(config, clock)
    consumer = ConsumerGroups(config, clock, lambda: {"t": (TID, 3)})
    offsets = OffsetStore(config, clock)
    cores = (classic, consumer, offsets)
    mapper = GroupRecordMapper()
    for key, value, pid, epoch in _kafka_segment():
        if key is None:  # the shell's marker replay
            offsets.complete_transaction(pid, value.commit, offsets.pending_groups(pid))
            continue
        fact = KAFKA_SERDE.deserialize(key, value)
        for gr in mapper.replay(fact[0], fact[1], pid, epoch):
            for core in cores:
                core.replay(gr)
    for gr in mapper.finish():
        for core in cores:
            core.replay(gr)
    for core in cores:
        core.loaded()
    for core in cores:
        core.drain_records()

    def committed(group):
        return {p: co.offset for _t, p, co in offsets.fetch(group, None)}

    assert committed("cls") == {0: 10, 1: 11, 2: 12}
    assert committed("kip848") == {0: 20, 1: 21, 2: 22}
    assert committed("rx") == {0: 30, 1: 31, 2: 32}
    assert committed("txg") == {0: 40, 1: 41, 2: 42}  # the aborted 50s are gone
    assert offsets.pending("txg") == {}

    cls = classic.describe("cls")
    assert (cls.state, cls.protocol_type, cls.protocol) == ("Stable", "consumer", "range")
    (m,) = cls.members
    assert m.client_id == "cls-client" and m.member_id.startswith("cls-client-")
    assert m.assignment  # the leader's range assignment, as Kafka stored it

    kip = consumer.describe("kip848")
    assert (kip.group_epoch, kip.assignment_epoch) == (1, 1)
    (km,) = kip.members
    assert (km.member_epoch, km.client_id, km.subscribed_topic_names) == (1, "kip848-client",
                                                                          ["t"])
    assert km.assignment == [(TID, [0, 1, 2])] and km.target_assignment == [(TID, [0, 1, 2])]

    rx = consumer.describe("rx")
    assert (rx.group_epoch, rx.assignment_epoch) == (2, 2)
    (rm,) = rx.members
    assert rm.subscribed_topic_regex == "(^t.*)" and rm.member_epoch == 2
    assert rm.assignment == [(TID, [0, 1, 2])]
    assert mapper.core_value(("consumer", "rx"))["resolved_regex"] == {"(^t.*)": ["t"]}
