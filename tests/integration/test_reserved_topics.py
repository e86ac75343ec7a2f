"""Reserved topic names (issue 9 item 8): no client creates, writes or reshapes an internal topic.

The reported sequence: with auto-creation on, a client asked for topic ``__cluster_metadata``
(Metadata auto-created it) and produced to it. Its partition directory was the broker's own
metadata log, so the produced bytes landed there and the broker never started again
(JSONDecodeError). Kafka refuses to create ``__cluster_metadata`` (INVALID_REQUEST, "Creation of
internal topic __cluster_metadata is prohibited.") and answers INVALID_TOPIC_EXCEPTION to a
Produce on an internal topic; snakka does that for every reserved name, and refuses by hand
creation of the internal topics too (KAFKA-FACTS: Kafka allows ``__transaction_state``, a
foot-gun).
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from snakka.client.connection import KafkaConnection
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.alter_configs_request import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
)
from snakka.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from snakka.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from snakka.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.records import Record, build_batch
from snakka.testing import EmbeddedBroker

from .helpers import run_async

RESERVED_NOT_CREATED = ["__cluster_metadata", "__transaction_state", "__share_group_state",
                        "__remote_log_metadata"]


def _send(b: EmbeddedBroker, *requests):
    async def go():
        host, port = b.bootstrap_servers.rsplit(":", 1)
        async with KafkaConnection(host, int(port)) as c:
            # Produce v12: by topic name (v13 names topics by id, which these have none of).
            return [await c.send(r, 12 if isinstance(r, ProduceRequest) else None)
                    for r in requests]
    return run_async(go(), timeout=None)


def _create(name: str, partitions: int = 1) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=30000, validate_only=False)


def _metadata(*names: str) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in names],
                           allow_auto_topic_creation=True)


def _produce(topic: str) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        TopicProduceData(name=topic, partition_data=[
            PartitionProduceData(index=0, records=build_batch([Record(value=b"not json")]))])])


@pytest.fixture
def broker():
    with EmbeddedBroker(config={"auto.create.topics.enable": "true"}) as b:
        yield b


def test_reported_sequence_then_restart_works(broker):
    """Auto-create + produce to __cluster_metadata, with the raw protocol and a real client;
    then the broker restarts and still has its topics."""
    (ok,) = _send(broker, _create("orders", 2))
    assert ok.topics[0].error_code == 0
    md, produce = _send(broker, _metadata("__cluster_metadata"), _produce("__cluster_metadata"))
    assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    part = produce.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "internal topic" in part.error_message

    # A real producer, as the reporter did: the record is refused, never written.
    errors = []
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "message.timeout.ms": 3000})
    p.produce("__cluster_metadata", b"garbage", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None, "the produce to __cluster_metadata must fail"

    broker.restart()
    (md,) = _send(broker, MetadataRequest(topics=None, allow_auto_topic_creation=False))
    names = {t.name for t in md.topics}
    assert "orders" in names and "__cluster_metadata" not in names
    (produce,) = _send(broker, _produce("orders"))
    assert produce.responses[0].partition_responses[0].error_code == 0


def test_create_topics_refuses_every_reserved_name(broker):
    responses = _send(broker, *[_create(n) for n in RESERVED_NOT_CREATED])
    for name, resp in zip(RESERVED_NOT_CREATED, responses, strict=True):
        r = resp.topics[0]
        assert r.error_code == ErrorCode.INVALID_REQUEST, name
        assert r.error_message == f"Creation of internal topic {name} is prohibited.", name
    # A name that collides with a reserved one (Kafka's '.'/'_' rule) would make the lazily
    # created internal topic impossible later.
    (resp,) = _send(broker, _create("__share.group.state"))
    assert resp.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    # Auto-creation never creates them either.
    (md,) = _send(broker, _metadata(*RESERVED_NOT_CREATED))
    assert [t.error_code for t in md.topics] == \
        [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * len(RESERVED_NOT_CREATED)
    (md,) = _send(broker, MetadataRequest(topics=None, allow_auto_topic_creation=False))
    assert not {t.name for t in md.topics} & set(RESERVED_NOT_CREATED)


def test_client_cannot_write_or_reshape_an_existing_internal_topic(broker):
    # A group commit makes the group coordinator create __consumer_offsets.
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    p.produce("events", b"x")
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g",
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("events", 0, 1)], asynchronous=False)
    finally:
        c.close()
    (md,) = _send(broker, MetadataRequest(topics=[MetadataRequestTopic(name="__consumer_offsets")],
                                          allow_auto_topic_creation=False))
    assert md.topics[0].error_code == 0 and md.topics[0].is_internal
    topic = "__consumer_offsets"
    create, produce, delete_records, grow, alter = _send(
        broker, _create(topic), _produce(topic),
        DeleteRecordsRequest(topics=[DeleteRecordsTopic(name=topic, partitions=[
            DeleteRecordsPartition(partition_index=0, offset=-1)])], timeout_ms=30000),
        CreatePartitionsRequest(topics=[CreatePartitionsTopic(name=topic, count=100,
                                                              assignments=None)],
                                timeout_ms=30000),
        AlterConfigsRequest(resources=[AlterConfigsResource(
            resource_type=2, resource_name=topic,
            configs=[AlterableConfig(name="retention.ms", value="1000")])]))
    assert create.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert produce.responses[0].partition_responses[0].error_code == \
        ErrorCode.INVALID_TOPIC_EXCEPTION
    assert delete_records.topics[0].partitions[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert grow.results[0].error_code == ErrorCode.INVALID_REQUEST
    assert alter.responses[0].error_code == ErrorCode.INVALID_REQUEST
    # The group's commit is still there.
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g"})
    try:
        (tp,) = c.committed([TopicPartition("events", 0)], timeout=20)
        assert tp.offset == 1
    finally:
        c.close()
