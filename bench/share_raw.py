"""A share-group load client that is not the bottleneck (bench_share.py ``--clients raw``).

Measuring how many records/s a broker can hand out and take back through a share group needs
consumers that cost less CPU per record than the broker: 16 confluent-kafka ShareConsumers on
this 2-core machine use ~1 CPU-µs a record (2.5-3x the broker), snakka's own consumer more. A
``RawShareMember`` is one share-group member speaking KIP-932 directly, with snakka's own client
pieces (``KafkaConnection`` and the generated codecs; ``ShareMembership`` and ``ShareSession``,
the sans-I/O cores snakka's ShareConsumer uses), and does nothing per record:

* membership: ShareGroupHeartbeat to the group coordinator (FindCoordinator, key type GROUP) on a
  connection of its own, at the interval the coordinator asks for; the assignment it returns is
  what the member fetches;
* fetching: one ShareFetch in flight at a time on the member's share session with the partition
  leader (epoch 0 opens it, then the next epoch each time; partitions added / forgotten as the
  assignment changes), ``max.poll.records`` 500 (MaxRecords and BatchSize), MaxWaitMs 500,
  MinBytes 1, MaxBytes 50 MiB as Kafka's consumer asks;
* acknowledging: each response's AcquiredRecords ranges of a partition become ACCEPT
  acknowledgement batches (adjacent ranges merged, one type for the whole range) piggy-backed on
  the next ShareFetch, which is sent as soon as the response arrived (a consumer that processes
  nothing). Acknowledgements of partitions no longer assigned go in a ShareAcknowledge on the
  same session first; at the end a ShareAcknowledge with epoch -1 carries the last ones and
  closes the session, then the member leaves the group (heartbeat epoch -1);
* records are never decoded: they are counted from the AcquiredRecords ranges (a topic without
  compaction or transaction markers has a record at every acquired offset; the broker archives
  control batches itself and never hands them out).

Counts per member (``MemberStats``): records acknowledged (the broker answered the
acknowledgement without error), records delivered, records delivered with a delivery count
above 1, acknowledgements refused, requests; with ``keep_ranges`` every acquired range, so a
caller can check that no offset was delivered twice.

One broker: the records are fetched from the bootstrap broker (the partition leader of a
single-node cluster); a partition answering with an error (NOT_LEADER_OR_FOLLOWER included), a
top-level error other than a lost share session (which opens a new one) and a fatal heartbeat
error stop the member with that error, never silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from snakka.client.connection import KafkaConnection
from snakka.client.share_acks import TopicIdPartition
from snakka.client.share_membership import HeartbeatOutcome, ShareMembership
from snakka.client.share_session import FetchParams, ShareSession
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.share import AckBatch, AcknowledgeType

ACCEPT = (int(AcknowledgeType.ACCEPT),)
# ShareFetch errors after which a new share session is opened (epoch 0); any other top-level
# error ends the member.
_SESSION_LOST = frozenset({int(ErrorCode.SHARE_SESSION_NOT_FOUND),
                           int(ErrorCode.INVALID_SHARE_SESSION_EPOCH)})
COORDINATOR_KEY_TYPE_GROUP = 0
# How long a member waits for its final ShareAcknowledge and its leave heartbeat.
CLOSE_TIMEOUT_S = 10.0


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def accept_batches(acquired: Iterable[Any]) -> list[AckBatch]:
    """ACCEPT batches covering the AcquiredRecords ranges ``acquired`` (in offset order, as
    the broker sends them), adjacent ranges merged into one batch."""
    merged: list[list[int]] = []
    for a in acquired:
        if merged and a.first_offset == merged[-1][1] + 1:
            merged[-1][1] = a.last_offset
        else:
            merged.append([a.first_offset, a.last_offset])
    return [AckBatch(f, la, ACCEPT) for f, la in merged]


def _count(batches: Iterable[AckBatch]) -> int:
    return sum(b.last_offset - b.first_offset + 1 for b in batches)


@dataclass
class MemberStats:
    acknowledged: int = 0  # records whose ACCEPT the broker confirmed
    ack_refused: int = 0   # records whose acknowledgement the broker refused
    ack_unanswered: int = 0  # acknowledged records of a partition the response left out
    delivered: int = 0     # records acquired by this member
    redelivered: int = 0   # of those, delivered with a delivery count above 1
    fetches: int = 0
    acknowledges: int = 0
    # (partition, first offset, last offset) of every acquired range (keep_ranges only)
    ranges: list[tuple[int, int, int]] = field(default_factory=list)


class RawShareMember:
    """One share-group member (module docstring)."""

    def __init__(self, host: str, port: int, group_id: str, topics: list[str], *,
                 params: FetchParams | None = None, client_id: str = "bench-raw",
                 keep_ranges: bool = False, progress: asyncio.Event | None = None) -> None:
        """``progress``: set after every ShareFetch/ShareAcknowledge response is counted (a
        caller waiting for a total clears it and waits again)."""
        self.host, self.port = host, port
        self.group_id = group_id
        self.topics = topics
        self.params = params or FetchParams()
        self.client_id = client_id
        self.keep_ranges = keep_ranges
        self.progress = progress
        self.membership = ShareMembership(group_id, clock=now_ms)
        self.stats = MemberStats()
        self._assignment_changed = asyncio.Event()
        self._pending: dict[TopicIdPartition, list[AckBatch]] = {}
        self._fetch_conn: KafkaConnection | None = None
        self._coordinator: KafkaConnection | None = None
        self._session: ShareSession | None = None

    @property
    def member_id(self) -> str:
        return self.membership.member_id

    async def _connect(self, host: str, port: int) -> KafkaConnection:
        return await KafkaConnection(host, port, client_id=self.client_id).connect()

    async def start(self) -> None:
        """Connect: the partition leader (bootstrap) and the group coordinator."""
        self._fetch_conn = await self._connect(self.host, self.port)
        resp = await self._fetch_conn.send(FindCoordinatorRequest(
            key_type=COORDINATOR_KEY_TYPE_GROUP, coordinator_keys=[self.group_id]))
        c = resp.coordinators[0]
        if c.error_code:
            raise KafkaError(c.error_code, c.error_message)
        self._coordinator = await self._connect(c.host, c.port)
        # node id of the leader: the bootstrap broker of a one-node cluster
        self._session = ShareSession(c.node_id)

    async def run(self, stop: asyncio.Event) -> MemberStats:
        """Join, fetch and acknowledge until ``stop`` is set, then close (final
        acknowledgements, leave). ``start`` first."""
        assert self._fetch_conn is not None and self._coordinator is not None
        self.membership.subscribe(self.topics)
        heartbeats = asyncio.ensure_future(self._heartbeat_loop(stop))
        fetches = asyncio.ensure_future(self._fetch_loop(stop))
        try:
            # Either loop failing ends the member with its error; both end on ``stop``.
            await asyncio.wait([heartbeats, fetches], return_when=asyncio.FIRST_EXCEPTION)
            for task in (heartbeats, fetches):
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            for task in (heartbeats, fetches):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task  # a failure was raised above
            await self._close()
        return self.stats

    # -- membership --------------------------------------------------------------------------
    async def _heartbeat_loop(self, stop: asyncio.Event) -> None:
        m = self.membership
        assert self._coordinator is not None
        version = m.assignment_version
        while not stop.is_set():
            delay = (m.next_heartbeat_ms - now_ms()) / 1000
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                continue
            req = m.heartbeat_request()
            resp = await self._coordinator.send(req)
            outcome = m.on_response(resp, req)
            if outcome == HeartbeatOutcome.FATAL:
                raise KafkaError(resp.error_code, resp.error_message)
            if outcome == HeartbeatOutcome.FIND_COORDINATOR:
                raise KafkaError(resp.error_code, "the group coordinator moved (one-node "
                                 "clusters only)")
            if m.assignment_version != version:
                version = m.assignment_version
                self._assignment_changed.set()

    # -- fetching ----------------------------------------------------------------------------
    async def _fetch_loop(self, stop: asyncio.Event) -> None:
        conn, session = self._fetch_conn, self._session
        assert conn is not None and session is not None
        version = conn.version_for(78)
        group, member = self.group_id, self.member_id
        stats = self.stats
        while not stop.is_set():
            wanted = set(self.membership.assignment)
            stray = {tp: b for tp, b in self._pending.items() if tp not in wanted}
            if stray:  # partitions taken away: their acknowledgements go on their own
                await self._acknowledge(stray)
                for tp in stray:
                    del self._pending[tp]
            if not wanted:
                self._assignment_changed.clear()
                waiter = asyncio.ensure_future(self._assignment_changed.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait([waiter, stopper], return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
                continue
            acks = self._pending if session.established else {}
            self._pending = {}
            req = session.fetch_request(group, member, wanted, acks, self.params, version)
            resp = await conn.send(req)
            stats.fetches += 1
            session.fetch_done(resp.error_code)
            if resp.error_code:
                if resp.error_code not in _SESSION_LOST:
                    raise KafkaError(resp.error_code, resp.error_message)
                # The session is gone (the broker released what it held): start a new one.
                stats.ack_refused += sum(_count(b) for b in acks.values())
                continue
            acked = {tp for tp in acks}
            keep = self.keep_ranges
            for t in resp.responses:
                tid = t.topic_id
                for p in t.partitions:
                    tp = (tid, p.partition_index)
                    if tp in acked:
                        acked.discard(tp)
                        if p.acknowledge_error_code:
                            stats.ack_refused += _count(acks[tp])
                        else:
                            stats.acknowledged += _count(acks[tp])
                    if p.error_code:
                        raise KafkaError(p.error_code, f"partition {p.partition_index}: "
                                         f"{p.error_message}")
                    ranges = p.acquired_records
                    if not ranges:
                        continue
                    for a in ranges:
                        n = a.last_offset - a.first_offset + 1
                        stats.delivered += n
                        if a.delivery_count > 1:
                            stats.redelivered += n
                        if keep:
                            stats.ranges.append((p.partition_index, a.first_offset,
                                                 a.last_offset))
                    self._pending[tp] = accept_batches(ranges)
            # The broker lists every partition that carried acknowledgements with their
            # result; one it left out is counted apart, never as acknowledged.
            for tp in acked:
                stats.ack_unanswered += _count(acks[tp])
            if self.progress is not None:
                self.progress.set()

    async def _acknowledge(self, acks: dict[TopicIdPartition, list[AckBatch]], *,
                           final: bool = False) -> None:
        conn, session = self._fetch_conn, self._session
        assert conn is not None and session is not None
        if not session.established:
            self.stats.ack_refused += sum(_count(b) for b in acks.values())
            return
        resp = await conn.send(session.acknowledge_request(self.group_id, self.member_id, acks,
                                                           final=final))
        self.stats.acknowledges += 1
        session.acknowledge_done(resp.error_code, final=final)
        if resp.error_code:
            self.stats.ack_refused += sum(_count(b) for b in acks.values())
            return
        results = {(t.topic_id, p.partition_index): p.error_code
                   for t in resp.responses for p in t.partitions}
        for tp, batches in acks.items():
            code = results.get(tp)
            if code is None:
                self.stats.ack_unanswered += _count(batches)
            elif code:
                self.stats.ack_refused += _count(batches)
            else:
                self.stats.acknowledged += _count(batches)
        if self.progress is not None:
            self.progress.set()

    async def _close(self) -> None:
        """Final acknowledgements (epoch -1 closes the session), leave the group, disconnect."""
        with contextlib.suppress(Exception):
            if self._session is not None and self._session.established:
                await asyncio.wait_for(self._acknowledge(self._pending, final=True),
                                       CLOSE_TIMEOUT_S)
                self._pending = {}
            if self._coordinator is not None and self.membership.member_epoch > 0:
                await asyncio.wait_for(
                    self._coordinator.send(self.membership.leave_request()), CLOSE_TIMEOUT_S)
        for conn in (self._fetch_conn, self._coordinator):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()


async def run_members(bootstrap: str, group_id: str, topics: list[str], members: int,
                      stop: asyncio.Event, started: asyncio.Event | None = None, *,
                      go: asyncio.Event | None = None, keep_ranges: bool = False,
                      params: FetchParams | None = None, progress: asyncio.Event | None = None,
                      out: list[RawShareMember] | None = None) -> list[MemberStats]:
    """Run ``members`` members in this event loop until ``stop``. ``started`` is set once all
    are connected; they join when ``go`` is set (at once without it). ``out`` (a list) gets
    the members, so a caller can watch their ``stats`` while they run."""
    host, _, port = bootstrap.rpartition(":")
    ms = [RawShareMember(host, int(port), group_id, topics, keep_ranges=keep_ranges,
                         params=params, progress=progress) for _ in range(members)]
    if out is not None:
        out.extend(ms)
    await asyncio.gather(*(m.start() for m in ms))
    if started is not None:
        started.set()
    if go is not None:
        await go.wait()
    return list(await asyncio.gather(*(m.run(stop) for m in ms)))
