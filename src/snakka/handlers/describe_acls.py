"""DescribeAcls (29): which ACLs match a filter (``kafka-acls.sh --list``, MirrorMaker 2's
topic-ACL sync, ``Admin.describeAcls``).

Authorized as Kafka does: DESCRIBE on the cluster (dispatch checks the declared action).
Without an authorizer (``authorizer.class.name`` empty) the answer is Kafka's: SECURITY_DISABLED
(54) with Kafka's message; clients take that as "no ACLs here" (MirrorMaker 2 logs one INFO
line and stops syncing topic ACLs). With the StandardAuthorizer: every ACL the filter matches
(Kafka's AclBindingFilter rules, MATCH included), grouped by resource pattern in the order the
patterns were first created. A filter with a code of 0 (UNKNOWN) closes the connection, as
Kafka does; a code Kafka does not know (e.g. pattern type 9) matches nothing. Versions 1-3, as Kafka 4.0 serves (v0 went in 4.0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._acls import (
    acl_authorizer_configured,
    binding_filter,
    close_unparseable,
    filter_problem,
)
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_acls_response import (
    AclDescription,
    DescribeAclsResource,
    DescribeAclsResponse,
)
from snakka.security.authorizer import CLUSTER, AclOperation, Action

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_acls_request import DescribeAclsRequest

API = ApiDeclaration(ApiKey.DESCRIBE_ACLS, min_version=1,
                     actions=(Action(AclOperation.DESCRIBE, CLUSTER),))

# Kafka's words for this API (CreateAcls/DeleteAcls say "No Authorizer is configured.").
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def handle(ctx: RequestContext, req: DescribeAclsRequest) -> DescribeAclsResponse | None:
    problem = filter_problem(req)
    if problem is not None:
        close_unparseable(ctx, "DescribeAcls", problem)
        return None
    if not acl_authorizer_configured(ctx):
        return DescribeAclsResponse(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
                                    error_message=NO_AUTHORIZER, resources=[])
    resources: dict[tuple[int, str, int], DescribeAclsResource] = {}
    for _, acl in ctx.services.controller.metadata.acls.acls(binding_filter(req)):
        key = (int(acl.resource_type), acl.resource_name, int(acl.pattern_type))
        res = resources.get(key)
        if res is None:
            res = resources[key] = DescribeAclsResource(
                resource_type=key[0], resource_name=key[1], pattern_type=key[2], acls=[])
        res.acls.append(AclDescription(principal=acl.principal, host=acl.host,
                                       operation=int(acl.operation),
                                       permission_type=int(acl.permission_type)))
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message="",
                                resources=list(resources.values()))
