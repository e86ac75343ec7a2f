"""DescribeGroups (15): classic groups' state, protocol, members and (when Stable) their
subscription and assignment bytes.

As in Kafka: an unknown group is answered with state Dead and no error up to v5 and with
GROUP_ID_NOT_FOUND from v6 (KIP-1043); a group that exists only
through committed or pending transactional offsets is Empty; a KIP-848 consumer group or a share group is GROUP_ID_NOT_FOUND
with a message (ConsumerGroupDescribe / ShareGroupDescribe describe those).

Authorization: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED for it); v3+
``include_authorized_operations`` fills the group's authorized-operations bit field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from snakka.handlers._common import AUTHORIZED_OPERATIONS_OMITTED
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_groups_response import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest

API = ApiDeclaration(ApiKey.DESCRIBE_GROUPS)


def _describe(groups, gid: str, v: int) -> DescribedGroup:
    def group(**kw) -> DescribedGroup:
        base: dict[str, Any] = dict(error_code=0, error_message=None, group_id=gid, group_state="Dead",
                    protocol_type="", protocol_data="", members=[],
                    authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
        base.update(kw)
        return DescribedGroup(**base)

    if not gid:
        return group(error_code=ErrorCode.INVALID_GROUP_ID)
    if groups.consumer.has_group(gid) or groups.share.has_group(gid):
        return group(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                     error_message=f"Group {gid} is not a classic group.")
    d = groups.classic.describe(gid)
    if d is None:
        if groups.offsets.has_offsets(gid):
            return group(group_state="Empty")
        if v >= 6:  # KIP-1043: v6+ report an unknown group as an error, not as Dead
            return group(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                         error_message=f"Group {gid} not found.")
        return group()
    return group(group_state=d.state, protocol_type=d.protocol_type, protocol_data=d.protocol,
                 members=[DescribedGroupMember(member_id=m.member_id,
                                               group_instance_id=m.group_instance_id,
                                               client_id=m.client_id, client_host=m.client_host,
                                               member_metadata=m.metadata,
                                               member_assignment=m.assignment)
                          for m in d.members])


def handle(ctx: RequestContext, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
    v = ctx.api_version
    denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.GROUP, req.groups)
    out = []
    for gid in req.groups:
        if gid in denied:
            out.append(DescribedGroup(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None,
                group_id=gid, group_state="", protocol_type="", protocol_data="", members=[],
                authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        g = _describe(ctx.services.groups, gid, v)
        if v >= 3 and req.include_authorized_operations and not g.error_code:
            g.authorized_operations = ctx.authorized_operations(ResourceType.GROUP, gid)
        out.append(g)
    return DescribeGroupsResponse(throttle_time_ms=0, groups=out)
