"""LogLoader in isolation: start-up recovery of a partition directory without a UnifiedLog,
and what it reports having done (issue 10: the storage split)."""

from __future__ import annotations

import logging
import os

from snakka.records.batch import parse_header
from snakka.storage import LogConfig, LogLoader
from snakka.storage.loader import rebuild_producer_state, snapshot_filename
from snakka.txn.producer_state import ProducerStateManager

from .helpers import Clock, batch, open_log

CFG = LogConfig(segment_bytes=600, index_interval_bytes=200)


def write_log(path, n_batches: int, cfg: LogConfig = CFG, *, flush: bool = False,
              **batch_kw) -> int:
    """Fill ``path`` through the normal write path (fsynced, index files included, if
    ``flush``), then 'crash' (files closed, nothing more written). Returns the log end
    offset."""
    plog = open_log(path, cfg)
    for i in range(n_batches):
        buf = batch(3, **{k: (v(i) if callable(v) else v) for k, v in batch_kw.items()})
        plog.append(buf, plog.validate(buf))
    if flush:
        plog.flush()
    leo = plog.log_end_offset
    for seg in plog.segments:
        seg.file.close()
        seg.closed = True
    plog.local_log.closed = True
    return leo


def loader(path, *, recover=True, recovery_point=0, log_start_offset=0, cfg=CFG,
           psm: ProducerStateManager | None = None) -> LogLoader:
    return LogLoader(os.fspath(path), cfg, recover=recover, recovery_point=recovery_point,
                     log_start_offset=log_start_offset,
                     producer_state=psm or ProducerStateManager(), time_ms=Clock())


def log_files(path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".log"))


def test_empty_directory_gives_one_empty_segment(tmp_path):
    os.makedirs(tmp_path / "t-0")
    loaded = loader(tmp_path / "t-0", recover=False).load()
    assert [s.base_offset for s in loaded.segments] == [0]
    assert (loaded.log_start_offset, loaded.recovery_point, loaded.next_offset) == (0, 0, 0)
    assert not loaded.did_recovery_work


def test_torn_tail_is_truncated_without_a_unified_log(tmp_path, caplog):
    path = tmp_path / "t-0"
    leo = write_log(path, 12)
    files = log_files(path)
    assert len(files) > 2
    last = os.path.join(path, files[-1])
    good_size = os.path.getsize(last)
    os.truncate(last, good_size - 4)  # a torn last batch
    with caplog.at_level(logging.WARNING, logger="snakka.storage"):
        loaded = loader(path, recovery_point=0).load()
    assert loaded.next_offset == leo - 3  # the torn batch is gone, whole
    assert loaded.segments[-1].size == os.path.getsize(last)
    assert loaded.bytes_truncated == good_size - 4 - loaded.segments[-1].size > 0
    assert loaded.segments_recovered == len(files)  # recovery point 0: every segment
    assert loaded.segments_deleted == 0 and loaded.indexes_rebuilt == 0
    assert loaded.recovery_point == 0  # nothing below it was known to be synced
    assert loaded.did_recovery_work
    assert any("recovered partition t-0: truncated" in r.getMessage() for r in caplog.records)
    # The recovered tail is a batch boundary: the last batch parses and ends the file.
    seg = loaded.segments[-1]
    pos = 0
    data = seg.read(0, seg.size)
    while pos < len(data):
        h = parse_header(data, pos)
        pos += h.batch_length + 12
    assert pos == seg.size
    for s in loaded.segments:
        s.close()


def test_only_segments_from_the_recovery_point_are_rescanned(tmp_path):
    path = tmp_path / "t-0"
    leo = write_log(path, 12)
    files = log_files(path)
    last_base = int(files[-1][:20])
    loaded = loader(path, recovery_point=last_base).load()
    assert loaded.segments_recovered == 1
    assert loaded.next_offset == leo and loaded.recovery_point == last_base
    for s in loaded.segments:
        s.close()


def test_corruption_in_the_middle_deletes_the_later_segments(tmp_path, caplog):
    path = tmp_path / "t-0"
    write_log(path, 12)
    files = log_files(path)
    victim = os.path.join(path, files[1])
    with open(victim, "r+b") as f:  # flip a byte inside the first batch's records
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 0xFF]))
    with caplog.at_level(logging.WARNING, logger="snakka.storage"):
        loaded = loader(path).load()
    assert [s.base_offset for s in loaded.segments] == [int(files[0][:20]), int(files[1][:20])]
    assert loaded.segments_deleted == len(files) - 2
    assert loaded.next_offset == int(files[1][:20])  # segment 1 lost its first batch: empty
    assert log_files(path) == files[:2]
    assert sum("after the truncation point" in r.getMessage() for r in caplog.records) == \
        len(files) - 2
    for s in loaded.segments:
        s.close()


def test_clean_open_rebuilds_a_broken_index(tmp_path):
    path = tmp_path / "t-0"
    leo = write_log(path, 12, flush=True)
    first = log_files(path)[0]
    os.unlink(os.path.join(path, first.replace(".log", ".index")))
    loaded = loader(path, recover=False).load()
    assert loaded.indexes_rebuilt == 1 and loaded.segments_recovered == 0
    assert loaded.next_offset == leo and loaded.recovery_point == leo
    for s in loaded.segments:
        s.close()


def test_log_start_beyond_surviving_end_starts_an_empty_log(tmp_path):
    path = tmp_path / "t-0"
    leo = write_log(path, 4)
    n_files = len(log_files(path))
    loaded = loader(path, log_start_offset=leo + 50).load()
    assert [s.base_offset for s in loaded.segments] == [leo + 50]
    assert loaded.log_start_offset == loaded.next_offset == leo + 50
    assert loaded.segments_deleted == n_files
    assert log_files(path) == [f"{leo + 50:020d}.log"]
    loaded.segments[0].close()


def test_leftover_and_orphan_files_are_removed(tmp_path):
    path = tmp_path / "t-0"
    write_log(path, 2)
    for name in ("00000000000000000000.log.deleted", "x.swap", f"{999:020d}.index",
                 f"{999:020d}.timeindex"):
        open(os.path.join(path, name), "wb").close()
    loaded = loader(path, recover=False).load()
    left = set(os.listdir(path))
    assert not left & {"00000000000000000000.log.deleted", "x.swap", f"{999:020d}.index",
                       f"{999:020d}.timeindex"}
    for s in loaded.segments:
        s.close()


def test_producer_state_from_snapshot_plus_log(tmp_path):
    """The loader fills the producer state it is given: the snapshot taken at a roll, then
    the batch headers after it."""
    path = tmp_path / "t-0"
    leo = write_log(path, 10, producer_id=7, producer_epoch=0, base_sequence=lambda i: 3 * i)
    assert any(n.endswith(".snapshot") for n in os.listdir(path))  # taken at each roll
    psm = ProducerStateManager()
    loaded = loader(path, psm=psm).load()
    assert loaded.next_offset == leo
    entry = psm.producers[7]
    assert entry.producer_epoch == 0
    assert entry.batches[-1].last_seq == 29
    # Replayed only after the newest snapshot, not the whole log.
    assert 0 < loaded.producer_batches_replayed < 10
    # The same rebuild is what truncation uses: without snapshots it replays everything.
    for name in os.listdir(path):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(path, name))
    psm2 = ProducerStateManager()
    start, replayed = rebuild_producer_state(psm2, os.fspath(path), "t-0", loaded.segments,
                                             leo, 0)
    assert (start, replayed) == (0, 10)
    assert psm2.producers[7].batches[-1].last_seq == 29
    # A snapshot past the log end is deleted, never trusted.
    beyond = os.path.join(path, snapshot_filename(leo + 10))
    open(beyond, "wb").close()
    rebuild_producer_state(ProducerStateManager(), os.fspath(path), "t-0", loaded.segments,
                           leo, 0)
    assert not os.path.exists(beyond)
    for s in loaded.segments:
        s.close()
