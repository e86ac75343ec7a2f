"""Metadata (3): brokers, topics, partitions, topic ids; auto-creates topics when allowed.

The broker list carries the advertised endpoint of the listener the client connected through.
Topics may be named (all versions) or, from v10, identified by topic id. A named topic that does
not exist is created with the broker's defaults when ``auto.create.topics.enable`` is true and the
request allows it (v4+ ``allow_auto_topic_creation``; always for older versions), as Kafka does.
"""

from __future__ import annotations

from snakka.handlers._common import AUTHORIZED_OPERATIONS_OMITTED, LEADER_EPOCH
from snakka.metadata.core import validate_topic_name
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from snakka.protocol.primitives import ZERO_UUID

API_KEY = 3


def _topic_response(broker, ti, v: int) -> MetadataResponseTopic:
    node = broker.node_id
    parts = [
        MetadataResponsePartition(error_code=0, partition_index=p, leader_id=node,
                                  leader_epoch=LEADER_EPOCH, replica_nodes=[node],
                                  isr_nodes=[node], offline_replicas=[])
        for p in range(ti.partitions)
    ]
    return MetadataResponseTopic(error_code=0, name=ti.name, topic_id=ti.topic_id,
                                 is_internal=ti.is_internal, partitions=parts,
                                 topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


def _error_topic(name, topic_id, code: ErrorCode) -> MetadataResponseTopic:
    return MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id or ZERO_UUID,
                                 is_internal=False, partitions=[],
                                 topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


def handle(ctx, req) -> MetadataResponse:
    broker = ctx.broker
    v = ctx.api_version
    md = broker.metadata
    topics: list[MetadataResponseTopic] = []
    if req.topics is None or (v == 0 and not req.topics):
        topics = [_topic_response(broker, ti, v) for ti in md.topics.values()]
    else:
        allow_auto = (req.allow_auto_topic_creation if v >= 4 else True) and \
            broker.resolver.broker_value("auto.create.topics.enable") == "true"
        for t in req.topics:
            if t.name is None and v < 12:
                # v10-11 define topic ids in requests but Kafka never served them there.
                topics.append(_error_topic("", t.topic_id, ErrorCode.INVALID_REQUEST))
                continue
            if t.name is None:
                ti = md.topics_by_id.get(t.topic_id)
                if ti is None:
                    topics.append(_error_topic(None, t.topic_id, ErrorCode.UNKNOWN_TOPIC_ID))
                else:
                    topics.append(_topic_response(broker, ti, v))
                continue
            ti = md.topics.get(t.name)
            if ti is None:
                try:
                    validate_topic_name(t.name)
                except KafkaError as e:
                    topics.append(_error_topic(t.name, None, e.code))
                    continue
                if allow_auto:
                    try:
                        ti = broker.auto_create_topic(t.name)
                    except KafkaError as e:
                        topics.append(_error_topic(t.name, None, e.code))
                        continue
                else:
                    topics.append(_error_topic(t.name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
            topics.append(_topic_response(broker, ti, v))
    host, port = broker.advertised_endpoint(ctx.listener)
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponseBroker(node_id=broker.node_id, host=host, port=port, rack=None)],
        cluster_id=md.cluster_id,
        controller_id=broker.node_id,
        topics=topics,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        error_code=0,
    )
