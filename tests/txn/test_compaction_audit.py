"""The transaction coordinator's records survive log compaction: ``__transaction_state`` is a
compacted topic.

Each record is keyed by its transactional id and an expired id is removed by a tombstone with
that key, so the log cleaner's output (the latest record per id, tombstones kept until
``delete.retention.ms`` and then removed) loads to the same coordinator state as the whole log.
Checked after every step of the coordinator's randomized model (which includes id expiry,
timeouts, fencing, failovers and epoch exhaustion).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant

from snakka.txn.coordinator import TransactionCoordinator, TxnLogRecord

from .test_coordinator_stateful import CONFIG, TxnMachine, _persisted


def compact(log: list[TxnLogRecord], *, keep_tombstones: bool) -> list[TxnLogRecord]:
    """The latest record per (partition, transactional id), in log order."""
    last = {(r.partition, r.transactional_id): i for i, r in enumerate(log)}
    return [r for i, r in enumerate(log) if last[(r.partition, r.transactional_id)] == i
            and (keep_tombstones or r.value is not None)]


def loaded(machine: TxnMachine, log: list[TxnLogRecord]) -> TransactionCoordinator:
    c = machine._new()  # noqa: SLF001 - the model's factory
    for p in range(CONFIG.transaction_state_log_num_partitions):
        c.load(p, machine.coordinator_epoch, [r for r in log if r.partition == p])
    return c


def state(c: TransactionCoordinator) -> tuple:
    ids = sorted(c.transactional_ids())
    return ids, [_persisted(c.get(t)) for t in ids], c.pending_markers()


class CompactedTxnMachine(TxnMachine):
    @invariant()
    def compacted_log_loads_to_the_same_state(self) -> None:
        for r in self.log:
            assert isinstance(r.transactional_id, str) and r.transactional_id, r
        full = state(loaded(self, self.log))
        assert state(loaded(self, compact(self.log, keep_tombstones=True))) == full
        assert state(loaded(self, compact(self.log, keep_tombstones=False))) == full


TestCompactedTxnCoordinator = CompactedTxnMachine.TestCase
TestCompactedTxnCoordinator.settings = settings(
    max_examples=40, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
