"""OffsetDelete (47): delete a group's committed offsets for some partitions.

As in Kafka: the group must exist (GROUP_ID_NOT_FOUND); a group with active members may not drop
offsets of topics it is subscribed to (GROUP_SUBSCRIBED_TO_TOPIC per partition). A partition's
pending transactional offsets are deleted with its committed one (Kafka writes the one tombstone
for both), and a group that only has pending offsets exists here.

Authorization (KafkaApis.handleOffsetDeleteRequest): DELETE on the group (else
GROUP_AUTHORIZATION_FAILED for the request), READ on each topic (else
TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._authz import denied_response
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.offset_delete_response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.offset_delete_request import OffsetDeleteRequest

API = ApiDeclaration(ApiKey.OFFSET_DELETE)


def handle(ctx: RequestContext, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
    groups = ctx.services.groups
    gid = req.group_id
    if not ctx.is_allowed(AclOperation.DELETE, ResourceType.GROUP, gid):
        return denied_response(ctx, req, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not gid:
        return OffsetDeleteResponse(error_code=ErrorCode.INVALID_GROUP_ID, throttle_time_ms=0,
                                    topics=[])
    denied = ctx.denied(AclOperation.READ, ResourceType.TOPIC, [t.name for t in req.topics])
    if groups.group_type(gid) is None and not groups.offsets.has_offsets(gid):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND, throttle_time_ms=0,
                                    topics=[])
    subscribed = groups.subscribed_topics(gid) if groups.group_is_active(gid) else set()
    to_delete = []
    out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.name in denied:
                err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif t.name in subscribed:
                err = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            elif t.name not in ctx.services.metadata.topics:
                err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                err = ErrorCode.NONE
                to_delete.append((t.name, p.partition_index))
            parts.append(OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                                       error_code=err))
        out.append(OffsetDeleteResponseTopic(name=t.name, partitions=parts))
    if to_delete:
        groups.delete_offsets(gid, to_delete)
    return OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=out)
