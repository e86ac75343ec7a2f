"""Rebuilding a stored v2 batch with fewer records: what the log cleaner writes.

What this module owns
    :func:`rebuild_batch`, the batch Kafka's ``MemoryRecords.filterTo`` writes when a clean
    drops records of a batch or sets its delete horizon (KIP-534), and :func:`empty_batch`,
    the header-only batch Kafka's ``DefaultRecordBatch.writeEmptyHeader`` writes when a batch
    loses every record but must stay (an active producer's last batch, the last batch of a
    cleaning round). :func:`build_batch` cannot express either: it numbers records from 0
    and derives the last offset delta and base timestamp from them, while a cleaned batch
    keeps its base offset, its *original* last offset delta (so the producer's last
    sequence survives), each record's own offset delta, and may carry a delete horizon in
    its base timestamp.

    The caller hands over the records already encoded (uncompressed, offset deltas against
    the batch's base offset, timestamp deltas against ``base_timestamp``): the cleaner copies
    kept records as byte slices and re-encodes only a changed timestamp delta, so no record
    is decoded into Python objects here.

Threading
    Pure functions; callable from any thread.
"""

from __future__ import annotations

import struct

from snakka.util.crc32c import crc32c

from .batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
)
from .compression import COMPRESSION_NONE, COMPRESSION_SNAPPY, compress

__all__ = ["empty_batch", "rebuild_batch"]

_HEADER_NO_CRC = struct.Struct(">qiib")  # baseOffset, batchLength, leaderEpoch, magic
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_UINT32 = struct.Struct(">I")


def _assemble(h: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int,
              records_count: int, body: bytes | bytearray) -> bytes:
    after_crc = _AFTER_CRC.pack(
        attributes, h.last_offset_delta, base_timestamp, max_timestamp, h.producer_id,
        h.producer_epoch, h.base_sequence, records_count,
    ) + body
    return (
        _HEADER_NO_CRC.pack(h.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body),
                            h.partition_leader_epoch, MAGIC_V2)
        + _UINT32.pack(crc32c(after_crc))
        + after_crc
    )


def rebuild_batch(
    h: BatchHeader,
    records: bytes | bytearray,
    records_count: int,
    *,
    base_timestamp: int,
    max_timestamp: int,
    delete_horizon: bool,
) -> bytes:
    """The batch ``h`` with its records replaced by ``records`` (``records_count`` encoded
    v2 records, uncompressed).

    Kept from ``h``: base offset, last offset delta, partition leader epoch, producer id,
    epoch and base sequence, and the attributes (codec, timestamp type, transactional,
    control). The records are compressed with the batch's own codec (snappy with the xerial
    framing Java clients write). ``delete_horizon`` sets attribute bit 0x40: the caller then
    passes the horizon as ``base_timestamp`` (KIP-534) and timestamp deltas against it."""
    if records_count < 1:
        raise ValueError("a rebuilt batch has at least one record (use empty_batch)")
    if records_count > h.last_offset_delta + 1:
        raise ValueError(f"{records_count} records do not fit offset deltas 0..{h.last_offset_delta}")
    codec = h.attributes & COMPRESSION_MASK
    body = records if codec == COMPRESSION_NONE else compress(
        codec, records, xerial=codec == COMPRESSION_SNAPPY)
    attributes = h.attributes & ~DELETE_HORIZON_MASK
    if delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    return _assemble(h, attributes, base_timestamp, max_timestamp, records_count, body)


def empty_batch(h: BatchHeader) -> bytes:
    """The header-only batch that stands for ``h`` once all its records are gone, as Kafka's
    ``writeEmptyHeader``: same base offset, last offset delta, producer id/epoch/base
    sequence, leader epoch, timestamp type, transactional and control flags; no codec, no
    delete horizon, baseTimestamp -1, maxTimestamp kept, records count 0."""
    attributes = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    return _assemble(h, attributes, NO_TIMESTAMP, h.max_timestamp, 0, b"")
