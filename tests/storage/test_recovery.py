"""Unclean shutdown: torn tails, flipped bytes, lost index files; recovery says what it did."""

from __future__ import annotations

import logging
import os

import pytest

from snakka.records import iter_records
from snakka.storage import LogConfig

from .helpers import Clock, append, batch, open_log

CFG = LogConfig(segment_bytes=4000, index_interval_bytes=300)


def build(path, n_batches=40, cfg=CFG):
    plog = open_log(path, cfg)
    sizes = []
    for i in range(n_batches):
        buf = batch(3, ts=1_700_000_000_000 + i)
        sizes.append(len(buf))
        append(plog, buf)
    return plog, sizes


def crash(plog):
    """Simulate kill -9: the fds go away, nothing is flushed or closed properly."""
    for seg in plog.segments:
        seg.file.close()
        seg.closed = True
    plog.local_log.closed = True


def all_offsets(plog):
    out = []
    off = plog.log_start_offset
    while off < plog.log_end_offset:
        recs = [r.offset for r in iter_records(bytes(plog.read(off, 1 << 20))) if r.offset >= off]
        out += recs
        off = recs[-1] + 1
    return out


def last_log_file(path):
    return os.path.join(path, sorted(n for n in os.listdir(path) if n.endswith(".log"))[-1])


def test_torn_tail_is_truncated_and_logged(tmp_path, caplog):
    path = tmp_path / "t-0"
    plog, sizes = build(path)
    leo = plog.log_end_offset
    crash(plog)
    victim = last_log_file(path)
    size = os.path.getsize(victim)
    os.truncate(victim, size - 5)
    with caplog.at_level(logging.WARNING, logger="snakka.storage"):
        again = open_log(path, CFG, recover=True)
    assert again.log_end_offset == leo - 3
    assert os.path.getsize(victim) == size - sizes[-1]
    assert all_offsets(again) == list(range(leo - 3))
    msgs = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith(f"recovered partition t-0: truncated {sizes[-1] - 5} bytes at offset {leo - 3}")
        and "torn tail" in m
        for m in msgs
    ), msgs
    assert append(again, batch(1)).base_offset == leo - 3


def test_flipped_byte_in_last_batch(tmp_path, caplog):
    path = tmp_path / "t-0"
    plog, sizes = build(path)
    leo = plog.log_end_offset
    crash(plog)
    victim = last_log_file(path)
    with open(victim, "r+b") as f:
        f.seek(os.path.getsize(victim) - 4)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x55]))
    with caplog.at_level(logging.WARNING, logger="snakka.storage"):
        again = open_log(path, CFG, recover=True)
    assert again.log_end_offset == leo - 3
    assert any("CRC mismatch" in r.getMessage() and "truncated" in r.getMessage() for r in caplog.records)


def test_corruption_in_an_older_segment_drops_later_segments(tmp_path, caplog):
    path = tmp_path / "t-0"
    plog, sizes = build(path, n_batches=100)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) >= 3
    crash(plog)
    first = os.path.join(path, f"{bases[0]:020d}.log")
    with open(first, "r+b") as f:
        f.seek(sizes[0] + 70)  # inside the second batch's records
        f.write(b"\xff\xff")
    with caplog.at_level(logging.WARNING, logger="snakka.storage"):
        again = open_log(path, CFG, recover=True, recovery_point=0)
    assert again.log_end_offset == 3
    assert [s.base_offset for s in again.segments] == [0]
    assert sorted(n for n in os.listdir(path) if n.endswith(".log")) == [f"{0:020d}.log"]
    assert sum("deleted segment" in r.getMessage() for r in caplog.records) == len(bases) - 1


def test_recovery_starts_at_recovery_point(tmp_path, monkeypatch):
    path = tmp_path / "t-0"
    plog, _ = build(path)
    bases = [s.base_offset for s in plog.segments]
    plog.flush()
    rp = plog.recovery_point
    crash(plog)
    from snakka.storage import segment as segmod

    recovered = []
    real = segmod.LogSegment.recover

    def spy(self, min_next):
        recovered.append(self.base_offset)
        return real(self, min_next)

    monkeypatch.setattr(segmod.LogSegment, "recover", spy)
    # recovery point in the middle segment: only that one and later are scanned
    mid = bases[len(bases) // 2]
    again = open_log(path, CFG, recover=True, recovery_point=mid + 1)
    assert recovered == [b for b in bases if b >= mid]
    assert again.log_end_offset == rp


def test_missing_index_files_are_rebuilt(tmp_path, caplog):
    path = tmp_path / "t-0"
    plog, _ = build(path)
    before = [(list(s.offset_index._rel), list(s.offset_index._pos), list(s.time_index._ts)) for s in plog.segments]
    leo = plog.log_end_offset
    plog.close()
    for name in os.listdir(path):
        if name.endswith((".index", ".timeindex")):
            os.unlink(path / name)
    with caplog.at_level(logging.WARNING, logger="snakka.storage"):
        again = open_log(path, CFG, recover=False)
    assert again.log_end_offset == leo
    after = [(list(s.offset_index._rel), list(s.offset_index._pos), list(s.time_index._ts)) for s in again.segments]
    assert after == before
    assert sum("rebuilding indexes" in r.getMessage() for r in caplog.records) == len(before)
    again.close()
    assert all(
        os.path.exists(path / f"{s.base_offset:020d}.index") for s in again.segments
    )


@pytest.mark.parametrize("damage", ["garbage", "odd_size", "points_past_end"])
def test_corrupt_index_is_rebuilt(tmp_path, caplog, damage):
    path = tmp_path / "t-0"
    plog, _ = build(path)
    first = plog.segments[0]
    idx_path = first.offset_index.path
    rels = list(first.offset_index._rel)
    leo = plog.log_end_offset
    plog.close()
    with open(idx_path, "r+b") as f:
        if damage == "garbage":
            f.seek(8)
            f.write(b"\x00" * 8)
        elif damage == "odd_size":
            f.seek(0, 2)
            f.write(b"\x01\x02\x03")
        else:
            f.seek(0, 2)
            f.write((rels[-1] + 1000).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    with caplog.at_level(logging.WARNING, logger="snakka.storage"):
        again = open_log(path, CFG)
    assert again.segments[0].offset_index._rel == rels
    assert again.log_end_offset == leo
    assert any("rebuilding indexes" in r.getMessage() for r in caplog.records)


def test_clean_shutdown_with_torn_tail_still_recovers(tmp_path, caplog):
    """Even when told the shutdown was clean, a torn tail is found by the tail walk."""
    path = tmp_path / "t-0"
    plog, sizes = build(path)
    leo = plog.log_end_offset
    plog.close()
    victim = last_log_file(path)
    os.truncate(victim, os.path.getsize(victim) - 1)
    with caplog.at_level(logging.WARNING, logger="snakka.storage"):
        again = open_log(path, CFG, recover=False)
    assert again.log_end_offset == leo - 3
    assert any("truncated" in r.getMessage() for r in caplog.records)


def test_garbage_appended_after_last_batch(tmp_path):
    path = tmp_path / "t-0"
    plog, _ = build(path)
    leo = plog.log_end_offset
    crash(plog)
    with open(last_log_file(path), "ab") as f:
        f.write(b"\x00" * 100)  # zero-filled tail, as after a power loss
    again = open_log(path, CFG, recover=True)
    assert again.log_end_offset == leo


def test_leftover_and_orphan_files_removed(tmp_path):
    path = tmp_path / "t-0"
    plog, _ = build(path)
    plog.close()
    for name in ("00000000000000099999.index", "00000000000000000000.log.deleted", "x.swap"):
        (path / name).write_bytes(b"junk")
    open_log(path, CFG)
    names = os.listdir(path)
    assert "00000000000000099999.index" not in names
    assert not any(n.endswith((".deleted", ".swap")) for n in names)


def test_log_start_beyond_surviving_data_starts_empty_log(tmp_path, caplog):
    path = tmp_path / "t-0"
    plog, _ = build(path, n_batches=3)
    crash(plog)
    with caplog.at_level(logging.WARNING, logger="snakka.storage"):
        again = open_log(path, CFG, recover=True, log_start_offset=100)
    assert again.log_start_offset == again.log_end_offset == 100
    assert append(again, batch(1)).base_offset == 100


def test_empty_segment_file_after_crash_during_roll(tmp_path):
    path = tmp_path / "t-0"
    plog, _ = build(path, n_batches=5)
    leo = plog.log_end_offset
    crash(plog)
    (path / f"{leo:020d}.log").write_bytes(b"")
    again = open_log(path, CFG, recover=True, clock=Clock())
    assert again.log_end_offset == leo
    assert again.segments[-1].base_offset == leo
