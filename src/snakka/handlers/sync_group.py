"""SyncGroup (14): the leader hands out assignments; every member waits for its own bytes.

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED), as Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.sync_group_response import SyncGroupResponse
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.sync_group_request import SyncGroupRequest

API = ApiDeclaration(ApiKey.SYNC_GROUP)


async def _handle(ctx, req):
    v = ctx.api_version
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return SyncGroupResponse(throttle_time_ms=0,
                                 error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")
    if not req.group_id:
        return SyncGroupResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_GROUP_ID,
                                 assignment=b"")
    result = await ctx.services.groups.sync(
        group_id=req.group_id, generation_id=req.generation_id, member_id=req.member_id,
        group_instance_id=req.group_instance_id if v >= 3 else None,
        protocol_type=req.protocol_type if v >= 5 else None,
        protocol_name=req.protocol_name if v >= 5 else None,
        assignments={a.member_id: bytes(a.assignment) for a in req.assignments})
    return SyncGroupResponse(throttle_time_ms=0, error_code=result.error_code,
                             protocol_type=result.protocol_type,
                             protocol_name=result.protocol_name, assignment=result.assignment)


def handle(ctx: RequestContext, req: SyncGroupRequest):
    return _handle(ctx, req)
