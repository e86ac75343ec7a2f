"""DescribeCluster (60): cluster id, controller id (this broker) and the broker list.

v1 adds endpoint_type: 1 asks for brokers, 2 for controllers; a single snakka node is both, and
answers either with itself. v2 may include fenced brokers: there are none.

Authorization: none for the request (Kafka); ``include_cluster_authorized_operations`` fills
the cluster's authorized-operations bit field (0 without DESCRIBE on the cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._common import AUTHORIZED_OPERATIONS_OMITTED
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_cluster_response import (
    DescribeClusterBroker,
    DescribeClusterResponse,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_cluster_request import DescribeClusterRequest

API = ApiDeclaration(ApiKey.DESCRIBE_CLUSTER)


def handle(ctx: RequestContext, req: DescribeClusterRequest) -> DescribeClusterResponse:
    services = ctx.services
    v = ctx.api_version
    endpoint_type = req.endpoint_type if v >= 1 else 1
    if endpoint_type not in (1, 2):
        return DescribeClusterResponse(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message=f"Unsupported endpoint type {endpoint_type}",
                                       endpoint_type=endpoint_type, cluster_id="",
                                       controller_id=-1, brokers=[])
    host, port = services.advertised_endpoint(ctx.listener)
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=endpoint_type,
        cluster_id=services.metadata.cluster_id, controller_id=services.node_id,
        brokers=[DescribeClusterBroker(broker_id=services.node_id, host=host, port=port, rack=None,
                                       is_fenced=False)],
        cluster_authorized_operations=_cluster_operations(ctx, req))


def _cluster_operations(ctx: RequestContext, req: DescribeClusterRequest) -> int:
    """Kafka's computeDescribeClusterResponse: the bit field only when asked, 0 without
    DESCRIBE on the cluster."""
    if not req.include_cluster_authorized_operations:
        return AUTHORIZED_OPERATIONS_OMITTED
    if not ctx.is_allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
