"""AlterShareGroupOffsets (91): set share-partition start offsets of an empty share group
(``kafka-share-groups.sh --reset-offsets``).

Only an existing share group without members may be altered: GROUP_ID_NOT_FOUND /
NON_EMPTY_GROUP otherwise (top-level, repeated for every partition, as Kafka's error response).
Per partition: UNKNOWN_TOPIC_OR_PARTITION for an unknown topic or partition index,
INVALID_REQUEST for a negative offset. Altering drops the share-partition's in-flight state and
starts a new state epoch at the given offset (a partition without state is initialised at it).
Answered once the new state is durable under the broker's flush policy.

Authorization (Kafka 4.1's KafkaApis, KIP-932): READ on the group, else the whole request is
GROUP_AUTHORIZATION_FAILED (top-level and every partition); READ on each topic, else
TOPIC_AUTHORIZATION_FAILED for its partitions (nothing of it is altered).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from snakka.handlers._authz import denied_response
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.alter_share_group_offsets_response import (
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.alter_share_group_offsets_request import (
        AlterShareGroupOffsetsRequest,
    )

API = ApiDeclaration(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
_ZERO_UUID = uuid.UUID(int=0)


def _group_error(services, group_id: str) -> tuple[ErrorCode, str] | None:
    groups = services.groups
    if not group_id or not groups.share_group_exists(group_id):
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    if not groups.share_group_is_empty(group_id):
        return ErrorCode.NON_EMPTY_GROUP, (
            f"Share group {group_id} is not empty: its offsets can only be altered while it "
            "has no members.")
    return None


def handle(ctx: RequestContext, req: AlterShareGroupOffsetsRequest):
    services = ctx.services
    md = services.metadata
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return denied_response(ctx, req, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    group_err = _group_error(services, req.group_id)
    unreadable = ctx.denied(AclOperation.READ, ResourceType.TOPIC,
                            [t.topic_name for t in req.topics])
    marks = []
    topics = []
    for t in req.topics:
        ti = md.topics.get(t.topic_name)
        parts = []
        for p in t.partitions:
            if t.topic_name in unreadable:  # refused before the group is asked
                err, msg = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
            elif group_err is not None:
                err, msg = group_err
            elif ti is None:
                err, msg = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
            else:
                err, mark = services.shares.alter_offset(req.group_id, ti.topic_id,
                                                       p.partition_index, p.start_offset)
                msg = None
                marks.append(mark)
            parts.append(AlterShareGroupOffsetsResponsePartition(
                partition_index=p.partition_index, error_code=err, error_message=msg))
        topics.append(AlterShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name,
            topic_id=ti.topic_id if ti and t.topic_name not in unreadable else _ZERO_UUID,
            partitions=parts))
    code, message = group_err if group_err is not None else (ErrorCode.NONE, None)
    response = AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=code,
                                              error_message=message, responses=topics)
    if marks and services.shares.persister.strict():
        return _after_durable(services, marks, response)
    return response


async def _after_durable(services, marks, response):
    await services.shares.durable(marks)
    return response
