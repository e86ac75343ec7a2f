"""AlterConfigs (33), the legacy whole-set replacement: the given configs become the resource's
complete set of overrides (everything not named reverts to its default).

Shares validation and application with IncrementalAlterConfigs (handlers/_alter.py).

Authorization (Kafka's ControllerApis): ALTER_CONFIGS on the topic (else
TOPIC_AUTHORIZATION_FAILED), the group (GROUP_AUTHORIZATION_FAILED) or the cluster for BROKER
(and BROKER_LOGGER) resources (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._alter import alter_resources
from snakka.handlers._authz import denied_config_resources
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.messages.alter_configs_response import (
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
)
from snakka.security.authorizer import AclOperation

if TYPE_CHECKING:
    from snakka.protocol.messages.alter_configs_request import AlterConfigsRequest

API = ApiDeclaration(ApiKey.ALTER_CONFIGS)


def handle(ctx: RequestContext, req: AlterConfigsRequest):
    changes = [(r.resource_type, r.resource_name, {c.name: c.value for c in r.configs}, True)
               for r in req.resources]
    denied = denied_config_resources(ctx, AclOperation.ALTER_CONFIGS,
                                     [(rt, rn) for rt, rn, _c, _r in changes])
    return _respond(ctx, changes, req.validate_only, denied)


async def _respond(ctx, changes, validate_only, denied):
    results = await alter_resources(ctx.services, changes, validate_only, denied)
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        AlterConfigsResourceResponse(error_code=code, error_message=msg, resource_type=rt,
                                     resource_name=rn) for rt, rn, code, msg in results])
