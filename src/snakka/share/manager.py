"""The share-partition leader's I/O shell (Kafka's SharePartitionManager), on one node.

What it owns
- one :class:`SharePartition` core per (group, topic id, partition), built lazily from the
  durable state the :class:`SharePersister` replayed from ``__share_group_state`` (or
  initialised from ``share.auto.offset.reset`` when the group coordinator assigns the partition
  for the first time: latest = log end offset, earliest = log start offset,
  by_duration:<ISO-8601> = first offset with timestamp >= now - duration);
- the share-session cache (``share.sessions``);
- reading the log for ShareFetch: batches are read at the core's ``next_fetch_offset()``, their
  offsets handed to ``acquire`` and the stored bytes of the batches overlapping what was
  acquired are returned as they lie on disk, with the AcquiredRecords ranges;
- one asyncio timer at the earliest ``next_deadline()`` of all loaded share-partitions (lock
  expiry), never a sweep;
- long polls: a ShareFetch that acquired fewer than MinBytes waits up to MaxWaitMs, woken by an
  append to one of its partitions (the broker's append waiters) or by a share-partition that
  has records to give out again (``take_wakeup()``: released, expired, reset);
- persistence: after every operation that changed a share-partition its ``drain_delta()`` is
  written (one record per share-partition per request); acknowledgements are answered only after
  their records are durable under the broker's flush policy (``log.flush.strict``: fsynced;
  otherwise written, like produce with acks=1/all in the default mode);
- reacting to the group coordinator (ShareGroupListener: partitions assigned, member left, group
  deleted), to closed connections (a share session's connection closing releases the member's
  records, as Kafka), to topic deletion, and to log-start moves (retention, DeleteRecords:
  checked lazily whenever a share-partition is used, and after retention runs).

Isolation (``share.isolation.level``, a group config): read_committed reads up to the last
stable offset, read_uncommitted up to the high watermark; the replica manager reads
(``ReplicaManager.read_log``) and decides both, and gives a read_committed read the aborted
transactions of what it returned, as Fetch does. A ShareFetch response has no
aborted-transactions list, so the consumer cannot drop aborted records itself: the broker must
never acquire them. :func:`fetched_batches` marks the batches of aborted transactions (from that
list and the ABORT markers, as a read_committed consumer would) and, under both levels, the
control batches; the core archives them instead of handing them out (``SharePartition.acquire``).

Ordering: everything runs on the event loop; a request's acknowledgements are applied before
its fetch, in request order per connection (handlers run synchronously up to their first await).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import Awaitable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from snakka.config import broker_default_int, parse_iso_duration_ms
from snakka.controller import MetadataListener
from snakka.protocol.errors import ErrorCode
from snakka.protocol.share import AckBatch, AcknowledgeType, AcquireMode
from snakka.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    PRODUCER_ID_OFFSET,
    TRANSACTIONAL_MASK,
)
from snakka.records.control import read_end_txn_marker
from snakka.remote.reader import RemotePartitionReader, RemoteReadError
from snakka.share.partition import SharePartition
from snakka.share.persister import SharePersister, StateKey
from snakka.share.sessions import ShareSessionCache, rotate_partitions
from snakka.share.types import (
    AcquiredRange,
    FetchedBatch,
    SharePartitionConfig,
    SharePartitionState,
)
from snakka.storage import RemoteFetchPending, RemoteLogUnavailableError
from snakka.util.waiters import WaitList, wait_any, wake

if TYPE_CHECKING:
    from collections.abc import Callable

    from snakka.config import BrokerConfig
    from snakka.controller import Controller
    from snakka.coordinator_log import AppendMark
    from snakka.metadata.core import TopicInfo
    from snakka.replica.manager import ReadResult, ReplicaManager
    from snakka.storage import UnifiedLog

log = logging.getLogger("snakka.share")

_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")   # at byte 23 of a v2 batch
_ATTRIBUTES = struct.Struct(">h")
_PRODUCER_ID = struct.Struct(">q")
_LOG_OVERHEAD = 12
_MAX_ACK_TYPE_V1 = int(AcknowledgeType.REJECT)
_MAX_ACK_TYPE_V2 = int(AcknowledgeType.RENEW)
_RENEW = int(AcknowledgeType.RENEW)

# Sizing a share fetch's log read (_read_for_acquire): the first read of a partition assumes
# this many bytes per offset (then the last read's average is used), asks this much more than
# the estimate (batches are read whole), plus this many bytes; a short read is made again twice
# as long, up to the partition's share of MaxBytes.
DEFAULT_READ_BYTES_PER_OFFSET = 256.0
READ_ESTIMATE_MARGIN = 1.25
READ_SLACK_BYTES = 16 * 1024

# Groups whose ShareFetch settings are kept resolved (SharePartitionManager._settings); the
# cache starts over when it is full, as when the metadata changes.
GROUP_SETTINGS_CACHE_MAX = 1024

TopicPartitionKey = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class _GroupSettings:
    partition: SharePartitionConfig
    read_committed: bool  # share.isolation.level


@dataclass(slots=True)
class PartitionResult:
    """One partition of a ShareFetch response."""

    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    records: bytes | memoryview = b""
    acquired: list[AcquiredRange] = field(default_factory=list)
    # acknowledgements of this partition in the same request (None: there were none)
    ack_error: ErrorCode | None = None


def split_batches(data: bytes | memoryview) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, start, end) of every whole v2 batch in ``data``."""
    out = []
    pos, n = 0, len(data)
    while pos + 27 <= n:
        base, length = _BATCH_HEAD.unpack_from(data, pos)
        end = pos + _LOG_OVERHEAD + length
        if end > n:
            break
        last = base + _LAST_DELTA.unpack_from(data, pos + 23)[0]
        out.append((base, last, pos, end))
        pos = end
    return out


def fetched_batches(data: bytes | memoryview, aborted: Sequence[tuple[int, int]] | None
                    ) -> list[tuple[FetchedBatch, int, int]]:
    """The whole v2 batches of ``data`` as the core's ``FetchedBatch`` with their (start, end)
    byte positions. ``archive`` is set on control batches (COMMIT/ABORT markers: never handed
    to a share consumer, under either isolation level) and, when ``aborted`` is given (a
    read_committed read: the (producer id, first offset) list a Fetch would return), on the
    data batches of aborted transactions. The aborted batches are found as Kafka's
    SharePartition (and every read_committed consumer) finds them: walking the batches in
    offset order, a transaction of the list becomes active for its producer once a batch
    reaches its first offset, a transactional batch of an active producer is aborted, and
    that producer's ABORT marker ends it. Costs one header read per batch, plus one record
    read per control batch of a producer with an active aborted transaction."""
    out: list[tuple[FetchedBatch, int, int]] = []
    pending = sorted(((first, pid) for pid, first in aborted), reverse=True) if aborted else []
    active: set[int] = set()
    for base, last, start, end in split_batches(data):
        attrs = _ATTRIBUTES.unpack_from(data, start + ATTRIBUTES_OFFSET)[0]
        control = bool(attrs & CONTROL_MASK)
        archive = control
        if aborted is not None and attrs & TRANSACTIONAL_MASK:
            while pending and pending[-1][0] <= last:
                active.add(pending.pop()[1])
            if active:
                pid = _PRODUCER_ID.unpack_from(data, start + PRODUCER_ID_OFFSET)[0]
                if pid in active:
                    if not control:
                        archive = True
                    else:
                        marker = read_end_txn_marker(data, start)
                        if marker is not None and not marker.commit:
                            active.discard(pid)
        out.append((FetchedBatch(base, last, archive), start, end))
    return out


def validate_ack_batches(batches: Sequence[AckBatch], *, allow_renew: bool) -> str | None:
    """Kafka's request checks of AcknowledgementBatches; a reason if they are invalid."""
    max_type = _MAX_ACK_TYPE_V2 if allow_renew else _MAX_ACK_TYPE_V1
    prev_last = -1
    for b in batches:
        if b.first_offset < 0 or b.last_offset < b.first_offset:
            return f"invalid acknowledgement batch {b.first_offset}-{b.last_offset}"
        if b.first_offset <= prev_last:
            return "acknowledgement batches overlap or are not in offset order"
        prev_last = b.last_offset
        n = b.last_offset - b.first_offset + 1
        if not b.types or (len(b.types) != 1 and len(b.types) != n):
            return (f"acknowledgement batch {b.first_offset}-{b.last_offset} has "
                    f"{len(b.types)} acknowledge types")
        if any(not 0 <= t <= max_type for t in b.types):
            return f"invalid acknowledge type in {list(b.types)}"
    return None


class SharePartitionManager(MetadataListener):
    def __init__(self, config: BrokerConfig, controller: Controller, replicas: ReplicaManager,
                 time_ms: Callable[[], int]) -> None:
        self.metadata = controller.metadata
        self.resolver = controller.resolver
        self.replicas = replicas
        self.time_ms = time_ms
        self.sessions = ShareSessionCache(config.int("group.share.max.share.sessions"), time_ms)
        self.persister = SharePersister(
            controller, replicas, time_ms,
            partitions=config.int("share.coordinator.state.topic.num.partitions"),
            updates_per_snapshot=config.int(
                "share.coordinator.snapshot.update.records.per.snapshot"),
            segment_bytes=config.int("share.coordinator.state.topic.segment.bytes"),
            on_rolled_back=self._unload)
        self._partitions: dict[StateKey, SharePartition] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._settings_cache: dict[str, _GroupSettings] = {}
        self._settings_version = -1
        # share-partition -> futures of parked ShareFetches to wake on take_wakeup()
        self._waiters: WaitList = {}

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        await self.persister.load()

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for futs in self._waiters.values():
            for f in futs:
                if not f.done():
                    f.set_result(None)
        self._waiters.clear()

    # -- group configs -------------------------------------------------------------------
    def _group_value(self, group_id: str, name: str) -> str:
        return self.resolver.group_value(group_id, name)

    def _settings(self, group_id: str) -> _GroupSettings:
        """The group configs every ShareFetch needs, resolved once per metadata version: a
        config change is a metadata record, which bumps ``metadata.version`` (static configs
        never change while the broker runs). Resolving them took five config look-ups per
        request."""
        version = self.metadata.version
        cache = self._settings_cache
        if version != self._settings_version or len(cache) >= GROUP_SETTINGS_CACHE_MAX:
            cache.clear()
            self._settings_version = version
        settings = cache.get(group_id)
        if settings is None:
            v = self._group_value
            settings = cache[group_id] = _GroupSettings(
                SharePartitionConfig(
                    record_lock_duration_ms=int(v(group_id, "share.record.lock.duration.ms")),
                    delivery_count_limit=int(v(group_id, "share.delivery.count.limit")),
                    # Broker-wide in Kafka 4.2 (a group-level override arrives only in 4.3).
                    max_record_locks=int(self.resolver.broker_value(
                        "group.share.partition.max.record.locks")
                        or broker_default_int("group.share.partition.max.record.locks"))),
                read_committed=v(group_id, "share.isolation.level") == "read_committed")
        return settings

    def partition_config(self, group_id: str) -> SharePartitionConfig:
        return self._settings(group_id).partition

    def record_lock_duration_ms(self, group_id: str) -> int:
        return self._settings(group_id).partition.record_lock_duration_ms

    # -- topics --------------------------------------------------------------------------
    def _log_for(self, topic_id: uuid.UUID, partition: int
                 ) -> tuple[UnifiedLog | None, ErrorCode]:
        return self.replicas.lookup_by_id(topic_id, partition)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        ti = self.metadata.topics_by_id.get(topic_id)
        return ti.name if ti else None

    # -- share-partitions ----------------------------------------------------------------
    def initial_start_offset(self, group_id: str, pl: UnifiedLog) -> int:
        """Where a new share-partition starts (``share.auto.offset.reset``)."""
        reset = self._group_value(group_id, "share.auto.offset.reset")
        if reset == "earliest":
            return pl.log_start_offset
        if reset.startswith("by_duration:"):
            ts = self.time_ms() - parse_iso_duration_ms(reset.split(":", 1)[1])
            try:
                found = pl.offset_for_timestamp(ts)
            except RemoteLogUnavailableError:
                return pl.log_start_offset  # remote metadata not there yet: skip nothing
            except (RemoteFetchPending, RemoteReadError) as e:
                # The exact record lies in remote segments not in memory, and initialising
                # cannot wait: start at the first remote segment whose records reach the
                # time (nothing newer is skipped; a few older records may be delivered).
                reader = pl.remote_log_reader
                start = reader.segment_offset_for_timestamp(ts) \
                    if isinstance(reader, RemotePartitionReader) else None
                log.info("share group %s, partition %s: by_duration start from remote "
                         "segment metadata (%s): offset %s", group_id, pl.name, e, start)
                if start is not None:
                    return max(start, pl.log_start_offset)
                found = None
            # No record that recent: start at the end, as Kafka.
            return found[0] if found is not None else pl.high_watermark
        return pl.high_watermark

    def get(self, group_id: str, topic_id: uuid.UUID, partition: int, *,
            initialize: bool = False, from_log_start: bool = False
            ) -> tuple[SharePartition | None, ErrorCode]:
        """The loaded share-partition, loading it from its durable state. Without durable
        state: initialised from ``share.auto.offset.reset`` if ``initialize``, else
        UNKNOWN_TOPIC_OR_PARTITION (the partition was never assigned in this group, as Kafka's
        share coordinator answers for an uninitialised share-partition)."""
        pl, err = self._log_for(topic_id, partition)
        if pl is None:
            return None, err
        key = (group_id, topic_id, partition)
        sp = self._partitions.get(key)
        if sp is None:
            state = self.persister.read(key)
            if state is None:
                if not initialize:
                    return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                start = pl.log_start_offset if from_log_start else \
                    self.initial_start_offset(group_id, pl)
                state = SharePartitionState(start_offset=start)
                self.persister.write_snapshot(key, state)
            sp = SharePartition(group_id, topic_id, partition, self.partition_config(group_id),
                                self.time_ms, state)
            self._partitions[key] = sp
        if pl.log_start_offset > sp.start_offset:  # retention / DeleteRecords moved it
            sp.on_log_start_offset(pl.log_start_offset)
        return sp, ErrorCode.NONE

    def _unload(self, key: StateKey) -> None:
        """Forget a loaded share-partition (its state was rolled back to the durable one by
        the persister; :meth:`get` rebuilds it from there on next use)."""
        self._partitions.pop(key, None)

    def _drop(self, key: StateKey) -> AppendMark | None:
        self._partitions.pop(key, None)
        self._wake(key)
        return self.persister.delete(key)

    def _persist(self, keys: Iterable[StateKey]) -> list[AppendMark | None]:
        """Write the deltas of the given share-partitions, wake long polls they allow, re-arm
        the lock timer."""
        deltas = []
        for key in dict.fromkeys(keys):
            sp = self._partitions.get(key)
            if sp is None:
                continue
            delta = sp.drain_delta()
            if delta is not None:
                deltas.append((key, delta))
            if sp.take_wakeup():
                self._wake(key)
        self._rearm()
        return self.persister.write_deltas(deltas) if deltas else []

    # -- lock expiry timer ---------------------------------------------------------------
    def _rearm(self) -> None:
        deadline = None
        for sp in self._partitions.values():
            d = sp.next_deadline()
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        if deadline == self._timer_at and (self._timer is not None or deadline is None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the loop (unit use): the caller drives on_timer
            return
        delay = max(0.0, (deadline - self.time_ms()) / 1000)
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        now = self.time_ms()
        due = []
        for key, sp in self._partitions.items():
            d = sp.next_deadline()
            if d is not None and d <= now:
                sp.on_timer(now)
                due.append(key)
        self._persist(due)

    # -- long-poll wake-ups --------------------------------------------------------------
    def _wake(self, key: StateKey) -> None:
        wake(self._waiters, key)

    async def _wait(self, share_keys: list[StateKey], log_keys: list[tuple[str, int]],
                    timeout_s: float) -> bool:
        """Wait for an append to one of ``log_keys`` or a wake-up of one of ``share_keys``."""
        return await wait_any([(self._waiters, share_keys),
                               (self.replicas.append_waiters, log_keys)], timeout_s)

    # -- acknowledgements ----------------------------------------------------------------
    def acknowledge(self, group_id: str, member_id: str,
                    acks: dict[TopicPartitionKey, list[AckBatch]], *, allow_renew: bool
                    ) -> tuple[dict[TopicPartitionKey, tuple[ErrorCode, str | None]],
                               list[AppendMark | None]]:
        """Apply acknowledgements (each partition atomically); returns the per-partition
        results and the appends :meth:`durable` must wait for before answering."""
        results, touched = self.apply_acknowledgements(group_id, member_id, acks,
                                                       allow_renew=allow_renew)
        return results, self._persist(touched)

    def apply_acknowledgements(self, group_id: str, member_id: str,
                               acks: dict[TopicPartitionKey, list[AckBatch]], *,
                               allow_renew: bool
                               ) -> tuple[dict[TopicPartitionKey, tuple[ErrorCode, str | None]],
                                          list[StateKey]]:
        """:meth:`acknowledge` without writing the changes: returns the per-partition results
        and the share-partitions changed, which the caller must hand to :meth:`persist` (or to
        :meth:`fetch` as ``persist_with``) before anything awaits or answers."""
        results: dict[TopicPartitionKey, tuple[ErrorCode, str | None]] = {}
        touched = []
        renew_enabled = None
        for (topic_id, partition), batches in acks.items():
            bad = validate_ack_batches(batches, allow_renew=allow_renew)
            if bad is not None:
                results[(topic_id, partition)] = (ErrorCode.INVALID_REQUEST, bad)
                continue
            if allow_renew and any(_RENEW in b.types for b in batches):
                if renew_enabled is None:
                    renew_enabled = self._group_value(
                        group_id, "share.renew.acknowledge.enable") == "true"
                if not renew_enabled:  # as Kafka: the renewal is refused
                    results[(topic_id, partition)] = (
                        ErrorCode.INVALID_RECORD_STATE,
                        "share.renew.acknowledge.enable is false for this group")
                    continue
            sp, err = self.get(group_id, topic_id, partition)
            if sp is None:
                results[(topic_id, partition)] = (err, None)
                continue
            results[(topic_id, partition)] = (ErrorCode(sp.acknowledge(member_id, batches)), None)
            touched.append((group_id, topic_id, partition))
        return results, touched

    def persist(self, keys: Iterable[StateKey]) -> list[AppendMark | None]:
        """Write the changes of the given share-partitions (see :meth:`apply_acknowledgements`);
        returns the appends :meth:`durable` waits for."""
        return self._persist(keys)

    async def durable(self, marks: list[AppendMark | None]) -> None:
        await self.persister.durable(marks)

    def release_member(self, group_id: str, member_id: str,
                       partitions: Iterable[TopicPartitionKey] | None = None
                       ) -> list[AppendMark | None]:
        """Release the member's acquired records (on ``partitions``, or every loaded
        share-partition of the group)."""
        if partitions is None:
            keys = [k for k in self._partitions if k[0] == group_id]
        else:
            keys = [(group_id, t, p) for t, p in partitions]
        touched = []
        for key in keys:
            sp = self._partitions.get(key)
            if sp is not None and sp.release_member(member_id):
                touched.append(key)
        return self._persist(touched)

    def close_session(self, group_id: str, member_id: str) -> list[AppendMark | None]:
        """A final (epoch -1) request: drop the session, release what the member holds on its
        partitions."""
        session = self.sessions.remove(group_id, member_id)
        if session is None:
            return []
        return self.release_member(group_id, member_id, list(session.partitions))

    # -- fetching ------------------------------------------------------------------------
    def _fetch_once(self, group_id: str, member_id: str, partitions: list[TopicPartitionKey],
                    *, max_bytes: int, max_records: int, batch_size: int, mode: AcquireMode,
                    min_bytes: int, force: bool, remote: list[Awaitable[object]] | None = None,
                    persist_with: Sequence[StateKey] = (),
                    marks: list[AppendMark | None] | None = None
                    ) -> tuple[list[PartitionResult], bool]:
        """:meth:`_fetch_pass`, then one write of what it changed together with the
        share-partitions ``persist_with`` (a request's acknowledgements: one append per request
        instead of one for the acknowledgements and one for the acquisitions); with
        ``persist_with``, the appends go to ``marks`` if given."""
        try:
            results, done, touched = self._fetch_pass(
                group_id, member_id, partitions, max_bytes=max_bytes, max_records=max_records,
                batch_size=batch_size, mode=mode, min_bytes=min_bytes, force=force,
                remote=remote)
        except BaseException:
            if persist_with:  # the acknowledgements stand: write them before the error
                written = self._persist(persist_with)
                if marks is not None:
                    marks.extend(written)
            raise
        if touched or persist_with:
            written = self._persist([*persist_with, *touched])
            # Only acknowledgements wait for durability (log.flush.strict), as before: a
            # fetch without them never waited for its acquisitions to be fsynced.
            if marks is not None and persist_with:
                marks.extend(written)
        return results, done

    def _fetch_pass(self, group_id: str, member_id: str, partitions: list[TopicPartitionKey],
                    *, max_bytes: int, max_records: int, batch_size: int, mode: AcquireMode,
                    min_bytes: int, force: bool, remote: list[Awaitable[object]] | None = None
                    ) -> tuple[list[PartitionResult], bool, list[StateKey]]:
        """One pass over the partitions (already rotated), as Kafka 4.2's DelayedShareFetch +
        ShareFetchUtils: take every share-partition that may acquire (``can_acquire``: under
        the record-lock cap, or holding AVAILABLE records); read each from its next fetch
        offset with ``max_bytes / n`` bytes (n = those partitions; soft like Fetch: the first
        partition with data returns at least one whole batch, and the response total stays
        within ``max_bytes`` after it); then acquire in order, each partition getting
        ``max_records`` minus what the ones before it acquired. Acquires only if at least
        ``min_bytes`` were read or ``force`` (the long poll's deadline).

        Returns (results, done, touched): ``touched`` the share-partitions the pass changed
        (the caller writes them); ``done`` when the response should be sent now, as Kafka
        completes a delayed share fetch: MinBytes was satisfied by what was read (always when
        MinBytes <= 0 and some partition may acquire), whether or not anything was acquired
        (MaxRecords <= 0 acquires nothing), or MaxBytes <= 0 gave per-partition errors.

        Tiered storage: a partition whose records are in remote segments not in memory yet
        reads nothing (ReplicaManager.read_log's ``pending``). With ``remote`` (a list) the
        pass stops before acquiring anything when there is such a partition, and puts the
        awaitables there: the caller waits for them (``remote.fetch.max.wait.ms``) and makes
        the pass again (Kafka's delayed share fetch of remote data). A failed remote read is
        KAFKA_STORAGE_ERROR for its partition."""
        results: list[PartitionResult] = []
        settings = self._settings(group_id)
        config, read_committed = settings.partition, settings.read_committed
        acquirable: list[tuple[PartitionResult, SharePartition, UnifiedLog]] = []
        for topic_id, partition in partitions:
            res = PartitionResult(topic_id, partition)
            results.append(res)
            sp, err = self.get(group_id, topic_id, partition)
            if sp is None:
                res.error = err
                continue
            if sp.config != config:  # group configs changed (IncrementalAlterConfigs)
                sp.set_config(config)
            pl, _ = self._log_for(topic_id, partition)
            assert pl is not None
            if sp.can_acquire():
                acquirable.append((res, sp, pl))
        if not acquirable:
            return results, False, []
        if max_bytes <= 0:
            # Kafka 4.1+ (PartitionMaxBytesStrategy): "Request max bytes must be greater than
            # 0", an IllegalArgumentException, answered per partition as UNKNOWN_SERVER_ERROR.
            for res, _sp, _pl in acquirable:
                res.error = ErrorCode.UNKNOWN_SERVER_ERROR
                res.error_message = "Request max bytes must be greater than 0"
            return results, True, []
        partition_max_bytes = max_bytes // len(acquirable)
        limit = max_bytes
        min_one = True
        available = 0
        reads: list[tuple[PartitionResult, SharePartition, int, bytes | memoryview,
                          list[tuple[int, int]] | None]] = []
        for res, sp, pl in acquirable:
            offset = max(sp.next_fetch_offset(), pl.log_start_offset)
            if offset >= pl.high_watermark:
                continue
            read = self._read_for_acquire(sp, pl, offset, min(partition_max_bytes, limit),
                                          max_records, min_bytes, read_committed, min_one)
            if read.pending is not None:
                if remote is not None:
                    remote.append(read.pending)
                continue
            if read.error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,  # deleted meanwhile
                                   ErrorCode.KAFKA_STORAGE_ERROR,  # a remote read failed
                                   ErrorCode.REPLICA_NOT_AVAILABLE):  # remote not attached
                res.error = ErrorCode(read.error_code)
                continue
            data = read.in_memory()
            if read.error_code != ErrorCode.NONE or not data:
                continue
            min_one = False
            limit = max(0, limit - len(data))
            available += len(data)
            reads.append((res, sp, offset, data,
                          read.aborted_transactions if read_committed else None))
        if remote:
            return results, False, []  # wait for the remote data, then a new pass
        if available < min_bytes and not force:
            return results, False, []
        records_left = max_records  # <= 0: nothing is acquired (never "unlimited")
        touched = []
        for res, sp, offset, data, aborted in reads:
            if records_left <= 0:
                break
            batches = fetched_batches(data, aborted)
            if not batches:
                continue
            acquired = sp.acquire(member_id, [fb for fb, _s, _e in batches],
                                  max_records=records_left, batch_size=batch_size, mode=mode,
                                  fetch_offset=offset)
            touched.append((group_id, res.topic_id, res.partition))
            if not acquired:
                continue
            res.acquired = list(acquired)
            records_left -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            lo, hi = acquired[0].first_offset, acquired[-1].last_offset
            sel = [(s, e) for fb, s, e in batches if fb.last_offset >= lo and fb.base_offset <= hi]
            start, end = sel[0][0], sel[-1][1]
            res.records = data if start == 0 and end == len(data) else \
                memoryview(data)[start:end]
        return results, True, touched

    def _read_for_acquire(self, sp: SharePartition, pl: UnifiedLog, offset: int, cap: int,
                          max_records: int, min_bytes: int, read_committed: bool,
                          min_one: bool) -> ReadResult:
        """Read ``pl`` from ``offset`` for an acquisition of at most ``max_records`` records:
        at most ``cap`` bytes (the partition's share of MaxBytes), but only as far as the
        acquisition can use (``SharePartition.read_through``), estimated from the bytes per
        offset this partition's last read saw and read again, twice as long, when the
        estimate fell short. A ShareFetch of 500 records used to pread the whole share of
        MaxBytes (librdkafka asks 50 MiB: 12.5 MiB a partition of four) to send ~50 KiB of
        it; Kafka's reads are lazy file slices, so it never paid that. The records acquire
        sees are the same either way (see read_through); MinBytes is honoured by reading at
        least that much."""
        target = sp.read_through(offset, max_records)
        per_offset = sp.read_bytes_per_offset or DEFAULT_READ_BYTES_PER_OFFSET
        want = max(int((target - offset + 1) * per_offset * READ_ESTIMATE_MARGIN)
                   + READ_SLACK_BYTES, min_bytes)
        while True:
            size = min(cap, want)
            read = self.replicas.read_log(pl, offset, size, read_committed=read_committed,
                                          min_one_message=min_one)
            data = read.in_memory()
            if size >= cap or read.error_code != ErrorCode.NONE or read.pending is not None:
                return read
            stop_at = read.last_stable_offset if read_committed else read.high_watermark
            spans = split_batches(data) if data else []
            if spans:
                last = spans[-1][1]
                sp.read_bytes_per_offset = max(1.0, len(data) / max(1, last - spans[0][0] + 1))
                if last >= target or last + 1 >= stop_at:
                    return read
            elif offset >= stop_at:
                return read
            # Short of the target, or nothing because the next batch is larger than this read
            # (without min_one_message a read returns whole batches only): read more.
            want = size * 2

    def fetch(self, group_id: str, member_id: str, partitions: list[TopicPartitionKey], *,
              max_wait_ms: int, min_bytes: int, max_bytes: int, max_records: int,
              batch_size: int, mode: AcquireMode, session_epoch: int = 0,
              persist_with: Sequence[StateKey] = (),
              marks: list[AppendMark | None] | None = None):
        """Acquire records for a ShareFetch: the results now, or a coroutine that long-polls.
        ``partitions`` (the share session's, in session order) are rotated left by
        ``session_epoch % n`` first (``rotate_partitions``), so every partition gets to be
        first, with the whole MaxRecords budget, in turn. ``max_bytes`` is the request's
        MaxBytes already capped by ``fetch.max.bytes``; MinBytes <= 0 answers at once.
        ``persist_with``: share-partitions changed by the request's acknowledgements
        (:meth:`apply_acknowledgements`), written by the first pass, before this returns,
        together with its acquisitions; its appends are added to ``marks``."""
        partitions = rotate_partitions(partitions, session_epoch)
        opts: dict[str, Any] = {"max_bytes": max_bytes, "max_records": max_records,
                                "batch_size": batch_size, "mode": mode}
        remote: list[Awaitable[object]] = []
        results, done = self._fetch_once(group_id, member_id, partitions, min_bytes=min_bytes,
                                         force=max_wait_ms <= 0, remote=remote,
                                         persist_with=persist_with, marks=marks, **opts)
        if remote:
            return self._after_remote(group_id, member_id, partitions, remote, min_bytes, opts)
        if done or max_wait_ms <= 0 or not partitions or \
                all(r.error != ErrorCode.NONE for r in results):
            return results
        return self._long_poll(group_id, member_id, partitions, max_wait_ms, min_bytes, opts)

    async def _after_remote(self, group_id, member_id, partitions, remote, min_bytes, opts):
        """Wait for the pending remote reads (at most ``remote.fetch.max.wait.ms``), then one
        pass that answers with what there is (Kafka completes a delayed fetch of remote data
        once the remote read is done, whatever MinBytes)."""
        # Tiered storage: longest a share fetch waits for remote data (DelayedRemoteFetch);
        # read per request, as it is a dynamic broker config.
        wait_ms = self.resolver.broker_int("remote.fetch.max.wait.ms")
        await asyncio.wait([asyncio.ensure_future(r) for r in remote], timeout=wait_ms / 1000)
        results, _ = self._fetch_once(group_id, member_id, partitions, min_bytes=min_bytes,
                                      force=True, **opts)
        return results

    async def _long_poll(self, group_id, member_id, partitions, max_wait_ms, min_bytes, opts):
        deadline = self.time_ms() + max_wait_ms
        while True:
            remaining = deadline - self.time_ms()
            if remaining <= 0:
                break
            share_keys = [(group_id, t, p) for t, p in partitions]
            log_keys = [(n, p) for t, p in partitions if (n := self.topic_name(t)) is not None]
            if not await self._wait(share_keys, log_keys, remaining / 1000):
                break
            remote: list[Awaitable[object]] = []
            results, done = self._fetch_once(group_id, member_id, partitions,
                                             min_bytes=min_bytes, force=False, remote=remote,
                                             **opts)
            if remote:
                return await self._after_remote(group_id, member_id, partitions, remote,
                                                min_bytes, opts)
            if done:
                return results
        results, _ = self._fetch_once(group_id, member_id, partitions, min_bytes=min_bytes,
                                      force=True, **opts)
        return results

    # -- ShareGroupListener (called by the group coordinator) ----------------------------
    def partitions_assigned(self, group_id: str, partitions: list[tuple[uuid.UUID, int]]) -> None:
        """Initialise the share-partitions that have no state yet. A new partition of a topic
        the group already consumes (the topic grew) starts at the log start offset whatever
        ``share.auto.offset.reset`` says, so records produced to it before its assignment are
        not skipped (Kafka's KAFKA-20742); a topic new to the group follows the config."""
        known = {k[1] for k in self.group_state_keys(group_id)}
        for topic_id, partition in partitions:
            self.get(group_id, topic_id, partition, initialize=True,
                     from_log_start=topic_id in known)

    def member_left(self, group_id: str, member_id: str) -> None:
        """The member left the group (heartbeat epoch -1) or was fenced. If it still has a share
        session its records stay with it: clients leave the group *before* their final
        acknowledgements (librdkafka's close sends the leaving heartbeat, then the final
        ShareAcknowledge), which must still find the session and the records; the session's
        final request or its connection closing releases what is left, else the locks expire
        (as Kafka, whose group coordinator never touches acquired records). A member without a
        session gets its records released at once."""
        if self.sessions.get(group_id, member_id) is None:
            self.release_member(group_id, member_id)

    def group_deleted(self, group_id: str) -> None:
        self.sessions.remove_group(group_id)
        for key in set(self.persister.keys_of_group(group_id)) | \
                {k for k in self._partitions if k[0] == group_id}:
            self._drop(key)
        self._rearm()

    # -- broker events -------------------------------------------------------------------
    def on_connection_closed(self, connection: Hashable) -> None:
        for s in self.sessions.remove_connection(connection):
            self.release_member(s.group_id, s.member_id, list(s.partitions))

    def on_topic_deleted(self, topic: TopicInfo) -> None:
        topic_id = topic.topic_id
        self.sessions.forget_topic(topic_id)
        for key in {k for k in self.persister.keys() if k[1] == topic_id} | \
                {k for k in self._partitions if k[1] == topic_id}:
            self._drop(key)
        self._rearm()

    def on_log_start_moved(self) -> None:
        """Retention ran: move share-partitions whose records were deleted."""
        touched = []
        for key, sp in self._partitions.items():
            pl, _ = self._log_for(key[1], key[2])
            if pl is not None and pl.log_start_offset > sp.start_offset:
                sp.on_log_start_offset(pl.log_start_offset)
                touched.append(key)
        self._persist(touched)

    # -- admin (Describe/Alter/DeleteShareGroupOffsets) ----------------------------------
    def loaded_partitions(self) -> list[tuple[StateKey, SharePartition]]:
        """The share-partitions loaded now, with their keys (metrics read them at scrape)."""
        return list(self._partitions.items())

    def group_state_keys(self, group_id: str) -> list[StateKey]:
        return sorted(set(self.persister.keys_of_group(group_id))
                      | {k for k in self._partitions if k[0] == group_id},
                      key=lambda k: (str(k[1]), k[2]))

    def describe_offset(self, group_id: str, topic_id: uuid.UUID, partition: int
                        ) -> tuple[int, int, ErrorCode]:
        """(start offset, lag, error) of one share-partition; -1/-1 if it has no state."""
        pl, err = self._log_for(topic_id, partition)
        if pl is None:
            return -1, -1, err
        sp, err = self.get(group_id, topic_id, partition)
        if sp is None:
            return -1, -1, ErrorCode.NONE
        return sp.start_offset, sp.lag(pl.high_watermark), ErrorCode.NONE

    def alter_offset(self, group_id: str, topic_id: uuid.UUID, partition: int,
                     start_offset: int) -> tuple[ErrorCode, AppendMark | None]:
        """AlterShareGroupOffsets of one partition (the group is empty: nothing is acquired)."""
        pl, err = self._log_for(topic_id, partition)
        if pl is None:
            return err, None
        if start_offset < 0:
            return ErrorCode.INVALID_REQUEST, None
        key = (group_id, topic_id, partition)
        sp = self._partitions.get(key)
        if sp is None and self.persister.read(key) is None:
            # Not initialised yet: altering initialises it at the given offset.
            return ErrorCode.NONE, self.persister.write_snapshot(
                key, SharePartitionState(start_offset=start_offset, state_epoch=0))
        sp, err = self.get(group_id, topic_id, partition)
        if sp is None:
            return err, None
        reset = ErrorCode(sp.reset_start_offset(start_offset))
        if reset != ErrorCode.NONE:
            return reset, None
        marks = self._persist([key])
        return ErrorCode.NONE, marks[0] if marks else None

    def delete_offsets(self, group_id: str, topic_id: uuid.UUID) -> list[AppendMark | None]:
        """DeleteShareGroupOffsets of one topic: drop the share-partitions' state."""
        marks = [self._drop(k) for k in self.group_state_keys(group_id) if k[1] == topic_id]
        self._rearm()
        return marks
