"""PushTelemetry (72): a client pushes its subscribed metrics (KIP-714).

The ClientMetricsManager (telemetry/manager.py) validates the push with Kafka's error codes
(INVALID_REQUEST for the zero instance id or a push after a terminating one,
THROTTLING_QUOTA_EXCEEDED within the push interval, UNKNOWN_SUBSCRIPTION_ID,
UNSUPPORTED_COMPRESSION_TYPE, TELEMETRY_TOO_LARGE beyond ``telemetry.max.bytes``). An accepted
payload is decompressed and decoded as OTLP MetricsData (telemetry/otlp.py) and kept for the
Prometheus endpoint (telemetry/store.py), labelled with the client's instance id and client
id; a payload that does not decode is INVALID_RECORD (Kafka's answer when its receiver fails).
A terminating push (the client is closing) is accepted even within the interval.

Served only with a receiver (``metrics.port``), as GetTelemetrySubscriptions.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from snakka.handlers._telemetry import client_attributes, synced_manager
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.push_telemetry_response import PushTelemetryResponse
from snakka.protocol.primitives import uuid_to_base64
from snakka.telemetry.otlp import PayloadError, decode_payload

if TYPE_CHECKING:
    from snakka.protocol.messages.push_telemetry_request import PushTelemetryRequest

API = ApiDeclaration(ApiKey.PUSH_TELEMETRY)

log = logging.getLogger("snakka.telemetry")


def handle(ctx: RequestContext, req: PushTelemetryRequest) -> PushTelemetryResponse:
    manager = synced_manager(ctx)
    store = ctx.services.client_metrics_store
    if manager is None or store is None:
        return PushTelemetryResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
    instance_id = req.client_instance_id
    metrics = req.metrics or b""
    result = manager.push(instance_id, client_attributes(ctx, instance_id), ctx.connection,
                          subscription_id=req.subscription_id, terminating=req.terminating,
                          compression_type=req.compression_type, metrics_size=len(metrics))
    inst = result.instance
    if result.error_code != ErrorCode.NONE or inst is None:
        log.debug("PushTelemetry from %s refused: %s", ctx.connection.peer, result.message)
        return PushTelemetryResponse(throttle_time_ms=0, error_code=result.error_code)
    if metrics:
        try:
            points = decode_payload(req.compression_type, metrics)
        except PayloadError as e:
            manager.export_failed(inst)
            log.info("PushTelemetry from %s (client %s): %s", ctx.connection.peer,
                     ctx.client_id, e)
            return PushTelemetryResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_RECORD)
        store.record(uuid_to_base64(inst.instance_id), ctx.client_id or "", points)
        manager.exported()
    return PushTelemetryResponse(throttle_time_ms=0, error_code=ErrorCode.NONE)
