"""DeleteAcls (31): remove the ACLs matching each filter (``kafka-acls.sh --remove``).

No ACL authorizer exists yet (issue 14): as a Kafka broker without one answers, each filter's
result is SECURITY_DISABLED (54) with no matching ACLs, one result per filter in request order.
Versions 1-3 (Kafka 4.0's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.handlers.create_acls import NO_AUTHORIZER
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.delete_acls_response import (
    DeleteAclsFilterResult,
    DeleteAclsResponse,
)

if TYPE_CHECKING:
    from snakka.protocol.messages.delete_acls_request import DeleteAclsRequest

API = ApiDeclaration(ApiKey.DELETE_ACLS, min_version=1)


def handle(ctx: RequestContext, req: DeleteAclsRequest) -> DeleteAclsResponse:
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        DeleteAclsFilterResult(error_code=ErrorCode.SECURITY_DISABLED,
                               error_message=NO_AUTHORIZER, matching_acls=[])
        for _ in req.filters])
