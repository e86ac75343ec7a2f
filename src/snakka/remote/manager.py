"""The RemoteLogManager (KIP-405): copies closed segments to remote storage and deletes them.

What this module owns
    For every partition of a topic with ``remote.storage.enable=true``:

    * **attaching**: the partition's :class:`~snakka.storage.unified_log.UnifiedLog` gets its
      remote reader (reads below the first local segment go there) and its
      ``highest_offset_in_remote_storage`` from the metadata manager, once the metadata
      partition it is pinned to has been replayed (readiness);
    * **the copier**: closed segments, in offset order, each wholly below the last stable
      offset and already fsynced locally (``recovery_point``: a remote segment never holds
      offsets a crash could take back), one copy at a time per partition: the metadata
      manager records COPY_SEGMENT_STARTED, the storage manager uploads (a worker thread),
      the metadata manager records COPY_SEGMENT_FINISHED, and only then does the log's
      ``highest_offset_in_remote_storage`` move, which is what lets local retention
      (``local.retention.*``, in UnifiedLog) delete the local copy;
    * **expiration** (Kafka's RLMExpirationTask): remote segments go by ``retention.ms``
      (their max timestamp), by ``retention.bytes`` (remote size + the local-only size), below
      the log start offset (DeleteRecords), and copies that never finished (a crash or a
      failure mid-upload: COPY_SEGMENT_STARTED with no copy running). The log start offset
      moves first, so no reader is sent to a segment being deleted; then
      DELETE_SEGMENT_STARTED, the objects, DELETE_SEGMENT_FINISHED;
    * **deleted topics** and ``remote.storage.enable=false`` with
      ``remote.log.delete.on.disable=true``: every remote segment of the partition is deleted,
      with the partition-delete events around it.

    Failures (object store down, a full disk) are logged and retried per partition with
    exponential backoff (``remote.log.manager.task.retry.backoff.ms`` up to
    ``remote.log.manager.task.retry.backoff.max.ms``); meanwhile local data stays (local
    retention only deletes what is remote), and produce and fetch of local data are
    untouched: all of this runs in background tasks, the object-store calls in threads.

Threading
    Everything here runs on the event loop except the storage manager's calls, which run in
    two thread pools (copier, expiration) and touch only files of closed segments and objects.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from snakka.controller import MetadataListener
from snakka.remote.types import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from snakka.storage.local_log import largest_timestamp
from snakka.storage.unified_log import RemoteLogReader, UnifiedLog
from snakka.util.pacing import BytePacer
from snakka.util.waiters import cancel_and_wait

if TYPE_CHECKING:
    from snakka.config import BrokerConfig
    from snakka.metadata.core import TopicInfo
    from snakka.remote.storage import RemoteStorageManager
    from snakka.replica.manager import ReplicaManager
    from snakka.storage.segment import LogSegment

log = logging.getLogger("snakka.remote")

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED

# The partition-leader epoch of every offset on a single broker (see ReplicaManager).
_EPOCH = 0


class MetadataManager(Protocol):
    """What this module needs of the RemoteLogMetadataManager (contract in
    snakka.remote.metadata_manager)."""

    def is_ready(self, tp: TopicIdPartition) -> bool: ...
    async def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None: ...
    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate) -> None: ...
    async def put_remote_partition_delete_metadata(
        self, md: RemotePartitionDeleteMetadata) -> None: ...
    def list_remote_log_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]: ...
    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None: ...
    def close(self) -> None: ...


class ReaderPool(Protocol):
    """What this module needs of the remote reader pool (snakka.remote.reader)."""

    def reader_for(self, log: UnifiedLog, tp: TopicIdPartition) -> RemoteLogReader: ...
    def forget_segment(self, segment_id: RemoteLogSegmentId) -> None: ...
    def close(self) -> None: ...


@dataclass
class _Partition:
    """The manager's state for one tiered partition."""

    tp: TopicIdPartition
    log: UnifiedLog
    busy: bool = False  # a copy or expiration task runs
    task: asyncio.Task[None] | None = None
    failures: int = 0
    retry_at_ms: int = 0
    last_error: str = ""


def leader_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    """Kafka's leader-epoch-checkpoint text format (version 0): what the storage manager
    keeps per segment as the LEADER_EPOCH index."""
    rows = list(entries)
    return (f"0\n{len(rows)}\n" + "".join(f"{e} {o}\n" for e, o in rows)).encode()


class RemoteLogManager(MetadataListener):
    """See the module docstring. Built by the broker when
    ``remote.log.storage.system.enable=true``; handlers reach it as ``services.remote``."""

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, rlmm: MetadataManager,
                 rsm: RemoteStorageManager, readers: ReaderPool, *, broker_id: int,
                 time_ms: Callable[[], int]) -> None:
        self.config = config
        self.replicas = replicas
        self.rlmm = rlmm
        self.rsm = rsm
        self.readers = readers
        self.broker_id = broker_id
        self.time_ms = time_ms
        self.interval_s = config.int("remote.log.manager.task.interval.ms") / 1000
        self.backoff_ms = config.int("remote.log.manager.task.retry.backoff.ms")
        self.backoff_max_ms = config.int("remote.log.manager.task.retry.backoff.max.ms")
        self.custom_metadata_max = config.int("remote.log.metadata.custom.metadata.max.bytes")
        self._copiers = ThreadPoolExecutor(
            config.int("remote.log.manager.copier.thread.pool.size"),
            thread_name_prefix="remote-copier")
        self._expirers = ThreadPoolExecutor(
            config.int("remote.log.manager.expiration.thread.pool.size"),
            thread_name_prefix="remote-expiration")
        self._copy_quota = _RateLimit(config.int("remote.log.manager.copy.max.bytes.per.second"))
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._deleting: dict[TopicIdPartition, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Attach every tiered partition (the metadata manager has replayed), then run."""
        self.scan()
        self._loop_task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        self._closed = True
        await cancel_and_wait(t for t in (self._loop_task, *self._tasks, *self._deleting.values())
                              if t is not None)
        # Uploads in flight finish in their threads (their metadata stays COPY_STARTED and
        # is cleaned up after the next start); nothing waits for them here.
        self._copiers.shutdown(wait=False, cancel_futures=True)
        self._expirers.shutdown(wait=False, cancel_futures=True)
        self.readers.close()
        self.rsm.close()
        self.rlmm.close()

    def wake(self) -> None:
        """Run a round now (tests, a config change, a roll)."""
        self._wake.set()

    async def run_once(self) -> None:
        """One round now, awaited: attach, copy, expire (tests and tools)."""
        self.scan()
        self._round()
        tasks = [p.task for p in self._partitions.values() if p.task is not None]
        if tasks:
            await asyncio.wait(tasks)

    async def _run(self) -> None:
        while not self._closed:
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                self.scan()
                self._round()
            except Exception:  # noqa: BLE001 - one bad round must not end the task
                log.exception("remote log manager round failed")

    # ------------------------------------------------------------ partitions

    def _tp(self, pl: UnifiedLog) -> TopicIdPartition | None:
        ti = self.replicas.metadata.topics.get(pl.topic)
        return None if ti is None else TopicIdPartition(ti.topic_id, pl.topic, pl.partition)

    def scan(self) -> None:
        """Attach tiered partitions not attached yet (new topics, partitions, a config
        turned on); drop the ones whose log went away or turned remote storage off."""
        seen: set[tuple[str, int]] = set()
        for pl in self.replicas.logs.all_logs():
            key = (pl.topic, pl.partition)
            if not pl.config.remote_storage_enable or pl.closed:
                continue
            seen.add(key)
            part = self._partitions.get(key)
            if part is not None and part.log is pl:
                continue
            tp = self._tp(pl)
            if tp is None or not self.rlmm.is_ready(tp):
                continue
            self._attach(pl, tp)
        for key in [k for k in self._partitions if k not in seen]:
            part = self._partitions.pop(key)
            if not part.log.closed and not part.log.config.remote_storage_enable:
                self._disabled(part)

    def _attach(self, pl: UnifiedLog, tp: TopicIdPartition) -> None:
        pl.remote_log_reader = self.readers.reader_for(pl, tp)
        finished = [md for md in self.rlmm.list_remote_log_segments(tp) if md.state == FINISHED]
        pl.highest_offset_in_remote_storage = max((md.end_offset for md in finished), default=-1)
        # The log start offset: the checkpoint kept it below the first local segment; if
        # the remote part begins later (lost, or deleted before a crash), it moves up.
        local_base = pl.local_log.base_offset
        if pl.log_start_offset < local_base:
            remote_start = min((md.start_offset for md in finished), default=local_base)
            if remote_start > pl.log_start_offset:
                log.warning("partition %s: remote storage begins at %d, above the log start "
                            "offset %d; moving the log start", pl.name, remote_start,
                            pl.log_start_offset)
                self.replicas.advance_log_start_offset(pl, min(remote_start, local_base))
        self._partitions[(pl.topic, pl.partition)] = _Partition(tp, pl)
        log.info("partition %s: tiered storage attached (%d remote segments, highest remote "
                 "offset %d)", pl.name, len(finished), pl.highest_offset_in_remote_storage)

    def _disabled(self, part: _Partition) -> None:
        """remote.storage.enable turned false (allowed only with
        remote.log.delete.on.disable=true): the remote data goes, reads stay local."""
        pl = part.log
        pl.remote_log_reader = None
        pl.highest_offset_in_remote_storage = -1
        if pl.log_start_offset < pl.local_log.base_offset:
            self.replicas.advance_log_start_offset(pl, pl.local_log.base_offset)
        if pl.config.remote_log_delete_on_disable:
            self.delete_partition(part.tp, reason="remote.storage.enable=false", after=part.task)

    @property
    def partitions(self) -> list[TopicIdPartition]:
        """The tiered partitions attached now."""
        return [p.tp for p in self._partitions.values()]

    # ------------------------------------------------------------ one round

    def _round(self) -> None:
        now = self.time_ms()
        for part in list(self._partitions.values()):
            if part.busy or part.log.closed or now < part.retry_at_ms:
                continue
            part.busy = True
            part.task = self._spawn(self._partition_round(part))

    def _spawn(self, coro: Coroutine[object, object, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _partition_round(self, part: _Partition) -> None:
        try:
            if not part.log.config.remote_log_copy_disable:
                if await self._copy(part):
                    # Local retention now rather than at the next retention check
                    # (log.retention.check.interval.ms): the disk shrinks as soon as the
                    # copies are confirmed. It only ever deletes what is remote.
                    part.log.enforce_retention(self.time_ms())
            await self._expire(part)
            part.failures = 0
            part.last_error = ""
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - retried with backoff, logged
            part.failures += 1
            delay = min(self.backoff_max_ms, self.backoff_ms * (2 ** (part.failures - 1)))
            part.retry_at_ms = self.time_ms() + delay
            part.last_error = f"{type(e).__name__}: {e}"
            log.warning("partition %s: tiered storage task failed (%s); retrying in %d ms "
                        "(failure %d)", part.log.name, part.last_error, delay, part.failures)
        finally:
            part.busy = False

    # ------------------------------------------------------------ copier

    def _copy_candidates(self, pl: UnifiedLog) -> list[LogSegment]:
        """Closed segments above the highest remote offset, each wholly below the last
        stable offset and fsynced (recovery point), in order."""
        bound = min(pl.last_stable_offset, pl.recovery_point)
        hi = pl.highest_offset_in_remote_storage
        active = pl.active_segment
        out = []
        for seg in pl.segments:
            if seg is active or seg.next_offset > bound:
                break
            if seg.next_offset - 1 > hi and seg.size > 0:
                out.append(seg)
        return out

    async def _copy(self, part: _Partition) -> int:
        """Copy what is due; returns how many segments were copied."""
        pl = part.log
        copied = 0
        for seg in self._copy_candidates(pl):
            if self._closed or pl.closed or not pl.config.remote_storage_enable:
                break
            if seg.deleted or seg.base_offset < pl.log_start_offset:
                continue  # DeleteRecords or retention took it meanwhile
            await self._copy_segment(part, seg)
            copied += 1
        return copied

    async def _copy_segment(self, part: _Partition, seg: LogSegment) -> None:
        pl, tp = part.log, part.tp
        md = RemoteLogSegmentMetadata(
            segment_id=RemoteLogSegmentId.generate(tp),
            start_offset=seg.base_offset,
            end_offset=seg.next_offset - 1,
            max_timestamp_ms=largest_timestamp(seg),
            broker_id=self.broker_id,
            event_timestamp_ms=self.time_ms(),
            segment_size_in_bytes=seg.size,
            segment_leader_epochs=((_EPOCH, seg.base_offset),),
            state=STARTED,
            txn_index_empty=not seg.txn_index.txns,
        )
        await self.rlmm.add_remote_log_segment_metadata(md)
        # remote.log.manager.copy.max.bytes.per.second, over all partitions (after STARTED:
        # a crash while waiting leaves a dangling copy, cleaned up like any other).
        await self._copy_quota.acquire(seg.size)
        data = self._segment_data(pl, seg)
        loop = asyncio.get_running_loop()
        try:
            custom = await loop.run_in_executor(self._copiers, self.rsm.copy_log_segment_data,
                                                md, data)
        finally:
            if data.producer_snapshot_index.startswith(tempfile.gettempdir()):
                _unlink(data.producer_snapshot_index)
        if custom is not None and len(custom) > self.custom_metadata_max:
            # Kafka: the copied segment is deleted and copying stops for the partition.
            await loop.run_in_executor(self._expirers, self.rsm.delete_log_segment_data, md)
            raise RuntimeError(
                f"custom metadata of {len(custom)} bytes exceeds "
                f"remote.log.metadata.custom.metadata.max.bytes={self.custom_metadata_max}")
        await self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, self.time_ms(), FINISHED, self.broker_id, custom))
        pl.highest_offset_in_remote_storage = max(pl.highest_offset_in_remote_storage,
                                                  md.end_offset)
        log.info("partition %s: copied segment %d..%d (%d bytes) to remote storage as %s",
                 pl.name, md.start_offset, md.end_offset, md.segment_size_in_bytes,
                 md.segment_id.id)

    def _segment_data(self, pl: UnifiedLog, seg: LogSegment) -> LogSegmentData:
        """The files of one closed segment. The producer snapshot at the segment's end is
        kept only for the last few segments (storage keeps SNAPSHOTS_KEPT); an older
        segment gets an empty snapshot, which says no more than Kafka's would to a reader
        that only fetches (followers rebuilding state are not a single broker's case)."""
        snapshot = os.path.join(pl.dir_path, f"{seg.next_offset:020d}.snapshot")
        if not os.path.exists(snapshot):
            fd, snapshot = tempfile.mkstemp(suffix=".snapshot")
            with os.fdopen(fd, "wb") as f:
                f.write(_empty_producer_snapshot(pl))
        return LogSegmentData(
            log_segment=seg.path,
            offset_index=seg.offset_index.path,
            time_index=seg.time_index.path,
            transaction_index=seg.txn_index.path if seg.txn_index.txns else None,
            producer_snapshot_index=snapshot,
            leader_epoch_index=leader_epoch_checkpoint([(_EPOCH, seg.base_offset)]),
        )

    # ------------------------------------------------------------ expiration

    async def _expire(self, part: _Partition) -> None:
        pl, tp = part.log, part.tp
        cfg = pl.config
        now = self.time_ms()
        segs = self.rlmm.list_remote_log_segments(tp)
        finished = [md for md in segs if md.state == FINISHED]
        doomed: list[RemoteLogSegmentMetadata] = []
        reasons: list[str] = []
        if cfg.delete_enabled:
            size_left = (sum(md.segment_size_in_bytes for md in finished)
                         + pl.only_local_size_bytes() - cfg.retention_bytes
                         if cfg.retention_bytes >= 0 else -1)
            for md in finished:
                if md.end_offset < pl.log_start_offset:
                    reason = f"below the log start offset {pl.log_start_offset}"
                elif cfg.retention_ms >= 0 and now - md.max_timestamp_ms > cfg.retention_ms:
                    reason = f"retention.ms {cfg.retention_ms}"
                elif cfg.retention_bytes >= 0 and size_left - md.segment_size_in_bytes >= 0:
                    reason = f"retention.bytes {cfg.retention_bytes}"
                else:
                    break  # oldest first: the rest is newer and smaller in total
                size_left -= md.segment_size_in_bytes
                doomed.append(md)
                reasons.append(reason)
        else:
            for md in finished:
                if md.end_offset >= pl.log_start_offset:
                    break
                doomed.append(md)
                reasons.append(f"below the log start offset {pl.log_start_offset}")
        if doomed:
            # Readers must not be sent to a segment being deleted: the start moves first.
            new_start = doomed[-1].end_offset + 1
            if new_start > pl.log_start_offset:
                self.replicas.advance_log_start_offset(pl, min(new_start, pl.high_watermark))
        # Copies that never finished (a crash or failure mid-upload; no copy runs now: this
        # partition's task is the only one that copies).
        dangling = [md for md in segs if md.state == STARTED]
        # ... and deletions a crash interrupted.
        interrupted = [md for md in segs if md.state == DELETE_STARTED]
        for md, reason in zip(doomed, reasons, strict=True):
            await self._delete_segment(md, reason, pl.name)
        for md in dangling:
            await self._delete_segment(md, "a copy that did not finish", pl.name)
        for md in interrupted:
            await self._delete_segment(md, "a deletion that did not finish", pl.name,
                                       started=True)

    async def _delete_segment(self, md: RemoteLogSegmentMetadata, reason: str, name: str, *,
                              started: bool = False) -> None:
        if not started:
            await self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                md.segment_id, self.time_ms(), DELETE_STARTED, self.broker_id))
        self.readers.forget_segment(md.segment_id)
        await asyncio.get_running_loop().run_in_executor(
            self._expirers, self.rsm.delete_log_segment_data, md)
        await self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, self.time_ms(), DELETE_FINISHED, self.broker_id))
        log.info("partition %s: deleted remote segment %d..%d (%s) due to %s", name,
                 md.start_offset, md.end_offset, md.segment_id.id, reason)

    # ------------------------------------------------------------ deleted partitions

    def set_copy_rate(self, bytes_per_second: int) -> None:
        """``remote.log.manager.copy.max.bytes.per.second`` changed at run time (Kafka's
        RemoteLogManager.updateCopyQuota): the copies that start from now on are paced at the
        new rate; a copy already waiting keeps the slot it reserved."""
        if bytes_per_second != self._copy_quota.rate:
            log.info("tiered storage: remote.log.manager.copy.max.bytes.per.second is now %d",
                     bytes_per_second)
            self._copy_quota.set_rate(bytes_per_second)

    def on_topic_deleted(self, topic: TopicInfo) -> None:
        """A topic was deleted (controller listener): its remote data goes, in the
        background, retried until done; a copy running for it finishes first."""
        for p in range(topic.partitions):
            part = self._partitions.pop((topic.name, p), None)
            tp = TopicIdPartition(topic.topic_id, topic.name, p)
            if part is not None or self.rlmm.list_remote_log_segments(tp):
                self.delete_partition(tp, reason="topic deleted",
                                      after=None if part is None else part.task)

    def delete_partition(self, tp: TopicIdPartition, *, reason: str,
                         after: asyncio.Task[None] | None = None) -> None:
        if tp in self._deleting:
            return
        task = asyncio.ensure_future(self._delete_partition(tp, reason, after))
        self._deleting[tp] = task
        task.add_done_callback(lambda _t: self._deleting.pop(tp, None))

    async def _delete_partition(self, tp: TopicIdPartition, reason: str,
                                after: asyncio.Task[None] | None) -> None:
        if after is not None and not after.done():
            await asyncio.wait([after])  # its copy's metadata must be final before listing
        failures = 0
        while not self._closed:
            try:
                for state in (RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                              RemotePartitionDeleteState.DELETE_PARTITION_STARTED):
                    await self.rlmm.put_remote_partition_delete_metadata(
                        RemotePartitionDeleteMetadata(tp, state, self.time_ms(), self.broker_id))
                for md in self.rlmm.list_remote_log_segments(tp):
                    if md.state == DELETE_FINISHED:
                        continue
                    await self._delete_segment(md, reason, f"{tp.topic}-{tp.partition}",
                                               started=md.state == DELETE_STARTED)
                await self.rlmm.put_remote_partition_delete_metadata(
                    RemotePartitionDeleteMetadata(
                        tp, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
                        self.time_ms(), self.broker_id))
                log.info("partition %s-%d: remote data deleted (%s)", tp.topic, tp.partition,
                         reason)
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - retried with backoff
                failures += 1
                delay = min(self.backoff_max_ms, self.backoff_ms * (2 ** (failures - 1)))
                log.warning("partition %s-%d: deleting remote data failed (%s: %s); retrying "
                            "in %d ms", tp.topic, tp.partition, type(e).__name__, e, delay)
                await asyncio.sleep(delay / 1000)


class _RateLimit:
    """remote.log.manager.copy.max.bytes.per.second over all copies (util.pacing's arithmetic,
    waited for on the event loop). A copy waits until the bytes of the copies before it are
    paid off at the rate, then goes and charges its own; a rate changed at run time wakes the
    waiting copies, which then wait for what is still owed at the new rate."""

    def __init__(self, bytes_per_second: int) -> None:
        self._pacer = BytePacer(bytes_per_second)
        self._changed = asyncio.Event()

    @property
    def rate(self) -> float:
        return self._pacer.rate

    def set_rate(self, bytes_per_second: int) -> None:
        self._pacer.set_rate(bytes_per_second, asyncio.get_running_loop().time())
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def acquire(self, n: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            wait = self._pacer.wait_s(now)
            if wait <= 0:
                self._pacer.delay(n, now)
                return
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), wait)
            except TimeoutError:
                pass


def _empty_producer_snapshot(pl: UnifiedLog) -> bytes:
    from snakka.txn.producer_state import ProducerStateManager

    return ProducerStateManager(
        producer_id_expiration_ms=pl.config.producer_id_expiration_ms).snapshot_bytes()


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


__all__ = ["RemoteLogManager", "leader_epoch_checkpoint"]
