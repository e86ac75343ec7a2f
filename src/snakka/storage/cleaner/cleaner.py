"""Cleaning one log (Kafka's ``Cleaner``): offset map, segment groups, ``.cleaned`` -> ``.swap``.

What this module owns
    One cleaning pass over one compacted partition log, given what :mod:`.manager` chose
    (:class:`LogToClean`: the dirty range ``[first_dirty_offset, first_uncleanable_offset)``):

    1. **Offset map.** Read the dirty segments and record, per key, the latest offset
       (:class:`~.offset_map.OffsetMap`, bounded by ``log.cleaner.dedupe.buffer.size``).
       When the map is full the pass ends there: ``end_offset`` is the offset after the
       last batch mapped, and the rest waits for the next pass (Kafka does the same).
    2. **Groups.** The segments from the log start up to ``end_offset`` are grouped into
       runs whose total size fits ``segment.bytes`` (and whose offsets fit one segment's
       relative int32 offsets), so cleaning also merges the small segments it leaves behind.
    3. **Clean each group** into a new segment written beside the log as
       ``<base>.log.cleaned`` (+ ``.index`` / ``.timeindex`` / ``.txnindex``, Kafka's
       formats), keeping of each batch what :func:`~.filter.filter_batch` says. Offsets
       never change (gaps are allowed, as in Kafka); the group's last batch is always kept
       (empty if need be), so the cleaned segment ends where the group ended.
    4. **Swap** the cleaned segment in place of the group, on the thread that owns the log
       (:mod:`.swap`: the ``.cleaned`` -> ``.swap`` -> live protocol and its crash recovery).

Why the work happens on a thread and the swap does not
    Reading, filtering and writing segments is long (seconds for big logs); it runs on the
    cleaner thread with its own file descriptors (a segment that retention deletes
    meanwhile stays readable through them), so produce and fetch on the same partition are
    never blocked by it. Changing the segment list is short (a few renames) and happens
    where every other change of it happens, on the owner thread, so readers never see a
    half-swapped log. If the log changed under the pass (segments deleted or truncated,
    the log closed), the swap finds a group segment missing, drops the cleaned files and
    the pass ends as aborted: nothing is lost, the next pass starts again.

Throttling
    ``log.cleaner.io.max.bytes.per.second`` bounds read + written bytes per second
    (:class:`Throttler`, Kafka's): the cleaner thread sleeps when it is ahead.

Threading
    :class:`Cleaner` runs on one cleaner thread (or the caller's, in ``clean_once`` tests);
    ``run_on_owner`` runs the swap (and the snapshot of the log's state a pass starts from)
    on the owner thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from snakka.limits import INT32_MAX
from snakka.records.batch import LOG_OVERHEAD, parse_header
from snakka.util.pacing import BytePacer

from ..index import AbortedTxn
from ..local_log import fsync_dir
from ..segment import LogSegment
from .filter import CleanContext, CleanedTxns, add_batch_to_offset_map, filter_batch
from .offset_map import OffsetMap
from .swap import CleanedSegment, replace_segments, segment_batches

# The cleaner thread gives the interpreter lock up (time.sleep(0)) once per millisecond of
# work: a thread waiting for the lock otherwise gets it only every sys.getswitchinterval()
# (5 ms), and the event loop needs it several times per request, so produce latency p99 grew
# by tens of ms while a pass ran (bench/bench_compaction.py: p99 4-89 ms -> 1.2-4 ms). Not
# after every batch: sleep(0) costs ~100 us (timer slack), which halved cleaning throughput.
_YIELD_EVERY_S = 0.001


class _GilYield:
    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = 0.0

    def __call__(self) -> None:
        now = time.perf_counter()
        if now >= self._next:
            time.sleep(0)
            self._next = time.perf_counter() + _YIELD_EVERY_S


_yield_gil = _GilYield()

if TYPE_CHECKING:
    from ..unified_log import UnifiedLog

log = logging.getLogger("snakka.cleaner")

T = TypeVar("T")


class RunOnOwner(Protocol):
    """Runs a callable on the thread that owns the logs and returns its result."""

    def __call__(self, fn: Callable[[], T], /) -> T: ...


class CleaningAborted(Exception):
    """The log changed under a pass (closed, deleted, truncated) or the cleaner stops."""


class LogToClean(NamedTuple):
    """What the manager chose to clean (Kafka's LogToClean): the log and its dirty range."""

    log: UnifiedLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int  # bytes of the segments below first_dirty_offset
    cleanable_bytes: int  # bytes of the segments in the dirty range

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0


@dataclass(slots=True)
class CleanResult:
    """What one pass did (Kafka's CleanerStats, plus the offsets)."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int = -1  # the new cleaner checkpoint: offsets below it are clean
    aborted: bool = False
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_records: int = 0
    segments_before: int = 0  # segments cleaned
    segments_after: int = 0  # the segments they became (groups swapped in)
    elapsed_s: float = 0.0

    @property
    def tp(self) -> str:
        return f"{self.topic}-{self.partition}"


class Throttler:
    """``log.cleaner.io.max.bytes.per.second`` for the cleaner thread (util.pacing's
    arithmetic, Kafka's Throttler): it sleeps on ``stop``, so a shutdown wakes it."""

    # Shorter waits are not slept (a sleep costs ~100 us of timer slack): their debt stays
    # in the pacer and is slept off once it adds up to this.
    MIN_SLEEP_S = 0.01

    def __init__(self, bytes_per_second: float, stop: threading.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._pacer = BytePacer(bytes_per_second)
        self._stop = stop
        self._clock = clock

    def maybe_throttle(self, nbytes: int) -> None:
        if self._pacer.unlimited:
            return
        wait = self._pacer.delay(nbytes, self._clock())
        if wait >= self.MIN_SLEEP_S:
            self._stop.wait(wait)


class _PassState(NamedTuple):
    """The log as a pass starts from it, taken on the owner thread."""

    segments: tuple[LogSegment, ...]
    producer_last_offsets: dict[int, int]
    # The aborted transactions with data below the pass's end, from the whole log (Kafka's
    # collectAbortedTransactions): an ABORT marker, and so its txnindex entry, may lie in a
    # later segment than the data, the active one included.
    aborted: list[AbortedTxn]


class Cleaner:
    """Cleans one log at a time; see the module docstring."""

    def __init__(
        self,
        *,
        dedupe_buffer_size: int,
        load_factor: float,
        io_buffer_size: int,
        throttler: Throttler,
        stop: threading.Event,
        run_on_owner: RunOnOwner,
        time_ms: Callable[[], int],
    ) -> None:
        self.offset_map = OffsetMap(dedupe_buffer_size, load_factor)
        self.io_buffer_size = io_buffer_size
        self.throttler = throttler
        self.stop = stop
        self.run_on_owner = run_on_owner
        self.time_ms = time_ms

    # ------------------------------------------------------------ one pass

    def clean(self, todo: LogToClean) -> CleanResult:
        plog = todo.log
        result = CleanResult(plog.topic, plog.partition, todo.first_dirty_offset)
        t0 = time.monotonic()
        state = self.run_on_owner(lambda: self._pass_state(plog, todo.first_uncleanable_offset))
        try:
            end = self._build_offset_map(state.segments, todo, result, state.aborted)
            result.end_offset = end
            now = self.time_ms()
            to_clean = [s for s in state.segments if s.base_offset < end]
            groups = group_segments_by_size(to_clean, plog.config.segment_bytes,
                                            plog.config.segment_index_bytes, end)
            ctx = CleanContext(
                offset_map=self.offset_map,
                now_ms=now,
                delete_retention_ms=plog.config.delete_retention_ms,
                txns=CleanedTxns(state.aborted),
                producer_last_offsets=state.producer_last_offsets,
            )
            result.segments_before = len(to_clean)
            for group in groups:
                self._clean_group(plog, group, ctx, result)
                result.segments_after += 1
        except CleaningAborted:
            result.aborted = True
        finally:
            self.offset_map.clear()
            result.elapsed_s = time.monotonic() - t0
        return result

    @staticmethod
    def _pass_state(plog: UnifiedLog, upper_bound_offset: int) -> _PassState:
        if plog.closed:
            raise CleaningAborted(f"{plog.name} is closed")
        return _PassState(
            segments=plog.segments,
            producer_last_offsets={pid: e.last_offset
                                   for pid, e in plog.producer_state.producers.items()},
            aborted=plog.collect_aborted_transactions(
                plog.segments[0].base_offset if plog.segments else 0, upper_bound_offset),
        )

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise CleaningAborted("the cleaner is stopping")

    def _build_offset_map(self, segments: Sequence[LogSegment], todo: LogToClean,
                          result: CleanResult, aborted: Sequence[AbortedTxn]) -> int:
        """Map key -> latest offset over the dirty range (aborted data and markers put no
        key); return the offset after the last one mapped: the pass cleans up to there."""
        m = self.offset_map
        m.clear()
        start, stop_at = todo.first_dirty_offset, todo.first_uncleanable_offset
        dirty = [s for s in segments if s.base_offset < stop_at and s.next_offset > start]
        # Only transactions whose ABORT marker this read reaches: an earlier marker ended its
        # transaction before the dirty range (the producer's later data is not aborted).
        txns = CleanedTxns(t for t in aborted if t.last_offset >= start)
        for seg in dirty:
            self._check_stop()
            before = len(m)
            full = self._map_segment(seg, start, txns, result)
            result.map_records += len(m) - before
            if full:
                log.info("%s: the offset map is full (%d keys) at offset %d; the rest is "
                         "cleaned in a later pass", todo.log.name, len(m), m.latest_offset)
                return m.latest_offset + 1
            m.update_latest_offset(min(seg.next_offset, stop_at) - 1)
        # Everything below the dirty range was cleaned by earlier passes: it counts as mapped
        # (a pass with nothing dirty still drops tombstones whose horizon has passed).
        m.update_latest_offset(start - 1)
        return m.latest_offset + 1

    def _map_segment(self, seg: LogSegment, start: int, txns: CleanedTxns,
                     result: CleanResult) -> bool:
        """Put one segment's keys in the map; True when the map filled up inside it."""
        m = self.offset_map
        read = 0
        try:
            with _segment_fd(seg) as fd:
                for buf, pos, h in segment_batches(fd, seg.size, self.io_buffer_size):
                    if h.base_offset + h.last_offset_delta < start:
                        continue
                    full = add_batch_to_offset_map(m, buf, pos, h, txns, start)
                    _yield_gil()
                    read += h.batch_length + LOG_OVERHEAD
                    if full:
                        return True
                    if read >= self.io_buffer_size:
                        self.throttler.maybe_throttle(read)
                        result.bytes_read += read
                        read = 0
        finally:
            self.throttler.maybe_throttle(read)
            result.bytes_read += read
        return False

    def _clean_group(self, plog: UnifiedLog, group: Sequence[LogSegment], ctx: CleanContext,
                     result: CleanResult) -> None:
        cfg = plog.config
        cleaned = CleanedSegment(plog.dir_path, group[0].base_offset, cfg.index_interval_bytes,
                                 cfg.segment_index_bytes)
        try:
            for seg in group:
                self._check_stop()
                with _segment_fd(seg) as fd:
                    self._clean_segment(fd, seg, cleaned, ctx, result)
            # The aborted transactions whose ABORT marker was kept (their data is still
            # here) go to the cleaned segment's .txnindex, for read_committed fetches.
            for txn in ctx.txns.drain_retained_aborted():
                cleaned.txn_index.append(txn)
            cleaned.finish()
        except BaseException:
            cleaned.discard()
            raise
        swapped = self.run_on_owner(lambda: replace_segments(plog.local_log, group, cleaned))
        if not swapped:
            raise CleaningAborted(f"{plog.name} changed during cleaning")
        try:
            fsync_dir(plog.dir_path)  # the final names, durable (off the event loop)
        except FileNotFoundError:
            pass  # the partition was deleted right after the swap

    def _clean_segment(self, fd: int, seg: LogSegment, cleaned: CleanedSegment,
                       ctx: CleanContext, result: CleanResult) -> None:
        """Write what the filter keeps of one segment's batches to ``cleaned``."""
        io = 0
        for buf, pos, h in segment_batches(fd, seg.size, self.io_buffer_size):
            _yield_gil()
            self._check_stop()
            result.records_read += h.records_count
            n = h.batch_length + LOG_OVERHEAD
            io += n
            # Kafka: the batch whose next offset is the pass's upper bound is kept even
            # emptied, one per pass (not one per group: each group would keep an empty batch,
            # and a reader would meet runs of fetches with no record in them).
            out = filter_batch(buf, pos, h, ctx,
                               last_batch_of_round=h.next_offset == result.end_offset)
            if out.data is not None:
                kept_h = parse_header(out.data) if out.rewritten else h
                cleaned.append(out.data, kept_h, out.max_timestamp, out.offset_of_max_timestamp)
                result.records_kept += out.records_kept
                result.bytes_written += len(out.data)
            if io >= self.io_buffer_size:
                self.throttler.maybe_throttle(io)
                io = 0
        self.throttler.maybe_throttle(io)


@contextmanager
def _segment_fd(seg: LogSegment) -> Iterator[int]:
    """The cleaner's own descriptor of one segment, open only while that segment is read:
    a pass holds at most one (plus the cleaned segment's), however many segments the log has
    (the broker's descriptors are bounded by log.max.open.files; these bypass its pool). Once
    open, the file stays readable if retention deletes it meanwhile; deleted before, the pass
    is abandoned (its swap would find the segment gone anyway)."""
    try:
        fd = os.open(seg.path, os.O_RDONLY)
    except FileNotFoundError as e:
        raise CleaningAborted(f"segment {seg.base_offset} was deleted") from e
    try:
        yield fd
    finally:
        os.close(fd)


def group_segments_by_size(segments: Sequence[LogSegment], max_size: int, max_index_size: int,
                           end_offset: int) -> list[list[LogSegment]]:
    """Consecutive runs of ``segments`` to clean into one segment each (Kafka's
    groupSegmentsBySize): total log bytes within ``max_size``, index bytes within
    ``max_index_size``, offsets within one segment's int32 relative range."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        index_size = segments[i].offset_index.entries * 8
        time_index_size = segments[i].time_index.entries * 12
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last = min(nxt.next_offset, end_offset) - 1
            if (size + nxt.size > max_size
                    or index_size + nxt.offset_index.entries * 8 > max_index_size
                    or time_index_size + nxt.time_index.entries * 12 > max_index_size
                    or last - group[0].base_offset > INT32_MAX):
                break
            group.append(nxt)
            size += nxt.size
            index_size += nxt.offset_index.entries * 8
            time_index_size += nxt.time_index.entries * 12
            i += 1
        groups.append(group)
    return groups


