"""ListConfigResources (74): the config resources a cluster has (KIP-1142; v0 was
ListClientMetricsResources, KIP-714, and lists only client-metrics subscriptions).

What ``kafka-configs.sh --describe --entity-type ...`` without a name and
``Admin.listConfigResources`` read. As Kafka's KafkaApis:

- v0: the client-metrics resources (the names of CLIENT_METRICS config resources that have
  configs, ``kafka-client-metrics.sh --alter --name ...``), each with type 16;
- v1: the resources of each type asked for, every supported type when the list is empty:
  TOPIC (2) every topic, internal ones included; BROKER (4) and BROKER_LOGGER (8) this node's id;
  CLIENT_METRICS (16) as v0; GROUP (32) every group the coordinators know (classic, consumer,
  share, and groups that only have committed offsets) and every group that has dynamic configs.
  A type outside these: UNSUPPORTED_VERSION and no resources (Kafka's answer).

Authorization: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._authz import CONFIG_RESOURCE_TOPIC
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.list_config_resources_response import (
    ConfigResource,
    ListConfigResourcesResponse,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.list_config_resources_request import ListConfigResourcesRequest

API = ApiDeclaration(ApiKey.LIST_CONFIG_RESOURCES)

# ConfigResource.Type codes
_BROKER = 4
_BROKER_LOGGER = 8
_CLIENT_METRICS = 16
_GROUP = 32
SUPPORTED_RESOURCE_TYPES = (CONFIG_RESOURCE_TOPIC, _BROKER, _BROKER_LOGGER, _CLIENT_METRICS,
                            _GROUP)


def _names(ctx: RequestContext, resource_type: int) -> list[str]:
    services = ctx.services
    md = services.metadata
    if resource_type == CONFIG_RESOURCE_TOPIC:
        return sorted(md.topics)
    if resource_type in (_BROKER, _BROKER_LOGGER):
        return [str(services.node_id)]
    if resource_type == _CLIENT_METRICS:
        return sorted(n for t, n in md.dynamic_configs if t == _CLIENT_METRICS)
    groups = services.groups
    out = set(groups.offsets.groups())
    out.update(g for g, _p, _s in groups.classic.list_groups())
    out.update(g for g, _s in groups.consumer.list_groups())
    out.update(g for g, _s in groups.share.list_groups())
    out.update(n for t, n in md.dynamic_configs if t == _GROUP)
    return sorted(out)


def handle(ctx: RequestContext, req: ListConfigResourcesRequest) -> ListConfigResourcesResponse:
    if not ctx.is_allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return ListConfigResourcesResponse(
            throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            config_resources=[])
    if ctx.api_version == 0:
        types: list[int] = [_CLIENT_METRICS]
    else:
        types = list(dict.fromkeys(req.resource_types)) or list(SUPPORTED_RESOURCE_TYPES)
        if any(t not in SUPPORTED_RESOURCE_TYPES for t in types):
            return ListConfigResourcesResponse(
                throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION,
                config_resources=[])
    return ListConfigResourcesResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                       config_resources=[
                                           ConfigResource(resource_name=n, resource_type=t)
                                           for t in types for n in _names(ctx, t)])
