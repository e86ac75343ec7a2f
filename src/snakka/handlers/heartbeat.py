"""Heartbeat (12): keeps a classic member's session alive; signals rebalances."""

from __future__ import annotations

from snakka.handlers.context import ApiDeclaration, ApiKey
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.heartbeat_response import HeartbeatResponse

API = ApiDeclaration(ApiKey.HEARTBEAT)


def handle(ctx, req) -> HeartbeatResponse:
    if not req.group_id:
        return HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_GROUP_ID)
    err = ctx.broker.groups.heartbeat(
        group_id=req.group_id, generation_id=req.generation_id, member_id=req.member_id,
        group_instance_id=req.group_instance_id if ctx.api_version >= 3 else None)
    return HeartbeatResponse(throttle_time_ms=0, error_code=err)
