"""TopicBasedRemoteLogMetadataManager (snakka.remote.metadata_manager) on a real broker: events
in ``__remote_log_metadata`` survive a clean restart and a SIGKILL, readiness after replay, the
partition count fixed at creation, trimming keeps the state, bad records are skipped, failed
writes change nothing, and clients see the topic as the broker's own."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from snakka.records import Record, build_batch
from snakka.remote.metadata import deserialize, metadata_partition
from snakka.remote.metadata_manager import (
    REMOTE_LOG_METADATA_TOPIC,
    TopicBasedRemoteLogMetadataManager,
)
from snakka.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from snakka.testing import EmbeddedBroker

S = RemoteLogSegmentState
TIERED = {"remote.log.storage.system.enable": "true",
          "rlmm.config.remote.log.metadata.topic.num.partitions": "5"}
TP = TopicIdPartition(uuid.UUID("6d2a8c5e-1f0b-4c1a-9b7e-3a4f5e6d7c8b"), "orders", 0)
TP_OTHER = TopicIdPartition(uuid.UUID("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"), "orders", 1)


def on_loop(b: EmbeddedBroker, fn: Callable[[], Any]) -> Any:
    """Run ``fn()`` (a coroutine function or a plain one) on the broker's event loop."""
    async def call() -> Any:
        r = fn()
        return await r if asyncio.iscoroutine(r) else r
    assert b._loop is not None
    return asyncio.run_coroutine_threadsafe(call(), b._loop).result(30)


def manager(b: EmbeddedBroker, **kw: Any) -> TopicBasedRemoteLogMetadataManager:
    br = b.broker
    m = TopicBasedRemoteLogMetadataManager(br.controller, br.replicas, br.config,
                                           broker_id=br.node_id, time_ms=br.time_ms, **kw)
    on_loop(b, m.start)
    return m


def seg(start: int, end: int, tp: TopicIdPartition = TP) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId.generate(tp), start_offset=start, end_offset=end,
        max_timestamp_ms=1000 + start, broker_id=0, event_timestamp_ms=2000 + start,
        segment_size_in_bytes=end - start + 1, segment_leader_epochs=((0, start),))


def upd(md: RemoteLogSegmentMetadata, state: S, custom: bytes | None = None
        ) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.segment_id, 3000 + md.start_offset, state, 0, custom)


def copy(b: EmbeddedBroker, m: TopicBasedRemoteLogMetadataManager,
         md: RemoteLogSegmentMetadata, custom: bytes | None = b"crc") -> None:
    on_loop(b, lambda: m.add_remote_log_segment_metadata(md))
    on_loop(b, lambda: m.update_remote_log_segment_metadata(
        upd(md, S.COPY_SEGMENT_FINISHED, custom)))


def snapshot(b: EmbeddedBroker, m: TopicBasedRemoteLogMetadataManager) -> dict[str, Any]:
    def look() -> dict[str, Any]:
        out: dict[str, Any] = {"partitions": m.partitions()}
        for tp in (TP, TP_OTHER):
            out[str(tp)] = (m.list_remote_log_segments(tp), m.highest_offset_for_epoch(tp, 0),
                            m.remote_log_size(tp), m.partition_delete_state(tp),
                            [m.remote_log_segment_metadata(tp, 0, o) for o in range(0, 400, 7)])
        return out
    return on_loop(b, look)


def test_events_survive_a_restart_and_partitions_are_ready(tmp_path: Path) -> None:
    a, c, d = seg(0, 99), seg(100, 199), seg(200, 299)
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        # No topic yet: nothing to replay, every partition is ready; nothing created either.
        assert m.is_ready(TP) and m.is_ready(TP_OTHER)
        assert REMOTE_LOG_METADATA_TOPIC not in b.broker.controller.metadata.topics
        copy(b, m, a)
        copy(b, m, c)
        on_loop(b, lambda: m.add_remote_log_segment_metadata(d))  # a copy in flight
        on_loop(b, lambda: m.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_STARTED)))
        on_loop(b, lambda: m.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
            TP_OTHER, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 5, 0)))
        ti = b.broker.controller.metadata.topics[REMOTE_LOG_METADATA_TOPIC]
        assert ti.partitions == 5
        assert ti.configs["retention.ms"] == "-1" and ti.configs["cleanup.policy"] == "delete"
        before = snapshot(b, m)
        assert [s.state for s in m.list_remote_log_segments(TP)] == [
            S.DELETE_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED]
        assert m.remote_log_segment_metadata(TP, 0, 150).custom_metadata == b"crc"  # type: ignore[union-attr]
        assert m.remote_log_segment_metadata(TP, 0, 50) is None  # being deleted
        assert m.remote_log_segment_metadata(TP, 0, 250) is None  # not copied yet
        assert m.highest_offset_for_epoch(TP, 0) == 199
        assert m.remote_log_size(TP) == 100
        # Every event of TP is in TP's metadata partition, unkeyed.
        p = metadata_partition(TP, 5)
        pl = b.broker.replicas.get_log(REMOTE_LOG_METADATA_TOPIC, p)
        recs = list(pl.iter_records())
        assert all(r.key is None for r in recs)
        mine = [e for e in (deserialize(r.value) for r in recs)
                if getattr(e, "topic_id_partition", None) == TP
                or getattr(getattr(e, "segment_id", None), "topic_id_partition", None) == TP]
        assert len(mine) == 6
        on_loop(b, m.close)
        assert not m.is_ready(TP)
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m2 = TopicBasedRemoteLogMetadataManager(
            b.broker.controller, b.broker.replicas, b.broker.config, broker_id=0,
            time_ms=b.broker.time_ms)
        assert not m2.is_ready(TP)  # not replayed yet
        with pytest.raises(RuntimeError, match="not ready"):
            on_loop(b, lambda: m2.add_remote_log_segment_metadata(seg(900, 909)))
        on_loop(b, m2.start)
        assert m2.is_ready(TP)
        assert snapshot(b, m2) == before
        # The rebuilt state goes on: d finishes, a is gone.
        on_loop(b, lambda: m2.update_remote_log_segment_metadata(upd(d, S.COPY_SEGMENT_FINISHED)))
        on_loop(b, lambda: m2.update_remote_log_segment_metadata(
            upd(a, S.DELETE_SEGMENT_FINISHED)))
        assert [s.start_offset for s in m2.list_remote_log_segments(TP)] == [100, 200]


def test_illegal_events_raise_and_write_nothing(tmp_path: Path) -> None:
    a = seg(0, 9)
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
            on_loop(b, lambda: m.add_remote_log_segment_metadata(
                RemoteLogSegmentMetadata(**{**{f: getattr(a, f) for f in a.__dataclass_fields__},
                                            "state": S.COPY_SEGMENT_FINISHED})))
        with pytest.raises(ValueError, match="no remote segment"):
            on_loop(b, lambda: m.update_remote_log_segment_metadata(
                upd(a, S.COPY_SEGMENT_FINISHED)))
        assert REMOTE_LOG_METADATA_TOPIC not in b.broker.controller.metadata.topics
        on_loop(b, lambda: m.add_remote_log_segment_metadata(a))
        held = m.held(metadata_partition(TP, 5))
        with pytest.raises(ValueError, match="cannot become"):
            on_loop(b, lambda: m.update_remote_log_segment_metadata(
                upd(a, S.DELETE_SEGMENT_FINISHED)))
        assert m.held(metadata_partition(TP, 5)) == held


def test_a_failed_append_raises_and_changes_nothing(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    a = seg(0, 9)
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        on_loop(b, lambda: m.add_remote_log_segment_metadata(a))
        replicas = b.broker.replicas

        def full(*args: Any) -> Any:
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(replicas, "append_internal", full)
        with pytest.raises(OSError):
            on_loop(b, lambda: m.update_remote_log_segment_metadata(
                upd(a, S.COPY_SEGMENT_FINISHED)))
        assert m.list_remote_log_segments(TP)[0].state is S.COPY_SEGMENT_STARTED
        assert m.remote_log_segment_metadata(TP, 0, 5) is None
        monkeypatch.undo()
        on_loop(b, lambda: m.update_remote_log_segment_metadata(upd(a, S.COPY_SEGMENT_FINISHED)))
        assert m.remote_log_segment_metadata(TP, 0, 5) is not None


def test_writes_are_fsynced_even_without_strict_flush(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    a = seg(0, 9)
    with EmbeddedBroker(str(tmp_path), config={**TIERED, "log.flush.strict": "false"}) as b:
        m = manager(b)
        on_loop(b, lambda: m.add_remote_log_segment_metadata(a))
        pl = b.broker.replicas.get_log(REMOTE_LOG_METADATA_TOPIC, metadata_partition(TP, 5))
        assert pl.recovery_point >= pl.log_end_offset  # on disk before the call returned


def test_partition_count_is_fixed_once_created(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        copy(b, m, seg(0, 9))
    grown = {**TIERED, "rlmm.config.remote.log.metadata.topic.num.partitions": "7"}
    with EmbeddedBroker(str(tmp_path), config=grown) as b:
        m = manager(b)
        assert m.num_partitions == 5
        assert b.broker.controller.metadata.topics[REMOTE_LOG_METADATA_TOPIC].partitions == 5
        assert "the topic's count is used" in caplog.text
        assert m.remote_log_segment_metadata(TP, 0, 5) is not None


def test_undecodable_records_are_skipped_at_replay(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    a, c = seg(0, 9), seg(10, 19)
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        copy(b, m, a)
        p = metadata_partition(TP, 5)
        bad = [Record(timestamp=1, value=b"\x01\x09\x00junk"),  # unknown api key
               Record(timestamp=1, value=b"\x02\x00\x00"),  # unknown frame version
               Record(timestamp=1, value=None)]
        on_loop(b, lambda: b.broker.replicas.append_internal(
            REMOTE_LOG_METADATA_TOPIC, p, bytearray(build_batch(bad))))
        copy(b, m, c)
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        assert [s.start_offset for s in m.list_remote_log_segments(TP)] == [0, 10]
        assert "api key 9" in caplog.text and "frame version 2" in caplog.text
        assert "without a value" in caplog.text


def test_trimming_keeps_the_state(tmp_path: Path) -> None:
    kw = {"compact_min_records": 30, "compact_ratio": 2, "snapshot_batch_records": 4}
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b, **kw)
        p = metadata_partition(TP, 5)
        live = []
        for i in range(20):  # 20 segments copied, 16 deleted again by retention
            md = seg(i * 10, i * 10 + 9)
            copy(b, m, md)
            if i < 16:
                on_loop(b, lambda md=md: m.update_remote_log_segment_metadata(
                    upd(md, S.DELETE_SEGMENT_STARTED)))
                on_loop(b, lambda md=md: m.update_remote_log_segment_metadata(
                    upd(md, S.DELETE_SEGMENT_FINISHED)))
            else:
                live.append(md)
        on_loop(b, lambda: m.add_remote_log_segment_metadata(seg(200, 209)))

        async def settle() -> None:
            while m._trims:
                await asyncio.gather(*m._trims.values(), return_exceptions=True)
        on_loop(b, settle)
        pl = b.broker.replicas.get_log(REMOTE_LOG_METADATA_TOPIC, p)
        assert pl.log_start_offset > 0, "the partition was never trimmed"
        assert m.held(p) < 30
        before = snapshot(b, m)
        assert [s.start_offset for s in m.list_remote_log_segments(TP)] == [160, 170, 180, 190,
                                                                             200]
        assert m.highest_offset_for_epoch(TP, 0) == 199
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b, **kw)
        assert snapshot(b, m) == before


CRASH_SCRIPT = textwrap.dedent("""
    import asyncio, sys, uuid
    from snakka.broker import Broker
    from snakka.config import BrokerConfig
    from snakka.remote.metadata_manager import TopicBasedRemoteLogMetadataManager
    from snakka.remote.types import (RemoteLogSegmentId, RemoteLogSegmentMetadata,
        RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState as S, TopicIdPartition)

    async def main():
        b = Broker(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": sys.argv[1],
                                 "remote.log.storage.system.enable": "true",
                                 "rlmm.config.remote.log.metadata.topic.num.partitions": "5"}))
        await b.start()
        m = TopicBasedRemoteLogMetadataManager(b.controller, b.replicas, b.config,
                                               broker_id=0, time_ms=b.time_ms)
        await m.start()
        tp = TopicIdPartition(uuid.UUID(sys.argv[2]), "orders", 0)
        n = int(sys.argv[3])  # 0: until killed, printing each acknowledged copy
        i = 0
        while n == 0 or i < n:
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.UUID(int=i + 1)), i * 10,
                                          i * 10 + 9, 0, 0, 0, 10, ((0, i * 10),))
            await m.add_remote_log_segment_metadata(md)
            await m.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                md.segment_id, 1, S.COPY_SEGMENT_FINISHED, 0, b"x"))
            if n == 0:
                print("ACK", i, flush=True)
            i += 1
        print("WRITTEN", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
""")


def test_events_survive_sigkill(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-c", CRASH_SCRIPT, str(tmp_path), str(TP.topic_id),
                             "12"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the script prints it once every call returned
        assert line.strip() == b"WRITTEN"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        segs = m.list_remote_log_segments(TP)
        assert [s.segment_id.id for s in segs] == [uuid.UUID(int=i + 1) for i in range(12)]
        assert all(s.state is S.COPY_SEGMENT_FINISHED and s.custom_metadata == b"x"
                   for s in segs)
        assert m.highest_offset_for_epoch(TP, 0) == 119


def test_clients_see_the_topic_as_the_brokers_own(tmp_path: Path) -> None:
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        copy(b, m, seg(0, 9))
        md = AdminClient({"bootstrap.servers": b.bootstrap_servers}).list_topics(timeout=10)
        assert REMOTE_LOG_METADATA_TOPIC in md.topics
        assert len(md.topics[REMOTE_LOG_METADATA_TOPIC].partitions) == 5
        errors: list[Any] = []
        prod = Producer({"bootstrap.servers": b.bootstrap_servers, "message.timeout.ms": 5000})
        prod.produce(REMOTE_LOG_METADATA_TOPIC, b"forged", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
        prod.flush(10)
        assert errors and errors[0] is not None, "a client wrote to __remote_log_metadata"
        assert errors[0].code() != 0
        del KafkaException
        # Kafka's Metadata does not flag it internal (Topic.isInternal lists only the
        # coordinators' topics); it is reserved all the same.
        from kafka.admin import KafkaAdminClient
        kadmin = KafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
        try:
            [desc] = kadmin.describe_topics([REMOTE_LOG_METADATA_TOPIC])
            assert desc["is_internal"] is False and len(desc["partitions"]) == 5
        finally:
            kadmin.close()
        # The manager's state is untouched by the attempt.
        assert len(m.list_remote_log_segments(TP)) == 1
        # The snakka CLI: `topics list` leaves the broker's own topics out, `describe` shows it.
        from click.testing import CliRunner

        from snakka.cli import main
        runner = CliRunner()
        listed = runner.invoke(main, ["topics", "list", "-b", b.bootstrap_servers])
        assert listed.exit_code == 0 and REMOTE_LOG_METADATA_TOPIC not in listed.output
        desc = runner.invoke(main, ["topics", "describe", REMOTE_LOG_METADATA_TOPIC,
                                    "-b", b.bootstrap_servers])
        assert desc.exit_code == 0, desc.output
        assert "partitions 5" in desc.output and "retention.ms=-1" in desc.output, desc.output


def test_partitions_become_ready_as_their_metadata_partition_is_replayed(tmp_path: Path) -> None:
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        copy(b, manager(b), seg(0, 9))
        copy(b, manager(b), seg(0, 9, TP_OTHER))
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        br = b.broker
        m = TopicBasedRemoteLogMetadataManager(br.controller, br.replicas, br.config,
                                               broker_id=0, time_ms=br.time_ms)
        seen: list[tuple[int, bool, bool]] = []
        real = m._replay_partition

        async def replay(p: int) -> None:
            seen.append((p, m.is_ready(TP), m.is_ready(TP_OTHER)))
            await real(p)
        m._replay_partition = replay  # type: ignore[method-assign]
        on_loop(b, m.start)
        p_tp, p_other = metadata_partition(TP, 5), metadata_partition(TP_OTHER, 5)
        for p, ready_tp, ready_other in seen:
            assert ready_tp == (p > p_tp) and ready_other == (p > p_other)
        assert m.is_ready(TP) and m.is_ready(TP_OTHER)


def test_a_trim_cut_short_leaves_the_same_state(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash in the middle of a trim (some restated batches appended, the log start not
    moved): replay sees the old records and part of the restatement, and the same state."""
    kw = {"compact_min_records": 1_000_000, "compact_ratio": 2, "snapshot_batch_records": 3}
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b, **kw)
        # The first segment copied holds the highest offset and is deleted: its restatement
        # is one 4-record unit (added, copied, deleting, deleted) that keeps the highest
        # copied offset, written first; the crash below cuts right after it.
        for i in [11] + list(range(10)):
            md = seg(i * 10, i * 10 + 9)
            copy(b, m, md)
            if i in (11, 0, 1):
                on_loop(b, lambda md=md: m.update_remote_log_segment_metadata(
                    upd(md, S.DELETE_SEGMENT_STARTED)))
            if i in (11, 0):
                on_loop(b, lambda md=md: m.update_remote_log_segment_metadata(
                    upd(md, S.DELETE_SEGMENT_FINISHED)))
        before = snapshot(b, m)
        assert m.highest_offset_for_epoch(TP, 0) == 119
        p = metadata_partition(TP, 5)
        held = m.held(p)
        real = m._append
        calls = {"n": 0}

        def dying(part: int, events: list[Any]) -> Any:
            calls["n"] += 1
            if calls["n"] == 2:
                raise OSError(errno.EIO, "the broker dies here")
            return real(part, events)
        monkeypatch.setattr(m, "_append", dying)
        with pytest.raises(OSError):
            on_loop(b, lambda: m.trim(p, force=True))
        pl = b.broker.replicas.get_log(REMOTE_LOG_METADATA_TOPIC, p)
        assert pl.log_start_offset == 0 and m.held(p) > held  # part of it written, not trimmed
        on_loop(b, m.close)
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b, **kw)
        assert snapshot(b, m) == before
        # ... and a whole trim from there still gives it.
        assert on_loop(b, lambda: m.trim(metadata_partition(TP, 5), force=True))
        assert snapshot(b, m) == before
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        assert snapshot(b, manager(b, **kw)) == before


def test_a_finished_partition_delete_forgets_the_partition(tmp_path: Path) -> None:
    a = seg(0, 9, TP_OTHER)
    states = RemotePartitionDeleteState
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        copy(b, m, a)
        copy(b, m, seg(0, 9))
        for st in (states.DELETE_PARTITION_MARKED, states.DELETE_PARTITION_STARTED):
            on_loop(b, lambda st=st: m.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(TP_OTHER, st, 7, 0)))
            assert m.partition_delete_state(TP_OTHER) is st
        for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
            on_loop(b, lambda state=state: m.update_remote_log_segment_metadata(upd(a, state)))
        on_loop(b, lambda: m.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
            TP_OTHER, states.DELETE_PARTITION_FINISHED, 8, 0)))
        assert m.partitions() == [TP]
        assert m.partition_delete_state(TP_OTHER) is None
        on_loop(b, lambda: m.trim(metadata_partition(TP_OTHER, 5), force=True))
        assert m.partitions() == [TP]
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        assert m.partitions() == [TP]
        assert m.list_remote_log_segments(TP_OTHER) == []


def test_positive_retention_is_warned_about(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    cfg = {**TIERED, "rlmm.config.remote.log.metadata.topic.retention.ms": "604800000"}
    with EmbeddedBroker(str(tmp_path), config=cfg) as b:
        m = manager(b)
        copy(b, m, seg(0, 9))
        ti = b.broker.controller.metadata.topics[REMOTE_LOG_METADATA_TOPIC]
        assert ti.configs["retention.ms"] == "604800000"
        assert "retention deletes remote log metadata" in caplog.text


def test_acknowledged_events_survive_sigkill_mid_stream(tmp_path: Path) -> None:
    """SIGKILL while the manager keeps writing: every copy whose COPY_SEGMENT_FINISHED call
    returned is there after the restart; at most the one in flight is less far."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-c", CRASH_SCRIPT, str(tmp_path), str(TP.topic_id),
                             "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    acked = -1
    try:
        assert proc.stdout is not None
        while acked < 40:
            line = proc.stdout.readline()
            assert line.startswith(b"ACK"), line
            acked = int(line.split()[1])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        segs = m.list_remote_log_segments(TP)
        done = [s for s in segs if s.state is S.COPY_SEGMENT_FINISHED]
        assert [s.segment_id.id for s in done[:acked + 1]] == [
            uuid.UUID(int=i + 1) for i in range(acked + 1)]
        assert len(segs) <= len(done) + 1  # the copy in flight, if its start was written
        assert m.highest_offset_for_epoch(TP, 0) >= acked * 10 + 9


def test_concurrent_writers_keep_log_and_memory_in_step(tmp_path: Path) -> None:
    """Twenty partitions' copiers at once (four per metadata partition) and deletions racing
    them: what the log replays to is what memory holds."""
    tps = [TopicIdPartition(uuid.UUID(int=(i + 1) * 7919), f"t{i % 3}", i) for i in range(20)]

    async def life(m: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition) -> None:
        mds = [seg(i * 10, i * 10 + 9, tp) for i in range(6)]
        for md in mds:
            await m.add_remote_log_segment_metadata(md)
            await m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
        for md in mds[:2]:
            await m.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_STARTED))
            await m.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_FINISHED))

    def look(m: TopicBasedRemoteLogMetadataManager) -> Any:
        return {tp: (m.list_remote_log_segments(tp), m.highest_offset_for_epoch(tp, 0))
                for tp in tps}

    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b, compact_min_records=40, compact_ratio=1)

        async def everyone() -> None:
            await asyncio.gather(*(life(m, tp) for tp in tps))
            while m._trims:
                await asyncio.gather(*m._trims.values(), return_exceptions=True)
        on_loop(b, everyone)
        before = on_loop(b, lambda: look(m))
        assert all(len(segs) == 4 and hi == 59 for segs, hi in before.values())
        assert sorted(m.metadata_partitions_of(tps)) == list(range(5))
        trimmed = [p for p in range(5) if b.broker.replicas.get_log(
            REMOTE_LOG_METADATA_TOPIC, p).log_start_offset > 0]
        assert trimmed, "no trim ran among the writers"
    with EmbeddedBroker(str(tmp_path), config=TIERED) as b:
        m = manager(b)
        assert on_loop(b, lambda: look(m)) == before
