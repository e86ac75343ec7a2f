"""DeleteAcls (31): remove the ACLs matching each filter (``kafka-acls.sh --remove``,
``Admin.deleteAcls``).

Authorized as Kafka does: ALTER on the cluster (dispatch checks the declared action). Without an
authorizer each filter's result is SECURITY_DISABLED (54) with no matching ACLs, as a Kafka
broker without one answers. With the StandardAuthorizer each filter (Kafka's AclBindingFilter
rules, MATCH included) lists every ACL it matched, and those ACLs are removed
(controller.delete_acls: ``remove_acl`` records, one append, one fsync, answered once durable);
an ACL two filters match is listed in both results. A filter with a code of 0 (UNKNOWN) closes
the connection, as Kafka does; one with a code Kafka does not know is INVALID_REQUEST ("Unknown
patternFilter." / "Unknown entryFilter."). One result per filter, in request order. Versions 1-3 (Kafka 4.0's).
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
from snakka.handlers.create_acls import NO_AUTHORIZER
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.delete_acls_response import (
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsResponse,
)
from snakka.security.acl_authorizer import AclBindingFilter, check_delete_filter
from snakka.security.authorizer import CLUSTER, AclOperation, Action

if TYPE_CHECKING:
    from snakka.protocol.messages.delete_acls_request import DeleteAclsRequest

API = ApiDeclaration(ApiKey.DELETE_ACLS, min_version=1,
                     actions=(Action(AclOperation.ALTER, CLUSTER),))


def handle(ctx: RequestContext, req: DeleteAclsRequest):  # noqa: ANN201 - response or coroutine
    for f in req.filters:
        problem = filter_problem(f)
        if problem is not None:
            close_unparseable(ctx, "DeleteAcls", problem)
            return None
    if not acl_authorizer_configured(ctx):
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            DeleteAclsFilterResult(error_code=ErrorCode.SECURITY_DISABLED,
                                   error_message=NO_AUTHORIZER, matching_acls=[])
            for _ in req.filters])
    return _delete(ctx, req)


async def _delete(ctx: RequestContext, req: DeleteAclsRequest) -> DeleteAclsResponse:
    filters = [binding_filter(f) for f in req.filters]
    checked: list[AclBindingFilter | KafkaError] = []
    for flt in filters:
        try:
            check_delete_filter(flt)
            checked.append(flt)
        except KafkaError as e:
            checked.append(e)
    deleted = iter(await ctx.services.controller.delete_acls(
        [f for f in checked if isinstance(f, AclBindingFilter)]))
    results = [f if isinstance(f, KafkaError) else next(deleted) for f in checked]
    out = []
    for r in results:
        if isinstance(r, KafkaError):
            out.append(DeleteAclsFilterResult(error_code=r.code, error_message=r.message,
                                              matching_acls=[]))
            continue
        out.append(DeleteAclsFilterResult(error_code=0, error_message=None, matching_acls=[
            DeleteAclsMatchingAcl(
                error_code=0, error_message=None, resource_type=int(a.resource_type),
                resource_name=a.resource_name, pattern_type=int(a.pattern_type),
                principal=a.principal, host=a.host, operation=int(a.operation),
                permission_type=int(a.permission_type)) for a in r]))
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=out)
