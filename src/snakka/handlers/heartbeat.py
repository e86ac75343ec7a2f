"""Heartbeat (12): keeps a classic member's session alive; signals rebalances.

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED), as Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.heartbeat_response import HeartbeatResponse
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.heartbeat_request import HeartbeatRequest

API = ApiDeclaration(ApiKey.HEARTBEAT)


def handle(ctx: RequestContext, req: HeartbeatRequest) -> HeartbeatResponse:
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return HeartbeatResponse(throttle_time_ms=0,
                                 error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not req.group_id:
        return HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_GROUP_ID)
    err = ctx.services.groups.heartbeat(
        group_id=req.group_id, generation_id=req.generation_id, member_id=req.member_id,
        group_instance_id=req.group_instance_id if ctx.api_version >= 3 else None)
    return HeartbeatResponse(throttle_time_ms=0, error_code=err)
