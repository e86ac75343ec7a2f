"""One partition's log (Kafka's UnifiedLog + LocalLog + LogLoader), in Kafka's layout.

What this module owns
    ``<log.dirs>/<topic>-<partition>/``: the segments (:class:`LogSegment`), the log
    start / end offsets, the recovery point, appends (offset assignment, segment
    rolling, producer-state checks), reads for Fetch, ListOffsets lookups by time,
    DeleteRecords, retention, truncation, recovery at open, flushing, and the
    producer-state snapshots ``NNNNNNNNNNNNNNNNNNNN.snapshot``.
    Checkpoint files of the whole log dir belong to :mod:`snakka.storage.manager`.

Hot paths
    ``append``: per batch a header check, two ``pack_into`` (offset assignment), one
    ``pwrite`` of the whole buffer, a few integer updates for the sparse indexes.
    ``read``: a small cache maps "next offset a consumer will ask for" to a file
    position, so a sequential consumer costs one ``pread`` per fetch; otherwise an
    in-memory offset-index bisect plus a header walk of at most ~16 KiB. No per-record
    work on either path.

Threading and the flush lock
    Every method runs on the owning event-loop thread, except :meth:`flush`, which a
    flush worker thread may run concurrently with appends and reads (fsync must not
    block the loop). ``_flush_lock`` (a ``threading.Lock``) is held by :meth:`flush` for
    its whole duration; the loop thread takes it (blocking) only for the rare
    structural operations that rewrite files a flush may be touching: :meth:`truncate_to`,
    :meth:`close`, :meth:`delete`. Segment deletion by retention/DeleteRecords does not
    block: the segment leaves the segment list at once, and its fd is closed and files
    unlinked immediately if no flush is running, else by the flush thread when its
    flush ends (so a flush never fsyncs a reused fd or re-creates a deleted index).

Kafka behaviours kept, and deliberate differences
    * A read starts with the batch that CONTAINS the fetch offset (clients skip the
      earlier records) and returns whole batches only (Kafka may end a fetch with a
      partial batch; every client discards it, we never send one). With
      ``min_one_message`` the first batch is returned whole even above ``max_bytes``.
      A read stops at the end of the segment it started in (Kafka does too); the
      consumer's next fetch continues in the next segment.
    * ``truncate_to(offset)`` removes the whole batch containing ``offset``.
    * Deleted segments are unlinked at once (``file.delete.delay.ms`` is not applied:
      nothing reads a deleted segment asynchronously here).
    * ``segment.ms`` is measured like Kafka: from the first batch's maxTimestamp to the
      incoming batch's, falling back to wall-clock age when timestamps are missing.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from snakka.records.batch import (
    DEFAULT_MAX_UNCOMPRESSED_BYTES,
    INT32_MAX,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    BatchInfo,
    assign_offsets,
    validate_batches,
)
from snakka.records.record import Record, batch_records, iter_records
from snakka.txn.producer_state import (
    DUPLICATE_SEQUENCE_NUMBER,
    ProducerStateError,
    ProducerStateManager,
)

from .config import LONG_MAX, LogConfig
from .segment import LogSegment, ScanStop

log = logging.getLogger("snakka.storage")

OFFSET_OUT_OF_RANGE = 1  # Kafka error code (mirrors ErrorCode.OFFSET_OUT_OF_RANGE)
KAFKA_STORAGE_ERROR = 56

_NEVER_ROLL_MS = LONG_MAX // 2
READ_CACHE_ENTRIES = 64  # bound of the next-offset -> position cache per partition
SNAPSHOTS_KEPT = 2  # producer-state snapshots kept per partition (latest + one fallback)

_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")
_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")


def _wall_ms() -> int:
    return int(time.time() * 1000)


class OffsetOutOfRangeError(Exception):
    """The requested offset is outside [log_start_offset, log_end_offset]."""

    error_code = OFFSET_OUT_OF_RANGE

    def __init__(self, message: str, *, log_start_offset: int = -1, log_end_offset: int = -1):
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogClosedError(Exception):
    """The log was closed or deleted (answer KAFKA_STORAGE_ERROR / NOT_LEADER)."""

    error_code = KAFKA_STORAGE_ERROR


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 for CreateTime topics
    log_start_offset: int
    duplicate: bool = False  # idempotent retry: nothing appended, original offsets


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``"my-topic-3"`` -> ``("my-topic", 3)`` (partition = digits after the last '-')."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise ValueError(f"not a <topic>-<partition> directory name: {name!r}")
    return topic, int(part)


def snapshot_filename(offset: int) -> str:
    return f"{offset:020d}.snapshot"


class PartitionLog:
    """The log of one topic partition. See the module docstring for semantics and the
    threading discipline."""

    def __init__(
        self,
        dir_path: str,
        config: LogConfig,
        *,
        recover: bool,
        time_ms: Callable[[], int] = _wall_ms,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        partition_leader_epoch: int = 0,
    ) -> None:
        self.dir_path = os.path.abspath(dir_path)
        self.name = os.path.basename(self.dir_path)
        try:
            self.topic, self.partition = parse_partition_dir_name(self.name)
        except ValueError:
            self.topic, self.partition = self.name, -1
        self.config = config
        self.leader_epoch = partition_leader_epoch
        self._time_ms = time_ms
        self._flush_lock = threading.Lock()
        self._pending_delete: list[LogSegment] = []
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._read_cache: dict[int, tuple[LogSegment, int]] = {}
        self._closed = False
        self._dir_dirty = False
        self.log_start_dirty = False  # LogManager rewrites the start-offset checkpoint
        self.topic_id: str | None = None  # from partition.metadata (set by LogManager)
        self.producer_state = ProducerStateManager(
            producer_id_expiration_ms=config.producer_id_expiration_ms
        )
        os.makedirs(self.dir_path, exist_ok=True)
        self._last_flush_ms = time_ms()
        self._load(recover, recovery_point, log_start_offset)

    # ------------------------------------------------------------ properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned."""
        return self._leo

    @property
    def high_watermark(self) -> int:
        """Single broker: everything appended is committed."""
        return self._leo

    @property
    def last_stable_offset(self) -> int:
        """High watermark, or the first offset of the oldest open transaction."""
        fuo = self.producer_state.first_unstable_offset()
        return self._leo if fuo is None else min(fuo, self._leo)

    @property
    def recovery_point(self) -> int:
        """Offsets below this are known to be on disk (fsynced)."""
        return self._recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._active

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------ open / recovery

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment.create(
            self.dir_path,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            now_ms=self._time_ms(),
        )

    def _load(self, recover: bool, recovery_point: int, log_start_offset: int) -> None:
        names = os.listdir(self.dir_path)
        bases = []
        for name in names:
            m = _SEGMENT_RE.match(name)
            if m:
                bases.append(int(m.group(1)))
            elif name.endswith(_LEFTOVER_SUFFIXES):
                log.info("partition %s: removing leftover file %s", self.name, name)
                _unlink(os.path.join(self.dir_path, name))
        bases.sort()
        have = set(bases)
        for name in names:  # index files whose .log is gone (Kafka deletes them too)
            stem, _, ext = name.partition(".")
            if ext in ("index", "timeindex") and stem.isdigit() and int(stem) not in have:
                log.info("partition %s: removing orphan index file %s", self.name, name)
                _unlink(os.path.join(self.dir_path, name))

        now = self._time_ms()
        cfg = self.config
        segments = [
            LogSegment.open(
                self.dir_path,
                b,
                index_interval_bytes=cfg.index_interval_bytes,
                max_index_size=cfg.segment_index_bytes,
                now_ms=now,
            )
            for b in bases
        ]
        first_recover = len(segments)
        if recover and segments:
            first_recover = max(0, bisect_right(bases, recovery_point) - 1)
        i = 0
        while i < len(segments):
            seg = segments[i]
            min_next = seg.base_offset if i == 0 else max(seg.base_offset, segments[i - 1].next_offset)
            if i >= first_recover:
                truncated, reason = seg.recover(min_next)
                log.debug("partition %s: recovered segment %d", self.name, seg.base_offset)
            elif seg.load(min_next):
                truncated, reason = 0, None
            else:
                log.warning(
                    "partition %s: rebuilding indexes of segment %d from the log: %s",
                    self.name,
                    seg.base_offset,
                    seg.load_problem,
                )
                truncated, reason = seg.recover(min_next)
            if truncated:
                log.warning(
                    "recovered partition %s: truncated %d bytes at offset %d (%s)",
                    self.name,
                    truncated,
                    seg.next_offset,
                    reason,
                )
                for later in segments[i + 1 :]:
                    log.warning(
                        "recovered partition %s: deleted segment %d (%d bytes) after the "
                        "truncation point",
                        self.name,
                        later.base_offset,
                        later.size,
                    )
                    later.close()
                    later.delete_files()
                del segments[i + 1 :]
            i += 1

        for seg in segments[:-1]:
            seg.on_become_inactive()  # rebuilt time indexes end with the segment's max
        if not segments:
            segments = [self._new_segment(max(0, log_start_offset))]
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._active = segments[-1]
        self._leo = self._active.next_offset
        self._log_start_offset = max(log_start_offset, segments[0].base_offset)
        if self._log_start_offset > self._leo:
            # The checkpointed start is past the data that survived (e.g. an unflushed
            # tail was lost): like Kafka, start an empty log at the checkpointed offset.
            log.warning(
                "partition %s: log start offset %d is beyond the log end %d; starting an "
                "empty log at %d",
                self.name,
                self._log_start_offset,
                self._leo,
                self._log_start_offset,
            )
            start = self._log_start_offset
            for seg in self._segments:
                seg.close()
                seg.delete_files()
            self._segments = [self._new_segment(start)]
            self._bases = [start]
            self._active = self._segments[0]
            self._leo = start
        self._recovery_point = min(recovery_point, self._leo) if recover else self._leo
        self._load_producer_state()

    # ------------------------------------------------------------ producer state

    def _snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.dir_path):
            m = _SNAPSHOT_RE.match(name)
            if m:
                out.append(int(m.group(1)))
        out.sort()
        return out

    def _load_producer_state(self) -> None:
        """Latest good snapshot <= log end, then replay batch headers up to the end."""
        psm = self.producer_state
        psm.truncate()
        leo = self._leo
        snaps = self._snapshot_offsets()
        for off in snaps:
            if off > leo:
                _unlink(os.path.join(self.dir_path, snapshot_filename(off)))
        start = None
        for off in reversed([o for o in snaps if o <= leo]):
            path = os.path.join(self.dir_path, snapshot_filename(off))
            try:
                with open(path, "rb") as f:
                    psm.load_snapshot_bytes(f.read(), off)
                start = off
                break
            except (OSError, ValueError) as exc:
                log.warning("partition %s: ignoring producer snapshot %s: %s", self.name, path, exc)
                _unlink(path)
        if start is None:
            start = self._segments[0].base_offset
        start = max(start, self._segments[0].base_offset)
        now = self._time_ms()
        replayed = 0
        for seg in self._segments:
            if seg.next_offset <= start:
                continue
            pos = seg.find_batch(start)[0] if start > seg.base_offset else 0
            stop = ScanStop()
            for _pos, h in seg.scan(pos, verify_crc=False, min_next_offset=0, stop=stop):
                replayed += 1
                if h.producer_id >= 0:
                    psm.update(h, h.base_offset, h.base_offset + h.last_offset_delta, now)
        psm.map_end_offset = leo
        if replayed:
            log.info(
                "partition %s: rebuilt producer state from offset %d (%d batches, %d producers)",
                self.name,
                start,
                replayed,
                len(psm.producers),
            )

    def take_snapshot(self, *, sync: bool = False) -> str:
        """Write the producer state at the log end offset (done at roll and close)."""
        psm = self.producer_state
        psm.map_end_offset = self._leo
        path = os.path.join(self.dir_path, snapshot_filename(self._leo))
        tmp = path + ".tmp"
        data = psm.snapshot_bytes()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        for off in self._snapshot_offsets()[:-SNAPSHOTS_KEPT]:
            _unlink(os.path.join(self.dir_path, snapshot_filename(off)))
        return path

    def expire_producers(self, now_ms: int) -> list[int]:
        """Drop producer state idle for ``producer.id.expiration.ms``."""
        return self.producer_state.remove_expired_producers(now_ms)

    # ------------------------------------------------------------ append

    def validate(
        self,
        buf: bytes | bytearray | memoryview,
        *,
        max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    ) -> list[BatchInfo]:
        """:func:`snakka.records.validate_batches` with this topic's limits (and the
        broker's bound on a batch's decompressed size)."""
        cfg = self.config
        create_time = not cfg.log_append_time
        return validate_batches(
            buf,
            max_message_bytes=cfg.max_message_bytes,
            now_ms=self._time_ms() if create_time else None,
            timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
            timestamp_after_max_ms=cfg.message_timestamp_after_max_ms,
            max_uncompressed_bytes=max_uncompressed_bytes,
        )

    def append(
        self,
        buf: bytearray | memoryview,
        infos: Sequence[BatchInfo],
        *,
        log_append_time_ms: int | None = None,
    ) -> AppendResult:
        """Append validated batches (``infos`` from :meth:`validate` /
        ``validate_batches`` on this ``buf``), patching ``buf`` in place.

        For a ``LogAppendTime`` topic pass the broker time (if None, the log's clock is
        used). Raises :class:`ProducerStateError` (OUT_OF_ORDER_SEQUENCE_NUMBER,
        INVALID_PRODUCER_EPOCH, ...) without appending; an idempotent retry returns the
        original offsets with ``duplicate=True``."""
        if self._closed:
            raise LogClosedError(f"log {self.name} is closed")
        cfg = self.config
        if log_append_time_ms is None and cfg.log_append_time:
            log_append_time_ms = self._time_ms()
        leo = self._leo
        psm = self.producer_state
        idempotent = False
        if len(infos) == 1:
            h = infos[0].header
            count = h.last_offset_delta + 1
            if h.producer_id >= 0:
                idempotent = True
                verdict = psm.check(h)
                if not verdict.ok:
                    if verdict.duplicate is not None:
                        d = verdict.duplicate
                        return AppendResult(
                            d.first_offset,
                            d.last_offset,
                            d.timestamp if cfg.log_append_time else -1,
                            self._log_start_offset,
                            True,
                        )
                    raise ProducerStateError(verdict.error_code, verdict.message)
        else:
            count = 0
            for info in infos:
                count += info.header.last_offset_delta + 1
            idempotent = any(i.header.producer_id >= 0 for i in infos)
            if idempotent:
                self._check_multi(infos, leo)
        last = leo + count - 1

        seg = self._active
        if seg.size and (
            seg.size + len(buf) > cfg.segment_bytes
            or seg.index_full()
            or last - seg.base_offset > INT32_MAX
            or self._segment_ms_elapsed(seg, infos, log_append_time_ms)
        ):
            seg = self._roll()
        assign_offsets(buf, infos, leo, log_append_time_ms, self.leader_epoch)
        start_pos = seg.size
        seg.append(buf, infos, leo, log_append_time_ms)
        self._leo = last + 1
        cache = self._read_cache
        cache[leo] = (seg, start_pos)  # a consumer tailing the log asks for exactly this
        if len(cache) > READ_CACHE_ENTRIES:
            del cache[next(iter(cache))]
        if idempotent:
            now = self._time_ms()
            off = leo
            for info in infos:
                h = info.header
                end = off + h.last_offset_delta
                if h.producer_id >= 0:
                    psm.update(h, off, end, now)
                off = end + 1
        return AppendResult(
            leo,
            last,
            -1 if log_append_time_ms is None else log_append_time_ms,
            self._log_start_offset,
        )

    def _check_multi(self, infos: Sequence[BatchInfo], leo: int) -> None:
        """Producer checks for an append of several batches (internal writers only:
        clients send one batch). Later batches are checked against the state as if the
        earlier ones were appended; nothing changes if any fails."""
        psm = self.producer_state
        saved: dict[int, object] = {}
        off = leo
        try:
            for info in infos:
                h = info.header
                end = off + h.last_offset_delta
                if h.producer_id >= 0:
                    verdict = psm.check(h)
                    if verdict.duplicate is not None:
                        raise ProducerStateError(
                            DUPLICATE_SEQUENCE_NUMBER,
                            "duplicate batch inside a multi-batch append",
                        )
                    if verdict.error_code:
                        raise ProducerStateError(verdict.error_code, verdict.message)
                    pid = h.producer_id
                    if pid not in saved:
                        e = psm.producers.get(pid)
                        saved[pid] = e.copy() if e is not None else None
                    psm.update(h, off, end, -1)
                off = end + 1
        finally:
            for pid, entry in saved.items():  # append() re-applies the updates after writing
                if entry is None:
                    psm.producers.pop(pid, None)
                else:
                    psm.producers[pid] = entry  # type: ignore[assignment]

    def _segment_ms_elapsed(
        self, seg: LogSegment, infos: Sequence[BatchInfo], log_append_time_ms: int | None
    ) -> bool:
        """Kafka's rule: time from the segment's first batch timestamp to the incoming
        batch's, or wall-clock age when the segment has no timestamps."""
        cfg = self.config
        limit = cfg.segment_ms - cfg.segment_jitter_ms
        if limit >= _NEVER_ROLL_MS:
            return False
        base_ts = seg.rolling_base_timestamp()
        if base_ts is not None and base_ts >= 0:
            if log_append_time_ms is not None:
                incoming = log_append_time_ms
            elif len(infos) == 1:
                incoming = infos[0].header.max_timestamp
            else:
                incoming = max(i.header.max_timestamp for i in infos)
            return incoming - base_ts > limit
        return self._time_ms() - seg.created_ms > limit

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active
        segment is empty)."""
        if self._active.size == 0:
            return self._active
        return self._roll()

    def _roll(self) -> LogSegment:
        old = self._active
        old.on_become_inactive()
        new = self._new_segment(self._leo)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._active = new
        self._dir_dirty = True
        self.take_snapshot()
        log.debug("partition %s: rolled new segment %d", self.name, new.base_offset)
        return new

    # ------------------------------------------------------------ reads

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> bytes | memoryview:
        """Whole batches as they lie on disk, starting with the batch containing
        ``fetch_offset``, at most ``max_bytes`` (but the first batch whole if
        ``min_one_message``), only batches below ``max_offset`` (exclusive, a batch
        boundary such as the LSO), never past the end of one segment.

        ``fetch_offset == log_end_offset`` gives ``b""``; outside
        [log_start_offset, log_end_offset] raises :class:`OffsetOutOfRangeError`."""
        leo = self._leo
        if fetch_offset == leo:
            return b""
        if fetch_offset < self._log_start_offset or fetch_offset > leo:
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} is out of range for partition {self.name}: "
                f"[{self._log_start_offset}, {leo}]",
                log_start_offset=self._log_start_offset,
                log_end_offset=leo,
            )
        if max_offset is not None and fetch_offset >= max_offset:
            return b""
        hit = self._read_cache.get(fetch_offset)
        if hit is not None and hit[1] < hit[0].size:
            seg, pos = hit
        else:
            i = bisect_right(self._bases, fetch_offset) - 1
            segs = self._segments
            while True:
                if i >= len(segs):
                    return b""
                seg = segs[i]
                pos, _base, size = seg.find_batch(fetch_offset)
                if size:
                    break
                i += 1
        end_limit = seg.size
        if max_offset is not None and max_offset < seg.next_offset:
            end_limit = min(end_limit, seg.find_batch(max_offset, None)[0])
            if end_limit <= pos:
                return b""
        avail = end_limit - pos
        budget = max(0, min(avail, max_bytes))
        data = seg.read(pos, max(budget, min(avail, 64)))
        if len(data) < LOG_OVERHEAD:
            return b""  # cannot happen for a consistent segment; never hand out a fragment
        first_size = int.from_bytes(data[8:12], "big") + LOG_OVERHEAD
        if first_size > budget:
            if not min_one_message:
                return b""
            if first_size > len(data):
                data = seg.read(pos, first_size)
            result_end = pos + first_size
        elif pos + budget == end_limit:
            result_end = end_limit
        else:
            result_end = seg.batch_boundary_at_or_before(data, pos, pos + budget)
        n = result_end - pos
        self._remember(seg, result_end, data, pos)
        if n == len(data):
            return data
        return memoryview(data)[:n]

    def _remember(self, seg: LogSegment, end: int, data: bytes, data_start: int) -> None:
        """Cache "next batch base offset -> position" for the consumer's next fetch."""
        cache = self._read_cache
        if end == seg.size:
            if seg is not self._active:
                return
            key = seg.next_offset
        else:
            rel = end - data_start
            if rel + 8 > len(data):
                return
            key = int.from_bytes(data[rel : rel + 8], "big", signed=True)
        cache[key] = (seg, end)
        if len(cache) > READ_CACHE_ENTRIES:
            del cache[next(iter(cache))]

    def iter_records(self, chunk_bytes: int = 8 << 20) -> Iterator[Record]:
        """Every record from the log start offset to the end, in order: how internal logs
        (the metadata log, ``__consumer_offsets``) are replayed at start-up. Not a hot path."""
        offset = self._log_start_offset
        while offset < self._leo:
            data = self.read(offset, chunk_bytes)
            before = offset
            for rec in iter_records(data):
                if rec.offset >= offset:
                    offset = rec.offset + 1
                    yield rec
            if offset == before:  # no complete batch here (recovery trims torn tails)
                log.error("partition %s: no decodable batch at offset %d; stopping", self.name,
                          offset)
                return

    def read_batch_headers(
        self, start_offset: int = 0, end_offset: int | None = None
    ) -> Iterator[tuple[BatchHeader, LogSegment, int]]:
        """Iterate (header, segment, position) of the batches overlapping
        [start_offset, end_offset): for tools, tests and coordinators loading internal
        topics. Not a hot path."""
        end_offset = self._leo if end_offset is None else end_offset
        start_offset = max(start_offset, self._log_start_offset)
        for seg in list(self._segments):
            if seg.next_offset <= start_offset or seg.base_offset >= end_offset:
                continue
            pos = seg.find_batch(start_offset)[0] if start_offset > seg.base_offset else 0
            stop = ScanStop()
            for p, h in seg.scan(pos, verify_crc=False, min_next_offset=0, stop=stop):
                if h.base_offset >= end_offset:
                    return
                yield h, seg, p

    # ------------------------------------------------------------ ListOffsets

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """Earliest (offset, timestamp) of a record with timestamp >= ``timestamp``, at
        or after the log start offset; None if there is none (ListOffsets answers -1)."""
        start = self._log_start_offset
        for seg in list(self._segments):
            if seg.max_timestamp < timestamp or seg.next_offset <= start:
                continue
            _ts, ts_offset = seg.time_index.lookup(timestamp)
            _off, pos = seg.offset_index.lookup(max(ts_offset, start))
            stop = ScanStop()
            for p, h in seg.scan(pos, verify_crc=False, min_next_offset=0, stop=stop):
                if h.max_timestamp < timestamp or h.base_offset + h.last_offset_delta < start:
                    continue
                found = self._first_record_at_or_after(seg, p, h, timestamp, start)
                if found is not None:
                    return found
        return None

    def _first_record_at_or_after(
        self, seg: LogSegment, pos: int, h: BatchHeader, timestamp: int, start: int
    ) -> tuple[int, int] | None:
        data = seg.read(pos, h.batch_length + LOG_OVERHEAD)
        for rec in batch_records(data, 0, h):
            if rec.timestamp >= timestamp and rec.offset >= start:
                return rec.offset, rec.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets
        MAX_TIMESTAMP, -3; the first such record on ties), or None for an empty log."""
        start = self._log_start_offset
        if self._leo <= start:
            return None
        segs = [s for s in self._segments if s.next_offset > start and s.size]
        if not segs:
            return None
        best = segs[0]
        for s in segs[1:]:
            if s.max_timestamp > best.max_timestamp:
                best = s
        target = best.max_timestamp
        _off, pos = best.offset_index.lookup(max(best.offset_of_max_timestamp, start))
        for attempt_pos in (pos, 0):
            stop = ScanStop()
            for p, h in best.scan(attempt_pos, verify_crc=False, min_next_offset=0, stop=stop):
                last = h.base_offset + h.last_offset_delta
                if last < start or h.max_timestamp != target:
                    continue
                if h.attributes & TIMESTAMP_TYPE_MASK:
                    return max(h.base_offset, start), target
                found = self._first_record_at_or_after(best, p, h, target, start)
                if found is not None and found[1] == target:
                    return found
        # The max-timestamp record lies below the log start: fall back to a full scan.
        best_pair: tuple[int, int] | None = None
        for h, seg, p in self.read_batch_headers(start):
            if best_pair is None or h.max_timestamp > best_pair[1]:
                data = seg.read(p, h.batch_length + LOG_OVERHEAD)
                for rec in batch_records(data, 0, h):
                    if rec.offset >= start and (best_pair is None or rec.timestamp > best_pair[1]):
                        best_pair = (rec.offset, rec.timestamp)
        return best_pair

    # ------------------------------------------------------------ deletion / retention

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` (<= high watermark)
        and delete the segments wholly below it. Returns the new log start offset."""
        if offset > self.high_watermark or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.name} before {offset}: high watermark is "
                f"{self.high_watermark}",
                log_start_offset=self._log_start_offset,
                log_end_offset=self._leo,
            )
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        self.log_start_dirty = True
        doomed = []
        segs = self._segments
        for i in range(len(segs) - 1):
            if segs[i + 1].base_offset <= offset:
                doomed.append(segs[i])
            else:
                break
        if doomed:
            self._delete_segments(doomed, f"log start offset {offset}")
        return offset

    def enforce_retention(self, now_ms: int) -> int:
        """Delete whole segments by ``retention.ms`` (segment's largest timestamp older
        than now - retention.ms) and ``retention.bytes``; returns how many. Like Kafka,
        an expired non-empty active segment is rolled first so it can go too."""
        cfg = self.config
        if not cfg.delete_enabled or self._closed:
            return 0
        deleted = 0
        if cfg.retention_ms >= 0:
            deleted += self._delete_oldest(
                lambda seg, _: now_ms - _largest_timestamp(seg) > cfg.retention_ms,
                f"retention.ms {cfg.retention_ms}",
            )
        if cfg.retention_bytes >= 0:
            excess = [self.size_bytes - cfg.retention_bytes]

            def over_size(seg: LogSegment, _: object) -> bool:
                if excess[0] - seg.size >= 0:
                    excess[0] -= seg.size
                    return True
                return False

            deleted += self._delete_oldest(over_size, f"retention.bytes {cfg.retention_bytes}")
        return deleted

    def _delete_oldest(self, predicate: Callable[[LogSegment, object], bool], reason: str) -> int:
        doomed = []
        for seg in self._segments:
            if seg.size == 0 and seg is self._active:
                break
            if not predicate(seg, None):
                break
            doomed.append(seg)
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll()  # always keep one (new, empty) segment
        self._delete_segments(doomed, reason)
        new_start = self._segments[0].base_offset
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self.log_start_dirty = True
        return len(doomed)

    def _delete_segments(self, doomed: list[LogSegment], reason: str) -> None:
        ids = {id(s) for s in doomed}
        self._segments = [s for s in self._segments if id(s) not in ids]
        self._bases = [s.base_offset for s in self._segments]
        self._read_cache.clear()
        for seg in doomed:
            log.info(
                "partition %s: deleting segment %d (offsets %d..%d, %d bytes) due to %s",
                self.name,
                seg.base_offset,
                seg.base_offset,
                seg.next_offset - 1,
                seg.size,
                reason,
            )
        if self._flush_lock.acquire(blocking=False):
            try:
                for seg in doomed:
                    seg.close()
                    seg.delete_files()
            finally:
                self._flush_lock.release()
        else:
            # A flush is running and may be writing these segments: it closes and
            # unlinks them when it ends (see flush()).
            self._pending_delete.extend(doomed)

    def _process_pending_deletes(self) -> None:
        """Caller holds the flush lock."""
        pending, self._pending_delete = self._pending_delete, []
        for seg in pending:
            seg.close()
            seg.delete_files()

    # ------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (the whole batch containing it).
        Blocks on a running flush (rare operation)."""
        with self._flush_lock:
            if offset >= self._leo:
                return
            self._read_cache.clear()
            if offset <= self._segments[0].base_offset:
                for seg in self._segments:
                    seg.close()
                    seg.delete_files()
                start = max(offset, 0)
                self._segments = [self._new_segment(start)]
                self._log_start_offset = start
                self.log_start_dirty = True
            else:
                keep = [s for s in self._segments if s.base_offset <= offset]
                for seg in self._segments[len(keep) :]:
                    seg.close()
                    seg.delete_files()
                self._segments = keep
                keep[-1].truncate_to_offset(offset)
            self._bases = [s.base_offset for s in self._segments]
            self._active = self._segments[-1]
            self._leo = self._active.next_offset
            if self._log_start_offset > self._leo:
                self._log_start_offset = self._leo
                self.log_start_dirty = True
            self._recovery_point = min(self._recovery_point, self._leo)
            log.info("partition %s: truncated to offset %d (log end now %d)", self.name, offset, self._leo)
            self._load_producer_state()

    # ------------------------------------------------------------ durability / lifecycle

    def flush(self, up_to_offset: int | None = None) -> int:
        """fsync every segment written since the last flush (data, then the index
        files), and the directory if segments were created. Safe to call from a worker
        thread while the loop appends. Returns the new recovery point (the log end
        offset as it was when the flush started, which covers ``up_to_offset``)."""
        with self._flush_lock:
            if self._closed:
                return self._recovery_point
            leo = self._leo
            for seg in list(self._segments):
                seg.flush()
            if self._dir_dirty:
                self._dir_dirty = False
                _fsync_dir(self.dir_path)
            if leo > self._recovery_point:
                self._recovery_point = leo
            self._last_flush_ms = self._time_ms()
            self._process_pending_deletes()
        return self._recovery_point

    def close(self) -> None:
        """Clean close: final time-index entries, flush everything, producer snapshot,
        close the files. Blocks on a running flush."""
        with self._flush_lock:
            if self._closed:
                return
            for seg in self._segments:
                seg.on_become_inactive()
                seg.flush()
            self.take_snapshot(sync=True)
            _fsync_dir(self.dir_path)
            self._recovery_point = self._leo
            self._process_pending_deletes()
            for seg in self._segments:
                seg.close()
            self._closed = True

    def delete(self) -> None:
        """Close without flushing and remove the partition directory (DeleteTopics).
        The directory is first renamed to ``<name>.<uuid>-delete`` (atomic), so a crash
        mid-removal leaves a dir that LogManager.load_all removes, never a half log."""
        with self._flush_lock:
            self._process_pending_deletes()
            for seg in self._segments:
                seg.close()
            self._closed = True
            self._read_cache.clear()
            doomed = f"{self.dir_path}.{uuid.uuid4().hex}-delete"
            try:
                os.rename(self.dir_path, doomed)
            except OSError:
                doomed = self.dir_path
            shutil.rmtree(doomed, ignore_errors=True)
        log.info("partition %s: deleted log directory %s", self.name, self.dir_path)

    def set_config(self, config: LogConfig) -> None:
        """Apply changed topic configs (AlterConfigs). Index sizes apply to new
        segments; everything else at the next append/retention run."""
        self.config = config
        self.producer_state.producer_id_expiration_ms = config.producer_id_expiration_ms
        self._active.index_interval_bytes = config.index_interval_bytes

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.name}, start={self._log_start_offset}, end={self._leo}, "
            f"segments={len(self._segments)})"
        )


def _largest_timestamp(seg: LogSegment) -> int:
    """Kafka's LogSegment.largestTimestamp: max timestamp, or the file's mtime."""
    if seg.max_timestamp > 0:
        return seg.max_timestamp
    try:
        return int(os.stat(seg.path).st_mtime * 1000)
    except OSError:
        return 0


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = [
    "AppendResult",
    "LogClosedError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ProducerStateError",
    "parse_partition_dir_name",
]
