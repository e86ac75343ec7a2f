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
    ClusterMetadata,
    TopicInfo,
    uuid_to_base64,
)
from snakka.metadata.store import MetadataStore
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.server.listener import ListenerServer, idle_sweeper
from snakka.server.memory import ResponseMemoryPool
from snakka.server.quotas import ConnectionQuotas
from snakka.share.manager import SharePartitionManager
from snakka.storage import LogConfig, LogManager, PartitionLog
from snakka.storage.files import configure as configure_open_files
from snakka.storage.flush import FlushScheduler
from snakka.util.waiters import WaitList, wait_any, wake

if TYPE_CHECKING:
    from snakka.config import Listener
    from snakka.server.connection import KafkaConnection

log = logging.getLogger("snakka.broker")

# Descriptors that must be free once everything is loaded, or start-up fails (loudly) instead of
# listening without being able to accept.
MIN_FREE_FDS_AT_START = 32


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


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
        self.connections: set[KafkaConnection] = set()
        self.connection_quotas = ConnectionQuotas(config)
        self.response_memory = ResponseMemoryPool(config.int("queued.max.response.bytes"))
        self.listener_servers: list[ListenerServer] = []
        self._waiters: WaitList = {}
        self._tasks: list[asyncio.Task] = []
        self._store_sync: asyncio.Future | None = None
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
        for rec in self.store.replay():
            self.metadata.apply(rec)
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
        for listener in self.config.listeners:
            srv = ListenerServer(self, listener)
            await srv.start()
            self.listener_servers.append(srv)
        self._tasks.append(asyncio.ensure_future(idle_sweeper(self)))
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
    def register_connection(self, conn: KafkaConnection) -> bool:
        """Admit a new connection (counted per IP) or refuse it (the caller aborts it)."""
        if not self.connection_quotas.inc(conn.peer_ip):
            return False
        self.connections.add(conn)
        return True

    def unregister_connection(self, conn: KafkaConnection) -> None:
        if conn not in self.connections:
            return  # refused at registration: never counted
        self.connections.discard(conn)
        self.connection_quotas.dec(conn.peer_ip)
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

    def create_topic_now(self, name: str, partitions: int, configs: dict[str, str | None],
                         topic_id: uuid.UUID | None = None) -> tuple[TopicInfo, list[dict]]:
        """Create a topic in metadata and storage; returns (topic, records to commit)."""
        assert self.logs is not None
        recs = self.metadata.create_topic(name, partitions, configs, topic_id)
        ti = self.metadata.topics[name]
        cfg = self.log_config_for(ti)
        for p in range(partitions):
            self.logs.get_or_create_log(name, p, cfg, ti.topic_id)
        log.info("created topic %s (id %s, %d partitions%s)", name, uuid_to_base64(ti.topic_id),
                 partitions, f", configs {ti.configs}" if ti.configs else "")
        if self.groups is not None and not ti.is_internal:
            # Internal topics are never subscribed to; skipping them also keeps a coordinator
            # that creates its topic lazily (share-group state) from re-entering the groups.
            self.groups.on_metadata_change()
        return ti, recs

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str | None],
                           topic_id: uuid.UUID | None = None) -> TopicInfo:
        ti, recs = self.create_topic_now(name, partitions, configs, topic_id)
        await self.commit_metadata(recs)
        return ti

    def auto_create_topic(self, name: str) -> TopicInfo:
        """Metadata-triggered creation with broker defaults (auto.create.topics.enable)."""
        n = int(self.resolver.broker_value("num.partitions") or 1)
        ti, recs = self.create_topic_now(name, n, {})
        self.commit_metadata_soon(recs)
        return ti

    def commit_metadata_soon(self, records: list[dict]) -> None:
        """Append metadata records now and fsync them in the background (one sync in flight at
        a time, so a burst of creations costs one fsync, not one each); ``sync_metadata``
        waits for durability when a caller needs it."""
        assert self.store is not None
        self.store.append(records, sync=False)
        if self._store_sync is None or self._store_sync.done():
            self._store_sync = asyncio.ensure_future(self._sync_store())

    async def sync_metadata(self) -> None:
        """fsync the metadata log (everything appended so far)."""
        await self._sync_store()

    async def _sync_store(self) -> None:
        assert self.store is not None
        await asyncio.get_running_loop().run_in_executor(None, self.store.sync)

    async def delete_topic(self, name: str) -> None:
        assert self.logs is not None
        ti = self.metadata.topics.get(name)
        if ti is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             "This server does not host this topic-partition.")
        recs = self.metadata.delete_topic(name)
        await self.commit_metadata(recs)
        self.fetch_sessions.remove_topic(name)
        self.fetch_sessions.remove_topic(ti.topic_id)
        # Detach the logs now (nothing can reach them: the topic left the metadata above) and
        # remove their directories on a worker thread: rmtree of a big topic would block the loop.
        doomed = [pl for p in range(ti.partitions)
                  if (pl := self.logs.detach_log(name, p)) is not None]
        for p in range(ti.partitions):
            self._wake((name, p))
        if doomed:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: [pl.delete() for pl in doomed])
        if self.groups is not None:
            self.groups.on_topic_deleted(name)
        if self.shares is not None:
            self.shares.on_topic_deleted(ti.topic_id)
        log.info("deleted topic %s (id %s)", name, uuid_to_base64(ti.topic_id))

    async def create_partitions(self, name: str, count: int) -> None:
        assert self.logs is not None
        old = self.metadata.topics[name].partitions
        recs = self.metadata.create_partitions(name, count)
        ti = self.metadata.topics[name]
        cfg = self.log_config_for(ti)
        for p in range(old, count):
            self.logs.get_or_create_log(name, p, cfg, ti.topic_id)
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
