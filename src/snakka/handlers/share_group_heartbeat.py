"""ShareGroupHeartbeat (76): KIP-932 share-group membership; one call joins (epoch 0),
heartbeats and leaves (epoch -1). The logic lives in groups.share; this maps fields both ways.

A group id held by a classic or consumer group answers GROUP_ID_NOT_FOUND ("Group X is not a
share group."), as Kafka does: group types are never converted into share groups.

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED), as Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.share_group_heartbeat_response import (
    Assignment,
    ShareGroupHeartbeatResponse,
    TopicPartitions,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest

# v0 was KIP-932's early-access version, removed in Kafka 4.1
API = ApiDeclaration(ApiKey.SHARE_GROUP_HEARTBEAT, min_version=1)


def handle(ctx: RequestContext, req: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return ShareGroupHeartbeatResponse(
            throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            error_message=None, member_id=None, member_epoch=0, heartbeat_interval_ms=0,
            assignment=None)
    peer = ctx.client_address
    result = ctx.services.groups.share_heartbeat(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
        rack_id=req.rack_id, subscribed_topic_names=req.subscribed_topic_names,
        client_id=ctx.client_id or "", client_host=f"/{peer}")
    if result is None:
        return ShareGroupHeartbeatResponse(
            throttle_time_ms=0, error_code=ErrorCode.GROUP_ID_NOT_FOUND,
            error_message=f"Group {req.group_id} is not a share group.",
            member_id=None, member_epoch=0, heartbeat_interval_ms=0, assignment=None)
    assignment = None
    if result.assignment is not None:
        assignment = Assignment(topic_partitions=[
            TopicPartitions(topic_id=tid, partitions=list(parts))
            for tid, parts in result.assignment])
    return ShareGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=result.error_code, error_message=result.error_message,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)
