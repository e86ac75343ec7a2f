"""Reads of remote (tiered, KIP-405) segments for Fetch, ShareFetch and ListOffsets.

What this module owns
    :class:`RemoteReaderPool`, one per broker (made with the RemoteLogManager), and the
    per-partition :class:`RemotePartitionReader` it hands out, which implements
    :class:`snakka.storage.unified_log.RemoteLogReader`: the part of a tiered partition's log
    below its first local segment. Kafka spreads this over RemoteLogManager.read,
    RemoteLogReader (the thread-pool task), RemoteIndexCache and DelayedRemoteFetch; here the
    caches and the threads live in the pool, the offset arithmetic in the reader.

How a read works (never blocking the event loop)
    The segment holding an offset comes from the metadata manager
    (``remote_log_segment_metadata(tp, epoch, offset)``). Its offset, time and transaction
    indexes are fetched whole (``rsm.fetch_index``), parsed with :mod:`snakka.storage.index`
    (the same classes and checks as local segments) and kept in an LRU bounded by
    ``remote.log.index.file.cache.total.size.bytes``. Segment bytes are fetched in
    ``rsm.chunk_size``-aligned chunks (``rsm.fetch_log_segment``, which verifies each chunk's
    CRC32C against the segment's manifest) and kept in an LRU bounded by
    ``snakka.remote.log.reader.cache.bytes``.

    A read whose indexes and bytes are all cached answers at once, with whole batches sliced
    from the chunks (one chunk: a memoryview, no copy). Otherwise the missing pieces are
    handed to the pool's threads (``remote.log.reader.threads``) as ONE task (a segment's
    first read fetches its indexes, looks up the position and fetches the chunks from there
    in the same task, so a fetch needs one round trip) and the read raises
    :class:`~snakka.storage.unified_log.RemoteFetchPending` carrying an asyncio future that
    completes once the task has delivered (successfully or not); the caller awaits it
    (bounded by ``remote.fetch.max.wait.ms``) and reads again. A read whose missing pieces
    are all being fetched already (another reader's task, a read-ahead) waits for those
    tasks instead. When a read takes chunk k of a segment it also schedules chunk k+1
    (read-ahead; at the end of a segment: the next remote segment's indexes and first
    chunk), so a sequential consumer rarely waits.

    ListOffsets by time (Kafka's findOffsetByTimestamp) takes the first remote segment whose
    max timestamp reaches the target, its time then offset index for a position, and scans
    the batches from there. read_committed reads search the remote segments' transaction
    indexes in segment order from the one holding the fetch offset and stop where the search
    is complete (Kafka's collectAbortedTransactions); segments the metadata says have no
    aborted transaction cost nothing.

Bounds
    At most ``threads + remote.log.reader.max.pending.tasks`` tasks exist (running or
    queued). A read that needs a task beyond that is refused: its pending future completes
    when a task finishes (capacity freed), so the fetch answers without that partition's
    data in the meantime. Read-ahead only uses the first half of the queue, leaving the rest
    to reads a client waits for. One read spans at most half the chunk cache (beyond its
    first batch), so what it needs fits the cache at once (with a tiny cache a read returns
    fewer whole batches than ``max_bytes`` allows); the chunks a task delivered are not
    evicted by that delivery (a read whose first batch alone exceeds the bound still
    completes; the cache then holds that one task's chunks). Sizing: the chunk cache should
    hold two chunks per partition being read from remote storage at once (the chunk being
    read and its read-ahead); below that, read-aheads evict chunks still in use and reads
    fetch them again (correct, slower). A deleted segment's pieces are
    dropped (:meth:`RemoteReaderPool.forget_segment`); a task in flight for it still
    delivers, and its pieces age out of the LRU.

Errors
    A failed task (RemoteStorageError, a checksum mismatch, a corrupt index) is logged (a
    warning per partition per minute, the rest at debug level: an outage fails every read)
    and recorded against the pieces it was fetching; nothing is cached. The next read that
    needs one of them (within 30 s) raises :class:`RemoteReadError` (KAFKA_STORAGE_ERROR
    for that partition, as Kafka answers a failed remote fetch) and forgets the record for
    all of them, so the read after it tries the object store again. A failed read-ahead is
    only logged (no one waited for it). An offset no finished remote segment holds raises
    :class:`~snakka.storage.unified_log.OffsetOutOfRangeError`.

Threading
    All state (caches, tasks in flight, waiters) belongs to the event loop's thread; worker
    threads only call the storage manager and parse, and hand their result back with
    ``call_soon_threadsafe``. Called without a running event loop (tools, tests), a read
    does its I/O inline instead (blocking the caller, which has no loop to block).

Remote fetch quota (``remote.log.manager.fetch.max.bytes.per.second``, :mod:`snakka.remote.
quota`): the segment bytes tasks fetch are recorded; while the rate is above the quota, a fetch
read that would need the object store returns no records (no error, as Kafka answers) and no
read-ahead starts. Reads served from the caches, and ListOffsets by time, are not throttled.

Out of scope: reading segments of other brokers' leader epochs (one broker: epoch 0 is
the only epoch), compacted remote topics (refused by topic validation).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypeVar

from snakka.records.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, parse_header
from snakka.records.record import batch_records
from snakka.remote.quota import RemoteFetchQuota
from snakka.remote.storage import RemoteResourceNotFoundError
from snakka.remote.types import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from snakka.storage.index import AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex
from snakka.storage.unified_log import OffsetOutOfRangeError, RemoteFetchPending, UnifiedLog

log = logging.getLogger("snakka.remote.reader")

_T = TypeVar("_T")

KAFKA_STORAGE_ERROR = 56
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
# Estimated memory of a parsed index entry beyond its file bytes (two Python ints in two
# lists): what the index cache charges, so its bound is about memory, not file sizes.
_INDEX_ENTRY_OVERHEAD = 64
# Errors remembered for the next read (oldest dropped beyond this), and for how long: the
# read that waited for the failed task comes back within remote.fetch.max.wait.ms; a read
# much later (the consumer went away and came back) tries the store again instead.
_MAX_RECORDED_ERRORS = 1024
_ERROR_TTL_S = 30.0
# An outage fails every read of a partition: one warning per partition per this many
# seconds, the rest at debug level.
_WARN_EVERY_S = 60.0
# A read spanning segments after a compacted-away offset, or many txn indexes: at most this
# many segments' indexes are asked for in one round.
_MAX_SEGMENTS_PER_ROUND = 8
# A segment's first read fetches from the offset index's floor position; the batch holding
# the offset lies up to index.interval.bytes (4 KiB by default) further: fetch this much more
# in the same task so the read needs one round.
_INDEX_SLACK = 16 * 1024
# Retries of a read without a loop (inline I/O) before giving up (each fetches what is missing).
_INLINE_ROUNDS = 64


class RemoteReadError(Exception):
    """A remote read failed (object store down, checksum mismatch, corrupt index): the
    partition answers KAFKA_STORAGE_ERROR; the next read tries again."""

    error_code = KAFKA_STORAGE_ERROR


class RemoteLogMetadataLookup(Protocol):
    """What the reader needs of the RemoteLogMetadataManager."""

    def list_remote_log_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        ...

    def remote_log_segment_metadata(self, tp: TopicIdPartition, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        ...

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        ...


class RemoteSegmentSource(Protocol):
    """What the reader needs of the RemoteStorageManager (snakka.remote.storage)."""

    chunk_size: int

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int) -> bytes:
        ...

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        ...


@dataclass(slots=True)
class SegmentIndexes:
    """A remote segment's parsed indexes (Kafka's RemoteIndexCache.Entry)."""

    offset: OffsetIndex
    time: TimeIndex
    txn: TransactionIndex
    charge: int  # bytes charged to the index cache


# Cache keys: ("idx", segment uuid) and ("chunk", segment uuid, chunk number).
_Key = tuple[object, ...]


def _idx_key(md: RemoteLogSegmentMetadata) -> _Key:
    return ("idx", md.segment_id.id)


def _chunk_key(md: RemoteLogSegmentMetadata, k: int) -> _Key:
    return ("chunk", md.segment_id.id, k)


@dataclass(slots=True)
class _Task:
    """One unit of work for a reader thread: a segment's indexes and/or a byte range of it.

    With ``position_of`` set, the range starts at the offset index's position for that
    offset (known only once the indexes are parsed, in the same task) and spans ``span``
    bytes; otherwise it is [start, end)."""

    md: RemoteLogSegmentMetadata
    indexes: bool = False
    start: int = 0
    end: int = 0
    position_of: int | None = None
    span: int = 0
    background: bool = False  # a read-ahead: nobody waits, a failure is only logged
    # Results, filled by the worker.
    parsed: SegmentIndexes | None = None
    chunks: dict[int, bytes] = field(default_factory=dict)
    error: BaseException | None = None
    failed_keys: list[_Key] = field(default_factory=list)

    def keys(self, chunk_size: int) -> list[_Key]:
        """The cache keys this task is known (before it runs) to deliver."""
        out: list[_Key] = [_idx_key(self.md)] if self.indexes else []
        if self.position_of is None and self.end > self.start:
            out.extend(_chunk_key(self.md, k) for k in
                       range(self.start // chunk_size, (self.end - 1) // chunk_size + 1))
        return out


class _Missing(Exception):
    """Internal: a read needs this task's pieces first."""

    def __init__(self, task: _Task) -> None:
        super().__init__("remote pieces missing")
        self.task = task


class _Pending(Exception):
    """Internal: several reads' pieces are missing (one round for all of them)."""

    def __init__(self, tasks: list[_Task]) -> None:
        super().__init__("remote pieces missing")
        self.tasks = tasks


class RemoteReaderPool:
    """The broker's remote reads: threads, the chunk and index caches, tasks in flight.

    ``rlmm`` is anything with ``list_remote_log_segments`` / ``remote_log_segment_metadata`` /
    ``highest_offset_for_epoch``; ``rsm`` a RemoteStorageManager (thread-safe)."""

    def __init__(self, rlmm: RemoteLogMetadataLookup, rsm: RemoteSegmentSource, *,
                 cache_bytes: int, threads: int, max_pending: int,
                 index_cache_bytes: int, fetch_quota: RemoteFetchQuota | None = None) -> None:
        self.rlmm = rlmm
        # remote.log.manager.fetch.max.bytes.per.second (remote/quota.py): what the tasks
        # fetch is recorded; over it, fetch reads that need the object store get no records.
        self.fetch_quota = fetch_quota
        self.rsm = rsm
        self.chunk_size = int(rsm.chunk_size)
        if self.chunk_size <= 0:
            raise ValueError(f"remote storage chunk size {self.chunk_size} must be positive")
        self.cache_bytes = cache_bytes
        self.index_cache_bytes = index_cache_bytes
        self.threads = max(1, threads)
        self.max_pending = max(0, max_pending)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.threads, thread_name_prefix="remote-log-reader")
        self._chunks: OrderedDict[_Key, bytes] = OrderedDict()
        self._chunk_total = 0
        self._indexes: OrderedDict[_Key, SegmentIndexes] = OrderedDict()
        self._index_total = 0
        # Pieces being fetched -> callbacks to run when their task ends.
        self._inflight: dict[_Key, list[Callable[[], None]]] = {}
        # Pieces of failed tasks -> (the error, every piece of that task, when).
        self._errors: OrderedDict[_Key, tuple[BaseException, list[_Key], float]] = \
            OrderedDict()
        self._tasks = 0  # submitted, not yet delivered
        self._capacity_waiters: list[asyncio.Future[None]] = []
        self._warned: dict[TopicIdPartition, float] = {}  # partition -> last warning
        self._closed = False
        # Counters (tests, metrics): tasks run, read-ahead tasks, reads answered, refusals.
        self.tasks_run = 0
        self.prefetches = 0
        self.reads_served = 0
        self.refused = 0

    # -- public ------------------------------------------------------------------------
    def reader_for(self, log: UnifiedLog, tp: TopicIdPartition) -> RemotePartitionReader:
        return RemotePartitionReader(self, log, tp)

    def forget_segment(self, segment_id: RemoteLogSegmentId) -> None:
        """A remote segment was deleted: drop what is cached of it. A task in flight for it
        may still deliver; its pieces age out of the LRU (no one asks for them again)."""
        sid = segment_id.id
        for key in [k for k in self._chunks if k[1] == sid]:
            self._chunk_total -= len(self._chunks.pop(key))
        ikey = ("idx", sid)
        entry = self._indexes.pop(ikey, None)
        if entry is not None:
            self._index_total -= entry.charge
        for key in [k for k in self._errors if k[1] == sid]:
            del self._errors[key]

    def close(self) -> None:
        """Stop the threads (queued tasks are dropped) and wake everyone waiting."""
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
        callbacks = [cb for cbs in self._inflight.values() for cb in cbs]
        self._inflight.clear()
        for cb in callbacks:
            cb()
        self._wake_capacity()
        self._chunks.clear()
        self._indexes.clear()
        self._chunk_total = self._index_total = 0

    @property
    def cached_bytes(self) -> int:
        """Bytes of segment chunks held: at most ``cache_bytes``, or the last task's
        chunks if they alone are more."""
        return self._chunk_total

    @property
    def cached_index_bytes(self) -> int:
        return self._index_total

    @property
    def tasks_in_flight(self) -> int:
        return self._tasks

    # -- cache lookups (event loop) ----------------------------------------------------
    def indexes(self, md: RemoteLogSegmentMetadata) -> SegmentIndexes | None:
        key = _idx_key(md)
        entry = self._indexes.get(key)
        if entry is not None:
            self._indexes.move_to_end(key)
        return entry

    def chunk(self, md: RemoteLogSegmentMetadata, k: int) -> bytes | None:
        key = _chunk_key(md, k)
        data = self._chunks.get(key)
        if data is not None:
            self._chunks.move_to_end(key)
        return data

    def raise_recorded_error(self, keys: Iterable[_Key]) -> None:
        """If a failed task recorded an error for any of ``keys``: forget it for every piece
        of that task (reported once; the read after this one tries again) and raise."""
        now = time.monotonic()
        for key in keys:
            failure = self._errors.get(key)
            if failure is not None:
                err, failed, at = failure
                for k in failed:
                    self._errors.pop(k, None)
                if now - at <= _ERROR_TTL_S:
                    raise RemoteReadError(f"remote read failed: {err}") from err

    def _put_chunks(self, md: RemoteLogSegmentMetadata, chunks: dict[int, bytes]) -> None:
        """Cache a task's chunks, then evict the least recently used others down to the
        bound. The chunks just delivered are never evicted by their own delivery: a read
        that needs more than the bound still finds what it waited for."""
        fresh = set()
        for k, data in chunks.items():
            key = _chunk_key(md, k)
            old = self._chunks.pop(key, None)
            if old is not None:
                self._chunk_total -= len(old)
            self._chunks[key] = data
            self._chunk_total += len(data)
            fresh.add(key)
        if self._chunk_total <= self.cache_bytes:
            return
        for key in list(self._chunks):
            if self._chunk_total <= self.cache_bytes:
                break
            if key not in fresh:
                self._chunk_total -= len(self._chunks.pop(key))

    def _put_indexes(self, key: _Key, entry: SegmentIndexes) -> None:
        old = self._indexes.pop(key, None)
        if old is not None:
            self._index_total -= old.charge
        self._indexes[key] = entry
        self._index_total += entry.charge
        while self._index_total > self.index_cache_bytes and len(self._indexes) > 1:
            _k, evicted = self._indexes.popitem(last=False)
            self._index_total -= evicted.charge

    def _record_error(self, keys: list[_Key], err: BaseException) -> None:
        at = time.monotonic()
        for key in keys:
            self._errors[key] = (err, keys, at)
            self._errors.move_to_end(key)
        while len(self._errors) > _MAX_RECORDED_ERRORS:
            self._errors.popitem(last=False)

    # -- scheduling (event loop) -------------------------------------------------------
    def fetch(self, tasks: Sequence[_Task]) -> asyncio.Future[None] | None:
        """Start ``tasks`` (the pieces a read needs) and return a future completing when all
        have delivered; None when there is no running loop and the work was done inline."""
        if self._closed:  # shutting down: never I/O on the loop, never a new task
            raise RemoteReadError("the remote reader is closed")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            for task in tasks:
                self._run(task)
                self._deliver(task)
            return None
        ready: asyncio.Future[None] = loop.create_future()
        waiting = [0]

        def one_done() -> None:
            waiting[0] -= 1
            if waiting[0] == 0 and not ready.done():
                ready.set_result(None)

        to_submit: list[_Task] = []
        for task in tasks:
            # The pieces not cached, if all are on their way (a read-ahead, another reader's
            # task): wait for those tasks instead of fetching again.
            keys = [k for k in task.keys(self.chunk_size)
                    if k not in self._chunks and k not in self._indexes]
            if keys and all(k in self._inflight for k in keys):
                for k in keys:
                    waiting[0] += 1
                    self._inflight[k].append(one_done)
                continue
            to_submit.append(task)
        capacity = self.threads + self.max_pending - self._tasks
        if len(to_submit) > capacity:
            # Refused: wait for capacity (the caller answers without this partition's data
            # if that takes longer than it may wait).
            self.refused += 1
            log.debug("remote reads: %d tasks in flight, refusing %d more", self._tasks,
                      len(to_submit))
            return self._wait_capacity(loop)
        for task in to_submit:
            waiting[0] += 1
            self._submit(loop, task, one_done)
        if waiting[0] == 0:
            ready.set_result(None)
        return ready

    def prefetch(self, tasks: Sequence[_Task]) -> None:
        """Read-ahead: start ``tasks`` if nothing of them is cached or on its way and the
        first half of the queue has room; nobody waits for them."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: no background work (inline reads fetch what they need)
        if self._closed or self.fetch_throttled():
            return
        for task in tasks:
            if self._tasks >= self.threads + self.max_pending // 2:
                return
            keys = task.keys(self.chunk_size)
            if not keys or any(k in self._inflight or k in self._chunks or k in self._indexes
                               for k in keys):
                continue
            self.prefetches += 1
            task.background = True
            self._submit(loop, task, None)

    def fetch_throttled(self) -> bool:
        """Whether remote reads for fetches are over ``remote.log.manager.fetch.max.bytes.
        per.second`` now (Kafka's getFetchThrottleTimeMs() > 0)."""
        q = self.fetch_quota
        return q is not None and q.throttle_ms() > 0

    def _wait_capacity(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = loop.create_future()
        self._capacity_waiters.append(fut)
        return fut

    def _wake_capacity(self) -> None:
        waiters, self._capacity_waiters = self._capacity_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _submit(self, loop: asyncio.AbstractEventLoop, task: _Task,
                done: Callable[[], None] | None) -> None:
        keys = task.keys(self.chunk_size)
        for k in keys:
            cbs = self._inflight.setdefault(k, [])
            if done is not None and k is keys[0]:
                cbs.append(done)
        if not keys and done is not None:  # pragma: no cover - every task has a key
            done()
        self._tasks += 1

        def finished(_f: concurrent.futures.Future[None]) -> None:
            try:
                loop.call_soon_threadsafe(self._finish, task, keys)
            except RuntimeError:  # the loop is closed (shutdown): nobody waits any more
                pass

        try:
            fut = self._executor.submit(self._run, task)
        except RuntimeError:  # executor shut down (close raced the read)
            task.error = RemoteReadError("remote reader closed")
            self._finish(task, keys)
            return
        fut.add_done_callback(finished)

    def _finish(self, task: _Task, keys: list[_Key]) -> None:
        self._tasks -= 1
        self._deliver(task)
        for k in keys:
            for cb in self._inflight.pop(k, ()):
                cb()
        self._wake_capacity()

    # -- the work (reader threads, or inline without a loop) ---------------------------
    def _run(self, task: _Task) -> None:
        """Fetch what ``task`` asks for. Never raises: errors are put on the task."""
        self.tasks_run += 1  # int += under the GIL: good enough for a counter
        md = task.md
        rsm = self.rsm
        cs = self.chunk_size
        try:
            if task.indexes:
                task.parsed = self._load_indexes(md)
            start, end = task.start, task.end
            if task.position_of is not None:
                entry = task.parsed
                if entry is None:  # pragma: no cover - position_of implies indexes
                    return
                start = entry.offset.lookup(task.position_of)[1]
                end = start + task.span
            end = min(end, md.segment_size_in_bytes)
            if end <= start:
                return
            k0, k1 = start // cs, (end - 1) // cs
            task.failed_keys = [_chunk_key(md, k) for k in range(k0, k1 + 1)]
            data = rsm.fetch_log_segment(md, k0 * cs, min((k1 + 1) * cs,
                                                         md.segment_size_in_bytes))
            for i, k in enumerate(range(k0, k1 + 1)):
                piece = data[i * cs:(i + 1) * cs]
                if piece:
                    task.chunks[k] = bytes(piece)
            task.failed_keys = []
        except Exception as e:  # noqa: BLE001 - every failure is a storage error of the read
            task.error = e
            if task.indexes and task.parsed is None:
                task.failed_keys.insert(0, _idx_key(md))
            self._log_failure(md, e)

    def _log_failure(self, md: RemoteLogSegmentMetadata, e: Exception) -> None:
        """Once per partition per _WARN_EVERY_S at warning level (reader threads: the dict
        is only ever set item by item, atomic under the GIL)."""
        tp = md.topic_id_partition
        now = time.monotonic()
        last = self._warned.get(tp)
        warn = last is None or now - last >= _WARN_EVERY_S
        if warn:
            self._warned[tp] = now
        log.log(logging.WARNING if warn else logging.DEBUG,
                "remote read of segment %s (offsets %d-%d) of %s failed: %r%s",
                md.segment_id.id, md.start_offset, md.end_offset, tp, e,
                f" (more failures of this partition within {_WARN_EVERY_S:.0f} s are logged "
                "at debug level)" if warn else "")

    def _load_indexes(self, md: RemoteLogSegmentMetadata) -> SegmentIndexes:
        rsm = self.rsm
        base, nxt = md.start_offset, md.end_offset + 1
        name = f"{md.topic_id_partition}/{md.segment_id.id}"
        raw_offset = rsm.fetch_index(md, IndexType.OFFSET)
        raw_time = rsm.fetch_index(md, IndexType.TIMESTAMP)
        raw_txn = b""
        if not md.txn_index_empty:
            try:
                raw_txn = rsm.fetch_index(md, IndexType.TRANSACTION)
            except RemoteResourceNotFoundError:
                raw_txn = b""  # a segment without aborted transactions has no txn index
        offset = OffsetIndex.from_bytes(raw_offset, base, md.segment_size_in_bytes,
                                        f"{name}.index")
        time = TimeIndex.from_bytes(raw_time, base, nxt, f"{name}.timeindex")
        txn = TransactionIndex.from_bytes(raw_txn, base, nxt, f"{name}.txnindex")
        entries = offset.entries + time.entries + txn.entries
        charge = len(raw_offset) + len(raw_time) + len(raw_txn) + \
            entries * _INDEX_ENTRY_OVERHEAD
        return SegmentIndexes(offset, time, txn, charge)

    def _deliver(self, task: _Task) -> None:
        """Put a finished task's pieces in the caches, or record its error (event loop)."""
        if self._closed:
            return
        if task.parsed is not None:
            self._put_indexes(_idx_key(task.md), task.parsed)
        if task.chunks:
            self._put_chunks(task.md, task.chunks)
            if self.fetch_quota is not None:
                self.fetch_quota.record(sum(len(c) for c in task.chunks.values()))
        if task.error is not None and not task.background:
            self._record_error(task.failed_keys or task.keys(self.chunk_size), task.error)


def _no_records() -> bytes:
    """A fetch read throttled by the remote fetch quota: no records, no error (Kafka)."""
    return b""


class RemotePartitionReader:
    """The remote part of one tiered partition's log (``UnifiedLog.remote_log_reader``):
    :class:`snakka.storage.unified_log.RemoteLogReader` over a :class:`RemoteReaderPool`."""

    def __init__(self, pool: RemoteReaderPool, log: UnifiedLog, tp: TopicIdPartition) -> None:
        self.pool = pool
        self.log = log
        self.tp = tp

    def __repr__(self) -> str:
        return f"RemotePartitionReader({self.tp})"

    # -- helpers -------------------------------------------------------------------------
    def _epoch(self) -> int:
        # One broker: every offset was written in leader epoch 0 (snakka has no leader-epoch
        # cache to ask; Kafka's read asks it for the epoch of the offset).
        return self.log.leader_epoch

    def _segment_for(self, offset: int) -> RemoteLogSegmentMetadata | None:
        md = self.pool.rlmm.remote_log_segment_metadata(self.tp, self._epoch(), offset)
        if md is None or md.state != _FINISHED:
            return None
        return md

    def _finished_segments(self) -> list[RemoteLogSegmentMetadata]:
        """Finished remote segments below the first local offset, by start offset (a
        segment still on disk too is the local log's to answer)."""
        local_start = self.log.local_log_start_offset
        return sorted((md for md in self.pool.rlmm.list_remote_log_segments(self.tp)
                       if md.state == _FINISHED and md.start_offset < local_start),
                      key=lambda md: md.start_offset)

    def _with_pieces(self, attempt: Callable[[], _T],
                     throttled: Callable[[], _T] | None = None) -> _T:
        """Run ``attempt`` (a pure computation over cached pieces that raises _Missing or
        _Pending); fetch what it misses, inline without a loop (then retry), else raise
        RemoteFetchPending. With ``throttled`` (fetch reads), a read that needs the object
        store while the remote fetch quota is exceeded returns ``throttled()`` instead."""
        pool = self.pool
        for _ in range(_INLINE_ROUNDS):
            try:
                return attempt()
            except _Missing as m:
                tasks = [m.task]
            except _Pending as p:
                tasks = p.tasks
            for t in tasks:
                pool.raise_recorded_error(t.keys(pool.chunk_size))
            if throttled is not None and pool.fetch_throttled():
                assert pool.fetch_quota is not None
                pool.fetch_quota.throttled += 1
                return throttled()
            ready = pool.fetch(tasks)
            if ready is not None:
                raise RemoteFetchPending(ready, f"remote data of {self.tp} is being fetched")
        raise RemoteReadError(f"remote read of {self.tp} made no progress")  # pragma: no cover

    def _indexes_or_missing(self, md: RemoteLogSegmentMetadata, position_of: int | None = None,
                            span: int = 0) -> SegmentIndexes:
        entry = self.pool.indexes(md)
        if entry is None:
            raise _Missing(_Task(md, indexes=True, position_of=position_of, span=span))
        return entry

    def _bytes(self, md: RemoteLogSegmentMetadata, start: int, end: int,
               want_end: int | None = None) -> bytes | memoryview:
        """Segment bytes [start, end) from cached chunks (a memoryview of one chunk when the
        range lies in one). Missing: fetch [start, want_end or end) in one task."""
        pool = self.pool
        cs = pool.chunk_size
        end = min(end, md.segment_size_in_bytes)
        if end <= start:
            return b""
        k0, k1 = start // cs, (end - 1) // cs
        pieces = []
        for k in range(k0, k1 + 1):
            data = pool.chunk(md, k)
            if data is None:
                # The whole range in one task (cached chunks of it too): its chunks arrive
                # together and survive their own delivery, whatever the cache's bound.
                fetch_end = max(end, want_end or 0)
                raise _Missing(_Task(md, start=start,
                                     end=min(fetch_end, md.segment_size_in_bytes)))
            pieces.append(data)
        lo = start - k0 * cs
        if k0 == k1:
            data = pieces[0]
            if lo == 0 and end - start == len(data):
                return data
            return memoryview(data)[lo:lo + (end - start)]
        joined = b"".join(pieces)
        return memoryview(joined)[lo:lo + (end - start)]

    def _header(self, md: RemoteLogSegmentMetadata, pos: int, want_end: int
                ) -> BatchHeader | None:
        size = md.segment_size_in_bytes
        if pos + HEADER_SIZE > size:
            return None
        return parse_header(self._bytes(md, pos, pos + HEADER_SIZE, want_end))

    def _read_ahead(self, md: RemoteLogSegmentMetadata, end_position: int) -> None:
        """After a read ending at ``end_position`` of ``md``: schedule the next chunk, or at
        the segment's end the next remote segment's indexes and first chunk."""
        pool = self.pool
        cs = pool.chunk_size
        size = md.segment_size_in_bytes
        nxt_k = (max(end_position, 1) - 1) // cs + 1  # after the last chunk the read took
        if nxt_k * cs < size:
            pool.prefetch([_Task(md, start=nxt_k * cs, end=min((nxt_k + 1) * cs, size))])
            return
        nxt_offset = md.end_offset + 1
        if nxt_offset >= self.log.local_log_start_offset:
            return
        nxt = self._segment_for(nxt_offset)
        if nxt is not None:
            pool.prefetch([_Task(nxt, indexes=True, start=0,
                                 end=min(cs, nxt.segment_size_in_bytes))])

    # -- RemoteLogReader ---------------------------------------------------------------
    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> bytes | memoryview:
        """Whole batches of one remote segment from the batch holding ``fetch_offset``: at
        most ``max_bytes`` (the first batch whole if ``min_one_message``), below
        ``max_offset``. Raises RemoteFetchPending, RemoteReadError or OffsetOutOfRangeError."""
        md = self._segment_for(fetch_offset)
        if md is None:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} of {self.tp} is in no remote segment",
                log_start_offset=self.log.log_start_offset,
                log_end_offset=self.log.log_end_offset)
        # Bytes beyond the first batch: at most half the chunk cache, so a read's pieces fit.
        span_cap = max(self.pool.cache_bytes // 2, 1)
        budget = max(0, max_bytes)
        while True:
            found = self._with_pieces(partial(self._read_segment, md, fetch_offset, budget,
                                              span_cap, max_offset, min_one_message),
                                      throttled=_no_records)
            if found is not None:
                return found
            # No batch of md reaches fetch_offset (cannot happen without compaction): the
            # next remote segment, as Kafka's read does.
            nxt_offset = md.end_offset + 1
            if nxt_offset >= self.log.local_log_start_offset:
                return b""
            nxt = self._segment_for(nxt_offset)
            if nxt is None:
                return b""
            md = nxt

    def _read_segment(self, md: RemoteLogSegmentMetadata, fetch_offset: int, budget: int,
                      span_cap: int, max_offset: int | None,
                      min_one_message: bool) -> bytes | memoryview | None:
        """The read over cached pieces; None when no batch of ``md`` reaches the offset."""
        size = md.segment_size_in_bytes
        want = max(min(budget, span_cap), 1) + HEADER_SIZE
        idx = self._indexes_or_missing(
            md, position_of=fetch_offset, span=max(want, min(want + _INDEX_SLACK, span_cap)))
        pos = idx.offset.lookup(fetch_offset)[1]
        # The batch holding fetch_offset: walk headers from the index's floor position.
        while True:
            h = self._header(md, pos, pos + want)
            if h is None:
                return None
            if h.base_offset + h.last_offset_delta >= fetch_offset:
                break
            pos += h.batch_length + LOG_OVERHEAD
        first_pos = pos
        first_size = h.batch_length + LOG_OVERHEAD
        if max_offset is not None and h.base_offset + h.last_offset_delta >= max_offset:
            return b""
        if first_size > budget:
            if not min_one_message:
                return b""
            end = first_pos + first_size
        else:
            limit = min(size, first_pos + min(budget, max(span_cap, first_size)))
            # Everything up to the limit is either returned or one header past it: fetch it
            # in one round, then walk the headers in memory.
            self._bytes(md, first_pos, limit)
            end = first_pos
            while end + HEADER_SIZE <= limit:
                nh = self._header(md, end, limit)
                assert nh is not None
                nsize = nh.batch_length + LOG_OVERHEAD
                if end + nsize > limit:
                    break
                if max_offset is not None and nh.base_offset + nh.last_offset_delta >= max_offset:
                    break
                end += nsize
            if end == first_pos:  # pragma: no cover - the first batch fits by the test above
                end = first_pos + first_size
        data = self._bytes(md, first_pos, end)
        self.pool.reads_served += 1
        self._read_ahead(md, end)
        return data

    def offset_for_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """Kafka's findOffsetByTimestamp over the remote segments below the local ones:
        the first segment whose max timestamp reaches ``timestamp`` (and end reaches
        ``start_offset``), its time index then offset index for a position, then the first
        record there with timestamp >= ``timestamp`` and offset >= ``start_offset``."""
        return self._with_pieces(lambda: self._offset_for_timestamp(timestamp, start_offset))

    def _offset_for_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        for md in self._finished_segments():
            if md.max_timestamp_ms < timestamp or md.end_offset < start_offset:
                continue
            idx = self._indexes_or_missing(md)
            _ts, ts_offset = idx.time.lookup(timestamp)
            pos = idx.offset.lookup(max(ts_offset, start_offset))[1]
            size = md.segment_size_in_bytes
            cs = self.pool.chunk_size
            while True:
                h = self._header(md, pos, pos + cs)
                if h is None:
                    break
                bsize = h.batch_length + LOG_OVERHEAD
                if h.max_timestamp >= timestamp and \
                        h.base_offset + h.last_offset_delta >= start_offset:
                    data = self._bytes(md, pos, pos + bsize, pos + max(bsize, cs))
                    for rec in batch_records(data, 0, h):
                        if rec.timestamp >= timestamp and rec.offset >= start_offset:
                            return rec.offset, rec.timestamp
                pos += bsize
                if pos >= size:
                    break
        return None

    def segment_offset_for_timestamp(self, timestamp: int) -> int | None:
        """Metadata only, no I/O: the start offset of the first remote segment (below the
        local ones) whose max timestamp reaches ``timestamp``, or None. Every record before
        it is older than ``timestamp``; a caller that cannot wait for the exact answer
        (:meth:`offset_for_timestamp`) may start there."""
        for md in self._finished_segments():
            if md.max_timestamp_ms >= timestamp:
                return md.start_offset
        return None

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int
                                     ) -> tuple[list[AbortedTxn], bool]:
        """Kafka's collectAbortedTransactions over the remote segments (below the local
        ones) from the one holding ``start_offset``: their txn indexes' entries overlapping
        [start_offset, upper_bound_offset), complete once one entry's LSO reaches the bound.
        Segments known to have no aborted transaction cost nothing."""
        return self._with_pieces(lambda: self._collect_aborted(start_offset, upper_bound_offset))

    def _collect_aborted(self, start_offset: int, upper_bound_offset: int
                         ) -> tuple[list[AbortedTxn], bool]:
        segments = [md for md in self._finished_segments()
                    if md.end_offset >= start_offset and not md.txn_index_empty]
        out: list[AbortedTxn] = []
        for i, md in enumerate(segments):
            entry = self.pool.indexes(md)
            if entry is None:
                # The indexes of this segment and the next few (in order: the search may
                # complete in any of them) in one round.
                raise _Pending([_Task(later, indexes=True) for later in
                                segments[i:i + _MAX_SEGMENTS_PER_ROUND]
                                if self.pool.indexes(later) is None])
            found = entry.txn.collect_aborted_txns(start_offset, upper_bound_offset)
            out.extend(found.aborted)
            if found.complete:
                return out, True
        return out, False

    def highest_offset(self) -> int:
        """The last offset in remote storage (ListOffsets -5), or -1 (Kafka's
        findHighestRemoteOffset: the latest epoch that has any)."""
        rlmm = self.pool.rlmm
        for epoch in range(self._epoch(), -1, -1):
            found = rlmm.highest_offset_for_epoch(self.tp, epoch)
            if found is not None:
                return found
        return -1


__all__ = [
    "RemoteLogMetadataLookup",
    "RemotePartitionReader",
    "RemoteReadError",
    "RemoteReaderPool",
    "RemoteSegmentSource",
    "SegmentIndexes",
]
