"""The group coordinator's I/O shell: cores ↔ event loop ↔ ``__consumer_offsets``.

Owns:
- the four sans-I/O cores (classic groups, KIP-848 consumer groups, share groups, committed
  offsets) and the routing between them (one group-id namespace shared by all group types: a
  group id held by a group of another type is GROUP_ID_NOT_FOUND for the heartbeat APIs and
  INCONSISTENT_GROUP_PROTOCOL for JoinGroup, as in Kafka);
- the share-group listeners (``snakka.share.types.ShareGroupListener``): the share core's
  events (partitions assigned, member left, group deleted) are delivered to them after every
  call, in order; a listener registered late is told the partitions already assigned;
- deferred replies: a core that answers PENDING gets an asyncio future per token, resolved when
  the core reports the completion; a cancelled request (connection closed) cancels its token;
- one event-loop timer at the earliest deadline any core asked for;
- persistence: records the cores emit are appended, in the order they were emitted, to the
  ``__consumer_offsets`` partition of their group (Kafka's ``abs(hash(group)) % partitions``) in
  Kafka 4.0's record formats (:mod:`snakka.groups.records` translates them; tombstones have a
  null value; TxnOffsetCommit records go in the producer's transactional batch and the
  markers are control batches). At start-up every partition is replayed into the cores (latest
  record per key wins) before the broker accepts connections; a partition still holding the
  JSON records of an older snakka is then rewritten in Kafka's format, once (:meth:`_migrate`).

Transactional offsets (TxnOffsetCommit) are held by the offsets core as pending per producer
id; :meth:`GroupCoordinator.complete_transaction` is how the transaction coordinator's COMMIT /
ABORT markers reach a ``__consumer_offsets`` partition (wired in broker.py through
``TransactionManager.set_offsets_marker_writer``).

A failed write (ENOSPC, EIO, EMFILE) never leaves memory ahead of the log: the keys of the
failed records are replayed into the cores with their durable values (Kafka's CoordinatorRuntime
reverts a failed write's records), the waits completed by that round fail, and the request gets
NOT_COORDINATOR (Kafka's mapping of a storage error in a coordinator), so clients look the
coordinator up again and retry; once space returns, the retry succeeds.

``__consumer_offsets`` is a compacted topic, as in Kafka (``cleanup.policy=compact``,
``compression.type=producer``, Kafka's 100 MiB segments), created on the first group write and
written through :class:`snakka.coordinator_log.CoordinatorLog`. The log cleaner keeps the
latest record of every key, so every record the cores emit is keyed by what it describes (the
kind and the group id first, then the topic-partition or member id) and every deletion is a
tombstone with that same key: a deleted group tombstones its members before its group record,
expired and deleted offsets get one tombstone per partition, resolved transactional offsets one
per pending entry. What compaction keeps therefore replays to exactly the live state; replay
tolerates gaps in offsets and tombstones whose earlier records are gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from snakka.controller import MetadataListener
from snakka.coordinator_log import JSON_SERDE, CoordinatorLog, RecordSerde
from snakka.groups import migration
from snakka.groups.classic import ClassicGroups
from snakka.groups.consumer import ConsumerGroups, HeartbeatResult
from snakka.groups.offsets import KIND as OFFSET_KIND
from snakka.groups.offsets import TXN_KIND, OffsetStore
from snakka.groups.records import KAFKA_SERDE, GroupRecordMapper
from snakka.groups.share_group import GroupDeleted, MemberLeft, PartitionsAssigned, ShareGroups
from snakka.groups.types import PENDING, GroupConfig, GroupRecord
from snakka.protocol import consumer_protocol
from snakka.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    import uuid

    from snakka.config import BrokerConfig
    from snakka.controller import Controller
    from snakka.metadata.configs import ConfigResolver
    from snakka.replica.manager import ReplicaManager
    from snakka.share.types import ShareGroupListener

log = logging.getLogger("snakka.groups")

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's GroupCoordinatorService.groupMetadataTopicConfigs: compacted, the producer's codec.
# segment.bytes comes from offsets.topic.segment.bytes.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "compression.type": "producer"}

def group_config(resolver: ConfigResolver) -> GroupConfig:
    """The group cores' settings: each GroupConfig field is the broker config of the same name
    (dots written as underscores), read through the resolver so dynamic values count."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(GroupConfig):
        if f.name == "extra":
            continue
        name = f.name.replace("_", ".")
        if f.name == "group_consumer_assignors":
            raw = resolver.broker_value(name) or "uniform"
            values[f.name] = tuple(x.strip() for x in raw.split(",") if x.strip())
        elif f.name == "group_consumer_migration_policy":
            values[f.name] = str(resolver.broker_value(name) or "bidirectional").lower()
        else:
            values[f.name] = resolver.broker_int(name)
    return GroupConfig(**values)


def subscription_topics(metadata: bytes) -> list[str]:
    """Topics of a classic consumer-protocol subscription ([] if it is not one)."""
    try:
        return list(consumer_protocol.decode_subscription(metadata).topics)
    except ValueError:
        return []


def _producer_of(by_id: dict[int, tuple[int, int] | None], kv: tuple) -> tuple[int, int] | None:
    return by_id[id(kv)]


class GroupCoordinator(MetadataListener):
    # The format of __consumer_offsets: Kafka 4.0's records (snakka.groups.records). Tests
    # that need a data directory of an older snakka set JSON_SERDE here.
    SERDE: RecordSerde = KAFKA_SERDE

    def __init__(self, config: BrokerConfig, controller: Controller, replicas: ReplicaManager,
                 time_ms: Callable[[], int]) -> None:
        self.metadata = controller.metadata
        self.broker_config = config
        self.time_ms = time_ms
        resolver = controller.resolver
        self.config = group_config(resolver)
        clock = time_ms
        self.classic = ClassicGroups(self.config, clock)
        self.consumer = ConsumerGroups(self.config, clock, self._topic_metadata)
        self.offsets = OffsetStore(self.config, clock)
        self.share = ShareGroups(
            self.config, clock, self._topic_metadata,
            session_timeout_ms=lambda g: int(resolver.group_value(g, "share.session.timeout.ms")),
            heartbeat_interval_ms=lambda g: int(
                resolver.group_value(g, "share.heartbeat.interval.ms")))
        self._share_listeners: list[ShareGroupListener] = []
        self._cores = (self.classic, self.consumer, self.share, self.offsets)
        self._futures: dict[object, asyncio.Future] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._expiry_task: asyncio.Task | None = None
        self.num_partitions = config.int("offsets.topic.num.partitions")
        # Created on the first group write, as Kafka creates __consumer_offsets on first use: a
        # broker nobody runs groups on does not pay for its partitions at start-up and shutdown.
        self.kafka_format = self.SERDE is KAFKA_SERDE
        self.log = CoordinatorLog(
            controller, replicas, time_ms, OFFSETS_TOPIC, self.num_partitions,
            topic_configs={**OFFSETS_TOPIC_CONFIGS,
                           "segment.bytes": str(config.int("offsets.topic.segment.bytes"))},
            lazy=True, serde=self.SERDE,
            legacy_serde=JSON_SERDE if self.kafka_format else None)
        # What is written in Kafka's format for every group and member (the cores' records are
        # translated through it).
        self.mapper = GroupRecordMapper()
        # partition -> {key: record}: the latest durable non-tombstone record per key (what a
        # failed write rolls the cores back to).
        self._live: dict[int, dict[tuple, GroupRecord]] = {}

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        await self.log.open()
        self.num_partitions = self.log.num_partitions
        n = self._replay()
        for core in self._cores:
            core.loaded()
        self._migrate()
        self._after_quietly()
        self._expiry_task = asyncio.ensure_future(self._expiry_loop())
        log.info("group coordinator loaded %d record(s): %d classic group(s), %d consumer "
                 "group(s), %d share group(s), offsets for %d group(s)", n,
                 len(self.classic.list_groups()), len(self.consumer.list_groups()),
                 len(self.share.list_groups()), len(self.offsets.groups()))

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            await asyncio.gather(self._expiry_task, return_exceptions=True)
        for fut in self._futures.values():
            if not fut.done():
                fut.cancel()

    def _replay(self) -> int:
        n = 0
        for e in self.log.replay_entries():
            if e.marker is not None:
                self._replay_marker(e.partition, e.producer_id, e.marker.commit)
                continue
            n += 1
            assert e.key is not None
            if isinstance(e.key[0], int):  # Kafka's format
                records = self.mapper.replay(e.key, e.value, e.producer_id, e.producer_epoch)
            else:  # a record of an older snakka (JSON): restated at start-up (_migrate)
                records = [GroupRecord(e.key, e.value)]
                if e.key[0] in (OFFSET_KIND, TXN_KIND) and e.value is not None:
                    self.mapper.note_seq(int(e.value.get("seq", 0)))
            for gr in records:
                self._replay_record(e.partition, gr)
        for gr in self.mapper.finish():
            self._replay_record(self.partition_for(gr.key[1]), gr)
        return n

    def _replay_record(self, p: int, gr: GroupRecord) -> None:
        for core in self._cores:
            core.replay(gr)
        self._track(p, gr)

    def _replay_marker(self, p: int, producer_id: int, commit: bool) -> None:
        """A COMMIT / ABORT marker in the log: the producer's pending offsets of the groups of
        this partition are resolved, as when it was written."""
        groups = [g for g in self.offsets.pending_groups(producer_id)
                  if self.partition_for(g) == p]
        self.offsets.complete_transaction(producer_id, commit, groups)
        for gr in self.offsets.drain_records():
            self._track(p, gr)

    def _migrate(self) -> None:
        """Partitions holding records of an older snakka (JSON) are rewritten in Kafka's
        format, once: their live state is appended again and the log start offset moves past
        the old records (CoordinatorLog.restate). A crash before the log start moved replays
        both formats (the same state) and restates again."""
        for p in sorted(self.log.legacy_partitions):
            live = list(self._live.get(p, {}).values())
            # Offsets in write order (a pending and a committed offset of one partition: the
            # later one wins at COMMIT), after the groups.
            groups = [gr for gr in live if gr.key[0] not in (OFFSET_KIND, TXN_KIND)]
            offsets = sorted((gr for gr in live if gr.key[0] in (OFFSET_KIND, TXN_KIND)),
                             key=lambda gr: int((gr.value or {}).get("seq", 0)))
            self.mapper.forget(gr.key for gr in live)
            writes, owned = self.mapper.translate(groups + offsets)
            kvs = [(k, v) for k, v, _ in writes]
            by_id = {id(kv): w[2] for kv, w in zip(kvs, writes, strict=True)}
            start = self.log.restate(p, kvs, producer_of=functools.partial(_producer_of, by_id))
            self.mapper.commit(owned)
            log.warning("%s-%d: migrated from snakka's JSON records to Kafka's record format: "
                        "%d record(s) for %d live fact(s) written, log start offset now %s",
                        OFFSETS_TOPIC, p, len(kvs), len(live), start)

    # -- plumbing ------------------------------------------------------------------------
    def _topic_metadata(self) -> dict:
        return {ti.name: (ti.topic_id, ti.partitions)
                for ti in self.metadata.topics.values() if not ti.is_internal}

    def _after(self) -> None:
        """Persist what the cores emitted, resolve finished waits, re-arm the timer.

        If the records cannot be written (ENOSPC, EIO, EMFILE), the cores are rolled back to
        what is durable (:meth:`_roll_back`), every wait this round completed fails, and
        :class:`KafkaError` NOT_COORDINATOR is raised to the request being handled: Kafka's
        CoordinatorRuntime reverts the records of a failed write and answers NOT_COORDINATOR
        for a storage error, so clients find the coordinator again and retry."""
        migration.complete_downgrades(self.consumer, self.classic)  # KIP-848 online downgrade
        records: list[GroupRecord] = []
        for core in self._cores:
            records.extend(core.drain_records())
        failed = self._persist(records) if records else None
        error = None
        if failed is not None:
            error = KafkaError(ErrorCode.NOT_COORDINATOR,
                               f"The coordinator could not write its state: {failed}")
        for core in (self.classic,):
            for token, result in core.drain_completions():
                fut = self._futures.pop(token, None)
                if fut is not None and not fut.done():
                    if error is not None:
                        fut.set_exception(error)
                    else:
                        fut.set_result(result)
        if error is None:
            self._deliver_share_events()
        else:  # they describe transitions that were just rolled back
            self.share.drain_events()
        self._rearm()
        if error is not None:
            raise error

    def _after_quietly(self) -> None:
        """:meth:`_after` where no request waits for the outcome (timers, metadata changes):
        a failed write is already logged and rolled back."""
        try:
            self._after()
        except KafkaError:
            pass

    def _deliver_share_events(self) -> None:
        for event in self.share.drain_events():
            for listener in list(self._share_listeners):
                # A failing listener is a bug on the share side; it must not fail the group
                # request that caused the event (its records are already written).
                try:
                    if isinstance(event, PartitionsAssigned):
                        listener.partitions_assigned(event.group_id, list(event.partitions))
                    elif isinstance(event, MemberLeft):
                        listener.member_left(event.group_id, event.member_id)
                    elif isinstance(event, GroupDeleted):
                        listener.group_deleted(event.group_id)
                except Exception:
                    log.exception("share-group listener %r failed on %r", listener, event)

    def _persist(self, records: Iterable[GroupRecord]) -> OSError | None:
        """Append the records; returns the error of a failed write (after rolling back)."""
        by_partition: dict[int, list[GroupRecord]] = {}
        for rec in records:
            by_partition.setdefault(self.log.partition_for(rec.key[1]), []).append(rec)
        failed = None
        for p, group_records in by_partition.items():
            try:
                mark = self._append(p, group_records)
            except OSError as exc:
                log.error("%s-%d: cannot write %d group record(s), rolling back to the durable "
                          "state: %s", OFFSETS_TOPIC, p, len(group_records), exc)
                self._roll_back(p, group_records)
                failed = exc
                continue
            if mark is None:
                continue  # the topic was deleted under us (logged by CoordinatorLog)
            for gr in group_records:
                self._track(p, gr)
        return failed

    def _append(self, p: int, records: list[GroupRecord]) -> object:
        """Write the cores' records to partition ``p``: translated to Kafka's records, each
        run of one producer's transactional offsets in a transactional batch of it."""
        if not self.kafka_format:
            return self.log.append(p, [(gr.key, gr.value) for gr in records])
        writes, owned = self.mapper.translate(records)
        mark: object = None
        run: list[tuple[tuple, dict | None]] = []
        producer: tuple[int, int] | None = None
        for k, v, prod in writes:
            if run and prod != producer:
                mark = self.log.append(p, run, producer=producer)
                run = []
            producer = prod
            run.append((k, v))
        if run:
            mark = self.log.append(p, run, producer=producer)
        elif not writes:
            mark = True  # nothing changed in Kafka's records (a steady state): nothing to wait for
        self.mapper.commit(owned)
        return mark

    def _roll_back(self, p: int, failed: list[GroupRecord]) -> None:
        """Put every key of a failed write back to its durable value, in reverse order (an
        undo): the cores replay that value (or a tombstone if the key was never written), so
        OffsetFetch and group state never show what a restart would not."""
        durable = self._live.get(p, {})
        for gr in reversed(failed):
            restored = durable.get(gr.key) or GroupRecord(gr.key, None)
            for core in self._cores:
                try:
                    core.replay(restored)
                except Exception:  # a core that cannot take the old record back: logged
                    log.exception("rolling back %r in %r failed", gr.key, core)

    def _track(self, p: int, gr: GroupRecord) -> None:
        live = self._live.setdefault(p, {})
        if gr.value is None:
            live.pop(gr.key, None)
        else:
            live[gr.key] = gr

    def _rearm(self) -> None:
        deadlines = [d for d in (c.next_deadline() for c in self._cores) if d is not None]
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not deadlines:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, (min(deadlines) - self.time_ms()) / 1000)
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = self.time_ms()
        for core in self._cores:
            core.on_timer(now)
        self._after_quietly()

    async def _wait(self, core: Any, token: object, result: Any) -> Any:
        if result is not PENDING:
            self._after()
            return result
        fut = asyncio.get_running_loop().create_future()
        self._futures[token] = fut
        try:
            self._after()
        except KafkaError:
            if fut.done():  # its own completion failed with the write: the error is raised here
                fut.exception()
            else:  # still parked: the write that failed was not its own, but it is answered now
                self._futures.pop(token, None)
                core.cancel(token)
                self._after_quietly()
            raise
        try:
            return await fut
        except asyncio.CancelledError:
            self._futures.pop(token, None)
            core.cancel(token)
            self._after()
            raise

    async def _expiry_loop(self) -> None:
        period = self.broker_config.int("offsets.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(period)
            n = self.offsets.expire(self.group_is_active)
            # As Kafka's cleanup: an Empty group whose offsets are all gone is deleted, so idle
            # group state cannot accumulate without bound.
            dropped = 0
            for gid, _ptype, _state in self.classic.list_groups():
                if self.classic.is_empty(gid) and not self.offsets.has_offsets(gid):
                    dropped += self.classic.delete(gid) == ErrorCode.NONE
            for gid, _state in self.consumer.list_groups():
                if self.consumer.is_empty(gid) and not self.offsets.has_offsets(gid):
                    dropped += self.consumer.delete(gid) == ErrorCode.NONE
            self._after_quietly()
            if n or dropped:
                log.info("expired %d committed offset(s) and %d empty group(s) "
                         "(offsets.retention.minutes)", n, dropped)

    # -- queries shared by handlers ------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        """The group's ``__consumer_offsets`` partition (Kafka's partitioning)."""
        return self.log.partition_for(group_id)

    def group_is_active(self, group_id: str) -> bool:
        return not self.classic.is_empty(group_id) or not self.consumer.is_empty(group_id)

    def group_type(self, group_id: str) -> str | None:
        if self.consumer.has_group(group_id):
            return "consumer"
        if self.share.has_group(group_id):
            return "share"
        if self.classic.has_group(group_id):
            return "classic"
        return None

    # -- share groups (KIP-932) ----------------------------------------------------------
    def add_share_listener(self, listener: ShareGroupListener) -> None:
        """Register the share-partition side. It is told at once about every partition
        already in a share group's assignment (its initialisation is idempotent), so the
        order in which the broker starts its parts does not matter."""
        self._share_listeners.append(listener)
        for gid, _state in self.share.list_groups():
            parts = sorted(self.share.assigned_partitions(gid), key=lambda tp: (str(tp[0]), tp[1]))
            if parts:
                listener.partitions_assigned(gid, parts)

    def share_group_exists(self, group_id: str) -> bool:
        return self.share.has_group(group_id)

    def share_group_is_empty(self, group_id: str) -> bool:
        """True if the share group has no members (an unknown group is empty)."""
        return self.share.is_empty(group_id)

    def share_group_members(self, group_id: str) -> set[str]:
        return self.share.members(group_id)

    def share_assignment(self, group_id: str, member_id: str) -> set[tuple[uuid.UUID, int]] | None:
        """The partitions the member was last given by its heartbeat, or ``None`` if it is not
        a member of the share group."""
        return self.share.assignment(group_id, member_id)

    def share_heartbeat(self, **kw: Any) -> Any:
        gid = kw["group_id"]
        if gid and kw["member_epoch"] != -1 and (
                self.consumer.has_group(gid) or self.classic.has_group(gid)
                or self.offsets.has_offsets(gid)):
            return None  # the handler answers GROUP_ID_NOT_FOUND: not a share group
        result = self.share.heartbeat(**kw)
        self._after()
        return result

    # -- classic protocol ----------------------------------------------------------------
    async def join(self, **kw: Any) -> Any:
        gid = kw["group_id"]
        if self.share.has_group(gid):
            return None  # share groups are never converted: INCONSISTENT_GROUP_PROTOCOL
        if self.consumer.has_group(gid):
            if not self.consumer.is_empty(gid):
                # A classic member inside a consumer group (KIP-848 online migration).
                kw.pop("reason", None)
                kw.pop("supports_skip_assignment", None)
                result = self.consumer.classic_join(**kw)
                self._after()
                return result
            # Kafka's maybeDeleteEmptyConsumerGroup: the empty group makes way.
            self.consumer.delete(gid)
        token = object()
        return await self._wait(self.classic, token, self.classic.join(token, **kw))

    async def sync(self, **kw: Any) -> Any:
        if self.consumer.has_group(kw["group_id"]):
            kw.pop("assignments", None)
            result = self.consumer.classic_sync(**kw)
            self._after()
            return result
        token = object()
        return await self._wait(self.classic, token, self.classic.sync(token, **kw))

    def heartbeat(self, **kw: Any) -> int:
        if self.consumer.has_group(kw["group_id"]):
            err = self.consumer.classic_heartbeat(**kw)
        else:
            err = self.classic.heartbeat(**kw)
        self._after()
        return err

    def leave(self, **kw: Any) -> tuple[int, list]:
        if self.consumer.has_group(kw["group_id"]):
            out = self.consumer.classic_leave(**kw)
        else:
            out = self.classic.leave(**kw)
        self._after()
        return out

    # -- KIP-848 -------------------------------------------------------------------------
    def consumer_heartbeat(self, **kw: Any) -> Any:
        gid = kw["group_id"]
        if self.classic.has_group(gid):
            if not self.classic.is_empty(gid):
                # KIP-848 online upgrade: a joining member converts the classic group.
                if kw["member_epoch"] != 0 or not migration.try_upgrade(
                        self.classic, self.consumer, gid):
                    return None  # the handler answers GROUP_ID_NOT_FOUND
            elif kw["member_epoch"] == 0:
                self.classic.delete(gid)  # Kafka's maybeDeleteEmptyClassicGroup
        if self.share.has_group(gid):
            return HeartbeatResult(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                   error_message=f"Group {gid} is not a consumer group.")
        result = self.consumer.heartbeat(**kw)
        self._after()
        return result

    # -- offsets -------------------------------------------------------------------------
    def _simple_group(self, group_id: str, generation_id: int) -> int | None:
        """Kafka holds a group that only has offsets (committed or pending) as an Empty
        "simple" classic group: a generation < 0 commits; naming a generation names a member
        it cannot have (UNKNOWN_MEMBER_ID, where a group that does not exist at all answers
        ILLEGAL_GENERATION / GROUP_ID_NOT_FOUND). None: not such a group."""
        if self.classic.has_group(group_id) or not self.offsets.has_offsets(group_id):
            return None
        return ErrorCode.NONE if generation_id < 0 else ErrorCode.UNKNOWN_MEMBER_ID

    def validate_commit(self, group_id: str, member_id: str, generation_or_epoch: int,
                        group_instance_id: str | None) -> int:
        if self.consumer.has_group(group_id):
            return self.consumer.validate_offset_commit(
                group_id=group_id, member_id=member_id, member_epoch=generation_or_epoch)
        if self.share.has_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND  # share groups have no committed offsets
        simple = self._simple_group(group_id, generation_or_epoch)
        if simple is not None:
            return simple
        return self.classic.validate_offset_commit(
            group_id=group_id, member_id=member_id, generation_id=generation_or_epoch,
            group_instance_id=group_instance_id)

    def validate_fetch(self, group_id: str, member_id: str, member_epoch: int) -> int:
        """OffsetFetch v9+ names the member (KIP-848 consumers only): check its epoch."""
        if self.consumer.has_group(group_id):
            return self.consumer.validate_offset_fetch(
                group_id=group_id, member_id=member_id, member_epoch=member_epoch)
        return ErrorCode.NONE

    def subscribed_topics(self, group_id: str) -> set[str]:
        """Topics the group's members subscribe to (OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC)."""
        if self.consumer.has_group(group_id):
            d = self.consumer.describe(group_id)
            out: set[str] = set()
            for m in d.members if d else []:
                out.update(m.subscribed_topic_names or [])
                for tid_or_name, _parts in m.assignment:
                    if isinstance(tid_or_name, str):
                        out.add(tid_or_name)
                    else:
                        ti = self.metadata.topics_by_id.get(tid_or_name)
                        if ti:
                            out.add(ti.name)
            return out
        classic = self.classic.describe(group_id)
        if classic is None or classic.protocol_type != "consumer":
            return set()
        out = set()
        for cm in classic.members:
            out.update(subscription_topics(cm.metadata))
        return out

    def commit_offsets(self, group_id: str, entries: list) -> list[int]:
        errors = self.offsets.commit(group_id, entries)
        self._after()
        return errors

    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, *,
                           member_id: str, generation_id: int, group_instance_id: str | None,
                           entries: list) -> list[int]:
        """TxnOffsetCommit, once the transaction coordinator has verified (or added) the
        group's ``__consumer_offsets`` partition: check the committer as Kafka's
        ``validateTransactionalOffsetCommit`` does, then store ``entries`` (topic, partition,
        offset, leader epoch, metadata) as PENDING offsets of ``producer_id``. Returns an error
        per entry (a group-level error is copied to each). Raises KafkaError NOT_COORDINATOR if
        the records cannot be written (rolled back, as :meth:`_after`)."""
        err = self._validate_txn_commit(group_id, member_id, generation_id, group_instance_id)
        if err:
            return [err] * len(entries)
        errors = self.offsets.commit_transactional(group_id, producer_id, producer_epoch,
                                                   entries)
        self._after()
        return errors

    def _validate_txn_commit(self, group_id: str, member_id: str, generation_id: int,
                             group_instance_id: str | None) -> int:
        """Kafka's ``OffsetMetadataManager.validateTransactionalOffsetCommit``: an unknown group
        takes ``generation_id < 0`` (a producer whose consumer does not use group management;
        older clients send no generation at all) and answers ILLEGAL_GENERATION otherwise; a
        KIP-848 group checks the member (UNKNOWN_MEMBER_ID) and its epoch, a stale epoch being
        ILLEGAL_GENERATION here; a classic group checks member, static instance
        (FENCED_INSTANCE_ID) and generation, but not its state (no REBALANCE_IN_PROGRESS)."""
        if self.consumer.has_group(group_id):
            err = self.consumer.validate_offset_commit(
                group_id=group_id, member_id=member_id, member_epoch=generation_id)
            return ErrorCode.ILLEGAL_GENERATION if err == ErrorCode.STALE_MEMBER_EPOCH else err
        if self.share.has_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND  # Kafka: "Group ... is not a consumer group."
        simple = self._simple_group(group_id, generation_id)
        if simple is not None:
            return simple
        return self.classic.validate_offset_commit(
            group_id=group_id, member_id=member_id, generation_id=generation_id,
            group_instance_id=group_instance_id, transactional=True)

    def complete_transaction(self, offsets_partition: int, producer_id: int,
                             producer_epoch: int, commit: bool) -> None:
        """A COMMIT (``commit``) or ABORT marker of ``producer_id`` for the
        ``__consumer_offsets`` partition ``offsets_partition`` (the transaction coordinator's
        marker writer): every group of that partition with pending offsets of the producer
        commits or drops them, written durably like every group write. A marker with nothing
        pending (repeated after a restart, or for a group deleted meanwhile) writes nothing.
        Raises KafkaError NOT_COORDINATOR if the write failed (the pending offsets are rolled
        back to what is durable, so the coordinator's retry applies the marker again).
        ``producer_epoch`` is not checked, as in Kafka (the coordinator fenced older epochs
        when it verified the TxnOffsetCommit)."""
        groups = sorted(g for g in self.offsets.pending_groups(producer_id)
                        if self.partition_for(g) == offsets_partition)
        if self.kafka_format:
            # Kafka's format: the marker itself, a control batch in the partition, is what
            # resolves the transactional OffsetCommit records (module doc of groups.records);
            # also written when the log holds an open transaction of the producer whose
            # offsets are gone (group deleted), so that it ends there too.
            if not groups and not self._open_in_log(offsets_partition, producer_id):
                return
            n = self.offsets.complete_transaction(producer_id, commit, groups)
            resolved = self.offsets.drain_records()
            try:
                self.log.append_marker(offsets_partition, (producer_id, producer_epoch), commit)
            except OSError as exc:
                log.error("%s-%d: cannot write the %s marker of producer %d, rolling back: %s",
                          OFFSETS_TOPIC, offsets_partition, "COMMIT" if commit else "ABORT",
                          producer_id, exc)
                self._roll_back(offsets_partition, resolved)
                raise KafkaError(ErrorCode.NOT_COORDINATOR,
                                 f"The coordinator could not write its state: {exc}") from exc
            for gr in resolved:
                self._track(offsets_partition, gr)
        else:
            if not groups:
                return
            n = self.offsets.complete_transaction(producer_id, commit, groups)
        self._after()
        log.debug("%s-%d: %s %d pending offset(s) of producer %d (epoch %d) in %d group(s)",
                  OFFSETS_TOPIC, offsets_partition, "committed" if commit else "aborted", n,
                  producer_id, producer_epoch, len(groups))

    def _open_in_log(self, p: int, producer_id: int) -> bool:
        """True if partition ``p`` holds a transaction of ``producer_id`` with no marker yet."""
        pl = self.log.replicas.get_log(OFFSETS_TOPIC, p)
        entry = None if pl is None else pl.producer_state.last_entry(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        self.offsets.delete(group_id, partitions)
        self._after()

    def delete_group(self, group_id: str) -> int:
        if self.consumer.has_group(group_id):
            err = self.consumer.delete(group_id)
        elif self.share.has_group(group_id):
            err = self.share.delete(group_id)  # the listeners drop its share-partition state
        elif self.classic.has_group(group_id):
            err = self.classic.delete(group_id)
        elif self.offsets.has_offsets(group_id):
            err = ErrorCode.NONE
        else:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if err == ErrorCode.NONE:
            self.offsets.delete_group(group_id)
        self._after()
        return err

    # -- metadata changes ----------------------------------------------------------------
    async def on_topics_deleted(self, topics: list[str],
                                tick: Callable[[], Awaitable[None]]) -> None:
        """Many topics deleted by one request: their offsets go, then the groups re-evaluate
        once (not once per topic: each pass walks every topic and group). ``tick`` yields to
        the loop between topics (see util.slicing)."""
        for topic in topics:
            self.offsets.delete_topic(topic)
            await tick()
        self.consumer.on_metadata_change()
        self.share.on_metadata_change()
        self._after()

    def on_topics_changed(self) -> None:
        self.consumer.on_metadata_change()
        self.share.on_metadata_change()
        self._after_quietly()
