"""FindCoordinator (10): which broker coordinates a group (v0-3 one key, v4+ a batch, KIP-699).

A single snakka node coordinates every consumer group, so a group key (type 0) is answered with
this broker's advertised endpoint. Transaction (1) and share-group (2) keys are answered with a
non-retriable INVALID_REQUEST naming the missing feature: a retriable COORDINATOR_NOT_AVAILABLE
would make a client retry until its timeout.

Advertising this API also matters beyond groups: librdkafka enables LZ4 only when the broker
lists FindCoordinator in ApiVersions (its feature probe for brokers >= 0.8.2).
"""

from __future__ import annotations

from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.find_coordinator_response import Coordinator, FindCoordinatorResponse

API_KEY = 10

KEY_GROUP, KEY_TRANSACTION, KEY_SHARE = 0, 1, 2
_UNAVAILABLE = {
    KEY_TRANSACTION: "Transactions are not supported by this broker yet",
    KEY_SHARE: "Share groups are not supported by this broker yet",
}


def _lookup(broker, listener, key: str, key_type: int):
    """(error, message, node, host, port) for one key."""
    if key_type != KEY_GROUP:
        msg = _UNAVAILABLE.get(key_type, f"Unknown coordinator key type {key_type}")
        return ErrorCode.INVALID_REQUEST, msg, -1, "", -1
    if not key:
        return ErrorCode.INVALID_REQUEST, "The group id must not be empty", -1, "", -1
    host, port = broker.advertised_endpoint(listener)
    return ErrorCode.NONE, None, broker.node_id, host, port


def handle(ctx, req) -> FindCoordinatorResponse:
    v = ctx.api_version
    key_type = req.key_type if v >= 1 else KEY_GROUP
    if v >= 4:
        out = []
        for key in req.coordinator_keys:
            err, msg, node, host, port = _lookup(ctx.broker, ctx.listener, key, key_type)
            out.append(Coordinator(key=key, node_id=node, host=host, port=port, error_code=err,
                                   error_message=msg))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=out)
    err, msg, node, host, port = _lookup(ctx.broker, ctx.listener, req.key, key_type)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=err, error_message=msg,
                                   node_id=node, host=host, port=port)
