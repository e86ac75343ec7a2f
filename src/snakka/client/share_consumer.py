"""snakka's share consumer (KIP-932 "queues for Kafka"): ``AsyncShareConsumer`` (asyncio) and
the blocking ``ShareConsumer`` (the async one on a private event-loop thread).

The API follows Kafka's ``KafkaShareConsumer`` and confluent-kafka's ``ShareConsumer``:
``subscribe`` / ``poll`` / ``acknowledge`` / ``commit_sync`` / ``commit_async`` / ``close``, with
Kafka's config names (``bootstrap.servers``, ``group.id``, ``share.acknowledgement.mode`` =
``implicit`` | ``explicit``, ``max.poll.records``, ``fetch.max.wait.ms``...). It speaks only the
public protocol (FindCoordinator, Metadata, ShareGroupHeartbeat, ShareFetch, ShareAcknowledge),
so it works against Apache Kafka 4.1+ as well as snakka.

How the pieces fit (each sans-I/O part is its own module, unit-tested with a fake clock):

* ``share_membership.ShareMembership``: member id/epoch, subscription, assignment. A background
  task sends ShareGroupHeartbeat to the group coordinator (its own connection, so a long-polling
  ShareFetch never delays a heartbeat) at the interval the coordinator asks for.
* ``share_session.ShareSession``: one share session per partition leader (epochs, incremental
  partition lists). ShareFetch goes to each assigned partition's leader (from Metadata, updated by
  the CurrentLeader/NodeEndpoints hints of responses), on one connection per leader.
* ``share_acks.InFlightRecords``: acquired records, the fetched-but-not-returned buffer and the
  pending acknowledgements.

Acknowledgement flow: ``acknowledge`` (explicit mode) or the next ``poll``/``commit`` (implicit
mode: the previous poll's records are accepted) only records the decision; it reaches the broker
piggy-backed on the next ShareFetch to that leader, or in a ShareAcknowledge from
``commit_sync``/``commit_async``/``close`` (and for partitions no longer fetched). Results reach
the acknowledgement commit callback, always on the application's thread (inside ``poll``,
``commit_*`` or ``close``).

Ordering discipline: requests of one share session are strictly sequential (a per-node
``asyncio.Lock``); at most one ShareFetch per leader is in flight. A fetch that is still in flight
when ``poll`` returns (another leader answered first) keeps running; its records are returned by
a later ``poll``. ``close`` waits (bounded) for in-flight fetches, releases what they brought,
sends the final acknowledgements with share-session epoch -1 and leaves the group (heartbeat
epoch -1); everything is bounded by its timeout.

Errors: a lost connection resets that leader's session and drops the records acquired through
it (the broker releases a closed session's records; their acknowledgements fail with
SHARE_SESSION_NOT_FOUND in the callback). Fatal group errors (authorization, invalid requests,
group type mismatch) are raised as ``KafkaError`` from the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from snakka.client.connection import (
    ConnectionClosed,
    KafkaConnection,
    UnsupportedApi,
    client_ssl_context,
)
from snakka.client.sasl import SaslClientConfig
from snakka.client.share_acks import (
    AckResult,
    DrainedAcks,
    IllegalStateError,
    InFlightKey,
    InFlightRecords,
    ShareRecord,
    TopicIdPartition,
    TopicPartition,
)
from snakka.client.share_membership import HeartbeatOutcome, ShareMembership
from snakka.client.share_session import FetchParams, ShareSession
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.share import AcknowledgeType
from snakka.records import RecordValidationError

__all__ = [
    "AcknowledgeType",
    "AsyncShareConsumer",
    "IllegalStateError",
    "ShareConsumer",
    "ShareConsumerConfig",
    "ShareRecord",
    "TopicPartition",
]

log = logging.getLogger("snakka.client.share_consumer")

T = TypeVar("T")
CommitCallback = Callable[[dict[TopicPartition, set[int]], Exception | None], None]
# FindCoordinator key type of consumer/share groups (GROUP); 2 (SHARE) is broker-internal.
COORDINATOR_KEY_TYPE_GROUP = 0
# Bounded waits inside close(): the leave heartbeat never waits longer than this.
LEAVE_TIMEOUT_S = 5.0
# How often poll() re-checks metadata/backoffs while nothing is in flight.
IDLE_TICK_S = 0.1

_TRANSPORT_ERRORS = (ConnectionError, OSError, asyncio.TimeoutError, UnsupportedApi)
# Partition errors of ShareFetch/ShareAcknowledge after which the leader must be looked up again.
_LEADER_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_ENOUGH_REPLICAS,
})
_SESSION_ERRORS = frozenset({ErrorCode.SHARE_SESSION_NOT_FOUND,
                             ErrorCode.INVALID_SHARE_SESSION_EPOCH})
# ShareFetch/ShareAcknowledge top-level errors that no retry can fix.
_FATAL_FETCH_ERRORS = frozenset({ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                 ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                 ErrorCode.UNSUPPORTED_VERSION})

# Consumer configs that make no sense for a share consumer (Kafka rejects them too).
_UNSUPPORTED = frozenset({
    "auto.offset.reset", "enable.auto.commit", "group.instance.id", "isolation.level",
    "partition.assignment.strategy", "interceptor.classes", "session.timeout.ms",
    "heartbeat.interval.ms", "group.protocol", "group.remote.assignor", "auto.commit.interval.ms",
})


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ShareConsumerConfig:
    """The share consumer's settings, parsed from Kafka's config names."""

    bootstrap_servers: tuple[tuple[str, int], ...]
    group_id: str
    client_id: str = "snakka-share-consumer"
    acknowledgement_mode: str = "implicit"  # share.acknowledgement.mode
    max_poll_records: int = 500
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    request_timeout_ms: int = 30_000
    connect_timeout_ms: int = 10_000     # socket.connection.setup.timeout.ms
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    max_poll_interval_ms: int = 300_000
    metadata_max_age_ms: int = 300_000
    client_rack: str | None = None
    acquire_mode: str = "batch_optimized"  # share.acquire.mode (ShareFetch v2)
    sasl: SaslClientConfig | None = None  # security.protocol=SASL_*, sasl.* (client/sasl.py)
    # security.protocol=SSL / SASL_SSL with ssl.* (Kafka's or librdkafka's names): one context
    # for every broker connection.
    ssl_context: ssl.SSLContext | None = None

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> ShareConsumerConfig:
        cfg = dict(config)
        names = {
            "client.id": ("client_id", str),
            "share.acknowledgement.mode": ("acknowledgement_mode", str),
            "max.poll.records": ("max_poll_records", int),
            "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
            "fetch.min.bytes": ("fetch_min_bytes", int),
            "fetch.max.bytes": ("fetch_max_bytes", int),
            "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
            "request.timeout.ms": ("request_timeout_ms", int),
            "socket.connection.setup.timeout.ms": ("connect_timeout_ms", int),
            "retry.backoff.ms": ("retry_backoff_ms", int),
            "retry.backoff.max.ms": ("retry_backoff_max_ms", int),
            "max.poll.interval.ms": ("max_poll_interval_ms", int),
            "metadata.max.age.ms": ("metadata_max_age_ms", int),
            "client.rack": ("client_rack", str),
            "share.acquire.mode": ("acquire_mode", str),
        }
        if "bootstrap.servers" not in cfg:
            raise ValueError("bootstrap.servers is required")
        if not cfg.get("group.id"):
            raise ValueError("group.id is required")
        kwargs: dict[str, Any] = {
            "bootstrap_servers": _parse_servers(str(cfg.pop("bootstrap.servers"))),
            "group_id": str(cfg.pop("group.id")),
        }
        security = {k: str(cfg.pop(k)) for k in list(cfg) if k == "security.protocol"
                    or k.startswith("sasl.") or k.startswith("ssl.")}
        kwargs["sasl"] = SaslClientConfig.from_config(security)
        kwargs["ssl_context"] = client_ssl_context(security)
        for key, value in cfg.items():
            if key in _UNSUPPORTED:
                raise ValueError(f"{key} is not supported by a share consumer")
            if key not in names:
                raise ValueError(f"unknown share consumer config {key!r}")
            attr, conv = names[key]
            kwargs[attr] = conv(value)
        out = cls(**kwargs)
        if out.acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError("share.acknowledgement.mode must be implicit or explicit")
        if out.acquire_mode not in ("batch_optimized", "record_limit"):
            raise ValueError("share.acquire.mode must be batch_optimized or record_limit")
        if out.max_poll_records < 1:
            raise ValueError("max.poll.records must be at least 1")
        if out.request_timeout_ms <= out.fetch_max_wait_ms:
            raise ValueError("request.timeout.ms must be larger than fetch.max.wait.ms")
        return out

    @property
    def fetch_params(self) -> FetchParams:
        return FetchParams(max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes,
                           max_bytes=self.fetch_max_bytes,
                           partition_max_bytes=self.max_partition_fetch_bytes,
                           max_records=self.max_poll_records, batch_size=self.max_poll_records,
                           acquire_mode=0 if self.acquire_mode == "batch_optimized" else 1)


def _parse_servers(servers: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):
            host, _, port = item[1:].partition("]:")
        else:
            host, _, port = item.rpartition(":")
        out.append((host, int(port)))
    if not out:
        raise ValueError("bootstrap.servers lists no broker")
    return tuple(out)


class _Connection(KafkaConnection):
    """A KafkaConnection that can tell whether it is still usable."""

    @property
    def alive(self) -> bool:
        return (self._writer is not None and self._read_task is not None
                and not self._read_task.done())


@dataclass(slots=True)
class _Node:
    """Per partition-leader state: the share session, its connection and its request lock."""

    node_id: int
    session: ShareSession
    lock: asyncio.Lock
    conn: _Connection | None = None
    backoff_until: float = 0.0  # loop time before which no new fetch is started
    fetch_task: asyncio.Task | None = None


class AsyncShareConsumer:
    """A share-group consumer for asyncio. Not safe for concurrent use from several tasks."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = ShareConsumerConfig.from_dict(config)
        self._explicit = self.config.acknowledgement_mode == "explicit"
        self._membership = ShareMembership(
            self.config.group_id, clock=_now_ms, rack_id=self.config.client_rack,
            retry_backoff_ms=self.config.retry_backoff_ms,
            retry_backoff_max_ms=self.config.retry_backoff_max_ms)
        self._records = InFlightRecords()
        self._params = self.config.fetch_params
        self._nodes: dict[int, _Node] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._leaders: dict[TopicIdPartition, int] = {}
        self._metadata_stale = True
        self._metadata_at = 0.0
        self._metadata_retry_at = 0.0
        self._bootstrap: _Connection | None = None
        self._coordinator: _Connection | None = None
        self._hb_task: asyncio.Task | None = None
        self._hb_lock: asyncio.Lock | None = None
        self._bootstrap_lock: asyncio.Lock | None = None
        self._hb_wakeup: asyncio.Event | None = None
        self._data_event: asyncio.Event | None = None
        self._assignment_version = 0
        self._ack_results: list[AckResult] = []
        self._callbacks: list[tuple[Callable, tuple]] = []
        self._commit_callback: CommitCallback | None = None
        self._commit_tasks: set[asyncio.Task] = set()
        self._background: set[asyncio.Task] = set()  # connection closes in progress
        self._fatal: KafkaError | None = None
        self._closing = False
        self._closed = False
        # The blocking wrapper dispatches callbacks on the application's thread itself.
        self._dispatch_inline = True
        self.acquisition_lock_timeout_ms: int | None = None
        self._last_poll = time.monotonic()

    # -- public API ------------------------------------------------------------------------
    @property
    def member_id(self) -> str:
        return self._membership.member_id

    @property
    def member_epoch(self) -> int:
        return self._membership.member_epoch

    def subscription(self) -> list[str]:
        return list(self._membership.subscription)

    def assignment(self) -> set[TopicPartition]:
        """The partitions the coordinator assigned (those whose topic name is known)."""
        return {TopicPartition(self._topic_names[tid], p)
                for tid, p in self._membership.assignment if tid in self._topic_names}

    async def subscribe(self, topics: list[str]) -> None:
        """Replace the subscription (an empty list unsubscribes)."""
        self._check_open()
        topics = list(topics)
        if not topics:
            await self.unsubscribe()
            return
        if any(not t for t in topics) or len(set(topics)) != len(topics):
            raise ValueError("topics must be distinct non-empty names")
        self._ensure_loop_state()
        if self._membership.subscribe(topics):
            self._metadata_stale = True
            self._metadata_retry_at = 0.0
        if self._hb_task is None or self._hb_task.done():
            self._hb_task = asyncio.ensure_future(self._heartbeat_loop())
        assert self._hb_wakeup is not None
        self._hb_wakeup.set()

    async def unsubscribe(self) -> None:
        """Send outstanding acknowledgements, close the share sessions and leave the group."""
        self._check_open()
        if not self._membership.subscription:
            return
        self._ensure_loop_state()
        self._settle_outstanding()
        await self._finish_work(time.monotonic() + self.config.request_timeout_ms / 1000)
        await self._leave(LEAVE_TIMEOUT_S)
        self._dispatch_results()

    async def poll(self, timeout: float | None = None) -> list[ShareRecord]:
        """Records acquired for this member (at most ``max.poll.records``), waiting up to
        ``timeout`` seconds (None: until some arrive). In implicit mode the records of the
        previous poll are accepted first; in explicit mode they must all have been acknowledged.
        """
        try:
            return await self._poll(timeout)
        finally:
            self._dispatch_results()

    def acknowledge(self, record: ShareRecord,
                    type: AcknowledgeType | int = AcknowledgeType.ACCEPT) -> None:  # noqa: A002
        """Record how ``record`` was handled (explicit mode); it is sent with the next poll or
        commit. ACCEPT, RELEASE (redeliver), REJECT (archive) or RENEW (extend the lock)."""
        self._check_open()
        if not self._explicit:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit")
        self._records.acknowledge(record, int(type))

    def acknowledge_offset(self, topic: str, partition: int, offset: int,
                           type: AcknowledgeType | int = AcknowledgeType.ACCEPT) -> None:  # noqa: A002
        self._check_open()
        if not self._explicit:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit")
        key = self._records.find_key(topic, partition, offset)
        self._records.acknowledge_key(key, offset, int(type))

    async def commit_sync(self, timeout: float | None = 60.0
                          ) -> dict[TopicPartition, Exception | None]:
        """Send pending acknowledgements now and wait for the broker (up to ``timeout`` s).
        Returns each acknowledged partition's result (None on success)."""
        self._check_open()
        try:
            return await self._commit(timeout)
        finally:
            self._dispatch_results()

    async def commit_async(self, callback: CommitCallback | None = None) -> None:
        """Send pending acknowledgements without waiting; results go to the acknowledgement
        commit callback (and ``callback``, called once per partition result)."""
        self._check_open()
        self._ensure_loop_state()
        task = asyncio.ensure_future(self._commit(None, callback=callback))
        self._commit_tasks.add(task)
        task.add_done_callback(self._commit_tasks.discard)
        await asyncio.sleep(0)  # let it drain the acknowledgements before the caller goes on

    def set_acknowledgement_commit_callback(self, callback: CommitCallback | None) -> None:
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable or None")
        self._commit_callback = callback

    async def close(self, timeout: float = 30.0) -> None:
        """Send the pending acknowledgements, release the records returned by poll and not
        acknowledged (implicit mode too: like Kafka's consumer, close does not accept the last
        poll's records; ``commit_sync()`` first does), close the share sessions (epoch -1) and
        leave the group (epoch -1). Returns within about ``timeout`` seconds."""
        if self._closed or self._closing:
            return
        self._closing = True
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            if self._data_event is not None:  # ever used on a loop
                self._settle_outstanding()
                await self._finish_work(deadline)
                await self._leave(min(LEAVE_TIMEOUT_S, max(0.1, deadline - time.monotonic())))
        finally:
            await self._shutdown()
            self._closed = True
            self._dispatch_results()

    def _settle_outstanding(self) -> None:
        """Before closing sessions (close, unsubscribe): records returned by poll and not
        acknowledged are released, in both modes. As in Kafka's consumer, implicit mode accepts
        the last poll's records only on the next poll or commit, not on close: call
        ``commit_sync()`` first to accept them."""
        self._records.accept_unacked(AcknowledgeType.RELEASE, include_renewed=True)

    async def __aenter__(self) -> AsyncShareConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- poll ------------------------------------------------------------------------------
    async def _poll(self, timeout: float | None) -> list[ShareRecord]:
        self._check_open()
        if not self._membership.subscription:
            raise IllegalStateError("poll() before subscribe()")
        self._ensure_loop_state()
        self._last_poll = time.monotonic()
        if self._membership.resume():
            log.info("share consumer %s: polling again, rejoining the group", self.member_id)
            assert self._hb_wakeup is not None
            self._hb_wakeup.set()
        if self._explicit:
            n = self._records.unacked_count()
            if n:
                raise IllegalStateError(f"{n} record(s) of the previous poll are not "
                                        "acknowledged (share.acknowledgement.mode=explicit)")
        else:
            self._records.accept_unacked()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None or timeout < 0 else loop.time() + timeout
        assert self._data_event is not None
        while True:
            self._raise_fatal()
            recs = self._records.take(self.config.max_poll_records)
            if recs:
                return recs
            await self._maybe_refresh_metadata()
            self._start_fetches()
            now = loop.time()
            if deadline is not None and now >= deadline:
                return []
            self._data_event.clear()
            if self._records.buffered():
                continue
            wait = None if deadline is None else deadline - now
            if not any(n.fetch_task and not n.fetch_task.done() for n in self._nodes.values()):
                wait = IDLE_TICK_S if wait is None else min(wait, IDLE_TICK_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._data_event.wait(), wait)

    def _wanted(self, node_id: int) -> set[TopicIdPartition]:
        return {tip for tip in self._membership.assignment
                if self._leaders.get(tip) == node_id and tip[0] in self._topic_names}

    def _start_fetches(self) -> None:
        if self._closing:
            return
        now = asyncio.get_running_loop().time()
        nodes = {self._leaders[t] for t in self._membership.assignment if t in self._leaders}
        nodes |= self._records.nodes_with_pending()
        nodes |= {n.node_id for n in self._nodes.values()
                  if n.session.established and n.session.partitions - self._wanted(n.node_id)}
        for node_id in nodes:
            node = self._node(node_id)
            if node.fetch_task is not None and not node.fetch_task.done():
                continue
            if now < node.backoff_until:
                continue
            node.fetch_task = asyncio.ensure_future(self._fetch_from(node))
            node.fetch_task.add_done_callback(self._fetch_finished)

    def _fetch_finished(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("share fetch task failed", exc_info=task.exception())
        if self._data_event is not None:
            self._data_event.set()

    async def _fetch_from(self, node: _Node) -> None:
        """One ShareFetch to ``node`` (after a ShareAcknowledge for acknowledgements that
        cannot ride on it), then take in the response."""
        async with node.lock:
            if self._closing:
                return
            try:
                conn = await self._node_conn(node)
            except _TRANSPORT_ERRORS as e:
                self._node_failed(node, e)
                return
            session = node.session
            wanted = self._wanted(node.node_id)
            if not session.established:
                # Acknowledgements cannot ride on a session-opening fetch. Those for partitions
                # fetched here wait for the next one (the records are still this member's);
                # the others have no session to go through.
                self._fail_pending(node.node_id, ErrorCode.SHARE_SESSION_NOT_FOUND,
                                   "no share session with the node that acquired the records",
                                   only=lambda tip: tip not in wanted)
            else:
                renew = self._records.has_pending_renew(node.node_id)
                separate = (self._records.pending_partitions(node.node_id) - wanted) | renew
                if separate:
                    ok = await self._acknowledge(node, conn, only=separate.__contains__)
                    if not ok:
                        return
            if not wanted and not session.partitions:
                return
            only_acks = wanted - self._records.has_pending_renew(node.node_id)
            drained = (self._records.drain(node.node_id, only=only_acks.__contains__)
                       if session.established else DrainedAcks({}, {}))
            params = self._params
            if not wanted:  # only forgetting partitions: do not wait
                params = FetchParams(max_wait_ms=0, min_bytes=0, max_bytes=params.max_bytes,
                                     partition_max_bytes=params.partition_max_bytes,
                                     max_records=params.max_records,
                                     batch_size=params.batch_size,
                                     acquire_mode=params.acquire_mode)
            try:
                version = conn.version_for(78)
                req = session.fetch_request(self.config.group_id, self.member_id, wanted,
                                            drained.batches, params, version)
                sent_at = time.monotonic()  # the broker acquires after this: a safe lock start
                resp = await conn.send(req, version)
            except _TRANSPORT_ERRORS as e:
                self._ack_results += self._records.completed(
                    drained, {}, ErrorCode.NETWORK_EXCEPTION, str(e) or type(e).__name__)
                self._node_failed(node, e)
                return
            session.fetch_done(resp.error_code)
            if resp.error_code:
                self._ack_results += self._records.completed(drained, {}, resp.error_code,
                                                             resp.error_message)
                self._fetch_error(node, resp.error_code, resp.error_message)
                return
            if resp.acquisition_lock_timeout_ms:
                self.acquisition_lock_timeout_ms = resp.acquisition_lock_timeout_ms
            self._learn_endpoints(resp.node_endpoints)
            ack_errors: dict[TopicIdPartition, int] = {}
            for t in resp.responses:
                for pd in t.partitions:
                    tip = (t.topic_id, pd.partition_index)
                    if pd.acknowledge_error_code:
                        ack_errors[tip] = pd.acknowledge_error_code
                    if pd.error_code:
                        self._partition_error(tip, pd.error_code, pd.current_leader)
                        continue
                    if pd.acquired_records:
                        self._take_records(node.node_id, tip, pd, sent_at)
            self._ack_results += self._records.completed(drained, ack_errors)

    def _take_records(self, node_id: int, tip: TopicIdPartition, pd, sent_at: float) -> None:
        topic = self._topic_names.get(tip[0])
        key: InFlightKey = (tip[0], tip[1], node_id)
        ranges = [(a.first_offset, a.last_offset, a.delivery_count) for a in pd.acquired_records]
        if topic is None or tip not in self._membership.assignment:
            # Acquired for a partition this member no longer owns (or cannot name): give the
            # records back at once rather than sitting on their locks.
            self._records.add_fetched(key, topic or str(tip[0]), ranges, None, release=True)
            return
        lock_ms = self.acquisition_lock_timeout_ms
        deadline = sent_at + lock_ms / 1000 if lock_ms else float("inf")
        try:
            self._records.add_fetched(key, topic, ranges, pd.records, lock_deadline=deadline)
        except RecordValidationError as e:
            log.warning("share fetch of %s-%d returned corrupt records (%s); releasing them",
                        topic, tip[1], e)

    async def _acknowledge(self, node: _Node, conn: _Connection, *,
                           only: Callable[[TopicIdPartition], bool] | None = None,
                           final: bool = False) -> bool:
        """ShareAcknowledge on ``node``'s session (the caller holds ``node.lock``). Returns
        False if the connection failed."""
        if conn.version_for(79) < 2:
            # RENEW (KIP-1222) needs ShareAcknowledge v2; an older broker would reject the
            # request. Those acknowledgements fail here; the records stay renewable.
            renews = self._records.drain_renews(node.node_id)
            if renews:
                self._ack_results += self._records.completed(
                    renews, {}, ErrorCode.UNSUPPORTED_VERSION,
                    "RENEW acknowledgements need ShareAcknowledge v2")
        drained = self._records.drain(node.node_id, only=only)
        if not drained and not final:
            return True
        try:
            req = node.session.acknowledge_request(self.config.group_id, self.member_id,
                                                   drained.batches, final=final)
            resp = await conn.send(req)
        except _TRANSPORT_ERRORS as e:
            self._ack_results += self._records.completed(
                drained, {}, ErrorCode.NETWORK_EXCEPTION, str(e) or type(e).__name__)
            self._node_failed(node, e)
            return False
        node.session.acknowledge_done(resp.error_code, final=final)
        errors: dict[TopicIdPartition, int] = {}
        for t in resp.responses:
            for pd in t.partitions:
                tip = (t.topic_id, pd.partition_index)
                if pd.error_code:
                    errors[tip] = pd.error_code
                    if pd.error_code in _LEADER_ERRORS:
                        self._partition_error(tip, pd.error_code, pd.current_leader)
        self._learn_endpoints(resp.node_endpoints)
        self._ack_results += self._records.completed(drained, errors, resp.error_code,
                                                     resp.error_message)
        if resp.error_code and not final:
            self._fetch_error(node, resp.error_code, resp.error_message)
        return True

    def _fail_pending(self, node_id: int, code: int, message: str,
                      only: Callable[[TopicIdPartition], bool] | None = None) -> None:
        drained = self._records.drain(node_id, only=only)
        if drained:
            self._ack_results += self._records.completed(drained, {}, code, message)

    # -- error handling ----------------------------------------------------------------------
    def _node_failed(self, node: _Node, exc: BaseException) -> None:
        log.info("share consumer %s: connection to node %d failed: %s", self.member_id,
                 node.node_id, exc)
        node.session.reset()
        if node.conn is not None:
            conn, node.conn = node.conn, None
            task = asyncio.ensure_future(conn.close())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        self._records.forget_node(node.node_id)
        node.backoff_until = asyncio.get_running_loop().time() + \
            self.config.retry_backoff_ms / 1000
        self._metadata_stale = True

    def _fetch_error(self, node: _Node, code: int, message: str | None) -> None:
        ec = ErrorCode.from_code(code)
        if ec in _SESSION_ERRORS:
            return  # the session was reset; the next fetch opens a new one right away
        if ec in _FATAL_FETCH_ERRORS:
            self._fatal = KafkaError(ec, message)
            return
        log.info("share consumer %s: ShareFetch to node %d failed: %s (%s)", self.member_id,
                 node.node_id, ec.name, message)
        node.backoff_until = asyncio.get_running_loop().time() + \
            self.config.retry_backoff_ms / 1000
        if ec in _LEADER_ERRORS:
            self._metadata_stale = True

    def _partition_error(self, tip: TopicIdPartition, code: int, leader) -> None:
        ec = ErrorCode.from_code(code)
        if ec in _LEADER_ERRORS:
            new = getattr(leader, "leader_id", -1) if leader is not None else -1
            if new >= 0 and new in self._brokers:
                self._leaders[tip] = new  # follow the CurrentLeader hint at once
            else:
                self._leaders.pop(tip, None)
                self._metadata_stale = True
        elif ec in (ErrorCode.TOPIC_AUTHORIZATION_FAILED,):
            self._fatal = KafkaError(ec, f"topic {self._topic_names.get(tip[0], tip[0])}")
        else:
            log.info("share consumer %s: partition %s-%d: %s", self.member_id,
                     self._topic_names.get(tip[0], tip[0]), tip[1], ec.name)

    def _learn_endpoints(self, endpoints) -> None:
        for ep in endpoints or ():
            self._brokers[ep.node_id] = (ep.host, ep.port)

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        fe = self._membership.fatal_error
        if fe is not None:
            raise KafkaError(fe[0], fe[1])

    def _check_open(self) -> None:
        if self._closed or self._closing:
            raise IllegalStateError("the share consumer is closed")

    # -- commit / close ------------------------------------------------------------------------
    async def _commit(self, timeout: float | None, callback: CommitCallback | None = None
                      ) -> dict[TopicPartition, Exception | None]:
        self._ensure_loop_state()
        if not self._explicit:
            self._records.accept_unacked()
        nodes = self._records.nodes_with_pending()
        if not nodes:
            return {}
        tasks = {asyncio.ensure_future(self._commit_node(self._node(n))): n for n in nodes}
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        results: list[AckResult] = []
        for t in done:
            results += t.result()
        out: dict[TopicPartition, Exception | None] = {}
        for r in results:
            if out.get(r.partition) is None:
                out[r.partition] = r.error
        for t in pending:  # still running: their results reach the callback later
            for tip in self._records.pending_partitions(tasks[t]):
                name = self._topic_names.get(tip[0], str(tip[0]))
                out[TopicPartition(name, tip[1])] = KafkaError(ErrorCode.REQUEST_TIMED_OUT)
        if callback is not None:
            for r in results:
                self._callbacks.append((callback, ({r.partition: set(r.offsets)}, r.error)))
            if self._dispatch_inline:
                self._dispatch_results()
        return out

    async def _commit_node(self, node: _Node) -> list[AckResult]:
        async with node.lock:
            before = len(self._ack_results)
            if not node.session.established or node.conn is None or not node.conn.alive:
                self._fail_pending(node.node_id, ErrorCode.SHARE_SESSION_NOT_FOUND,
                                   "no share session with the node that acquired the records")
            else:
                await self._acknowledge(node, node.conn)
            return self._ack_results[before:]

    async def _finish_work(self, deadline: float) -> None:
        """Wait (bounded) for in-flight fetches, release unreturned records and send every
        pending acknowledgement with a final ShareAcknowledge (session epoch -1) per node."""
        fetches = [n.fetch_task for n in self._nodes.values()
                   if n.fetch_task is not None and not n.fetch_task.done()]
        closing, self._closing = self._closing, True  # no new fetches from here on
        try:
            if fetches:
                await asyncio.wait(fetches, timeout=max(0.0, deadline - time.monotonic()))
            self._records.release_buffered()
            nodes = [n for n in self._nodes.values() if n.session.established]
            nodes += [self._node(i) for i in self._records.nodes_with_pending()
                      if self._node(i) not in nodes]
            if nodes:
                tasks = [asyncio.ensure_future(self._close_session(n)) for n in nodes]
                _done, pending = await asyncio.wait(
                    tasks, timeout=max(0.0, deadline - time.monotonic()))
                for t in pending:
                    t.cancel()
        finally:
            self._closing = closing

    async def _close_session(self, node: _Node) -> None:
        async with node.lock:
            if node.session.established and node.conn is not None and node.conn.alive:
                await self._acknowledge(node, node.conn, final=True)
            else:
                self._fail_pending(node.node_id, ErrorCode.SHARE_SESSION_NOT_FOUND,
                                   "no share session with the node that acquired the records")
            node.session.reset()

    async def _leave(self, timeout: float) -> None:
        m = self._membership
        was_member = m.joined or m.member_epoch > 0
        if self._hb_lock is None:
            m.left()
            return
        try:
            await asyncio.wait_for(self._hb_lock.acquire(), timeout)
        except TimeoutError:
            m.left()
            return
        try:
            sub = m.subscription
            m.left()
            if was_member and sub and self._coordinator is not None and self._coordinator.alive:
                with contextlib.suppress(*_TRANSPORT_ERRORS):
                    await asyncio.wait_for(self._coordinator.send(m.leave_request()), timeout)
        finally:
            self._hb_lock.release()
        self._on_assignment_maybe_changed()

    async def _shutdown(self) -> None:
        tasks = [t for t in [self._hb_task, *(n.fetch_task for n in self._nodes.values()),
                             *self._commit_tasks] if t is not None and not t.done()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        conns = [self._bootstrap, self._coordinator, *(n.conn for n in self._nodes.values())]
        for c in conns:
            if c is not None:
                with contextlib.suppress(Exception):
                    await c.close()
        self._bootstrap = self._coordinator = None
        for n in self._nodes.values():
            n.conn = None

    # -- callbacks -----------------------------------------------------------------------------
    def _take_callbacks(self) -> list[tuple[Callable, tuple]]:
        out: list[tuple[Callable, tuple]] = []
        results, self._ack_results = self._ack_results, []
        if self._commit_callback is not None:
            cb = self._commit_callback
            out += [(cb, ({r.partition: set(r.offsets)}, r.error)) for r in results]
        out += self._callbacks
        self._callbacks = []
        return out

    def _dispatch_results(self) -> None:
        if not self._dispatch_inline:
            return
        for fn, args in self._take_callbacks():
            try:
                fn(*args)
            except Exception:
                log.exception("acknowledgement commit callback raised")

    # -- heartbeat -----------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        m = self._membership
        assert self._hb_wakeup is not None and self._hb_lock is not None
        poll_interval = self.config.max_poll_interval_ms / 1000
        while not self._closing:
            if not m.active:
                self._hb_wakeup.clear()
                await self._hb_wakeup.wait()
                continue
            idle = time.monotonic() - self._last_poll
            if idle > poll_interval:
                await self._poll_timer_expired(idle)
                continue
            delay = min((m.next_heartbeat_ms - _now_ms()) / 1000, poll_interval - idle + 0.001)
            if delay > 0:
                self._hb_wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hb_wakeup.wait(), delay)
                continue
            async with self._hb_lock:
                if not m.active or self._closing:
                    continue
                outcome = await self._heartbeat_once()
            if outcome == HeartbeatOutcome.FATAL and self._data_event is not None:
                self._data_event.set()
            self._on_assignment_maybe_changed()

    async def _poll_timer_expired(self, idle: float) -> None:
        """``max.poll.interval.ms`` passed without a poll: leave the group (the coordinator
        hands this member's partitions to the others; the broker releases its records) and
        stay out until the next poll, as Kafka's consumer does."""
        m = self._membership
        assert self._hb_lock is not None
        async with self._hb_lock:
            log.warning("share consumer %s: no poll() for %.1f s (max.poll.interval.ms %d): "
                        "leaving the group until the next poll", m.member_id, idle,
                        self.config.max_poll_interval_ms)
            if (m.joined or m.member_epoch > 0) and self._coordinator is not None \
                    and self._coordinator.alive:
                with contextlib.suppress(*_TRANSPORT_ERRORS):
                    await asyncio.wait_for(self._coordinator.send(m.leave_request()),
                                           LEAVE_TIMEOUT_S)
            m.pause()
        self._on_assignment_maybe_changed()

    async def _heartbeat_once(self) -> HeartbeatOutcome:
        m = self._membership
        try:
            conn = await self._coordinator_conn()
            req = m.heartbeat_request()
            resp = await conn.send(req)
        except UnsupportedApi as e:  # e.g. Kafka without share groups enabled (share.version)
            m.fatal_error = (int(ErrorCode.UNSUPPORTED_VERSION),
                             f"the group coordinator does not support share groups: {e}")
            return HeartbeatOutcome.FATAL
        except (*_TRANSPORT_ERRORS, KafkaError) as e:
            if isinstance(e, KafkaError) and not e.retriable:
                m.fatal_error = (int(e.code), e.message)
                return HeartbeatOutcome.FATAL
            log.info("share consumer %s: heartbeat failed: %s", m.member_id, e)
            await self._drop_coordinator()
            return m.on_failure()
        outcome = m.on_response(resp, req)
        if outcome != HeartbeatOutcome.OK:
            log.info("share consumer %s: heartbeat: %s (%s)", m.member_id,
                     ErrorCode.from_code(resp.error_code).name, outcome.value)
        if outcome == HeartbeatOutcome.FIND_COORDINATOR:
            await self._drop_coordinator()
        return outcome

    def _on_assignment_maybe_changed(self) -> None:
        m = self._membership
        if m.assignment_version == self._assignment_version:
            return
        self._assignment_version = m.assignment_version
        assignment = m.assignment
        if any(tid not in self._topic_names or tip not in self._leaders
               for tip in assignment for tid in (tip[0],)):
            self._metadata_stale = True
            self._metadata_retry_at = 0.0
        # Records fetched for partitions taken away are given back unread.
        self._records.release_buffered(keep=lambda k: (k[0], k[1]) in assignment)
        if self._data_event is not None:
            self._data_event.set()

    async def _coordinator_conn(self) -> _Connection:
        if self._coordinator is not None and self._coordinator.alive:
            return self._coordinator
        conn = await self._any_conn()
        v = conn.version_for(10)
        if v >= 4:
            resp = await conn.send(FindCoordinatorRequest(
                key_type=COORDINATOR_KEY_TYPE_GROUP, coordinator_keys=[self.config.group_id]))
            c = resp.coordinators[0]
            code, msg, node_id, host, port = (c.error_code, c.error_message, c.node_id, c.host,
                                              c.port)
        else:
            resp = await conn.send(FindCoordinatorRequest(
                key=self.config.group_id, key_type=COORDINATOR_KEY_TYPE_GROUP))
            code, msg, node_id, host, port = (resp.error_code, resp.error_message, resp.node_id,
                                              resp.host, resp.port)
        if code:
            raise KafkaError(code, msg)
        self._brokers.setdefault(node_id, (host, port))
        self._coordinator = await self._connect(host, port)
        return self._coordinator

    async def _drop_coordinator(self) -> None:
        if self._coordinator is not None:
            c, self._coordinator = self._coordinator, None
            with contextlib.suppress(Exception):
                await c.close()

    # -- connections and metadata -------------------------------------------------------------
    async def _connect(self, host: str, port: int) -> _Connection:
        conn = _Connection(host, port, client_id=self.config.client_id,
                           request_timeout=self.config.request_timeout_ms / 1000,
                           sasl=self.config.sasl, ssl_context=self.config.ssl_context)
        try:
            await conn.connect(timeout=self.config.connect_timeout_ms / 1000)
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.close()
            raise
        return conn

    async def _any_conn(self) -> _Connection:
        if self._bootstrap is not None and self._bootstrap.alive:
            return self._bootstrap
        assert self._bootstrap_lock is not None
        async with self._bootstrap_lock:  # the heartbeat loop and poll() may both get here
            return await self._any_conn_locked()

    async def _any_conn_locked(self) -> _Connection:
        if self._bootstrap is not None and self._bootstrap.alive:
            return self._bootstrap
        if self._bootstrap is not None:
            with contextlib.suppress(Exception):
                await self._bootstrap.close()
            self._bootstrap = None
        candidates = list(self.config.bootstrap_servers) + list(self._brokers.values())
        last: BaseException | None = None
        for host, port in candidates:
            try:
                self._bootstrap = await self._connect(host, port)
                return self._bootstrap
            except _TRANSPORT_ERRORS as e:
                last = e
        raise ConnectionClosed(f"no broker reachable ({last})")

    async def _node_conn(self, node: _Node) -> _Connection:
        if node.conn is not None and node.conn.alive:
            return node.conn
        if node.conn is not None:  # died since the last request: its session is gone too
            self._node_failed(node, ConnectionClosed("connection lost"))
        addr = self._brokers.get(node.node_id)
        if addr is None:
            self._metadata_stale = True
            raise ConnectionClosed(f"address of node {node.node_id} unknown")
        node.conn = await self._connect(*addr)
        return node.conn

    def _node(self, node_id: int) -> _Node:
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = _Node(node_id, ShareSession(node_id), asyncio.Lock())
        return node

    async def _maybe_refresh_metadata(self) -> None:
        now = time.monotonic()
        if not self._metadata_stale and now - self._metadata_at < \
                self.config.metadata_max_age_ms / 1000:
            return
        if now < self._metadata_retry_at:
            return
        try:
            await self._refresh_metadata()
            self._metadata_at = now
        except (*_TRANSPORT_ERRORS, KafkaError) as e:
            log.info("share consumer %s: metadata refresh failed: %s", self.member_id, e)
            self._metadata_retry_at = now + self.config.retry_backoff_ms / 1000

    async def _refresh_metadata(self) -> None:
        conn = await self._any_conn()
        topics = sorted(set(self._membership.subscription) | set(self._topic_ids))
        resp = await conn.send(MetadataRequest(
            topics=[MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False))
        for b in resp.brokers:
            self._brokers[b.node_id] = (b.host, b.port)
        stale = False
        subscribed = set(self._membership.subscription)
        for t in resp.topics:
            if t.error_code:
                if t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and t.name in subscribed:
                    # Not even DESCRIBE: the topic never becomes visible, so waiting for it
                    # would be forever; poll raises instead (the Java consumer's
                    # TopicAuthorizationException).
                    self._fatal = KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                             f"topic {t.name}")
                continue
            self._topic_ids[t.name] = t.topic_id
            self._topic_names[t.topic_id] = t.name
            for p in t.partitions:
                tip = (t.topic_id, p.partition_index)
                if p.leader_id >= 0:
                    self._leaders[tip] = p.leader_id
                else:
                    self._leaders.pop(tip, None)
                    stale = True
        unknown = [tip for tip in self._membership.assignment
                   if tip[0] not in self._topic_names or tip not in self._leaders]
        self._metadata_stale = stale or bool(unknown)
        if self._metadata_stale:
            self._metadata_retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000

    def _ensure_loop_state(self) -> None:
        if self._data_event is None:
            self._data_event = asyncio.Event()
            self._hb_wakeup = asyncio.Event()
            self._hb_lock = asyncio.Lock()
            self._bootstrap_lock = asyncio.Lock()


# ---------------------------------------------------------------------------------------------
class ShareConsumer:
    """Blocking share consumer: an ``AsyncShareConsumer`` driven on a private event-loop thread.

    Same API as ``AsyncShareConsumer`` without ``await``. Not thread-safe (one application
    thread per consumer, as Kafka's). Acknowledgement commit callbacks run on the calling thread,
    inside ``poll``/``commit_sync``/``commit_async``/``close``.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._consumer = AsyncShareConsumer(config)  # validates the config first
        self._consumer._dispatch_inline = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run, name=f"snakka-share-consumer-{self._consumer.config.client_id}",
            daemon=True)
        self._thread.start()
        self._call(self._init(), None)
        self._closed = False

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _init(self) -> None:
        self._consumer._ensure_loop_state()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()
            raise

    def _dispatch(self) -> None:
        for fn, args in self._call(self._take(), None):
            try:
                fn(*args)
            except Exception:
                log.exception("acknowledgement commit callback raised")

    async def _take(self) -> list[tuple[Callable, tuple]]:
        return self._consumer._take_callbacks()

    @property
    def member_id(self) -> str:
        return self._consumer.member_id

    @property
    def member_epoch(self) -> int:
        return self._consumer.member_epoch

    @property
    def acquisition_lock_timeout_ms(self) -> int | None:
        return self._consumer.acquisition_lock_timeout_ms

    def subscribe(self, topics: list[str]) -> None:
        self._call(self._consumer.subscribe(topics), None)

    def unsubscribe(self) -> None:
        try:
            self._call(self._consumer.unsubscribe(), None)
        finally:
            self._dispatch()

    def subscription(self) -> list[str]:
        return self._consumer.subscription()

    def assignment(self) -> set[TopicPartition]:
        return self._call(self._assignment(), None)

    async def _assignment(self) -> set[TopicPartition]:
        return self._consumer.assignment()

    def poll(self, timeout: float | None = -1) -> list[ShareRecord]:
        """Wait up to ``timeout`` seconds (negative/None: no limit) for records."""
        if timeout is not None and timeout < 0:
            timeout = None
        try:
            return self._call(self._consumer.poll(timeout), None)
        finally:
            self._dispatch()

    def acknowledge(self, record: ShareRecord,
                    type: AcknowledgeType | int = AcknowledgeType.ACCEPT) -> None:  # noqa: A002
        # Local bookkeeping only (thread-safe): no round trip to the loop thread per record.
        self._consumer.acknowledge(record, type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int,
                           type: AcknowledgeType | int = AcknowledgeType.ACCEPT) -> None:  # noqa: A002
        self._consumer.acknowledge_offset(topic, partition, offset, type)

    def commit_sync(self, timeout: float | None = 60.0) -> dict[TopicPartition, Exception | None]:
        try:
            return self._call(self._consumer.commit_sync(timeout), None)
        finally:
            self._dispatch()

    def commit_async(self, callback: CommitCallback | None = None) -> None:
        try:
            self._call(self._consumer.commit_async(callback), None)
        finally:
            self._dispatch()

    def set_acknowledgement_commit_callback(self, callback: CommitCallback | None) -> None:
        self._consumer.set_acknowledgement_commit_callback(callback)

    def close(self, timeout: float = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._consumer.close(timeout), timeout + 5)
        finally:
            with contextlib.suppress(Exception):
                self._dispatch()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten consumer must not leave a thread behind
        if not getattr(self, "_closed", True) and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
