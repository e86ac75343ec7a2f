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
- A request carrying transactional batches is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED on
  every partition, as Kafka answers a producer not authorized for a transactional id: snakka has
  no transaction coordinator yet, so no transactional id is usable (FindCoordinator and
  InitProducerId say the same).
- Strict durability (``log.flush.strict=true``, or a topic's ``flush.messages`` reached): the
  replica manager marks the appends that must be fsynced before the answer, and the response
  waits for them (``ReplicaManager.durable``; concurrent waiters share one fsync).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.produce_response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from snakka.replica.manager import AppendResult

if TYPE_CHECKING:
    from snakka.protocol.messages.produce_request import ProduceRequest

API = ApiDeclaration(ApiKey.PRODUCE)

log = logging.getLogger("snakka.produce")

_ATTR_TRANSACTIONAL = 0x10
_ATTRIBUTES_OFFSET = 21  # of a v2 batch; see snakka.records.batch
TRANSACTIONS_UNSUPPORTED = ("Transactions are not supported by this broker: snakka has no "
                            "transaction coordinator yet, so no transactional id can be used")


def _response(index: int, r: AppendResult) -> PartitionProduceResponse:
    return PartitionProduceResponse(
        index=index, error_code=r.error_code, base_offset=r.base_offset,
        log_append_time_ms=r.log_append_time_ms, log_start_offset=r.log_start_offset,
        record_errors=[BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                       for i, m in r.record_errors],
        error_message=r.error_message)


def _error(index: int, code: int, message: str | None = None) -> PartitionProduceResponse:
    return _response(index, AppendResult(error_code=code, error_message=message))


def _has_transactional_batch(req) -> bool:
    """Kafka's ProduceRequest transactional check, on each partition's first batch (a second
    batch is refused anyway: one batch per partition)."""
    for t in req.topic_data:
        for p in t.partition_data:
            r = p.records
            if r is not None and len(r) > _ATTRIBUTES_OFFSET + 1 \
                    and r[_ATTRIBUTES_OFFSET + 1] & _ATTR_TRANSACTIONAL:
                return True
    return False


def handle(ctx: RequestContext, req: ProduceRequest):
    services = ctx.services
    v = ctx.api_version
    acks = req.acks
    waits: list = []
    topics_out = []
    failed = False
    by_id = v >= 13
    replicas = services.replicas
    txn_refused = _has_transactional_batch(req)
    if txn_refused:
        log.info("refused a produce request with transactional batches (transactional.id %r): "
                 "transactions are not supported", req.transactional_id)
    for t in req.topic_data:
        if by_id:
            ti = services.metadata.topics_by_id.get(t.topic_id)
            name = ti.name if ti else None
        else:
            name = t.name
        parts = []
        for p in t.partition_data:
            if acks not in (0, 1, -1):
                r = _error(p.index, ErrorCode.INVALID_REQUIRED_ACKS)
            elif v < 3:
                r = _error(p.index, ErrorCode.UNSUPPORTED_VERSION,
                           "Produce v0-2 (message formats v0/v1) are not supported")
            elif txn_refused:
                r = _error(p.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           TRANSACTIONS_UNSUPPORTED)
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
