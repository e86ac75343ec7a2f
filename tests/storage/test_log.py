"""UnifiedLog: appends, rolls, reads, ListOffsets, DeleteRecords, retention, restart."""

from __future__ import annotations

import os
import struct

import pytest

from snakka.records import Record, build_batch, iter_records, parse_header
from snakka.storage import LogClosedError, LogConfig, OffsetOutOfRangeError, UnifiedLog
from snakka.storage.index import OffsetIndex

from .helpers import Clock, append, batch, open_log

T0 = 1_700_000_000_000


def offsets_of(data) -> list[int]:
    return [r.offset for r in iter_records(bytes(data))]


def batch_bases(data) -> list[int]:
    out, pos, data = [], 0, bytes(data)
    while pos < len(data):
        h = parse_header(data, pos)
        out.append(h.base_offset)
        pos += h.size
    assert pos == len(data), "read returned a partial batch"
    return out


def read_all(plog: UnifiedLog, start: int | None = None) -> list[int]:
    off = plog.log_start_offset if start is None else start
    seen = []
    while off < plog.log_end_offset:
        data = plog.read(off, 1 << 20)
        recs = [r.offset for r in iter_records(bytes(data)) if r.offset >= off]
        assert recs, f"no progress at {off}"
        seen += recs
        off = recs[-1] + 1
    return seen


def test_new_log_is_empty(tmp_path):
    plog = open_log(tmp_path / "t-0")
    assert (plog.topic, plog.partition) == ("t", 0)
    assert plog.log_start_offset == plog.log_end_offset == plog.high_watermark == 0
    assert plog.read(0, 1000) == b""
    assert os.path.exists(tmp_path / "t-0" / "00000000000000000000.log")


def test_offsets_contiguous_over_many_appends(tmp_path):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3000))
    expected = 0
    for i in range(200):
        n = 1 + i % 5
        r = append(plog, batch(n))
        assert (r.base_offset, r.last_offset) == (expected, expected + n - 1)
        assert r.log_append_time_ms == -1 and r.log_start_offset == 0 and not r.duplicate
        expected += n
    assert plog.log_end_offset == expected
    assert read_all(plog) == list(range(expected))
    assert len(plog.segments) > 3


def test_append_patches_leader_epoch(tmp_path):
    plog = UnifiedLog(str(tmp_path / "t-0"), LogConfig(), recover=False, time_ms=Clock(), partition_leader_epoch=4)
    append(plog, batch(2))
    assert parse_header(bytes(plog.read(0, 1000))).partition_leader_epoch == 4


def test_log_append_time_topic(tmp_path):
    clock = Clock(T0 + 5000)
    plog = open_log(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"), clock=clock)
    r = append(plog, batch(3, ts=T0))
    assert r.log_append_time_ms == T0 + 5000
    h = parse_header(bytes(plog.read(0, 1000)))
    assert h.is_log_append_time and h.max_timestamp == T0 + 5000
    assert r.log_append_time_ms == append(plog, batch(1), log_append_time_ms=T0 + 5000).log_append_time_ms


def test_segment_roll_by_bytes_never_splits_a_batch(tmp_path):
    one = len(batch(5))
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=one * 3 + 10))
    for _ in range(10):
        append(plog, batch(5))
    sizes = [s.size for s in plog.segments]
    assert sizes == [one * 3, one * 3, one * 3, one]
    assert [s.base_offset for s in plog.segments] == [0, 15, 30, 45]
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert "00000000000000000015.log" in names
    # a producer-state snapshot per roll; the latest two are kept
    assert [n for n in names if n.endswith(".snapshot")] == [
        "00000000000000000030.snapshot",
        "00000000000000000045.snapshot",
    ]


def test_oversized_batch_goes_into_an_empty_segment(tmp_path):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=100))
    append(plog, batch(5))
    append(plog, batch(5))
    assert [s.base_offset for s in plog.segments] == [0, 5]


def test_segment_roll_by_time_uses_batch_timestamps(tmp_path):
    clock = Clock(T0)
    plog = open_log(tmp_path / "t-0", LogConfig(segment_ms=1000), clock=clock)
    append(plog, batch(1, ts=T0))
    append(plog, batch(1, ts=T0 + 1000))  # waited == segment.ms: no roll yet
    assert len(plog.segments) == 1
    append(plog, batch(1, ts=T0 + 1001))
    assert [s.base_offset for s in plog.segments] == [0, 2]


def test_segment_roll_by_time_falls_back_to_wall_clock(tmp_path):
    clock = Clock(T0)
    plog = open_log(tmp_path / "t-0", LogConfig(segment_ms=1000), clock=clock)
    append(plog, batch(1, ts=-1))
    clock.advance(500)
    append(plog, batch(1, ts=-1))
    assert len(plog.segments) == 1
    clock.advance(600)
    append(plog, batch(1, ts=-1))
    assert len(plog.segments) == 2


def test_roll_when_index_full(tmp_path):
    plog = open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=0, segment_index_bytes=8 * 3))
    for _ in range(8):
        append(plog, batch(1))
    # the first batch of a segment is never indexed; then 3 entries fill the index
    assert [s.base_offset for s in plog.segments] == [0, 4]
    assert [s.offset_index.entries for s in plog.segments] == [3, 3]
    append(plog, batch(1))
    assert [s.base_offset for s in plog.segments] == [0, 4, 8]


def test_index_is_sparse_and_entries_point_at_batches(tmp_path):
    cfg = LogConfig(index_interval_bytes=500)
    plog = open_log(tmp_path / "t-0", cfg)
    one = len(batch(2))
    for _ in range(60):
        append(plog, batch(2))
    seg = plog.segments[0]
    entries = seg.offset_index.entries
    assert 0 < entries < 60
    assert entries == pytest.approx(60 * one / (500 + one), abs=2)
    data = open(seg.path, "rb").read()
    for rel, pos in zip(seg.offset_index._rel, seg.offset_index._pos, strict=True):
        h = parse_header(data, pos)
        assert h.base_offset + h.last_offset_delta == rel  # Kafka: batch last offset -> position
    # lookups land on or before the batch containing the target
    for target in range(0, 120, 7):
        off, pos = seg.offset_index.lookup(target)
        assert off <= max(target, 0) or pos == 0
        assert parse_header(data, pos).base_offset <= target


def test_read_from_middle_of_batch_returns_whole_batch(tmp_path):
    plog = open_log(tmp_path / "t-0")
    append(plog, batch(10))
    append(plog, batch(10))
    data = plog.read(15, 1 << 20)
    assert batch_bases(data) == [10]
    assert offsets_of(data) == list(range(10, 20))
    assert batch_bases(plog.read(3, 1 << 20)) == [0, 10]


def test_read_respects_max_bytes_with_whole_batches(tmp_path):
    plog = open_log(tmp_path / "t-0")
    one = len(batch(3))
    for _ in range(10):
        append(plog, batch(3))
    assert batch_bases(plog.read(0, one * 3 + one // 2)) == [0, 3, 6]
    assert batch_bases(plog.read(0, one * 3)) == [0, 3, 6]
    assert batch_bases(plog.read(4, one)) == [3]
    # min_one_message: the first batch even if larger than max_bytes
    assert batch_bases(plog.read(0, 10)) == [0]
    assert plog.read(0, 10, min_one_message=False) == b""
    assert batch_bases(plog.read(0, 0)) == [0]


def test_read_with_max_offset(tmp_path):
    plog = open_log(tmp_path / "t-0")
    for _ in range(5):
        append(plog, batch(2))
    assert batch_bases(plog.read(0, 1 << 20, max_offset=6)) == [0, 2, 4]
    assert plog.read(6, 1 << 20, max_offset=6) == b""
    assert batch_bases(plog.read(3, 1 << 20, max_offset=5)) == [2]


def test_read_stops_at_segment_end_then_continues(tmp_path):
    one = len(batch(2))
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=one * 2))
    for _ in range(6):
        append(plog, batch(2))
    assert [s.base_offset for s in plog.segments] == [0, 4, 8]
    assert batch_bases(plog.read(0, 1 << 20)) == [0, 2]
    assert batch_bases(plog.read(4, 1 << 20)) == [4, 6]
    assert read_all(plog) == list(range(12))


def test_read_out_of_range(tmp_path):
    plog = open_log(tmp_path / "t-0")
    append(plog, batch(3))
    assert plog.read(3, 100) == b""
    with pytest.raises(OffsetOutOfRangeError) as ei:
        plog.read(4, 100)
    assert ei.value.error_code == 1 and ei.value.log_end_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(-1, 100)


def test_sequential_reads_hit_the_cache(tmp_path, monkeypatch):
    plog = open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=10**6))
    for _ in range(50):
        append(plog, batch(2))
    calls = []
    seg = plog.segments[0]
    real = seg.find_batch
    monkeypatch.setattr(seg, "find_batch", lambda *a: calls.append(a) or real(*a))
    one = len(batch(2))
    off = 0
    while off < 100:
        data = plog.read(off, one * 4)
        off = offsets_of(data)[-1] + 1
    assert off == 100
    assert len(calls) <= 1  # only the very first fetch had to search


def test_offset_for_timestamp(tmp_path):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=400, index_interval_bytes=100))
    # batch i holds records with timestamps T0+10i, T0+10i+1, T0+10i+2
    for i in range(20):
        append(plog, batch(3, ts=T0 + 10 * i))
    assert len(plog.segments) > 2
    assert plog.offset_for_timestamp(T0) == (0, T0)
    assert plog.offset_for_timestamp(T0 + 11) == (4, T0 + 11)
    assert plog.offset_for_timestamp(T0 + 13) == (6, T0 + 20)
    assert plog.offset_for_timestamp(T0 + 192) == (59, T0 + 192)
    assert plog.offset_for_timestamp(T0 + 193) is None
    assert plog.offset_for_timestamp(0) == (0, T0)


def test_offset_for_timestamp_non_monotonic_records(tmp_path):
    plog = open_log(tmp_path / "t-0")
    recs = [Record(timestamp=t, value=b"x") for t in (T0 + 50, T0 + 10, T0 + 70, T0 + 60)]
    buf = bytearray(build_batch(recs))
    plog.append(buf, plog.validate(buf))
    assert plog.offset_for_timestamp(T0 + 20) == (0, T0 + 50)
    assert plog.offset_for_timestamp(T0 + 55) == (2, T0 + 70)
    assert plog.max_timestamp_offset() == (2, T0 + 70)


def test_max_timestamp_offset(tmp_path):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300))
    assert plog.max_timestamp_offset() is None
    for i, ts in enumerate([T0 + 5, T0 + 90, T0 + 20, T0 + 90, T0 + 1]):
        append(plog, batch(2, ts=ts - 1 if i != 1 else ts))
    # the batch at offsets 2..3 has timestamps T0+90, T0+91 -> max record at offset 3
    assert plog.max_timestamp_offset() == (3, T0 + 91)


def test_max_timestamp_offset_log_append_time(tmp_path):
    clock = Clock(T0)
    plog = open_log(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"), clock=clock)
    append(plog, batch(3))
    clock.advance(10)
    append(plog, batch(3))
    assert plog.max_timestamp_offset() == (3, T0 + 10)
    assert plog.offset_for_timestamp(T0 + 1) == (3, T0 + 10)


def test_delete_records_before(tmp_path):
    one = len(batch(2))
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=one * 2))
    for _ in range(6):
        append(plog, batch(2))
    assert plog.delete_records_before(5) == 5
    assert plog.log_start_offset == 5
    assert [s.base_offset for s in plog.segments] == [4, 8]
    assert not os.path.exists(tmp_path / "t-0" / "00000000000000000000.log")
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(4, 100)
    assert read_all(plog) == list(range(5, 12))
    assert plog.delete_records_before(3) == 5  # never goes back
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records_before(13)
    assert plog.delete_records_before(12) == 12
    assert plog.read(12, 100) == b""
    assert [s.base_offset for s in plog.segments] == [8]  # active segment kept


def test_retention_ms_deletes_closed_segments(tmp_path):
    clock = Clock(T0)
    one = len(batch(2))
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=one * 2, retention_ms=1000), clock=clock)
    for i in range(6):
        append(plog, batch(2, ts=T0 + 100 * i))
    # segments: [0..3] max T0+101, [4..7] max T0+301, [8..11] max T0+501 (active)
    assert plog.enforce_retention(T0 + 1100) == 0
    assert plog.enforce_retention(T0 + 1102) == 1
    assert plog.log_start_offset == 4
    assert plog.enforce_retention(T0 + 1302) == 1
    assert [s.base_offset for s in plog.segments] == [8]
    # the active segment expires too: it is rolled first, an empty one remains
    assert plog.enforce_retention(T0 + 1502) == 1
    assert plog.log_start_offset == plog.log_end_offset == 12
    assert [s.base_offset for s in plog.segments] == [12]
    r = append(plog, batch(1, ts=T0 + 2000))
    assert r.base_offset == 12


def test_retention_infinite(tmp_path):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=100, retention_ms=-1))
    for _ in range(5):
        append(plog, batch(2, ts=1))
    assert plog.enforce_retention(T0 * 10) == 0


def test_retention_bytes(tmp_path):
    one = len(batch(2))
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=one * 2, retention_bytes=one * 3, retention_ms=-1))
    for _ in range(7):
        append(plog, batch(2))
    assert plog.size_bytes == 7 * one
    # deletes oldest whole segments while the rest stays >= retention.bytes
    assert plog.enforce_retention(0) == 2
    assert plog.size_bytes == 3 * one
    assert plog.log_start_offset == 8


def test_compact_only_topic_is_not_deleted_by_retention(tmp_path):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=100, retention_ms=0, cleanup_policy=("compact",)))
    for _ in range(3):
        append(plog, batch(2, ts=1))
    assert plog.enforce_retention(T0) == 0


def test_truncate_to(tmp_path):
    one = len(batch(2))
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=one * 2))
    for _ in range(6):
        append(plog, batch(2))
    plog.truncate_to(7)  # offset 7 is inside batch [6, 7]: the whole batch goes
    assert plog.log_end_offset == 6
    assert [s.base_offset for s in plog.segments] == [0, 4]
    assert read_all(plog) == list(range(6))
    assert append(plog, batch(1)).base_offset == 6
    plog.truncate_to(0)
    assert plog.log_end_offset == 0 and plog.log_start_offset == 0
    assert read_all(plog) == []
    assert append(plog, batch(2)).base_offset == 0


def test_close_and_reopen_keeps_everything(tmp_path):
    clock = Clock()
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=200)
    plog = open_log(tmp_path / "t-0", cfg, clock=clock)
    for i in range(100):
        append(plog, batch(1 + i % 3, ts=T0 + i))
    leo = plog.log_end_offset
    before = [(s.base_offset, s.size, s.next_offset, s.max_timestamp, s.offset_of_max_timestamp) for s in plog.segments]
    idx_before = [(list(s.offset_index._rel), list(s.offset_index._pos)) for s in plog.segments]
    plog.close()
    with pytest.raises(LogClosedError):
        append(plog, batch(1))
    again = open_log(tmp_path / "t-0", cfg, clock=clock)
    assert again.log_end_offset == leo
    after = [(s.base_offset, s.size, s.next_offset, s.max_timestamp, s.offset_of_max_timestamp) for s in again.segments]
    assert after == before
    assert [(list(s.offset_index._rel), list(s.offset_index._pos)) for s in again.segments] == idx_before
    assert read_all(again) == list(range(leo))
    assert append(again, batch(1)).base_offset == leo
    # index files on disk are exactly Kafka's format
    seg = again.segments[0]
    raw = open(seg.offset_index.path, "rb").read()
    assert len(raw) == 8 * seg.offset_index.entries
    assert list(struct.iter_unpack(">ii", raw)) == list(zip(seg.offset_index._rel, seg.offset_index._pos, strict=True))
    loaded = OffsetIndex.load(seg.offset_index.path, seg.base_offset, 10**6, seg.size)
    assert loaded._rel == seg.offset_index._rel


def test_flush_moves_recovery_point_and_writes_indexes(tmp_path):
    plog = open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=100))
    for _ in range(20):
        append(plog, batch(2))
    assert plog.recovery_point == 0 and plog.unflushed_messages == 40
    assert plog.flush() == 40
    assert plog.recovery_point == 40 and plog.unflushed_messages == 0
    seg = plog.segments[0]
    assert os.path.getsize(seg.offset_index.path) == 8 * seg.offset_index.entries > 0
    append(plog, batch(2))
    plog.flush(up_to_offset=41)
    assert plog.recovery_point == 42


def test_delete_removes_directory(tmp_path):
    plog = open_log(tmp_path / "t-0")
    append(plog, batch(2))
    plog.delete()
    assert not os.path.exists(tmp_path / "t-0")
    assert os.listdir(tmp_path) == []


def test_multi_batch_internal_append(tmp_path):
    plog = open_log(tmp_path / "t-0")
    buf = batch(2) + batch(3)
    from snakka.records import validate_batches

    infos = validate_batches(buf, max_message_bytes=10**6, from_client=False)
    r = plog.append(buf, infos)
    assert (r.base_offset, r.last_offset) == (0, 4)
    assert batch_bases(plog.read(0, 1 << 20)) == [0, 2]


# -- replay of a compacted internal log (issue 13) -------------------------------------------
def test_iter_records_crosses_offset_gaps_emptied_and_control_batches(tmp_path):
    """A compacted log (what the cleaner leaves of __consumer_offsets) has gaps between
    offsets, header-only batches whose records are all gone (kept as Kafka's cleaner keeps
    them) and control batches: replay yields every data record and moves past the rest, even
    when a read chunk holds nothing else."""
    from snakka.records import build_batch
    from snakka.records.control import build_control_batch
    from snakka.records.rebuild import empty_batch

    def keyed(base: int, *keys: bytes) -> bytes:
        return build_batch([Record(key=k, value=b"v" + k, timestamp=T0) for k in keys],
                           base_offset=base)

    emptied = empty_batch(parse_header(keyed(5, b"x", b"y", b"z")))  # offsets 5..7, no record
    marker = bytearray(build_control_batch(9, 0, True, 0, T0))
    struct.pack_into(">q", marker, 0, 11)
    d = tmp_path / "__consumer_offsets-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(
        keyed(0, b"a", b"b") + emptied + keyed(10, b"c") + bytes(marker) + keyed(12, b"d"))
    plog = open_log(d, recover=True)
    assert plog.log_end_offset == 13
    for chunk in (1 << 20, 1):  # one read for all, and one batch per read
        assert [(r.offset, r.key) for r in plog.iter_records(chunk)] == [
            (0, b"a"), (1, b"b"), (10, b"c"), (12, b"d")]
    plog.close()
