"""IncrementalAlterConfigs (44): SET / DELETE / APPEND / SUBTRACT individual configs.

APPEND and SUBTRACT apply to list-typed configs (``cleanup.policy``) as in Kafka; on other types
they are INVALID_CONFIG. Shares validation and application with AlterConfigs (handlers/_alter.py).

Authorization (Kafka's ControllerApis and, for loggers, its broker's RuntimeLoggerManager):
ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED), the group
(GROUP_AUTHORIZATION_FAILED) or the cluster for BROKER, BROKER_LOGGER and CLIENT_METRICS resources
(CLUSTER_AUTHORIZATION_FAILED). A denied BROKER resource is validated first, as Kafka's broker
does before forwarding; the others are refused before their changes are looked at.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snakka.config import BROKER_CONFIGS, GROUP_CONFIGS, TOPIC_CONFIGS, ConfigType
from snakka.handlers._alter import RESOURCE_BROKER_LOGGER, alter_resources
from snakka.handlers._authz import denied_config_resources
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.core import (
    RESOURCE_BROKER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
)
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.incremental_alter_configs_response import (
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
)
from snakka.security.authorizer import AclOperation

if TYPE_CHECKING:
    from snakka.protocol.messages.incremental_alter_configs_request import (
        IncrementalAlterConfigsRequest,
    )

API = ApiDeclaration(ApiKey.INCREMENTAL_ALTER_CONFIGS)


class _ListConfig:
    type = ConfigType.LIST


# CLIENT_METRICS (16, KIP-714): its list configs, which APPEND and SUBTRACT apply to.
CLIENT_METRICS_LIST_CONFIGS = {"metrics": _ListConfig(), "match": _ListConfig()}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _changes(services, res) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    if res.resource_type == RESOURCE_BROKER_LOGGER:
        for c in res.configs:
            if c.config_operation not in (SET, DELETE):
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"Operation {c.config_operation} is not valid for loggers")
            out[c.name] = c.value if c.config_operation == SET else None
        return out
    by_type: dict[int, Mapping[str, Any]] = {
        RESOURCE_TOPIC: TOPIC_CONFIGS, RESOURCE_GROUP: GROUP_CONFIGS,
        RESOURCE_CLIENT_METRICS: CLIENT_METRICS_LIST_CONFIGS}
    defs = by_type.get(res.resource_type, BROKER_CONFIGS)
    current = services.metadata.current_overrides(res.resource_type, res.resource_name)
    names = [c.name for c in res.configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate config keys in the request")
    for c in res.configs:
        op = c.config_operation
        if op == SET:
            out[c.name] = c.value
        elif op == DELETE:
            out[c.name] = None
        elif op in (APPEND, SUBTRACT):
            d = defs.get(c.name)
            if d is None or d.type != ConfigType.LIST:
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"Config value append/subtract is not allowed for config {c.name}")
            if c.name in current:
                base = current[c.name]
            elif res.resource_type == RESOURCE_CLIENT_METRICS:
                base = ""
            elif res.resource_type == RESOURCE_TOPIC:
                ti = services.metadata.topics.get(res.resource_name)
                base = services.resolver.topic_config(ti, c.name).value or ""
            elif res.resource_type == RESOURCE_GROUP:
                base = services.resolver.group_value(res.resource_name, c.name)
            else:
                base = services.resolver.broker_value(c.name) or ""
            items = [x.strip() for x in base.split(",") if x.strip()]
            delta = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if op == APPEND:
                items += [x for x in delta if x not in items]
            else:
                items = [x for x in items if x not in delta]
            out[c.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    return out


def handle(ctx: RequestContext, req: IncrementalAlterConfigsRequest):
    return _handle(ctx, req)


async def _handle(ctx, req):
    changes = []
    errors = {}
    denied = denied_config_resources(ctx, AclOperation.ALTER_CONFIGS,
                                     [(r.resource_type, r.resource_name) for r in req.resources])
    for r in req.resources:
        key = (r.resource_type, r.resource_name)
        refused = denied.get(key)
        if refused is not None and r.resource_type != RESOURCE_BROKER:
            errors[key] = (refused, refused.message)
            continue
        try:
            changes.append((r.resource_type, r.resource_name, _changes(ctx.services, r), False))
        except KafkaError as e:
            errors[key] = (e.code, e.message)
    results = await alter_resources(ctx.services, changes, req.validate_only, denied)
    by_key = {(rt, rn): (code, msg) for rt, rn, code, msg in results}
    by_key.update(errors)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
        AlterConfigsResourceResponse(error_code=by_key[(r.resource_type, r.resource_name)][0],
                                     error_message=by_key[(r.resource_type, r.resource_name)][1],
                                     resource_type=r.resource_type, resource_name=r.resource_name)
        for r in req.resources])
