"""AddPartitionsToTxn (24): partitions join a producer's transaction.

v0-3 come from producers: one transaction, its partitions answered one error each. As Kafka's
KafkaApis: if any partition names an unknown topic or partition (UNKNOWN_TOPIC_OR_PARTITION) or
a reserved internal topic (INVALID_TOPIC_EXCEPTION: clients never write those; offsets join a
transaction through AddOffsetsToTxn), nothing is added and every other partition is
OPERATION_NOT_ATTEMPTED; otherwise the coordinator's answer applies to all of them.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2 (KIP-588).

v4+ are Kafka's broker-to-broker form (KIP-890: a partition leader asks the coordinator; a single
node does this internally): a batch of transactions, each either ``VerifyOnly`` (are these
partitions in the transaction? TRANSACTION_ABORTABLE per partition that is not) or an add. They
are served with Kafka's meaning for tools that send them.

Authorization (KafkaApis.handleAddPartitionsToTxnRequest): v0-3 (clients) need WRITE on the
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition) and WRITE on
each topic (TOPIC_AUTHORIZATION_FAILED, the other partitions OPERATION_NOT_ATTEMPTED); v4+
(brokers) need CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._authz import denied_response
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.core import RESERVED_TOPICS
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.add_partitions_to_txn_response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from snakka.txn.coordinator import error_for_version

if TYPE_CHECKING:
    from snakka.protocol.messages.add_partitions_to_txn_request import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
    )

API = ApiDeclaration(ApiKey.ADD_PARTITIONS_TO_TXN)

# From v4 the request is a batch of transactions (the broker-to-broker form).
BATCHED_VERSION = 4

TopicPartition = tuple[str, int]


def _partitions(topics: list[AddPartitionsToTxnTopic]) -> list[TopicPartition]:
    return [(t.name, p) for t in topics for p in t.partitions]


def _results(errors: dict[TopicPartition, ErrorCode]) -> list[AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, p), err in errors.items():
        by_topic.setdefault(topic, []).append(
            AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=err))
    return [AddPartitionsToTxnTopicResult(name=t, results_by_partition=rs)
            for t, rs in by_topic.items()]


def _unknown(ctx: RequestContext, partitions: list[TopicPartition],
             denied: frozenset[str] = frozenset()) -> dict[TopicPartition, ErrorCode]:
    """Kafka's pre-check: partitions that cannot be in a transaction (``denied``: topics the
    client may not WRITE), and the others OPERATION_NOT_ATTEMPTED; empty when every partition
    is fine."""
    topics = ctx.services.metadata.topics
    bad: dict[TopicPartition, ErrorCode] = {}
    for topic, p in partitions:
        ti = topics.get(topic)
        if topic in denied:
            bad[(topic, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic in RESERVED_TOPICS:
            bad[(topic, p)] = ErrorCode.INVALID_TOPIC_EXCEPTION
        elif ti is None or not 0 <= p < ti.partitions:
            bad[(topic, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not bad:
        return {}
    return {tp: bad.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions}


def error_response(req: AddPartitionsToTxnRequest, version: int, code: int,
                   message: str | None) -> AddPartitionsToTxnResponse:
    """Kafka's AddPartitionsToTxnRequest.getErrorResponse: below v4 the error on every
    partition of the request (the response has no top-level error), from v4 the top-level
    error and every partition of every transaction."""
    if version < BATCHED_VERSION:
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_results(
            dict.fromkeys(_partitions(req.v3_and_below_topics), ErrorCode(code))))
    return AddPartitionsToTxnResponse(error_code=code, results_by_transaction=[
        AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=_results(
            dict.fromkeys(_partitions(t.topics), ErrorCode(code))))
        for t in req.transactions])


def handle(ctx: RequestContext, req: AddPartitionsToTxnRequest):
    return _handle(ctx, req)


async def _handle(ctx: RequestContext, req: AddPartitionsToTxnRequest
                  ) -> AddPartitionsToTxnResponse:
    v = ctx.api_version
    txns = ctx.services.txns
    if v < BATCHED_VERSION:
        partitions = _partitions(req.v3_and_below_topics)
        if not ctx.is_allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                              req.v3_and_below_transactional_id):
            return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=
                _results(dict.fromkeys(partitions,
                                       ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)))
        denied = ctx.denied(AclOperation.WRITE, ResourceType.TOPIC,
                            [t for t, _p in partitions if t not in RESERVED_TOPICS])
        errors = _unknown(ctx, partitions, denied)
        if not errors:
            err = await txns.add_partitions(req.v3_and_below_transactional_id,
                                            req.v3_and_below_producer_id,
                                            req.v3_and_below_producer_epoch, partitions)
            err = error_for_version(err, API.api_key, v)
            errors = dict.fromkeys(partitions, err)
        return AddPartitionsToTxnResponse(throttle_time_ms=0,
                                          results_by_topic_v3_and_below=_results(errors))
    # v4+: the broker-to-broker (verification) form, which needs CLUSTER_ACTION.
    if not ctx.is_allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return denied_response(ctx, req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    out = []
    for t in req.transactions:
        partitions = _partitions(t.topics)
        errors = _unknown(ctx, partitions)
        if not errors:
            errors = await txns.verify_or_add(t.transactional_id, t.producer_id,
                                              t.producer_epoch, partitions,
                                              add=not t.verify_only)
        out.append(AddPartitionsToTxnResult(transactional_id=t.transactional_id,
                                            topic_results=_results(errors)))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                      results_by_transaction=out)
