"""The topic-backed RemoteLogMetadataManager: tiered-storage metadata in ``__remote_log_metadata``.

What it owns
    The internal topic ``__remote_log_metadata`` and, in memory, every user partition's remote
    segments and partition-delete state (a :class:`~snakka.remote.metadata.RemotePartitionMetadataStore`).
    Kafka's TopicBasedRemoteLogMetadataManager on one node: the events (segment added, segment
    state changed, partition delete state) are Kafka's records, byte for byte
    (:mod:`snakka.remote.metadata`), unkeyed, each in the metadata partition Kafka's partitioner
    picks for its user partition, so every event of one user partition is in one metadata
    partition, in order.

The topic
    Created through the controller on the first write (a broker that never tiers anything pays
    nothing), as an internal topic: ``rlmm.config.remote.log.metadata.topic.num.partitions``
    partitions, ``cleanup.policy=delete``, ``retention.ms`` =
    ``rlmm.config.remote.log.metadata.topic.retention.ms`` (-1: kept), and its creation is
    fsynced before the first event is written. The partition count is fixed once the topic
    exists: an existing topic's real count wins (logged when the config differs), because the
    partitioner's answer depends on it.

Read positions and readiness
    The manager owns its read positions (no consumer group): :meth:`start` replays every
    metadata partition from its log start to its high watermark, partition by partition,
    yielding to the event loop between chunks; a user partition is ready (:meth:`is_ready`)
    once its metadata partition is replayed. Records that cannot be decoded (another version's,
    torn by hand) are logged and skipped; events that are not legal in the state they meet are
    logged and dropped (Kafka's cache does the same), never a crash.

Writes
    ``add`` / ``update`` / ``put`` check the event against the current state (ValueError, nothing
    written, if it is not legal), append it through the replica manager's internal append, wait
    until it is fsynced, whatever ``log.flush.strict`` says (the copier deletes local data on the
    strength of these records), and only then apply it, so a reader never sees a segment whose
    record could be lost. A failed append or fsync raises (OSError) and changes nothing in memory;
    the caller retries (a retried event is idempotent on replay). Writes to one metadata
    partition are serialised by a lock, so validation, log order and apply order agree; writes
    to different metadata partitions run concurrently and share fsyncs (group commit).

Keeping the topic small (snapshot-and-trim)
    Kafka keeps this topic for ever (retention -1). Here, once a metadata partition holds more
    than ``COMPACT_MIN_RECORDS`` records and more than ``COMPACT_RATIO`` times what its live
    state restates to, the live state of its user partitions is appended again
    (:meth:`RemotePartitionMetadataStore.restate`: whole units, one per segment, each in one
    batch) and fsynced, then the log start moves past everything older (DeleteRecords, not
    checkpointed: a crash before the next checkpoint replays the old records followed by the
    restatement, which gives the same state). Replaying any prefix of whole units after the old
    records also gives the same state, so a crash at any point of a trim is harmless.

Ordering: every method runs on the event loop.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from snakka.limits import COMPACT_MIN_RECORDS, COMPACT_RATIO, SNAPSHOT_BATCH_RECORDS
from snakka.protocol.errors import KafkaError
from snakka.records import Record, build_batch
from snakka.remote.metadata import (
    RemoteLogMetadata,
    RemoteLogMetadataSerdeError,
    RemotePartitionMetadataStore,
    deserialize,
    metadata_partition,
    serialize,
)
from snakka.remote.types import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

if TYPE_CHECKING:
    from snakka.config import BrokerConfig
    from snakka.controller import Controller
    from snakka.replica.manager import ReplicaManager
    from snakka.storage import UnifiedLog

log = logging.getLogger("snakka.remote.metadata_manager")

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"

#: Segment size of ``__remote_log_metadata``: small, like the other coordinators' topics, so that
#: records trimmed after a restatement are actually deleted from disk.
REMOTE_LOG_METADATA_SEGMENT_BYTES = 16 * 1024 * 1024

# Records replayed between two yields to the event loop at start-up (~20 us each: decode
# and apply), and records per batch of a restatement (~20 us each to build): both keep the
# loop's stalls near 10-20 ms.
_REPLAY_YIELD_RECORDS = 500
TRIM_BATCH_RECORDS = min(SNAPSHOT_BATCH_RECORDS, 1000)
_REPLAY_CHUNK = 8 << 20


class TopicBasedRemoteLogMetadataManager:
    """Remote segment metadata in ``__remote_log_metadata`` (module doc)."""

    def __init__(self, controller: Controller, replicas: ReplicaManager, config: BrokerConfig,
                 *, broker_id: int, time_ms: Callable[[], int],
                 compact_min_records: int = COMPACT_MIN_RECORDS,
                 compact_ratio: int = COMPACT_RATIO,
                 snapshot_batch_records: int = TRIM_BATCH_RECORDS) -> None:
        self.controller = controller
        self.replicas = replicas
        self.broker_id = broker_id
        self.time_ms = time_ms
        self.topic = REMOTE_LOG_METADATA_TOPIC
        self.num_partitions = config.int("rlmm.config.remote.log.metadata.topic.num.partitions")
        self.retention_ms = config.int("rlmm.config.remote.log.metadata.topic.retention.ms")
        self.compact_min_records = compact_min_records
        self.compact_ratio = compact_ratio
        self.snapshot_batch_records = max(1, snapshot_batch_records)
        self.store = RemotePartitionMetadataStore()
        self._ready: set[int] = set()
        self._started = False
        self._closed = False
        self._locks: dict[int, asyncio.Lock] = {}
        # metadata partition -> the user partitions pinned to it that have state
        self._pinned: dict[int, set[TopicIdPartition]] = {}
        self._trims: dict[int, asyncio.Task[None]] = {}
        self._creating: asyncio.Lock | None = None

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Adopt the topic's partition count if it exists and replay every partition of it;
        every user partition is then ready."""
        ti = self.controller.metadata.topics.get(self.topic)
        if ti is not None:
            if ti.partitions != self.num_partitions:
                log.warning("%s has %d partitions, not the configured %d "
                            "(rlmm.config.remote.log.metadata.topic.num.partitions): the "
                            "topic's count is used (it is fixed once created)", self.topic,
                            ti.partitions, self.num_partitions)
            self.num_partitions = ti.partitions
        if self.retention_ms >= 0:
            log.warning("rlmm.config.remote.log.metadata.topic.retention.ms=%d: retention "
                        "deletes remote log metadata, and the remote segments it described "
                        "are forgotten at the next start (-1 keeps it; the manager trims what "
                        "is superseded itself)", self.retention_ms)
        self._started = True
        for p in range(self.num_partitions):
            if self._closed:
                return
            if ti is not None:
                await self._replay_partition(p)
            self._ready.add(p)
        for p in range(self.num_partitions):
            self._maybe_schedule_trim(p)
        log.info("remote log metadata: %d partition(s) of %s replayed, %d user partition(s) "
                 "with remote metadata", self.num_partitions if ti is not None else 0,
                 self.topic, len(self.store.partitions()))

    async def _replay_partition(self, p: int) -> None:
        pl = self.replicas.get_log(self.topic, p)
        if pl is None:
            log.error("%s-%d has no log: nothing replayed for its user partitions", self.topic, p)
            return
        hw = pl.high_watermark
        n = 0
        for rec in pl.iter_records(_REPLAY_CHUNK):
            if rec.offset >= hw:
                break
            n += 1
            if n % _REPLAY_YIELD_RECORDS == 0:
                await asyncio.sleep(0)
            where = f"{self.topic}-{p} offset {rec.offset}"
            if rec.value is None:
                log.warning("%s: record without a value skipped", where)
                continue
            try:
                event = deserialize(rec.value)
            except RemoteLogMetadataSerdeError as exc:
                log.warning("%s: undecodable record skipped: %s", where, exc)
                continue
            try:
                applied = self.store.replay(event, where)
            except Exception:  # a bug must not keep the broker from starting: say it loudly
                log.exception("%s: record could not be applied, skipped: %s", where, event)
                continue
            if applied:
                self._note_pinned(event, p)

    def close(self) -> None:
        self._closed = True
        self._started = False
        self._ready.clear()
        for task in self._trims.values():
            task.cancel()
        self._trims.clear()

    def is_ready(self, tp: TopicIdPartition) -> bool:
        """True once ``tp``'s metadata partition is replayed (and until :meth:`close`). Reads
        of a partition that is not ready answer from what is replayed so far: callers that act
        on the answer (the copier, retention) wait for readiness, as Kafka's refuse to run."""
        return not self._closed and self.metadata_partition(tp) in self._ready

    def metadata_partition(self, tp: TopicIdPartition) -> int:
        return metadata_partition(tp, self.num_partitions)

    # -- writes --------------------------------------------------------------------------
    async def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        """Record a segment whose copy starts (state COPY_SEGMENT_STARTED, else ValueError)."""
        if md.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"a new remote segment must be COPY_SEGMENT_STARTED, not "
                             f"{md.state.name}")
        await self._write(md.topic_id_partition, md)

    async def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate
                                                 ) -> None:
        """Move a segment to its next state (legal transitions only, else ValueError)."""
        await self._write(update.segment_id.topic_id_partition, update)

    async def put_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata
                                                   ) -> None:
        await self._write(md.topic_id_partition, md)

    async def _write(self, tp: TopicIdPartition, event: RemoteLogMetadata) -> None:
        p = self.metadata_partition(tp)
        if self._closed or p not in self._ready:
            # Kafka's ensureInitializedAndNotClosed: an event checked against a state that is
            # not fully replayed could be illegal on replay.
            raise RuntimeError(f"remote log metadata of {tp} is not ready (metadata partition "
                               f"{p} not replayed, or the manager is closed)")
        async with self._lock(p):
            self.store.check(event)  # ValueError: nothing written
            await self._ensure_topic()
            mark = self._append(p, [event])
            await self.replicas.durable([mark])
            self.store.apply(event)
            self._note_pinned(event, p)
        self._maybe_schedule_trim(p)

    def _lock(self, p: int) -> asyncio.Lock:
        lock = self._locks.get(p)
        if lock is None:
            lock = self._locks[p] = asyncio.Lock()
        return lock

    async def _ensure_topic(self) -> None:
        if self.topic in self.controller.metadata.topics:
            return
        if self._creating is None:
            self._creating = asyncio.Lock()
        async with self._creating:
            if self.topic in self.controller.metadata.topics:
                return
            configs: dict[str, str | None] = {
                "cleanup.policy": "delete", "retention.ms": str(self.retention_ms),
                "retention.bytes": "-1",
                "segment.bytes": str(REMOTE_LOG_METADATA_SEGMENT_BYTES)}
            try:
                ti, recs = self.controller.create_topic_now(self.topic, self.num_partitions,
                                                            configs)
            except KafkaError as exc:
                raise OSError(errno.EIO, f"cannot create {self.topic}: {exc.message}") from exc
            # The topic's existence must be as durable as the first event written to it.
            await self.controller.commit_metadata(recs)
            log.info("created %s with %d partitions", self.topic, ti.partitions)

    def _append(self, p: int, events: list[RemoteLogMetadata]) -> tuple[UnifiedLog, int]:
        now = self.time_ms()
        buf = bytearray(build_batch([Record(timestamp=now, key=None, value=serialize(ev))
                                     for ev in events]))
        mark = self.replicas.append_internal(self.topic, p, buf)
        if mark is None:
            raise OSError(errno.EIO, f"{self.topic}-{p} is missing: event not stored")
        return mark

    def _note_pinned(self, event: RemoteLogMetadata, p: int) -> None:
        if isinstance(event, RemoteLogSegmentMetadata):
            tp = event.topic_id_partition
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            tp = event.segment_id.topic_id_partition
        elif isinstance(event, RemotePartitionDeleteMetadata):
            tp = event.topic_id_partition
        else:
            return
        pinned = self._pinned.setdefault(p, set())
        if self.store.cache(tp) is None and self.store.partition_delete_state(tp) is None:
            pinned.discard(tp)  # DELETE_PARTITION_FINISHED: nothing left to restate
        else:
            pinned.add(tp)

    # -- trimming ------------------------------------------------------------------------
    def held(self, p: int) -> int:
        """Records the metadata partition holds (log start to log end)."""
        pl = self.replicas.get_log(self.topic, p) if self.topic in \
            self.controller.metadata.topics else None
        return 0 if pl is None else pl.log_end_offset - pl.log_start_offset

    def _live_estimate(self, p: int) -> int:
        # A cheap estimate of the restatement's size (no need to build it): two records per
        # segment (added, copied; a segment being deleted has three, one never copied one),
        # at most one 4-record unit per leader epoch, one partition-delete record.
        total = 0
        for tp in self._pinned.get(p, ()):
            cache = self.store.cache(tp)
            if cache is not None:
                total += 2 * len(cache) + 4 * len(cache.epochs())
            total += 1
        return total

    def _needs_trim(self, p: int) -> bool:
        held = self.held(p)
        return held > self.compact_min_records and held > self.compact_ratio * \
            self._live_estimate(p)

    def _maybe_schedule_trim(self, p: int) -> None:
        if self._closed or p in self._trims or not self._needs_trim(p):
            return
        task = asyncio.get_running_loop().create_task(self._trim_task(p))
        self._trims[p] = task

    async def _trim_task(self, p: int) -> None:
        try:
            await self.trim(p)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s-%d: trimming failed (retried after the next write)", self.topic, p)
        finally:
            self._trims.pop(p, None)

    async def trim(self, p: int, *, force: bool = False) -> bool:
        """Snapshot-and-trim metadata partition ``p`` if it holds too many superseded records
        (module doc), or anyway with ``force``. Returns whether it did."""
        async with self._lock(p):
            if not force and not self._needs_trim(p):
                return False
            pl = self.replicas.get_log(self.topic, p)
            if pl is None:
                return False
            start = pl.log_end_offset
            tps = sorted(self._pinned.get(p, ()),
                         key=lambda t: (t.topic, t.partition, t.topic_id.int))
            batch: list[RemoteLogMetadata] = []
            mark: tuple[UnifiedLog, int] | None = None
            written = 0
            for tp in tps:
                for unit in self.store.restate_partition(tp):
                    if batch and len(batch) + len(unit) > self.snapshot_batch_records:
                        mark = self._append(p, batch)
                        written += len(batch)
                        batch = []
                        await asyncio.sleep(0)
                    batch.extend(unit)  # a unit is never split over two batches
            if batch:
                mark = self._append(p, batch)
                written += len(batch)
            if mark is not None:
                await self.replicas.durable([mark])
            self.replicas.delete_records_before(pl, start, checkpoint=False)
            log.info("%s-%d: live state restated in %d record(s), log start offset now %d",
                     self.topic, p, written, start)
            return True

    # -- reads ---------------------------------------------------------------------------
    def list_remote_log_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Every segment of ``tp`` in any state, by start offset (then event time)."""
        cache = self.store.cache(tp)
        return [] if cache is None else cache.segments()

    def list_remote_log_segments_for_epoch(self, tp: TopicIdPartition, leader_epoch: int
                                           ) -> list[RemoteLogSegmentMetadata]:
        cache = self.store.cache(tp)
        return [] if cache is None else cache.segments_for_epoch(leader_epoch)

    def remote_log_segment_metadata(self, tp: TopicIdPartition, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` written in ``leader_epoch``."""
        cache = self.store.cache(tp)
        return None if cache is None else cache.remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        cache = self.store.cache(tp)
        return None if cache is None else cache.highest_offset_for_epoch(leader_epoch)

    def remote_log_size(self, tp: TopicIdPartition) -> int:
        """Bytes of ``tp``'s COPY_SEGMENT_FINISHED segments."""
        cache = self.store.cache(tp)
        return 0 if cache is None else cache.remote_log_size()

    def partitions(self) -> list[TopicIdPartition]:
        """User partitions with any remote metadata."""
        return self.store.partitions()

    def partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        return self.store.partition_delete_state(tp)

    def metadata_partitions_of(self, tps: Iterable[TopicIdPartition]) -> set[int]:
        return {self.metadata_partition(tp) for tp in tps}
