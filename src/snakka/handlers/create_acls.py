"""CreateAcls (30): add ACL bindings (``kafka-acls.sh --add``, ``Admin.createAcls``, MirrorMaker
2's topic-ACL sync on the target cluster).

Authorized as Kafka does: ALTER on the cluster (dispatch checks the declared action; a denial
answers every creation CLUSTER_AUTHORIZATION_FAILED). Without an authorizer
(``authorizer.class.name`` empty) every creation fails with SECURITY_DISABLED (54), as a Kafka
broker without one answers: nothing is stored. With the StandardAuthorizer,
as the reference Kafka 4.0 answers: a binding with ANY (or MATCH) where it needs a value fails
the whole request with UNKNOWN_SERVER_ERROR (Kafka's AclBinding constructor throws); otherwise
each creation is checked (INVALID_REQUEST with Kafka's message: a CLUSTER resource not named
``kafka-cluster``, an empty name, an unknown code, a principal without ``Type:``) and the valid
ones become metadata records (controller.create_acls: one append, one fsync), answered once
durable; an ACL that exists already succeeds without a new record. More new ACLs than Kafka's
MAX_RECORDS_PER_USER_OP (snakka.limits) fail the whole request: every creation
POLICY_VIOLATION "Unable to perform excessively large batch operation.", nothing stored. A code of 0 (UNKNOWN)
anywhere closes the connection, as Kafka does (its request parsing fails). One result per creation, in request order.
Versions 1-3 (Kafka 4.0's).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from snakka.handlers._acls import acl_authorizer_configured, binding_problem, close_unparseable
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.core import UserOpTooLarge
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.create_acls_response import AclCreationResult, CreateAclsResponse
from snakka.security.acl_authorizer import StandardAcl, binding_refused, check_new_acl
from snakka.security.authorizer import CLUSTER, AclOperation, Action

if TYPE_CHECKING:
    from snakka.protocol.messages.create_acls_request import CreateAclsRequest

API = ApiDeclaration(ApiKey.CREATE_ACLS, min_version=1,
                     actions=(Action(AclOperation.ALTER, CLUSTER),))

NO_AUTHORIZER = "No Authorizer is configured."  # Kafka's message for CreateAcls/DeleteAcls

log = logging.getLogger("snakka.handlers")


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
    for c in req.creations:
        refused = binding_refused(c.resource_type, c.resource_pattern_type, c.operation,
                                  c.permission_type)
        if refused is not None:
            log.info("CreateAcls from %s refused: a binding with %s (Kafka cannot build it: "
                     "UNKNOWN_SERVER_ERROR for the request)", ctx.client_address, refused)
            return CreateAclsResponse(throttle_time_ms=0, results=[
                AclCreationResult(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=None)
                for _ in req.creations])
    checked: list[StandardAcl | KafkaError] = []
    for c in req.creations:
        try:
            checked.append(check_new_acl(c.resource_type, c.resource_name,
                                         c.resource_pattern_type, c.principal, c.host,
                                         c.operation, c.permission_type))
        except KafkaError as e:
            checked.append(e)
    return _create(ctx, checked)


async def _create(ctx: RequestContext, checked: list[StandardAcl | KafkaError]
                  ) -> CreateAclsResponse:
    valid = [c for c in checked if isinstance(c, StandardAcl)]
    try:
        created = iter(await ctx.services.controller.create_acls(valid))
    except UserOpTooLarge as e:  # Kafka's controller refuses the whole request
        return CreateAclsResponse(throttle_time_ms=0, results=[
            AclCreationResult(error_code=e.code, error_message=e.message) for _ in checked])
    results = [c if isinstance(c, KafkaError) else next(created) for c in checked]
    return CreateAclsResponse(throttle_time_ms=0, results=[
        AclCreationResult(error_code=0, error_message="") if e is None else
        AclCreationResult(error_code=e.code, error_message=e.message) for e in results])
