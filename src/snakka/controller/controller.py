"""The controller: every change to cluster metadata goes through here.

Kafka's QuorumController with its ReplicationControlManager (topics, partitions),
ConfigurationControlManager (dynamic configs) and ProducerIdControlManager, for one node. It
owns:

- the metadata state (metadata.core.ClusterMetadata, a sans-I/O core changed only by applying
  records) and the config resolution over it (metadata.configs.ConfigResolver),
- the durable metadata log and its group commit (controller.metadata_log),
- topic creation, deletion and growth: the partition logs are made through the replica manager
  first, the metadata records applied after, so metadata never names a topic whose logs do not
  exist,
- pushing resolved configs to partition logs after a config change,
- producer-id blocks,
- SCRAM credentials (AlterUserScramCredentials; metadata/scram.py validates and replays).
- ACLs (Kafka's AclControlManager): CreateAcls / DeleteAcls become ``acl`` / ``remove_acl``
  records (KRaft's AccessControlEntryRecord / RemoveAccessControlEntryRecord), applied to the
  metadata's AclCache, which the StandardAuthorizer reads, and durable before the answer.
- client quotas (Kafka's ClientQuotaControlManager): AlterClientQuotas becomes
  ``client_quota`` records (KRaft's ClientQuotaRecord; metadata/client_quotas.py validates and
  replays), durable before the answer; the quota managers read the replayed state.

What happens elsewhere when topics come and go (groups re-assign, share state is dropped, fetch
sessions forget them) is the business of :class:`MetadataListener` s the broker registers: the
controller knows none of them, so arrows point down (controller -> replica manager -> storage).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from snakka.config import BrokerConfig, ConfigError
from snakka.controller.metadata_log import MetadataLog, MetadataRecord
from snakka.limits import INLINE_CREATE_PARTITIONS, REGISTER_TOPICS_PER_SLICE
from snakka.metadata import kraft
from snakka.metadata.client_quotas import QuotaAlteration, QuotaResult
from snakka.metadata.configs import ConfigResolver
from snakka.metadata.core import RESERVED_TOPICS, ClusterMetadata, TopicInfo, state_records
from snakka.metadata.features import FINALIZED_FEATURES, SUPPORTED_FEATURES
from snakka.metadata.scram import ScramAlteration, ScramResult
from snakka.metadata.store import MetadataStore
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.primitives import uuid_to_base64
from snakka.security.acl_authorizer import AclBindingFilter, StandardAcl
from snakka.storage import LogConfig, UnifiedLog
from snakka.storage.checkpoint import (
    read_meta_properties,
    topic_id_from_str,
    topic_id_to_str,
    write_meta_properties,
)
from snakka.util.heap import long_lived, reclaim_frozen
from snakka.util.slicing import TimeSlice

if TYPE_CHECKING:
    from snakka.replica.manager import ReplicaManager

log = logging.getLogger("snakka.controller")



def _delete_logs(logs: list[UnifiedLog]) -> None:
    for pl in logs:
        pl.delete()


class MetadataListener:
    """What other parts of the broker learn about topic changes (no-ops by default)."""

    def on_topics_changed(self) -> None:
        """Client topics were created or gained partitions (once per request)."""

    def on_topic_deleted(self, topic: TopicInfo) -> None:
        """One topic left metadata and its logs were detached (per topic, on the loop)."""

    async def on_topics_deleted(self, names: list[str],
                                tick: Callable[[], Awaitable[None]]) -> None:
        """A request's topics are gone (once per request; ``tick`` yields to the loop)."""

    def on_broker_configs_changed(self) -> None:
        """A dynamic broker config changed (durable; read the new values from the resolver)."""


@dataclasses.dataclass
class TopicCreation:
    """One validated topic creation in flight (Controller.plan_topic -> create_topics)."""

    record: MetadataRecord  # the metadata record that creates it, applied once its logs exist
    log_config: LogConfig | None = None
    logs: list[UnifiedLog] = dataclasses.field(default_factory=list)
    error: KafkaError | None = None  # its logs could not be created: not in metadata

    @property
    def name(self) -> str:
        return str(self.record["name"])

    @property
    def partitions(self) -> int:
        return int(self.record["partitions"])

    @property
    def configs(self) -> dict[str, str]:
        configs: dict[str, str] = self.record["configs"]
        return configs

    @property
    def topic_id(self) -> uuid.UUID:
        return uuid.UUID(hex=self.record["topic_id"])


class Controller:
    def __init__(self, config: BrokerConfig, log_dir: str) -> None:
        self.config = config
        self.log_dir = log_dir
        self.metadata = ClusterMetadata()
        self.resolver = ConfigResolver(config, self.metadata)
        self.metadata_log: MetadataLog | None = None
        self.replicas: ReplicaManager | None = None
        self._listeners: list[MetadataListener] = []
        self._creating: dict[str, asyncio.Future[None]] = {}  # topic creations in a worker thread
        self._growing: set[str] = set()  # topics whose new partitions are being created
        self._pid_next = 0
        self._pid_block_end = 0

    def add_listener(self, listener: MetadataListener) -> None:
        self._listeners.append(listener)

    # -- start-up ------------------------------------------------------------------------
    def load(self) -> None:
        """Open the metadata log and replay it (fails start-up on a record it cannot apply);
        set or check the cluster id (``meta.properties``, as in KRaft); convert a log of
        snakka's former JSON records to KRaft's format (once); start this node's leader epoch
        (metadata.store)."""
        props = read_meta_properties(self.log_dir)
        node_id = self.config.node_id
        dir_id = None
        if props and props.get("directory.id"):
            dir_id = topic_id_from_str(props["directory.id"])
        store = MetadataStore(self.log_dir, node_id=node_id,
                              directory_id=dir_id or uuid.uuid4())
        self.metadata_log = MetadataLog(store)
        for offset, rec in store.replay():
            try:
                self.metadata.apply(rec)
            except (KeyError, ValueError, TypeError) as e:
                raise store.error(
                    offset, f"cannot apply {rec.get('type')!r} record ({e!r})") from None
        for skipped in self.metadata.skipped:
            log.warning("metadata log: skipped %s record for %s: a topic named %s cannot exist "
                        "(created by an older version; its data shared the metadata log)",
                        skipped["type"], skipped.get("name") or skipped.get("topic_id"),
                        "__cluster_metadata")
        if store.replayer.ignored:
            log.debug("metadata log: read %s (Kafka's records of machinery a single snakka "
                     "node does not have)", ", ".join(
                         f"{n} {name}" for name, n in sorted(store.replayer.ignored.items())))
        cluster_id = self.config.raw("cluster.id")
        stored = self.metadata.cluster_id or (props or {}).get("cluster.id")
        if stored is None:
            stored = cluster_id or uuid_to_base64(uuid.uuid4())
        elif cluster_id and cluster_id != stored:
            raise RuntimeError(
                f"cluster.id {cluster_id} does not match {stored} stored in {self.log_dir}")
        self.metadata.cluster_id = stored
        if props is None:
            write_meta_properties(self.log_dir, cluster_id=stored, node_id=node_id,
                                  directory_id=topic_id_to_str(store.codec.directory_id))
        bootstrap = kraft.bootstrap_records(FINALIZED_FEATURES)
        if store.legacy:
            state = [r for r in state_records(self.metadata) if r["type"] != "feature_level"]
            log.warning("metadata log: converting %s from snakka's JSON records to KRaft's "
                        "format (%d records of state); once", store.path, len(state))
            store.migrate(bootstrap + state)
            for rec in bootstrap:
                self.metadata.apply(rec)
            log.info("metadata log: converted to KRaft's format")
        store.write_bootstrap_checkpoint(bootstrap)
        endpoints = self._endpoints()
        fresh = store.empty
        epoch = store.begin_epoch(
            bootstrap if fresh else [],
            lambda broker_epoch: kraft.registration_records(
                node_id, store.codec.directory_id, endpoints, SUPPORTED_FEATURES, broker_epoch))
        if fresh:
            for rec in bootstrap:
                self.metadata.apply(rec)
        log.info("metadata log: leader epoch %d, metadata.version %s", epoch,
                 self.metadata.features.get(kraft.METADATA_VERSION_FEATURE))

    def _endpoints(self) -> list[tuple[str, str, int, str]]:
        """(name, host, port, security protocol) of each listener, for the registration."""
        try:
            return [(li.name, li.host, li.port, self.config.listener_security_protocol(li.name))
                    for li in self.config.listeners]
        except (ConfigError, ValueError, AssertionError):
            return []

    def attach(self, replicas: ReplicaManager) -> None:
        """The replica manager that holds the partition logs this controller creates."""
        self.replicas = replicas

    async def stop(self) -> None:
        creating = set(self._creating.values())  # topic creations in a worker thread
        if creating:
            await asyncio.gather(*creating, return_exceptions=True)
        if self.metadata_log is not None:
            await self.metadata_log.close()

    def close_store(self) -> None:
        """Release the metadata log after a failed start (no loop work pending)."""
        if self.metadata_log is not None:
            self.metadata_log.store.close()

    @property
    def _log(self) -> MetadataLog:
        assert self.metadata_log is not None, "controller not loaded"
        return self.metadata_log

    @property
    def _replicas(self) -> ReplicaManager:
        assert self.replicas is not None, "controller has no replica manager"
        return self.replicas

    # -- configs -------------------------------------------------------------------------
    def log_config_for(self, topic: TopicInfo | None) -> LogConfig:
        cfg = LogConfig.from_dict(self.resolver.effective_topic_config_map(topic))
        # A broker config the partition's producer state needs (not a topic config).
        expiration = self.resolver.broker_value("producer.id.expiration.ms")
        assert expiration is not None  # config.py defines a default
        return dataclasses.replace(cfg, producer_id_expiration_ms=int(expiration))

    def reconfigure_topics(self, names: Iterable[str] | None = None) -> None:
        """Push resolved configs to the partition logs after a config change."""
        topics = (self.metadata.topics.values() if names is None
                  else [self.metadata.topics[n] for n in names if n in self.metadata.topics])
        for ti in topics:
            self._replicas.set_config(ti.name, ti.partitions, self.log_config_for(ti))

    def reconfigure_broker(self) -> None:
        """Tell the listeners a dynamic broker config changed (after it is durable)."""
        for listener in self._listeners:
            listener.on_broker_configs_changed()

    # -- the metadata log ----------------------------------------------------------------
    async def commit_metadata(self, records: list[MetadataRecord]) -> None:
        """Make applied metadata records durable (fsync off the loop) before answering."""
        await self._log.commit(records)

    def commit_metadata_soon(self, records: list[MetadataRecord]) -> None:
        """Append metadata records now and fsync them in the background (group commit);
        :meth:`sync_metadata` waits for durability when a caller needs it."""
        self._log.commit_soon(records)

    async def sync_metadata(self) -> None:
        await self._log.sync()

    # -- topic creation (CreateTopics, Metadata auto-creation, coordinators' topics) -------
    #
    # Order of work, so that metadata never names a topic whose logs do not exist: validate and
    # reserve the name (``plan_topic``), create every partition log, and only then apply the
    # topic records and append them to the metadata log, all topics of a request in one append
    # and one fsync. A topic whose logs cannot be created (EMFILE, ENOSPC, EACCES) gets
    # KAFKA_STORAGE_ERROR, its partial directories are removed, and it never reaches metadata.
    #
    # Small creations (at most INLINE_CREATE_PARTITIONS partitions in the request) run on the
    # loop at once, so a pipelined Produce right after them sees the topic. Larger ones create
    # their files, and encode their metadata log batches, in a worker thread: the loop keeps
    # serving other clients. From 1,000 partitions no full garbage collection runs meanwhile
    # (util.heap). Their names stay
    # reserved meanwhile (a second creation is TOPIC_ALREADY_EXISTS; Metadata auto-creating a
    # name in flight waits for it).

    def plan_topic(self, name: str, partitions: int, configs: dict[str, str | None], *,
                   topic_id: uuid.UUID | None = None, internal: bool = False) -> TopicCreation:
        """Validate one topic creation and reserve its name (KafkaError if invalid). The plan
        must then go through :meth:`create_topics` or :meth:`create_topics_inline`."""
        self.metadata.check_create_topic(name, partitions, 1, configs, internal=internal)
        self.metadata.reserve(name)
        return TopicCreation(self.metadata.topic_record(name, partitions, configs, topic_id))

    def default_partitions(self) -> int:
        """``num.partitions``: what a creation asking for -1 partitions (and auto-creation) gets."""
        return int(self.resolver.broker_value("num.partitions") or "1")

    def auto_create_plan(self, name: str) -> TopicCreation:
        """Plan a Metadata-triggered creation with broker defaults (auto.create.topics.enable)."""
        return self.plan_topic(name, self.default_partitions(), {})

    def create_topics_inline(self, plans: list[TopicCreation]) -> list[MetadataRecord]:
        """Create planned topics now, on the loop (small creations only); returns the applied
        records, which the caller commits (``commit_metadata`` / ``commit_metadata_soon``)."""
        cache: dict[frozenset[tuple[str, str]], LogConfig] = {}
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

    def create_topics(self, plans: list[TopicCreation]) -> asyncio.Future[None]:
        """Create planned topics and make them durable (one append, one fsync); each plan's
        ``error`` says if its topic failed. A small creation is done (in metadata) when this
        returns, so requests after it see the topics; the future resolves once durable. A
        large one runs in the background. Either way the work runs to the end even if the
        caller is cancelled (a client disconnecting must not leave names reserved or logs half
        made): await it through ``asyncio.shield``."""
        if self.creation_is_small(plans):
            self._log.append(self.create_topics_inline(plans))
            return self._log.synced()
        done = asyncio.get_running_loop().create_future()
        for plan in plans:
            self._creating[plan.name] = done
        return asyncio.ensure_future(self._create_topics_off_loop(plans, done))

    async def _create_topics_off_loop(self, plans: list[TopicCreation],
                                      done: asyncio.Future[None]) -> None:
        slicer = TimeSlice()
        try:
            # The logs and metadata made here live as long as their topics: no full garbage
            # collection (one loop step over the whole heap) while they are built; frozen after.
            with long_lived(sum(p.partitions for p in plans)):
                cache: dict[frozenset[tuple[str, str]], LogConfig] = {}
                for plan in plans:  # on the loop (it reads configs the loop changes), in slices
                    self._resolve_log_config(plan, cache)
                    await slicer.tick()
                prepared = await asyncio.get_running_loop().run_in_executor(
                    None, self._create_logs_and_prepare, plans)
                # Register, apply and append in slices (each slice's records are appended
                # right after they are applied, so the log keeps the order of changes); one
                # fsync below.
                for i, batches in zip(range(0, len(plans), REGISTER_TOPICS_PER_SLICE),
                                      prepared, strict=True):
                    self._register(plans[i:i + REGISTER_TOPICS_PER_SLICE])
                    self._log.append_prepared(batches)
                    await slicer.tick()
                self._announce(plans)
        finally:
            for plan in plans:
                self.metadata.release(plan.name)
                if self._creating.get(plan.name) is done:
                    del self._creating[plan.name]
            if not done.done():
                done.set_result(None)
        await self._log.sync()

    async def wait_for_creation(self, name: str) -> None:
        """Wait until an in-flight creation of ``name`` (by another request) has finished."""
        fut = self._creating.get(name)
        if fut is not None:
            await asyncio.shield(fut)

    def _resolve_log_config(self, plan: TopicCreation,
                            cache: dict[frozenset[tuple[str, str]], LogConfig]) -> None:
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
                plan.logs = self._replicas.make_logs(plan.name, range(plan.partitions),
                                                     plan.log_config, plan.topic_id)
            except KafkaError as e:
                plan.error = e

    def _create_logs_and_prepare(self, plans: list[TopicCreation]) -> list[bytes]:
        """In a worker thread: every planned partition's files, then the metadata log batches
        of each registration slice (the records ``_register`` applies for that slice's topics
        whose logs exist). Encoding is pure but not cheap (~80 ms for 10,000 partition
        records): on the loop it would be one long step of a single large topic's slice."""
        self._create_logs(plans)
        store = self._log.store
        return [store.prepare([p.record for p in plans[i:i + REGISTER_TOPICS_PER_SLICE]
                               if p.error is None])
                for i in range(0, len(plans), REGISTER_TOPICS_PER_SLICE)]

    def _register(self, plans: list[TopicCreation]) -> list[MetadataRecord]:
        """On the loop, after the logs exist: register them and apply the records (returned for
        the caller to append); release the names."""
        records = []
        for plan in plans:
            self.metadata.release(plan.name)
            if plan.error is not None:
                continue
            for pl in plan.logs:
                self._replicas.add_log(pl)
            records.append(plan.record)
        return self.metadata.apply_all(records)

    def _announce(self, plans: list[TopicCreation]) -> None:
        """Log the outcome and tell the listeners, once per request (each pass walks every
        topic and group: once per topic made creating N topics quadratic)."""
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
        if any(p.name not in RESERVED_TOPICS for p in created):
            # Internal topics are never subscribed to; skipping them also keeps a coordinator
            # that creates its topic lazily (share-group state) from re-entering the groups.
            for listener in self._listeners:
                listener.on_topics_changed()

    def create_topic_now(self, name: str, partitions: int, configs: dict[str, str | None],
                         topic_id: uuid.UUID | None = None) -> tuple[TopicInfo, list[MetadataRecord]]:
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

    # -- topic deletion ------------------------------------------------------------------
    async def delete_topic(self, name: str) -> None:
        if name not in self.metadata.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             "This server does not host this topic-partition.")
        await self.delete_topics([name])

    async def delete_topics(self, names: list[str]) -> None:
        """Delete existing topics (the caller checked): they leave metadata at once, in one
        append and one fsync for the whole request; their logs are detached and their
        directories removed in one worker-thread job; listeners learn of it once per topic and
        once per request. The per-topic clean-up yields to the loop in slices."""
        replicas = self._replicas
        gone = [self.metadata.topics[n] for n in dict.fromkeys(names) if n in self.metadata.topics]
        if not gone:
            return
        recs: list[MetadataRecord] = []
        for ti in gone:
            recs += self.metadata.delete_topic(ti.name)
        await self.commit_metadata(recs)
        # Detach the logs now (nothing can reach them: the topics left the metadata above) and
        # remove their directories on a worker thread: rmtree of a big topic would block the loop.
        slicer = TimeSlice()
        doomed: list[UnifiedLog] = []
        for ti in gone:
            for p in range(ti.partitions):
                pl = replicas.detach_log(ti.name, p)
                if pl is not None:
                    doomed.append(pl)
            for listener in self._listeners:
                listener.on_topic_deleted(ti)
            await slicer.tick()
        if doomed:
            await asyncio.get_running_loop().run_in_executor(
                None, _delete_logs, doomed)
        for listener in self._listeners:
            await listener.on_topics_deleted([ti.name for ti in gone], slicer.tick)
        # Large creations froze these topics' objects (util/heap.py): reclaim their cycles.
        reclaim_frozen(sum(ti.partitions for ti in gone))
        for ti in gone[:10]:
            log.info("deleted topic %s (id %s)", ti.name, uuid_to_base64(ti.topic_id))
        if len(gone) > 10:
            log.info("deleted %d topics in one request", len(gone))

    # -- partitions ----------------------------------------------------------------------
    async def create_partitions(self, name: str, count: int) -> None:
        """Grow a topic: the new partitions' logs first (in a worker thread when many), then
        the metadata record (one fsync). A log that cannot be created fails the request with
        KAFKA_STORAGE_ERROR and leaves the partition count as it was."""
        replicas = self._replicas
        ti = self.metadata.check_create_partitions(name, count)
        old = ti.partitions
        cfg = self.log_config_for(ti)
        if name in self._growing:
            # Two requests would create the same partition directories.
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Topic {name} is already gaining partitions.")
        self._growing.add(name)
        try:
            def make() -> list[UnifiedLog]:
                return replicas.make_logs(name, range(old, count), cfg, ti.topic_id)
            if self.creates_inline(count - old):
                made, batches = make(), None
            else:
                # Many: the logs and the record's batches made in a worker thread (see
                # _create_topics_off_loop); the record is the one applied below (this topic
                # cannot grow meanwhile: _growing).
                rec = self.metadata.partitions_record(name, count)
                store = self._log.store

                def make_and_prepare() -> tuple[list[UnifiedLog], bytes]:
                    return make(), store.prepare([rec])
                with long_lived(count - old):
                    made, batches = await asyncio.shield(
                        asyncio.get_running_loop().run_in_executor(None, make_and_prepare))
            if self.metadata.topics.get(name) is not ti:  # deleted meanwhile
                for pl in made:
                    pl.delete()
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"The topic '{name}' does not exist.")
            for pl in made:
                replicas.add_log(pl)
            if batches is None:
                recs = self.metadata.create_partitions(name, count)
            else:
                self.metadata.apply_all([rec])
                self._log.append_prepared(batches)
        finally:
            self._growing.discard(name)
        if batches is None:
            await self.commit_metadata(recs)
        else:
            await self.sync_metadata()
        for listener in self._listeners:
            listener.on_topics_changed()

    # -- ACLs ----------------------------------------------------------------------------
    async def create_acls(self, acls: list[StandardAcl]) -> list[KafkaError | None]:
        """Add ACLs (one result per ACL: None or its error); durable when this returns."""
        recs, results = self.metadata.create_acls(acls)
        await self.commit_metadata(recs)
        if recs:
            log.info("created %d ACL(s)", len(recs))
        return results

    async def delete_acls(self, filters: list[AclBindingFilter]
                          ) -> list[list[StandardAcl] | KafkaError]:
        """Remove the ACLs matching each filter; per filter what it matched (or its error);
        durable when this returns."""
        recs, results = self.metadata.delete_acls(filters)
        await self.commit_metadata(recs)
        if recs:
            log.info("deleted %d ACL(s)", len(recs))
        return results

    # -- producer ids --------------------------------------------------------------------
    async def next_producer_id(self) -> int:
        if self._pid_next >= self._pid_block_end:
            recs, start = self.metadata.allocate_producer_id_block()
            await self.commit_metadata(recs)
            self._pid_next, self._pid_block_end = start, self.metadata.next_producer_id_block
        pid = self._pid_next
        self._pid_next += 1
        return pid

    # -- SCRAM credentials ---------------------------------------------------------------
    async def alter_user_scram_credentials(
            self, deletions: list[ScramAlteration],
            upsertions: list[ScramAlteration]) -> list[ScramResult]:
        """Apply the valid users' alterations and make them durable before answering (one
        append, one fsync); one result per user."""
        results, records = self.metadata.scram.alter(deletions, upsertions)
        if records:
            await self.commit_metadata(self.metadata.apply_all(records))
            for r in results:
                if r.error_code == ErrorCode.NONE:
                    log.info("altered SCRAM credentials of user %s", r.user)
        return results

    # -- client quotas -------------------------------------------------------------------
    async def alter_client_quotas(self, alterations: list[QuotaAlteration], *,
                                  validate_only: bool = False) -> list[QuotaResult]:
        """Validate every entry (one result each) and, unless ``validate_only``, apply the valid
        ones, durable before this returns (one append)."""
        results, records = self.metadata.client_quotas.alter(alterations)
        if records and not validate_only:
            await self.commit_metadata(self.metadata.apply_all(records))
            log.info("altered %d client quota(s)", len(records))
        return results
