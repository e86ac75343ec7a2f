"""The transaction coordinator's read-only admin queries (DescribeTransactions,
ListTransactions): Kafka's state names, errors and filters, and that they change nothing."""

from __future__ import annotations

import itertools

from snakka.protocol.errors import ErrorCode
from snakka.txn.coordinator import TransactionCoordinator, TxnConfig, TxnState

T0 = 1_000_000

# Kafka's TransactionState names (TransactionMetadata.scala), what tools print and filter on.
KAFKA_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit", TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit", TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def coordinator(loaded: range | None = None) -> tuple[TransactionCoordinator, Clock]:
    cfg = TxnConfig()
    clock = Clock()
    ids = itertools.count(1000)
    c = TransactionCoordinator(cfg, clock, lambda: next(ids))
    for p in loaded if loaded is not None else range(cfg.transaction_state_log_num_partitions):
        c.load(p, 3, [])
    return c, clock


def begin(c: TransactionCoordinator, tid: str, *tps: tuple[str, int]) -> tuple[int, int]:
    r = c.init_producer_id(tid, 60_000)
    assert r.error == ErrorCode.NONE
    if tps:
        assert c.add_partitions(tid, r.producer_id, r.producer_epoch, tps).error == 0
    return r.producer_id, r.producer_epoch


def test_state_names_are_kafkas_both_ways():
    for state, name in KAFKA_NAMES.items():
        assert TransactionCoordinator.state_name(state) == name
        assert TransactionCoordinator.state_from_name(name) is state
    # fromName is exact: Kafka does not match "ongoing" or "ONGOING".
    assert TransactionCoordinator.state_from_name("ongoing") is None
    assert TransactionCoordinator.state_from_name("Bogus") is None


def test_describe_an_ongoing_transaction():
    c, clock = coordinator()
    pid, epoch = begin(c, "t1", ("orders", 1), ("orders", 0), ("audit", 2))
    clock.now += 5
    err, m = c.describe_transaction("t1")
    assert err == ErrorCode.NONE and m is not None
    assert (m.producer_id, m.producer_epoch, m.state) == (pid, epoch, TxnState.ONGOING)
    assert m.txn_timeout_ms == 60_000 and m.txn_start_timestamp_ms == T0
    assert m.partitions == {("orders", 0), ("orders", 1), ("audit", 2)}


def test_describe_returns_a_snapshot_the_core_does_not_share():
    c, _ = coordinator()
    begin(c, "t1", ("orders", 0))
    _, m = c.describe_transaction("t1")
    assert m is not None
    m.partitions.add(("evil", 0))
    m.state = TxnState.DEAD
    _, again = c.describe_transaction("t1")
    assert again is not None
    assert again.partitions == {("orders", 0)} and again.state == TxnState.ONGOING


def test_describe_errors():
    c, _ = coordinator()
    assert c.describe_transaction("") == (ErrorCode.INVALID_REQUEST, None)
    assert c.describe_transaction("never-seen") == (ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None)
    # An id whose __transaction_state partition this broker does not coordinate.
    c2, _ = coordinator(loaded=range(0))
    assert c2.describe_transaction("t1") == (ErrorCode.NOT_COORDINATOR, None)


def test_describe_after_commit_and_after_expiry():
    c, clock = coordinator()
    pid, epoch = begin(c, "t1", ("orders", 0))
    r = c.end_txn("t1", pid, epoch, commit=True)
    assert r.error == 0 and r.markers
    _, m = c.describe_transaction("t1")
    assert m is not None and m.state == TxnState.PREPARE_COMMIT and m.partitions
    c.complete_markers("t1")
    _, m = c.describe_transaction("t1")
    assert m is not None and m.state == TxnState.COMPLETE_COMMIT and not m.partitions
    clock.now += c.config.transactional_id_expiration_ms + 1
    assert c.expire_transactional_ids().expired == ("t1",)
    assert c.describe_transaction("t1") == (ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None)


def test_list_without_filters_lists_every_id_sorted():
    c, _ = coordinator()
    p_b, _ = begin(c, "b", ("orders", 0))
    p_a, _ = begin(c, "a")
    listed, unknown = c.list_transactions()
    assert listed == [("a", p_a, TxnState.EMPTY), ("b", p_b, TxnState.ONGOING)]
    assert unknown == []


def test_list_state_filters_and_unknown_names():
    c, _ = coordinator()
    p_b, _ = begin(c, "b", ("orders", 0))
    begin(c, "a")
    assert c.list_transactions(state_names=["Ongoing"]) == ([("b", p_b, TxnState.ONGOING)], [])
    # An unknown name is reported and matches nothing; with a known one, the known one filters.
    assert c.list_transactions(state_names=["Ongoing", "Bogus"]) == (
        [("b", p_b, TxnState.ONGOING)], ["Bogus"])
    assert c.list_transactions(state_names=["ongoing"]) == ([], ["ongoing"])


def test_list_producer_id_filter():
    c, _ = coordinator()
    p_a, _ = begin(c, "a")
    begin(c, "b")
    assert c.list_transactions(producer_ids=[p_a]) == ([("a", p_a, TxnState.EMPTY)], [])
    assert c.list_transactions(producer_ids=[-5]) == ([], [])


def test_list_duration_filter_keeps_transactions_running_longer():
    c, clock = coordinator()
    p_old, _ = begin(c, "old", ("orders", 0))
    clock.now += 10_000
    p_new, _ = begin(c, "new", ("orders", 1))
    clock.now += 1_000
    # "old" runs 11 s, "new" 1 s; strictly longer than the filter, as Kafka (<= is excluded).
    got, _ = c.list_transactions(duration_ms=5_000, state_names=["Ongoing"])
    assert got == [("old", p_old, TxnState.ONGOING)]
    got, _ = c.list_transactions(duration_ms=1_000, state_names=["Ongoing"])
    assert got == [("old", p_old, TxnState.ONGOING)]
    got, _ = c.list_transactions(duration_ms=999, state_names=["Ongoing"])
    assert [t for t, _, _ in got] == ["new", "old"]
    assert c.list_transactions(duration_ms=-1, state_names=["Ongoing"])[0] == [
        ("new", p_new, TxnState.ONGOING), ("old", p_old, TxnState.ONGOING)]


def test_list_only_loaded_partitions():
    c, _ = coordinator()
    begin(c, "t1")
    p = c.partition_for("t1")
    c.unload(p)
    assert c.list_transactions() == ([], [])


def test_queries_write_nothing():
    c, clock = coordinator()
    begin(c, "t1", ("orders", 0))
    before = c.get("t1")
    assert before is not None
    snapshot = before.to_log_value()
    clock.now += 1_000_000_000
    c.describe_transaction("t1")
    c.list_transactions(duration_ms=0, state_names=["Ongoing", "x"], producer_ids=[1])
    after = c.get("t1")
    assert after is before and after.to_log_value() == snapshot
