"""The RemoteLogManager's copy, local-retention, remote-retention and deletion rules, over real
partition logs and in-memory stand-ins for the metadata manager and object store."""

from __future__ import annotations

import asyncio
import types
import uuid

import pytest
from storage.helpers import Clock, append, batch  # tests/ is on sys.path

from remote.manager_fakes import FakeReaders, FakeRLMM, FakeRSM
from snakka.config import BrokerConfig
from snakka.metadata.core import TopicInfo
from snakka.remote.manager import RemoteLogManager, leader_epoch_checkpoint
from snakka.remote.types import RemoteLogSegmentState, RemotePartitionDeleteState
from snakka.storage import LogConfig
from snakka.storage.manager import LogManager

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED


class Replicas:
    """The slice of ReplicaManager the manager uses."""

    def __init__(self, logs: LogManager, topics: dict[str, TopicInfo]) -> None:
        self.logs = logs
        self.metadata = types.SimpleNamespace(topics=topics)
        self.moved: list[int] = []

    def advance_log_start_offset(self, pl, offset: int) -> None:  # noqa: ANN001
        if offset > pl.log_start_offset:
            pl.delete_records_before(offset)
            self.moved.append(offset)


class World:
    def __init__(self, tmp_path, **topic_cfg) -> None:  # noqa: ANN001
        self.clock = Clock()
        cfg = dict(remote_storage_enable=True, segment_bytes=1200, retention_ms=-1,
                   local_retention_bytes=0)
        cfg.update(topic_cfg)
        self.cfg = LogConfig(**cfg)
        self.logs = LogManager([str(tmp_path / "data")], self.cfg, time_ms=self.clock)
        self.topic = TopicInfo("t", uuid.uuid4(), 1)
        self.log = self.logs.open_new_log("t", 0, self.cfg, self.topic.topic_id)
        self.logs.add_log(self.log)
        self.replicas = Replicas(self.logs, {"t": self.topic})
        self.rlmm, self.rsm, self.readers = FakeRLMM(), FakeRSM(), FakeReaders()
        self.rlm = RemoteLogManager(
            BrokerConfig({"remote.log.manager.task.retry.backoff.ms": "1",
                          "remote.log.manager.task.retry.backoff.max.ms": "1"}),
            self.replicas, self.rlmm, self.rsm, self.readers, broker_id=1, time_ms=self.clock)

    def produce(self, batches: int, n: int = 10) -> None:
        for _ in range(batches):
            append(self.log, batch(n, ts=self.clock.now, value_size=20))
        self.log.flush()

    def finished(self) -> list:
        return [m for m in self.rlmm.list_remote_log_segments(self.tp) if m.state == FINISHED]

    @property
    def tp(self):  # noqa: ANN201
        return self.rlm._partitions[("t", 0)].tp

    async def round(self) -> None:
        await self.rlm.run_once()

    def close(self) -> None:
        self.rlm._copiers.shutdown()
        self.rlm._expirers.shutdown()
        self.logs.close()


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.close()


def run(coro):  # noqa: ANN001, ANN201
    return asyncio.run(coro)


def test_closed_flushed_segments_are_copied_in_order_then_deleted_locally(world):
    world.produce(20)
    closed = world.log.segments[:-1]
    assert len(closed) >= 3
    run(world.round())
    fin = world.finished()
    assert [(m.start_offset, m.end_offset) for m in fin] == \
        [(s.base_offset, s.next_offset - 1) for s in closed]
    assert world.log.highest_offset_in_remote_storage == closed[-1].next_offset - 1
    # every copy was STARTED before FINISHED, and carries the epoch checkpoint
    states = [e for e, _ in world.rlmm.events]
    assert states == ["COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED"] * len(closed)
    assert world.rsm.objects[(fin[0].segment_id, "leader_epoch_checkpoint")] == \
        leader_epoch_checkpoint([(0, 0)])
    # local retention (local.retention.bytes=0), run right after the copies, removed what is
    # remote, and never moves the log start
    assert world.log.log_start_offset == 0
    assert world.log.local_log_start_offset == closed[-1].next_offset
    assert len(world.log.segments) == 1


def test_nothing_above_the_recovery_point_or_the_lso_is_copied(world):
    world.produce(20)
    flushed_to = world.log.recovery_point
    for _ in range(10):  # unflushed segments: a crash could take them back
        append(world.log, batch(10, ts=world.clock.now, value_size=20))
    run(world.round())
    assert world.log.highest_offset_in_remote_storage < flushed_to
    world.log.flush()
    run(world.round())
    assert world.log.highest_offset_in_remote_storage == world.log.active_segment.base_offset - 1


def test_open_transaction_holds_copies_at_the_lso(world):
    world.produce(3)
    lso_start = world.log.log_end_offset
    append(world.log, batch(10, ts=world.clock.now, producer_id=7, producer_epoch=0,
                            base_sequence=0, is_transactional=True, value_size=20))
    world.produce(20)
    assert world.log.last_stable_offset == lso_start
    run(world.round())
    assert world.log.highest_offset_in_remote_storage < lso_start


def test_unuploaded_segments_survive_local_and_total_retention(world):
    world.rsm.fail = True  # the object store is down
    world.produce(20)
    run(world.round())
    assert world.finished() == []
    part = world.rlm._partitions[("t", 0)]
    assert part.failures == 1 and "down" in part.last_error
    before = len(world.log.segments)
    assert world.log.enforce_retention(world.clock.now + 10**9) == 0
    assert len(world.log.segments) == before
    # the store comes back: the dangling COPY_STARTED is cleaned up, everything is copied
    world.rsm.fail = False
    part.retry_at_ms = 0
    run(world.round())
    assert len(world.finished()) == before - 1
    assert not [m for m in world.rlmm.list_remote_log_segments(world.tp) if m.state == STARTED]
    assert len(world.log.segments) == 1  # local retention followed the copies


def test_remote_retention_by_bytes_moves_the_log_start_then_deletes(tmp_path):
    w = World(tmp_path, retention_bytes=3000, local_retention_bytes=0)
    try:
        w.produce(30)
        for _ in range(2):
            run(w.round())
            w.log.enforce_retention(w.clock.now)
        events = [e for e, _ in w.rlmm.events]
        copied, deleted = events.count("COPY_SEGMENT_FINISHED"), events.count(
            "DELETE_SEGMENT_FINISHED")
        left = w.finished()
        assert deleted > 0 and len(left) == copied - deleted > 0
        total = sum(m.segment_size_in_bytes for m in left) + w.log.only_local_size_bytes()
        # Kafka's rule: the oldest goes while what is left stays at or above retention.bytes
        assert total - left[0].segment_size_in_bytes < 3000
        assert w.log.log_start_offset == left[0].start_offset
        assert w.replicas.moved and w.replicas.moved[-1] == left[0].start_offset
        assert w.rsm.segment_ids() == {m.segment_id for m in left}
        assert len(w.readers.forgotten) == deleted
        # the log start moved before any object was deleted: no reader is sent to one
        first_delete = events.index("DELETE_SEGMENT_STARTED")
        assert first_delete > 0
    finally:
        w.close()


def test_remote_retention_by_time(tmp_path):
    w = World(tmp_path, retention_ms=60_000, local_retention_ms=0, local_retention_bytes=-2)
    try:
        w.produce(10)
        old_end = w.log.log_end_offset
        w.clock.advance(120_000)
        w.produce(10)
        run(w.round())
        run(w.round())
        assert all(m.max_timestamp_ms >= w.clock.now - 60_000 for m in w.finished())
        assert w.log.log_start_offset >= old_end - 10
    finally:
        w.close()


def test_delete_records_below_the_local_start_deletes_remote_segments(world):
    world.produce(20)
    run(world.round())
    world.log.enforce_retention(world.clock.now)
    fin = world.finished()
    cut = fin[2].start_offset + 1
    world.log.delete_records_before(cut)
    run(world.round())
    assert [m.start_offset for m in world.finished()] == [m.start_offset for m in fin[2:]]


def test_deleted_topic_deletes_all_remote_data(world):
    world.produce(20)
    run(world.round())
    assert world.rsm.objects
    async def delete():  # noqa: ANN202
        world.rlm.on_topic_deleted(world.topic)
        await asyncio.wait(list(world.rlm._deleting.values()))
    run(delete())
    assert world.rsm.objects == {}
    assert [e.state for e in world.rlmm.partition_events] == [
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED]


def test_restart_keeps_the_log_start_below_the_local_part(tmp_path):
    w = World(tmp_path)
    w.produce(20)
    run(w.round())
    w.log.enforce_retention(w.clock.now)
    local_start = w.log.local_log_start_offset
    assert local_start > 0
    rlmm, rsm = w.rlmm, w.rsm
    w.logs.checkpoint()
    w.close()
    logs = LogManager([str(tmp_path / "data")], w.cfg, time_ms=w.clock)
    try:
        logs.load_all(lambda name: w.cfg)
        pl = logs.get_log("t", 0)
        assert pl.log_start_offset == 0 and pl.local_log_start_offset == local_start
        rlm = RemoteLogManager(BrokerConfig({}), Replicas(logs, {"t": w.topic}), rlmm, rsm,
                               FakeReaders(), broker_id=1, time_ms=w.clock)
        rlm.scan()
        assert pl.highest_offset_in_remote_storage == local_start - 1
        assert pl.remote_log_reader is not None
        rlm._copiers.shutdown()
        rlm._expirers.shutdown()
    finally:
        logs.close()


def test_copy_rate_limit_spaces_copies(tmp_path):
    from snakka.remote.manager import _RateLimit

    async def go() -> float:
        rl = _RateLimit(10_000)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for _ in range(3):
            await rl.acquire(1_000)  # 0.1 s each after the first
        return loop.time() - t0

    took = run(go())
    assert took >= 0.19  # the second and third waited for the rate
