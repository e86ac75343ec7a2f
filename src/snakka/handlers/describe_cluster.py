"""DescribeCluster (60): cluster id, controller id (this broker) and the broker list.

v1 adds endpoint_type: 1 asks for brokers, 2 for controllers; a single snakka node is both, and
answers either with itself. v2 may include fenced brokers: there are none.
"""

from __future__ import annotations

from snakka.handlers._common import AUTHORIZED_OPERATIONS_OMITTED
from snakka.handlers.context import ApiDeclaration, ApiKey
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_cluster_response import (
    DescribeClusterBroker,
    DescribeClusterResponse,
)

API = ApiDeclaration(ApiKey.DESCRIBE_CLUSTER)


def handle(ctx, req) -> DescribeClusterResponse:
    broker = ctx.broker
    v = ctx.api_version
    endpoint_type = req.endpoint_type if v >= 1 else 1
    if endpoint_type not in (1, 2):
        return DescribeClusterResponse(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message=f"Unsupported endpoint type {endpoint_type}",
                                       endpoint_type=endpoint_type, cluster_id="",
                                       controller_id=-1, brokers=[])
    host, port = broker.advertised_endpoint(ctx.listener)
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=endpoint_type,
        cluster_id=broker.metadata.cluster_id, controller_id=broker.node_id,
        brokers=[DescribeClusterBroker(broker_id=broker.node_id, host=host, port=port, rack=None,
                                       is_fenced=False)],
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
