"""Transactional producers against a real broker (issue 11): the coordinator path end to end.

Each real client (confluent-kafka, kafka-python, aiokafka) runs committed and aborted
transactions over several partitions; read_committed consumers see only the committed records,
read_uncommitted ones see all. The raw-protocol tests pin Kafka's error codes for what a
misbehaving producer sends: transactional batches without a transactional id (53), batches of two
producers in one request, a partition never added to the transaction (INVALID_TXN_STATE below
Produce v11, TRANSACTION_ABORTABLE from v11), a fenced epoch, EndTxn without a transaction, a
control batch from a client (87). The consumer side of what these write (aborted lists, LSO) is
covered in tests/server/test_read_committed_aborted.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from snakka.protocol.errors import ErrorCode
from snakka.records import Record, build_batch
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, now_ms, raw_connect, run_async
from .txn_clients import raw_produce

TOPIC = "txn"
PARTITIONS = 3


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        ck_create_topic(b.bootstrap_servers, TOPIC, PARTITIONS)
        yield b


def _consume_all(bootstrap: str, topic: str, isolation: str, expected: int,
                 timeout: float = 30.0) -> list[str]:
    """Every value in ``topic`` as a confluent consumer of ``isolation`` sees it, waiting for
    ``expected`` values (then a short quiet period to catch extras)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{isolation}-{time.time()}",
                  "isolation.level": isolation, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: list[str] = []
        deadline = time.monotonic() + timeout
        quiet_until = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value().decode())
            if len(got) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
        return got
    finally:
        c.close()


def _expected(tag: str, txns: int, per_txn: int) -> tuple[set[str], set[str]]:
    committed = {f"{tag}-{i}-{k}" for i in range(txns) if i % 2 == 0 for k in range(per_txn)}
    every = {f"{tag}-{i}-{k}" for i in range(txns) for k in range(per_txn)}
    return committed, every


def _check_isolation(bootstrap: str, topic: str, tag: str, txns: int, per_txn: int) -> None:
    committed, every = _expected(tag, txns, per_txn)
    rc = [v for v in _consume_all(bootstrap, topic, "read_committed", len(committed))
          if v.startswith(tag + "-")]
    assert sorted(rc) == sorted(committed)  # no aborted record, no duplicate
    ru = [v for v in _consume_all(bootstrap, topic, "read_uncommitted", len(every))
          if v.startswith(tag + "-")]
    assert sorted(ru) == sorted(every)


def test_confluent_kafka_commits_and_aborts_across_partitions(broker):
    from confluent_kafka import Producer

    topic = "txn-ck"
    ck_create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "ck-1"})
    p.init_transactions(30)
    for i in range(6):
        p.begin_transaction()
        for k in range(9):
            p.produce(topic, value=f"ck-{i}-{k}".encode(), partition=k % PARTITIONS)
        p.flush(30)  # librdkafka purges unsent messages on abort: make the aborted ones real
        if i % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    _check_isolation(broker.bootstrap_servers, topic, "ck", 6, 9)


def test_kafka_python_commits_and_aborts_across_partitions(broker):
    from kafka import KafkaProducer

    topic = "txn-kp"
    ck_create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id="kp-1")
    try:
        p.init_transactions()
        for i in range(6):
            p.begin_transaction()
            for k in range(9):
                p.send(topic, value=f"kp-{i}-{k}".encode(), partition=k % PARTITIONS)
            p.flush()
            if i % 2:
                p.abort_transaction()
            else:
                p.commit_transaction()
    finally:
        p.close(timeout=10)
    _check_isolation(broker.bootstrap_servers, topic, "kp", 6, 9)


def test_aiokafka_commits_and_aborts_across_partitions(broker):
    from aiokafka import AIOKafkaProducer

    topic = "txn-aio"
    ck_create_topic(broker.bootstrap_servers, topic, PARTITIONS)

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                             transactional_id="aio-1")
        await p.start()
        try:
            for i in range(6):
                await p.begin_transaction()
                futs = [await p.send(topic, value=f"aio-{i}-{k}".encode(),
                                     partition=k % PARTITIONS) for k in range(9)]
                await asyncio.gather(*futs)
                if i % 2:
                    await p.abort_transaction()
                else:
                    await p.commit_transaction()
        finally:
            await p.stop()

    run_async(go())
    _check_isolation(broker.bootstrap_servers, topic, "aio", 6, 9)


def test_a_new_producer_of_the_same_id_fences_the_old_one(broker):
    """Zombie fencing: InitProducerId of a second producer with the same transactional id
    aborts the first one's open transaction and bumps the epoch; the first one is fenced."""
    from confluent_kafka import KafkaException, Producer

    topic = "txn-fence"
    ck_create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    old = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "zombie"})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, value=b"zombie-open", partition=0)
    old.flush(30)
    new = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "zombie"})
    new.init_transactions(30)  # aborts the old producer's transaction
    new.begin_transaction()
    new.produce(topic, value=b"zombie-new", partition=0)
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as ei:
        old.produce(topic, value=b"zombie-late", partition=1)
        old.commit_transaction(30)
    err = ei.value.args[0]
    assert err.code() in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH) \
        or err.fatal(), err
    got = _consume_all(broker.bootstrap_servers, topic, "read_committed", 1)
    assert got == ["zombie-new"]


# -- raw protocol: Kafka's codes for what a misbehaving producer sends ------------------------
def _batch(pid: int = -1, epoch: int = -1, seq: int = -1, **kw) -> bytes:
    return build_batch([Record(timestamp=now_ms(), key=b"k", value=b"v")], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, **kw)


async def _produce(conn, batches: dict[int, bytes], transactional_id=None, version=9):
    out = await raw_produce(conn, TOPIC, batches, transactional_id, version)
    return {p: r.error_code for p, r in out.items()}


def test_raw_protocol_errors_of_a_misbehaving_transactional_producer(broker):
    from snakka.protocol.messages.add_partitions_to_txn_request import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
    )
    from snakka.protocol.messages.end_txn_request import EndTxnRequest
    from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
    from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest

    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            r = await conn.send(FindCoordinatorRequest(key_type=1, coordinator_keys=["raw"]))
            assert r.coordinators[0].error_code == 0
            init = await conn.send(InitProducerIdRequest(transactional_id="raw",
                                                         transaction_timeout_ms=60000))
            assert init.error_code == 0, init
            pid, epoch = init.producer_id, init.producer_epoch
            txn = _batch(pid, epoch, 0, is_transactional=True)
            # Transactional batches without a transactional id: 53 on every partition.
            assert await _produce(conn, {0: txn, 1: _batch()}) == {
                0: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                1: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
            # Batches of two producers in one request.
            other = _batch(pid + 1, 0, 0, is_transactional=True)
            assert await _produce(conn, {0: txn, 1: other}, "raw") == {
                0: ErrorCode.INVALID_PRODUCER_ID_MAPPING, 1: ErrorCode.INVALID_PRODUCER_ID_MAPPING}
            # A partition never added to the transaction: INVALID_TXN_STATE below v11,
            # TRANSACTION_ABORTABLE from v11 (KIP-890 verification); nothing is written.
            assert await _produce(conn, {0: txn}, "raw") == {0: ErrorCode.INVALID_TXN_STATE}
            assert await _produce(conn, {0: txn}, "raw", version=11) == {
                0: ErrorCode.TRANSACTION_ABORTABLE}
            # EndTxn without a transaction: INVALID_TXN_STATE; a wrong epoch: fenced.
            r = await conn.send(EndTxnRequest(transactional_id="raw", producer_id=pid,
                                              producer_epoch=epoch, committed=True), version=3)
            assert r.error_code == ErrorCode.INVALID_TXN_STATE, r
            r = await conn.send(EndTxnRequest(transactional_id="raw", producer_id=pid,
                                              producer_epoch=epoch + 5, committed=True),
                                version=3)
            assert r.error_code == ErrorCode.PRODUCER_FENCED, r
            r = await conn.send(EndTxnRequest(transactional_id="raw", producer_id=pid,
                                              producer_epoch=epoch + 5, committed=True),
                                version=1)
            assert r.error_code == ErrorCode.INVALID_PRODUCER_EPOCH, r  # pre-KIP-588 clients
            # Unknown topic in AddPartitionsToTxn: nothing added, the rest not attempted.
            r = await conn.send(AddPartitionsToTxnRequest(
                v3_and_below_transactional_id="raw", v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                    AddPartitionsToTxnTopic(name=TOPIC, partitions=[0]),
                    AddPartitionsToTxnTopic(name="no-such-topic", partitions=[0])]), version=3)
            errors = {(t.name, p.partition_index): p.partition_error_code
                      for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}
            assert errors == {(TOPIC, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                              ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            # Added properly, the same batch is accepted; EndTxn commits it.
            r = await conn.send(AddPartitionsToTxnRequest(
                v3_and_below_transactional_id="raw", v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                    AddPartitionsToTxnTopic(name=TOPIC, partitions=[0])]), version=3)
            assert r.results_by_topic_v3_and_below[0].results_by_partition[0] \
                .partition_error_code == 0
            assert await _produce(conn, {0: txn}, "raw") == {0: ErrorCode.NONE}
            # A control batch from a client: INVALID_RECORD.
            assert await _produce(conn, {1: _batch(is_control=True)}) == {
                1: ErrorCode.INVALID_RECORD}
            r = await conn.send(EndTxnRequest(transactional_id="raw", producer_id=pid,
                                              producer_epoch=epoch, committed=True), version=3)
            assert r.error_code == 0, r
            pl = broker.broker.replicas.get_log(TOPIC, 0)
            assert pl.last_stable_offset == pl.high_watermark  # the marker ended it
        finally:
            await conn.close()
    run_async(go())


def test_transactions_survive_a_restart(tmp_path):
    """The coordinator's state is in __transaction_state: after a restart the producer id and
    epoch continue (a new InitProducerId bumps the epoch of the same producer id)."""
    from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest

    async def init(b):
        conn = await raw_connect(b.bootstrap_servers)
        try:
            return await conn.send(InitProducerIdRequest(transactional_id="durable",
                                                         transaction_timeout_ms=60000))
        finally:
            await conn.close()

    with EmbeddedBroker(data_dir=str(tmp_path)) as b:
        first = run_async(init(b))
    with EmbeddedBroker(data_dir=str(tmp_path)) as b:
        second = run_async(init(b))
    assert (first.error_code, second.error_code) == (0, 0)
    assert second.producer_id == first.producer_id
    assert second.producer_epoch == first.producer_epoch + 1
