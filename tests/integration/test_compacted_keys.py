"""Keyless records on a compacted topic are refused (issue 13), as Kafka's LogValidator does.

The cleaner keeps the latest record per key, so a record without a key has nothing to be kept
by: Kafka answers Produce with INVALID_RECORD (87) and a RecordError per keyless record
("Compacted topic cannot accept message without key in topic partition T-P"). Checked with a
raw Produce (every codec, the RecordErrors and the message exactly), kafka-python and
confluent-kafka (the error each surfaces), and the neighbours: a delete topic still takes
keyless records, an empty key is a key, and a topic altered to ``compact`` refuses them from
then on (the partition's validator follows its config).
"""

from __future__ import annotations

import pytest

from snakka.records import Record, build_batch
from snakka.testing import EmbeddedBroker

from .helpers import ck_admin, ck_create_topic, ck_end_offsets, now_ms, raw_connect, run_async

INVALID_RECORD = 87
PRODUCE_VERSION = 9  # by topic name, with RecordErrors (v8+)


def key_message(tp: str) -> str:
    return f"Compacted topic cannot accept message without key in topic partition {tp}"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        ck_create_topic(b.bootstrap_servers, "compacted", 2, {"cleanup.policy": "compact"})
        ck_create_topic(b.bootstrap_servers, "compacted-delete", 1,
                        {"cleanup.policy": "compact,delete"})
        ck_create_topic(b.bootstrap_servers, "plain", 1)
        yield b


async def _produce(bootstrap: str, topic: str, partition: int, batch: bytes):
    from snakka.protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    conn = await raw_connect(bootstrap)
    try:
        resp = await conn.send(ProduceRequest(
            transactional_id=None, acks=-1, timeout_ms=5000,
            topic_data=[TopicProduceData(name=topic, partition_data=[
                PartitionProduceData(index=partition, records=batch)])]),
            version=PRODUCE_VERSION)
    finally:
        await conn.close()
    return resp.responses[0].partition_responses[0]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_raw_produce_of_a_keyless_record_gets_invalid_record_and_its_record_error(broker, codec):
    bs = broker.bootstrap_servers
    before = ck_end_offsets(bs, "compacted", [1])[1]
    ts = now_ms()
    batch = build_batch([Record(key=None, value=b"no key", timestamp=ts),
                         Record(key=b"k", value=b"keyed", timestamp=ts)], compression=codec)
    r = run_async(_produce(bs, "compacted", 1, batch))
    assert r.error_code == INVALID_RECORD, r
    msg = key_message("compacted-1")
    assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [(0, msg)]
    assert r.error_message == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=0, message='{msg}')]")
    assert ck_end_offsets(bs, "compacted", [1])[1] == before  # nothing of the batch stored
    # The same batch is fine on a delete topic; on compact,delete it is refused too.
    assert run_async(_produce(bs, "plain", 0, batch)).error_code == 0
    r = run_async(_produce(bs, "compacted-delete", 0, batch))
    assert r.error_code == INVALID_RECORD and r.record_errors[0].batch_index == 0, r


def test_keyed_and_empty_key_records_are_accepted(broker):
    ts = now_ms()
    batch = build_batch([Record(key=b"", value=b"empty key", timestamp=ts),
                         Record(key=b"k", value=None, timestamp=ts)])  # a tombstone
    r = run_async(_produce(broker.bootstrap_servers, "compacted", 0, batch))
    assert r.error_code == 0, r


def test_kafka_python_producer_gets_invalid_record_error(broker):
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    p = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, retries=0,
                      request_timeout_ms=10_000)
    try:
        with pytest.raises(InvalidRecordError):
            p.send("compacted", value=b"no key", partition=0).get(timeout=30)
        meta = p.send("compacted", key=b"k", value=b"v", partition=0).get(timeout=30)
        assert meta.offset >= 0
    finally:
        p.close(timeout=10)


def test_confluent_kafka_producer_gets_invalid_record(broker):
    from confluent_kafka import KafkaError, Producer

    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    results: list = []
    p.produce("compacted", value=b"no key", partition=0,
              on_delivery=lambda err, msg: results.append(err))
    p.produce("compacted", key=b"k", value=b"v", partition=1,
              on_delivery=lambda err, msg: results.append(err))
    assert p.flush(30) == 0
    assert len(results) == 2
    assert results[0] is not None and results[0].code() == KafkaError.INVALID_RECORD, results
    assert results[1] is None, results


def test_a_topic_altered_to_compact_refuses_keyless_records_from_then_on(broker):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "becomes-compacted", 1)
    batch = build_batch([Record(key=None, value=b"v", timestamp=now_ms())])
    assert run_async(_produce(bs, "becomes-compacted", 0, batch)).error_code == 0
    admin = ck_admin(bs)
    res = ConfigResource(ConfigResource.Type.TOPIC, "becomes-compacted", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)
    r = run_async(_produce(bs, "becomes-compacted", 0, batch))
    assert r.error_code == INVALID_RECORD, r
    assert r.record_errors[0].batch_index_error_message == key_message("becomes-compacted-0")
