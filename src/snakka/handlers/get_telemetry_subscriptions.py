"""GetTelemetrySubscriptions (71): a client asks which of its metrics to push, how often, and
compressed how (KIP-714).

The decision is the ClientMetricsManager's (telemetry/manager.py): a client sending the zero
instance id gets a new one; its subscription is every matching CLIENT_METRICS resource's
metrics (``kafka-client-metrics.sh``), the smallest of their intervals, a subscription id, the
compression types the broker takes (zstd, lz4, gzip, snappy), ``telemetry.max.bytes`` and delta
temporality (as Kafka). A get within the push interval of the last one is
THROTTLING_QUOTA_EXCEEDED. No authorization, as in Kafka.

Served only when the broker has a receiver for the pushed metrics, the Prometheus endpoint
(``metrics.port``); otherwise the broker does not register this API and ApiVersions does not
advertise it, as Kafka advertises it only with a ClientTelemetry receiver configured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._telemetry import client_attributes, synced_manager
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.get_telemetry_subscriptions_response import (
    GetTelemetrySubscriptionsResponse,
)
from snakka.telemetry.manager import ACCEPTED_COMPRESSION_TYPES

if TYPE_CHECKING:
    from snakka.protocol.messages.get_telemetry_subscriptions_request import (
        GetTelemetrySubscriptionsRequest,
    )

API = ApiDeclaration(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)


def handle(ctx: RequestContext, req: GetTelemetrySubscriptionsRequest
           ) -> GetTelemetrySubscriptionsResponse:
    manager = synced_manager(ctx)
    if manager is None:  # registered without a receiver: Kafka's answer without a manager
        return GetTelemetrySubscriptionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
    instance_id = req.client_instance_id
    result = manager.get_subscriptions(instance_id, client_attributes(ctx, instance_id),
                                       ctx.connection)
    inst = result.instance
    if result.error_code != ErrorCode.NONE or inst is None:
        return GetTelemetrySubscriptionsResponse(error_code=result.error_code)
    return GetTelemetrySubscriptionsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, client_instance_id=inst.instance_id,
        subscription_id=inst.subscription_id,
        accepted_compression_types=list(ACCEPTED_COMPRESSION_TYPES),
        push_interval_ms=inst.interval_ms, telemetry_max_bytes=manager.telemetry_max_bytes,
        delta_temporality=True, requested_metrics=list(inst.requested))
