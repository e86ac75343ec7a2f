"""DeleteGroups (42): delete empty groups and their committed offsets; deleting an empty share
group also drops its share-partition state (the share side is told through its listener).

A group with members answers NON_EMPTY_GROUP; an unknown one GROUP_ID_NOT_FOUND. Pending
transactional offsets do not keep a group from being deleted: they go with it, as in Kafka (the
transaction's COMMIT then finds nothing to apply).

Authorization: DELETE on each group (else GROUP_AUTHORIZATION_FAILED for it), as Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.delete_groups_response import (
    DeletableGroupResult,
    DeleteGroupsResponse,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.delete_groups_request import DeleteGroupsRequest

API = ApiDeclaration(ApiKey.DELETE_GROUPS)


def handle(ctx: RequestContext, req: DeleteGroupsRequest) -> DeleteGroupsResponse:
    out = []
    denied = ctx.denied(AclOperation.DELETE, ResourceType.GROUP, req.groups_names)
    for gid in req.groups_names:
        err: int
        if gid in denied:
            err = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            err = ErrorCode.INVALID_GROUP_ID if not gid else ctx.services.groups.delete_group(gid)
        out.append(DeletableGroupResult(group_id=gid, error_code=err, error_message=None))
    return DeleteGroupsResponse(throttle_time_ms=0, results=out)
