"""LogManager: discovery, checkpoints, clean-shutdown marker, metadata files, lock."""

from __future__ import annotations

import logging
import os
import uuid

import pytest

from snakka.storage import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogConfig,
    LogManager,
    read_meta_properties,
    read_offset_checkpoint,
    topic_id_from_str,
    topic_id_to_str,
    write_offset_checkpoint,
)

from .helpers import Clock, append, batch, crash, manager


def test_create_get_and_dir_names(tmp_path):
    lm = manager(tmp_path)
    a = lm.get_or_create_log("orders.v1", 0)
    b = lm.get_or_create_log("my-topic", 12)
    assert lm.get_or_create_log("orders.v1", 0) is a
    assert lm.get_log("my-topic", 12) is b and lm.get_log("nope", 0) is None
    assert os.path.isdir(tmp_path / "data" / "my-topic-12")
    assert (b.topic, b.partition) == ("my-topic", 12)
    with pytest.raises(ValueError):
        lm.get_or_create_log("bad/name", 0)
    lm.close()


def test_clean_restart_round_trip(tmp_path):
    lm = manager(tmp_path)
    tid = uuid.uuid4()
    p0 = lm.get_or_create_log("t", 0, topic_id=tid)
    p1 = lm.get_or_create_log("t-with-dash", 3)
    for _ in range(10):
        append(p0, batch(3))
    append(p1, batch(1))
    p0.delete_records_before(7)
    lm.close()
    data = tmp_path / "data"
    assert os.path.exists(data / CLEAN_SHUTDOWN_FILE)
    assert read_offset_checkpoint(str(data / RECOVERY_POINT_CHECKPOINT)) == {("t", 0): 30, ("t-with-dash", 3): 1}
    assert read_offset_checkpoint(str(data / LOG_START_OFFSET_CHECKPOINT))[("t", 0)] == 7
    assert (data / "t-0" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {topic_id_to_str(tid)}"

    lm2 = manager(tmp_path)
    logs = lm2.load_all()
    assert sorted((p.topic, p.partition) for p in logs) == [("t", 0), ("t-with-dash", 3)]
    assert not os.path.exists(data / CLEAN_SHUTDOWN_FILE)  # removed: a crash from now on is detected
    q0 = lm2.get_log("t", 0)
    assert (q0.log_start_offset, q0.log_end_offset) == (7, 30)
    assert topic_id_from_str(q0.topic_id) == tid
    assert lm2.get_log("t-with-dash", 3).log_end_offset == 1
    lm2.close()


def test_unclean_restart_recovers_from_checkpointed_recovery_point(tmp_path, caplog):
    lm = manager(tmp_path)
    p = lm.get_or_create_log("t", 0)
    for _ in range(10):
        append(p, batch(3))
    lm.flush_all()
    rp = read_offset_checkpoint(str(tmp_path / "data" / RECOVERY_POINT_CHECKPOINT))
    assert rp == {("t", 0): 30}
    for _ in range(3):
        append(p, batch(3))
    seg_path = p.active_segment.path
    crash(lm)
    os.truncate(seg_path, os.path.getsize(seg_path) - 2)
    lm2 = manager(tmp_path)
    with caplog.at_level(logging.INFO, logger="snakka.storage"):
        lm2.load_all()
    q = lm2.get_log("t", 0)
    assert q.log_end_offset == 36
    assert q.recovery_point == 30
    msgs = [r.getMessage() for r in caplog.records]
    assert any("not shut down cleanly" in m for m in msgs)
    assert any("recovered partition t-0: truncated" in m for m in msgs)
    lm2.close()


def test_log_start_offset_checkpoint_written_by_flush(tmp_path):
    lm = manager(tmp_path)
    p = lm.get_or_create_log("t", 0)
    for _ in range(5):
        append(p, batch(2))
    p.delete_records_before(4)
    assert lm.flush_all() == 1
    assert read_offset_checkpoint(str(tmp_path / "data" / LOG_START_OFFSET_CHECKPOINT)) == {("t", 0): 4}
    crash(lm)
    lm2 = manager(tmp_path)
    lm2.load_all()
    assert lm2.get_log("t", 0).log_start_offset == 4
    lm2.close()


def test_delete_log(tmp_path):
    lm = manager(tmp_path)
    p = lm.get_or_create_log("gone", 0)
    append(p, batch(1))
    assert lm.delete_log("gone", 0)
    assert not lm.delete_log("gone", 0)
    assert lm.get_log("gone", 0) is None
    assert not any(n.startswith("gone") for n in os.listdir(tmp_path / "data"))
    lm.close()
    assert read_offset_checkpoint(str(tmp_path / "data" / RECOVERY_POINT_CHECKPOINT)) == {}


def test_load_all_skips_foreign_dirs_and_removes_deleted(tmp_path):
    data = tmp_path / "data"
    (data / "not_a_partition").mkdir(parents=True)
    (data / "t-0.0123abcd-delete").mkdir()
    (data / "t-0.0123abcd-delete" / "00000000000000000000.log").write_bytes(b"x")
    lm = manager(tmp_path)
    assert lm.load_all() == []
    assert sorted(os.listdir(data)) == [".lock", "not_a_partition"]
    lm.close()


def test_load_all_leaves_the_cluster_metadata_log_alone(tmp_path):
    from snakka.storage import UnifiedLog

    meta = UnifiedLog(str(tmp_path / "data" / "__cluster_metadata-0"), LogConfig(), recover=False)
    append(meta, batch(1))
    lm = manager(tmp_path)
    assert lm.load_all() == []
    assert lm.get_log("__cluster_metadata", 0) is None
    lm.close()
    meta.close()


def test_per_topic_configs_at_load(tmp_path):
    lm = manager(tmp_path)
    lm.get_or_create_log("a", 0)
    lm.get_or_create_log("b", 0)
    lm.close()
    special = LogConfig(segment_bytes=12345)
    lm2 = manager(tmp_path)
    lm2.load_all({"a": special})
    assert lm2.get_log("a", 0).config is special
    assert lm2.get_log("b", 0).config.segment_bytes == 500
    lm2.close()


def test_dir_lock(tmp_path):
    lm = manager(tmp_path)
    with pytest.raises(RuntimeError, match="locked"):
        manager(tmp_path)
    lm.close()
    manager(tmp_path).close()


def test_meta_properties(tmp_path):
    lm = manager(tmp_path)
    props = lm.ensure_meta_properties(cluster_id="abc", node_id=1)
    assert props["version"] == "1" and props["cluster.id"] == "abc" and props["node.id"] == "1"
    assert read_meta_properties(lm.log_dir) == props
    assert lm.ensure_meta_properties(cluster_id="abc", node_id=1) == props
    with pytest.raises(ValueError, match="cluster"):
        lm.ensure_meta_properties(cluster_id="other", node_id=1)
    with pytest.raises(ValueError, match="node"):
        lm.ensure_meta_properties(cluster_id="abc", node_id=2)
    lm.close()


def test_retention_all_and_producer_expiry(tmp_path):
    clock = Clock()
    lm = LogManager([str(tmp_path / "d")], LogConfig(segment_bytes=200, retention_ms=10), time_ms=clock)
    p = lm.get_or_create_log("t", 0)
    for _ in range(6):
        append(p, batch(2, ts=clock.now, producer_id=5, producer_epoch=0, base_sequence=p.log_end_offset))
    assert len(p.segments) > 2
    clock.advance(10**8)
    assert lm.enforce_retention_all() >= 2
    assert p.producer_state.producers == {}
    lm.close()


def test_checkpoint_file_format(tmp_path):
    path = str(tmp_path / "cp")
    write_offset_checkpoint(path, {("b", 1): 5, ("a", 0): 10})
    assert open(path).read() == "0\n2\na 0 10\nb 1 5\n"
    assert read_offset_checkpoint(path) == {("a", 0): 10, ("b", 1): 5}
    for bad in ("1\n0\n", "0\n3\na 0 1\n", "zero\n", ""):
        with open(path, "w") as f:
            f.write(bad)
        assert read_offset_checkpoint(path) == {}


def test_partition_metadata_lost_in_a_crash_is_rewritten_from_the_topic_id(tmp_path, caplog):
    """partition.metadata is written without fsync (the metadata log is the authority): a crash
    can leave it empty or missing, and the next start-up, which passes every topic's id from
    the metadata log to get_or_create_log, writes it again."""
    lm = manager(tmp_path)
    tid = uuid.uuid4()
    lm.get_or_create_log("t", 0, topic_id=tid)
    lm.get_or_create_log("t", 1, topic_id=tid)
    lm.close()
    data = tmp_path / "data"
    (data / "t-0" / "partition.metadata").write_bytes(b"")  # torn by a power loss
    os.remove(data / "t-1" / "partition.metadata")

    lm2 = manager(tmp_path)
    with caplog.at_level(logging.WARNING, logger="snakka"):
        lm2.load_all()
    assert lm2.get_log("t", 0).topic_id is None and lm2.get_log("t", 1).topic_id is None
    for p in (0, 1):
        assert topic_id_from_str(lm2.get_or_create_log("t", p, topic_id=tid).topic_id) == tid
        text = (data / f"t-{p}" / "partition.metadata").read_text()
        assert text == f"version: 0\ntopic_id: {topic_id_to_str(tid)}"
    lm2.close()


def test_start_up_sums_what_the_loaders_did(tmp_path, caplog):
    """Each log is opened through the LogLoader; the manager says once what recovery did
    (segments re-scanned, bytes truncated, partitions repaired)."""
    lm = manager(tmp_path)
    logs = [lm.get_or_create_log("t", i) for i in range(2)]
    for p in logs:
        for _ in range(3):
            append(p, batch(3))
    lm.flush_all()
    paths = [p.active_segment.path for p in logs]
    crash(lm)
    os.truncate(paths[0], os.path.getsize(paths[0]) - 2)
    lm2 = manager(tmp_path)
    with caplog.at_level(logging.INFO, logger="snakka.storage"):
        lm2.load_all()
    assert [lm2.get_log("t", i).load_result.bytes_truncated > 0 for i in range(2)] == \
        [True, False]
    summary = [r.getMessage() for r in caplog.records if "recovery of" in r.getMessage()]
    assert len(summary) == 1
    assert "2 segments re-scanned; 1 partitions repaired" in summary[0]
    lm2.close()
    lm3 = manager(tmp_path)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="snakka.storage"):
        lm3.load_all()  # clean: nothing re-scanned, no summary
    assert not any("recovery of" in r.getMessage() for r in caplog.records)
    lm3.close()


def test_clean_shutdown_leaves_kafkas_files(tmp_path):
    """The files Kafka 4.0 reads when it takes over the dir (issue 17), in its formats: the
    high watermarks, an empty cleaner checkpoint, one leader epoch per partition from the log
    start, log start offsets only where they are above the first segment, and no producer
    snapshot for a partition nothing was appended to."""
    lm = manager(tmp_path)
    p0 = lm.get_or_create_log("t", 0)
    idle = lm.get_or_create_log("t", 1)
    for _ in range(10):
        append(p0, batch(3))
    p0.delete_records_before(7)
    lm.close()
    data = tmp_path / "data"
    assert read_offset_checkpoint(str(data / "replication-offset-checkpoint")) == {
        ("t", 0): 30, ("t", 1): 0}
    assert (data / "cleaner-offset-checkpoint").read_bytes() == b""
    assert (data / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 7\n"
    assert (data / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 7\n"
    assert (data / "t-1" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    assert not [n for n in os.listdir(idle.dir_path) if n.endswith(".snapshot")]
    assert os.path.exists(os.path.join(p0.dir_path, "00000000000000000030.snapshot"))
    # A restart and a second clean shutdown with nothing appended write no new snapshot.
    lm2 = manager(tmp_path)
    lm2.load_all()
    lm2.close()
    assert sorted(n for n in os.listdir(data / "t-0") if n.endswith(".snapshot"))[-1] == (
        "00000000000000000030.snapshot")


def _all_bytes(plog) -> bytes:
    """Every batch of a log, as stored, read segment by segment from its log start."""
    out, off = b"", plog.log_start_offset
    while off < plog.log_end_offset:
        data = bytes(plog.read(off, 1 << 20))
        assert data, f"{plog.name}: nothing at offset {off}"
        out += data
        off = _next_offset(data)
    return out


def _next_offset(data: bytes) -> int:
    from snakka.records.batch import parse_header

    pos, last = 0, -1
    while pos < len(data):
        h = parse_header(data[pos:])
        last = h.base_offset + h.last_offset_delta
        pos += h.batch_length + 12
    return last + 1


def _age_clean_shutdown(data, seconds: float = 2.0) -> None:
    """As if the restart came ``seconds`` after the clean shutdown: the marker and every
    partition directory get file times that much older (a restart within the same instant
    as the shutdown is handled too, by fsyncing every directory: not what this test is
    about)."""
    import time as _time

    then = _time.time() - seconds
    os.utime(data / CLEAN_SHUTDOWN_FILE, (then, then))
    for name in os.listdir(data):
        if (data / name).is_dir():
            os.utime(data / name, (then - 0.5, then - 0.5))


def test_clean_stop_and_start_of_many_partitions_needs_no_recovery_and_loses_nothing(
        tmp_path, monkeypatch):
    """Issue 15: a clean stop and start of many partitions (empty ones, ones with data and
    several segments, one with a producer) recovers nothing and loses nothing; a second
    stop with nothing changed rewrites no index file and fsyncs no partition directory,
    while a directory that did change (a roll, a snapshot) is fsynced; the files stay the
    ones Kafka 4.0 expects."""
    from snakka.storage import local_log

    n = 120
    tid = uuid.uuid4()
    lm = manager(tmp_path)
    logs = [lm.get_or_create_log("many", p, topic_id=tid) for p in range(n)]
    for p in range(0, n, 3):  # a third with data; segment_bytes=500 rolls several segments
        for i in range(p % 7 + 1):
            append(logs[p], batch(3, tag=f"p{p}-{i}-"))
    append(logs[1], batch(2, producer_id=7, producer_epoch=0, base_sequence=0))
    logs[3].delete_records_before(2)
    expected = {p.partition: (p.log_start_offset, p.log_end_offset, _all_bytes(p))
                for p in logs}
    assert any(len(p.segments) > 1 for p in logs), "setup: expected rolled segments"
    lm.close()
    data = tmp_path / "data"

    real = local_log.fsync_dir

    def restart():
        _age_clean_shutdown(data)
        fsynced: list[str] = []
        monkeypatch.setattr(local_log, "fsync_dir",
                            lambda path: (fsynced.append(os.path.basename(path)), real(path)))
        lm = manager(tmp_path)
        loaded = lm.load_all()
        assert len(loaded) == n
        for plog in loaded:
            r = plog.load_result
            assert (r.segments_recovered, r.indexes_rebuilt, r.bytes_truncated,
                    r.segments_deleted) == (0, 0, 0, 0), plog.name
            assert (plog.log_start_offset, plog.log_end_offset, _all_bytes(plog)) == \
                expected[plog.partition], plog.name
            assert plog.recovery_point == plog.log_end_offset
            assert topic_id_from_str(plog.topic_id) == tid
        assert lm.get_log("many", 1).producer_state.producers[7].last_seq == 1
        return lm, fsynced

    lm2, fsynced = restart()
    index_times = {f: os.stat(data / d / f).st_mtime_ns for d in os.listdir(data)
                   if d.startswith("many-") for f in os.listdir(data / d)}
    assert f"{0:020d}.index" in os.listdir(data / "many-2")  # an empty partition keeps its files
    lm2.close()
    assert fsynced == [], "nothing changed: no partition directory needs an fsync"
    assert {f: os.stat(data / d / f).st_mtime_ns for d in os.listdir(data)
            if d.startswith("many-") for f in os.listdir(data / d)} == index_times

    # A roll in one partition and a new snapshot in another: exactly those are fsynced.
    lm3, fsynced = restart()
    rolled, grown = lm3.get_log("many", 0), lm3.get_log("many", 2)
    segs = len(rolled.segments)
    while len(rolled.segments) == segs:
        append(rolled, batch(3, tag="more-"))
    append(grown, batch(1, tag="late-"))
    expected[0] = (rolled.log_start_offset, rolled.log_end_offset, _all_bytes(rolled))
    expected[2] = (grown.log_start_offset, grown.log_end_offset, _all_bytes(grown))
    lm3.close()
    assert sorted(fsynced) == ["many-0", "many-2"]
    lm4, _ = restart()
    lm4.close()

    # A wall clock that stepped back since the load: every directory is fsynced.
    lm5, fsynced = restart()
    lm5._wall_at_load_ns += 10**12
    lm5.close()
    assert len(fsynced) == n

    # After an unclean stop nothing is known to be durable: every directory is fsynced.
    lm6, fsynced = restart()
    crash(lm6)
    assert fsynced == []
    lm7 = manager(tmp_path)
    assert len(lm7.load_all()) == n
    lm7.close()
    assert len(fsynced) == n
