"""The broker: wires configuration, metadata, storage, handlers and listeners together.

This is the thin I/O shell around the cores. It owns:
- the metadata state (metadata.core.ClusterMetadata) and its durable log (metadata.store),
- the partition logs (storage.LogManager), created and configured from resolved topic configs,
- producer-id allocation (in blocks recorded in the metadata log),
- long-poll wake-ups: Fetch waits on per-partition futures that appends resolve,
- the share-partition manager (``share.manager``, KIP-932): started after the group coordinator
  and before the listeners, told about closed connections, topic deletions and retention,
- the group-commit flusher and the retention / checkpoint / idle-connection background tasks,
- the listeners and the set of open connections, admitted by ``server.quotas.ConnectionQuotas``
  (max.connections, max.connections.per.ip), and the broker-wide budget for response bytes
  waiting for slow readers (``server.memory.ResponseMemoryPool``, queued.max.response.bytes).

Everything runs on one asyncio event loop (uvloop when available). fsync and directory removal
run in a single worker thread so they never block the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import os
import resource
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from snakka.config import BrokerConfig
from snakka.fetch_sessions import FetchSessionCache
from snakka.groups.coordinator import GroupCoordinator
from snakka.handlers import load_handlers
from snakka.metadata.configs import ConfigResolver
from snakka.metadata.core import (
    RESERVED_TOPICS,
    ClusterMetadata,
    TopicInfo,
    uuid_to_base64,
)
from snakka.metadata.store import MetadataStore
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.security.principal import SecurityProtocol
from snakka.server.channel import ChannelLimits
from snakka.server.dispatch import RequestDispatcher
from snakka.server.listener import ListenerServer, idle_sweeper
from snakka.server.memory import ResponseMemoryPool
from snakka.server.quotas import ConnectionQuotas
from snakka.server.registry import ConnectionRegistry
from snakka.share.manager import SharePartitionManager
from snakka.storage import LogConfig, LogManager, PartitionLog
from snakka.storage.files import configure as configure_open_files
from snakka.storage.flush import FlushScheduler
from snakka.util.slicing import TimeSlice
from snakka.util.waiters import WaitList, wait_any, wake

if TYPE_CHECKING:
    from snakka.config import Listener
    from snakka.server.connection import ServerConnection

log = logging.getLogger("snakka.broker")

# Descriptors that must be free once everything is loaded, or start-up fails (loudly) instead of
# listening without being able to accept.
MIN_FREE_FDS_AT_START = 32


# Partitions one request may create on the event loop itself (about 1-3 ms of file work each);
# larger creations make their files in a worker thread (see Broker.plan_topic).
INLINE_CREATE_PARTITIONS = 8
# Topics registered in metadata per event-loop slice when a large creation finishes.
_REGISTER_SLICE = 500


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass
class TopicCreation:
    """One validated topic creation in flight (Broker.plan_topic -> create_topics)."""

    record: dict  # the metadata record that creates it, applied once its logs exist
    log_config: LogConfig | None = None
    logs: list[PartitionLog] = dataclasses.field(default_factory=list)
    error: KafkaError | None = None  # its logs could not be created: not in metadata

    @property
    def name(self) -> str:
        return self.record["name"]

    @property
    def partitions(self) -> int:
        return self.record["partitions"]

    @property
    def configs(self) -> dict[str, str]:
        return self.record["configs"]

    @property
    def topic_id(self) -> uuid.UUID:
        return uuid.UUID(hex=self.record["topic_id"])


class Broker:
    def __init__(self, config: BrokerConfig, *, time_ms: Callable[[], int] = _wall_ms) -> None:
        self.config = config
        self.time_ms = time_ms
        self.node_id = config.node_id
        self.log_dir = os.path.abspath(config.log_dirs[0])
        self.metadata = ClusterMetadata()
        self.resolver = ConfigResolver(config, self.metadata)
        self.store: MetadataStore | None = None
        self.logs: LogManager | None = None
        self.flusher: FlushScheduler | None = None
        self.groups: GroupCoordinator | None = None
        self.shares: SharePartitionManager | None = None
        self.handlers = load_handlers()
        self.fetch_sessions = FetchSessionCache(
            config.int("max.incremental.fetch.session.cache.slots"), time_ms)
        self.connection_quotas = ConnectionQuotas(config)
        self.connection_registry = ConnectionRegistry(self.connection_quotas)
        self.connection_registry.on_closed(self._connection_closed)
        self.connections: set[ServerConnection] = self.connection_registry.connections
        self.response_memory = ResponseMemoryPool(config.int("queued.max.response.bytes"))
        self.listener_servers: list[ListenerServer] = []
        self._waiters: WaitList = {}
        self._tasks: list[asyncio.Task] = []
        self._store_sync: asyncio.Future | None = None  # the group-commit task (fsyncs)
        self._store_sync_next: asyncio.Future | None = None  # waiters of the next fsync
        self._creating: dict[str, asyncio.Future] = {}  # topic creations in a worker thread
        self._growing: set[str] = set()  # topics whose new partitions are being created
        self._pid_next = 0
        self._pid_block_end = 0
        self._started = False

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Load everything and listen; or fail with one clear ``OSError`` (start-up must fail
        loudly or serve: never log "started" without being able to answer)."""
        try:
            await self._start()
        except OSError as exc:
            await self._abort_start()
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
                raise OSError(exc.errno, f"{exc.strerror} (RLIMIT_NOFILE is {soft}; raise "
                              "`ulimit -n` or lower log.max.open.files)", exc.filename) from None
            raise

    async def _abort_start(self) -> None:
        """Give back what a failed start took (listening sockets, tasks, the data dir lock);
        best effort: the failure being reported matters more than any error here."""
        steps = [srv.stop() for srv in self.listener_servers]
        steps += [part.stop() for part in (self.shares, self.groups) if part is not None]
        if self.flusher is not None:
            steps.append(self.flusher.close())
        for step in steps:
            try:
                await step
            except Exception:  # noqa: BLE001
                log.debug("while aborting start-up", exc_info=True)
        self.listener_servers.clear()
        if self.logs is not None:
            self.logs.abandon()

    def _check_fd_headroom(self) -> None:
        """After loading: enough descriptors must be left to accept connections, or clients
        would see a broker that listens and never answers (accept fails with EMFILE)."""
        try:
            used = len(os.listdir("/proc/self/fd"))
        except OSError:
            return  # not Linux: nothing cheap to count with
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft != resource.RLIM_INFINITY and soft - used < MIN_FREE_FDS_AT_START:
            raise OSError(errno.EMFILE, f"only {soft - used} file descriptors are left after "
                          f"loading ({used} in use); at least {MIN_FREE_FDS_AT_START} are needed "
                          "to serve connections")

    async def _start(self) -> None:
        t0 = time.monotonic()
        # The log dir's .lock comes first: a second broker on the same dir must stop before it
        # opens (and recovers) the metadata log the first one is writing. The default log
        # config is set once the metadata (dynamic broker configs) is replayed.
        self.logs = LogManager([self.log_dir], time_ms=self.time_ms)
        self.store = MetadataStore(self.log_dir)
        for offset, rec in self.store.replay():
            try:
                self.metadata.apply(rec)
            except (KeyError, ValueError, TypeError) as e:
                raise self.store.error(
                    offset, f"cannot apply {rec.get('type')!r} record ({e!r})") from None
        for rec in self.metadata.skipped:
            log.warning("metadata log: skipped %s record for %s: a topic named %s cannot exist "
                        "(created by an older version; its data shared the metadata log)",
                        rec["type"], rec.get("name") or rec.get("topic_id"),
                        "__cluster_metadata")
        cluster_id = self.config.raw("cluster.id")
        if self.metadata.cluster_id is None:
            cid = cluster_id or uuid_to_base64(uuid.uuid4())
            self.store.append(self.metadata.set_cluster_id(cid))
        elif cluster_id and cluster_id != self.metadata.cluster_id:
            raise RuntimeError(
                f"cluster.id {cluster_id} does not match {self.metadata.cluster_id} stored in "
                f"{self.log_dir}")
        self.logs.default_config = self.log_config_for(None)
        # After LogManager raised the soft RLIMIT_NOFILE: the derived bound follows it.
        pool = configure_open_files(self.config.int("log.max.open.files"))
        log.info("log.max.open.files: at most %d segment files open at once", pool.limit)
        self.logs.ensure_meta_properties(cluster_id=self.metadata.cluster_id, node_id=self.node_id)
        configs = {name: self.log_config_for(ti) for name, ti in self.metadata.topics.items()}
        self.logs.load_all(configs.get)
        for ti in self.metadata.topics.values():  # partitions with no data dir yet
            for p in range(ti.partitions):
                self.logs.get_or_create_log(ti.name, p, configs[ti.name], ti.topic_id)
        self.flusher = FlushScheduler(
            self.logs, interval_ms=self.config.int("log.flush.scheduler.interval.ms"),
            strict=self.config.bool("log.flush.strict"))
        self.flusher.start()
        self.groups = GroupCoordinator(self)
        await self.groups.start()
        # Share-group state is replayed before any client can connect; the coordinator then
        # tells the manager which share-partitions its groups have assigned.
        self.shares = SharePartitionManager(self)
        await self.shares.start()
        self.groups.add_share_listener(self.shares)
        self._check_fd_headroom()
        dispatcher = RequestDispatcher(self.handlers, services=self)
        limits = ChannelLimits.from_config(self.config)
        for listener in self.config.listeners:
            srv = ListenerServer(
                listener, registry=self.connection_registry, memory=self.response_memory,
                limits=limits, dispatcher=dispatcher, security_protocol=SecurityProtocol[
                    self.config.listener_security_protocol(listener.name)])
            await srv.start()
            self.listener_servers.append(srv)
        self._tasks.append(asyncio.ensure_future(idle_sweeper(
            self.connection_registry, self.config.int("connections.max.idle.ms"),
            self.config.int("socket.request.arrival.timeout.ms"))))
        self._tasks.append(asyncio.ensure_future(self._retention_loop()))
        self._tasks.append(asyncio.ensure_future(self._checkpoint_loop()))
        self._started = True
        log.info("snakka broker %d started in %.0f ms (cluster %s, %d topics, data in %s)",
                 self.node_id, (time.monotonic() - t0) * 1000, self.metadata.cluster_id,
                 len(self.metadata.topics), self.log_dir)

    async def stop(self) -> None:
        self._started = False  # closing connections below must not touch stopping parts
        for srv in self.listener_servers:
            await srv.stop()
        for conn in list(self.connections):
            conn.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        if self.shares is not None:
            await self.shares.stop()
        if self.groups is not None:
            await self.groups.stop()
        creating = set(self._creating.values())  # topic creations in a worker thread
        if creating:
            await asyncio.gather(*creating, return_exceptions=True)
        if self._store_sync is not None:
            await asyncio.gather(self._store_sync, return_exceptions=True)
        if self.flusher is not None:
            await self.flusher.close()
        if self.logs is not None:
            self.logs.close()
        if self.store is not None:
            self.store.close()
        self._started = False
        log.info("snakka broker %d stopped cleanly", self.node_id)

    # -- connections ---------------------------------------------------------------------
    def _connection_closed(self, conn: ServerConnection) -> None:
        """A registered connection closed (server.registry.ConnectionRegistry tells us)."""
        if self.shares is not None and self._started:
            # Kafka releases a member's records when its share session's connection goes.
            self.shares.on_connection_closed(conn)

    def advertised_endpoint(self, listener: Listener) -> tuple[str, int]:
        """host:port clients should use, for the listener they connected through."""
        for srv in self.listener_servers:
            if srv.listener.name == listener.name:
                port = srv.port
                break
        else:
            port = listener.port
        adv = None
        if self.config.raw("advertised.listeners"):
            for a in self.config.advertised_listeners:
                if a.name == listener.name:
                    adv = a
        if adv is not None:
            return adv.host or "localhost", adv.port or port
        host = listener.host
        if host in ("", "0.0.0.0", "::"):
            host = "localhost"
        return host, port

    @property
    def bound_port(self) -> int:
        return self.listener_servers[0].port

    # -- topics --------------------------------------------------------------------------
    def log_config_for(self, topic: TopicInfo | None) -> LogConfig:
        cfg = LogConfig.from_dict(self.resolver.effective_topic_config_map(topic))
        # A broker config the partition's producer state needs (not a topic config).
        return dataclasses.replace(cfg, producer_id_expiration_ms=int(
            self.resolver.broker_value("producer.id.expiration.ms")))

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        assert self.logs is not None
        return self.logs.get_log(topic, partition)

    async def commit_metadata(self, records: list[dict]) -> None:
        """Make applied metadata records durable (fsync off the loop) before answering."""
        assert self.store is not None
        self.store.append(records, sync=False)
        await self._sync_store()

    # Topic creation (CreateTopics, Metadata auto-creation, coordinators' internal topics).
    #
    # Order of work, so that metadata never names a topic whose logs do not exist: validate and
    # reserve the name (``plan_topic``), create every partition log, and only then apply the
    # topic records and append them to the metadata log, all topics of a request in one append
    # and one fsync. A topic whose logs cannot be created (EMFILE, ENOSPC, EACCES) gets
    # KAFKA_STORAGE_ERROR, its partial directories are removed, and it never reaches metadata.
    #
    # Small creations (at most INLINE_CREATE_PARTITIONS partitions in the request) run on the
    # loop at once, so a pipelined Produce right after them sees the topic, as before. Larger
    # ones create their files in a worker thread: the loop keeps serving other clients. Their
    # names stay reserved meanwhile (a second creation is TOPIC_ALREADY_EXISTS; Metadata
    # auto-creating a name in flight waits for it).

    def plan_topic(self, name: str, partitions: int, configs: dict[str, str | None], *,
                   topic_id: uuid.UUID | None = None, internal: bool = False) -> TopicCreation:
        """Validate one topic creation and reserve its name (KafkaError if invalid). The plan
        must then go through :meth:`create_topics` or :meth:`create_topics_inline`."""
        self.metadata.check_create_topic(name, partitions, 1, configs, internal=internal)
        self.metadata.reserve(name)
        return TopicCreation(self.metadata.topic_record(name, partitions, configs, topic_id))

    def create_topics_inline(self, plans: list[TopicCreation]) -> list[dict]:
        """Create planned topics now, on the loop (small creations only); returns the applied
        records, which the caller commits (``commit_metadata`` / ``commit_metadata_soon``)."""
        cache: dict[frozenset, LogConfig] = {}
        for plan in plans:
            self._resolve_log_config(plan, cache)
        self._create_logs(plans)
        records = self._register(plans)
        self._announce(plans)
        return records

    def creation_is_small(self, plans: list[TopicCreation]) -> bool:
        return self.creates_inline(sum(p.partitions for p in plans))

    @staticmethod
    def creates_inline(partitions: int) -> bool:
        """Whether a creation of this many partitions happens on the loop, at once."""
        return partitions <= INLINE_CREATE_PARTITIONS

    def create_topics(self, plans: list[TopicCreation]) -> asyncio.Future:
        """Create planned topics and make them durable (one append, one fsync); each plan's
        ``error`` says if its topic failed. A small creation is done (in metadata) when this
        returns, so requests after it see the topics; the future resolves once durable. A
        large one runs in the background. Either way the work runs to the end even if the
        caller is cancelled (a client disconnecting must not leave names reserved or logs half
        made): await it through ``asyncio.shield``."""
        if self.creation_is_small(plans):
            assert self.store is not None
            self.store.append(self.create_topics_inline(plans), sync=False)
            return self._metadata_synced()
        done = asyncio.get_running_loop().create_future()
        for plan in plans:
            self._creating[plan.name] = done
        return asyncio.ensure_future(self._create_topics_off_loop(plans, done))

    async def _create_topics_off_loop(self, plans: list[TopicCreation],
                                      done: asyncio.Future) -> None:
        assert self.store is not None
        slicer = TimeSlice()
        try:
            cache: dict[frozenset, LogConfig] = {}
            for plan in plans:  # on the loop (it reads configs the loop changes), in slices
                self._resolve_log_config(plan, cache)
                await slicer.tick()
            await asyncio.get_running_loop().run_in_executor(None, self._create_logs, plans)
            # Register, apply and append in slices (each slice's records are appended right
            # after they are applied, so the log keeps the order of changes); one fsync below.
            for i in range(0, len(plans), _REGISTER_SLICE):
                self.store.append(self._register(plans[i:i + _REGISTER_SLICE]), sync=False)
                await slicer.tick()
            self._announce(plans)
        finally:
            for plan in plans:
                self.metadata.release(plan.name)
                if self._creating.get(plan.name) is done:
                    del self._creating[plan.name]
            if not done.done():
                done.set_result(None)
        await self._sync_store()

    async def wait_for_creation(self, name: str) -> None:
        """Wait until an in-flight creation of ``name`` (by another request) has finished."""
        fut = self._creating.get(name)
        if fut is not None:
            await asyncio.shield(fut)

    def _resolve_log_config(self, plan: TopicCreation,
                            cache: dict[frozenset, LogConfig]) -> None:
        # Resolving a topic's configs walks every topic config (~0.5 ms): once per distinct
        # set of overrides in the request (auto-created topics all share the broker defaults).
        key = frozenset(plan.configs.items())
        cfg = cache.get(key)
        if cfg is None:
            cfg = cache[key] = self.log_config_for(
                TopicInfo(plan.name, plan.topic_id, plan.partitions, plan.configs))
        plan.log_config = cfg

    def _create_logs(self, plans: list[TopicCreation]) -> None:
        """Create every planned partition's files (on the loop or in a worker thread: touches
        only the new directories). A topic that fails is rolled back and gets ``error``."""
        for plan in plans:
            try:
                plan.logs = self._make_logs(plan.name, range(plan.partitions), plan.log_config,
                                            plan.topic_id)
            except KafkaError as e:
                plan.error = e

    def _make_logs(self, name: str, partitions: range, cfg: LogConfig | None,
                   topic_id: uuid.UUID) -> list[PartitionLog]:
        """Create these partitions' logs (unregistered; any thread). If one fails (EMFILE,
        ENOSPC, EACCES, ...) those made are removed and KAFKA_STORAGE_ERROR is raised."""
        assert self.logs is not None
        made: list[PartitionLog] = []
        try:
            for p in partitions:
                made.append(self.logs.open_new_log(name, p, cfg, topic_id))
        except OSError as e:
            for pl in made:
                pl.delete()
            failed = partitions[len(made)]
            # The partition that failed may have left a directory behind.
            shutil.rmtree(os.path.join(self.log_dir, f"{name}-{failed}"), ignore_errors=True)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"Cannot create the log of partition {name}-{failed}: {e}") from None
        return made

    def _register(self, plans: list[TopicCreation]) -> list[dict]:
        """On the loop, after the logs exist: register them and apply the records (returned for
        the caller to append); release the names."""
        assert self.logs is not None
        records = []
        for plan in plans:
            self.metadata.release(plan.name)
            if plan.error is not None:
                continue
            for pl in plan.logs:
                self.logs.add_log(pl)
            records.append(plan.record)
        return self.metadata.apply_all(records)

    def _announce(self, plans: list[TopicCreation]) -> None:
        """Log the outcome and tell the groups, once per request (each pass walks every topic
        and group: once per topic made creating N topics quadratic)."""
        created = [p for p in plans if p.error is None]
        for plan in plans:
            if plan.error is not None:
                log.error("cannot create topic %s: %s", plan.name, plan.error.message)
        if len(created) <= 10:
            for plan in created:
                log.info("created topic %s (id %s, %d partitions%s)", plan.name,
                         uuid_to_base64(plan.topic_id), plan.partitions,
                         f", configs {plan.configs}" if plan.configs else "")
        else:
            log.info("created %d topics (%d partitions) in one request", len(created),
                     sum(p.partitions for p in created))
        if self.groups is not None and any(p.name not in RESERVED_TOPICS for p in created):
            # Internal topics are never subscribed to; skipping them also keeps a coordinator
            # that creates its topic lazily (share-group state) from re-entering the groups.
            self.groups.on_metadata_change()

    def create_topic_now(self, name: str, partitions: int, configs: dict[str, str | None],
                         topic_id: uuid.UUID | None = None) -> tuple[TopicInfo, list[dict]]:
        """Create a coordinator's internal topic now, on the loop; returns (topic, records to
        commit). Raises KafkaError if its logs cannot be created."""
        plan = self.plan_topic(name, partitions, configs, topic_id=topic_id, internal=True)
        recs = self.create_topics_inline([plan])
        if plan.error is not None:
            raise plan.error
        return self.metadata.topics[name], recs

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str | None],
                           topic_id: uuid.UUID | None = None) -> TopicInfo:
        """Create one topic as a client would (reserved names refused) and make it durable."""
        plan = self.plan_topic(name, partitions, configs, topic_id=topic_id)
        await asyncio.shield(self.create_topics([plan]))
        if plan.error is not None:
            raise plan.error
        return self.metadata.topics[name]

    def auto_create_plan(self, name: str) -> TopicCreation:
        """Plan a Metadata-triggered creation with broker defaults (auto.create.topics.enable)."""
        n = int(self.resolver.broker_value("num.partitions") or 1)
        return self.plan_topic(name, n, {})

    def commit_metadata_soon(self, records: list[dict]) -> None:
        """Append metadata records now and fsync them in the background (a group commit: a
        burst of changes shares fsyncs); ``sync_metadata`` waits for durability when a caller
        needs it."""
        assert self.store is not None
        self.store.append(records, sync=False)
        self._metadata_synced()

    async def sync_metadata(self) -> None:
        """fsync the metadata log (everything appended so far)."""
        await asyncio.shield(self._metadata_synced())

    def _metadata_synced(self) -> asyncio.Future:
        """A future that resolves once everything appended so far is fsynced. Group commit:
        one fsync runs at a time, and every caller that arrives meanwhile shares the next."""
        if self._store_sync_next is None:
            self._store_sync_next = asyncio.get_running_loop().create_future()
            if self._store_sync is None or self._store_sync.done():
                self._store_sync = asyncio.ensure_future(self._store_sync_loop())
        return self._store_sync_next

    async def _store_sync_loop(self) -> None:
        assert self.store is not None
        loop = asyncio.get_running_loop()
        while self._store_sync_next is not None:
            fut, self._store_sync_next = self._store_sync_next, None
            try:
                await loop.run_in_executor(None, self.store.sync)
            except Exception as e:  # noqa: BLE001 - handed to every waiter
                if not fut.done():
                    fut.set_exception(e)
                    fut.exception()  # retrieved: a waiter-less failure is not "never retrieved"
            else:
                if not fut.done():
                    fut.set_result(None)

    async def _sync_store(self) -> None:
        await asyncio.shield(self._metadata_synced())

    async def delete_topic(self, name: str) -> None:
        if name not in self.metadata.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             "This server does not host this topic-partition.")
        await self.delete_topics([name])

    async def delete_topics(self, names: list[str]) -> None:
        """Delete existing topics (the caller checked): they leave metadata at once, in one
        append and one fsync for the whole request; their logs are detached and their
        directories removed in one worker-thread job; groups and share state learn of it once.
        The per-topic clean-up yields to the loop in slices (thousands of topics)."""
        assert self.logs is not None
        gone = [self.metadata.topics[n] for n in dict.fromkeys(names) if n in self.metadata.topics]
        if not gone:
            return
        recs: list[dict] = []
        for ti in gone:
            recs += self.metadata.delete_topic(ti.name)
        await self.commit_metadata(recs)
        # Detach the logs now (nothing can reach them: the topics left the metadata above) and
        # remove their directories on a worker thread: rmtree of a big topic would block the loop.
        slicer = TimeSlice()
        doomed: list[PartitionLog] = []
        for ti in gone:
            self.fetch_sessions.remove_topic(ti.name)
            self.fetch_sessions.remove_topic(ti.topic_id)
            for p in range(ti.partitions):
                pl = self.logs.detach_log(ti.name, p)
                if pl is not None:
                    doomed.append(pl)
                self._wake((ti.name, p))
            if self.shares is not None:
                self.shares.on_topic_deleted(ti.topic_id)
            await slicer.tick()
        if doomed:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: [pl.delete() for pl in doomed])
        if self.groups is not None:
            await self.groups.on_topics_deleted([ti.name for ti in gone], slicer.tick)
        for ti in gone[:10]:
            log.info("deleted topic %s (id %s)", ti.name, uuid_to_base64(ti.topic_id))
        if len(gone) > 10:
            log.info("deleted %d topics in one request", len(gone))

    async def create_partitions(self, name: str, count: int) -> None:
        """Grow a topic: the new partitions' logs first (in a worker thread when many), then
        the metadata record (one fsync). A log that cannot be created fails the request with
        KAFKA_STORAGE_ERROR and leaves the partition count as it was."""
        assert self.logs is not None
        ti = self.metadata.check_create_partitions(name, count)
        old = ti.partitions
        cfg = self.log_config_for(ti)
        if name in self._growing:
            # Two requests would create the same partition directories.
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Topic {name} is already gaining partitions.")
        self._growing.add(name)
        try:
            def make() -> list[PartitionLog]:
                return self._make_logs(name, range(old, count), cfg, ti.topic_id)
            if self.creates_inline(count - old):
                made = make()
            else:
                made = await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, make))
            if self.metadata.topics.get(name) is not ti:  # deleted meanwhile
                for pl in made:
                    pl.delete()
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"The topic '{name}' does not exist.")
            for pl in made:
                self.logs.add_log(pl)
            recs = self.metadata.create_partitions(name, count)
        finally:
            self._growing.discard(name)
        await self.commit_metadata(recs)
        if self.groups is not None:
            self.groups.on_metadata_change()

    def reconfigure_topics(self, names: Iterable[str] | None = None) -> None:
        """Push resolved configs to the partition logs after a config change."""
        assert self.logs is not None
        topics = (self.metadata.topics.values() if names is None
                  else [self.metadata.topics[n] for n in names if n in self.metadata.topics])
        for ti in topics:
            cfg = self.log_config_for(ti)
            for p in range(ti.partitions):
                pl = self.logs.get_log(ti.name, p)
                if pl is not None:
                    pl.set_config(cfg)

    # -- producer ids --------------------------------------------------------------------
    async def next_producer_id(self) -> int:
        if self._pid_next >= self._pid_block_end:
            recs, start = self.metadata.allocate_producer_id_block()
            await self.commit_metadata(recs)
            self._pid_next, self._pid_block_end = start, self.metadata.next_producer_id_block
        pid = self._pid_next
        self._pid_next += 1
        return pid

    # -- long-poll wake-ups --------------------------------------------------------------
    def notify_append(self, topic: str, partition: int) -> None:
        self._wake((topic, partition))

    def _wake(self, key: tuple[str, int]) -> None:
        wake(self._waiters, key)

    @property
    def append_waiters(self) -> WaitList:
        """The wait list appends wake: (topic, partition) -> parked futures (util.waiters)."""
        return self._waiters

    async def wait_for_append(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> bool:
        """Wait until any of the partitions gets an append, or the timeout. True if woken."""
        return await wait_any([(self._waiters, keys)], timeout_s)

    # -- background tasks ----------------------------------------------------------------
    async def _retention_loop(self) -> None:
        assert self.logs is not None
        period = self.config.int("log.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(period)
            try:
                self.enforce_retention()
            except Exception:
                log.exception("retention check failed")

    def enforce_retention(self) -> int:
        assert self.logs is not None
        deleted = self.logs.enforce_retention_all(self.time_ms())
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)
            if self.shares is not None:
                self.shares.on_log_start_moved()
        return deleted

    async def _checkpoint_loop(self) -> None:
        assert self.logs is not None
        period = self.config.int("log.flush.offset.checkpoint.interval.ms") / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            try:
                await loop.run_in_executor(None, self.logs.checkpoint)
            except Exception:
                log.exception("checkpoint failed")
