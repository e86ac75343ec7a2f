"""Transactions, request by request, against the reference Kafka 4.0 and snakka (issue 11).

The same raw requests to both brokers, the answers compared by shape (error codes exactly): the
happy path of a TV1 transaction (FindCoordinator, InitProducerId, AddPartitionsToTxn, a
transactional Produce, AddOffsetsToTxn, EndTxn, ListOffsets read_committed), the TV2 path
(Produce v12 adds the partition, EndTxn v5 bumps the epoch) and what a misbehaving producer
sends: wrong producer ids and epochs at each version, EndTxn without a transaction, unknown
topics, partitions never added (KIP-890 verification), transactional batches without a
transactional id or of two producers, an oversized transaction timeout.
"""

from __future__ import annotations

import time
import uuid

from snakka.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from snakka.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from snakka.protocol.messages.end_txn_request import EndTxnRequest
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest
from snakka.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.records.record import Record, build_batch

from .differential import Peer, assert_same_shape, run_both

RUN = uuid.uuid4().hex[:8]


def _name(what: str) -> str:
    return f"diff-txn-{what}-{RUN}"


def _batch(pid: int, epoch: int, seq: int, n: int = 2, transactional: bool = True) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([Record(timestamp=now, value=b"v%d" % i) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=transactional)


def _produce(topic: str, partitions: dict[int, bytes], tid: str | None) -> ProduceRequest:
    return ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=30000, topic_data=[
        TopicProduceData(name=topic, partition_data=[
            PartitionProduceData(index=p, records=b) for p, b in partitions.items()])])


def _add(tid: str, pid: int, epoch: int, topics: dict[str, list[int]]) -> AddPartitionsToTxnRequest:
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
            AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()])


def _end(tid: str, pid: int, epoch: int, commit: bool) -> EndTxnRequest:
    return EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                         committed=commit)


def _lso(topic: str, partitions: int) -> ListOffsetsRequest:
    return ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsPartition(partition_index=i, timestamp=-1)
                                for i in range(partitions)])])


# Kafka answers EndTxn once its Prepare record is written and writes the markers afterwards
# (CONCURRENT_TRANSACTIONS meanwhile); snakka answers after the markers. Scenarios wait for the
# transaction to settle before comparing what follows.
CONCURRENT_TRANSACTIONS = 51


async def _init(p: Peer, label: str, tid: str, **kw) -> tuple[int, int]:
    timeout = kw.pop("timeout", 60000)
    r = await p.until(label, lambda: InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=timeout, **kw),
        lambda r: r.error_code not in (CONCURRENT_TRANSACTIONS, 15, 16, 14))
    return r.producer_id, r.producer_epoch


async def _find(p: Peer, label: str, tid: str) -> None:
    """The coordinator of ``tid`` (Kafka creates __transaction_state on the first lookup and
    answers COORDINATOR_NOT_AVAILABLE until it is loaded)."""
    await p.until(label, lambda: FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]),
                  lambda r: r.coordinators[0].error_code != 15, version=4)


async def _settled(p: Peer, label: str, request, version: int):
    """``request`` resent while Kafka is still writing the markers of the last EndTxn."""
    return await p.until(label, lambda: request,
                         lambda r: r.error_code != CONCURRENT_TRANSACTIONS, version=version)


async def _lso_settled(p: Peer, label: str, topic: str, partitions: int, after: int):
    """The read_committed end offsets once the markers of the last EndTxn are written."""
    return await p.until(label, lambda: _lso(topic, partitions),
                         lambda r: all(q.offset > after for q in r.topics[0].partitions),
                         version=7)


def test_a_tv1_transaction_and_its_errors(brokers, versions):
    t = _name("tv1")
    tid = _name("tv1-id")

    async def scenario(p: Peer):
        await p.create_topic(t, 2)
        await _find(p, "find", tid)
        await p.ask("find_empty", FindCoordinatorRequest(key_type=1, coordinator_keys=[""]),
                    version=4)
        await p.ask("find_empty_v3", FindCoordinatorRequest(key_type=1, key=""), version=3)
        await p.ask("timeout_too_big", InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=900_001))
        pid, epoch = await _init(p, "init", tid)
        # Nothing in progress yet.
        await p.ask("end_without_txn", _end(tid, pid, epoch, True), version=3)
        await p.ask("end_wrong_epoch", _end(tid, pid, epoch + 3, True), version=3)
        await p.ask("end_wrong_epoch_v1", _end(tid, pid, epoch + 3, True), version=1)
        await p.ask("end_wrong_pid", _end(tid, pid + 1, epoch, True), version=3)
        await p.ask("end_unknown_id", _end(_name("nobody"), pid, epoch, False), version=3)
        await p.ask("add_unknown_topic", _add(tid, pid, epoch, {t: [0], _name("none"): [0]}),
                    version=3)
        await p.ask("add_wrong_epoch", _add(tid, pid, epoch + 1, {t: [0]}), version=3)
        await p.ask("add_wrong_epoch_v1", _add(tid, pid, epoch + 1, {t: [0]}), version=1)
        # Verification: a partition never added.
        await p.ask("produce_not_added_v9", _produce(t, {0: _batch(pid, epoch, 0)}, tid),
                    version=9)
        await p.ask("produce_not_added_v11", _produce(t, {0: _batch(pid, epoch, 0)}, tid),
                    version=11)
        await p.ask("produce_no_txn_id", _produce(t, {0: _batch(pid, epoch, 0)}, None),
                    version=9)
        # The transaction.
        await p.ask("add", _add(tid, pid, epoch, {t: [0, 1]}), version=3)
        await p.ask("two_producers", _produce(t, {0: _batch(pid, epoch, 0),
                                                 1: _batch(pid + 7, 0, 0)}, tid), version=9)
        await p.ask("produce", _produce(t, {0: _batch(pid, epoch, 0),
                                            1: _batch(pid, epoch, 0)}, tid), version=9)
        await p.ask("lso_open", _lso(t, 2), version=7)
        await p.ask("add_offsets", AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch,
            group_id=_name("group")), version=3)
        await p.ask("commit", _end(tid, pid, epoch, True), version=3)
        await _lso_settled(p, "lso_committed", t, 2, 0)
        await _settled(p, "commit_retry", _end(tid, pid, epoch, True), 3)
        await p.ask("abort_after_commit", _end(tid, pid, epoch, False), version=3)
        # A second producer of the same id fences the first.
        await _init(p, "reinit", tid)
        await p.ask("fenced_add", _add(tid, pid, epoch, {t: [0]}), version=3)
        await p.ask("fenced_produce", _produce(t, {0: _batch(pid, epoch, 2)}, tid), version=9)

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_a_tv2_transaction(brokers, versions):
    """Transactions V2 (KIP-890 part 2) as the Java 4.0 producer runs it: no AddPartitionsToTxn,
    Produce v12 adds the partition, EndTxn v5 answers with the bumped epoch."""
    t = _name("tv2")
    tid = _name("tv2-id")

    async def scenario(p: Peer):
        await p.create_topic(t, 1)
        await _find(p, "find", tid)
        pid, epoch = await _init(p, "init", tid)
        await p.ask("produce_v12", _produce(t, {0: _batch(pid, epoch, 0)}, tid), version=12)
        await p.ask("lso_open", _lso(t, 1), version=7)
        r = await p.ask("commit_v5", _end(tid, pid, epoch, True), version=5)
        assert r.producer_epoch == epoch + 1, (p.name, r)
        await _lso_settled(p, "lso_committed", t, 1, 0)
        await _settled(p, "commit_v5_retry", _end(tid, pid, epoch, True), 5)
        await p.ask("produce_v12_new_epoch", _produce(t, {0: _batch(pid, epoch + 1, 0)}, tid),
                    version=12)
        await p.ask("abort_v5", _end(tid, pid, epoch + 1, False), version=5)
        await _lso_settled(p, "lso_aborted", t, 1, 3)
        await _settled(p, "abort_v5_without_txn", _end(tid, pid, epoch + 2, False), 5)
        await _settled(p, "commit_v5_without_txn", _end(tid, pid, epoch + 3, True), 5)

    assert_same_shape(*run_both(brokers, versions, scenario))
