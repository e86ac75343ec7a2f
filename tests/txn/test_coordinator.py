"""The sans-I/O transaction coordinator (snakka.txn.coordinator): every transition, every error
code, timers, the __transaction_state records and their replay."""

from __future__ import annotations

import itertools
import json
import pathlib

import pytest

from snakka.groups.partitioning import offsets_partition
from snakka.protocol.errors import ErrorCode
from snakka.txn.coordinator import (
    SHORT_MAX,
    VALID_PREVIOUS_STATES,
    IllegalTransitionError,
    TransactionCoordinator,
    TransactionMetadata,
    TxnConfig,
    TxnLogRecord,
    TxnMarker,
    TxnState,
    error_for_version,
    partition_for,
    value_from_dict,
    value_to_dict,
)

TID = "my-txn"
T0 = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


class Harness:
    """A coordinator with every partition loaded, its log and an id allocator."""

    def __init__(self, config: TxnConfig | None = None) -> None:
        self.config = config or TxnConfig()
        self.clock = Clock()
        self.ids = itertools.count(1000)
        self.coord = TransactionCoordinator(self.config, self.clock, lambda: next(self.ids))
        for p in range(self.config.transaction_state_log_num_partitions):
            self.coord.load(p, 7, [])
        self.log: list[TxnLogRecord] = []

    def keep(self, records: tuple[TxnLogRecord, ...]) -> None:
        self.log.extend(records)

    def init(self, timeout: int = 60_000, pid: int = -1, epoch: int = -1):  # noqa: ANN201
        r = self.coord.init_producer_id(TID, timeout, pid, epoch)
        self.keep(r.records)
        return r

    def add(self, pid: int, epoch: int, *tps: tuple[str, int], tv: int = 0):  # noqa: ANN201
        r = self.coord.add_partitions(TID, pid, epoch, tps or [("t", 0)], tv)
        self.keep(r.records)
        return r

    def end(self, pid: int, epoch: int, commit: bool, tv: int = 0):  # noqa: ANN201
        r = self.coord.end_txn(TID, pid, epoch, commit, tv)
        self.keep(r.records)
        return r

    def complete(self, tid: str = TID) -> None:
        self.keep(self.coord.complete_markers(tid))

    def state(self, tid: str = TID) -> TxnState:
        m = self.coord.get(tid)
        assert m is not None
        return m.state

    def replayed(self) -> TransactionCoordinator:
        fresh = TransactionCoordinator(self.config, self.clock, lambda: next(self.ids))
        for p in range(self.config.transaction_state_log_num_partitions):
            fresh.load(p, 8, [r for r in self.log if r.partition == p])
        return fresh


def snapshot(c: TransactionCoordinator) -> dict[str, object]:
    out: dict[str, object] = {}
    for tid in c.transactional_ids():
        m = c.get(tid)
        assert m is not None
        out[tid] = m.to_log_value()
    return out


# -- partitioning and configs ---------------------------------------------------------------

def test_partition_for_is_kafkas_hash_rule() -> None:
    # Same rule as __consumer_offsets: Utils.abs(String.hashCode) % partitions.
    for tid in ["", "a", "my-txn", "tx-\u00e9\u4e2d", "polygenelubricants"]:
        assert partition_for(tid, 50) == offsets_partition(tid, 50)
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: Kafka's abs maps it to 0.
    assert partition_for("polygenelubricants", 7) == 0


def test_broker_configs_have_kafka_defaults() -> None:
    import dataclasses

    from snakka.config import BROKER_CONFIGS

    assert BROKER_CONFIGS["transaction.max.timeout.ms"].default == "900000"
    assert BROKER_CONFIGS["transactional.id.expiration.ms"].default == "604800000"
    assert BROKER_CONFIGS["transaction.state.log.num.partitions"].default == "50"
    assert BROKER_CONFIGS[
        "transaction.abort.timed.out.transaction.cleanup.interval.ms"].default == "10000"
    assert BROKER_CONFIGS[
        "transaction.remove.expired.transaction.cleanup.interval.ms"].default == "3600000"
    # Every TxnConfig field is a broker config of the same name with the same default.
    for f in dataclasses.fields(TxnConfig):
        name = f.name.replace("_", ".")
        assert int(BROKER_CONFIGS[name].default) == f.default, name


def test_transition_table_is_enforced() -> None:
    for new, allowed in VALID_PREVIOUS_STATES.items():
        for old in TxnState:
            m = TransactionMetadata("x", 1, 0, 1000, old, 0)
            if old in allowed:
                m.transition(new)
                assert m.state == new
            else:
                with pytest.raises(IllegalTransitionError):
                    m.transition(new)


# -- InitProducerId -------------------------------------------------------------------------

def test_init_new_id_allocates_and_starts_at_epoch_0() -> None:
    h = Harness()
    r = h.init()
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, 1000, 0)
    assert h.state() == TxnState.EMPTY
    (rec,) = r.records
    assert rec.transactional_id == TID and rec.partition == partition_for(TID, 50)
    assert rec.value is not None and rec.value.transaction_status == 0
    assert rec.value.producer_id == 1000 and rec.value.producer_epoch == 0
    assert rec.value.transaction_timeout_ms == 60_000


def test_init_again_bumps_epoch_keeps_id() -> None:
    h = Harness()
    h.init()
    r = h.init(timeout=30_000)
    assert (r.producer_id, r.producer_epoch) == (1000, 1)
    m = h.coord.get(TID)
    assert m is not None and m.txn_timeout_ms == 30_000


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_init_invalid_timeout(timeout: int) -> None:
    h = Harness()
    assert h.init(timeout=timeout).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.coord.get(TID) is None
    assert h.init(timeout=900_000).error == ErrorCode.NONE


def test_init_empty_id_and_not_coordinator() -> None:
    h = Harness()
    assert h.coord.init_producer_id("", 1000).error == ErrorCode.INVALID_REQUEST
    assert h.coord.add_partitions("", 1, 0, [("t", 0)]).error == ErrorCode.INVALID_REQUEST
    assert h.coord.verify_partitions("", 1, 0, [("t", 0)])[0] == ErrorCode.INVALID_REQUEST
    assert h.coord.end_txn("", 1, 0, True).error == ErrorCode.INVALID_REQUEST
    h.coord.unload(partition_for(TID, 50))
    assert h.init().error == ErrorCode.NOT_COORDINATOR
    assert h.coord.add_partitions(TID, 1, 0, [("t", 0)]).error == ErrorCode.NOT_COORDINATOR
    assert h.coord.end_txn(TID, 1, 0, True).error == ErrorCode.NOT_COORDINATOR


def test_init_fences_ongoing_transaction() -> None:
    h = Harness()
    r = h.init()
    pid, epoch = r.producer_id, r.producer_epoch
    h.add(pid, epoch, ("t", 0), ("t", 1))
    fence = h.init()
    assert fence.error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.state() == TxnState.PREPARE_ABORT
    assert fence.markers == (TxnMarker(("t", 0), pid, epoch + 1, False, 7),
                             TxnMarker(("t", 1), pid, epoch + 1, False, 7))
    (rec,) = fence.records
    assert rec.value is not None and rec.value.transaction_status == TxnState.PREPARE_ABORT
    # The fenced producer is refused from now on.
    assert h.add(pid, epoch).error == ErrorCode.PRODUCER_FENCED
    assert h.end(pid, epoch, True).error == ErrorCode.PRODUCER_FENCED
    # While the abort completes, the new producer keeps retrying.
    assert h.init().error == ErrorCode.CONCURRENT_TRANSACTIONS
    h.complete()
    assert h.state() == TxnState.COMPLETE_ABORT
    r2 = h.init()
    assert (r2.error, r2.producer_id, r2.producer_epoch) == (ErrorCode.NONE, pid, epoch + 2)


def test_init_kip360_expected_epoch() -> None:
    h = Harness()
    r = h.init()
    pid = r.producer_id
    # Recovering producer at the current epoch: bump.
    r = h.init(pid=pid, epoch=0)
    assert (r.error, r.producer_epoch) == (ErrorCode.NONE, 1)
    # Its retry (the answer was lost) sends the old epoch again: same answer, no write.
    n = len(h.log)
    r = h.init(pid=pid, epoch=0)
    assert (r.error, r.producer_epoch, len(h.log)) == (ErrorCode.NONE, 1, n)
    # A stale epoch is fenced; a foreign producer id too.
    assert h.init(pid=pid, epoch=5).error == ErrorCode.PRODUCER_FENCED
    assert h.init(pid=pid + 99, epoch=1).error == ErrorCode.PRODUCER_FENCED


def test_init_rotates_producer_id_when_epoch_exhausted() -> None:
    h = Harness()
    h.init()
    m = h.coord.get(TID)
    assert m is not None
    m.producer_epoch = SHORT_MAX - 1
    # A recovering producer (KIP-360) at the exhausted epoch gets a new producer id.
    r = h.init(pid=1000, epoch=SHORT_MAX - 1)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, 1001, 0)
    assert m.previous_producer_id == 1000
    (rec,) = r.records
    assert rec.value is not None and rec.value.previous_producer_id == 1000
    # Its retry (the answer was lost) finds the new id, without a write.
    r = h.init(pid=1000, epoch=SHORT_MAX - 1)
    assert (r.error, r.producer_id, r.producer_epoch, r.records) == (ErrorCode.NONE, 1001, 0, ())
    # The old id at any other epoch is fenced.
    assert h.init(pid=1000, epoch=5).error == ErrorCode.PRODUCER_FENCED
    # A fresh producer at an exhausted epoch rotates too, and no retry from the old id matches.
    m.producer_epoch = SHORT_MAX - 1
    r = h.init()
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, 1002, 0)
    assert h.init(pid=1001, epoch=SHORT_MAX - 1).error == ErrorCode.PRODUCER_FENCED


def test_init_concurrent_while_prepare() -> None:
    h = Harness()
    r = h.init()
    h.add(r.producer_id, 0)
    h.end(r.producer_id, 0, True)
    assert h.state() == TxnState.PREPARE_COMMIT
    assert h.init().error == ErrorCode.CONCURRENT_TRANSACTIONS
    h.complete()
    assert h.init().error == ErrorCode.NONE


# -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------

def test_add_partitions_starts_and_extends_transaction() -> None:
    h = Harness()
    r = h.init()
    h.clock.now += 5
    a = h.add(r.producer_id, 0, ("t", 0))
    assert a.error == ErrorCode.NONE and h.state() == TxnState.ONGOING
    m = h.coord.get(TID)
    assert m is not None and m.txn_start_timestamp_ms == T0 + 5
    h.clock.now += 5
    a = h.add(r.producer_id, 0, ("t", 0))
    assert a.error == ErrorCode.NONE and a.records == ()   # nothing new: no write
    a = h.coord.add_partitions(TID, r.producer_id, 0, [])
    assert a.error == ErrorCode.NONE and a.records == ()
    a = h.add(r.producer_id, 0, ("u", 3), ("t", 1))
    (rec,) = a.records
    assert rec.value is not None
    assert rec.value.transaction_partitions == (("t", (0, 1)), ("u", (3,)))
    assert m.txn_start_timestamp_ms == T0 + 5


def test_empty_add_does_not_start_a_transaction() -> None:
    h = Harness()
    r = h.init()
    a = h.coord.add_partitions(TID, r.producer_id, 0, [])
    assert (a.error, a.records, h.state()) == (ErrorCode.NONE, (), TxnState.EMPTY)


def test_add_partitions_errors() -> None:
    h = Harness()
    assert h.add(1, 0).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING   # unknown id
    r = h.init()
    pid = r.producer_id
    assert h.add(pid + 1, 0).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert h.add(pid, 1).error == ErrorCode.PRODUCER_FENCED
    h.add(pid, 0)
    h.end(pid, 0, False)
    assert h.add(pid, 0).error == ErrorCode.CONCURRENT_TRANSACTIONS
    h.complete()
    # After CompleteAbort the same producer starts a new transaction.
    assert h.add(pid, 0).error == ErrorCode.NONE


def test_verify_partitions_changes_nothing() -> None:
    h = Harness()
    r = h.init()
    pid = r.producer_id
    h.add(pid, 0, ("t", 0))
    n = len(h.log)
    err, per = h.coord.verify_partitions(TID, pid, 0, [("t", 0), ("t", 1)])
    assert err == ErrorCode.NONE
    assert per == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.TRANSACTION_ABORTABLE}
    assert len(h.log) == n
    assert h.coord.verify_partitions(TID, pid, 3, [("t", 0)])[0] == ErrorCode.PRODUCER_FENCED
    assert h.coord.verify_partitions(TID, 5, 0, [("t", 0)])[0] == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert h.coord.verify_partitions("nope", pid, 0, [("t", 0)])[0] == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    h.end(pid, 0, True)
    assert h.coord.verify_partitions(TID, pid, 0, [("t", 0)])[0] == \
        ErrorCode.CONCURRENT_TRANSACTIONS


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = Harness(TxnConfig(offsets_topic_num_partitions=13))
    r = h.init()
    a = h.coord.add_offsets(TID, r.producer_id, 0, "my-group")
    assert a.error == ErrorCode.NONE
    m = h.coord.get(TID)
    assert m is not None
    assert m.partitions == {("__consumer_offsets", offsets_partition("my-group", 13))}


# -- EndTxn ---------------------------------------------------------------------------------

@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_tv1(commit: bool) -> None:
    h = Harness()
    r = h.init()
    pid = r.producer_id
    h.add(pid, 0, ("t", 0), ("__consumer_offsets", 4))
    e = h.end(pid, 0, commit)
    assert e.error == ErrorCode.NONE
    assert h.state() == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    assert [mk.topic_partition for mk in e.markers] == [("__consumer_offsets", 4), ("t", 0)]
    assert all(mk.commit == commit and mk.producer_epoch == 0 and mk.coordinator_epoch == 7
               for mk in e.markers)
    assert h.coord.pending_markers() == list(e.markers)
    # Retry while markers are written: CONCURRENT_TRANSACTIONS; the opposite: INVALID_TXN_STATE.
    assert h.end(pid, 0, commit).error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.end(pid, 0, not commit).error == ErrorCode.INVALID_TXN_STATE
    h.complete()
    assert h.state() == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    m = h.coord.get(TID)
    assert m is not None and m.partitions == set() and m.producer_epoch == 0
    assert h.coord.pending_markers() == []
    # Retry after completion: success; the opposite: INVALID_TXN_STATE.
    assert h.end(pid, 0, commit).error == ErrorCode.NONE
    assert h.end(pid, 0, not commit).error == ErrorCode.INVALID_TXN_STATE
    assert h.coord.complete_markers(TID) == ()


def test_end_txn_errors() -> None:
    h = Harness()
    assert h.end(1, 0, True).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    r = h.init()
    pid = r.producer_id
    assert h.end(pid, 0, True).error == ErrorCode.INVALID_TXN_STATE     # Empty
    assert h.end(pid, 0, False).error == ErrorCode.INVALID_TXN_STATE    # Empty, TV1
    assert h.end(pid + 1, 0, True).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    h.add(pid, 0)
    assert h.end(pid, 1, True).error == ErrorCode.PRODUCER_FENCED


def test_end_txn_tv2_bumps_epoch_per_transaction() -> None:
    h = Harness()
    r = h.init()
    pid = r.producer_id
    h.add(pid, 0, tv=2)
    e = h.end(pid, 0, True, tv=2)
    assert (e.error, e.producer_id, e.producer_epoch) == (ErrorCode.NONE, pid, 1)
    assert [mk.producer_epoch for mk in e.markers] == [1]   # markers fence the old epoch
    # A retry with the pre-bump epoch while pending, then after completion.
    assert h.end(pid, 0, True, tv=2).error == ErrorCode.CONCURRENT_TRANSACTIONS
    h.complete()
    e = h.end(pid, 0, True, tv=2)
    assert (e.error, e.producer_epoch) == (ErrorCode.NONE, 1)
    # The old epoch cannot start a transaction; the new one can.
    assert h.add(pid, 0, tv=2).error == ErrorCode.PRODUCER_FENCED
    assert h.add(pid, 1, tv=2).error == ErrorCode.NONE
    rec = h.log[-1].value
    assert rec is not None and rec.client_transaction_version == 2


def test_end_txn_tv2_abort_of_empty_transaction() -> None:
    h = Harness()
    r = h.init()
    e = h.end(r.producer_id, 0, False, tv=2)
    assert (e.error, e.producer_epoch, e.markers) == (ErrorCode.NONE, 1, ())
    assert h.state() == TxnState.COMPLETE_ABORT
    assert [rec.value.transaction_status for rec in e.records if rec.value] == [3, 5]


def test_end_txn_tv2_epoch_overflow_rotates_producer_id() -> None:
    h = Harness()
    r = h.init()
    pid = r.producer_id
    m = h.coord.get(TID)
    assert m is not None
    m.producer_epoch = SHORT_MAX - 2
    h.add(pid, SHORT_MAX - 2, tv=2)
    e = h.end(pid, SHORT_MAX - 2, True, tv=2)        # not yet exhausted: a plain bump
    assert (e.error, e.producer_id, e.producer_epoch) == (ErrorCode.NONE, pid, SHORT_MAX - 1)
    h.complete()
    h.add(pid, SHORT_MAX - 1, tv=2)
    e = h.end(pid, SHORT_MAX - 1, True, tv=2)        # exhausted: the next producer id
    assert (e.error, e.producer_id, e.producer_epoch) == (ErrorCode.NONE, 1001, 0)
    assert e.markers[0].producer_id == pid and e.markers[0].producer_epoch == SHORT_MAX
    rec = e.records[0].value
    assert rec is not None and rec.next_producer_id == 1001
    assert h.end(pid, SHORT_MAX - 1, True, tv=2).error == ErrorCode.CONCURRENT_TRANSACTIONS
    h.complete()
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id) == (1001, 0, pid)
    # A retry from the old id is answered with the rotated id.
    e = h.end(pid, SHORT_MAX - 1, True, tv=2)
    assert (e.error, e.producer_id, e.producer_epoch) == (ErrorCode.NONE, 1001, 0)
    assert h.end(pid, SHORT_MAX - 2, True, tv=2).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert h.add(1001, 0, tv=2).error == ErrorCode.NONE


def test_end_txn_tv2_errors_and_abort_after_completion() -> None:
    h = Harness()
    r = h.init()
    pid = r.producer_id
    h.add(pid, 0, tv=2)
    assert h.end(pid, 1, True, tv=2).error == ErrorCode.PRODUCER_FENCED
    assert h.end(pid + 1, 0, True, tv=2).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    h.end(pid, 0, True, tv=2)
    # While pending only the retry (epoch one below) is CONCURRENT; the new epoch is fenced.
    assert h.end(pid, 1, True, tv=2).error == ErrorCode.PRODUCER_FENCED
    assert h.end(pid, 0, True, tv=2).error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.end(pid, 0, False, tv=2).error == ErrorCode.INVALID_TXN_STATE
    h.complete()
    # A retry of the commit answered as abort: INVALID_TXN_STATE; commit at the new epoch with
    # nothing in progress: INVALID_TXN_STATE; abort at the new epoch: an empty abort (bump).
    assert h.end(pid, 0, False, tv=2).error == ErrorCode.INVALID_TXN_STATE
    assert h.end(pid, 1, True, tv=2).error == ErrorCode.INVALID_TXN_STATE
    e = h.end(pid, 1, False, tv=2)
    assert (e.error, e.producer_epoch, e.markers) == (ErrorCode.NONE, 2, ())
    assert h.state() == TxnState.COMPLETE_ABORT
    # Its retry succeeds.
    assert h.end(pid, 1, False, tv=2).error == ErrorCode.NONE


# -- timers ---------------------------------------------------------------------------------

def test_timer_aborts_timed_out_transaction() -> None:
    h = Harness()
    r = h.init(timeout=10_000)
    pid = r.producer_id
    h.add(pid, 0, ("t", 2))
    h.clock.now += 10_000
    assert h.coord.on_timer().aborted == ()       # not yet older than the timeout
    h.clock.now += 1
    t = h.coord.on_timer()
    h.keep(t.records)
    assert t.aborted == (TID,)
    assert t.markers == (TxnMarker(("t", 2), pid, 1, False, 7),)
    assert h.state() == TxnState.PREPARE_ABORT
    assert h.end(pid, 0, True).error == ErrorCode.PRODUCER_FENCED
    h.complete()
    assert h.state() == TxnState.COMPLETE_ABORT


def test_timer_expires_idle_transactional_ids() -> None:
    h = Harness(TxnConfig(transactional_id_expiration_ms=60_000))
    r = h.init()
    h.add(r.producer_id, 0)
    h.clock.now += 60_000
    h.keep(h.coord.on_timer(h.clock.now - 1).records)   # Ongoing (not timed out): kept
    h.end(r.producer_id, 0, True)
    h.complete()
    h.clock.now += 59_999
    assert h.coord.on_timer().expired == ()
    h.clock.now += 1
    t = h.coord.on_timer()
    assert t.expired == (TID,)
    assert t.records == (TxnLogRecord(partition_for(TID, 50), TID, None),)
    h.keep(t.records)
    assert h.coord.get(TID) is None
    assert TID not in h.replayed().transactional_ids()
    # A new producer with the same id starts over with a new producer id.
    assert h.init().producer_id == 1001


# -- replay ---------------------------------------------------------------------------------

def test_replay_rebuilds_state_and_pending_markers() -> None:
    h = Harness()
    r = h.init()
    pid = r.producer_id
    h.add(pid, 0, ("t", 0), ("t", 1))
    e = h.end(pid, 0, True)
    fresh = h.replayed()
    assert snapshot(fresh) == snapshot(h.coord)
    # The new coordinator (epoch 8) must finish the commit.
    assert fresh.pending_markers() == [
        TxnMarker(mk.topic_partition, mk.producer_id, mk.producer_epoch, True, 8)
        for mk in e.markers]
    fresh.complete_markers(TID)
    m = fresh.get(TID)
    assert m is not None and m.state == TxnState.COMPLETE_COMMIT


def test_load_and_unload_are_per_partition() -> None:
    h = Harness()
    h.init()
    p = partition_for(TID, 50)
    h.coord.unload(p)
    assert h.coord.get(TID) is None and not h.coord.is_coordinator(TID)
    h.coord.load(p, 9, h.log)
    assert h.coord.get(TID) is not None and h.coord.is_coordinator(TID)


def test_the_two_timers_run_separately() -> None:
    # The shell runs them at their own intervals (transaction.abort.timed.out.transaction.
    # cleanup.interval.ms and transaction.remove.expired.transaction.cleanup.interval.ms).
    h = Harness(TxnConfig(transactional_id_expiration_ms=1_000))
    r = h.init(timeout=1_000)
    h.coord.init_producer_id("idle", 1_000)
    h.add(r.producer_id, 0)
    h.clock.now += 1_001
    t = h.coord.expire_transactional_ids()
    assert t.expired == ("idle",) and t.aborted == () and h.state() == TxnState.ONGOING
    t = h.coord.abort_timed_out_transactions()
    assert t.aborted == (TID,) and t.expired == ()
    (rec,) = t.records
    assert rec.value is not None
    assert rec.value.transaction_last_update_timestamp_ms == h.clock.now


def test_old_clients_get_invalid_producer_epoch_instead_of_fenced() -> None:
    fenced, old = ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_for_version(fenced, 22, 3) == old and error_for_version(fenced, 22, 4) == fenced
    for api in (24, 25, 26):     # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
        assert error_for_version(fenced, api, 1) == old
        assert error_for_version(fenced, api, 2) == fenced
    assert error_for_version(ErrorCode.CONCURRENT_TRANSACTIONS, 26, 0) == \
        ErrorCode.CONCURRENT_TRANSACTIONS


SCHEMA = pathlib.Path("/work/shared/kafka-protocol/internal-records/transaction-coordinator/"
                      "TransactionLogValue.json")


def test_value_dict_round_trips_under_kafkas_field_names() -> None:
    h = Harness()
    r = h.init()
    h.add(r.producer_id, 0, ("t", 1), ("t", 0), ("u", 2), tv=2)
    v = h.log[-1].value
    assert v is not None
    d = value_to_dict(v)
    assert d["TransactionPartitions"] == [{"Topic": "t", "PartitionIds": [0, 1]},
                                          {"Topic": "u", "PartitionIds": [2]}]
    assert value_from_dict(json.loads(json.dumps(d))) == v
    # A v0 value (no tagged fields) reads with the schema's defaults.
    for k in ("PreviousProducerId", "NextProducerId", "NextProducerEpoch",
              "ClientTransactionVersion"):
        del d[k]
    old = value_from_dict(d)
    assert (old.previous_producer_id, old.next_producer_id, old.next_producer_epoch,
            old.client_transaction_version) == (-1, -1, -1, 0)
    with pytest.raises(ValueError):
        value_from_dict({"ProducerId": "x"})
    with pytest.raises(ValueError):
        value_from_dict({**value_to_dict(v), "TransactionPartitions": [{"Topic": "t"}]})
    if not SCHEMA.exists():
        pytest.skip(f"Kafka's schema is not at {SCHEMA}")
    text = "\n".join(ln for ln in SCHEMA.read_text().splitlines()
                     if not ln.lstrip().startswith("//"))
    schema = json.loads(text)
    names = {f["name"] for f in schema["fields"]}
    assert set(value_to_dict(v)) == names
