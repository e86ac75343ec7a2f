"""CreateAcls (30): add ACL bindings (``kafka-acls.sh --add``, MirrorMaker 2's topic-ACL sync on
the target cluster).

No ACL authorizer exists yet (issue 14), so, as a Kafka broker without ``authorizer.class.name``
answers, every creation fails with SECURITY_DISABLED (54): nothing is stored and nothing is
silently accepted. One result per creation, in request order. Versions 1-3 (Kafka 4.0's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.create_acls_response import AclCreationResult, CreateAclsResponse

if TYPE_CHECKING:
    from snakka.protocol.messages.create_acls_request import CreateAclsRequest

API = ApiDeclaration(ApiKey.CREATE_ACLS, min_version=1)

NO_AUTHORIZER = "No Authorizer is configured."  # Kafka's message for CreateAcls/DeleteAcls


def handle(ctx: RequestContext, req: CreateAclsRequest) -> CreateAclsResponse:
    return CreateAclsResponse(throttle_time_ms=0, results=[
        AclCreationResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
        for _ in req.creations])
