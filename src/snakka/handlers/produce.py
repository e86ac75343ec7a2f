"""Produce (0): the request-level rules; each partition's append is the replica manager's.

Here: versions, ``acks``, topic ids, transactional batches, the response and acks=0 closing.
Per partition, ``ReplicaManager.append_records`` decides the rest (validation, reserved topics,
``min.insync.replicas``, producer state, offsets, durability): see snakka.replica.manager.

Kafka's rules kept here:
- Produce v0-2 are advertised only because librdkafka needs them in ApiVersions (KAFKA-18659);
  they are answered with UNSUPPORTED_VERSION (message formats v0/v1 are not stored).
- acks must be 0, 1 or -1 (INVALID_REQUIRED_ACKS).
- acks=0 gets no response; if anything failed the connection is closed so the client notices
  (Kafka does the same).
- Transactional batches (KIP-98, KIP-890): a request carrying them without a transactional id
  is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition, one with batches of two
  producers INVALID_PRODUCER_ID_MAPPING (Kafka's checks). Otherwise each partition that does not
  already hold this producer's open transaction is verified with the transaction coordinator
  (``services.txns``): below v12 it must have been added (AddPartitionsToTxn), else
  INVALID_TXN_STATE (TRANSACTION_ABORTABLE from v11), so a producer cannot leave a transaction
  hanging in a partition its coordinator does not know; v12+ (Transactions V2) adds it. A fenced
  producer gets INVALID_PRODUCER_EPOCH; a coordinator busy completing the previous transaction
  gets the retriable NOT_ENOUGH_REPLICAS, as Kafka answers.
- Authorization (KafkaApis.handleProduceRequest): a request with transactional batches needs
  WRITE on its transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole
  request); every topic needs WRITE (else TOPIC_AUTHORIZATION_FAILED for its partitions). An
  idempotent producer needs nothing more here (IDEMPOTENT_WRITE is checked at InitProducerId).
- Strict durability (``log.flush.strict=true``, or a topic's ``flush.messages`` reached): the
  replica manager marks the appends that must be fsynced before the answer, and the response
  waits for them (``ReplicaManager.durable``; concurrent waiters share one fsync).
"""

from __future__ import annotations

import inspect
import logging
import struct
from typing import TYPE_CHECKING

from snakka.handlers._authz import denied_response
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.produce_response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from snakka.records.batch import ATTRIBUTES_OFFSET, PRODUCER_ID_OFFSET
from snakka.replica.manager import AppendResult
from snakka.security.authorizer import AclOperation, ResourceType
from snakka.txn.coordinator import leader_verification_error

if TYPE_CHECKING:
    from snakka.protocol.messages.produce_request import ProduceRequest

API = ApiDeclaration(ApiKey.PRODUCE)

log = logging.getLogger("snakka.produce")

_ATTR_TRANSACTIONAL = 0x10
_PID_EPOCH = struct.Struct(">qh")
# Produce v11+ understand TRANSACTION_ABORTABLE (KIP-890); older ones get INVALID_TXN_STATE.
TRANSACTION_ABORTABLE_VERSION = 11
# Produce v12+ are Transactions V2: the partition joins the transaction implicitly.
IMPLICIT_ADD_VERSION = 12
_RETRIABLE_VERIFICATION = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR})


def _response(index: int, r: AppendResult) -> PartitionProduceResponse:
    return PartitionProduceResponse(
        index=index, error_code=r.error_code, base_offset=r.base_offset,
        log_append_time_ms=r.log_append_time_ms, log_start_offset=r.log_start_offset,
        record_errors=[BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                       for i, m in r.record_errors],
        error_message=r.error_message)


def _error(index: int, code: int, message: str | None = None) -> PartitionProduceResponse:
    return _response(index, AppendResult(error_code=code, error_message=message))


TxnBatches = dict[tuple[int, int], tuple[int, int]]


def _transactional_batches(req: ProduceRequest) -> TxnBatches:
    """(topic position, partition index) -> (producer id, epoch) of each partition whose batch
    is transactional (Kafka checks each partition's first batch; a second batch is refused
    anyway: one batch per partition)."""
    out: TxnBatches = {}
    for i, t in enumerate(req.topic_data):
        for p in t.partition_data:
            r = p.records
            if r is not None and len(r) >= PRODUCER_ID_OFFSET + _PID_EPOCH.size \
                    and r[ATTRIBUTES_OFFSET + 1] & _ATTR_TRANSACTIONAL:
                pid, epoch = _PID_EPOCH.unpack_from(r, PRODUCER_ID_OFFSET)
                out[(i, p.index)] = (pid, epoch)
    return out


def _every_partition(req: ProduceRequest) -> list[tuple[int, int]]:
    return [(i, p.index) for i, t in enumerate(req.topic_data) for p in t.partition_data]


def _verification_error(err: ErrorCode, version: int) -> tuple[int, str | None]:
    """Kafka's translation of the coordinator's verification answer for a producer
    (ReplicaManager.handleProduceAppend and AddPartitionsToTxnManager)."""
    err = leader_verification_error(err, version >= TRANSACTION_ABORTABLE_VERSION)
    if err == ErrorCode.INVALID_TXN_STATE:  # Kafka's message; TRANSACTION_ABORTABLE has none
        return err, "Partition was not added to the transaction"
    if err in _RETRIABLE_VERIFICATION:
        # Older clients do not all retry these on Produce: NOT_ENOUGH_REPLICAS makes every
        # client retry without a metadata refresh (Kafka's choice).
        return ErrorCode.NOT_ENOUGH_REPLICAS, ("Unable to verify the partition has been added "
                                               f"to the transaction. Underlying error: "
                                               f"{ErrorCode(err).name}")
    return err, None


def handle(ctx: RequestContext, req: ProduceRequest):
    txn = _transactional_batches(req)
    if not txn:
        return _produce(ctx, req, {})
    if req.transactional_id is not None and not ctx.is_allowed(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return denied_response(ctx, req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if req.transactional_id is None:
        log.info("refused a produce request with transactional batches but no transactional "
                 "id from %s", ctx.connection.peer)
        # Kafka answers the whole request, the partitions without such batches too.
        return _produce(ctx, req, dict.fromkeys(_every_partition(req), (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)))
    if len(set(txn.values())) > 1:
        # Kafka: InvalidPidMappingException for the whole request.
        return _produce(ctx, req, dict.fromkeys(_every_partition(req), (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            "Transactional records contained more than one producer ID")))
    return _verify_then_produce(ctx, req, txn)


async def _verify_then_produce(ctx: RequestContext, req: ProduceRequest, txn: TxnBatches):
    """KIP-890: a transactional batch is appended only to a partition that is in the
    producer's ongoing transaction (verified with the coordinator unless the partition already
    holds this producer's open transaction); Produce v12+ (Transactions V2) adds it instead."""
    services = ctx.services
    v = ctx.api_version
    pid, epoch = next(iter(txn.values()))
    names = [_topic_name(services, t, v) for t in req.topic_data]
    denied = _denied_topics(ctx, names)
    need: dict[tuple[str, int], tuple[int, int]] = {}
    for key in txn:
        name = names[key[0]]
        if name is not None and name not in denied and \
                not services.replicas.has_ongoing_transaction(
                name, key[1], pid, epoch):
            need[(name, key[1])] = key
    refused: dict[tuple[int, int], tuple[int, str | None]] = {}
    if need:
        errors = await services.txns.verify_or_add(
            req.transactional_id or "", pid, epoch, list(need), add=v >= IMPLICIT_ADD_VERSION)
        for tp, err in errors.items():
            if err != ErrorCode.NONE:
                refused[need[tp]] = _verification_error(err, v)
    result = _produce(ctx, req, refused)
    return await result if inspect.isawaitable(result) else result


def _topic_name(services, t, version: int) -> str | None:
    if version >= 13:
        ti = services.metadata.topics_by_id.get(t.topic_id)
        return ti.name if ti else None
    return t.name


def _denied_topics(ctx: RequestContext, names) -> frozenset[str]:
    """The topics this producer may not WRITE (one authorizer call for the request; nothing
    at all with the allow-all authorizer). Unknown topic ids (None) are answered
    UNKNOWN_TOPIC_ID, never authorized."""
    if ctx.allows_everything:
        return frozenset()
    return ctx.denied(AclOperation.WRITE, ResourceType.TOPIC, [n for n in names if n is not None])


def _produce(ctx: RequestContext, req: ProduceRequest,
             refused: dict[tuple[int, int], tuple[int, str | None]]):
    """Append every partition not in ``refused`` ((topic position, partition) -> error and
    message), answer the rest with their errors. Topics the principal may not WRITE are
    answered TOPIC_AUTHORIZATION_FAILED (before any existence check, as Kafka)."""
    services = ctx.services
    v = ctx.api_version
    acks = req.acks
    waits: list = []
    topics_out = []
    failed = False
    replicas = services.replicas
    denied = frozenset() if ctx.allows_everything else _denied_topics(
        ctx, [_topic_name(services, t, v) for t in req.topic_data])
    for i, t in enumerate(req.topic_data):
        name = _topic_name(services, t, v)
        if denied and name in denied:
            refused.update(((i, p.index), (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
                           for p in t.partition_data if (i, p.index) not in refused)
        parts = []
        for p in t.partition_data:
            if acks not in (0, 1, -1):
                r = _error(p.index, ErrorCode.INVALID_REQUIRED_ACKS)
            elif v < 3:
                r = _error(p.index, ErrorCode.UNSUPPORTED_VERSION,
                           "Produce v0-2 (message formats v0/v1) are not supported")
            elif (i, p.index) in refused:
                r = _error(p.index, *refused[(i, p.index)])
            elif name is None:
                r = _error(p.index, ErrorCode.UNKNOWN_TOPIC_ID)
            else:
                result = replicas.append_records(name, p.index, p.records, acks)
                if result.mark is not None:
                    waits.append(result.mark)
                r = _response(p.index, result)
            if r.error_code:
                failed = True
            parts.append(r)
        # Fields a version lacks are skipped by the codec: name for v13+, topic_id before.
        topics_out.append(TopicProduceResponse(name=name or "", topic_id=t.topic_id,
                                               partition_responses=parts))
    if acks == 0:
        if failed:
            ctx.connection.close_with_error("acks=0 produce failed; closing so the client notices")
        return None
    response = ProduceResponse(responses=topics_out, throttle_time_ms=0)
    if not waits:
        return response
    return _after_flush(replicas, waits, response)


async def _after_flush(replicas, waits, response):
    await replicas.durable(waits)
    return response
