"""DescribeTopicPartitions (75): paged topic/partition description (Java admin 3.7+).

Topics are answered in name order; at most ``response_partition_limit`` partitions per response
(capped at MAX_PARTITION_LIMIT, Kafka's max.request.partition.size.limit default). When the limit
cuts a topic, ``next_cursor`` names where the next request should resume. An empty topic list
means all topics.

EligibleLeaderReplicas and LastKnownElr are nullable in the schema, but Kafka sends empty lists
when ELR is off (as on a single node), and the Java admin client (kafka-topics.sh --describe,
Spark's connector) calls methods on them: null is a NullPointerException there.

Authorization (Kafka's DescribeTopicPartitionsRequestHandler): DESCRIBE on each topic (one
authorizer call, denials audited). All topics: the others are left out. Named topics: each one
denied is answered TOPIC_AUTHORIZATION_FAILED with a zero topic id and no partitions, after the
described ones, without telling whether it exists. Every described topic (also one answered
UNKNOWN_TOPIC_OR_PARTITION) carries its authorized-operations bit field, as Kafka's (there is no
flag in this request to ask for it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._common import AUTHORIZED_OPERATIONS_OMITTED
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.core import validate_topic_name
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.describe_topic_partitions_response import (
    Cursor,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)
from snakka.protocol.primitives import ZERO_UUID
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_topic_partitions_request import (
        DescribeTopicPartitionsRequest,
    )

API = ApiDeclaration(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
MAX_PARTITION_LIMIT = 2000


def handle(ctx: RequestContext,
           req: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    services = ctx.services
    md = services.metadata
    replicas = services.replicas
    limit = max(1, min(req.response_partition_limit, MAX_PARTITION_LIMIT))
    names = sorted({t.name for t in req.topics}) if req.topics else sorted(md.topics)
    cursor = req.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    if hidden:
        names = [n for n in names if n not in hidden]
    out = []
    next_cursor = None
    budget = limit
    for name in names:
        ti = md.topics.get(name)
        if ti is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            try:
                validate_topic_name(name)
            except KafkaError as e:
                code = e.code
            out.append(DescribeTopicPartitionsResponseTopic(
                error_code=code, name=name, topic_id=ZERO_UUID, is_internal=False, partitions=[],
                topic_authorized_operations=ctx.authorized_operations(ResourceType.TOPIC, name)))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        if budget <= 0:
            next_cursor = Cursor(topic_name=name, partition_index=start)
            break
        end = min(ti.partitions, start + budget)
        parts = []
        for p in range(start, end):
            leader = replicas.leader_id(name, p)
            parts.append(DescribeTopicPartitionsResponsePartition(
                error_code=0, partition_index=p, leader_id=leader,
                leader_epoch=replicas.leader_epoch(name, p), replica_nodes=[leader],
                isr_nodes=[leader], eligible_leader_replicas=[], last_known_elr=[],
                offline_replicas=[]))
        budget -= len(parts)
        out.append(DescribeTopicPartitionsResponseTopic(
            error_code=0, name=name, topic_id=ti.topic_id, is_internal=ti.is_internal,
            partitions=parts,
            topic_authorized_operations=ctx.authorized_operations(ResourceType.TOPIC, name)))
        if end < ti.partitions:
            next_cursor = Cursor(topic_name=name, partition_index=end)
            break
    if hidden and req.topics:
        out += [DescribeTopicPartitionsResponseTopic(
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID,
            is_internal=False, partitions=[],
            topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
            for name in sorted(hidden)]
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=out, next_cursor=next_cursor)
