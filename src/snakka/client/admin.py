"""Admin operations for the CLI, on one connection to the bootstrap broker.

Speaks only the public Kafka protocol (Metadata, CreateTopics, DeleteTopics, DescribeConfigs,
ListOffsets, Produce, Fetch, FindCoordinator, and for transactions DescribeProducers,
ListTransactions, DescribeTransactions, WriteTxnMarkers), so the CLI works against Apache Kafka
too. Single-broker oriented: requests go to the bootstrap connection; against a multi-broker
cluster, produce/consume of partitions led elsewhere report NOT_LEADER_OR_FOLLOWER. ListOffsets,
DescribeProducers and WriteTxnMarkers go to each partition's leader, ListTransactions to every
broker, DescribeTransactions to the id's transaction coordinator, as Kafka's Admin client does.

The transaction verbs are what ``kafka-transactions.sh`` does (KIP-664): ``abort`` by start
offset looks the producer up with DescribeProducers and sends WriteTxnMarkers (ABORT) to the
leader, with the coordinator epoch the partition last saw (0 when it saw none);
``find_hanging`` lists open transactions older than the maximum transaction timeout whose
producer the coordinators do not know, or whose transaction does not include the partition.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.client.sasl import SaslClientConfig
from snakka.protocol.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.alter_user_scram_credentials_request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from snakka.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from snakka.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from snakka.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from snakka.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from snakka.protocol.messages.describe_acls_request import DescribeAclsRequest
from snakka.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from snakka.protocol.messages.describe_log_dirs_request import (
    DescribableLogDirTopic,
    DescribeLogDirsRequest,
)
from snakka.protocol.messages.describe_producers_request import (
    DescribeProducersRequest,
    TopicRequest,
)
from snakka.protocol.messages.describe_transactions_request import DescribeTransactionsRequest
from snakka.protocol.messages.describe_user_scram_credentials_request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from snakka.protocol.messages.list_transactions_request import ListTransactionsRequest
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from snakka.protocol.primitives import uuid_to_base64
from snakka.records import Record, build_batch, iter_records
from snakka.util.murmur2 import murmur2_partition
from snakka.util.scram import MIN_ITERATIONS, ScramMechanism, salted_password

_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# Records per produce request of the CLI's produce verb.
PRODUCE_CHUNK = 1000
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 * 1024 * 1024
# FindCoordinator key types.
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
# How long find_coordinator() retries a coordinator that is not available yet.
COORDINATOR_WAIT_S = 15.0
_COORDINATOR_RETRIABLE = (ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
_TXN_COORDINATOR_RETRIABLE = (*_COORDINATOR_RETRIABLE, ErrorCode.NOT_COORDINATOR)
T = TypeVar("T")
# find-hanging: kafka-transactions.sh's default --max-transaction-timeout (minutes), and its
# batch of partitions per DescribeProducers request.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
DESCRIBE_PRODUCERS_BATCH = 500


class AdminError(RuntimeError):
    """A request was refused; ``code`` is the Kafka error code (0 when not from the broker)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


def _check(code: int, what: str, message: str | None = None) -> None:
    if code:
        _fail(code, what, message)


def _fail(code: int, what: str, message: str | None = None) -> NoReturn:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    raise AdminError(f"{what}: {name}" + (f" ({message})" if message else ""), code)


@dataclass(frozen=True)
class ProducerInfo:
    """One active producer of a partition (DescribeProducers); -1 where there is none."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    coordinator_id: int
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int  # -1: no transaction in progress
    partitions: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class HangingTransaction:
    topic: str
    partition: int
    producer: ProducerInfo


# Kafka's AclBindingFilter under the name this client has always used.
AclFilter = AclBindingFilter


def _binding(r: Any) -> AclBinding:
    return AclBinding(ResourceType.from_code(r.resource_type), r.resource_name,
                      PatternType.from_code(r.pattern_type), r.principal, r.host,
                      AclOperation.from_code(r.operation),
                      AclPermissionType.from_code(r.permission_type))


class Admin:
    def __init__(self, bootstrap: str, *, client_id: str = "snakka-cli",
                 config: Mapping[str, str] | None = None,
                 sasl: SaslClientConfig | None = None) -> None:
        """``config``: Kafka client configs (``security.protocol``, ``ssl.*``, ``sasl.*``)."""
        host, port = parse_bootstrap(bootstrap)
        self.conn = KafkaConnection(host, port, client_id=client_id, config=config, sasl=sasl)
        # Connections to other brokers (partition leaders, group coordinators), opened on demand.
        self._extra: dict[tuple[str, int], KafkaConnection] = {}

    async def __aenter__(self) -> Admin:
        await self.conn.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for c in self._extra.values():
            await c.close()
        self._extra.clear()
        await self.conn.close()

    async def _conn_to(self, host: str, port: int) -> KafkaConnection:
        """The bootstrap connection if it is that broker, else a pooled connection to it."""
        if (host, port) == (self.conn.host, self.conn.port):
            return self.conn
        c = self._extra.get((host, port))
        if c is None:
            c = await KafkaConnection(host, port, client_id=self.conn.client_id,
                                      config=self.conn.config,
                                      ssl_context=self.conn.ssl_context,
                                      sasl=self.conn.sasl).connect()
            self._extra[(host, port)] = c
        return c

    # -- topics --------------------------------------------------------------------------
    async def list_topics(self, names: list[str] | None = None):
        req = MetadataRequest(topics=None if names is None else
                              [MetadataRequestTopic(name=n) for n in names],
                              allow_auto_topic_creation=False)
        resp = await self.conn.send(req)
        return [t for t in resp.topics if not t.name.startswith("__") or names]

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None) -> str:
        req = CreateTopicsRequest(topics=[CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication_factor,
            assignments=[], configs=[CreatableTopicConfig(name=k, value=v)
                                     for k, v in (configs or {}).items()])],
            timeout_ms=30000, validate_only=False)
        resp = await self.conn.send(req)
        r = resp.topics[0]
        _check(r.error_code, f"create topic {name}", r.error_message)
        return uuid_to_base64(r.topic_id)

    async def delete_topics(self, names: list[str]) -> None:
        req = DeleteTopicsRequest(topics=[DeleteTopicState(name=n) for n in names],
                                  topic_names=names, timeout_ms=30000)
        resp = await self.conn.send(req)
        for r in resp.responses:
            _check(r.error_code, f"delete topic {r.name}", r.error_message)

    # -- ACLs (kafka-acls.sh) -------------------------------------------------------------
    async def create_acls(self, bindings: list[AclBinding]) -> None:
        """CreateAcls; AdminError naming the first binding that failed."""
        resp = await self.conn.send(CreateAclsRequest(creations=[AclCreation(
            resource_type=int(b.resource_type), resource_name=b.resource_name,
            resource_pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
            operation=int(b.operation), permission_type=int(b.permission_type))
            for b in bindings]))
        for b, r in zip(bindings, resp.results, strict=True):
            _check(r.error_code, f"create ACL {b.entry()} on {b.resource()}", r.error_message)

    async def describe_acls(self, flt: AclFilter | None = None) -> list[AclBinding]:
        """DescribeAcls: every ACL the filter matches (all without one)."""
        f = flt or AclFilter()
        resp = await self.conn.send(DescribeAclsRequest(
            resource_type_filter=int(f.resource_type), resource_name_filter=f.resource_name,
            pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
            host_filter=f.host, operation=int(f.operation),
            permission_type=int(f.permission_type)))
        _check(resp.error_code, "describe ACLs", resp.error_message)
        return [AclBinding(ResourceType.from_code(res.resource_type), res.resource_name,
                           PatternType.from_code(res.pattern_type), a.principal, a.host,
                           AclOperation.from_code(a.operation),
                           AclPermissionType.from_code(a.permission_type))
                for res in resp.resources for a in res.acls]

    async def delete_acls(self, filters: list[AclFilter]) -> list[AclBinding]:
        """DeleteAcls: the ACLs removed (each once, in the order the broker listed them)."""
        resp = await self.conn.send(DeleteAclsRequest(filters=[DeleteAclsFilter(
            resource_type_filter=int(f.resource_type), resource_name_filter=f.resource_name,
            pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
            host_filter=f.host, operation=int(f.operation),
            permission_type=int(f.permission_type)) for f in filters]))
        removed: dict[AclBinding, None] = {}
        for r in resp.filter_results:
            _check(r.error_code, "delete ACLs", r.error_message)
            for m in r.matching_acls:
                _check(m.error_code, "delete ACL", m.error_message)
                removed[_binding(m)] = None
        return list(removed)

    async def topic_overrides(self, name: str) -> dict[str, str]:
        req = DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=2, resource_name=name, configuration_keys=None)])
        resp = await self.conn.send(req)
        r = resp.results[0]
        _check(r.error_code, f"describe configs of {name}", r.error_message)
        return {c.name: c.value for c in r.configs if c.config_source == 1}

    async def partition_offsets(self, topic: str, n: int) -> dict[int, tuple[int, int]]:
        lo = await self.list_offsets(topic, range(n), -2)
        hi = await self.list_offsets(topic, range(n), -1)
        return {p: (lo[p], hi[p]) for p in range(n)}

    async def local_sizes(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Bytes of each partition on its leader's disk (DescribeLogDirs, as Kafka: a tiered
        partition's remote segments are not in it)."""
        out: dict[int, int] = {}
        for (host, port), parts in (await self._by_leader(topic, partitions, "log dirs")).items():
            resp = await (await self._conn_to(host, port)).send(DescribeLogDirsRequest(
                topics=[DescribableLogDirTopic(topic=topic, partitions=parts)]))
            _check(resp.error_code, f"describe log dirs of {topic}")
            for result in resp.results:
                for t in result.topics:
                    for p in t.partitions:
                        out[p.partition_index] = out.get(p.partition_index, 0) + p.partition_size
        return out

    async def list_offsets(self, topic: str, partitions, timestamp: int) -> dict[int, int]:
        """ListOffsets for ``partitions`` of ``topic``, each asked of its leader (Metadata), as
        a Kafka cluster requires: any broker but the leader answers NOT_LEADER_OR_FOLLOWER."""
        by_leader = await self._by_leader(topic, partitions, "list offsets")
        out = {}
        for (host, port), parts in by_leader.items():
            req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsTopic(
                name=topic, partitions=[ListOffsetsPartition(partition_index=p,
                                                             timestamp=timestamp)
                                        for p in parts])])
            lresp = await (await self._conn_to(host, port)).send(req)
            for lp in lresp.topics[0].partitions:
                _check(lp.error_code, f"list offsets of {topic}-{lp.partition_index}")
                out[lp.partition_index] = lp.offset
        return out

    async def _by_leader(self, topic: str, partitions: Iterable[int], what: str
                         ) -> dict[tuple[str, int], list[int]]:
        """``partitions`` of ``topic`` grouped by their leader's address (Metadata)."""
        resp = await self.conn.send(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                                                    allow_auto_topic_creation=False))
        t = resp.topics[0]
        _check(t.error_code, f"metadata of {topic}")
        brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        leaders = {p.partition_index: p.leader_id for p in t.partitions}
        by_leader: dict[tuple[str, int], list[int]] = {}
        for p in partitions:
            if p not in leaders:
                _check(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{what} of {topic}-{p}")
            addr = brokers.get(leaders[p])
            if addr is None:
                _fail(ErrorCode.LEADER_NOT_AVAILABLE, f"{what} of {topic}-{p}")
            by_leader.setdefault(addr, []).append(p)
        return by_leader

    @staticmethod
    async def _settled(op: Callable[[], Awaitable[tuple[int, T]]], retriable: tuple[int, ...]
                       ) -> tuple[int, T]:
        """``op()`` -> (error code, answer), repeated with backoff (bounded by
        COORDINATOR_WAIT_S) while the code is ``retriable``; the last answer."""
        deadline = time.monotonic() + COORDINATOR_WAIT_S
        backoff = 0.05
        while True:
            code, answer = await op()
            if code not in retriable or time.monotonic() >= deadline:
                return code, answer
            await asyncio.sleep(backoff)
            backoff = min(1.0, backoff * 2)

    async def find_coordinator(self, key: str, key_type: int
                               ) -> tuple[int, KafkaConnection]:
        """(node id, connection) of the coordinator of ``key`` (FindCoordinator; key type
        GROUP or TRANSACTION). Retried (bounded by COORDINATOR_WAIT_S) while the answer is
        COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS: Kafka answers so while it
        creates ``__consumer_offsets`` / ``__transaction_state`` on first use, and clients
        retry."""
        async def ask() -> tuple[int, tuple[str | None, int, str, int]]:
            if self.conn.version_for(10) >= 4:
                resp = await self.conn.send(FindCoordinatorRequest(key_type=key_type,
                                                                   coordinator_keys=[key]))
                c = resp.coordinators[0]
                return c.error_code, (c.error_message, c.node_id, c.host, c.port)
            resp = await self.conn.send(FindCoordinatorRequest(key=key, key_type=key_type))
            return resp.error_code, (resp.error_message, resp.node_id, resp.host, resp.port)

        code, (message, node, host, port) = await self._settled(ask, _COORDINATOR_RETRIABLE)
        _check(code, f"find coordinator of {key}", message)
        return node, await self._conn_to(host, port)

    async def _brokers(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every broker (Metadata); the bootstrap one if none."""
        meta = await self.conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
        return [(b.node_id, b.host, b.port) for b in meta.brokers] or [
            (-1, self.conn.host, self.conn.port)]

    async def _topic_metadata(self, topic: str):
        resp = await self.conn.send(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                                                    allow_auto_topic_creation=True))
        t = resp.topics[0]
        _check(t.error_code, f"metadata of {topic}")
        return t

    async def _partition_count(self, topic: str) -> int:
        return len((await self._topic_metadata(topic)).partitions)

    # -- produce / consume ---------------------------------------------------------------
    async def produce_lines(self, topic: str, lines: list[str], *, key_separator: str | None,
                            headers: list[tuple[str, bytes]], partition: int | None, acks: int,
                            compression: str,
                            on_progress: Callable[[int], None] | None = None) -> int:
        """Produce ``lines`` as records; ``on_progress`` gets the running count after every
        request."""
        meta = await self._topic_metadata(topic)
        n_parts = len(meta.partitions)
        rr = itertools.count()
        now = time.time_ns() // 1_000_000
        by_partition: dict[int, list] = {}
        for line in lines:
            key = None
            value = line
            if key_separator is not None and key_separator in line:
                k, value = line.split(key_separator, 1)
                key = k.encode()
            if partition is not None:
                p = partition
            elif key is not None:
                p = murmur2_partition(key, n_parts)
            else:
                p = next(rr) % n_parts
            by_partition.setdefault(p, []).append(
                Record(timestamp=now, key=key, value=value.encode(), headers=tuple(headers)))
        total = 0
        for p, recs in by_partition.items():
            for i in range(0, len(recs), PRODUCE_CHUNK):
                chunk = recs[i:i + PRODUCE_CHUNK]
                batch = build_batch(chunk, compression=_CODECS[compression])
                req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=30000,
                                     # name for Produce <= v12, topic id from v13
                                     topic_data=[TopicProduceData(name=topic, topic_id=meta.topic_id,
                                                                  partition_data=[
                                         PartitionProduceData(index=p, records=batch)])])
                if acks == 0:
                    await self.conn.send_no_response(req)
                else:
                    resp = await self.conn.send(req)
                    r = resp.responses[0].partition_responses[0]
                    _check(r.error_code, f"produce to {topic}-{p}", r.error_message)
                total += len(chunk)
                if on_progress is not None:
                    on_progress(total)
        return total

    async def consume(self, topic: str, on_record: Callable, *, partition: int | None,
                      start: str | int, max_messages: int | None,
                      idle_timeout_ms: int | None,
                      positions: dict[int, int] | None = None,
                      on_progress: Callable[[dict[int, int]], Awaitable[None]] | None = None
                      ) -> int:
        """Fetch ``topic`` (or one ``partition``) from ``start`` (``earliest``, ``latest`` or
        an offset of the one partition) and call ``on_record(record, partition)`` for each
        record, until ``max_messages`` records, or until no record has arrived for
        ``idle_timeout_ms`` (None: never). ``positions`` (partition -> next offset, e.g. a
        group's committed offsets) wins over ``start`` for the partitions it names.
        ``on_progress(positions)`` is awaited after every fetch that delivered records and
        once at the end (a group consumer commits there)."""
        n_parts = await self._partition_count(topic)
        if partition is not None and not 0 <= partition < n_parts:
            raise AdminError(f"topic {topic} has no partition {partition} "
                             f"(it has {n_parts})")
        parts = [partition] if partition is not None else list(range(n_parts))
        known = {p: o for p, o in (positions or {}).items() if p in parts}
        rest = [p for p in parts if p not in known]
        if isinstance(start, int):
            pos = {p: start for p in rest}
        elif rest:
            pos = await self.list_offsets(topic, rest, -2 if start == "earliest" else -1)
        else:
            pos = {}
        pos.update(known)
        seen = 0
        idle_since = time.monotonic()

        async def progress() -> None:
            if on_progress is not None:
                await on_progress(dict(pos))

        while max_messages is None or seen < max_messages:
            req = FetchRequest(replica_id=-1, max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=1,
                               max_bytes=FETCH_MAX_BYTES, isolation_level=0, session_id=0,
                               session_epoch=-1, topics=[FetchTopic(topic=topic, partitions=[
                                   FetchPartition(partition=p, fetch_offset=pos[p],
                                                  partition_max_bytes=FETCH_MAX_BYTES)
                                   for p in parts])], forgotten_topics_data=[], rack_id="")
            resp = await self.conn.send(req, version=min(12, self.conn.version_for(1)))
            got = 0
            for t in resp.responses:
                for pd in t.partitions:
                    _check(pd.error_code, f"fetch {topic}-{pd.partition_index} at offset "
                                          f"{pos[pd.partition_index]}")
                    if not pd.records:
                        continue
                    for rec in iter_records(bytes(pd.records)):
                        if rec.offset < pos[pd.partition_index]:
                            continue
                        on_record(rec, pd.partition_index)
                        pos[pd.partition_index] = rec.offset + 1
                        got += 1
                        seen += 1
                        if max_messages is not None and seen >= max_messages:
                            await progress()
                            return seen
            if got:
                idle_since = time.monotonic()
                await progress()
            elif (idle_timeout_ms is not None
                  and (time.monotonic() - idle_since) * 1000 >= idle_timeout_ms):
                break
        await progress()
        return seen

    # -- transactions (kafka-transactions.sh) --------------------------------------------
    async def describe_producers(self, topic: str, partitions: Iterable[int]
                                 ) -> dict[int, list[ProducerInfo]]:
        """The active producers of each partition (DescribeProducers at its leader)."""
        out: dict[int, list[ProducerInfo]] = {}
        for (host, port), parts in (await self._by_leader(
                topic, partitions, "describe producers")).items():
            resp = await (await self._conn_to(host, port)).send(DescribeProducersRequest(
                topics=[TopicRequest(name=topic, partition_indexes=parts)]))
            for t in resp.topics:
                for p in t.partitions:
                    _check(p.error_code, f"describe producers of {topic}-{p.partition_index}",
                           p.error_message)
                    out[p.partition_index] = [
                        ProducerInfo(s.producer_id, s.producer_epoch, s.last_sequence,
                                     s.last_timestamp, s.coordinator_epoch,
                                     s.current_txn_start_offset)
                        for s in p.active_producers]
        return out

    async def list_transactions(self, *, states: Iterable[str] = (),
                                producer_ids: Iterable[int] = (), duration_ms: int = -1
                                ) -> list[TransactionListing]:
        """Every broker's transactional ids (ListTransactions), filtered by state name,
        producer id and (v1, ``duration_ms`` >= 0) transactions running longer than that."""
        states, producer_ids = list(states), list(producer_ids)
        out: list[TransactionListing] = []
        for node, host, port in await self._brokers():
            conn = await self._conn_to(host, port)
            if duration_ms >= 0 and conn.version_for(66) < 1:
                raise AdminError(f"broker {node} does not support ListTransactions v1 (the "
                                 "duration filter)")
            req = ListTransactionsRequest(state_filters=states, producer_id_filters=producer_ids,
                                          duration_filter=duration_ms)

            async def ask(conn: KafkaConnection = conn,
                          req: ListTransactionsRequest = req) -> tuple[int, Any]:
                resp = await conn.send(req)
                return resp.error_code, resp

            # Kafka answers COORDINATOR_LOAD_IN_PROGRESS while it loads __transaction_state.
            code, resp = await self._settled(ask, _COORDINATOR_RETRIABLE)
            _check(code, f"list transactions on broker {node}")
            if resp.unknown_state_filters:
                raise AdminError("unknown transaction state(s): "
                                 + ", ".join(resp.unknown_state_filters),
                                 ErrorCode.INVALID_REQUEST)
            out.extend(TransactionListing(s.transactional_id, node, s.producer_id,
                                          s.transaction_state)
                       for s in resp.transaction_states)
        return sorted(out, key=lambda t: (t.transactional_id, t.coordinator_id))

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """DescribeTransactions at the id's transaction coordinator, found again and retried
        (bounded by COORDINATOR_WAIT_S) while the answer is NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS, as Kafka's admin client
        does (Kafka answers so while ``__transaction_state`` is created and loaded)."""
        async def ask() -> tuple[int, tuple[int, Any]]:
            node, conn = await self.find_coordinator(transactional_id, KEY_TYPE_TRANSACTION)
            resp = await conn.send(DescribeTransactionsRequest(
                transactional_ids=[transactional_id]))
            return resp.transaction_states[0].error_code, (node, resp.transaction_states[0])

        _, (node, s) = await self._settled(ask, _TXN_COORDINATOR_RETRIABLE)
        _check(s.error_code, f"describe transaction {transactional_id}")
        return TransactionDescription(
            node, s.transactional_id, s.producer_id, s.producer_epoch, s.transaction_state,
            s.transaction_timeout_ms, s.transaction_start_time_ms,
            sorted((t.topic, p) for t in s.topics for p in t.partitions))

    async def abort_spec(self, topic: str, partition: int, start_offset: int
                         ) -> tuple[int, int, int]:
        """(producer id, epoch, coordinator epoch) of the open transaction that starts at
        ``start_offset`` of the partition (DescribeProducers); the coordinator epoch is 0 when
        the partition never saw a marker of that producer (-1), as kafka-transactions.sh."""
        producers = (await self.describe_producers(topic, [partition]))[partition]
        for p in producers:
            if p.current_txn_start_offset == start_offset:
                return p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0)
        raise AdminError(f"no open transaction starts at offset {start_offset} of "
                         f"{topic}-{partition}")

    async def abort_transaction(self, topic: str, partition: int, producer_id: int,
                                producer_epoch: int, coordinator_epoch: int) -> None:
        """Write an ABORT marker for the producer's transaction in the partition
        (WriteTxnMarkers at its leader): what the admin client's abortTransaction does for a
        hanging transaction."""
        ((host, port), _), = (await self._by_leader(topic, [partition], "abort")).items()
        conn = await self._conn_to(host, port)
        resp = await conn.send(WriteTxnMarkersRequest(markers=[WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            topics=[WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
            coordinator_epoch=max(coordinator_epoch, 0))]))
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    _check(p.error_code, f"abort transaction of producer {producer_id} on "
                                         f"{t.name}-{p.partition_index}")

    async def find_hanging(self, *, topic: str | None = None, partition: int | None = None,
                           broker_id: int | None = None,
                           max_transaction_timeout_ms: int =
                           DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN * 60_000,
                           now_ms: int | None = None) -> list[HangingTransaction]:
        """Open transactions older than ``max_transaction_timeout_ms`` (by the producer's last
        write) that no coordinator will finish: their producer id is listed by no coordinator,
        its transactional id is gone, or its transaction does not include the partition.
        Scope: one partition, a topic, or (``broker_id``) every partition with a replica on
        that broker, as kafka-transactions.sh find-hanging."""
        if topic is None and broker_id is None:
            raise AdminError("find-hanging needs a topic or a broker id to limit the search")
        if partition is not None and topic is None:
            raise AdminError("a partition needs its topic")
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        candidates: list[HangingTransaction] = []
        for t, parts in (await self._partitions_to_search(topic, partition, broker_id)).items():
            for i in range(0, len(parts), DESCRIBE_PRODUCERS_BATCH):
                found = await self.describe_producers(t, parts[i:i + DESCRIBE_PRODUCERS_BATCH])
                for p, producers in sorted(found.items()):
                    candidates.extend(
                        HangingTransaction(t, p, s) for s in producers
                        if s.current_txn_start_offset >= 0
                        and now - s.last_timestamp > max_transaction_timeout_ms)
        if not candidates:
            return []
        pids = sorted({c.producer.producer_id for c in candidates})
        tids = {t.producer_id: t.transactional_id
                for t in await self.list_transactions(producer_ids=pids)}
        described: dict[str, TransactionDescription | None] = {}
        for tid in sorted(set(tids.values())):
            try:
                described[tid] = await self.describe_transaction(tid)
            except AdminError as e:
                if e.code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    raise
                described[tid] = None
        hanging = []
        for c in candidates:
            known = tids.get(c.producer.producer_id)
            d = described.get(known) if known is not None else None
            # A transaction the coordinator still knows with this partition in it (Ongoing, or
            # Prepare* with the marker not yet written) is the coordinator's to finish.
            if d is None or (c.topic, c.partition) not in d.partitions:
                hanging.append(c)
        return hanging

    async def _partitions_to_search(self, topic: str | None, partition: int | None,
                                    broker_id: int | None) -> dict[str, list[int]]:
        if topic is not None and partition is not None:
            return {topic: [partition]}
        names = None if topic is None else [MetadataRequestTopic(name=topic)]
        resp = await self.conn.send(MetadataRequest(topics=names, allow_auto_topic_creation=False))
        out: dict[str, list[int]] = {}
        for t in resp.topics:
            _check(t.error_code, f"metadata of {t.name}")
            parts = sorted(p.partition_index for p in t.partitions
                           if broker_id is None or broker_id in p.replica_nodes)
            if parts:
                out[t.name] = parts
        return out

    # -- SCRAM users (AlterUserScramCredentials / DescribeUserScramCredentials) ------------
    async def describe_users(self, names: list[str] | None = None
                             ) -> dict[str, list[tuple[str, int]]]:
        """User -> [(mechanism name, iterations)]; every user with a credential when
        ``names`` is empty or None."""
        req = DescribeUserScramCredentialsRequest(
            users=[UserName(name=n) for n in names] if names else None)
        resp = await self.conn.send(req)
        _check(resp.error_code, "describe SCRAM users", resp.error_message)
        out: dict[str, list[tuple[str, int]]] = {}
        for r in resp.results:
            _check(r.error_code, f"describe user {r.user}", r.error_message)
            out[r.user] = [(ScramMechanism(c.mechanism).mechanism_name, c.iterations)
                           for c in r.credential_infos]
        return out

    async def upsert_user(self, name: str, mechanism: str, password: str,
                          iterations: int = MIN_ITERATIONS) -> None:
        """Add or change a user's SCRAM credential (the salted password is computed here,
        as Kafka's AdminClient does; the password never leaves this process)."""
        mech = ScramMechanism.from_mechanism_name(mechanism)
        if mech is ScramMechanism.UNKNOWN:
            raise AdminError(f"unknown SCRAM mechanism {mechanism!r} (SCRAM-SHA-256 or "
                             "SCRAM-SHA-512)")
        salt = secrets.token_bytes(32)
        salted = salted_password(mech, password.encode(), salt, max(1, iterations))
        await self._alter_users(upsertions=[ScramCredentialUpsertion(
            name=name, mechanism=int(mech), iterations=iterations, salt=salt,
            salted_password=salted)], deletions=[])

    async def delete_user(self, name: str, mechanism: str) -> None:
        mech = ScramMechanism.from_mechanism_name(mechanism)
        await self._alter_users(upsertions=[], deletions=[ScramCredentialDeletion(
            name=name, mechanism=int(mech))])

    async def _alter_users(self, upsertions: list, deletions: list) -> None:
        resp = await self.conn.send(AlterUserScramCredentialsRequest(
            upsertions=upsertions, deletions=deletions))
        for r in resp.results:
            _check(r.error_code, f"alter user {r.user}", r.error_message)
