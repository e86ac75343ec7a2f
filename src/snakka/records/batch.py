"""Kafka magic-v2 record batches handled as bytes: header parsing, produce-time
validation, in-place offset assignment.

What this module owns
    The 61-byte v2 batch header (layout below), the checks a broker makes on the
    records bytes of a Produce request before appending them (Kafka's
    ``ProduceRequest.validateRecords`` + ``UnifiedLog.analyzeAndValidateRecords`` +
    ``LogValidator.validateBatch``), and patching a validated buffer in place with the
    offsets, partition leader epoch and (for ``LogAppendTime`` topics) the broker's
    timestamp.

Performance discipline
    This is the produce hot path. Python work is per *batch*, never per record: one
    ``struct.unpack_from`` of the header, one CRC32C (C extension, over a memoryview:
    no copy) and one record walk (C extension, :mod:`snakka.records.walk`) per batch;
    a compressed batch is decompressed once (cramjam, bounded) for the walk and stored
    as it came. Record-level decoding into Python objects lives in
    :mod:`snakka.records.record` and is only for tools, tests and features that truly
    need it.

Threading
    Pure functions over buffers; callable from any thread. ``assign_offsets`` mutates
    the caller's ``bytearray``: the caller must own it.

Header layout (all big-endian)::

     0 baseOffset int64        | 8 batchLength int32      | 12 partitionLeaderEpoch int32
    16 magic int8              | 17 crc uint32 (CRC32C over bytes 21..end of batch)
    21 attributes int16        | 23 lastOffsetDelta int32 | 27 baseTimestamp int64
    35 maxTimestamp int64      | 43 producerId int64      | 51 producerEpoch int16
    53 baseSequence int32      | 57 recordsCount int32    | 61 records...

``batchLength`` counts the bytes after the length field, so a batch occupies
``batchLength + 12`` bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from snakka.limits import DEFAULT_MAX_UNCOMPRESSED_BYTES, INT32_MAX, MAX_RECORD_ERROR_MESSAGES
from snakka.util.crc32c import crc32c

from .compression import COMPRESSION_NONE, COMPRESSION_ZSTD, CompressionError
from .walk import decompress_records, timestamp_bounds, walk_records

# Kafka error codes used here. They mirror snakka.protocol.errors.ErrorCode (an IntEnum,
# so plain ints compare equal); kept local so this low layer imports nothing above it.
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_TIMESTAMP = 32
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of a batch not counted by batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a v2 batch with no records
MAGIC_V2 = 2

# Field offsets inside a batch (see module docstring).
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57

# Attribute bits.
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == HEADER_SIZE
_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength: enough to step over a batch
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    """The 61-byte v2 batch header, field names as in Kafka's DefaultRecordBatch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies (header included)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at Int32.MAX like Kafka."""
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap to 0 after Int32.MAX."""
    if sequence < 0:
        return sequence  # NO_SEQUENCE stays -1
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


_make_header = BatchHeader._make


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the v2 header at ``buf[pos:pos+61]`` (no validation; raises struct.error
    if fewer than 61 bytes are available)."""
    return _make_header(_HEADER.unpack_from(buf, pos))


class BatchInfo(NamedTuple):
    """A validated batch inside a Produce request's records buffer."""

    position: int  # offset of the batch inside the buffer
    header: BatchHeader


class RecordValidationError(Exception):
    """The records of a produce request are invalid; ``error_code`` is the Kafka error
    code to answer the partition with, ``record_errors`` the (batch index, message) pairs
    Kafka reports per record (Produce v8+ RecordErrors) where it gives them."""

    def __init__(self, error_code: int, message: str,
                 record_errors: Sequence[tuple[int, str | None]] = ()) -> None:
        super().__init__(message)
        self.error_code = int(error_code)
        self.message = message
        self.record_errors = list(record_errors)

    def __repr__(self) -> str:
        return f"RecordValidationError({self.error_code}, {self.message!r})"


def batch_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC32C of a batch's checksummed part (attributes .. end)."""
    with memoryview(buf) as mv:
        return crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])




def validate_batches(
    buf: bytes | bytearray | memoryview,
    *,
    max_message_bytes: int,
    from_client: bool = True,
    now_ms: int | None = None,
    timestamp_before_max_ms: int | None = None,
    timestamp_after_max_ms: int | None = None,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    compacted_topic_partition: str | None = None,
) -> list[BatchInfo]:
    """Validate the records bytes of one partition of a Produce request.

    Returns one :class:`BatchInfo` per batch, or raises :class:`RecordValidationError`
    with the error code a Kafka 4 broker answers. Never raises anything else, whatever
    the input.

    Checks, in Kafka's order:

    * structure: at least one complete batch (else INVALID_RECORD 87, as Kafka's
      "must have at least one record batch"); a length below the v0 minimum (14) or a
      magic byte outside 0..2 is CORRUPT_MESSAGE 2; bytes after the last complete
      batch are CORRUPT_MESSAGE 2 (Kafka silently trims them; we refuse rather than
      guess);
    * magic must be 2 (Kafka 4 accepts only v2 on Produce v3+): INVALID_RECORD 87;
      a v2 batch shorter than its 61-byte header: CORRUPT_MESSAGE 2;
    * client rules (``from_client``; Kafka's ``AppendOrigin.CLIENT``): exactly one
      batch, baseOffset 0, no control batches, an idempotent batch has
      baseSequence >= 0; all INVALID_RECORD 87;
    * size > ``max_message_bytes`` (topic ``max.message.bytes``): MESSAGE_TOO_LARGE 10;
    * CRC32C mismatch: CORRUPT_MESSAGE 2;
    * compression id 5..7: UNSUPPORTED_COMPRESSION_TYPE 76 (Kafka fails with an
      unknown server error there; 76 tells the client what is wrong);
    * recordsCount > 0 and lastOffsetDelta + 1 == recordsCount: INVALID_RECORD 87;
    * the records themselves (Kafka's LogValidator reads every record; so do we, in C:
      :func:`snakka.records.walk.walk_records`): exactly recordsCount well-formed records
      filling the batch to its last byte, offset deltas 0..count-1, every length inside
      its record. A compressed batch is decompressed for this (bounded by
      ``max_uncompressed_bytes``). Any violation is INVALID_RECORD 87 (data a codec
      cannot decompress, or that expands beyond the bound, too: retrying cannot help);
    * timestamps, only when ``now_ms`` is given (CreateTime topics): every record's
      timestamp against ``message.timestamp.before.max.ms`` / ``after.max.ms``, as
      Kafka: INVALID_TIMESTAMP 32 with one RecordError per record out of range;
    * keys, only when ``compacted_topic_partition`` (``"topic-partition"``) is given (a
      topic whose ``cleanup.policy`` includes ``compact``): a record without a key is
      INVALID_RECORD 87 with a RecordError "Compacted topic cannot accept message without
      key in topic partition T-P" (Kafka's LogValidator.validateKey). Checked in the same
      C walk, so it costs one branch per record. A record's key error takes precedence
      over its timestamp error; with both kinds in one batch the answer is
      INVALID_TIMESTAMP listing every bad record, as Kafka's processRecordErrors.

    The returned header's ``max_timestamp`` is the records' true maximum (Kafka
    overwrites the producer's claim); :func:`assign_offsets` writes it back when it
    differs.
    """
    try:
        return _validate(
            buf,
            max_message_bytes,
            from_client,
            now_ms,
            timestamp_before_max_ms,
            timestamp_after_max_ms,
            max_uncompressed_bytes,
            compacted_topic_partition,
        )
    except RecordValidationError:
        raise
    except Exception as exc:  # noqa: BLE001 - contract: garbage never escapes as anything else
        raise RecordValidationError(CORRUPT_MESSAGE, f"malformed record batch: {exc!r}") from exc


def _validate(
    buf: bytes | bytearray | memoryview,
    max_message_bytes: int,
    from_client: bool,
    now_ms: int | None,
    before_max: int | None,
    after_max: int | None,
    max_uncompressed: int,
    compacted_tp: str | None,
) -> list[BatchInfo]:
    total = len(buf)
    infos: list[BatchInfo] = []
    pos = 0
    # Pass 1: structure only, so that "one batch" and "magic" are judged the way Kafka's
    # batch iterator sees the buffer, before anything else.
    while pos < total:
        remaining = total - pos
        if remaining < LOG_OVERHEAD + 5:  # need batchLength and the magic byte
            if not infos and from_client:
                raise RecordValidationError(
                    INVALID_RECORD, "produce request must have at least one record batch"
                )
            raise RecordValidationError(
                CORRUPT_MESSAGE, f"{remaining} trailing bytes after the last record batch"
            )
        batch_length = _INT32.unpack_from(buf, pos + LENGTH_OFFSET)[0]
        magic = buf[pos + MAGIC_OFFSET]
        if batch_length < 14:
            raise RecordValidationError(
                CORRUPT_MESSAGE,
                f"record size {batch_length} is less than the minimum record overhead (14)",
            )
        if magic > MAGIC_V2:
            raise RecordValidationError(CORRUPT_MESSAGE, f"invalid magic {magic} in record batch")
        if batch_length + LOG_OVERHEAD > remaining:
            if not infos and from_client:
                raise RecordValidationError(
                    INVALID_RECORD,
                    "produce request must have at least one record batch "
                    f"(batch of {batch_length + LOG_OVERHEAD} bytes, only {remaining} present)",
                )
            raise RecordValidationError(
                CORRUPT_MESSAGE,
                f"record batch at {pos} declares {batch_length + LOG_OVERHEAD} bytes, "
                f"only {remaining} present",
            )
        if magic != MAGIC_V2:
            raise RecordValidationError(
                INVALID_RECORD,
                f"produce requests are only allowed to contain record batches with magic "
                f"version 2 (got {magic})",
            )
        if batch_length < MIN_BATCH_LENGTH:
            raise RecordValidationError(
                CORRUPT_MESSAGE,
                f"record batch size {batch_length + LOG_OVERHEAD} is smaller than the "
                f"minimum allowed overhead {HEADER_SIZE}",
            )
        infos.append(BatchInfo(pos, _make_header(_HEADER.unpack_from(buf, pos))))
        pos += batch_length + LOG_OVERHEAD

    if not infos:
        raise RecordValidationError(
            INVALID_RECORD, "produce request must have at least one record batch"
        )
    if from_client and len(infos) > 1:
        raise RecordValidationError(
            INVALID_RECORD, "produce requests are only allowed to contain exactly one record batch"
        )

    with memoryview(buf) as mv:
        for idx, info in enumerate(infos):
            h = info.header
            p = info.position
            size = h.batch_length + LOG_OVERHEAD
            if from_client and h.base_offset != 0:
                raise RecordValidationError(
                    INVALID_RECORD,
                    f"the baseOffset of the record batch should be 0, but it is {h.base_offset}",
                )
            if size > max_message_bytes:
                raise RecordValidationError(
                    MESSAGE_TOO_LARGE,
                    f"the record batch size is {size} bytes which exceeds the maximum "
                    f"configured value of {max_message_bytes}",
                )
            crc = crc32c(mv[p + ATTRIBUTES_OFFSET : p + size])
            if crc != h.crc:
                raise RecordValidationError(
                    CORRUPT_MESSAGE,
                    f"record is corrupt (stored crc = {h.crc}, computed crc = {crc})",
                )
            attributes = h.attributes
            if attributes & COMPRESSION_MASK > COMPRESSION_ZSTD:
                raise RecordValidationError(
                    UNSUPPORTED_COMPRESSION_TYPE,
                    f"unknown compression type id {attributes & COMPRESSION_MASK}",
                )
            count = h.records_count
            if count <= 0:
                raise RecordValidationError(
                    INVALID_RECORD, f"invalid reported count for record batch: {count}"
                )
            if h.last_offset_delta + 1 != count:
                raise RecordValidationError(
                    INVALID_RECORD,
                    f"inconsistent batch offset range [0, {h.last_offset_delta}] and count "
                    f"of records {count}",
                )
            if from_client:
                if attributes & CONTROL_MASK:
                    raise RecordValidationError(
                        INVALID_RECORD, "clients are not allowed to write control records"
                    )
                if h.producer_id >= 0 and h.base_sequence < 0:
                    raise RecordValidationError(
                        INVALID_RECORD,
                        f"invalid sequence number {h.base_sequence} in record batch with "
                        f"producerId {h.producer_id}",
                    )
            max_ts = _walk(mv, p, size, h, now_ms, before_max, after_max, max_uncompressed,
                           compacted_tp)
            if max_ts != h.max_timestamp:
                infos[idx] = BatchInfo(p, h._replace(max_timestamp=max_ts))
    return infos


def _walk(
    mv: memoryview,
    p: int,
    size: int,
    h: BatchHeader,
    now_ms: int | None,
    before_max: int | None,
    after_max: int | None,
    max_uncompressed: int,
    compacted_tp: str | None,
) -> int:
    """Walk the records of the batch at ``p`` (see :mod:`snakka.records.walk`); return the
    true max timestamp or raise RecordValidationError."""
    codec = h.attributes & COMPRESSION_MASK
    if codec == COMPRESSION_NONE:
        section, start, end = mv, p + HEADER_SIZE, p + size
    else:
        try:
            section = decompress_records(codec, mv[p + HEADER_SIZE : p + size], max_uncompressed)
        except CompressionError as exc:
            raise RecordValidationError(INVALID_RECORD, f"{exc} (record batch at {p})") from None
        start, end = 0, len(section)
    log_append_flag = bool(h.attributes & TIMESTAMP_TYPE_MASK)
    check = now_ms is not None and not log_append_flag
    lo, hi = timestamp_bounds(now_ms, before_max, after_max) if now_ms is not None else (0, 0)
    try:
        max_ts, bad, keyless = walk_records(section, start, end, h.records_count,
                                            h.base_timestamp, check, lo, hi,
                                            compacted_tp is not None)
    except ValueError as exc:
        raise RecordValidationError(INVALID_RECORD, f"invalid record batch: {exc}") from None
    if log_append_flag:
        # Every record of a batch flagged LogAppendTime reads as the batch's maxTimestamp
        # (Kafka's DefaultRecordBatch), so that is the one timestamp to check.
        max_ts = h.max_timestamp
        if now_ms is not None and max_ts != NO_TIMESTAMP and not lo <= max_ts <= hi:
            skip = set(keyless or ())  # a key error takes precedence (Kafka's validateRecord)
            bad = [i for i in range(h.records_count) if i not in skip]
    if bad or keyless:
        _raise_record_errors(bad or [], keyless or [], lo, hi, compacted_tp)
    return max_ts


def _raise_record_errors(bad_ts: list[int], keyless: list[int], lo: int, hi: int,
                         compacted_tp: str | None) -> None:
    """Kafka's LogValidator.processRecordErrors: one RecordError per bad record in index
    order (only the first MAX_RECORD_ERROR_MESSAGES carry a message); INVALID_TIMESTAMP if any
    record's timestamp is out of range, else INVALID_RECORD with Kafka's summary message."""
    why_ts = f"out of range: the timestamp should be within [{lo}, {hi}]"
    why_key = f"Compacted topic cannot accept message without key in topic partition {compacted_tp}"
    key_set = set(keyless)
    errors = [(i, (why_key if i in key_set else f"Timestamp of record {i} is {why_ts}")
               if n < MAX_RECORD_ERROR_MESSAGES else None)
              for n, i in enumerate(sorted(key_set.union(bad_ts)))]
    if bad_ts:
        raise RecordValidationError(
            INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp",
            errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise RecordValidationError(
        INVALID_RECORD,
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]",
        errors)


def assign_offsets(
    buf: bytearray | memoryview,
    infos: Sequence[BatchInfo],
    base_offset: int,
    log_append_time_ms: int | None,
    partition_leader_epoch: int = 0,
) -> int:
    """Patch validated batches in place and return the last assigned offset.

    Each batch gets its baseOffset (consecutive from ``base_offset``) and the partition
    leader epoch; neither is covered by the CRC, so this costs two ``pack_into`` per
    batch. For a ``LogAppendTime`` topic (``log_append_time_ms`` not None) the
    timestampType bit and maxTimestamp are set and the CRC recomputed (one CRC32C pass,
    C speed). For a ``CreateTime`` topic a batch that claims ``LogAppendTime`` is turned
    back to CreateTime, and a maxTimestamp that is not the records' maximum is corrected
    (CRC recomputed), as Kafka's LogValidator does.

    ``infos`` must come from :func:`validate_batches` on this same buffer (the header
    values in ``infos`` are not updated).
    """
    offset = base_offset
    for info in infos:
        pos = info.position
        h = info.header
        _INT64.pack_into(buf, pos, offset)
        _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
        attributes = h.attributes
        if log_append_time_ms is not None:
            _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
            _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, log_append_time_ms)
            _rewrite_crc(buf, pos, h.batch_length + LOG_OVERHEAD)
        elif attributes & TIMESTAMP_TYPE_MASK:
            _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes & ~TIMESTAMP_TYPE_MASK)
            _rewrite_crc(buf, pos, h.batch_length + LOG_OVERHEAD)
        elif _INT64.unpack_from(buf, pos + MAX_TIMESTAMP_OFFSET)[0] != h.max_timestamp:
            # The producer's maxTimestamp was not its records' maximum (validate_batches
            # computed the true one): store the fact, as Kafka's LogValidator does.
            _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, h.max_timestamp)
            _rewrite_crc(buf, pos, h.batch_length + LOG_OVERHEAD)
        offset += h.last_offset_delta + 1
    return offset - 1


def _rewrite_crc(buf: bytearray | memoryview, pos: int, size: int) -> None:
    with memoryview(buf) as mv:
        crc = crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc)


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Patch one batch's baseOffset (not covered by the CRC)."""
    _INT64.pack_into(buf, pos, base_offset)


def read_prefix(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """(baseOffset, batchLength) at ``pos``: the 12 bytes needed to step over a batch."""
    return _PREFIX.unpack_from(buf, pos)


