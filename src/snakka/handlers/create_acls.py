"""CreateAcls (30): add ACL bindings (``kafka-acls.sh --add``, ``Admin.createAcls``, MirrorMaker
2's topic-ACL sync on the target cluster).

Authorized as Kafka does: ALTER on the cluster (dispatch checks the declared action; a denial
answers every creation CLUSTER_AUTHORIZATION_FAILED). Without an authorizer
(``authorizer.class.name`` empty) every creation fails with SECURITY_DISABLED (54), as a Kafka
broker without one answers: nothing is stored. With the StandardAuthorizer each creation is
validated as Kafka does (INVALID_REQUEST: a CLUSTER resource not named ``kafka-cluster``, an
empty resource name, a principal without ``Type:``), the valid ones become metadata records
(controller.create_acls: one append, one fsync) and are answered once durable; an ACL that
exists already succeeds without a new record. A creation Kafka cannot parse (UNKNOWN codes, ANY
or MATCH) closes the connection, as Kafka does. One result per creation, in request order.
Versions 1-3 (Kafka 4.0's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._acls import (
    acl_authorizer_configured,
    binding_problem,
    close_unparseable,
    standard_acl,
)
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.create_acls_response import AclCreationResult, CreateAclsResponse
from snakka.security.authorizer import CLUSTER, AclOperation, Action

if TYPE_CHECKING:
    from snakka.protocol.messages.create_acls_request import CreateAclsRequest

API = ApiDeclaration(ApiKey.CREATE_ACLS, min_version=1,
                     actions=(Action(AclOperation.ALTER, CLUSTER),))

NO_AUTHORIZER = "No Authorizer is configured."  # Kafka's message for CreateAcls/DeleteAcls


def handle(ctx: RequestContext, req: CreateAclsRequest):  # noqa: ANN201 - response or coroutine
    for creation in req.creations:
        problem = binding_problem(creation)
        if problem is not None:
            close_unparseable(ctx, "CreateAcls", problem)
            return None
    if not acl_authorizer_configured(ctx):
        return CreateAclsResponse(throttle_time_ms=0, results=[
            AclCreationResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
            for _ in req.creations])
    return _create(ctx, req)


async def _create(ctx: RequestContext, req: CreateAclsRequest) -> CreateAclsResponse:
    results = await ctx.services.controller.create_acls(
        [standard_acl(c) for c in req.creations])
    return CreateAclsResponse(throttle_time_ms=0, results=[
        AclCreationResult(error_code=0, error_message=None) if e is None else
        AclCreationResult(error_code=e.code, error_message=e.message) for e in results])
