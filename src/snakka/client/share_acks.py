"""What a share consumer holds: acquired records, the application's acknowledgements, and the
fetched-but-not-yet-returned buffer (sans-I/O; no sockets, no awaits).

A share consumer acquires records through ShareFetch (the ``AcquiredRecords`` ranges of a
response) and must later acknowledge every acquired offset to the broker that acquired it, in a
ShareFetch (piggy-backed) or a ShareAcknowledge of the same share session. This module keeps, per
``(topic id, partition, node id)`` -- acknowledgements go to the node that acquired the records,
so a partition whose leadership moved has one entry per node --:

* ``acquired``: offset -> delivery count, for every acquired offset whose final acknowledgement
  has not been sent yet;
* ``pending``: offset -> acknowledge type chosen (by the application, by implicit mode, or GAP
  for acquired offsets that hold no record), not sent yet;
* ``unacked``: offsets returned by ``poll`` that the application has not acknowledged (explicit
  mode forbids the next ``poll`` while any exist).

The records of a ShareFetch response are decoded here (``add_fetched``): only offsets inside the
acquired ranges are returned; acquired offsets with no data record (control records, compacted
away) become GAP acknowledgements at once, as Kafka's consumer does.

Thread-safety: the blocking ``ShareConsumer`` calls ``acknowledge`` from the application thread
while the event-loop thread adds fetched records and drains acknowledgements; every public method
takes ``self._lock`` (short, never held across I/O).

Bounds: the buffer holds at most what the broker returned for one ShareFetch per node
(``max.poll.records`` / ``fetch.max.bytes`` bound it); nothing here grows without a fetch.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.share import AckBatch, AcknowledgeType
from snakka.records import iter_batches
from snakka.records.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    CORRUPT_MESSAGE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    RecordValidationError,
)
from snakka.records.compression import COMPRESSION_NONE, CompressionError, decompress
from snakka.records.record import batch_records

# Per-record decoding in C: ``record_tuples`` of the Spark source's decoder extension (built
# by ``pip install`` when a compiler is there). Python decoding costs ~3-6 µs a record, the C
# one a fraction of that (bench/bench_share.py --decode-micro). SNAKKA_SPARK_PURE_PYTHON=1
# (the extension's switch) forces the pure-Python path, which gives the same records.
try:
    if os.environ.get("SNAKKA_SPARK_PURE_PYTHON"):
        raise ImportError("pure Python decoding forced")
    from snakka.spark._fastdecode import record_tuples as _record_tuples
except ImportError:  # pragma: no cover - depends on the build
    _record_tuples = None  # type: ignore[assignment]
DECODER = "c" if _record_tuples is not None else "python"
_NO_LOWER, _NO_UPPER = -(1 << 63), (1 << 63) - 1

# (offset, timestamp, key, value, headers): a snakka.records.Record has the same shape
RecordTuple = tuple[int, int, bytes | None, bytes | None, "list[tuple[str, bytes | None]]"]


def _batch_tuples(buf: bytes | memoryview, pos: int, h: BatchHeader) -> list[RecordTuple]:
    """The records of the batch at ``buf[pos:]`` as tuples, decoded in C when the extension
    is built (same results and errors as ``batch_records``, which is the fallback)."""
    if _record_tuples is None:
        return list(batch_records(buf, pos, h))  # type: ignore[arg-type]
    end = pos + h.batch_length + LOG_OVERHEAD
    codec = h.attributes & COMPRESSION_MASK
    with memoryview(buf) as mv, mv[pos + HEADER_SIZE: end] as section:
        try:
            data = section if codec == COMPRESSION_NONE else decompress(codec, section)
            return _record_tuples(data, h.records_count, h.base_offset, h.base_timestamp,
                                  bool(h.attributes & TIMESTAMP_TYPE_MASK), h.max_timestamp,
                                  _NO_LOWER, _NO_UPPER)
        except CompressionError as exc:
            raise RecordValidationError(CORRUPT_MESSAGE, str(exc)) from exc
        except ValueError as exc:
            raise RecordValidationError(
                CORRUPT_MESSAGE, f"malformed record in batch at offset {h.base_offset}: {exc}"
            ) from exc

TopicIdPartition = tuple[uuid.UUID, int]
# (topic id, partition, id of the node that acquired the records)
InFlightKey = tuple[uuid.UUID, int, int]


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class IllegalStateError(RuntimeError):
    """The share consumer API was used out of order (Kafka's IllegalStateException)."""


@dataclass(slots=True, eq=False)
class ShareRecord:
    """One acquired record as ``poll`` returns it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    # (key, value) pairs as decoded (a list; treat as read-only)
    headers: list[tuple[str, bytes | None]] | tuple[tuple[str, bytes | None], ...]
    delivery_count: int
    # Where the acknowledgement must go; not part of the public record.
    in_flight_key: InFlightKey = field(repr=False, default=(uuid.UUID(int=0), -1, -1))


@dataclass(frozen=True, slots=True)
class AckResult:
    """The outcome of acknowledgements sent for one partition (one commit-callback call)."""

    partition: TopicPartition
    offsets: frozenset[int]
    error: KafkaError | None


@dataclass(slots=True)
class DrainedAcks:
    """Acknowledgements taken out of ``pending`` for one request, per partition."""

    batches: dict[TopicIdPartition, list[AckBatch]]
    # per partition: (topic name, offset -> type sent), for reporting the result
    sent: dict[TopicIdPartition, tuple[str, dict[int, int]]]

    def __bool__(self) -> bool:
        return bool(self.batches)

    @property
    def has_renew(self) -> bool:
        return any(AcknowledgeType.RENEW in b.types for bs in self.batches.values() for b in bs)


class _Partition:
    __slots__ = ("topic", "acquired", "pending", "unacked", "renewed")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.acquired: dict[int, int] = {}
        self.pending: dict[int, int] = {}
        self.unacked: set[int] = set()
        self.renewed: set[int] = set()

    def idle(self) -> bool:
        return not (self.acquired or self.pending or self.unacked or self.renewed)


def ack_batches(pending: dict[int, int]) -> list[AckBatch]:
    """Coalesce ``offset -> type`` into AcknowledgementBatches: one batch per run of consecutive
    offsets, with a single type when the whole run shares it (the compact form Kafka's clients
    send), else one type per offset."""
    out: list[AckBatch] = []
    offsets = sorted(pending)
    i, n = 0, len(offsets)
    while i < n:
        j = i
        while j + 1 < n and offsets[j + 1] == offsets[j] + 1:
            j += 1
        types = [pending[o] for o in offsets[i:j + 1]]
        if all(t == types[0] for t in types):
            out.append(AckBatch(offsets[i], offsets[j], (types[0],)))
        else:
            out.append(AckBatch(offsets[i], offsets[j], tuple(types)))
        i = j + 1
    return out


class _Chunk:
    """Buffered records of one partition of one ShareFetch response: ``records[pos:]`` are
    not returned yet; their acquisition lock ends at ``deadline`` (monotonic)."""

    __slots__ = ("records", "pos", "deadline", "key")

    def __init__(self, records: list[ShareRecord], deadline: float, key: InFlightKey) -> None:
        self.records = records
        self.pos = 0
        self.deadline = deadline
        self.key = key


def _in_ranges(starts: list[int], ranges: list[tuple[int, int, int]], offset: int) -> int:
    """Delivery count of ``offset`` if it lies in one of the sorted ``ranges``, else -1."""
    i = bisect.bisect_right(starts, offset) - 1
    if i >= 0 and offset <= ranges[i][1]:
        return ranges[i][2]
    return -1


class InFlightRecords:
    """Acquired records, buffered records and pending acknowledgements of one share consumer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[InFlightKey, _Partition] = {}
        # fetched records not returned yet: one chunk per partition of a ShareFetch response,
        # with the monotonic time its lock ends (per chunk: take's work is per chunk, plus a
        # list comprehension over its records)
        self._buffer: deque[_Chunk] = deque()

    # -- fetched data ----------------------------------------------------------------------
    def add_fetched(self, key: InFlightKey, topic: str, acquired: Iterable[tuple[int, int, int]],
                    records: bytes | memoryview | None, *, release: bool = False,
                    lock_deadline: float = float("inf")) -> int:
        """Take in one partition of a ShareFetch response: ``acquired`` holds
        ``(first_offset, last_offset, delivery_count)`` ranges. Returns how many records were
        buffered. With ``release`` nothing is decoded and every acquired offset is released
        (records this member cannot use). Raises ``RecordValidationError`` for corrupt record
        data (the acquired offsets are then released so the broker can hand them to someone
        else). ``lock_deadline`` (``time.monotonic()`` scale) is when the acquisition lock ends:
        records still buffered then are dropped by ``take`` (the broker has given them to
        someone else)."""
        ranges = sorted((int(f), int(last), int(dc)) for f, last, dc in acquired if last >= f)
        if not ranges:
            return 0
        if release:
            records = None
        starts = [r[0] for r in ranges]
        found: list[ShareRecord] = []
        seen: set[int] = set()
        max_seen = -1
        _tid, part, _node = key
        try:
            if records:
                lo, hi = ranges[0][0], max(r[1] for r in ranges)
                for h, pos in iter_batches(records):
                    if h.last_offset < lo or h.base_offset > hi or h.attributes & CONTROL_MASK:
                        continue
                    i = bisect.bisect_right(starts, h.base_offset) - 1
                    if i >= 0 and h.last_offset <= ranges[i][1]:
                        # The common case: the whole batch lies in one acquired range.
                        dc = ranges[i][2]
                        batch = [ShareRecord(topic, part, o, ts, k, v, hd, dc, key)
                                 for o, ts, k, v, hd in _batch_tuples(records, pos, h)]
                        if seen and h.base_offset <= max_seen:  # a batch sent twice?
                            batch = [r for r in batch if r.offset not in seen]
                        if batch:
                            seen.update([r.offset for r in batch])
                            max_seen = max(max_seen, batch[-1].offset)
                            found += batch
                        continue
                    for o, ts, k, v, hd in _batch_tuples(records, pos, h):
                        dc = _in_ranges(starts, ranges, o)
                        if dc < 0 or o in seen:
                            continue
                        seen.add(o)
                        max_seen = max(max_seen, o)
                        found.append(ShareRecord(topic, part, o, ts, k, v, hd, dc, key))
        except Exception:
            with self._lock:
                p = self._part(key, topic)
                for first, last, dc in ranges:
                    p.acquired.update(dict.fromkeys(range(first, last + 1), dc))
                    p.pending.update(dict.fromkeys(range(first, last + 1),
                                                   AcknowledgeType.RELEASE))
            raise
        found.sort(key=lambda r: r.offset)
        with self._lock:
            p = self._part(key, topic)
            for first, last, dc in ranges:
                offsets = range(first, last + 1)
                p.acquired.update(dict.fromkeys(offsets, dc))
                if release:
                    p.pending.update(dict.fromkeys(offsets, AcknowledgeType.RELEASE))
                elif len(seen) < len(offsets) or not seen.issuperset(offsets):
                    p.pending.update(dict.fromkeys(set(offsets) - seen, AcknowledgeType.GAP))
            if found:
                self._buffer.append(_Chunk(found, lock_deadline, key))
        return len(found)

    def buffered(self) -> int:
        return sum(len(c.records) - c.pos for c in self._buffer)

    def take(self, max_records: int, now: float | None = None) -> list[ShareRecord]:
        """Up to ``max_records`` buffered records, now owned by the application (unacked).
        Records whose acquisition lock ended while they waited in the buffer (``now`` past
        their deadline) are dropped: they are not this consumer's any more."""
        if now is None:
            now = time.monotonic()
        out: list[ShareRecord] = []
        with self._lock:
            buf = self._buffer
            while buf and len(out) < max_records:
                c = buf[0]
                p = self._parts.get(c.key)
                if p is None:  # dropped meanwhile (connection to its node lost)
                    buf.popleft()
                    continue
                acquired = p.acquired
                if now >= c.deadline:
                    for r in c.records[c.pos:]:
                        if r.offset in acquired:
                            del acquired[r.offset]
                            p.pending.pop(r.offset, None)
                    if p.idle():
                        del self._parts[c.key]
                    buf.popleft()
                    continue
                # Records not acquired any more were dropped meanwhile (connection lost).
                while c.pos < len(c.records) and len(out) < max_records:
                    end = c.pos + max_records - len(out)
                    good = [r for r in c.records[c.pos:end] if r.offset in acquired]
                    c.pos = min(end, len(c.records))
                    p.unacked.update([r.offset for r in good])
                    out += good
                if c.pos >= len(c.records):
                    buf.popleft()
        return out

    # -- acknowledgements by the application -----------------------------------------------
    def acknowledge(self, record: ShareRecord, ack_type: int) -> None:
        self.acknowledge_key(record.in_flight_key, record.offset, ack_type)

    def acknowledge_key(self, key: InFlightKey, offset: int, ack_type: int) -> None:
        if ack_type not in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE,
                            AcknowledgeType.REJECT, AcknowledgeType.RENEW):
            raise ValueError(f"invalid acknowledge type {ack_type!r}")
        with self._lock:
            p = self._parts.get(key)
            if p is not None and offset in p.unacked:
                p.unacked.discard(offset)
            elif p is not None and offset in p.renewed and \
                    p.pending.get(offset, AcknowledgeType.RENEW) == AcknowledgeType.RENEW:
                # A renewed record (KIP-1222) still needs its final acknowledgement, which may
                # also replace a RENEW not sent yet.
                pass
            else:
                raise IllegalStateError(f"offset {offset} of {key[:2]} is not in flight "
                                        "(not returned by poll, or already acknowledged)")
            if ack_type == AcknowledgeType.RENEW:
                p.renewed.add(offset)
            else:
                p.renewed.discard(offset)
            if offset in p.acquired:
                p.pending[offset] = ack_type
            # else: the session through which it was acquired is gone (``forget_node``); the
            # broker released it already, so the acknowledgement is moot and dropped.
            if p.idle():
                del self._parts[key]

    def find_key(self, topic: str, partition: int, offset: int) -> InFlightKey:
        with self._lock:
            for key, p in self._parts.items():
                if p.topic == topic and key[1] == partition and (
                        offset in p.unacked or offset in p.renewed):
                    return key
        raise IllegalStateError(f"offset {offset} of {topic}-{partition} is not in flight")

    def unacked_count(self) -> int:
        with self._lock:
            return sum(len(p.unacked) for p in self._parts.values())

    def accept_unacked(self, ack_type: int = AcknowledgeType.ACCEPT, *,
                       include_renewed: bool = False) -> int:
        """Implicit mode (and close): every record returned by poll and not acknowledged gets
        ``ack_type`` (with ``include_renewed``, renewed ones too). Returns how many."""
        n = 0
        with self._lock:
            for key, p in list(self._parts.items()):
                todo = p.unacked | p.renewed if include_renewed else p.unacked
                for o in todo:
                    if o in p.acquired:
                        p.pending[o] = ack_type
                n += len(todo)
                p.unacked.clear()
                if include_renewed:
                    p.renewed.clear()
                if p.idle():
                    del self._parts[key]
        return n

    def release_buffered(self, keep: Callable[[InFlightKey], bool] | None = None) -> int:
        """Buffered (never returned) records whose key ``keep`` rejects (all when ``keep`` is
        None) are released back to the broker. Returns how many."""
        n = 0
        with self._lock:
            kept: deque[_Chunk] = deque()
            for c in self._buffer:
                if keep is not None and keep(c.key):
                    kept.append(c)
                    continue
                p = self._parts.get(c.key)
                if p is None:
                    continue
                for r in c.records[c.pos:]:
                    if r.offset in p.acquired:
                        p.pending[r.offset] = AcknowledgeType.RELEASE
                        n += 1
            self._buffer = kept
        return n

    # -- sending ---------------------------------------------------------------------------
    def nodes_with_pending(self) -> set[int]:
        with self._lock:
            return {k[2] for k, p in self._parts.items() if p.pending}

    def pending_partitions(self, node: int) -> set[TopicIdPartition]:
        with self._lock:
            return {(k[0], k[1]) for k, p in self._parts.items() if k[2] == node and p.pending}

    def has_pending_renew(self, node: int) -> set[TopicIdPartition]:
        with self._lock:
            return {(k[0], k[1]) for k, p in self._parts.items()
                    if k[2] == node and AcknowledgeType.RENEW in p.pending.values()}

    def drain(self, node: int, only: Callable[[TopicIdPartition], bool] | None = None
              ) -> DrainedAcks:
        """Take the pending acknowledgements for ``node`` (those partitions ``only`` accepts) to
        put them in a request. Offsets acknowledged with anything but RENEW stop being in
        flight now: whatever the broker answers, this consumer no longer holds them."""
        out = DrainedAcks({}, {})
        with self._lock:
            for key, p in list(self._parts.items()):
                if key[2] != node or not p.pending:
                    continue
                tip = (key[0], key[1])
                if only is not None and not only(tip):
                    continue
                sent = {o: t for o, t in p.pending.items() if o in p.acquired}
                p.pending.clear()
                if not sent:
                    continue
                out.batches[tip] = ack_batches(sent)
                out.sent[tip] = (p.topic, sent)
                for o, t in sent.items():
                    if t != AcknowledgeType.RENEW:
                        del p.acquired[o]
                if p.idle():
                    del self._parts[key]
        return out

    def drain_renews(self, node: int) -> DrainedAcks:
        """Take only the pending RENEW acknowledgements for ``node`` (to report them as failed
        when the broker cannot take them); the records stay acquired and renewable."""
        out = DrainedAcks({}, {})
        with self._lock:
            for key, p in self._parts.items():
                if key[2] != node:
                    continue
                renews = {o: t for o, t in p.pending.items() if t == AcknowledgeType.RENEW}
                if not renews:
                    continue
                for o in renews:
                    del p.pending[o]
                tip = (key[0], key[1])
                out.batches[tip] = ack_batches(renews)
                out.sent[tip] = (p.topic, renews)
        return out

    def completed(self, drained: DrainedAcks, errors: dict[TopicIdPartition, int],
                  default_error: int = 0, message: str | None = None) -> list[AckResult]:
        """Results of a request that carried ``drained``: ``errors`` maps partitions to their
        acknowledge error code (missing = ``default_error``)."""
        out = []
        for tip, (topic, sent) in drained.sent.items():
            code = errors.get(tip, default_error)
            err = KafkaError(code, message) if code else None
            out.append(AckResult(TopicPartition(topic, tip[1]), frozenset(sent), err))
        return out

    def forget_node(self, node: int) -> None:
        """The connection to ``node`` was lost: its share session and every acquisition made
        through it are gone on the broker (Kafka releases a closed session's records), so the
        records it handed us are no longer ours to acknowledge. Records already returned by poll
        stay acknowledgeable (the explicit-mode check must still pass) but their
        acknowledgements are dropped."""
        with self._lock:
            for key, p in list(self._parts.items()):
                if key[2] != node:
                    continue
                p.acquired.clear()
                p.pending.clear()
                if p.idle():
                    del self._parts[key]
            self._buffer = deque(c for c in self._buffer if c.key[2] != node)

    def in_flight_count(self) -> int:
        with self._lock:
            return sum(len(p.acquired) for p in self._parts.values())

    def keys(self) -> set[InFlightKey]:
        with self._lock:
            return set(self._parts)

    def _part(self, key: InFlightKey, topic: str) -> _Partition:
        p = self._parts.get(key)
        if p is None:
            p = self._parts[key] = _Partition(topic)
        return p


def ack_error(code: int, message: str | None = None) -> KafkaError:
    return KafkaError(ErrorCode.from_code(code), message)
