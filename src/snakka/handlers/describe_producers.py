"""DescribeProducers (61): the active producers of each partition's producer state (KIP-664).

What ``kafka-transactions.sh describe-producers``, ``abort --start-offset`` and
``find-hanging`` read: per producer id its epoch, last sequence, last timestamp, the epoch of
the coordinator that wrote its last marker and the first offset of its open transaction (-1
where there is none). The state is the partition log's (``ReplicaManager.producers``).

As Kafka's KafkaApis: an illegal topic name is INVALID_TOPIC_EXCEPTION, a topic the principal
may not READ is TOPIC_AUTHORIZATION_FAILED, an unknown topic or partition
UNKNOWN_TOPIC_OR_PARTITION, each on every partition the request names for that topic.
Internal topics are described like any other (read-only).

``last_timestamp`` is the broker time of the producer's last append (snakka's producer state
keeps that rather than the batch's max timestamp, see snakka.txn.producer_state); tools use it
to age open transactions (``find-hanging``), for which the broker's clock is the better one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.core import validate_topic_name
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.describe_producers_response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)
from snakka.security.authorizer import (
    AclOperation,
    ResourceType,
)

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_producers_request import DescribeProducersRequest

API = ApiDeclaration(ApiKey.DESCRIBE_PRODUCERS)


def _topic_error(ctx: RequestContext, name: str) -> tuple[ErrorCode, str | None]:
    try:
        validate_topic_name(name)
    except KafkaError as e:
        return e.code, e.message
    if not ctx.allowed(AclOperation.READ, ResourceType.TOPIC, [name])[0]:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    if name not in ctx.services.metadata.topics:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    return ErrorCode.NONE, None


def _partition(ctx: RequestContext, topic: str, index: int) -> PartitionResponse:
    err, entries = ctx.services.replicas.producers(topic, index)
    if err:
        return PartitionResponse(partition_index=index, error_code=err)
    return PartitionResponse(partition_index=index, error_code=0, active_producers=[
        ProducerState(producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                      last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                      coordinator_epoch=e.coordinator_epoch,
                      current_txn_start_offset=-1 if e.current_txn_first_offset is None
                      else e.current_txn_first_offset)
        for e in entries])


def handle(ctx: RequestContext, req: DescribeProducersRequest) -> DescribeProducersResponse:
    topics = []
    for t in req.topics:
        err, message = _topic_error(ctx, t.name)
        if err:
            parts = [PartitionResponse(partition_index=p, error_code=err, error_message=message)
                     for p in t.partition_indexes]
        else:
            parts = [_partition(ctx, t.name, p) for p in t.partition_indexes]
        topics.append(TopicResponse(name=t.name, partitions=parts))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
