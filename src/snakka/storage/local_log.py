"""The local part of one partition's log (Kafka's LocalLog): its segments on this disk.

What this module owns
    ``<log.dirs>/<topic>-<partition>/NNNNNNNNNNNNNNNNNNNN.{log,index,timeindex,txnindex}``: the
    ordered list of :class:`LogSegment` of one partition directory, the log end offset
    (the next offset to be written here), the recovery point (offsets below it are
    fsynced), rolling a new segment, appending already-validated, already-numbered batch
    bytes at the end, reads by offset (for Fetch) and by time (for ListOffsets),
    truncation, deleting segments (the caller decides which: retention and log-start
    moves are policy of :mod:`snakka.storage.unified_log`), flushing, close and delete of
    the directory.

What it does NOT know
    Producers, sequences, transactions, the high watermark, the last stable offset and the
    log start offset: those belong to :class:`~snakka.storage.unified_log.UnifiedLog`, which
    is the only user of this class (as in Kafka). It is built from segments that
    :class:`~snakka.storage.loader.LogLoader` has already opened and recovered; it never
    decides anything about recovery itself.

Hot paths
    :meth:`append`: one ``pwrite`` of the whole buffer through the active segment and a few
    integer updates for the sparse indexes. :meth:`read`: a small cache maps "next offset a
    consumer will ask for" to a file position, so a sequential consumer costs one ``pread``
    per fetch; otherwise an in-memory offset-index bisect plus a header walk of at most
    ~16 KiB. No per-record work on either path.

Threading and the flush lock
    Every method runs on the owning event-loop thread, except :meth:`flush`, which a flush
    worker thread may run concurrently with appends and reads (fsync must not block the
    loop). ``flush_lock`` (a ``threading.Lock``) is held by :meth:`flush` for its whole
    duration; the loop thread takes it (blocking) only for the rare structural operations
    that rewrite files a flush may be touching: :meth:`truncate_to`,
    :meth:`truncate_fully_and_start_at`, :meth:`close`, :meth:`delete`. Segment deletion
    (:meth:`delete_segments`) does not block: the segment leaves the segment list at once,
    and its fd is closed and files unlinked immediately if no flush is running, else by the
    flush thread when its flush ends (so a flush never fsyncs a reused fd or re-creates a
    deleted index).

Kafka behaviours kept, and deliberate differences
    * A read starts with the batch that CONTAINS the fetch offset (clients skip the earlier
      records) and returns whole batches only (Kafka may end a fetch with a partial batch;
      every client discards it, we never send one). With ``min_one_message`` the first
      batch is returned whole even above ``max_bytes``. A read stops at the end of the
      segment it started in (Kafka does too); the consumer's next fetch continues in the
      next segment.
    * ``truncate_to(offset)`` removes the whole batch containing ``offset``.
    * Deleted segments are unlinked at once (``file.delete.delay.ms`` is not applied:
      nothing reads a deleted segment asynchronously here).
    * ``segment.ms`` is measured like Kafka: from the first batch's maxTimestamp to the
      incoming batch's, falling back to wall-clock age when timestamps are missing.

Invariants (checked with ``assert`` where they are cheap or at roll / load time)
    Segment base offsets strictly increase (checked when the log is built and at each
    roll); the active segment is the last (checked when segments are deleted); every
    append starts exactly at the log end offset and ends at or after it (offsets are
    assigned monotonically, without gaps: two integer compares per append).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence

from snakka.limits import READ_CACHE_ENTRIES
from snakka.protocol.primitives import ZERO_COPY_MIN_BYTES, FileRegion
from snakka.records.batch import (
    INT32_MAX,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    BatchInfo,
)
from snakka.records.record import batch_records

from .config import LONG_MAX, LogConfig
from .segment import LogSegment, ScanStop

log = logging.getLogger("snakka.storage")

_NEVER_ROLL_MS = LONG_MAX // 2


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``"my-topic-3"`` -> ``("my-topic", 3)`` (partition = digits after the last '-')."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise ValueError(f"not a <topic>-<partition> directory name: {name!r}")
    return topic, int(part)


def check_segment_order(segments: Sequence[LogSegment]) -> None:
    """Assert the segment list's invariant: strictly increasing base offsets (the
    bisect in :meth:`LocalLog.read` depends on it). Run when a LocalLog is built (after
    load or truncation), never per append; :meth:`LocalLog.roll` checks its own step."""
    for prev, seg in zip(segments, segments[1:], strict=False):
        assert prev.base_offset < seg.base_offset, (
            f"segment base offsets not increasing: {prev.base_offset} then {seg.base_offset}"
        )


def create_segment(dir_path: str, config: LogConfig, base_offset: int, now_ms: int, *,
                   stale_indexes: bool = True) -> LogSegment:
    """A new empty segment file with the topic's index settings (``stale_indexes``: see
    :meth:`LogSegment.create`)."""
    return LogSegment.create(
        dir_path,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        now_ms=now_ms,
        stale_indexes=stale_indexes,
    )


class LocalLog:
    """The segments of one partition directory. See the module docstring for what it
    owns, what it leaves to :class:`~snakka.storage.unified_log.UnifiedLog`, and the
    threading discipline."""

    def __init__(
        self,
        dir_path: str,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        recovery_point: int,
        time_ms: Callable[[], int],
    ) -> None:
        if not segments:
            raise ValueError("a LocalLog has at least one (active) segment")
        check_segment_order(segments)
        self.dir_path = os.path.abspath(dir_path)
        self.name = os.path.basename(self.dir_path)
        self.config = config
        self._time_ms = time_ms
        self.flush_lock = threading.Lock()
        self._pending_delete: list[LogSegment] = []
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._active = segments[-1]
        # Plain attributes, not properties: the append and read paths read them per
        # request. Only this class writes them.
        self.log_end_offset: int = self._active.next_offset  # the next offset to assign
        self._recovery_point = min(recovery_point, self.log_end_offset)
        self._read_cache: dict[int, tuple[LogSegment, int]] = {}
        self.closed: bool = False
        self._dir_dirty = False
        # Wall-clock ns at which a clean shutdown had fsynced every entry of the directory
        # (set by UnifiedLog from LogManager; None: unknown, so close fsyncs the directory).
        self.dir_durable_before_ns: int | None = None
        self._last_flush_ms = time_ms()
        # Told of every new segment, after it became the active one: UnifiedLog snapshots
        # producer state there (Kafka takes a producer snapshot at each roll).
        self.roll_listener: Callable[[LogSegment], object] | None = None

    # ------------------------------------------------------------ properties

    @property
    def recovery_point(self) -> int:
        """Offsets below this are known to be on disk (fsynced)."""
        return self._recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._recovery_point

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
    def base_offset(self) -> int:
        """Base offset of the first local segment (Kafka's localLogStartOffset lower
        bound: nothing below it is on this disk)."""
        return self._bases[0]

    # ------------------------------------------------------------ append / roll

    def new_segment(self, base_offset: int) -> LogSegment:
        """A new empty segment file at ``base_offset`` with this log's index settings (not
        added to the log)."""
        return create_segment(self.dir_path, self.config, base_offset, self._time_ms())

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
        """Start a new active segment at the log end offset (the caller checks that the
        active segment is not empty), then tell :attr:`roll_listener`."""
        old = self._active
        assert old.size > 0 and self.log_end_offset > old.base_offset, (
            f"partition {self.name}: roll of an empty segment {old.base_offset}"
        )
        old.on_become_inactive()
        new = self.new_segment(self.log_end_offset)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._active = new
        self._dir_dirty = True
        log.debug("partition %s: rolled new segment %d", self.name, new.base_offset)
        if self.roll_listener is not None:
            self.roll_listener(new)
        return new

    def append(
        self,
        buf: bytearray | memoryview,
        infos: Sequence[BatchInfo],
        base_offset: int,
        last_offset: int,
        log_append_time_ms: int | None,
    ) -> None:
        """Write batches already numbered ``base_offset..last_offset`` (see
        :func:`snakka.records.batch.assign_offsets`) at the end of the log, first rolling
        a new segment if the active one is due (Kafka's LogSegment.shouldRoll:
        ``segment.bytes``, a full index, relative offsets beyond int32, ``segment.ms``;
        an empty segment never rolls)."""
        leo = self.log_end_offset
        # Offsets are assigned monotonically, without gaps, and a batch is never empty.
        assert base_offset == leo and last_offset >= base_offset, (
            f"partition {self.name}: append of {base_offset}..{last_offset} at log end {leo}"
        )
        seg = self._active
        if seg.size and (
            seg.size + len(buf) > self.config.segment_bytes
            or seg.index_full()
            or last_offset - seg.base_offset > INT32_MAX
            or self._segment_ms_elapsed(seg, infos, log_append_time_ms)
        ):
            seg = self.roll()
        start_pos = seg.size
        seg.append(buf, infos, leo, log_append_time_ms)
        self.log_end_offset = last_offset + 1
        cache = self._read_cache
        cache[leo] = (seg, start_pos)  # a consumer tailing the log asks for exactly this
        if len(cache) > READ_CACHE_ENTRIES:
            del cache[next(iter(cache))]

    # ------------------------------------------------------------ reads by offset

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        max_offset: int | None,
        min_one_message: bool,
        zero_copy: bool = False,
    ) -> bytes | memoryview | FileRegion:
        """Whole batches as they lie on disk, starting with the batch containing
        ``fetch_offset``, at most ``max_bytes`` (but the first batch whole if
        ``min_one_message``), only batches below ``max_offset`` (exclusive, a batch
        boundary such as the LSO), never past the end of one segment.

        ``zero_copy``: a result of at least ``ZERO_COPY_MIN_BYTES`` is a :class:`FileRegion`
        of the segment file (sent with sendfile by the connection; only batch headers are
        read here), not the bytes.

        The caller (:class:`UnifiedLog`) has checked ``base_offset <= fetch_offset <
        log_end_offset`` and ``fetch_offset < max_offset``."""
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
        if zero_copy and budget >= ZERO_COPY_MIN_BYTES:
            return self._read_region(seg, pos, end_limit, budget, min_one_message)
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

    def _read_region(self, seg: LogSegment, pos: int, end_limit: int, budget: int,
                     min_one_message: bool) -> bytes | FileRegion:
        """:meth:`read`'s zero-copy path (``budget`` >= ZERO_COPY_MIN_BYTES): the same batch
        bounds, found by reading batch headers only, as a region of the segment file."""
        head = seg.read(pos, LOG_OVERHEAD)
        if len(head) < LOG_OVERHEAD:
            return b""  # cannot happen for a consistent segment; never hand out a fragment
        first_size = int.from_bytes(head[8:12], "big") + LOG_OVERHEAD
        if first_size > budget:
            if not min_one_message:
                return b""
            end = pos + first_size
        elif pos + budget == end_limit:
            end = end_limit
        else:
            end = seg.boundary_in_file(pos, pos + budget)[0]
        # The offset after the returned batches: the base offset of the batch at ``end`` (the
        # upper bound of the aborted transactions a read_committed reader needs, and the key
        # of the consumer's next read), or the segment's next offset at its end.
        if end >= seg.size:
            next_offset = seg.next_offset
        else:
            nxt = seg.read(end, 8)
            next_offset = int.from_bytes(nxt, "big", signed=True) if len(nxt) == 8 else -1
        if next_offset >= 0 and (end < seg.size or seg is self._active):
            cache = self._read_cache
            cache[next_offset] = (seg, end)
            if len(cache) > READ_CACHE_ENTRIES:
                del cache[next(iter(cache))]
        return seg.region(pos, end - pos, next_offset)

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

    def read_batch_headers(
        self, start_offset: int, end_offset: int
    ) -> Iterator[tuple[BatchHeader, LogSegment, int]]:
        """Iterate (header, segment, position) of the batches overlapping
        [start_offset, end_offset). Not a hot path."""
        for seg in list(self._segments):
            if seg.next_offset <= start_offset or seg.base_offset >= end_offset:
                continue
            pos = seg.find_batch(start_offset)[0] if start_offset > seg.base_offset else 0
            stop = ScanStop()
            for p, h in seg.scan(pos, verify_crc=False, min_next_offset=0, stop=stop):
                if h.base_offset >= end_offset:
                    return
                yield h, seg, p

    # ------------------------------------------------------------ reads by time

    def offset_for_timestamp(self, timestamp: int, start: int) -> tuple[int, int] | None:
        """Earliest (offset, timestamp) of a record with timestamp >= ``timestamp``, at or
        after offset ``start``; None if there is none."""
        for seg in list(self._segments):
            if seg.max_timestamp < timestamp or seg.next_offset <= start:
                continue
            _ts, ts_offset = seg.time_index.lookup(timestamp)
            _off, pos = seg.offset_index.lookup(max(ts_offset, start))
            stop = ScanStop()
            for p, h in seg.scan(pos, verify_crc=False, min_next_offset=0, stop=stop):
                if h.max_timestamp < timestamp or h.base_offset + h.last_offset_delta < start:
                    continue
                found = _first_record_at_or_after(seg, p, h, timestamp, start)
                if found is not None:
                    return found
        return None

    def max_timestamp_offset(self, start: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp at or after offset
        ``start`` (the first such record on ties), or None if there is no record."""
        if self.log_end_offset <= start:
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
                found = _first_record_at_or_after(best, p, h, target, start)
                if found is not None and found[1] == target:
                    return found
        # The max-timestamp record lies below ``start``: fall back to a full scan.
        best_pair: tuple[int, int] | None = None
        for h, seg, p in self.read_batch_headers(start, self.log_end_offset):
            if best_pair is None or h.max_timestamp > best_pair[1]:
                data = seg.read(p, h.batch_length + LOG_OVERHEAD)
                for rec in batch_records(data, 0, h):
                    if rec.offset >= start and (best_pair is None or rec.timestamp > best_pair[1]):
                        best_pair = (rec.offset, rec.timestamp)
        return best_pair

    # ------------------------------------------------------------ segment deletion

    def segments_below(self, offset: int) -> list[LogSegment]:
        """The segments wholly below ``offset`` (their successor starts at or before it);
        never the active segment."""
        doomed = []
        segs = self._segments
        for i in range(len(segs) - 1):
            if segs[i + 1].base_offset <= offset:
                doomed.append(segs[i])
            else:
                break
        return doomed

    def delete_segments(self, doomed: Sequence[LogSegment], reason: str) -> None:
        """Remove ``doomed`` (oldest first, never all segments) from the log and delete
        their files, now or, if a flush is running, when it ends."""
        ids = {id(s) for s in doomed}
        self._segments = [s for s in self._segments if id(s) not in ids]
        assert self._segments and self._segments[-1] is self._active, (
            f"partition {self.name}: deleting segments would remove the active segment"
        )
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
        if self.flush_lock.acquire(blocking=False):
            try:
                for seg in doomed:
                    seg.close()
                    seg.delete_files()
            finally:
                self.flush_lock.release()
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
        """Remove everything at and after ``offset`` (the whole batch containing it);
        ``base_offset < offset < log_end_offset``. Blocks on a running flush."""
        with self.flush_lock:
            self._read_cache.clear()
            keep = [s for s in self._segments if s.base_offset <= offset]
            for seg in self._segments[len(keep) :]:
                seg.close()
                seg.delete_files()
            self._segments = keep
            keep[-1].truncate_to_offset(offset)
            self._after_truncation()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset``. Blocks on a running
        flush."""
        with self.flush_lock:
            self._read_cache.clear()
            for seg in self._segments:
                seg.close()
                seg.delete_files()
            self._segments = [self.new_segment(offset)]
            self._after_truncation()

    def _after_truncation(self) -> None:
        self._bases = [s.base_offset for s in self._segments]
        self._active = self._segments[-1]
        self.log_end_offset = self._active.next_offset
        self._recovery_point = min(self._recovery_point, self.log_end_offset)

    # ------------------------------------------------------------ durability / lifecycle

    def flush(self) -> int:
        """fsync every segment written since the last flush (data, then the index files),
        and the directory if segments were created. Safe to call from a worker thread
        while the loop appends. Returns the new recovery point (the log end offset as it
        was when the flush started)."""
        with self.flush_lock:
            if self.closed:
                return self._recovery_point
            leo = self.log_end_offset
            for seg in list(self._segments):
                seg.flush()
            if self._dir_dirty:
                self._dir_dirty = False
                fsync_dir(self.dir_path)
            if leo > self._recovery_point:
                self._recovery_point = leo
            self._last_flush_ms = self._time_ms()
            self._process_pending_deletes()
        return self._recovery_point

    def close(self) -> None:
        """Clean close: final time-index entries, flush everything, close the files.
        Blocks on a running flush."""
        with self.flush_lock:
            if self.closed:
                return
            for seg in self._segments:
                seg.on_become_inactive()
                seg.flush()
            if self._dir_dirty or not self._dir_unchanged_since_durable():
                fsync_dir(self.dir_path)
            self._recovery_point = self.log_end_offset
            self._process_pending_deletes()
            for seg in self._segments:
                seg.close()
            self.closed = True

    def _dir_unchanged_since_durable(self) -> bool:
        """Whether no entry of the directory was created, renamed or removed since a clean
        shutdown fsynced it: its mtime (which every such change moves to "now") is not past
        ``dir_durable_before_ns``, the clean shutdown's time (LogManager sets it only when
        the wall clock is known not to have stepped back since)."""
        bound = self.dir_durable_before_ns
        if bound is None:
            return False
        try:
            return os.stat(self.dir_path).st_mtime_ns <= bound
        except OSError:
            return False

    def delete(self) -> None:
        """Close without flushing and remove the partition directory (DeleteTopics).
        The directory is first renamed to ``<name>.<uuid>-delete`` (atomic), so a crash
        mid-removal leaves a dir that LogManager.load_all removes, never a half log."""
        with self.flush_lock:
            self._process_pending_deletes()
            for seg in self._segments:
                seg.close()
            self.closed = True
            self._read_cache.clear()
            doomed = f"{self.dir_path}.{uuid.uuid4().hex}-delete"
            try:
                os.rename(self.dir_path, doomed)
            except OSError:
                doomed = self.dir_path
            shutil.rmtree(doomed, ignore_errors=True)
        log.info("partition %s: deleted log directory %s", self.name, self.dir_path)

    def set_config(self, config: LogConfig) -> None:
        """Index sizes apply to new segments; segment.bytes / segment.ms at the next
        append."""
        self.config = config
        self._active.index_interval_bytes = config.index_interval_bytes

    def __repr__(self) -> str:
        return (f"LocalLog({self.name}, end={self.log_end_offset}, "
                f"segments={len(self._segments)})")


def _first_record_at_or_after(
    seg: LogSegment, pos: int, h: BatchHeader, timestamp: int, start: int
) -> tuple[int, int] | None:
    data = seg.read(pos, h.batch_length + LOG_OVERHEAD)
    for rec in batch_records(data, 0, h):
        if rec.timestamp >= timestamp and rec.offset >= start:
            return rec.offset, rec.timestamp
    return None


def largest_timestamp(seg: LogSegment) -> int:
    """Kafka's LogSegment.largestTimestamp: max timestamp, or the file's mtime."""
    if seg.max_timestamp > 0:
        return seg.max_timestamp
    try:
        return int(os.stat(seg.path).st_mtime * 1000)
    except OSError:
        return 0


def unlink_if_present(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = [
    "READ_CACHE_ENTRIES",
    "LocalLog",
    "check_segment_order",
    "parse_partition_dir_name",
]
