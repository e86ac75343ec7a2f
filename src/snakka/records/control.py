"""Control records: the COMMIT / ABORT transaction markers (Kafka's EndTransactionMarker).

What this module owns
    Building a control batch with one marker record and reading a marker back. A marker
    batch is a v2 batch with the transactional and control attributes set, the producer's
    id and epoch, base sequence -1 and one uncompressed record whose key is
    ``version int16 (0) | type int16`` (0 = ABORT, 1 = COMMIT; Kafka's ControlRecordType)
    and whose value is ``version int16 (0) | coordinatorEpoch int32``.

    Only the transaction coordinator's marker writes produce these (through
    ``UnifiedLog.append_control_marker``); clients never send them (Produce refuses control
    batches). Not a hot path.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .batch import BatchHeader, parse_header
from .record import Record, batch_records, build_batch

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class EndTxnMarker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    *,
    partition_leader_epoch: int = 0,
) -> bytes:
    """One control batch (base offset 0, assigned at append) holding one marker."""
    rec = Record(
        timestamp=timestamp_ms,
        key=_KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT),
        value=_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch),
    )
    return build_batch(
        [rec],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def read_end_txn_marker(
    buf: bytes | bytearray | memoryview, pos: int = 0, h: BatchHeader | None = None
) -> EndTxnMarker | None:
    """The marker of the control batch at ``buf[pos:]``; None if the batch is not a
    control batch or its first record is not a COMMIT/ABORT marker (Kafka skips unknown
    control types)."""
    if h is None:
        h = parse_header(buf, pos)
    if not h.is_control:
        return None
    for rec in batch_records(buf, pos, h):
        key, value = rec.key, rec.value
        if key is None or len(key) < _KEY.size or value is None or len(value) < _VALUE.size:
            return None
        _kv, ctype = _KEY.unpack_from(key)
        if ctype not in (ABORT, COMMIT):
            return None
        _vv, coord_epoch = _VALUE.unpack_from(value)
        return EndTxnMarker(ctype == COMMIT, coord_epoch)
    return None


__all__ = [
    "ABORT",
    "COMMIT",
    "EndTxnMarker",
    "build_control_batch",
    "read_end_txn_marker",
]
