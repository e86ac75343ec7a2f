"""OffsetStore's pending transactional offsets (issue 11 item 3): invisible until the COMMIT
marker, dropped by ABORT, Kafka's precedence against plain commits, records that survive a
restart (in any order a snapshot restates them), idempotent repeated markers, deletions."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from snakka.groups.offsets import KIND, TXN_KIND, OffsetStore
from snakka.groups.types import GroupConfig, GroupRecord
from snakka.protocol.errors import ErrorCode


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def committed(s: OffsetStore, group: str = "g") -> dict:
    return {(t, p): co.offset for t, p, co in s.fetch(group, None)}


def restarted(records: list[GroupRecord], shuffle: random.Random | None = None) -> OffsetStore:
    """A store rebuilt from the latest record of every key, as the shell's replay (or, with
    ``shuffle``, as a snapshot that restates the live keys in another order) gives it."""
    latest: dict[tuple, GroupRecord] = {}
    for r in records:
        latest[r.key] = r
    live = [r for r in latest.values() if r.value is not None]
    if shuffle is not None:
        shuffle.shuffle(live)
    s = OffsetStore(GroupConfig(), Clock())
    for r in live:
        s.replay(r)
    s.loaded()
    return s


def test_pending_invisible_until_commit_marker():
    s = OffsetStore(GroupConfig(), Clock())
    assert s.commit_transactional("g", 7, 0, [("t", 0, 10, -1, "m"), ("t", 1, 20, 3, None)]) \
        == [0, 0]
    assert committed(s) == {}
    assert s.fetch("g", [("t", 0)]) == [("t", 0, None)]
    assert s.has_pending("g", "t", 0) and s.has_pending("g", "t", 1)
    assert not s.has_pending("g", "t", 2) and not s.has_pending("other", "t", 0)
    assert s.has_offsets("g") and s.groups() == {"g"}  # a group for the group APIs (Kafka)
    assert s.complete_transaction(7, commit=True) == 2
    assert committed(s) == {("t", 0): 10, ("t", 1): 20}
    co = dict(((t, p), co) for t, p, co in s.fetch("g", None))[("t", 1)]
    assert (co.leader_epoch, co.metadata) == (3, "")
    assert not s.has_pending("g", "t", 0) and s.pending("g") == {}


def test_abort_drops_pending_and_keeps_committed():
    s = OffsetStore(GroupConfig(), Clock())
    s.commit("g", [("t", 0, 5, -1, "")])
    s.commit_transactional("g", 7, 0, [("t", 0, 10, -1, ""), ("t", 1, 11, -1, "")])
    assert s.complete_transaction(7, commit=False) == 2
    assert committed(s) == {("t", 0): 5}
    assert not s.has_pending("g", "t", 0)
    # A pending-only group that aborts is gone.
    s.commit_transactional("h", 8, 0, [("t", 0, 1, -1, "")])
    s.complete_transaction(8, commit=False)
    assert not s.has_offsets("h") and s.groups() == {"g"}


def test_later_write_wins_as_in_kafka():
    """replayEndTransactionMarker keeps whichever of the pending and the committed offset was
    written last."""
    s = OffsetStore(GroupConfig(), Clock())
    s.commit("g", [("t", 0, 1, -1, ""), ("t", 1, 1, -1, "")])  # before the transaction
    s.commit_transactional("g", 7, 0, [("t", 0, 10, -1, ""), ("t", 1, 10, -1, "")])
    s.commit("g", [("t", 1, 50, -1, "")])  # a plain commit made meanwhile
    s.complete_transaction(7, commit=True)
    assert committed(s) == {("t", 0): 10, ("t", 1): 50}


def test_marker_only_for_its_producer_and_groups():
    s = OffsetStore(GroupConfig(), Clock())
    s.commit_transactional("a", 7, 0, [("t", 0, 1, -1, "")])
    s.commit_transactional("b", 7, 0, [("t", 0, 2, -1, "")])
    s.commit_transactional("a", 9, 0, [("t", 1, 3, -1, "")])
    assert s.pending_groups(7) == {"a", "b"}
    assert s.complete_transaction(7, commit=True, group_ids=["a"]) == 1
    assert committed(s, "a") == {("t", 0): 1} and committed(s, "b") == {}
    assert s.has_pending("b", "t", 0) and s.has_pending("a", "t", 1)
    assert s.complete_transaction(7, commit=True, group_ids=["a"]) == 0  # repeated: no-op
    assert s.drain_records()[-1].key[0] == KIND  # nothing written by the repeat


def test_same_partition_twice_in_a_transaction_keeps_the_last():
    s = OffsetStore(GroupConfig(), Clock())
    s.commit_transactional("g", 7, 0, [("t", 0, 1, -1, "")])
    s.commit_transactional("g", 7, 0, [("t", 0, 2, -1, "")])
    s.complete_transaction(7, commit=True)
    assert committed(s) == {("t", 0): 2}


def test_metadata_bound_applies_to_transactional_commits():
    s = OffsetStore(GroupConfig(offset_metadata_max_bytes=4), Clock())
    assert s.commit_transactional("g", 7, 0, [("t", 0, 1, -1, "12345"), ("t", 1, 1, -1, "1")]) \
        == [ErrorCode.OFFSET_METADATA_TOO_LARGE, ErrorCode.NONE]
    assert not s.has_pending("g", "t", 0) and s.has_pending("g", "t", 1)


def test_records_and_restart_then_marker():
    clock = Clock()
    s = OffsetStore(GroupConfig(), clock)
    s.commit("g", [("t", 0, 1, -1, "")])
    s.commit_transactional("g", 7, 2, [("t", 0, 10, -1, "x"), ("t", 1, 11, -1, "")])
    records = s.drain_records()
    assert [r.key for r in records] == [(KIND, "g", "t", 0), (TXN_KIND, "g", 7, "t", 0),
                                        (TXN_KIND, "g", 7, "t", 1)]
    assert records[1].value["producer_epoch"] == 2
    again = restarted(records)
    assert committed(again) == {("t", 0): 1} and again.has_pending("g", "t", 1)
    assert again.complete_transaction(7, commit=True) == 2
    out = again.drain_records()
    # The marker: tombstones of the pending keys and the offsets it materialises, one append.
    assert {r.key for r in out if r.value is None} == {(TXN_KIND, "g", 7, "t", 0),
                                                       (TXN_KIND, "g", 7, "t", 1)}
    assert committed(again) == {("t", 0): 10, ("t", 1): 11}
    third = restarted(records + out)
    assert committed(third) == {("t", 0): 10, ("t", 1): 11} and third.pending("g") == {}
    assert third.complete_transaction(7, commit=True) == 0  # the marker again after a restart
    assert third.drain_records() == []


def test_precedence_survives_a_reordering_snapshot():
    """The snapshot restates keys in its own order: precedence must not depend on it."""
    s = OffsetStore(GroupConfig(), Clock())
    s.commit("g", [("t", 0, 1, -1, "")])
    s.commit_transactional("g", 7, 0, [("t", 0, 10, -1, "")])
    s.commit("g", [("t", 0, 50, -1, "")])  # after the TxnOffsetCommit: must win
    records = s.drain_records()
    for seed in range(5):
        again = restarted(records, random.Random(seed))
        again.complete_transaction(7, commit=True)
        assert committed(again) == {("t", 0): 50}
        # and a transaction after that plain commit wins over it
        again.commit_transactional("g", 8, 0, [("t", 0, 60, -1, "")])
        again.complete_transaction(8, commit=True)
        assert committed(again) == {("t", 0): 60}


def test_records_written_before_transactions_replay():
    """Offset records of older snakka versions carry no ``seq``: they are older than any
    transactional offset."""
    s = OffsetStore(GroupConfig(), Clock())
    s.replay(GroupRecord((KIND, "g", "t", 0), {"offset": 3, "leader_epoch": -1, "metadata": "",
                                               "commit_timestamp_ms": 1}))
    s.commit_transactional("g", 7, 0, [("t", 0, 9, -1, "")])
    s.complete_transaction(7, commit=True)
    assert committed(s) == {("t", 0): 9}


def test_deletions_drop_pending_offsets():
    s = OffsetStore(GroupConfig(), Clock())
    s.commit("g", [("t", 0, 1, -1, "")])
    s.commit_transactional("g", 7, 0, [("t", 0, 10, -1, ""), ("t", 1, 11, -1, ""),
                                       ("u", 0, 12, -1, "")])
    s.commit_transactional("g", 8, 0, [("t", 1, 13, -1, "")])
    s.delete("g", [("t", 1)])  # OffsetDelete: committed and pending of that partition
    assert not s.has_pending("g", "t", 1) and s.has_pending("g", "t", 0)
    assert s.pending_groups(8) == set()
    s.delete_topic("u")
    assert not s.has_pending("g", "u", 0)
    s.delete_group("g")
    assert not s.has_offsets("g") and s.pending("g") == {}
    # and none of it comes back: not with the marker, not after a restart
    assert s.complete_transaction(7, commit=True) == 0
    assert committed(s) == {}
    assert restarted(s.drain_records()).groups() == set()


def test_expiry_spares_partitions_with_pending_offsets():
    clock = Clock()
    s = OffsetStore(GroupConfig(offsets_retention_minutes=1), clock)
    s.commit("g", [("t", 0, 1, -1, ""), ("t", 1, 1, -1, "")])
    s.commit_transactional("g", 7, 0, [("t", 0, 5, -1, "")])
    clock.now += 60_000
    assert s.expire(lambda g: False) == 1
    assert committed(s) == {("t", 0): 1}
    assert s.has_offsets("g")


# -- a model check ------------------------------------------------------------------------

GROUPS = ("a", "b")
TPS = (("t", 0), ("t", 1), ("u", 0))
PIDS = (7, 8)

ops = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.sampled_from(TPS)),
    st.tuples(st.just("txn"), st.sampled_from(GROUPS), st.sampled_from(TPS),
              st.sampled_from(PIDS)),
    st.tuples(st.just("marker"), st.sampled_from(PIDS), st.booleans(),
              st.sampled_from((None, ("a",), ("b",)))),
    st.tuples(st.just("delete"), st.sampled_from(GROUPS), st.sampled_from(TPS)),
    st.tuples(st.just("delete_group"), st.sampled_from(GROUPS)),
    st.tuples(st.just("delete_topic"), st.sampled_from(("t", "u"))),
    st.tuples(st.just("restart"), st.integers(0, 3)),
), max_size=40)


def _deleted(step: tuple, group: str, tp: tuple[str, int]) -> bool:
    kind = step[0]
    if kind == "delete":
        return (group, tp) == (step[1], step[2])
    if kind == "delete_group":
        return group == step[1]
    return tp[0] == step[1]


@settings(max_examples=300, deadline=None)
@given(ops)
def test_matches_a_model_across_restarts(steps):
    """Against a model with Kafka's rules (the later write wins at COMMIT; deletions drop the
    pending offsets too), with restarts that replay the latest record of every key in a
    shuffled order (as a snapshot may)."""
    s = OffsetStore(GroupConfig(), Clock())
    log: list[GroupRecord] = []
    model_committed: dict[tuple, tuple[int, int]] = {}  # (g, tp) -> (offset, write time)
    model_pending: dict[tuple, tuple[int, int]] = {}  # (pid, g, tp) -> (offset, write time)
    t = 0
    for step in steps:
        t += 1
        kind = step[0]
        if kind == "commit":
            _, g, tp = step
            s.commit(g, [(*tp, t, -1, "")])
            model_committed[(g, tp)] = (t, t)
        elif kind == "txn":
            _, g, tp, pid = step
            s.commit_transactional(g, pid, 0, [(*tp, t, -1, "")])
            model_pending[(pid, g, tp)] = (t, t)
        elif kind == "marker":
            _, pid, commit, groups = step
            s.complete_transaction(pid, commit, groups)
            for key in sorted(k for k in model_pending if k[0] == pid
                              and (groups is None or k[1] in groups)):
                off, when = model_pending.pop(key)
                _, g, tp = key
                cur = model_committed.get((g, tp))
                if commit and (cur is None or when > cur[1]):
                    model_committed[(g, tp)] = (off, when)
        elif kind in ("delete", "delete_group", "delete_topic"):
            if kind == "delete":
                s.delete(step[1], [step[2]])
            elif kind == "delete_group":
                s.delete_group(step[1])
            else:
                s.delete_topic(step[1])
            model_committed = {k: v for k, v in model_committed.items()
                               if not _deleted(step, *k)}
            model_pending = {k: v for k, v in model_pending.items()
                             if not _deleted(step, k[1], k[2])}
        else:
            log += s.drain_records()
            s = restarted(log, random.Random(step[1]))
        for g in GROUPS:
            assert committed(s, g) == {tp: v[0] for (g2, tp), v in model_committed.items()
                                       if g2 == g}
            for tp in TPS:
                assert s.has_pending(g, *tp) == any(k[1:] == (g, tp) for k in model_pending)
            assert s.has_offsets(g) == (any(k[0] == g for k in model_committed)
                                        or any(k[1] == g for k in model_pending))
