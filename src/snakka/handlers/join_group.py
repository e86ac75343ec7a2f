"""JoinGroup (11): join a classic group; answered when the join phase completes.

Validation of the group id happens here (INVALID_GROUP_ID for an empty id, as Kafka); the state
machine (generations, leader, protocol selection, static membership, KIP-394 member ids) lives in
groups.classic. A group id that belongs to an active KIP-848 consumer group gets
INCONSISTENT_GROUP_PROTOCOL.

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED), as Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.join_group_response import JoinGroupResponse, JoinGroupResponseMember
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.join_group_request import JoinGroupRequest

API = ApiDeclaration(ApiKey.JOIN_GROUP)


def _error(code: int, member_id: str = "", v: int = 9) -> JoinGroupResponse:
    return JoinGroupResponse(throttle_time_ms=0, error_code=code, generation_id=-1,
                             protocol_type=None, protocol_name=None if v >= 7 else "", leader="",
                             member_id=member_id, members=[])


async def _handle(ctx, req):
    v = ctx.api_version
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, "", v)
    if not req.group_id:
        return _error(ErrorCode.INVALID_GROUP_ID, req.member_id, v)
    peer = ctx.client_address
    result = await ctx.services.groups.join(
        group_id=req.group_id, member_id=req.member_id,
        group_instance_id=req.group_instance_id if v >= 5 else None,
        protocol_type=req.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
        session_timeout_ms=req.session_timeout_ms,
        # v0 has no rebalance timeout: Kafka uses the session timeout
        rebalance_timeout_ms=req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms,
        client_id=ctx.client_id or "", client_host=f"/{peer}",
        reason=req.reason if v >= 8 else None,
        require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9)
    if result is None:
        return _error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id, v)
    # protocol_name is nullable only from v7; older versions carry "" for "none chosen".
    protocol_name = result.protocol_name if result.protocol_name is not None or v >= 7 else ""
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=result.error_code, generation_id=result.generation_id,
        protocol_type=result.protocol_type, protocol_name=protocol_name,
        leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id,
        members=[JoinGroupResponseMember(member_id=m.member_id,
                                         group_instance_id=m.group_instance_id,
                                         metadata=m.metadata) for m in result.members])


def handle(ctx: RequestContext, req: JoinGroupRequest):
    return _handle(ctx, req)
