"""A small synchronous Kafka client for the Spark data source (driver and executors).

What this module owns
    Metadata (topics, partitions, leaders), ListOffsets (earliest / latest / by timestamp),
    Fetch of one partition, InitProducerId and Produce, each routed to the partition's
    leader. It speaks only the public Kafka protocol through
    :class:`snakka.client.connection.KafkaConnection` (version negotiation, correlation ids),
    so the data source works against any Kafka-compatible cluster.

Why synchronous
    Spark calls the data source from plain threads (``read()`` is a generator, ``write()``
    consumes an iterator), so each :class:`SparkKafkaClient` owns a private asyncio event
    loop and runs one request at a time on it. Nothing is shared between clients; a client
    is created inside ``read()`` / ``write()`` on the executor and closed there.

Security
    ``ClientSettings.security`` holds the validated ``kafka.security.protocol`` /
    ``kafka.ssl.*`` / ``kafka.sasl.*`` configs; each client builds the TLS context (reading
    the key and trust stores at the paths given, on the machine it runs on) and the SASL
    config from them once, and every connection it opens (bootstrap, leaders, coordinators)
    uses both. A refused authentication fails at once with the broker's message (no other
    bootstrap server is tried: it would refuse the same credentials).

Timeouts and errors
    Every request is bounded by ``request.timeout.ms`` (default 30 s) and every connection
    attempt (TCP, the TLS handshake, ApiVersions and the SASL exchange together) by
    ``socket.connection.setup.timeout.ms`` (default 10 s); a broker that is down
    fails with :class:`SnakkaSparkError` naming the address, never a hang. Retriable
    partition errors (leader changes) refresh metadata and retry a bounded number of times.

Transactions (the exactly-once sink, see :mod:`.writer`)
    FindCoordinator (key type 1 for a transactional id, 0 for a group), InitProducerId with a
    transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn and
    OffsetFetch with RequireStable, at the versions of Kafka's classic transaction protocol
    (KIP-890's "transaction version 1": AddPartitionsToTxn <= v3, Produce <= v11,
    TxnOffsetCommit <= v4, EndTxn <= v4), whose meaning every broker that has transactions
    shares; Kafka gives the later versions other semantics (implicit partition adds, an epoch
    bump per transaction), so a client must not send them without following those.
    Coordinator answers that mean "ask again" (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, UNSTABLE_OFFSET_COMMIT) are retried
    with a backoff until ``request.timeout.ms`` has passed; a fenced producer raises
    :class:`ProducerFencedError`.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from snakka.client.connection import ConnectionClosed, KafkaConnection, client_ssl_context
from snakka.client.sasl import SaslAuthenticationError, SaslClientConfig
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from snakka.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from snakka.protocol.messages.end_txn_request import EndTxnRequest
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest
from snakka.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
)
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

from .options import EARLIEST, LATEST, ClientSettings

FETCH_API_KEY = 1
PRODUCE_API_KEY = 0
FIND_COORDINATOR_API_KEY = 10
OFFSET_FETCH_API_KEY = 9
TXN_OFFSET_COMMIT_API_KEY = 28
ADD_PARTITIONS_TO_TXN_API_KEY = 24
END_TXN_API_KEY = 26
# The classic transaction protocol's last versions (see the module docstring).
MAX_TXN_PRODUCE_VERSION = 11
MAX_ADD_PARTITIONS_TO_TXN_VERSION = 3
MAX_TXN_OFFSET_COMMIT_VERSION = 4
MAX_END_TXN_VERSION = 4
# OffsetFetch v7 is the first with RequireStable; v8+ batch groups (not needed here).
OFFSET_FETCH_VERSION = 7
COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1
# Coordinator answers a client retries (Kafka's clients do the same, bounded by their timeout).
COORDINATOR_RETRY = frozenset({
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.UNSTABLE_OFFSET_COMMIT,
})
# A newer producer with this transactional id exists (or the transaction timed out and its
# epoch was bumped): this one may not write or end a transaction again.
FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND})
# Fetch v13+ addresses topics by id only; v12 carries names and every Kafka >= 2.8 serves it.
MAX_FETCH_VERSION = 12
# Bounded retries for retriable partition errors (leader moves, a partition not ready yet).
MAX_METADATA_RETRIES = 5
RETRY_BACKOFF_S = 0.1

TopicPartition = tuple[str, int]

# Partition errors that mean "ask the new leader": refresh metadata and retry. Other
# errors go back to the caller, which knows what they mean for it (e.g. a deleted topic is
# data loss for a reader).
LEADER_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
})


class SnakkaSparkError(RuntimeError):
    """A Kafka request made by the Spark data source failed (a clear message, no traceback
    needed to understand it)."""


class SnakkaAuthenticationError(SnakkaSparkError):
    """The broker refused the SASL credentials, or the TLS handshake failed (an untrusted
    or mismatched certificate): retrying will not help."""


class ProducerFencedError(SnakkaSparkError):
    """A transactional request was refused because a newer producer with the same
    transactional id exists, or the coordinator ended the transaction (timeout)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def is_retriable(code: int) -> bool:
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


@dataclass
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    error_code: int


@dataclass
class FetchResult:
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: memoryview | None
    aborted_transactions: list | None


class SparkKafkaClient:
    """One-request-at-a-time client: ``with SparkKafkaClient(settings) as c: ...``."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._loop = asyncio.new_event_loop()
        self._conns: dict[Any, KafkaConnection] = {}  # node id (or "bootstrap") -> connection
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._topic_ids: dict[str, bytes] = {}
        security = dict(settings.security)
        self._protocol = security.get("security.protocol", "PLAINTEXT")
        try:
            # Built here, on the machine that connects: the store files must exist there.
            self._ssl_context = client_ssl_context(security)
            self._sasl = SaslClientConfig.from_config(security)
        except ValueError as e:
            self._loop.close()
            raise SnakkaSparkError(
                f"the Kafka security options cannot be used on this host ({e}); key and trust "
                "store files must be readable at the same path on the driver and on every "
                "executor") from None

    # -- plumbing ---------------------------------------------------------------------------
    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def _connect(self, host: str, port: int) -> KafkaConnection:
        s = self.settings
        conn = KafkaConnection(host, port, client_id=s.client_id,
                               request_timeout=s.request_timeout_ms / 1000,
                               ssl_context=self._ssl_context, sasl=self._sasl)
        timeout = s.connect_timeout_ms / 1000
        try:
            # One bound for the whole setup: TCP, TLS handshake, ApiVersions, SASL.
            self._run(asyncio.wait_for(conn.connect(timeout=timeout), timeout))
        except SaslAuthenticationError as e:
            self._run(conn.close())
            assert self._sasl is not None
            raise SnakkaAuthenticationError(
                f"SASL authentication with Kafka broker {host}:{port} failed "
                f"(kafka.security.protocol={self._protocol}, "
                f"kafka.sasl.mechanism={self._sasl.mechanism}): {e}") from None
        except ssl.SSLError as e:
            self._run(conn.close())
            raise SnakkaAuthenticationError(
                f"TLS handshake with Kafka broker {host}:{port} failed "
                f"(kafka.security.protocol={self._protocol}; check kafka.ssl.truststore.* and "
                f"kafka.ssl.endpoint.identification.algorithm): {e}") from None
        except (TimeoutError, OSError, ConnectionClosed) as e:
            self._run(conn.close())
            if isinstance(e, TimeoutError):
                reason = (f"timed out (kafka.socket.connection.setup.timeout.ms="
                          f"{s.connect_timeout_ms}, kafka.request.timeout.ms="
                          f"{s.request_timeout_ms})")
            else:
                reason = str(e) or type(e).__name__
            raise SnakkaSparkError(f"cannot connect to Kafka broker {host}:{port}: {reason}") from None
        return conn

    def _bootstrap(self) -> KafkaConnection:
        conn = self._conns.get("bootstrap")
        if conn is not None:
            return conn
        errors = []
        for host, port in self.settings.bootstrap_servers:
            try:
                conn = self._connect(host, port)
            except SnakkaAuthenticationError:
                raise
            except SnakkaSparkError as e:
                errors.append(str(e))
                continue
            self._conns["bootstrap"] = conn
            return conn
        raise SnakkaSparkError("no Kafka broker reachable (kafka.bootstrap.servers): "
                               + "; ".join(errors))

    def _node(self, node_id: int) -> KafkaConnection:
        conn = self._conns.get(node_id)
        if conn is not None:
            return conn
        if node_id not in self._brokers:
            raise SnakkaSparkError(f"broker {node_id} is not in the cluster metadata")
        host, port = self._brokers[node_id]
        boot = self._conns.get("bootstrap")
        if boot is not None and (boot.host, boot.port) == (host, port):
            conn = boot  # the bootstrap broker is this node: one connection is enough
        else:
            conn = self._connect(host, port)
        self._conns[node_id] = conn
        return conn

    def _send(self, conn: KafkaConnection, request: Any, version: int | None = None) -> Any:
        try:
            return self._run(conn.send(request, version))
        except TimeoutError:
            self._drop(conn)
            raise SnakkaSparkError(
                f"{type(request).__name__} to {conn.host}:{conn.port} got no response within "
                f"kafka.request.timeout.ms={self.settings.request_timeout_ms}") from None
        except (ConnectionClosed, OSError) as e:
            self._drop(conn)
            raise SnakkaSparkError(
                f"connection to {conn.host}:{conn.port} failed during "
                f"{type(request).__name__}: {e}") from None

    def _drop(self, conn: KafkaConnection) -> None:
        for k, c in list(self._conns.items()):
            if c is conn:
                del self._conns[k]
        self._run(conn.close())

    def close(self) -> None:
        for conn in set(self._conns.values()):
            try:
                self._run(conn.close())
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._conns.clear()
        self._loop.close()

    def __enter__(self) -> SparkKafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata ---------------------------------------------------------------------------
    def metadata(self, topics: Iterable[str] | None) -> dict[str, list[PartitionInfo] | int]:
        """Partitions of ``topics`` (all topics if None). A topic that cannot be described
        maps to its error code instead of a list."""
        names = None if topics is None else list(topics)
        req = MetadataRequest(
            topics=None if names is None else [MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=False)
        resp = self._send(self._bootstrap(), req)
        for b in resp.brokers:
            self._brokers[b.node_id] = (b.host, b.port)
        out: dict[str, list[PartitionInfo] | int] = {}
        for t in resp.topics:
            if t.error_code:
                out[t.name] = t.error_code
                for tp in [tp for tp in self._leaders if tp[0] == t.name]:
                    del self._leaders[tp]  # deleted (or not yet visible): no stale leader
                continue
            if t.topic_id is not None:
                self._topic_ids[t.name] = t.topic_id
            parts = []
            for p in t.partitions:
                parts.append(PartitionInfo(t.name, p.partition_index, p.leader_id, p.error_code))
                self._leaders[(t.name, p.partition_index)] = p.leader_id
            out[t.name] = sorted(parts, key=lambda x: x.partition)
        return out

    def partitions_for(self, *, subscribe: Iterable[str] | None = None,
                       pattern: str | None = None,
                       assign: Iterable[TopicPartition] | None = None,
                       missing_ok: bool = False) -> list[TopicPartition]:
        """Resolve a subscription to the partitions that exist now."""
        if pattern is not None:
            meta = self.metadata(None)
            rx = re.compile(pattern)
            return sorted((t, p.partition) for t, parts in meta.items()
                          if not isinstance(parts, int) and not t.startswith("__")
                          and rx.fullmatch(t) for p in parts)
        if subscribe is not None:
            topics = list(dict.fromkeys(subscribe))
        else:
            assert assign is not None
            topics = sorted({t for t, _ in assign})
        meta = self.metadata(topics)
        out: list[TopicPartition] = []
        for t in topics:
            parts = meta.get(t, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if isinstance(parts, int):
                if missing_ok and parts == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    continue
                raise SnakkaSparkError(
                    f"topic '{t}' cannot be read: {error_name(parts)}"
                    + (" (the topic does not exist)"
                       if parts == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else ""))
            out.extend((t, p.partition) for p in parts)
        if assign is not None:
            have = set(out)
            missing = [tp for tp in assign if tp not in have]
            if missing and not missing_ok:
                raise SnakkaSparkError(
                    "option 'assign' names partitions that do not exist: "
                    + ", ".join(f"{t}-{p}" for t, p in missing))
            return sorted(tp for tp in assign if tp in have)
        return sorted(out)

    def _leader_conn(self, tp: TopicPartition) -> KafkaConnection:
        if tp not in self._leaders:
            meta = self.metadata([tp[0]]).get(tp[0], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if meta == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION \
                    or (not isinstance(meta, int) and tp not in self._leaders):
                raise _Missing(tp)
        leader = self._leaders.get(tp, -1)
        if leader < 0:
            raise _Retriable(ErrorCode.LEADER_NOT_AVAILABLE)
        return self._node(leader)

    def _with_leader_retries(self, tps: list[TopicPartition], fn: Any) -> Any:
        """Run ``fn(conn, tps_of_that_leader)`` per leader, refreshing metadata on leader
        errors, a bounded number of times."""
        for attempt in range(MAX_METADATA_RETRIES + 1):
            try:
                by_leader: dict[int, list[TopicPartition]] = {}
                for tp in tps:
                    self._leader_conn(tp)
                    by_leader.setdefault(self._leaders[tp], []).append(tp)
                result: dict = {}
                for leader, group in by_leader.items():
                    result.update(fn(self._node(leader), group))
                return result
            except _Retriable as e:
                if attempt == MAX_METADATA_RETRIES:
                    raise SnakkaSparkError(
                        f"partition leaders unavailable after {MAX_METADATA_RETRIES} retries: "
                        f"{error_name(e.code)}") from None
                time.sleep(RETRY_BACKOFF_S * (attempt + 1))
                self.metadata(sorted({t for t, _ in tps}))
        raise AssertionError("unreachable")

    # -- offsets ----------------------------------------------------------------------------
    def list_offsets(self, query: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Kafka ListOffsets: ``{tp: timestamp}`` (EARLIEST=-2, LATEST=-1 or a timestamp in
        ms) to ``{tp: offset}``; -1 where no record has a timestamp >= the one asked."""
        if not query:
            return {}

        def one(conn: KafkaConnection, group: list[TopicPartition]) -> dict:
            topics: dict[str, list] = {}
            for t, p in group:
                topics.setdefault(t, []).append(
                    ListOffsetsPartition(partition_index=p, timestamp=query[(t, p)],
                                         current_leader_epoch=-1))
            req = ListOffsetsRequest(
                replica_id=-1, isolation_level=self.settings.isolation_level,
                topics=[ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])
            resp = self._send(conn, req)
            out = {}
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        if p.error_code in LEADER_ERRORS or is_retriable(p.error_code):
                            raise _Retriable(p.error_code)
                        raise SnakkaSparkError(
                            f"ListOffsets of {t.name}-{p.partition_index} failed: "
                            f"{error_name(p.error_code)}")
                    out[(t.name, p.partition_index)] = p.offset
            return out

        try:
            return self._with_leader_retries(sorted(query), one)
        except _Missing as e:
            raise SnakkaSparkError(f"ListOffsets: {e.tp[0]}-{e.tp[1]} does not exist") from None

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets({tp: EARLIEST for tp in tps})

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets({tp: LATEST for tp in tps})

    # -- fetch ------------------------------------------------------------------------------
    def fetch(self, tp: TopicPartition, offset: int, *, max_wait_ms: int | None = None) -> FetchResult:
        """One Fetch of one partition from its leader (retrying leader moves)."""
        s = self.settings

        def one(conn: KafkaConnection, group: list[TopicPartition]) -> dict:
            version = min(MAX_FETCH_VERSION, conn.version_for(FETCH_API_KEY))
            req = FetchRequest(
                replica_id=-1, max_wait_ms=s.fetch_max_wait_ms if max_wait_ms is None else max_wait_ms,
                min_bytes=1, max_bytes=s.fetch_max_bytes, isolation_level=s.isolation_level,
                session_id=0, session_epoch=-1,
                topics=[FetchTopic(topic=tp[0], topic_id=self._topic_ids.get(tp[0]),
                                   partitions=[FetchPartition(
                                       partition=tp[1], current_leader_epoch=-1,
                                       fetch_offset=offset, last_fetched_epoch=-1,
                                       log_start_offset=-1,
                                       partition_max_bytes=s.max_partition_fetch_bytes)])],
                forgotten_topics_data=[], rack_id="")
            resp = self._send(conn, req, version)
            if resp.error_code:
                raise SnakkaSparkError(f"Fetch of {tp[0]}-{tp[1]} failed: "
                                       f"{error_name(resp.error_code)}")
            for t in resp.responses:
                for p in t.partitions:
                    if p.partition_index != tp[1]:
                        continue
                    if p.error_code in LEADER_ERRORS:
                        raise _Retriable(p.error_code)
                    return {tp: FetchResult(p.error_code, p.high_watermark, p.last_stable_offset,
                                            p.log_start_offset, p.records,
                                            p.aborted_transactions)}
            raise SnakkaSparkError(f"Fetch response has no data for {tp[0]}-{tp[1]}")

        try:
            return self._with_leader_retries([tp], one)[tp]
        except _Missing:
            return FetchResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, None, None)

    # -- produce ----------------------------------------------------------------------------
    def init_producer_id(self) -> tuple[int, int]:
        """An idempotent producer id and epoch (InitProducerId without transactional id)."""
        resp = self._send(self._bootstrap(), InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1))
        if resp.error_code:
            raise SnakkaSparkError(f"InitProducerId failed: {error_name(resp.error_code)}")
        return resp.producer_id, resp.producer_epoch

    def produce(self, tp: TopicPartition, batch: bytes, *, acks: int,
                timeout_ms: int, transactional_id: str | None = None) -> tuple[int, int]:
        """Send one record batch to the leader of ``tp``; returns (error code, base offset).
        Leader errors are retried here; other errors are returned to the caller. A batch of
        a transaction names its ``transactional_id`` (the partition must have been added
        with :meth:`add_partitions_to_txn`)."""

        def one(conn: KafkaConnection, group: list[TopicPartition]) -> dict:
            req = ProduceRequest(
                transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
                topic_data=[TopicProduceData(name=tp[0], topic_id=self._topic_ids.get(tp[0]),
                                             partition_data=[PartitionProduceData(
                                                 index=tp[1], records=batch)])])
            if acks == 0:
                self._run(conn.send_no_response(req))
                return {tp: (0, -1)}
            version = None
            if transactional_id is not None:
                version = min(MAX_TXN_PRODUCE_VERSION, conn.version_for(PRODUCE_API_KEY))
            resp = self._send(conn, req, version)
            r = resp.responses[0].partition_responses[0]
            if r.error_code in LEADER_ERRORS:
                raise _Retriable(r.error_code)
            return {tp: (r.error_code, r.base_offset)}

        try:
            return self._with_leader_retries([tp], one)[tp]
        except _Missing:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1

    def topic_id(self, topic: str) -> bytes | None:
        return self._topic_ids.get(topic)

    # -- transactions -----------------------------------------------------------------------
    def _coordinator(self, key: str, key_type: int) -> KafkaConnection:
        """A connection to the coordinator of a group (key type 0) or a transactional id
        (key type 1), found with FindCoordinator and cached until it says NOT_COORDINATOR."""
        cached = self._conns.get((key_type, key))
        if cached is not None:
            return cached

        def find() -> tuple[int, Any]:
            boot = self._bootstrap()
            if boot.version_for(FIND_COORDINATOR_API_KEY) >= 4:
                resp = self._send(boot, FindCoordinatorRequest(key_type=key_type,
                                                               coordinator_keys=[key]))
                c = resp.coordinators[0]
                return c.error_code, c
            resp = self._send(boot, FindCoordinatorRequest(key=key, key_type=key_type))
            return resp.error_code, resp

        c = self._retrying(f"FindCoordinator of {key!r}", find)
        self._brokers[c.node_id] = (c.host, c.port)
        conn = self._node(c.node_id)
        self._conns[(key_type, key)] = conn
        return conn

    def _retrying(self, what: str, attempt: Any) -> Any:
        """``attempt() -> (error code, result)``, repeated with a growing backoff while the
        error is one of COORDINATOR_RETRY, for at most ``request.timeout.ms``; any other error
        raises (FENCED ones as :class:`ProducerFencedError`)."""
        deadline = time.monotonic() + self.settings.request_timeout_ms / 1000
        backoff = 0.02
        while True:
            code, result = attempt()
            if code == ErrorCode.NONE:
                return result
            if code in FENCED:
                raise ProducerFencedError(f"{what} failed: {error_name(code)}", code)
            if code not in COORDINATOR_RETRY or time.monotonic() + backoff > deadline:
                raise SnakkaSparkError(f"{what} failed: {error_name(code)}")
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                for k in [k for k in self._conns if isinstance(k, tuple)]:
                    del self._conns[k]  # find the coordinators again
            time.sleep(backoff)
            backoff = min(0.5, backoff * 2)

    def init_transactions(self, transactional_id: str, transaction_timeout_ms: int
                          ) -> tuple[int, int]:
        """InitProducerId with a transactional id: (producer id, epoch) of the newest
        producer of ``transactional_id``. The coordinator fences every older producer of the
        id and aborts the transaction one of them left open (answering CONCURRENT_TRANSACTIONS
        until that is done, which is retried here)."""
        def attempt() -> tuple[int, Any]:
            conn = self._coordinator(transactional_id, COORDINATOR_TRANSACTION)
            resp = self._send(conn, InitProducerIdRequest(
                transactional_id=transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                producer_id=-1, producer_epoch=-1))
            return resp.error_code, (resp.producer_id, resp.producer_epoch)

        return self._retrying(f"InitProducerId of {transactional_id!r}", attempt)

    def add_partitions_to_txn(self, transactional_id: str, producer_id: int, epoch: int,
                              tps: Iterable[TopicPartition]) -> None:
        """Make ``tps`` part of the open transaction (before the first batch to them)."""
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)

        def attempt() -> tuple[int, None]:
            conn = self._coordinator(transactional_id, COORDINATOR_TRANSACTION)
            version = min(MAX_ADD_PARTITIONS_TO_TXN_VERSION,
                          conn.version_for(ADD_PARTITIONS_TO_TXN_API_KEY))
            resp = self._send(conn, AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=transactional_id,
                v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[AddPartitionsToTxnTopic(name=t, partitions=ps)
                                     for t, ps in topics.items()]), version)
            codes = [r.partition_error_code for t in resp.results_by_topic_v3_and_below
                     for r in t.results_by_partition]
            # OPERATION_NOT_ATTEMPTED marks the partitions held back by another's error.
            real = [c for c in codes if c not in (0, ErrorCode.OPERATION_NOT_ATTEMPTED)]
            return (real[0] if real else resp.error_code), None

        self._retrying(f"AddPartitionsToTxn of {transactional_id!r}", attempt)

    def add_offsets_to_txn(self, transactional_id: str, producer_id: int, epoch: int,
                           group_id: str) -> None:
        """Make ``group_id``'s offsets part of the open transaction (before TxnOffsetCommit)."""
        def attempt() -> tuple[int, None]:
            conn = self._coordinator(transactional_id, COORDINATOR_TRANSACTION)
            resp = self._send(conn, AddOffsetsToTxnRequest(
                transactional_id=transactional_id, producer_id=producer_id,
                producer_epoch=epoch, group_id=group_id))
            return resp.error_code, None

        self._retrying(f"AddOffsetsToTxn of {transactional_id!r}", attempt)

    def txn_offset_commit(self, transactional_id: str, producer_id: int, epoch: int,
                          group_id: str, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        """Commit ``{tp: (offset, metadata)}`` for ``group_id`` inside the transaction: they
        become visible when it commits, and vanish if it aborts."""
        topics: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
        for (t, p), (off, meta) in offsets.items():
            topics.setdefault(t, []).append(TxnOffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_leader_epoch=-1,
                committed_metadata=meta))

        def attempt() -> tuple[int, None]:
            conn = self._coordinator(group_id, COORDINATOR_GROUP)
            version = min(MAX_TXN_OFFSET_COMMIT_VERSION,
                          conn.version_for(TXN_OFFSET_COMMIT_API_KEY))
            resp = self._send(conn, TxnOffsetCommitRequest(
                transactional_id=transactional_id, group_id=group_id,
                producer_id=producer_id, producer_epoch=epoch,
                generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                topics=[TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                        for t, ps in topics.items()]), version)
            codes = [p.error_code for t in resp.topics for p in t.partitions if p.error_code]
            return (codes[0] if codes else 0), None

        self._retrying(f"TxnOffsetCommit of {group_id!r}", attempt)

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, *,
                commit: bool) -> None:
        """Commit or abort the open transaction of (``producer_id``, ``epoch``). Any
        process may send it (the driver ends its tasks' transactions); a retry of a
        completed EndTxn with the same outcome is answered NONE by the coordinator."""
        def attempt() -> tuple[int, None]:
            conn = self._coordinator(transactional_id, COORDINATOR_TRANSACTION)
            version = min(MAX_END_TXN_VERSION, conn.version_for(END_TXN_API_KEY))
            resp = self._send(conn, EndTxnRequest(
                transactional_id=transactional_id, producer_id=producer_id,
                producer_epoch=epoch, committed=commit), version)
            return resp.error_code, None

        what = "commit" if commit else "abort"
        self._retrying(f"EndTxn ({what}) of {transactional_id!r}", attempt)

    def committed_offsets(self, group_id: str, tps: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, tuple[int, str | None]]:
        """OffsetFetch with RequireStable: ``{tp: (offset, metadata)}`` (-1 when none),
        waiting (UNSTABLE_OFFSET_COMMIT is retried) while a transaction that commits offsets
        of the group is still open, so what comes back is final."""
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)

        def attempt() -> tuple[int, Any]:
            conn = self._coordinator(group_id, COORDINATOR_GROUP)
            if conn.version_for(OFFSET_FETCH_API_KEY) < OFFSET_FETCH_VERSION:
                raise SnakkaSparkError(
                    "the broker does not support OffsetFetch v7 (RequireStable, Kafka 2.5+), "
                    "which the transactional sink needs")
            resp = self._send(conn, OffsetFetchRequest(
                group_id=group_id, require_stable=True,
                topics=[OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                        for t, ps in topics.items()]), OFFSET_FETCH_VERSION)
            out = {}
            code = resp.error_code
            for t in resp.topics:
                for p in t.partitions:
                    code = code or p.error_code
                    out[(t.name, p.partition_index)] = (p.committed_offset, p.metadata)
            return code, out

        return self._retrying(f"OffsetFetch of {group_id!r}", attempt)


class _Retriable(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(error_name(code))
        self.code = code


class _Missing(Exception):
    """The cluster's metadata has no such topic-partition (deleted, or never existed)."""

    def __init__(self, tp: TopicPartition) -> None:
        super().__init__(f"{tp[0]}-{tp[1]}")
        self.tp = tp
