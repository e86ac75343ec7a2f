"""FindCoordinator (10): which broker coordinates a group (v0-3 one key, v4+ a batch, KIP-699).

A single snakka node coordinates every group (classic, consumer and share: share consumers look
up their group coordinator with a group key) and is the share coordinator of every
share-partition, so group keys (type 0) and share keys (type 2, "groupId:topicId:partition",
v6+ only, as in Kafka; the topic id in Kafka's base64 form) are answered with this broker's
advertised endpoint. A malformed share key, or a share key below v6, is INVALID_REQUEST.
Transaction keys (1, a transactional id) are answered with this broker too: it is the
transaction coordinator of every ``__transaction_state`` partition (snakka.txn.manager; the topic
is created on the coordinator's first write). As Kafka 4.0, an empty transactional id is answered
like any other (the requests that use it then fail); tests/reference/test_txn_differential.py.

Advertising this API also matters beyond groups: librdkafka enables LZ4 only when the broker
lists FindCoordinator in ApiVersions (its feature probe for brokers >= 0.8.2).

Authorization (KafkaApis.getCoordinator): DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED)
or on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) per key; share keys need
CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the request).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._authz import denied_response
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.find_coordinator_response import Coordinator, FindCoordinatorResponse
from snakka.protocol.primitives import base64_to_uuid, uuid_to_base64
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest

API = ApiDeclaration(ApiKey.FIND_COORDINATOR)

KEY_GROUP, KEY_TRANSACTION, KEY_SHARE = 0, 1, 2

#: FindCoordinator versions that may carry share keys (KIP-932).
MIN_SHARE_VERSION = 6


def share_key_error(key: str) -> str | None:
    """Why ``key`` is not a share coordinator key "groupId:topicId:partition" (Kafka's
    SharePartitionKey.validate), or None if it is one."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return f"Share coordinator key {key!r} is not of the form groupId:topicId:partition"
    try:
        topic_id = base64_to_uuid(parts[1])
        if uuid_to_base64(topic_id) != parts[1] or topic_id.int == 0:
            raise ValueError(parts[1])
        if int(parts[2]) < 0 or not parts[2].isdigit():
            raise ValueError(parts[2])
    except (ValueError, TypeError):
        return f"Share coordinator key {key!r} has an invalid topic id or partition"
    return None


def _lookup(ctx, key: str, key_type: int, version: int):
    """(error, message, node, host, port) for one key."""
    services, listener = ctx.services, ctx.listener
    if key_type == KEY_GROUP and not ctx.is_allowed(AclOperation.DESCRIBE, ResourceType.GROUP,
                                                    key):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return code, "" if version >= 4 else code.message, -1, "", -1
    if key_type == KEY_TRANSACTION and not ctx.is_allowed(
            AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return code, "" if version >= 4 else code.message, -1, "", -1
    if key_type == KEY_SHARE:
        if version < MIN_SHARE_VERSION:
            return (ErrorCode.INVALID_REQUEST, "Share coordinator lookups need FindCoordinator "
                    f"v{MIN_SHARE_VERSION} or later", -1, "", -1)
        err = share_key_error(key)
        if err is not None:
            return ErrorCode.INVALID_REQUEST, err, -1, "", -1
    elif key_type not in (KEY_GROUP, KEY_TRANSACTION):
        return ErrorCode.INVALID_REQUEST, f"Unknown coordinator key type {key_type}", -1, "", -1
    if not key and key_type == KEY_GROUP:
        return ErrorCode.INVALID_REQUEST, "The group id must not be empty", -1, "", -1
    host, port = services.advertised_endpoint(listener)
    # Kafka's message on success: "" in a v4+ batch entry, "NONE" (the error's name) in v1-3
    return ErrorCode.NONE, "" if version >= 4 else "NONE", services.node_id, host, port


def handle(ctx: RequestContext, req: FindCoordinatorRequest) -> FindCoordinatorResponse:
    v = ctx.api_version
    key_type = req.key_type if v >= 1 else KEY_GROUP
    if key_type == KEY_SHARE and v >= MIN_SHARE_VERSION and not ctx.is_allowed(
            AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        # share-coordinator lookups are broker-to-broker: the whole request is refused
        return denied_response(ctx, req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if v >= 4:
        out = []
        for key in req.coordinator_keys:
            err, msg, node, host, port = _lookup(ctx, key, key_type, v)
            out.append(Coordinator(key=key, node_id=node, host=host, port=port, error_code=err,
                                   error_message=msg))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=out)
    err, msg, node, host, port = _lookup(ctx, req.key, key_type, v)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=err, error_message=msg,
                                   node_id=node, host=host, port=port)
