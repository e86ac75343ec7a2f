"""Record-level view of v2 batches: decode (``iter_records``) and build (``build_batch``).

What this module owns
    The v2 record encoding inside a batch (zigzag varints), decompression on read, and a
    batch builder that writes exactly what Kafka's own clients write. Used by tools,
    tests, the group/transaction coordinators (which write their own batches), Spark
    decoding, and the few storage paths that must look at records (ListOffsets by
    timestamp). NOT used on the produce/fetch hot paths, which stay per-batch.

Record layout (inside the batch's records section, possibly compressed)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value |
    headerCount varint | (headerKeyLength varint | key utf-8 |
                          headerValueLength varint (-1 = null) | value) * headerCount

Timestamps: a record's timestamp is ``baseTimestamp + timestampDelta``, except in a
``LogAppendTime`` batch, where every record reports the batch's maxTimestamp (Kafka's
DefaultRecordBatch does the same).

Threading
    Pure functions; callable from any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from snakka.util.crc32c import crc32c

from .batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CORRUPT_MESSAGE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    RecordValidationError,
    parse_header,
)
from .compression import COMPRESSION_NONE, CompressionError, compress, decompress

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One record as a consumer sees it."""

    offset: int = 0
    timestamp: int = NO_TIMESTAMP
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[Header, ...] | list[Header] = ()


# ---------------------------------------------------------------- varints


def encode_varint(value: int) -> bytes:
    """Zigzag varint (Kafka's ByteUtils.writeVarint / writeVarlong)."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v & ~0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint/varlong at ``pos``; returns (value, next position)."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint is longer than 10 bytes")


# ---------------------------------------------------------------- reading


def iter_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> Iterator[tuple[BatchHeader, int]]:
    """Yield ``(header, position)`` for each complete v2 batch in ``buf``.

    A trailing partial batch (as in a Fetch response cut at max_bytes) ends the
    iteration silently, as in consumers. Corruption raises
    :class:`RecordValidationError` (CORRUPT_MESSAGE)."""
    total = len(buf)
    pos = 0
    while total - pos >= HEADER_SIZE:
        h = parse_header(buf, pos)
        size = h.batch_length + LOG_OVERHEAD
        if h.magic != MAGIC_V2 or h.batch_length < MIN_BATCH_LENGTH:
            raise RecordValidationError(
                CORRUPT_MESSAGE, f"not a v2 batch at {pos} (magic {h.magic}, length {h.batch_length})"
            )
        if pos + size > total:
            return
        if verify_crc:
            with memoryview(buf) as mv:
                crc = crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])
            if crc != h.crc:
                raise RecordValidationError(
                    CORRUPT_MESSAGE, f"batch at offset {h.base_offset} fails its CRC"
                )
        yield h, pos
        pos += size


def iter_records(
    buf: bytes | bytearray | memoryview,
    *,
    include_control: bool = False,
    verify_crc: bool = True,
) -> Iterator[Record]:
    """Decode every record of every complete batch in ``buf`` (one batch, a segment's
    bytes or a fetch response's records), decompressing as needed.

    Control batches (transaction markers) are skipped unless ``include_control``.
    Malformed data raises :class:`RecordValidationError` with CORRUPT_MESSAGE."""
    for h, pos in iter_batches(buf, verify_crc=verify_crc):
        if h.attributes & CONTROL_MASK and not include_control:
            continue
        yield from batch_records(buf, pos, h)


def batch_records(
    buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader | None = None
) -> Iterator[Record]:
    """Decode the records of the batch at ``buf[pos:]`` (header not re-validated)."""
    if h is None:
        h = parse_header(buf, pos)
    end = pos + h.batch_length + LOG_OVERHEAD
    codec = h.attributes & COMPRESSION_MASK
    with memoryview(buf) as mv:
        section = mv[pos + HEADER_SIZE : end]
        try:
            data = bytes(section) if codec == COMPRESSION_NONE else decompress(codec, section)
        except CompressionError as exc:
            raise RecordValidationError(CORRUPT_MESSAGE, str(exc)) from exc
        finally:
            section.release()
    log_append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
    try:
        yield from _decode_records(data, h, log_append_time)
    except RecordValidationError:
        raise
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise RecordValidationError(
            CORRUPT_MESSAGE, f"malformed record in batch at offset {h.base_offset}: {exc}"
        ) from exc


def _decode_records(data: bytes, h: BatchHeader, log_append_time: int | None) -> Iterator[Record]:
    pos = 0
    end = len(data)
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    dv = decode_varint
    for _ in range(h.records_count):
        length, pos = dv(data, pos)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise ValueError(f"record length {length} overruns the batch")
        pos += 1  # attributes: unused in v2
        ts_delta, pos = dv(data, pos)
        offset_delta, pos = dv(data, pos)
        key_len, pos = dv(data, pos)
        if key_len >= 0:
            key: bytes | None = data[pos : pos + key_len]
            pos += key_len
        else:
            key = None
        value_len, pos = dv(data, pos)
        if value_len >= 0:
            value: bytes | None = data[pos : pos + value_len]
            pos += value_len
        else:
            value = None
        n_headers, pos = dv(data, pos)
        headers: list[Header] = []
        for _h in range(n_headers):
            hk_len, pos = dv(data, pos)
            if hk_len < 0:
                raise ValueError("null header key")
            # Kafka does not check header keys are UTF-8 and Java's consumer decodes them
            # with replacement characters; so do we, rather than fail on a stored batch.
            hkey = data[pos : pos + hk_len].decode("utf-8", "replace")
            pos += hk_len
            hv_len, pos = dv(data, pos)
            if hv_len >= 0:
                hval: bytes | None = data[pos : pos + hv_len]
                pos += hv_len
            else:
                hval = None
            headers.append((hkey, hval))
        if pos != record_end:
            raise ValueError(f"record declares {length} bytes but its fields use {pos - record_end + length}")
        ts = log_append_time if log_append_time is not None else base_ts + ts_delta
        yield Record(base_offset + offset_delta, ts, key, value, headers)
    if pos != end:
        raise ValueError(f"{end - pos} bytes left after {h.records_count} records")


# ---------------------------------------------------------------- building

_HEADER_NO_CRC = struct.Struct(">qiib")  # baseOffset, batchLength, leaderEpoch, magic
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_UINT32 = struct.Struct(">I")


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[Header] = (),
) -> bytes:
    """One v2 record, length prefix included."""
    body = bytearray(b"\x00")  # attributes
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    if key is None:
        body += encode_varint(-1)
    else:
        body += encode_varint(len(key))
        body += key
    if value is None:
        body += encode_varint(-1)
    else:
        body += encode_varint(len(value))
        body += value
    headers = list(headers)
    body += encode_varint(len(headers))
    for hkey, hval in headers:
        kb = hkey.encode("utf-8")
        body += encode_varint(len(kb))
        body += kb
        if hval is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(hval))
            body += hval
    return encode_varint(len(body)) + bytes(body)


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
    partition_leader_epoch: int = 0,
    xerial_snappy: bool = True,
) -> bytes:
    """Build one v2 batch from ``records``, as Kafka clients do.

    Records get consecutive offset deltas (their ``offset`` field is ignored);
    baseTimestamp is the first record's timestamp and maxTimestamp the largest, as in
    Kafka's MemoryRecordsBuilder. ``timestamp_type`` 1 marks the batch LogAppendTime
    (the caller then normally passes records with the append time). At least one record
    is required."""
    records = list(records)
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_ts = records[0].timestamp
    max_ts = max(r.timestamp for r in records)
    body = b"".join(
        encode_record(i, r.timestamp - base_ts, r.key, r.value, r.headers)
        for i, r in enumerate(records)
    )
    if compression:
        body = compress(compression, body, xerial=xerial_snappy)
    attributes = compression & COMPRESSION_MASK
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    after_crc = _AFTER_CRC.pack(
        attributes,
        len(records) - 1,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    ) + body
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    return (
        _HEADER_NO_CRC.pack(base_offset, batch_length, partition_leader_epoch, MAGIC_V2)
        + _UINT32.pack(crc32c(after_crc))
        + after_crc
    )
