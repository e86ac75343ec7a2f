"""The transaction coordinator's read-only admin queries (DescribeTransactions,
ListTransactions): Kafka's state names, errors and filters, and that they change nothing."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from types import SimpleNamespace

from snakka.handlers.context import RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.security.authorizer import AclOperation, Action, AuthorizationResult, ResourceType
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


# -- the handlers over the queries (a stub request context: no broker) ------------------------
class StubContext:
    """What the admin handlers use of a RequestContext: the version, the services and an
    authorizer that denies the (resource type, name, operation) triples in ``deny``."""

    def __init__(self, coordinator: TransactionCoordinator | None, *, api_key: int = 65,
                 api_version: int = 0, deny: Iterable[tuple[ResourceType, str, AclOperation]] = (),
                 topics: dict[str, int] | None = None) -> None:
        self.api_key, self.api_version = api_key, api_version
        self.principal = "User:test"
        txns = None if coordinator is None else SimpleNamespace(coordinator=coordinator)
        self.services = SimpleNamespace(txns=txns, metadata=SimpleNamespace(topics={
            n: SimpleNamespace(partitions=p) for n, p in (topics or {}).items()}))
        self.deny = set(deny)
        self.asked: list[Action] = []

    allowed = RequestContext.allowed  # the real helper, over this stub's authorize()

    def authorize(self, actions: list[Action]) -> list[AuthorizationResult]:
        self.asked.extend(actions)
        return [AuthorizationResult.DENIED
                if (a.resource_pattern.resource_type, a.resource_pattern.name, a.operation)
                in self.deny else AuthorizationResult.ALLOWED for a in actions]


def test_describe_transactions_handler():
    from snakka.handlers import describe_transactions
    from snakka.protocol.messages.describe_transactions_request import (
        DescribeTransactionsRequest,
    )

    c, _ = coordinator()
    pid, epoch = begin(c, "t1", ("orders", 1), ("audit", 0), ("orders", 0))
    ctx = StubContext(c, deny=[(ResourceType.TOPIC, "audit", AclOperation.DESCRIBE),
                               (ResourceType.TRANSACTIONAL_ID, "secret", AclOperation.DESCRIBE)])
    resp = describe_transactions.handle(ctx, DescribeTransactionsRequest(
        transactional_ids=["t1", "nope", "secret", ""]))
    t1, nope, secret, empty = resp.transaction_states
    assert (t1.error_code, t1.transactional_id, t1.transaction_state, t1.producer_id,
            t1.producer_epoch, t1.transaction_timeout_ms, t1.transaction_start_time_ms) == (
        0, "t1", "Ongoing", pid, epoch, 60_000, T0)
    # Partitions grouped by topic; a topic the principal may not DESCRIBE is left out.
    assert [(t.topic, t.partitions) for t in t1.topics] == [("orders", [0, 1])]
    assert (nope.transactional_id, nope.error_code) == ("nope",
                                                        ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
    assert (secret.transactional_id, secret.error_code) == (
        "secret", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    assert empty.error_code == ErrorCode.INVALID_REQUEST


def test_describe_transactions_error_response_names_each_id():
    from snakka.protocol.error_response import error_response
    from snakka.protocol.messages.describe_transactions_request import (
        DescribeTransactionsRequest,
    )

    resp = error_response(65, 0, DescribeTransactionsRequest(transactional_ids=["a", "b"]),
                          ErrorCode.NOT_COORDINATOR)
    assert [(s.transactional_id, s.error_code) for s in resp.transaction_states] == [
        ("a", ErrorCode.NOT_COORDINATOR), ("b", ErrorCode.NOT_COORDINATOR)]


def test_list_transactions_handler():
    from snakka.handlers import list_transactions
    from snakka.protocol.messages.list_transactions_request import ListTransactionsRequest

    c, clock = coordinator()
    p_a, _ = begin(c, "a", ("orders", 0))
    clock.now += 10_000
    p_b, _ = begin(c, "b", ("orders", 1))
    begin(c, "hidden")
    ctx = StubContext(c, api_key=66, api_version=1,
                      deny=[(ResourceType.TRANSACTIONAL_ID, "hidden", AclOperation.DESCRIBE)])
    resp = list_transactions.handle(ctx, ListTransactionsRequest())
    assert resp.error_code == 0 and resp.unknown_state_filters == []
    assert [(s.transactional_id, s.producer_id, s.transaction_state)
            for s in resp.transaction_states] == [("a", p_a, "Ongoing"), ("b", p_b, "Ongoing")]
    # The ids the principal may not see are filtered without an audit line each.
    assert all(not a.log_if_denied for a in ctx.asked)
    resp = list_transactions.handle(ctx, ListTransactionsRequest(
        state_filters=["Ongoing", "Nope"], producer_id_filters=[p_a, p_b], duration_filter=5_000))
    assert [s.transactional_id for s in resp.transaction_states] == ["a"]
    assert resp.unknown_state_filters == ["Nope"]
    # v0 carries no duration filter.
    ctx0 = StubContext(c, api_key=66, api_version=0)
    resp = list_transactions.handle(ctx0, ListTransactionsRequest(state_filters=["Ongoing"],
                                                                  duration_filter=5_000))
    assert [s.transactional_id for s in resp.transaction_states] == ["a", "b"]


def test_write_txn_markers_authorization():
    from snakka.handlers import write_txn_markers
    from snakka.protocol.messages.write_txn_markers_request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )

    req = WriteTxnMarkersRequest(markers=[WritableTxnMarker(
        producer_id=9, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[WritableTxnMarkerTopic(name="orders", partition_indexes=[0, 1])])])
    denied_both = StubContext(None, api_key=27, api_version=1, deny=[
        (ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER),
        (ResourceType.CLUSTER, "kafka-cluster", AclOperation.CLUSTER_ACTION)])
    resp = write_txn_markers.handle(denied_both, req)
    assert [(m.producer_id, t.name, p.partition_index, p.error_code) for m in resp.markers
            for t in m.topics for p in t.partitions] == [
        (9, "orders", 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        (9, "orders", 1, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
    # ALTER is asked first, silently; CLUSTER_ACTION (the inter-broker right) is enough too.
    assert [(a.operation, a.log_if_denied) for a in denied_both.asked] == [
        (AclOperation.ALTER, False), (AclOperation.CLUSTER_ACTION, True)]
    only_cluster_action = StubContext(None, api_key=27, api_version=1, deny=[
        (ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER)])
    resp = write_txn_markers.handle(only_cluster_action, req)  # no such topic in the stub
    assert {p.error_code for m in resp.markers for t in m.topics for p in t.partitions} == {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_describe_producers_authorization_and_names():
    from snakka.handlers import describe_producers
    from snakka.protocol.messages.describe_producers_request import (
        DescribeProducersRequest,
        TopicRequest,
    )

    ctx = StubContext(None, api_key=61, topics={"orders": 2},
                      deny=[(ResourceType.TOPIC, "orders", AclOperation.READ)])
    resp = describe_producers.handle(ctx, DescribeProducersRequest(topics=[
        TopicRequest(name="orders", partition_indexes=[0, 1]),
        TopicRequest(name="", partition_indexes=[0])]))
    orders, empty = resp.topics
    assert [(p.partition_index, p.error_code) for p in orders.partitions] == [
        (0, ErrorCode.TOPIC_AUTHORIZATION_FAILED), (1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    assert empty.partitions[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "empty" in empty.partitions[0].error_message
