"""DescribeShareGroupOffsets (90, v0-v1): the share-partition start offset (SPSO) of a share
group's partitions and, from v1 (KIP-1226), their lag: records between the SPSO and the high
watermark not yet acknowledged or archived.

``Topics`` null describes every share-partition the group has state for. A requested partition
the group has no state for answers StartOffset -1 (and Lag -1), as Kafka; an unknown topic or
partition index answers UNKNOWN_TOPIC_OR_PARTITION for that partition; a group id that is not a
share group answers GROUP_ID_NOT_FOUND for the group. LeaderEpoch is always 0 (one node).

Authorization (Kafka 4.1's KafkaApis, KIP-932): DESCRIBE on each group (else
GROUP_AUTHORIZATION_FAILED for it) and DESCRIBE on each topic: a named topic the principal may
not describe answers TOPIC_AUTHORIZATION_FAILED for each of its partitions (its id withheld);
with ``Topics`` null such topics are left out.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_share_group_offsets_response import (
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_share_group_offsets_request import (
        DescribeShareGroupOffsetsRequest,
    )

API = ApiDeclaration(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
_ZERO_UUID = uuid.UUID(int=0)


def _partition(index: int, start: int, lag: int, err: ErrorCode = ErrorCode.NONE,
               leader_epoch: int = -1):
    return DescribeShareGroupOffsetsResponsePartition(
        partition_index=index, start_offset=start, leader_epoch=leader_epoch, lag=lag,
        error_code=err, error_message=None)


def _describe_group(ctx: RequestContext, g) -> DescribeShareGroupOffsetsResponseGroup:
    services = ctx.services
    shares = services.shares
    md = services.metadata
    if not ctx.is_allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=[],
                                                      error_code=code, error_message=code.message)
    if not g.group_id or not services.groups.share_group_exists(g.group_id):
        return DescribeShareGroupOffsetsResponseGroup(
            group_id=g.group_id, topics=[], error_code=ErrorCode.GROUP_ID_NOT_FOUND,
            error_message=f"Group {g.group_id} is not a share group.")
    if g.topics is None:
        wanted: dict = {}
        for _g, topic_id, partition in shares.group_state_keys(g.group_id):
            ti = md.topics_by_id.get(topic_id)
            if ti is not None:
                wanted.setdefault(ti.name, []).append(partition)
    else:
        wanted = {t.topic_name: list(t.partitions) for t in g.topics}
    hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, wanted,
                        log_if_denied=g.topics is not None)
    topics = []
    for name, partitions in wanted.items():
        if name in hidden:
            if g.topics is not None:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                topics.append(DescribeShareGroupOffsetsResponseTopic(
                    topic_name=name, topic_id=_ZERO_UUID, partitions=[
                        DescribeShareGroupOffsetsResponsePartition(
                            partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1,
                            error_code=code, error_message=code.message)
                        for p in partitions]))
            continue
        ti = md.topics.get(name)
        parts = []
        for p in partitions:
            if ti is None:
                parts.append(_partition(p, -1, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                        services.replicas.leader_epoch(name, p)))
                continue
            start, lag, err = shares.describe_offset(g.group_id, ti.topic_id, p)
            parts.append(_partition(p, start, lag, err, services.replicas.leader_epoch(name, p)))
        topics.append(DescribeShareGroupOffsetsResponseTopic(
            topic_name=name, topic_id=ti.topic_id if ti else _ZERO_UUID, partitions=parts))
    return DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=topics,
                                                  error_code=ErrorCode.NONE, error_message=None)


def handle(ctx: RequestContext,
           req: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    return DescribeShareGroupOffsetsResponse(
        throttle_time_ms=0, groups=[_describe_group(ctx, g) for g in req.groups])
