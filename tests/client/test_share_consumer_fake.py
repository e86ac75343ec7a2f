"""AsyncShareConsumer / ShareConsumer against a scripted fake broker: the heartbeat loop
(join, fencing and rejoin, coordinator moves), share sessions (epochs, resets, leader moves),
acknowledgement piggy-backing and results, and a bounded close (final ShareAcknowledge epoch -1
before the leave heartbeat epoch -1)."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from typing import Any

import pytest

from snakka.client.share_consumer import (
    AcknowledgeType,
    AsyncShareConsumer,
    IllegalStateError,
    ShareConsumer,
    TopicPartition,
)
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.share_acknowledge_response import (
    PartitionData as AckPartitionData,
)
from snakka.protocol.messages.share_acknowledge_response import (
    ShareAcknowledgeResponse,
    ShareAcknowledgeTopicResponse,
)
from snakka.protocol.messages.share_fetch_response import (
    AcquiredRecords,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
    ShareFetchableTopicResponse,
    ShareFetchResponse,
)
from snakka.protocol.messages.share_group_heartbeat_response import (
    Assignment,
    ShareGroupHeartbeatResponse,
    TopicPartitions,
)
from snakka.records import Record, build_batch

from .fake_broker import FakeBroker, FakeCluster


def run_async(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 30))
    return wrapper


class FakeGroup:
    """Coordinator side: every member gets every partition of the subscribed topics."""

    def __init__(self, cluster: FakeCluster, interval_ms: int = 200) -> None:
        self.cluster = cluster
        self.interval_ms = interval_ms
        self.epochs: dict[str, int] = {}
        self.script: list[int] = []  # error codes to answer next, in order

    def __call__(self, req, version, conn):
        if self.script:
            return ShareGroupHeartbeatResponse(error_code=self.script.pop(0), member_epoch=-1)
        if req.member_epoch == -1:
            self.epochs.pop(req.member_id, None)
            return ShareGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)
        if req.member_epoch == 0:
            assert req.subscribed_topic_names, "a join must carry the subscription"
            self.epochs[req.member_id] = self.epochs.get(req.member_id, 0) + 1
            return ShareGroupHeartbeatResponse(
                member_id=req.member_id, member_epoch=self.epochs[req.member_id],
                heartbeat_interval_ms=self.interval_ms, assignment=Assignment(topic_partitions=[
                    TopicPartitions(topic_id=tid, partitions=list(range(n)))
                    for name, (tid, n) in self.cluster.topics.items()
                    if name in req.subscribed_topic_names]))
        if self.epochs.get(req.member_id) != req.member_epoch:
            return ShareGroupHeartbeatResponse(error_code=ErrorCode.FENCED_MEMBER_EPOCH,
                                               member_epoch=-1)
        return ShareGroupHeartbeatResponse(member_id=req.member_id, member_epoch=req.member_epoch,
                                           heartbeat_interval_ms=self.interval_ms)


class FakeShareLeader:
    """Leader side: hands out ``per_fetch`` new records per partition per ShareFetch, checks
    share-session epochs like Kafka and records every acknowledgement it receives."""

    def __init__(self, per_fetch: int = 3, total: int = 1_000) -> None:
        self.per_fetch = per_fetch
        self.total = total
        self.next: dict[tuple, int] = {}
        self.sessions: dict[int, tuple[int, set]] = {}  # conn -> (expected epoch, partitions)
        self.acks: list[tuple[tuple, int, int, list[int]]] = []
        self.fetch_script: list[Any] = []  # top-level error codes or callables, in order
        self.errors_sent: list[int] = []
        self.ack_errors: dict[tuple, int] = {}

    def _session(self, req, conn, listed, forgotten):
        if req.share_session_epoch == 0:
            self.sessions[conn] = (1, set(listed))
            return 0
        if req.share_session_epoch == -1:
            self.sessions.pop(conn, None)
            return 0
        if conn not in self.sessions:
            return ErrorCode.SHARE_SESSION_NOT_FOUND
        epoch, parts = self.sessions[conn]
        if epoch != req.share_session_epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        self.sessions[conn] = (epoch + 1, (parts | set(listed)) - set(forgotten))
        return 0

    def fetch(self, req, version, conn):
        if self.fetch_script:
            step = self.fetch_script.pop(0)
            if callable(step):
                return step(req, version, conn)
            self.errors_sent.append(step)
            self.sessions.pop(conn, None)
            return ShareFetchResponse(error_code=step)
        listed = [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions]
        forgotten = [(t.topic_id, p) for t in req.forgotten_topics_data for p in t.partitions]
        if req.share_session_epoch == 0:
            assert not any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
        code = self._session(req, conn, listed, forgotten)
        if code:
            self.errors_sent.append(code)
            return ShareFetchResponse(error_code=code)
        self.record_acks(req)
        by_topic: dict = {}
        for tip in sorted(self.sessions[conn][1], key=lambda x: (x[0].int, x[1])):
            start = self.next.get(tip, 0)
            n = min(self.per_fetch, self.total - start)
            pd = PartitionData(partition_index=tip[1], current_leader=LeaderIdAndEpoch(-1, -1),
                               acknowledge_error_code=self.ack_errors.get(tip, 0))
            if n > 0:
                pd.records = build_batch([Record(timestamp=1, key=b"%d" % (start + i),
                                                 value=b"v") for i in range(n)],
                                         base_offset=start)
                pd.acquired_records = [AcquiredRecords(start, start + n - 1, 1)]
                self.next[tip] = start + n
            by_topic.setdefault(tip[0], []).append(pd)
        return ShareFetchResponse(acquisition_lock_timeout_ms=30_000, responses=[
            ShareFetchableTopicResponse(topic_id=tid, partitions=parts)
            for tid, parts in by_topic.items()])

    def acknowledge(self, req, version, conn):
        if req.share_session_epoch != -1:
            code = self._session(req, conn, [], [])
            if code:
                return ShareAcknowledgeResponse(error_code=code)
        else:
            self.sessions.pop(conn, None)
        self.record_acks(req)
        return ShareAcknowledgeResponse(responses=[
            ShareAcknowledgeTopicResponse(topic_id=t.topic_id, partitions=[
                AckPartitionData(partition_index=p.partition_index,
                                 error_code=self.ack_errors.get((t.topic_id, p.partition_index),
                                                                0),
                                 current_leader=LeaderIdAndEpoch(-1, -1))
                for p in t.partitions]) for t in req.topics])

    def record_acks(self, req) -> None:
        for t in req.topics:
            for p in t.partitions:
                for b in p.acknowledgement_batches:
                    self.acks.append(((t.topic_id, p.partition_index), b.first_offset,
                                      b.last_offset, list(b.acknowledge_types)))

    def acked_offsets(self, tip, types=(1,)) -> set[int]:
        out = set()
        for t, first, last, kinds in self.acks:
            if t != tip:
                continue
            for i, o in enumerate(range(first, last + 1)):
                k = kinds[0] if len(kinds) == 1 else kinds[i]
                if k in types:
                    out.add(o)
        return out


async def setup(partitions: int = 1, per_fetch: int = 3, interval_ms: int = 200, **cfg):
    cluster = FakeCluster()
    tid = cluster.add_topic("t", partitions)
    broker = await FakeBroker(cluster, 1).start()
    group = FakeGroup(cluster, interval_ms)
    leader = FakeShareLeader(per_fetch)
    broker.handlers.update({76: group, 78: leader.fetch, 79: leader.acknowledge})
    consumer = AsyncShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                                   "fetch.max.wait.ms": 50, **cfg})
    return cluster, tid, broker, group, leader, consumer


async def poll_until(consumer, n: int, timeout: float = 5.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"only {len(out)} of {n} records"
        out += await consumer.poll(0.2)
    return out


@run_async
async def test_join_fetch_implicit_ack_and_ordered_close():
    cluster, tid, broker, group, leader, c = await setup()
    await c.subscribe(["t"])
    recs = await poll_until(c, 1)
    assert [r.offset for r in recs] == [0, 1, 2]
    assert recs[0].topic == "t" and recs[0].partition == 0 and recs[0].delivery_count == 1
    assert c.assignment() == {TopicPartition("t", 0)}
    hb = broker.of(76)[0]
    assert hb.member_epoch == 0 and hb.subscribed_topic_names == ["t"] and hb.member_id
    recs = await c.poll(1)  # implicit: the first three are accepted on this fetch
    assert [r.offset for r in recs] == [3, 4, 5]
    fetches = broker.of(78)
    assert [f.share_session_epoch for f in fetches] == [0, 1]
    assert fetches[0].max_wait_ms == 50 and fetches[0].max_records == 500
    assert leader.acked_offsets((tid, 0)) == {0, 1, 2}
    await c.close()  # like Kafka's consumer: the last poll's records are released, not accepted
    assert leader.acked_offsets((tid, 0)) == {0, 1, 2}
    assert leader.acked_offsets((tid, 0), types=(2,)) == {3, 4, 5}
    # the final ShareAcknowledge (epoch -1) precedes the leave heartbeat (epoch -1)
    order = [(k, getattr(r, "share_session_epoch", getattr(r, "member_epoch", None)))
             for k, _v, r, _c in broker.requests if k in (76, 79)]
    assert order[-2:] == [(79, -1), (76, -1)]
    assert leader.errors_sent == []
    with pytest.raises(IllegalStateError):
        await c.poll(0)
    await broker.stop()


@run_async
async def test_explicit_mode_release_reject_and_poll_check():
    cluster, tid, broker, group, leader, c = await setup(
        **{"share.acknowledgement.mode": "explicit"})
    results = []
    c.set_acknowledgement_commit_callback(lambda offsets, exc: results.append((offsets, exc)))
    await c.subscribe(["t"])
    recs = await poll_until(c, 1)
    with pytest.raises(IllegalStateError):
        await c.poll(0)  # nothing acknowledged yet
    c.acknowledge(recs[0])
    c.acknowledge(recs[1], AcknowledgeType.RELEASE)
    c.acknowledge(recs[2], AcknowledgeType.REJECT)
    with pytest.raises(IllegalStateError):
        c.acknowledge(recs[2], AcknowledgeType.ACCEPT)
    out = await c.commit_sync(5)
    assert out == {TopicPartition("t", 0): None}
    assert leader.acks[-1] == ((tid, 0), 0, 2, [1, 2, 3])
    assert results == [({TopicPartition("t", 0): {0, 1, 2}}, None)]
    assert await c.commit_sync(1) == {}  # nothing pending
    await c.close()
    await broker.stop()


@run_async
async def test_fenced_member_rejoins_from_epoch_zero_with_the_same_member_id():
    cluster, tid, broker, group, leader, c = await setup(interval_ms=50)
    await c.subscribe(["t"])
    await poll_until(c, 1)
    member = c.member_id
    group.epochs[member] = 99  # the coordinator moved on: the next heartbeat is fenced
    hbs = await broker.wait_for(76, 4)
    joins = [h for h in broker.of(76) if h.member_epoch == 0]
    assert len(joins) >= 2 and all(h.member_id == member for h in broker.of(76))
    assert joins[-1].subscribed_topic_names == ["t"]
    assert hbs
    deadline = time.monotonic() + 5
    while c.member_epoch != 100:
        assert time.monotonic() < deadline
        await c.poll(0.05)
    await c.close()
    await broker.stop()


@run_async
async def test_coordinator_errors_rediscover_the_coordinator():
    cluster, tid, broker, group, leader, c = await setup(interval_ms=50)
    group.script = [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
    await c.subscribe(["t"])
    recs = await poll_until(c, 1)
    assert recs
    assert len(broker.of(10)) >= 2  # found again after NOT_COORDINATOR
    assert all(r.key_type == 0 for r in broker.of(10))
    await c.close()
    await broker.stop()


@run_async
async def test_session_errors_reopen_the_session_at_epoch_zero():
    cluster, tid, broker, group, leader, c = await setup()
    await c.subscribe(["t"])
    await poll_until(c, 1)
    leader.fetch_script = [ErrorCode.INVALID_SHARE_SESSION_EPOCH]
    recs = await poll_until(c, 1)  # the failed fetch, then a new session at once
    epochs = [f.share_session_epoch for f in broker.of(78)]
    assert epochs[:3] == [0, 1, 0], epochs
    assert recs[0].offset == 3
    await c.close()
    await broker.stop()


@run_async
async def test_leader_hint_moves_fetches_to_the_new_leader():
    cluster, tid, broker, group, leader, c = await setup()
    b2 = await FakeBroker(cluster, 2).start()
    leader2 = FakeShareLeader()
    b2.handlers.update({78: leader2.fetch, 79: leader2.acknowledge})
    await c.subscribe(["t"])
    await poll_until(c, 1)

    def moved(req, version, conn):
        leader.record_acks(req)  # the old leader still takes the acknowledgements
        cluster.leaders[("t", 0)] = 2
        return ShareFetchResponse(responses=[ShareFetchableTopicResponse(topic_id=tid, partitions=[
            PartitionData(partition_index=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                          current_leader=LeaderIdAndEpoch(2, 5))])],
            node_endpoints=[NodeEndpoint(node_id=2, host="127.0.0.1", port=b2.port)])
    leader.fetch_script = [moved]
    recs = await poll_until(c, 1)
    assert recs[0].offset == 0 and b2.of(78)[0].share_session_epoch == 0
    # acknowledgements of records acquired on node 1 still go to node 1
    await c.close()
    assert leader.acked_offsets((tid, 0)) == {0, 1, 2}
    assert leader2.acked_offsets((tid, 0), types=(2,)) == {0, 1, 2}  # released by close
    await b2.stop()
    await broker.stop()


@run_async
async def test_lost_connection_fails_its_acknowledgements_and_resets_the_session():
    cluster, tid, broker, group, leader, c = await setup(
        **{"share.acknowledgement.mode": "explicit"})
    results = []
    c.set_acknowledgement_commit_callback(lambda offsets, exc: results.append((offsets, exc)))
    await c.subscribe(["t"])
    recs = await poll_until(c, 1)
    for r in recs:
        c.acknowledge(r)
    broker.drop_connections()
    await asyncio.sleep(0.05)
    out = await c.commit_sync(2)
    err = out[TopicPartition("t", 0)]
    assert isinstance(err, KafkaError) and err.code == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert results and results[-1][1] is err
    recs = await poll_until(c, 1)  # a new session (epoch 0) on a new connection
    assert broker.of(78)[-1].share_session_epoch in (0, 1) and recs[0].offset == 3
    for r in recs:
        c.acknowledge(r)
    await c.close()
    await broker.stop()


@run_async
async def test_ack_errors_reach_commit_results():
    cluster, tid, broker, group, leader, c = await setup(
        **{"share.acknowledgement.mode": "explicit"})
    await c.subscribe(["t"])
    recs = await poll_until(c, 1)
    for r in recs:
        c.acknowledge(r)
    leader.ack_errors[(tid, 0)] = ErrorCode.INVALID_RECORD_STATE
    out = await c.commit_sync(2)
    assert out[TopicPartition("t", 0)].code == ErrorCode.INVALID_RECORD_STATE
    await c.close()
    await broker.stop()


@run_async
async def test_close_is_bounded_when_the_broker_stops_answering():
    cluster, tid, broker, group, leader, c = await setup()
    await c.subscribe(["t"])
    await poll_until(c, 1)
    never = asyncio.Event()

    async def hang(req, version, conn):
        await never.wait()
    broker.handlers[79] = hang
    broker.handlers[76] = hang
    t0 = time.monotonic()
    await c.close(timeout=1.0)
    assert time.monotonic() - t0 < 3.0
    never.set()
    await broker.stop()


@run_async
async def test_unsubscribe_leaves_and_resubscribe_rejoins():
    cluster, tid, broker, group, leader, c = await setup()
    await c.subscribe(["t"])
    await poll_until(c, 1)
    await c.unsubscribe()
    assert c.subscription() == [] and c.assignment() == set()
    assert broker.of(76)[-1].member_epoch == -1
    assert leader.acked_offsets((tid, 0), types=(2,)) == {0, 1, 2}  # released before leaving
    with pytest.raises(IllegalStateError):
        await c.poll(0)
    await c.subscribe(["t"])
    recs = await poll_until(c, 1)
    assert recs[0].offset == 3
    await c.close()
    await broker.stop()


def test_config_validation():
    base = {"bootstrap.servers": "h:1", "group.id": "g"}
    with pytest.raises(ValueError):
        AsyncShareConsumer({"group.id": "g"})
    with pytest.raises(ValueError):
        AsyncShareConsumer({**base, "auto.offset.reset": "earliest"})
    with pytest.raises(ValueError):
        AsyncShareConsumer({**base, "share.acknowledgement.mode": "sometimes"})
    with pytest.raises(ValueError):
        AsyncShareConsumer({**base, "no.such.config": 1})
    c = AsyncShareConsumer({**base, "max.poll.records": "7", "client.id": "x"})
    assert c.config.max_poll_records == 7 and c.config.client_id == "x"
    with pytest.raises(IllegalStateError):
        c.acknowledge_offset("t", 0, 0)  # implicit mode


def test_blocking_consumer_runs_callbacks_on_the_calling_thread():
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict = {}

    async def serve():
        cluster, tid, broker, group, leader, _c = await setup()
        state.update(broker=broker, leader=leader, tid=tid)
        ready.set()
        while not state.get("stop"):
            await asyncio.sleep(0.02)
        await broker.stop()
    th = threading.Thread(target=lambda: loop.run_until_complete(serve()))
    th.start()
    try:
        assert ready.wait(10)
        threads = []
        c = ShareConsumer({"bootstrap.servers": state["broker"].bootstrap, "group.id": "g",
                           "fetch.max.wait.ms": 50, "share.acknowledgement.mode": "explicit"})
        c.set_acknowledgement_commit_callback(
            lambda offsets, exc: threads.append((threading.get_ident(), offsets, exc)))
        c.subscribe(["t"])
        recs: list = []
        deadline = time.monotonic() + 10
        while not recs:
            assert time.monotonic() < deadline
            recs = c.poll(0.2)
        for r in recs:
            c.acknowledge(r)
        assert c.commit_sync(5) == {TopicPartition("t", 0): None}
        assert threads == [(threading.get_ident(), {TopicPartition("t", 0): {0, 1, 2}}, None)]
        assert c.assignment() == {TopicPartition("t", 0)}
        c.close()
        assert state["leader"].acked_offsets((state["tid"], 0)) == {0, 1, 2}
    finally:
        state["stop"] = True
        th.join(10)
        loop.close()





@run_async
async def test_acks_wait_for_a_reopened_session_instead_of_failing():
    cluster, tid, broker, group, leader, c = await setup(
        **{"share.acknowledgement.mode": "explicit"})
    results = []
    c.set_acknowledgement_commit_callback(lambda offsets, exc: results.append(exc))
    await c.subscribe(["t"])
    recs = await poll_until(c, 1)
    for r in recs:
        c.acknowledge(r)
    c._nodes[1].session.reset()  # white-box: as after a session error the broker reported
    recs = await poll_until(c, 1)  # opens a new session: no acknowledgements on it
    assert broker.of(78)[-1].share_session_epoch == 0
    assert leader.acked_offsets((tid, 0)) == set()
    for r in recs:
        c.acknowledge(r)
    await poll_until(c, 1)  # the next fetch carries all six
    assert leader.acked_offsets((tid, 0)) == set(range(6))
    assert results == [None]
    await c.close()
    await broker.stop()


@run_async
async def test_a_consumer_that_stops_polling_leaves_and_rejoins_on_its_next_poll():
    cluster, tid, broker, group, leader, c = await setup(
        interval_ms=100, **{"max.poll.interval.ms": 400})
    await c.subscribe(["t"])
    await poll_until(c, 1)
    member = c.member_id
    await asyncio.sleep(0.8)  # the application is busy: no poll
    leaves = [h for h in broker.of(76) if h.member_epoch == -1]
    assert len(leaves) == 1 and leaves[0].member_id == member
    assert c.assignment() == set()
    n = len(broker.of(76))
    await asyncio.sleep(0.3)
    assert len(broker.of(76)) == n  # out of the group: no heartbeats until the next poll
    recs = await poll_until(c, 1)  # rejoins (epoch 0, same member id) and fetches again
    joins = [h for h in broker.of(76) if h.member_epoch == 0]
    assert len(joins) == 2 and joins[-1].member_id == member
    assert recs
    await c.close()
    await broker.stop()


@run_async
async def test_renew_needs_share_acknowledge_v2():
    from . import fake_broker
    old = fake_broker.VERSIONS[79]
    fake_broker.VERSIONS[79] = (1, 1)
    try:
        cluster, tid, broker, group, leader, c = await setup(
            **{"share.acknowledgement.mode": "explicit"})
        await c.subscribe(["t"])
        recs = await poll_until(c, 1)
        c.acknowledge(recs[0], AcknowledgeType.RENEW)
        for r in recs[1:]:
            c.acknowledge(r)
        results = []
        c.set_acknowledgement_commit_callback(lambda o, e: results.append((o, e)))
        out = await c.commit_sync(5)
        assert [(o, e.code if e else 0) for o, e in results] == [
            ({TopicPartition("t", 0): {0}}, ErrorCode.UNSUPPORTED_VERSION),
            ({TopicPartition("t", 0): {1, 2}}, 0)]
        assert TopicPartition("t", 0) in out
        assert leader.acked_offsets((tid, 0)) == {1, 2}  # no RENEW reached the broker
        c.acknowledge(recs[0])  # still in flight: its final acknowledgement goes through
        assert await c.commit_sync(5) == {TopicPartition("t", 0): None}
        assert leader.acked_offsets((tid, 0)) == {0, 1, 2}
        await c.close()
        await broker.stop()
    finally:
        fake_broker.VERSIONS[79] = old


@run_async
async def test_a_broker_without_share_groups_is_a_fatal_error():
    from . import fake_broker
    old = dict(fake_broker.VERSIONS)
    del fake_broker.VERSIONS[76], fake_broker.VERSIONS[78], fake_broker.VERSIONS[79]
    try:
        cluster, tid, broker, group, leader, c = await setup()
        await c.subscribe(["t"])
        with pytest.raises(KafkaError) as e:
            await poll_until(c, 1)
        assert e.value.code == ErrorCode.UNSUPPORTED_VERSION
        await c.close()
        await broker.stop()
    finally:
        fake_broker.VERSIONS.clear()
        fake_broker.VERSIONS.update(old)
