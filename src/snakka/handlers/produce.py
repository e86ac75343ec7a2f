"""Produce (0): validate record batches, check idempotent-producer state, append, acknowledge.

Hot path, per partition: look up the log, validate the batch header and CRC32C (C extension),
let the log assign offsets by patching the header, write the bytes. No per-record Python work
unless a topic config asks for it (``compression.type`` other than ``producer`` recompresses;
``message.timestamp.before/after.max.ms`` checks record timestamps).

Kafka's rules kept here:
- v3+ carries exactly one magic-v2 batch per partition with base offset 0 (INVALID_RECORD
  otherwise, as Kafka); older magic is INVALID_RECORD too. Produce v0-2 are advertised only
  because librdkafka needs them in ApiVersions (KAFKA-18659); they are answered with
  UNSUPPORTED_VERSION.
- acks must be 0, 1 or -1 (INVALID_REQUIRED_ACKS); acks=-1 with ``min.insync.replicas`` > 1
  is NOT_ENOUGH_REPLICAS on a single broker.
- acks=0 gets no response; if anything failed the connection is closed so the client notices
  (Kafka does the same).
- Every record of a batch is checked against its header (count, offset deltas, lengths,
  timestamps; compressed batches are decompressed for it, bounded by
  ``snakka.message.max.uncompressed.bytes``), in C: see snakka.records.walk. A lie is
  INVALID_RECORD, timestamps out of range INVALID_TIMESTAMP, with Kafka's RecordErrors.
- Clients may not write control batches (INVALID_RECORD). A request carrying transactional
  batches is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition, as Kafka answers
  a producer not authorized for a transactional id: snakka has no transaction coordinator yet,
  so no transactional id is usable (FindCoordinator and InitProducerId say the same).
- Clients may not write to a reserved topic (``__consumer_offsets``, ``__cluster_metadata``, ...):
  INVALID_TOPIC_EXCEPTION, as Kafka answers for its internal topics.
- Strict durability (``log.flush.strict=true``): an acks=all response waits until the batch is
  fsynced; with Kafka's ``flush.messages`` reached, any acknowledged write waits. Concurrent
  waiters share one fsync (group commit in storage.flush).
"""

from __future__ import annotations

import logging

from snakka.handlers._common import lookup_log
from snakka.handlers.context import ApiDeclaration, ApiKey
from snakka.metadata.core import RESERVED_TOPICS
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.produce_response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from snakka.records import RecordValidationError
from snakka.storage import ProducerStateError
from snakka.topic_policy import maybe_recompress

API = ApiDeclaration(ApiKey.PRODUCE)

log = logging.getLogger("snakka.produce")

_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTRIBUTES_OFFSET = 21  # of a v2 batch; see snakka.records.batch
TRANSACTIONS_UNSUPPORTED = ("Transactions are not supported by this broker: snakka has no "
                            "transaction coordinator yet, so no transactional id can be used")


def _error(index: int, code: int, message: str | None = None,
           record_errors=()) -> PartitionProduceResponse:
    return PartitionProduceResponse(
        index=index, error_code=code, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
        record_errors=[BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                       for i, m in record_errors],
        error_message=message)


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


def _append_partition(broker, topic: str, partition: int, records, acks: int, waits: list,
                      max_uncompressed: int):
    if topic in RESERVED_TOPICS:
        # Before the lookup, as Kafka's ReplicaManager: only a coordinator writes these, and
        # a missing one is no different to a client.
        return _error(partition, ErrorCode.INVALID_TOPIC_EXCEPTION,
                      f"Cannot append to internal topic {topic}")
    pl, err = lookup_log(broker, topic, partition)
    if pl is None:
        return _error(partition, err)
    if records is None or len(records) == 0:
        return _error(partition, ErrorCode.INVALID_RECORD,
                      "Produce request must carry exactly one record batch per partition")
    cfg = pl.config
    if acks == -1 and cfg.min_insync_replicas > 1:
        return _error(partition, ErrorCode.NOT_ENOUGH_REPLICAS,
                      f"min.insync.replicas={cfg.min_insync_replicas} but only 1 replica exists")
    try:
        # The decoded records are a writable view into this request's own frame buffer: the log
        # patches offsets into it and writes it as is, so the batch is never copied. (A
        # read-only buffer, e.g. from a test, is copied once.)
        buf = records if isinstance(records, memoryview) and not records.readonly \
            else bytearray(records)
        # Header, CRC32C, size, every record (C walk) and the topic's timestamp limits.
        infos = pl.validate(buf, max_uncompressed_bytes=max_uncompressed)
        if len(infos) != 1:
            return _error(partition, ErrorCode.INVALID_RECORD,
                          "Produce requests with version 3 and above must have exactly one "
                          "record batch per partition")
        attrs = infos[0].header.attributes
        if attrs & _ATTR_CONTROL:
            return _error(partition, ErrorCode.INVALID_RECORD,
                          "Clients are not allowed to write control records")
        if cfg.compression_type != "producer":
            buf, infos = maybe_recompress(cfg.compression_type, buf, infos,
                                          max_message_bytes=cfg.max_message_bytes)
        result = pl.append(buf, infos)
    except RecordValidationError as e:
        return _error(partition, e.error_code, e.message, e.record_errors)
    except ProducerStateError as e:  # with the log start offset, as Kafka (KIP-360 clients)
        r = _error(partition, e.error_code, str(e))
        r.log_start_offset = pl.log_start_offset
        return r
    except OSError as e:  # the disk failed under this partition: Kafka's storage error
        log.error("append to %s-%d failed: %s", topic, partition, e)
        return _error(partition, ErrorCode.KAFKA_STORAGE_ERROR, "Disk error when appending")
    if not result.duplicate:
        broker.notify_append(topic, partition)
        flusher = broker.flusher
        # Strict mode (log.flush.strict): acks=all waits for fsync. Kafka's flush.messages:
        # once that many messages are unflushed, the write is fsynced before it is answered.
        if acks != 0 and ((acks == -1 and flusher.strict)
                          or pl.unflushed_messages >= cfg.flush_messages):
            waits.append((pl, result.last_offset + 1))
        else:
            flusher.on_append(pl)
    return PartitionProduceResponse(
        index=partition, error_code=0, base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time_ms, log_start_offset=result.log_start_offset,
        record_errors=[], error_message=None)


def handle(ctx, req):
    broker = ctx.broker
    v = ctx.api_version
    acks = req.acks
    waits: list = []
    topics_out = []
    failed = False
    by_id = v >= 13
    max_uncompressed = broker.config.int("snakka.message.max.uncompressed.bytes")
    txn_refused = _has_transactional_batch(req)
    if txn_refused:
        log.info("refused a produce request with transactional batches (transactional.id %r): "
                 "transactions are not supported", req.transactional_id)
    for t in req.topic_data:
        if by_id:
            ti = broker.metadata.topics_by_id.get(t.topic_id)
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
                r = _append_partition(broker, name, p.index, p.records, acks, waits,
                                      max_uncompressed)
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
    return _after_flush(broker, waits, response)


async def _after_flush(broker, waits, response):
    for pl, last_offset in waits:
        await broker.flusher.flush_through(pl, last_offset)
    return response
