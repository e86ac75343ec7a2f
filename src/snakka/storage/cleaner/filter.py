"""What one cleaning pass keeps of each batch: Kafka's Cleaner record filter, v2 batches only.

What this module owns
    The decisions Kafka's ``Cleaner.cleanInto`` + ``MemoryRecords.filterTo`` +
    ``CleanedTransactionMetadata`` make for every batch of the segments being cleaned, as pure
    functions over the batch's bytes:

    * :func:`batch_keys` / :func:`add_batch_to_offset_map`: the (offset, key) pairs that
      build the :class:`~snakka.storage.cleaner.offset_map.OffsetMap` (aborted data and
      markers put no key, as in Kafka's ``buildOffsetMapForSegment``);
    * :class:`CleanedTxns`: which transactional data is aborted (dropped) and when a marker
      may go (its transaction has no data left in the log);
    * :func:`filter_batch`: the batch to write in place of one batch: the original bytes,
      a rebuilt batch, an empty batch, or nothing.

    Choosing logs and segments, the offset map's range, writing and swapping segments and
    the cleaned transaction index file are the cleaner's (``cleaner.py`` / ``manager.py``).

Kafka's rules, in the order :func:`filter_batch` applies them
    * A record past ``offset_map.latest_offset`` is kept (the map did not cover it).
    * Otherwise a record is kept iff it has a key, no later offset for its key is in the
      map (``offset >= map.get(key)``), and it is not a tombstone (null value) whose batch's
      delete horizon has passed. Aborted data is dropped whole.
    * A kept batch that lost nothing is written as its original bytes (a memoryview slice:
      no copy, no re-encoding), unless it holds tombstones (or is a marker whose
      transaction has no data left) and has no delete horizon yet: then it is rebuilt with
      attribute bit 0x40 and BaseTimestamp = ``now_ms + delete.retention.ms`` (KIP-534),
      once; later passes keep that horizon and drop the tombstones when ``now_ms >=
      horizon``.
    * A rebuilt batch keeps base offset and last offset delta (offsets never move and the
      producer's last sequence survives), producer id/epoch/base sequence, transactional
      and control flags, leader epoch, timestamp type and codec; kept records keep their
      offset deltas, keys, values, headers and timestamps (only the timestamp delta is
      re-encoded when the base timestamp changes: the delete horizon, or the first kept
      record's timestamp as Kafka's MemoryRecordsBuilder uses).
    * A batch left without records survives as an empty v2 batch (records count 0) only if
      it is an active producer's last batch (producer state must survive the clean) or
      the last batch of the cleaning round (so the round's last offset is not lost);
      otherwise it is dropped.
    * A control batch (COMMIT/ABORT marker) is kept until its transaction has no data left
      and its delete horizon has passed.

Performance
    Per-record Python work is unavoidable (every key must be looked up) but is kept lean: a
    compressed batch is decompressed once; records are walked in C
    (:func:`snakka.records.spans.record_spans`: one tuple per record, the key its only
    copied bytes); a record's headers and value are never decoded; kept records are copied
    as slices; an unchanged batch is returned as a memoryview of the input.

Threading
    Pure functions; :class:`CleanedTxns` and the offset map are per pass, owned by one
    cleaner thread.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from snakka.records.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    CORRUPT_MESSAGE,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    RecordValidationError,
)
from snakka.records.compression import COMPRESSION_NONE, CompressionError, decompress
from snakka.records.control import read_end_txn_marker
from snakka.records.rebuild import empty_batch, rebuild_batch
from snakka.records.record import encode_varint
from snakka.records.spans import Span, record_spans
from snakka.storage.index import AbortedTxn

from .offset_map import OffsetMap

__all__ = [
    "CleanContext",
    "CleanedTxns",
    "FilteredBatch",
    "add_batch_to_offset_map",
    "batch_keys",
    "filter_batch",
]

Buffer = bytes | bytearray | memoryview


# ---------------------------------------------------------------- transactions


class _AbortedTxnState:
    """An aborted transaction the cleaner is inside: did it see any of its data?"""

    __slots__ = ("txn", "last_observed_batch_offset")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.last_observed_batch_offset = -1


class CleanedTxns:
    """Kafka's CleanedTransactionMetadata: built from the aborted transactions (AbortedTxn from
    snakka.storage.index) whose range overlaps the segments being cleaned, fed every batch in
    offset order; says whether a transactional batch's data is aborted (discard) and whether a
    control batch (marker) may be discarded.

    More aborted transactions can be added as the pass reaches further segments
    (:meth:`add_aborted_transactions`, as Kafka adds each segment's). The aborted
    transactions whose ABORT marker a pass keeps *because some of their data is still in
    the log* are collected in :attr:`retained_aborted`, in marker order: what the cleaned
    segment's ``.txnindex`` must hold (:meth:`drain_retained_aborted` per cleaned segment)."""

    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self._heap: list[tuple[int, int, AbortedTxn]] = []
        self._seq = 0
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}
        self.retained_aborted: list[AbortedTxn] = []
        self.add_aborted_transactions(aborted)

    def add_aborted_transactions(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            heapq.heappush(self._heap, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def drain_retained_aborted(self) -> list[AbortedTxn]:
        out, self.retained_aborted = self.retained_aborted, []
        return out

    def _consume_aborted_up_to(self, offset: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= offset:
            txn = heapq.heappop(heap)[2]
            if txn.producer_id not in self._ongoing_aborted:
                self._ongoing_aborted[txn.producer_id] = _AbortedTxnState(txn)

    def on_batch_read(self, h: BatchHeader) -> bool:
        """A data batch was read; True when it belongs to an aborted transaction (discard)."""
        self._consume_aborted_up_to(h.base_offset + h.last_offset_delta)
        if not h.attributes & TRANSACTIONAL_MASK:
            return False
        state = self._ongoing_aborted.get(h.producer_id)
        if state is not None:
            state.last_observed_batch_offset = h.base_offset + h.last_offset_delta
            return True
        self._ongoing_committed.add(h.producer_id)
        return False

    def on_control_batch_read(self, buf: Buffer, pos: int, h: BatchHeader) -> bool:
        """A control batch was read; True when its marker may be discarded: its transaction
        has no data left in what this pass read (an ABORT whose data is gone, a COMMIT with
        no data batch seen), or the batch is already empty. Unknown control types stay."""
        self._consume_aborted_up_to(h.base_offset + h.last_offset_delta)
        if h.records_count == 0:
            return True  # an empty control batch was cleaned already
        marker = read_end_txn_marker(buf, pos, h)
        if marker is None:
            return False
        pid = h.producer_id
        if marker.commit:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        state = self._ongoing_aborted.pop(pid, None)
        if state is not None and state.last_observed_batch_offset >= 0:
            self.retained_aborted.append(state.txn)
            return False
        return True


# ---------------------------------------------------------------- the filter


@dataclass(frozen=True, slots=True)
class CleanContext:
    """What one cleaning pass decides with (see the module docstring)."""

    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int          # the topic's delete.retention.ms
    txns: CleanedTxns
    # producer_id -> last offset of that producer's last batch in the whole log (active producers
    # from the partition's producer state): an emptied batch that is a producer's last is kept
    # as an empty batch so producer state survives (Kafka's rule).
    producer_last_offsets: Mapping[int, int]


class FilteredBatch(NamedTuple):
    """What to write in place of one batch."""

    data: bytes | memoryview | None   # original bytes (memoryview) when unchanged, a rebuilt
                                      # or empty batch, or None = drop the whole batch
    rewritten: bool
    records_kept: int
    max_timestamp: int                # of what is written (for the time index)
    offset_of_max_timestamp: int      # Kafka's shallow offset: the batch's last offset


_DROPPED = FilteredBatch(None, True, 0, NO_TIMESTAMP, -1)


def _records_section(buf: Buffer, pos: int, h: BatchHeader) -> tuple[Buffer, int, int]:
    """(data, start, end) of the batch's records, decompressed once when compressed."""
    end = pos + h.batch_length + LOG_OVERHEAD
    if end > len(buf) or h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise RecordValidationError(
            CORRUPT_MESSAGE, f"batch at offset {h.base_offset} overruns its buffer")
    codec = h.attributes & COMPRESSION_MASK
    if codec == COMPRESSION_NONE:
        return buf, pos + HEADER_SIZE, end
    with memoryview(buf) as mv:
        try:
            data = decompress(codec, mv[pos + HEADER_SIZE : end])
        except CompressionError as exc:
            raise RecordValidationError(
                CORRUPT_MESSAGE, f"batch at offset {h.base_offset}: {exc}") from exc
    return data, 0, len(data)


def _corrupt(h: BatchHeader, why: str) -> RecordValidationError:
    return RecordValidationError(
        CORRUPT_MESSAGE, f"malformed record in batch at offset {h.base_offset}: {why}")


def _walk(data: Buffer, start: int, end: int, h: BatchHeader) -> list[Span]:
    """The records of ``data[start:end]`` as :func:`snakka.records.spans.record_spans` sees
    them: ``(record_start, record_end, ts_delta, after_ts, offset_delta, key, has_value)``."""
    try:
        return record_spans(data, start, end, h.records_count, h.last_offset_delta)
    except ValueError as exc:
        raise _corrupt(h, str(exc)) from exc


def batch_keys(buf: Buffer, pos: int, h: BatchHeader) -> Iterator[tuple[int, bytes | None]]:
    """(absolute offset, key) of every record of the (non-control) batch at buf[pos:],
    decompressing once. Used to build the offset map. A control batch yields nothing (a
    marker's key is its type, not a record key)."""
    if h.attributes & CONTROL_MASK:
        return
    data, start, end = _records_section(buf, pos, h)
    base = h.base_offset
    for rec in _walk(data, start, end, h):
        yield base + rec[4], rec[5]


def add_batch_to_offset_map(offset_map: OffsetMap, buf: Buffer, pos: int, h: BatchHeader,
                            txns: CleanedTxns, start_offset: int) -> bool:
    """Put the keys of the batch at ``buf[pos:]`` into ``offset_map`` as Kafka's
    ``buildOffsetMapForSegment`` does; return True when the map filled up inside this batch
    (the batch is then only partly mapped and ``latest_offset`` stays at the last key put:
    the cleaner cleans up to there).

    ``txns`` is the map-building pass's own :class:`CleanedTxns` (aborted transactions of
    the whole dirty range): markers and aborted data put no key. Records below
    ``start_offset`` (the first dirty offset) and keyless records put none either. The
    caller advances ``latest_offset`` over an offset gap at a segment's end with
    :meth:`OffsetMap.update_latest_offset`."""
    last = h.base_offset + h.last_offset_delta
    if h.attributes & CONTROL_MASK:
        txns.on_control_batch_read(buf, pos, h)
    elif not txns.on_batch_read(h):
        base = h.base_offset
        data, start, end = _records_section(buf, pos, h)
        put = offset_map.put_if_room
        for rec in _walk(data, start, end, h):
            key = rec[5]
            if key is not None and base + rec[4] >= start_offset and not put(key, base + rec[4]):
                return True
    if last >= start_offset:
        offset_map.update_latest_offset(last)
    return False


def filter_batch(buf: Buffer, pos: int, h: BatchHeader, ctx: CleanContext, *,
                 last_batch_of_round: bool) -> FilteredBatch:
    """What to write in place of the batch at ``buf[pos:]`` (see the module docstring).

    Every batch of the cleaned range must pass through here in offset order (``ctx.txns``
    follows the transactions). ``last_batch_of_round``: the batch's next offset is the
    round's upper bound (Kafka keeps it, even emptied). Malformed records raise
    :class:`RecordValidationError` (CORRUPT_MESSAGE)."""
    attributes = h.attributes
    is_control = bool(attributes & CONTROL_MASK)
    has_horizon = bool(attributes & DELETE_HORIZON_MASK)
    now = ctx.now_ms
    last_offset = h.base_offset + h.last_offset_delta

    # Batch level (Kafka's checkBatchRetention).
    if is_control:
        can_discard = ctx.txns.on_control_batch_read(buf, pos, h)
        # Markers piggy-back on the tombstone horizon: a marker goes only once its
        # transaction has no data left AND its horizon has passed.
        discard_records = can_discard and has_horizon and h.base_timestamp <= now
        marker_for_empty_txn = can_discard
    else:
        discard_records = ctx.txns.on_batch_read(h)
        marker_for_empty_txn = False
    retain_empty = (
        (h.producer_id >= 0 and ctx.producer_last_offsets.get(h.producer_id) == last_offset)
        or last_batch_of_round
    )
    if discard_records and not retain_empty:
        return _DROPPED

    # Record level (Kafka's shouldRetainRecord), over the records section.
    size = h.batch_length + LOG_OVERHEAD
    kept: list[Span] = []
    contains_tombstones = False
    dropped_any = False
    data: Buffer = b""
    if not discard_records and h.records_count > 0:
        data, start, end = _records_section(buf, pos, h)
        if is_control:
            kept = _walk(data, start, end, h)
        else:
            offset_map = ctx.offset_map
            latest = offset_map.latest_offset
            retain_deletes = not has_horizon or now < h.base_timestamp
            base = h.base_offset
            get = offset_map.get
            for rec in _walk(data, start, end, h):
                offset = base + rec[4]
                key = rec[5]
                if offset > latest or (
                    key is not None and offset >= get(key) and (rec[6] or retain_deletes)
                ):
                    kept.append(rec)
                    if not rec[6]:
                        contains_tombstones = True
                else:
                    dropped_any = True

    if not kept:
        if not retain_empty:
            return _DROPPED
        out = empty_batch(h)
        if h.records_count == 0 and out == bytes(memoryview(buf)[pos : pos + size]):
            return FilteredBatch(memoryview(buf)[pos : pos + size], False, 0,
                                 h.max_timestamp, last_offset)
        return FilteredBatch(out, True, 0, h.max_timestamp, last_offset)

    need_horizon = (contains_tombstones or marker_for_empty_txn) and not has_horizon
    if not dropped_any and not need_horizon:
        return FilteredBatch(memoryview(buf)[pos : pos + size], False, len(kept),
                             h.max_timestamp, last_offset)
    return _rebuild(data, h, kept, ctx, need_horizon, has_horizon)


def _rebuild(data: Buffer, h: BatchHeader, kept: list[Span],
             ctx: CleanContext, need_horizon: bool, has_horizon: bool) -> FilteredBatch:
    """The batch ``h`` holding only the ``kept`` records (Kafka's buildRetainedRecordsInto)."""
    log_append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
    old_base = h.base_timestamp

    def timestamp(ts_delta: int) -> int:
        return log_append_time if log_append_time is not None else old_base + ts_delta

    if need_horizon:
        new_base = ctx.now_ms + ctx.delete_retention_ms
    elif has_horizon:
        new_base = old_base  # the horizon stays as first set (KIP-534)
    else:
        new_base = timestamp(kept[0][2])  # as MemoryRecordsBuilder: the first record's
    out = bytearray()
    max_ts = NO_TIMESTAMP
    with memoryview(data) as mv:
        for rec_start, rec_end, ts_delta, after_ts, _delta, _key, _has_value in kept:
            ts = timestamp(ts_delta)
            if ts > max_ts:
                max_ts = ts
            new_delta = ts - new_base
            if new_delta == ts_delta:
                out += mv[rec_start:rec_end]  # unchanged record: copied as it lies
            else:
                body = b"\x00" + encode_varint(new_delta) + mv[after_ts:rec_end]
                out += encode_varint(len(body))
                out += body
    if log_append_time is not None:
        max_ts = log_append_time
    rebuilt = rebuild_batch(h, out, len(kept), base_timestamp=new_base, max_timestamp=max_ts,
                            delete_horizon=need_horizon or has_horizon)
    last_offset = h.base_offset + h.last_offset_delta
    return FilteredBatch(rebuilt, True, len(kept), max_ts,
                         last_offset if max_ts != NO_TIMESTAMP else -1)
