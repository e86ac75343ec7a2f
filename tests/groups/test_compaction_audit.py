"""The group cores' records survive log compaction: ``__consumer_offsets`` is a compacted topic.

The log cleaner keeps only the latest record of every key, and removes tombstones once
``delete.retention.ms`` has passed. That is only safe if every record the cores write is keyed
by exactly what it describes and every deletion is a tombstone with that same key (never an
implicit deletion of other keys). The property that proves it: replaying the compacted log,
with its tombstones or without them, gives the same state as replaying the whole log.
Checked after every step of the cores' randomized models (KIP-848 consumer groups, share groups,
with group deletions added) and on random sequences of offset commits, transactional offsets,
their markers, deletions and expiry; the classic group's one record per group, and a group
deleted after its offsets, too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from snakka.groups.classic import ClassicGroups
from snakka.groups.consumer import ConsumerGroups
from snakka.groups.offsets import OffsetStore
from snakka.groups.share_group import ShareGroups
from snakka.groups.types import GroupConfig, GroupRecord

from .test_consumer import ConsumerGroupMachine
from .test_share_groups import ShareGroupMachine


def compact(log: Sequence[GroupRecord], *, keep_tombstones: bool) -> list[GroupRecord]:
    """What the log cleaner leaves of ``log``: the latest record of every key, in log order;
    tombstones too until ``delete.retention.ms`` has passed (``keep_tombstones``)."""
    last = {r.key: i for i, r in enumerate(log)}
    return [r for i, r in enumerate(log)
            if last[r.key] == i and (keep_tombstones or r.value is not None)]


def check_keyed(log: Sequence[GroupRecord]) -> None:
    """Every record is keyed by (kind, group id, ...), as CoordinatorLog stores it (JSON)."""
    for r in log:
        assert isinstance(r.key, tuple) and len(r.key) >= 2, r
        assert isinstance(r.key[0], str) and isinstance(r.key[1], str), r
        assert json.loads(json.dumps(list(r.key))) == list(r.key), r


def check_compaction_safe(log: Sequence[GroupRecord], fresh: Callable[[], object],
                          state: Callable[[object], object]) -> None:
    """Replaying the compacted log (with and without tombstones) gives the full replay's
    state."""
    check_keyed(log)

    def replayed(records: Sequence[GroupRecord]) -> object:
        core = fresh()
        for r in records:
            core.replay(r)  # type: ignore[attr-defined]
        core.loaded()  # type: ignore[attr-defined]
        return state(core)

    full = replayed(log)
    assert replayed(compact(log, keep_tombstones=True)) == full
    assert replayed(compact(log, keep_tombstones=False)) == full


# -- KIP-848 consumer groups ---------------------------------------------------------------
def consumer_state(cg: ConsumerGroups) -> dict:
    return {g: (state, cg.describe(g)) for g, state in cg.list_groups()}


class CompactedConsumerGroupMachine(ConsumerGroupMachine):
    """The consumer-group model, plus deletions of the (empty) group, plus the property."""

    # Only once every client is gone: a live member heartbeating a deleted group would get
    # GROUP_ID_NOT_FOUND (fatal to Kafka's clients) — not what this model is about.
    @precondition(lambda self: not self.clients)
    @rule()
    def delete_group(self):
        self.w.cg.delete("g")  # NON_EMPTY_GROUP while crashed members remain: nothing written
        self.w.drain()
        self.group_epoch = 0  # a new group may start again from epoch 1
        self.member_epochs.clear()

    @invariant()
    def compacted_log_replays_to_the_same_state(self):
        w = self.w
        w.drain()
        check_compaction_safe(
            w.log, lambda: ConsumerGroups(w.config, w.clock, lambda: dict(w.topics)),
            consumer_state)


TestCompactedConsumerGroups = CompactedConsumerGroupMachine.TestCase
TestCompactedConsumerGroups.settings = settings(
    max_examples=15, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])


# -- share groups (their membership lives in __consumer_offsets too) -----------------------
def share_state(sg: ShareGroups) -> dict:
    return {g: (state, sg.describe(g)) for g, state in sg.list_groups()}


class CompactedShareGroupMachine(ShareGroupMachine):
    @rule()
    def delete_group(self):
        self.w.sg.delete("g")
        self.w.drain()

    @invariant()
    def compacted_log_replays_to_the_same_state(self):
        w = self.w
        check_compaction_safe(w.log, w._new, share_state)  # noqa: SLF001 - the world's factory


TestCompactedShareGroups = CompactedShareGroupMachine.TestCase
TestCompactedShareGroups.settings = settings(
    max_examples=15, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])


# -- committed and pending transactional offsets -------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def offsets_state(s: OffsetStore) -> dict:
    return {g: (s.fetch(g, None), s.pending(g)) for g in sorted(s.groups())}


GROUPS = st.sampled_from(["g1", "g2"])
TPS = st.lists(st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 2)), min_size=1,
               max_size=3, unique=True)
PIDS = st.sampled_from([7, 8])
OPS = st.one_of(
    st.tuples(st.just("commit"), GROUPS, TPS, st.integers(0, 1000)),
    st.tuples(st.just("txn_commit"), GROUPS, TPS, st.integers(0, 1000), PIDS),
    st.tuples(st.just("marker"), PIDS, st.booleans()),
    st.tuples(st.just("delete"), GROUPS, TPS),
    st.tuples(st.just("delete_group"), GROUPS),
    st.tuples(st.just("delete_topic"), st.sampled_from(["t", "u"])),
    st.tuples(st.just("time"), st.sampled_from([1, 60_000, 8 * 86_400_000])),
    st.tuples(st.just("expire"), st.booleans()),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, max_size=40))
def test_offset_records_survive_compaction(ops):
    clock = Clock()
    config = GroupConfig(offsets_retention_minutes=7 * 24 * 60)
    s = OffsetStore(config, clock)
    log: list[GroupRecord] = []
    for op in ops:
        kind = op[0]
        if kind == "commit":
            _, g, tps, off = op
            s.commit(g, [(t, p, off + i, -1, f"m{off}") for i, (t, p) in enumerate(tps)])
        elif kind == "txn_commit":
            _, g, tps, off, pid = op
            s.commit_transactional(g, pid, 0, [(t, p, off, -1, None) for t, p in tps])
        elif kind == "marker":
            s.complete_transaction(op[1], op[2])
        elif kind == "delete":
            s.delete(op[1], op[2])
        elif kind == "delete_group":
            s.delete_group(op[1])
        elif kind == "delete_topic":
            s.delete_topic(op[1])
        elif kind == "time":
            clock.now += op[1]
        else:
            s.expire(lambda g, active=op[1]: active and g == "g1")
        log.extend(s.drain_records())
        # Kafka's rule the cleaner relies on: a deletion is a tombstone of a key written before.
        written = {r.key for r in log if r.value is not None}
        assert all(r.key in written for r in log if r.value is None)
    check_compaction_safe(log, lambda: OffsetStore(config, clock), offsets_state)
    assert offsets_state(s) == offsets_state(_replay(OffsetStore(config, clock), log))


def _replay(core, log):
    for r in log:
        core.replay(r)
    core.loaded()
    return core


# -- classic groups: one record per group, deleted by its tombstone ------------------------
def test_a_deleted_classic_group_leaves_nothing_after_compaction():
    clock = Clock()
    config = GroupConfig()
    log = [
        GroupRecord(("classic", "g"), {"generation": 1, "protocol_type": "consumer",
                                       "protocol": "range", "leader": None, "members": [],
                                       "current_state_timestamp": 5}),
        GroupRecord(("classic", "keep"), {"generation": 3, "protocol_type": "consumer",
                                          "protocol": "", "leader": None, "members": [],
                                          "current_state_timestamp": 6}),
    ]
    core = _replay(ClassicGroups(config, clock), log)
    assert core.delete("g") == 0
    log += core.drain_records()
    assert log[-1] == GroupRecord(("classic", "g"), None)

    def state(c):
        return {g: c.describe(g) for g, *_ in c.list_groups()}

    check_compaction_safe(log, lambda: ClassicGroups(config, clock), state)
    assert list(state(_replay(ClassicGroups(config, clock),
                              compact(log, keep_tombstones=False)))) == ["keep"]
