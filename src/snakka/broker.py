"""The broker: wiring only. It builds the components, starts them in order, stops them.

Nothing calls back into this object: each component gets the collaborators it needs when it is
built, and components below never know the ones above (docs/architecture.md). The order:

1. the controller loads the metadata log (``controller``: topics, configs, producer ids),
2. the log manager recovers the partition logs; the replica manager serves them
   (``replica.manager``: append, read, leadership, durability, long-poll wake-ups),
3. the group coordinator and the share-partition manager replay their internal topics, and
   are registered as listeners of metadata changes (topics created / deleted), of retention,
   and of each other (share-group assignments),
4. the listeners open last, with the request handlers and the services bundle they may use
   (``handlers.services.Services``); connections are admitted by ``server.quotas``
   (max.connections, max.connections.per.ip) and bounded by the broker-wide response budget
   (``server.memory``, queued.max.response.bytes),
5. background tasks: idle-connection reaping, retention, recovery-point checkpoints;
6. the Prometheus metrics endpoint when ``metrics.port`` is set (``server.metrics``: request
   counts from the connections, everything else read from the parts above at scrape time);
7. the web console when ``console.port`` is set (``console``: pages read the parts above, its
   actions are requests answered by the same handlers; its charts sample the request counts).

Everything runs on one asyncio event loop (uvloop when available). fsync and directory removal
run in worker threads so they never block the loop.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import gc
import logging
import os
import resource
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from snakka.config import BROKER_CONFIGS, BrokerConfig, ignored_dynamic_broker_config
from snakka.controller import Controller, MetadataListener
from snakka.fetch_sessions import FetchSessionCache
from snakka.groups.coordinator import GroupCoordinator
from snakka.handlers import load_handlers
from snakka.handlers.services import Services
from snakka.limits import MIN_FREE_FDS_AT_START
from snakka.metadata.client_quotas import QuotaManagers
from snakka.metadata.configs import ConfigResolver
from snakka.metadata.core import RESOURCE_BROKER, ClusterMetadata, TopicInfo
from snakka.protocol.api_keys import ApiKey
from snakka.remote.manager import RemoteLogManager
from snakka.remote.quota import RemoteFetchQuota
from snakka.replica.manager import ReplicaManager
from snakka.security.acl_authorizer import create_authorizer
from snakka.security.authorizer import Authorizer
from snakka.security.principal import SecurityProtocol
from snakka.security.sasl.config import SaslServerFactory
from snakka.security.ssl import ListenerTls
from snakka.security.ssl_reload import SslReconfiguration
from snakka.server.channel import ChannelLimits
from snakka.server.dispatch import RequestDispatcher
from snakka.server.listener import ListenerServer, idle_sweeper
from snakka.server.memory import ResponseMemoryPool
from snakka.server.metrics import BrokerCollector, BrokerMetrics, MetricsServer
from snakka.server.quotas import ConnectionQuotas, overrides_need_lookup, resolve_overrides
from snakka.server.registry import ConnectionRegistry
from snakka.share.manager import SharePartitionManager
from snakka.storage import LogManager
from snakka.storage.cleaner.cleaner import RunOnOwner
from snakka.storage.cleaner.manager import CleanerConfig, LogCleaner
from snakka.storage.files import configure as configure_open_files
from snakka.storage.flush import FlushScheduler
from snakka.telemetry.manager import ClientMetricsManager
from snakka.telemetry.store import ClientMetricsStore
from snakka.txn.manager import TransactionManager
from snakka.util.waiters import cancel_and_wait

if TYPE_CHECKING:
    from snakka.config import Listener
    from snakka.console.server import ConsoleServer
    from snakka.server.connection import ServerConnection

log = logging.getLogger("snakka.broker")
_T = TypeVar("_T")



def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _monotonic_ms() -> int:
    """The client quotas' clock (rates must not jump with the wall clock)."""
    return time.monotonic_ns() // 1_000_000


class _ConnectionLimits(MetadataListener):
    """max.connections, max.connections.per.ip (+ overrides) and max.connection.creation.rate
    as dynamic broker configs (Kafka's SocketServer.reconfigure): the values in force (dynamic
    per node, dynamic default, static) go to the connection quotas at start and after every
    broker config change, and the listeners re-check whether they must pace their accepts.

    Override host names are resolved in a worker thread (DNS may block): the numeric limits
    apply at once, the overrides when resolved; a later change supersedes a lookup still under
    way (``_generation``), so changes never apply out of order."""

    def __init__(self, quotas: ConnectionQuotas, resolver: ConfigResolver,
                 listeners: list[ListenerServer]) -> None:
        self.quotas = quotas
        self.resolver = resolver
        self.listeners = listeners  # the broker's list, filled as the listeners start
        self._generation = 0

    def on_broker_configs_changed(self) -> None:
        r = self.resolver
        text = r.broker_value("max.connections.per.ip.overrides") or ""
        self._generation += 1
        generation = self._generation
        lookup = overrides_need_lookup(text)
        self.quotas.reconfigure(
            max_connections=r.broker_int("max.connections"),
            max_per_ip=r.broker_int("max.connections.per.ip"),
            per_ip_overrides=None if lookup else resolve_overrides(text),
            broker_rate_limit=r.broker_int("max.connection.creation.rate"))
        for srv in self.listeners:
            srv.update_pacing()
        if not lookup:
            return

        def apply(fut: asyncio.Future[dict[str, int]]) -> None:
            if generation == self._generation and not fut.cancelled() \
                    and fut.exception() is None:
                self.quotas.max_per_ip_overrides = fut.result()

        fut = asyncio.get_running_loop().run_in_executor(None, resolve_overrides, text)
        fut.add_done_callback(apply)


def _cleaner_config(resolver: ConfigResolver) -> CleanerConfig:
    """The log.cleaner.* values in force (dynamic per node, dynamic default, static)."""
    return CleanerConfig.from_values(
        lambda name: BROKER_CONFIGS[name].value(resolver.broker_value(name)))


class _CleanerReconfigure(MetadataListener):
    """Dynamic log.cleaner.* values to the log cleaner (Kafka's LogCleaner.reconfigure)."""

    def __init__(self, cleaner: LogCleaner, resolver: ConfigResolver) -> None:
        self.cleaner = cleaner
        self.resolver = resolver

    def on_broker_configs_changed(self) -> None:
        self.cleaner.reconfigure(_cleaner_config(self.resolver))


class _RemoteQuotas(MetadataListener):
    """Dynamic remote.log.manager.copy.max.bytes.per.second and
    remote.log.manager.fetch.max.bytes.per.second to tiered storage's copier and reader
    (Kafka's DynamicRemoteLogConfig)."""

    def __init__(self, remote: RemoteLogManager, fetch_quota: RemoteFetchQuota,
                 resolver: ConfigResolver) -> None:
        self.remote = remote
        self.fetch_quota = fetch_quota
        self.resolver = resolver

    def on_broker_configs_changed(self) -> None:
        r = self.resolver
        self.remote.set_copy_rate(r.broker_int("remote.log.manager.copy.max.bytes.per.second"))
        self.fetch_quota.set_quota(r.broker_int("remote.log.manager.fetch.max.bytes.per.second"))


class _FetchSessionsForget(MetadataListener):
    """Fetch sessions forget a deleted topic (by name and by id)."""

    def __init__(self, sessions: FetchSessionCache) -> None:
        self.sessions = sessions

    def on_topic_deleted(self, topic: TopicInfo) -> None:
        self.sessions.remove_topic(topic.name)
        self.sessions.remove_topic(topic.topic_id)


class Broker:
    def __init__(self, config: BrokerConfig, *, time_ms: Callable[[], int] = _wall_ms,
                 authorizer: Authorizer | None = None,
                 metrics_port_fallback: bool = False,
                 console_port_fallback: bool = False) -> None:
        self.config = config
        # metrics.port is a default the user did not choose (``snakka serve``): when it is
        # taken, serve the metrics on an ephemeral port instead of failing the start.
        self._metrics_port_fallback = metrics_port_fallback
        self.metrics: BrokerMetrics | None = None
        self.metrics_server: MetricsServer | None = None
        # The same for console.port (``snakka serve``'s default 9021).
        self._console_port_fallback = console_port_fallback
        self.console: ConsoleServer | None = None
        # Seconds each coordinator took to replay its internal topic at start (metrics).
        self.coordinator_load_seconds: dict[str, float] = {}
        # The authorizer every request is checked with (dispatch and the handlers); None: allow
        # everything, as a Kafka broker without ``authorizer.class.name``. Tests inject one here
        # (``EmbeddedBroker(authorizer=...)``); it must be set before start().
        self.authorizer: Authorizer | None = authorizer
        self.time_ms = time_ms
        self.node_id = config.node_id
        self.log_dir = os.path.abspath(config.log_dirs[0])
        self.controller = Controller(config, self.log_dir)
        # SASL listeners' mechanisms: a ConfigError here (GSSAPI, PLAIN without users, an
        # unreadable JWKS) stops the start before anything is opened.
        self.sasl = self._sasl_factory()
        self.ssl_reconfiguration: SslReconfiguration | None = None  # set in start
        self.logs: LogManager | None = None
        self.flusher: FlushScheduler | None = None
        self.replicas: ReplicaManager | None = None
        self.groups: GroupCoordinator | None = None
        self.shares: SharePartitionManager | None = None
        self.txns: TransactionManager | None = None
        self.remote: RemoteLogManager | None = None  # tiered storage (KIP-405), when enabled
        self.remote_fetch_quota: RemoteFetchQuota | None = None  # its fetch quota (KIP-956)
        self.log_cleaner: LogCleaner | None = None  # compaction, unless log.cleaner.enable=false
        self.services: Services | None = None
        self.handlers = load_handlers()
        # KIP-714: the pushed client metrics' receiver is the Prometheus endpoint. Without it
        # the telemetry APIs are neither served nor advertised (Kafka advertises them only
        # with a ClientTelemetry receiver configured).
        self.client_metrics: ClientMetricsManager | None = None
        self.client_metrics_store: ClientMetricsStore | None = None
        if config.int("metrics.port") >= 0:
            self.client_metrics = ClientMetricsManager(
                telemetry_max_bytes=config.int("telemetry.max.bytes"), clock_ms=_monotonic_ms)
            self.client_metrics_store = ClientMetricsStore(
                retention_ms=config.int("snakka.client.metrics.retention.ms"),
                max_series=config.int("snakka.client.metrics.max.series"),
                clock_ms=_monotonic_ms)
        else:
            for key in (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY):
                self.handlers.pop(int(key), None)
        self.fetch_sessions = FetchSessionCache(
            config.int("max.incremental.fetch.session.cache.slots"), time_ms)
        self.connection_quotas = ConnectionQuotas(config)
        self.connection_registry = ConnectionRegistry(self.connection_quotas)
        self.connection_registry.on_closed(self._connection_closed)
        self.connections: set[ServerConnection] = self.connection_registry.connections
        self.response_memory = ResponseMemoryPool(config.int("queued.max.response.bytes"))
        self.listener_servers: list[ListenerServer] = []
        self._tasks: list[asyncio.Task] = []
        self._started = False

    @property
    def metadata(self) -> ClusterMetadata:
        return self.controller.metadata

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Load everything and listen; or fail with one clear ``OSError`` (start-up must fail
        loudly or serve: never log "started" without being able to answer)."""
        # No garbage collection while loading: start-up allocates a few objects per
        # partition and keeps nearly all of them, so every collection would only re-scan
        # them (with 8,000 partitions the collections cost ~30 % of the load). Collections
        # resume at the end (the CLI freezes what start-up made, see cli._serve).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            await self._start()
        except OSError as exc:
            await self._abort_start()
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
                raise OSError(exc.errno, f"{exc.strerror} (RLIMIT_NOFILE is {soft}; raise "
                              "`ulimit -n` or lower log.max.open.files)", exc.filename) from None
            raise
        finally:
            if gc_was_enabled:
                gc.enable()

    def _sasl_factory(self) -> SaslServerFactory | None:
        """The SASL listeners' mechanisms (SCRAM credentials from the metadata log)."""
        if not any(self.config.listener_security_protocol(ln.name).startswith("SASL_")
                   for ln in self.config.listeners):
            return None
        scram = self.controller.metadata.scram
        return SaslServerFactory(self.config, scram.get)

    async def _abort_start(self) -> None:
        """Give back what a failed start took (listening sockets, tasks, the data dir lock);
        best effort: the failure being reported matters more than any error here."""
        steps: list[Awaitable[None]] = [srv.stop() for srv in self.listener_servers]
        if self.console is not None:
            steps.append(self.console.stop())
            self.console = None
        if self.metrics_server is not None:
            steps.append(self.metrics_server.stop())
            self.metrics_server = None
        steps += [part.stop() for part in (self.remote, self.txns, self.shares, self.groups)
                  if part is not None]
        if self.log_cleaner is not None:
            # Its thread would outlive the loop it reports to (a pass then fails on a closed
            # loop, logging from a thread nobody owns; a CI run saw it after a listener
            # failed to bind). Off the loop, as stop() does.
            steps.append(asyncio.get_running_loop().run_in_executor(
                None, self.log_cleaner.shutdown))
            self.log_cleaner = None
        if self.flusher is not None:
            steps.append(self.flusher.close())
        for step in steps:
            try:
                await step
            except Exception:  # noqa: BLE001
                log.debug("while aborting start-up", exc_info=True)
        self.listener_servers.clear()
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        self.controller.close_store()
        if self.logs is not None:
            self.logs.abandon()
        if self.sasl is not None:
            self.sasl.close()

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
        config = self.config
        # TLS contexts first (they read the key and trust stores): a bad one stops start-up,
        # naming the config, before anything is loaded or locked.
        listener_tls = self._listener_tls()
        controller = self.controller
        # The log dir's .lock comes first: a second broker on the same dir must stop before it
        # opens (and recovers) the metadata log the first one is writing. The default log
        # config is set once the metadata (dynamic broker configs) is replayed.
        self.logs = logs = LogManager([self.log_dir], time_ms=self.time_ms)
        controller.load()
        metadata = controller.metadata
        for (rtype, rname), stored in metadata.dynamic_configs.items():
            stale = sorted(k for k in stored if rtype == RESOURCE_BROKER
                           and ignored_dynamic_broker_config(k))
            if stale:  # static in Kafka: ConfigResolver does not use them
                log.warning("ignoring dynamic broker config(s) %s of broker resource '%s' "
                            "stored by an older snakka: they are static (set them in "
                            "server.properties; delete them with kafka-configs.sh "
                            "--delete-config)", ", ".join(stale), rname)
        # The SSL listeners start with this broker's dynamic SSL configs (metadata log), which
        # AlterConfigs may change again at run time (security/ssl_reload.py).
        node_key = (RESOURCE_BROKER, str(self.node_id))
        ssl_reconfiguration = self.ssl_reconfiguration = SslReconfiguration(
            config, self.node_id, lambda: controller.metadata.dynamic_configs.get(node_key, {}))
        listener_tls = ssl_reconfiguration.initial(listener_tls)
        logs.default_config = controller.log_config_for(None)
        # After LogManager raised the soft RLIMIT_NOFILE: the derived bound follows it.
        pool = configure_open_files(config.int("log.max.open.files"))
        log.info("log.max.open.files: at most %d segment files open at once", pool.limit)
        assert metadata.cluster_id is not None
        logs.ensure_meta_properties(cluster_id=metadata.cluster_id, node_id=self.node_id)
        configs = {name: controller.log_config_for(ti) for name, ti in metadata.topics.items()}
        # Partition dirs the metadata does not own are stray: set aside, never adopted
        # (storage.manager, "Stray partition directories").
        logs.load_all(configs.get, metadata.topics)
        for ti in metadata.topics.values():  # partitions with no data dir yet
            for p in range(ti.partitions):
                logs.get_or_create_log(ti.name, p, configs[ti.name], ti.topic_id)
        self.flusher = FlushScheduler(
            logs, interval_ms=config.int("log.flush.scheduler.interval.ms"),
            strict=config.bool("log.flush.strict"))
        self.flusher.start()
        cleaner_config = _cleaner_config(controller.resolver)
        if cleaner_config.enable:
            self.log_cleaner = LogCleaner(
                cleaner_config, logs.all_logs, self.time_ms, log_dir=self.log_dir,
                run_on_owner=_on_loop(asyncio.get_running_loop()))
            self.log_cleaner.start()
        self.replicas = replicas = ReplicaManager(
            metadata, logs, self.flusher, node_id=self.node_id, time_ms=self.time_ms,
            log_dir=self.log_dir,
            max_uncompressed_bytes=config.int("snakka.message.max.uncompressed.bytes"))
        controller.attach(replicas)
        self.groups = GroupCoordinator(config, controller, replicas, self.time_ms)
        t_load = time.monotonic()
        await self.groups.start()
        self.coordinator_load_seconds["group"] = time.monotonic() - t_load
        # Share-group state is replayed before any client can connect; the coordinator then
        # tells the manager which share-partitions its groups have assigned.
        self.shares = SharePartitionManager(config, controller, replicas, self.time_ms)
        t_load = time.monotonic()
        await self.shares.start()
        self.coordinator_load_seconds["share"] = time.monotonic() - t_load
        self.groups.add_share_listener(self.shares)
        # The transaction coordinator last: transactions found half-complete at start-up write
        # their markers, some of them to __consumer_offsets through the group coordinator.
        self.txns = TransactionManager(config, controller, replicas, self.time_ms)
        # Markers for __consumer_offsets partitions resolve pending transactional offsets (set
        # before start(): the transactions it completes may have offsets in them).
        self.txns.set_offsets_marker_writer(self.groups.complete_transaction)
        t_load = time.monotonic()
        await self.txns.start()
        self.coordinator_load_seconds["transaction"] = time.monotonic() - t_load
        # Tiered storage after the coordinators (its metadata topic is replayed like theirs)
        # and before the listeners: fetches below the local log start need it.
        if config.bool("remote.log.storage.system.enable"):
            self.remote = await self._start_remote_log_manager()
            controller.add_listener(self.remote)
            assert self.remote_fetch_quota is not None
            remote_quotas = _RemoteQuotas(self.remote, self.remote_fetch_quota,
                                          controller.resolver)
            controller.add_listener(remote_quotas)
            remote_quotas.on_broker_configs_changed()  # values stored in the metadata log
        controller.add_listener(_FetchSessionsForget(self.fetch_sessions))
        connection_limits = _ConnectionLimits(self.connection_quotas, controller.resolver,
                                              self.listener_servers)
        controller.add_listener(connection_limits)
        connection_limits.on_broker_configs_changed()  # values stored in the metadata log
        if self.log_cleaner is not None:
            controller.add_listener(_CleanerReconfigure(self.log_cleaner, controller.resolver))
        controller.add_listener(self.shares)
        controller.add_listener(self.groups)
        replicas.add_listener(self.shares)
        # The ip entities' connection_creation_rate (server/quotas.py reads it at each accept).
        self.connection_quotas.client_quotas = metadata.client_quotas
        self.services = Services(
            config=config, node_id=self.node_id, time_ms=self.time_ms, controller=controller,
            replicas=replicas, groups=self.groups, shares=self.shares, txns=self.txns,
            remote=self.remote, fetch_sessions=self.fetch_sessions, endpoints=self,
            sasl=self.sasl, ssl_reconfiguration=self.ssl_reconfiguration,
            quotas=QuotaManagers(
                metadata.client_quotas, num_samples=config.int("quota.window.num"),
                window_seconds=config.int("quota.window.size.seconds"),
                controller_num_samples=config.int("controller.quota.window.num"),
                controller_window_seconds=config.int("controller.quota.window.size.seconds"),
                clock_ms=_monotonic_ms),
            client_metrics=self.client_metrics, client_metrics_store=self.client_metrics_store)
        self._check_fd_headroom()
        # Authorization: the authorizer reads the ACLs the metadata replay has just loaded (a
        # test may have injected its own).
        if self.authorizer is None:
            self.authorizer = create_authorizer(
                str(config.get("authorizer.class.name")), metadata.acls,
                super_users=str(config.get("super.users")),
                allow_everyone_if_no_acl_found=config.bool("allow.everyone.if.no.acl.found"))
        dispatcher = RequestDispatcher(self.handlers, services=self.services,
                                       authorizer=self.authorizer)
        if config.int("metrics.port") >= 0 or config.int("console.port") >= 0:
            # The console's live charts read the same request counters.
            dispatcher.metrics = self.metrics = BrokerMetrics(self._topic_name_by_id)
            self.flusher.on_flush = self.metrics.flush_time.observe
        limits = ChannelLimits.from_config(config)
        for listener in config.listeners:
            protocol = SecurityProtocol[config.listener_security_protocol(listener.name)]
            srv = ListenerServer(
                listener, registry=self.connection_registry, memory=self.response_memory,
                limits=limits, dispatcher=dispatcher, security_protocol=protocol,
                tls=listener_tls.get(listener.name),
                backlog=config.int("socket.listen.backlog.size"))
            if srv.tls is not None:
                ssl_reconfiguration.register(listener.name, srv)
            await srv.start()
            self.listener_servers.append(srv)
        self._tasks.append(asyncio.ensure_future(idle_sweeper(
            self.connection_registry, self.config.int("connections.max.idle.ms"),
            self.config.int("socket.request.arrival.timeout.ms"))))
        self._tasks.append(asyncio.ensure_future(self._retention_loop()))
        self._tasks.append(asyncio.ensure_future(self._checkpoint_loop()))
        if self.metrics is not None and config.int("metrics.port") >= 0:
            await self._start_metrics_server(self.metrics)
        if config.int("console.port") >= 0:
            await self._start_console()
        self._started = True
        log.info("snakka broker %d started in %.0f ms (cluster %s, %d topics, data in %s)",
                 self.node_id, (time.monotonic() - t0) * 1000, metadata.cluster_id,
                 len(metadata.topics), self.log_dir)

    # -- metrics -------------------------------------------------------------------------
    async def _start_metrics_server(self, metrics: BrokerMetrics) -> None:
        """The /metrics endpoint (server/metrics.py): this broker's own collector (several
        brokers may share a process; no prometheus-client registry, which the endpoint would
        only ask to collect), the event-loop lag probe."""
        collector = BrokerCollector(
            metrics, self._metrics_state, {k: h.name for k, h in self.handlers.items()})
        host, port = str(self.config.get("metrics.host")), self.config.int("metrics.port")
        server = MetricsServer(collector, host, port)
        try:
            await server.start()
        except OSError as exc:
            if not self._metrics_port_fallback or port == 0:
                raise OSError(exc.errno, f"metrics endpoint (metrics.port={port}): cannot bind "
                              f"{host or '*'}:{port}: {exc.strerror}") from None
            log.warning("metrics.port %d is in use (%s); serving metrics on an ephemeral port "
                        "instead (set metrics.port to choose one)", port, exc.strerror)
            server = MetricsServer(collector, host, 0)
            await server.start()
        self.metrics_server = server
        self._tasks.append(asyncio.ensure_future(metrics.probe_event_loop_lag()))
        log.info("Prometheus metrics at %s", server.url)

    async def _start_console(self) -> None:
        """The web console (console/): pages and actions through the handlers."""
        from snakka.console import create_console

        assert self.services is not None and self.authorizer is not None
        config = self.config
        listeners = []
        for srv in self.listener_servers:
            host, port = self.advertised_endpoint(srv.listener)
            listeners.append({"name": srv.listener.name, "address": f"{host}:{port}",
                              "protocol": config.listener_security_protocol(srv.listener.name)})

        def build(port: int | None = None) -> ConsoleServer:
            assert self.services is not None and self.authorizer is not None
            return create_console(config, self.services, self.handlers, self.authorizer,
                                  self.metrics, lambda: len(self.connections), listeners,
                                  port=port)

        console = build()
        port = config.int("console.port")
        try:
            await console.start()
        except OSError as exc:
            if not self._console_port_fallback or port == 0:
                raise OSError(exc.errno, f"web console (console.port={port}): cannot bind "
                              f"{console.host or '*'}:{port}: {exc.strerror}") from None
            log.warning("console.port %d is in use (%s); serving the console on an ephemeral "
                        "port instead (set console.port to choose one)", port, exc.strerror)
            console = build(0)
            await console.start()
        self.console = console
        log.info("web console at %s%s", console.url,
                 " (read-only)" if console.read_only else "")

    def _topic_name_by_id(self, topic_id: object) -> str | None:
        ti = self.metadata.topics_by_id.get(topic_id)  # type: ignore[call-overload]
        return ti.name if ti is not None else None

    def _metrics_state(self) -> dict[str, object]:
        """What the metrics collector reads at scrape time (on the event loop)."""
        assert self.logs is not None and self.groups is not None and self.shares is not None
        offsets = self.groups.offsets
        committed = [(g, t, p, co.offset) for g in sorted(offsets.groups())
                     for t, p, co in offsets.fetch(g, None) if co is not None]
        return {
            "listeners": [ln.name for ln in self.config.listeners],
            "connections": list(self.connections),
            "logs": self.logs.all_logs(),
            "get_log": self.logs.get_log,
            "committed_offsets": committed,
            "share_partitions": self.shares.loaded_partitions(),
            "share_topic_name": self.shares.topic_name,
            "coordinator_load_seconds": dict(self.coordinator_load_seconds),
            "client_metrics": self.client_metrics,
            "client_metrics_store": self.client_metrics_store,
        }

    def _listener_tls(self) -> dict[str, ListenerTls]:
        """The TLS context of each SSL / SASL_SSL listener (security/ssl.py)."""
        config = self.config
        out: dict[str, ListenerTls] = {}
        for listener in config.listeners:
            protocol = SecurityProtocol[config.listener_security_protocol(listener.name)]
            if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
                out[listener.name] = ListenerTls.for_listener(
                    functools.partial(config.listener_raw, listener.name), listener.name,
                    config.int("snakka.ssl.handshake.timeout.ms"))
        return out

    async def _start_remote_log_manager(self) -> RemoteLogManager:
        """The remote storage backend, the metadata manager (replays __remote_log_metadata),
        the reader pool and the RemoteLogManager, which attaches every tiered partition."""
        from snakka.remote.metadata_manager import (
            REMOTE_LOG_METADATA_TOPIC,
            TopicBasedRemoteLogMetadataManager,
        )
        from snakka.remote.reader import RemoteReaderPool
        from snakka.remote.storage import create_remote_storage

        config = self.config
        assert self.replicas is not None
        self.metadata.remote_storage_system_enabled = True
        rsm_configs: dict[str, object] = {
            name: config.get(name) for name in BROKER_CONFIGS if name.startswith("rsm.config.")}
        if not rsm_configs["rsm.config.storage.root"]:
            rsm_configs["rsm.config.storage.root"] = self.log_dir.rstrip(os.sep) + "-remote"
        # The local backend's root is created on first use only: once the metadata topic
        # exists, segments may be in the root, and a missing root is an unmounted share.
        rsm = create_remote_storage(
            rsm_configs, create_root=REMOTE_LOG_METADATA_TOPIC not in self.metadata.topics)
        rlmm = TopicBasedRemoteLogMetadataManager(
            self.controller, self.replicas, config, broker_id=self.node_id, time_ms=self.time_ms)
        await rlmm.start()
        self.remote_fetch_quota = fetch_quota = RemoteFetchQuota(
            config.int("remote.log.manager.fetch.max.bytes.per.second"),
            num_samples=config.int("remote.log.manager.fetch.quota.window.num"),
            window_seconds=config.int("remote.log.manager.fetch.quota.window.size.seconds"),
            clock_ms=_monotonic_ms)
        readers = RemoteReaderPool(
            rlmm, rsm, cache_bytes=config.int("snakka.remote.log.reader.cache.bytes"),
            threads=config.int("remote.log.reader.threads"),
            max_pending=config.int("remote.log.reader.max.pending.tasks"),
            index_cache_bytes=config.int("remote.log.index.file.cache.total.size.bytes"),
            fetch_quota=fetch_quota)
        remote = RemoteLogManager(config, self.replicas, rlmm, rsm, readers,
                                  broker_id=self.node_id, time_ms=self.time_ms)
        await remote.start()
        log.info("tiered storage: backend %s, %d tiered partitions",
                 rsm_configs["rsm.config.storage.backend"], len(remote.partitions))
        return remote

    async def stop(self) -> None:
        self._started = False  # closing connections below must not touch stopping parts
        if self.console is not None:
            await self.console.stop()
            self.console = None
        if self.metrics_server is not None:
            await self.metrics_server.stop()
            self.metrics_server = None
        for srv in self.listener_servers:
            await srv.stop()
        for conn in list(self.connections):
            conn.close()
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        if self.remote is not None:
            await self.remote.stop()
        if self.log_cleaner is not None:
            # Off the loop: a pass ending now may be waiting for its swap to run on it.
            await asyncio.get_running_loop().run_in_executor(None, self.log_cleaner.shutdown)
        if self.txns is not None:
            await self.txns.stop()
        if self.shares is not None:
            await self.shares.stop()
        if self.groups is not None:
            await self.groups.stop()
        await self.controller.stop()
        if self.flusher is not None:
            await self.flusher.close()
        if self.logs is not None:
            self.logs.close()
        if self.sasl is not None:
            self.sasl.close()  # an http(s) JWKS's refresher thread
        log.info("snakka broker %d stopped cleanly", self.node_id)

    # -- connections ---------------------------------------------------------------------
    def _connection_closed(self, conn: ServerConnection) -> None:
        """A registered connection closed (server.registry.ConnectionRegistry tells us)."""
        if self.shares is not None and self._started:
            # Kafka releases a member's records when its share session's connection goes.
            self.shares.on_connection_closed(conn)
        if self.client_metrics is not None:
            # Kafka's disconnect listener: the client instance of this connection is forgotten
            # (its pushed metrics stay until snakka.client.metrics.retention.ms).
            self.client_metrics.connection_closed(conn)

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

    # -- background tasks ----------------------------------------------------------------
    async def _retention_loop(self) -> None:
        assert self.replicas is not None
        period = self.config.int("log.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(period)
            try:
                self.replicas.enforce_retention()
            except Exception:
                log.exception("retention check failed")

    async def _checkpoint_loop(self) -> None:
        assert self.replicas is not None
        period = self.config.int("log.flush.offset.checkpoint.interval.ms") / 1000
        while True:
            await asyncio.sleep(period)
            try:
                await self.replicas.checkpoint()
            except Exception:
                log.exception("checkpoint failed")


def _on_loop(loop: asyncio.AbstractEventLoop) -> RunOnOwner:
    """run_on_owner for the log cleaner: run a callable on the broker's event loop (which
    owns every log's segment list) and wait for its result; direct when already there.
    Called on the loop's thread."""
    import concurrent.futures
    import threading

    loop_thread = threading.get_ident()

    def run(fn: Callable[[], _T]) -> _T:
        if threading.get_ident() == loop_thread:
            return fn()
        fut: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def call() -> None:
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                    fut.set_exception(e)

        loop.call_soon_threadsafe(call)
        return fut.result()

    return run
