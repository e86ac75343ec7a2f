"""Random operation sequences against the transaction coordinator core: no sequence reaches an
illegal transition (IllegalTransitionError would fail the run), every answer is one of Kafka's
codes for that operation, the state's shape invariants hold, and replaying the emitted
``__transaction_state`` records (as a new coordinator would on failover) rebuilds an equal state
with the same pending markers."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from snakka.protocol.errors import ErrorCode
from snakka.txn.coordinator import (
    SHORT_MAX,
    TransactionCoordinator,
    TransactionMetadata,
    TxnConfig,
    TxnLogRecord,
    TxnMarker,
    TxnState,
)

E = ErrorCode
IDS = ["a", "b"]
TPS = [("t", 0), ("t", 1), ("u", 0)]
CONFIG = TxnConfig(transaction_max_timeout_ms=50_000, transactional_id_expiration_ms=200_000,
                   transaction_state_log_num_partitions=3, offsets_topic_num_partitions=5)

INIT_ERRORS = {E.NONE, E.CONCURRENT_TRANSACTIONS, E.PRODUCER_FENCED,
               E.INVALID_TRANSACTION_TIMEOUT}
ADD_ERRORS = {E.NONE, E.CONCURRENT_TRANSACTIONS, E.PRODUCER_FENCED,
              E.INVALID_PRODUCER_ID_MAPPING}
END_ERRORS = ADD_ERRORS | {E.INVALID_TXN_STATE}
# Mostly the producer's current id and epoch, sometimes a stale one.
STALE = st.sampled_from([False, False, False, True])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def _persisted(m: TransactionMetadata) -> dict[str, object]:
    d = dataclasses.asdict(m)
    del d["last_producer_epoch"]
    return d


class TxnMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.ids = itertools.count(100)
        self.coordinator_epoch = 1
        self.coord = self._new()
        self.log: list[TxnLogRecord] = []
        # What each transactional id's producer last heard: (producer id, epoch), and its
        # transaction version (fixed per producer, as in a real client).
        self.creds: dict[str, tuple[int, int]] = {}
        self.tv: dict[str, int] = {}
        self.markers: dict[str, tuple[TxnMarker, ...]] = {}
        self._load_all(self.coord)

    def _new(self) -> TransactionCoordinator:
        c = TransactionCoordinator(CONFIG, self.clock, lambda: next(self.ids))
        return c

    def _load_all(self, c: TransactionCoordinator) -> None:
        for p in range(CONFIG.transaction_state_log_num_partitions):
            c.load(p, self.coordinator_epoch, [r for r in self.log if r.partition == p])

    def _creds(self, tid: str, stale: bool) -> tuple[int, int]:
        pid, epoch = self.creds.get(tid, (999, 0))
        return (pid, epoch - 1) if stale else (pid, epoch)

    @rule(tid=st.sampled_from(IDS), timeout=st.sampled_from([10_000, 50_000, 10_000, 0, 50_001]),
          recover=st.booleans(), tv=st.sampled_from([0, 2]))
    def init(self, tid: str, timeout: int, recover: bool, tv: int) -> None:
        pid, epoch = self.creds.get(tid, (-1, -1)) if recover else (-1, -1)
        r = self.coord.init_producer_id(tid, timeout, pid, epoch)
        assert r.error in INIT_ERRORS, r
        self.log.extend(r.records)
        if r.markers:
            self.markers[tid] = r.markers
        if r.error == E.NONE:
            assert 0 <= r.producer_epoch <= SHORT_MAX
            if tid in self.creds and self.creds[tid][0] != r.producer_id:
                event("InitProducerId rotated the producer id")
            self.creds[tid] = (r.producer_id, r.producer_epoch)
            self.tv[tid] = tv

    @rule(tid=st.sampled_from(IDS), tps=st.lists(st.sampled_from(TPS), min_size=0, max_size=3),
          stale=STALE)
    def add(self, tid: str, tps: list[tuple[str, int]], stale: bool) -> None:
        pid, epoch = self._creds(tid, stale)
        r = self.coord.add_partitions(tid, pid, epoch, tps, self.tv.get(tid, 0))
        assert r.error in ADD_ERRORS, r
        self.log.extend(r.records)
        if r.error == E.NONE and tps:
            m = self.coord.get(tid)
            assert m is not None and m.state == TxnState.ONGOING and set(tps) <= m.partitions
            err, per = self.coord.verify_partitions(tid, pid, epoch, tps)
            assert err == E.NONE and set(per.values()) == {E.NONE}

    @rule(tid=st.sampled_from(IDS), group=st.sampled_from(["g1", "g2"]), stale=STALE)
    def add_offsets(self, tid: str, group: str, stale: bool) -> None:
        pid, epoch = self._creds(tid, stale)
        r = self.coord.add_offsets(tid, pid, epoch, group, self.tv.get(tid, 0))
        assert r.error in ADD_ERRORS, r
        self.log.extend(r.records)

    @rule(tid=st.sampled_from(IDS), commit=st.booleans(), stale=STALE)
    def end(self, tid: str, commit: bool, stale: bool) -> None:
        pid, epoch = self._creds(tid, stale)
        tv = self.tv.get(tid, 0)
        r = self.coord.end_txn(tid, pid, epoch, commit, tv)
        assert r.error in END_ERRORS, r
        self.log.extend(r.records)
        if r.markers:
            self.markers[tid] = r.markers
            assert all(mk.commit == commit for mk in r.markers)
        if r.error == E.NONE and tv >= 2:
            if self.creds[tid][0] != r.producer_id:
                event("TV2 EndTxn moved to the next producer id")
            self.creds[tid] = (r.producer_id, r.producer_epoch)
        event(f"EndTxn {r.error.name}" + (" with markers" if r.markers else ""))

    @rule(tid=st.sampled_from(IDS))
    def complete(self, tid: str) -> None:
        self.log.extend(self.coord.complete_markers(tid))
        m = self.coord.get(tid)
        assert m is None or m.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @rule(ms=st.sampled_from([1, 5_000, 20_000, 60_000, 250_000]))
    def tick(self, ms: int) -> None:
        self.clock.now += ms
        t = self.coord.on_timer()
        self.log.extend(t.records)
        if t.aborted:
            event("a timed-out transaction was aborted")
        if t.expired:
            event("a transactional id expired")
        for tid in t.aborted:
            m = self.coord.get(tid)
            assert m is not None and m.state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
        for tid in t.expired:
            assert self.coord.get(tid) is None

    @rule(tid=st.sampled_from(IDS))
    def worn_out(self, tid: str) -> None:
        """Jump to a producer re-initialised ~32,760 times, to reach the epoch-overflow paths
        (id rotation in InitProducerId, TV2's next producer id, a fence at Short.MaxValue).
        The jump is written to the log like any transition, so replay still sees it."""
        m = self.coord.get(tid)
        if m is None or m.state not in (TxnState.EMPTY, TxnState.ONGOING) \
                or m.producer_epoch >= SHORT_MAX - 3 or self.creds.get(tid, (0, 0))[0] != m.producer_id:
            return
        m.producer_epoch = SHORT_MAX - 3
        self.creds[tid] = (m.producer_id, m.producer_epoch)
        self.log.append(self.coord._record(m))  # noqa: SLF001 - a test-only jump

    @rule()
    def failover(self) -> None:
        """The coordinator moves: a new one loads the log at a higher coordinator epoch."""
        self.coordinator_epoch += 1
        self.coord = self._new()
        self._load_all(self.coord)

    @invariant()
    def shape(self) -> None:
        for tid in self.coord.transactional_ids():
            m = self.coord.get(tid)
            assert m is not None
            assert m.state not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE)
            assert -1 <= m.producer_epoch <= SHORT_MAX
            if m.state == TxnState.ONGOING:
                assert m.partitions and m.txn_start_timestamp_ms >= 0
            if m.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                assert not m.partitions

    @invariant()
    def replay_rebuilds_equal_state(self) -> None:
        fresh = self._new()
        self._load_all(fresh)
        assert fresh.transactional_ids() == self.coord.transactional_ids()
        for tid in fresh.transactional_ids():
            a, b = fresh.get(tid), self.coord.get(tid)
            assert a is not None and b is not None
            assert a.to_log_value() == b.to_log_value()
            # The whole in-memory state but the last epoch (Kafka does not store it either).
            assert _persisted(a) == _persisted(b)
        assert fresh.pending_markers() == self.coord.pending_markers()


TxnMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestTxnCoordinatorStateful = TxnMachine.TestCase
