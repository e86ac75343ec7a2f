"""WriteTxnMarkers (27), v0-1: COMMIT / ABORT control markers from outside the broker.

Kafka's transaction coordinator sends this to partition leaders; a single snakka node writes its
own markers internally. It is served to clients because the admin client's
``abortTransaction`` (``kafka-transactions.sh abort``) sends it to the partition leader to end a
hanging transaction: one whose producer's coordinator will never write its marker (its
transactional id expired or was never known, e.g. data recovered from another cluster).

Every marker goes through the transaction manager's ``write_markers``, the same path as the
coordinator's own markers: data partitions through ``ReplicaManager.write_txn_marker`` (the
producer state refuses a stale one: INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED),
``__consumer_offsets`` partitions through the group coordinator, so pending transactional
offsets are committed or dropped exactly as the coordinator's markers would.

As Kafka's KafkaApis:
- authorization: ALTER on the cluster (what an administrator holds, KIP-664), else
  CLUSTER_ACTION (the inter-broker right); denied: CLUSTER_AUTHORIZATION_FAILED everywhere;
- an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION for it, the others are written;
- results per producer id, then topic and partition (two markers of one producer id share one
  result entry).
Stricter than Kafka, which writes whatever it is sent: a marker for an internal topic other than
``__consumer_offsets`` (no transaction ever writes to ``__transaction_state``,
``__share_group_state``, ...) is INVALID_TOPIC_EXCEPTION, so a client can never put a control
batch into a coordinator's log; a negative producer id (no producer: there is no transaction to
end) is INVALID_PRODUCER_ID_MAPPING and a negative producer epoch INVALID_PRODUCER_EPOCH, on
each partition of that marker, so no control batch without a producer reaches a log.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.core import RESERVED_TOPICS
from snakka.protocol.error_response import error_response as _error_response  # (*)
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.write_txn_markers_response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)
from snakka.security.authorizer import CLUSTER, AclOperation, Action, AuthorizationResult
from snakka.txn.coordinator import CONSUMER_OFFSETS_TOPIC, TxnMarker

if TYPE_CHECKING:
    from snakka.protocol.messages.write_txn_markers_request import WriteTxnMarkersRequest

API = ApiDeclaration(ApiKey.WRITE_TXN_MARKERS, max_version=1)

log = logging.getLogger("snakka.txn")
# (*) imported under another name: a handler module's own ``error_response`` is taken as its
# override of the generic error answer (protocol/error_response.py).

TopicPartition = tuple[str, int]


def _authorized(ctx: RequestContext) -> bool:
    # Kafka asks for ALTER first without logging its denial, then CLUSTER_ACTION.
    alter = Action(AclOperation.ALTER, CLUSTER, log_if_denied=False)
    if ctx.authorize([alter])[0] is AuthorizationResult.ALLOWED:
        return True
    return ctx.authorize([Action(AclOperation.CLUSTER_ACTION, CLUSTER)])[0] \
        is AuthorizationResult.ALLOWED


def _check_partition(ctx: RequestContext, topic: str, partition: int) -> ErrorCode:
    if topic in RESERVED_TOPICS and topic != CONSUMER_OFFSETS_TOPIC:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    ti = ctx.services.metadata.topics.get(topic)
    if ti is None or not 0 <= partition < ti.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def _response(results: dict[int, dict[TopicPartition, ErrorCode]]) -> WriteTxnMarkersResponse:
    markers = []
    for pid, errors in results.items():
        by_topic: dict[str, list[WritableTxnMarkerPartitionResult]] = {}
        for (topic, p), err in errors.items():
            by_topic.setdefault(topic, []).append(
                WritableTxnMarkerPartitionResult(partition_index=p, error_code=err))
        markers.append(WritableTxnMarkerResult(producer_id=pid, topics=[
            WritableTxnMarkerTopicResult(name=t, partitions=ps) for t, ps in by_topic.items()]))
    return WriteTxnMarkersResponse(markers=markers)


def handle(ctx: RequestContext, req: WriteTxnMarkersRequest
           ) -> WriteTxnMarkersResponse | Coroutine[Any, Any, WriteTxnMarkersResponse]:
    if not _authorized(ctx):
        log.info("principal %s may not write transaction markers (needs ALTER or "
                 "CLUSTER_ACTION on the cluster)", ctx.principal)
        return _error_response(ctx.api_key, ctx.api_version, req,
                               ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    results: dict[int, dict[TopicPartition, ErrorCode]] = {}
    writes: list[list[TxnMarker]] = []  # one list per request marker (one producer each)
    for m in req.markers:
        errors = results.setdefault(m.producer_id, {})
        batch: dict[TopicPartition, TxnMarker] = {}
        producer_error = ErrorCode.INVALID_PRODUCER_ID_MAPPING if m.producer_id < 0 else \
            ErrorCode.INVALID_PRODUCER_EPOCH if m.producer_epoch < 0 else ErrorCode.NONE
        for t in m.topics:
            for p in t.partition_indexes:
                err = producer_error or _check_partition(ctx, t.name, p)
                if err:
                    errors[(t.name, p)] = err
                else:
                    errors.setdefault((t.name, p), ErrorCode.NONE)
                    batch[(t.name, p)] = TxnMarker((t.name, p), m.producer_id,
                                                   m.producer_epoch, bool(m.transaction_result),
                                                   m.coordinator_epoch)
        if batch:
            writes.append(list(batch.values()))
    if not writes:
        return _response(results)
    return _write(ctx, writes, results)


async def _write(ctx: RequestContext, writes: list[list[TxnMarker]],
                 results: dict[int, dict[TopicPartition, ErrorCode]]) -> WriteTxnMarkersResponse:
    # In request order, one producer's markers at a time: the manager's write_markers takes
    # one producer's markers and answers once they are durable (strict mode) or written.
    for markers in writes:
        written = await ctx.services.txns.write_markers(markers)
        for mk in markers:
            results[mk.producer_id][mk.topic_partition] = written.get(
                mk.topic_partition, ErrorCode.UNKNOWN_SERVER_ERROR)
    return _response(results)
