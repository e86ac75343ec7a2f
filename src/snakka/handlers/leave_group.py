"""LeaveGroup (13): one member (v0-2) or a batch of members by id / instance id (v3+, KIP-345).

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED), as Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.leave_group_response import LeaveGroupResponse, MemberResponse
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.leave_group_request import LeaveGroupRequest

API = ApiDeclaration(ApiKey.LEAVE_GROUP)


def handle(ctx: RequestContext, req: LeaveGroupRequest) -> LeaveGroupResponse:
    v = ctx.api_version
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return LeaveGroupResponse(throttle_time_ms=0,
                                  error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    if not req.group_id:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_GROUP_ID,
                                  members=[])
    if v >= 3:
        members = [(m.member_id, m.group_instance_id, m.reason if v >= 5 else None)
                   for m in req.members]
    else:
        members = [(req.member_id, None, None)]
    err, per_member = ctx.services.groups.leave(group_id=req.group_id, members=members)
    if v < 3 and err == ErrorCode.NONE and per_member:
        err = per_member[0][2]  # v0-2 carry the single member's outcome at the top level
    return LeaveGroupResponse(throttle_time_ms=0, error_code=err, members=[
        MemberResponse(member_id=m, group_instance_id=i, error_code=e) for m, i, e in per_member])
