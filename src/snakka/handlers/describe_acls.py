"""DescribeAcls (29): which ACLs match a filter (``kafka-acls.sh --list``, MirrorMaker 2's
topic-ACL sync, ``Admin.describeAcls``).

snakka has no ACL authorizer (``authorizer.class.name`` is refused at start; issue 14 adds
one), so every request is answered as a Kafka broker without an authorizer answers it:
SECURITY_DISABLED (54) with Kafka's message. Clients take that as "no ACLs here": MirrorMaker 2
logs one INFO line and stops syncing topic ACLs, where an unsupported API made it log an ERROR
with a stack trace on every refresh. Versions 1-3, as Kafka 4.0 serves (v0 went in 4.0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_acls_response import DescribeAclsResponse

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_acls_request import DescribeAclsRequest

API = ApiDeclaration(ApiKey.DESCRIBE_ACLS, min_version=1)

# Kafka's words for this API (CreateAcls/DeleteAcls say "No Authorizer is configured.").
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def handle(ctx: RequestContext, req: DescribeAclsRequest) -> DescribeAclsResponse:
    return DescribeAclsResponse(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
                                error_message=NO_AUTHORIZER, resources=[])
