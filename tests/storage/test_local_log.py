"""LocalLog in isolation: the segments of one directory, with no UnifiedLog, no producer
state and no log start offset (issue 10: the storage split)."""

from __future__ import annotations

import os

import pytest

from snakka.records import iter_records, validate_batches
from snakka.records.batch import assign_offsets
from snakka.storage import LocalLog, LogConfig, LogLoader, LogSegment
from snakka.txn.producer_state import ProducerStateManager

from .helpers import Clock, batch

CFG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200)


def new_local(path, cfg: LogConfig = CFG, clock: Clock | None = None) -> LocalLog:
    """A LocalLog over what the loader found in ``path`` (an empty dir: one empty segment)."""
    clock = clock or Clock()
    os.makedirs(path, exist_ok=True)
    loaded = LogLoader(os.fspath(path), cfg, recover=False, recovery_point=0, log_start_offset=0,
                       producer_state=ProducerStateManager(), time_ms=clock).load()
    return LocalLog(os.fspath(path), cfg, loaded.segments, recovery_point=loaded.recovery_point,
                    time_ms=clock)


def put(local: LocalLog, n: int = 3, *, tag: str = "") -> tuple[int, int]:
    """What UnifiedLog.append does for a plain batch: number it at the log end, append."""
    buf = batch(n, tag=tag)
    infos = validate_batches(buf, max_message_bytes=1 << 20)
    base = local.log_end_offset
    last = base + n - 1
    assign_offsets(buf, infos, base, None, 0)
    local.append(buf, infos, base, last, None)
    return base, last


def offsets(data) -> list[int]:
    return [r.offset for r in iter_records(bytes(data))]


def test_append_read_roll_across_segments(tmp_path):
    local = new_local(tmp_path / "t-0")
    assert local.log_end_offset == 0 and len(local.segments) == 1
    put(local, 3)
    put(local, 2)
    first = local.active_segment
    new = local.roll()
    assert new.base_offset == 5 and local.active_segment is new and first is not new
    put(local, 4)
    assert [s.base_offset for s in local.segments] == [0, 5]
    assert local.log_end_offset == 9
    # A read stops at the end of the segment it started in; the next continues in the next.
    assert offsets(local.read(0, 1 << 20, None, True)) == [0, 1, 2, 3, 4]
    assert offsets(local.read(5, 1 << 20, None, True)) == [5, 6, 7, 8]
    # The batch CONTAINING the offset comes back whole.
    assert offsets(local.read(1, 1 << 20, None, True)) == [0, 1, 2, 3, 4]
    # max_offset is exclusive and a batch boundary.
    assert offsets(local.read(0, 1 << 20, 3, True)) == [0, 1, 2]
    # Below one batch: nothing unless min_one_message.
    assert local.read(0, 10, None, False) == b""
    assert offsets(local.read(0, 10, None, True)) == [0, 1, 2]


def test_append_rolls_on_segment_bytes_and_tells_the_listener(tmp_path):
    local = new_local(tmp_path / "t-0", LogConfig(segment_bytes=400))
    rolled = []
    local.roll_listener = rolled.append
    sizes = []
    while len(local.segments) == 1:
        sizes.append(len(batch(3)))
        put(local, 3)
    # The batch that would have crossed segment.bytes went to a new segment.
    assert sum(sizes[:-1]) <= 400 < sum(sizes)
    assert rolled == [local.active_segment]
    assert local.active_segment.base_offset == 3 * (len(sizes) - 1)
    assert local.segments[0].size == sum(sizes[:-1])


def test_truncate_to_removes_whole_batch_and_later_segments(tmp_path):
    local = new_local(tmp_path / "t-0")
    put(local, 3)  # 0..2
    put(local, 3)  # 3..5
    local.roll()
    put(local, 3)  # 6..8
    local.flush()
    assert local.recovery_point == 9
    local.truncate_to(4)  # inside batch 3..5: the whole batch goes, and segment 6
    assert local.log_end_offset == 3
    assert [s.base_offset for s in local.segments] == [0]
    assert local.recovery_point == 3
    assert not os.path.exists(tmp_path / "t-0" / f"{6:020d}.log")
    assert offsets(local.read(0, 1 << 20, None, True)) == [0, 1, 2]
    base, _ = put(local, 2, tag="again")
    assert base == 3 and local.log_end_offset == 5


def test_truncate_fully_and_start_at(tmp_path):
    local = new_local(tmp_path / "t-0")
    put(local, 3)
    local.roll()
    put(local, 3)
    local.truncate_fully_and_start_at(100)
    assert [s.base_offset for s in local.segments] == [100]
    assert local.log_end_offset == 100 and local.base_offset == 100
    assert sorted(n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log")) == [
        f"{100:020d}.log"]
    base, last = put(local, 2)
    assert (base, last) == (100, 101)


def test_delete_segments_below_an_offset_keeps_the_active_one(tmp_path):
    local = new_local(tmp_path / "t-0")
    for _ in range(3):
        put(local, 2)
        local.roll()
    assert [s.base_offset for s in local.segments] == [0, 2, 4, 6]
    assert [s.base_offset for s in local.segments_below(4)] == [0, 2]
    assert [s.base_offset for s in local.segments_below(5)] == [0, 2]
    local.delete_segments(local.segments_below(4), "test")
    assert [s.base_offset for s in local.segments] == [4, 6]
    assert local.base_offset == 4
    assert [s.base_offset for s in local.segments_below(100)] == [4]  # never the active one


def test_read_by_time(tmp_path):
    local = new_local(tmp_path / "t-0")
    put(local, 3)  # timestamps ts .. ts+2 (see helpers.batch)
    local.roll()
    put(local, 3)  # the same timestamps again
    ts = 1_700_000_000_000
    assert local.offset_for_timestamp(ts + 1, 0) == (1, ts + 1)
    assert local.offset_for_timestamp(ts + 1, 3) == (4, ts + 1)
    assert local.offset_for_timestamp(ts + 3, 0) is None
    assert local.max_timestamp_offset(0) == (2, ts + 2)  # first on ties
    assert local.max_timestamp_offset(6) is None


def test_offsets_are_assigned_monotonically(tmp_path):
    """The append invariant: a batch starts exactly at the log end and is never empty."""
    local = new_local(tmp_path / "t-0")
    put(local, 3)
    buf = batch(2)
    infos = validate_batches(buf, max_message_bytes=1 << 20)
    with pytest.raises(AssertionError, match="append of 5..6 at log end 3"):
        local.append(buf, infos, 5, 6, None)
    with pytest.raises(AssertionError, match="append of 3..2"):
        local.append(buf, infos, 3, 2, None)
    assert local.log_end_offset == 3 and local.active_segment.next_offset == 3


def test_segment_base_offsets_must_increase(tmp_path):
    path = tmp_path / "t-0"
    os.makedirs(path)
    segs = [LogSegment.create(os.fspath(path), b, index_interval_bytes=4096,
                              max_index_size=1 << 20, now_ms=0) for b in (10, 0)]
    with pytest.raises(AssertionError, match="not increasing"):
        LocalLog(os.fspath(path), CFG, segs, recovery_point=0, time_ms=Clock())
    with pytest.raises(ValueError):
        LocalLog(os.fspath(path), CFG, [], recovery_point=0, time_ms=Clock())


def test_roll_of_an_empty_segment_is_refused(tmp_path):
    local = new_local(tmp_path / "t-0")
    with pytest.raises(AssertionError, match="roll of an empty segment"):
        local.roll()


def test_close_flushes_and_delete_removes_the_directory(tmp_path):
    local = new_local(tmp_path / "t-0")
    put(local, 3)
    assert local.unflushed_messages == 3
    local.close()
    assert local.closed and local.recovery_point == 3
    local.delete()
    assert not os.path.exists(tmp_path / "t-0")


def _region_bytes(r) -> bytes:
    from snakka.protocol import FileRegion

    if isinstance(r, FileRegion):
        try:
            return r.read_all()
        finally:
            r.close()
    return bytes(r)


def test_zero_copy_reads_are_the_same_bytes_as_memory_reads(tmp_path):
    """The zero-copy read (a FileRegion found by walking batch headers in the file) returns
    exactly the batches the in-memory read returns, for every fetch offset, size limit and
    upper bound, and its next_offset is the offset after its last batch."""
    import random

    from snakka.protocol import FileRegion
    from snakka.protocol.primitives import ZERO_COPY_MIN_BYTES

    cfg = LogConfig(segment_bytes=3 << 20, index_interval_bytes=4096)
    local = new_local(tmp_path / "t-0", cfg)
    rnd = random.Random(7)
    for _ in range(400):  # batches of 1-40 records of 1-4 KiB: 64 KiB reads span many
        n = rnd.randint(1, 40)
        buf = batch(n, value_size=rnd.randint(1, 4) * 1024)
        infos = validate_batches(buf, max_message_bytes=1 << 20)
        base = local.log_end_offset
        assign_offsets(buf, infos, base, None, 0)
        local.append(buf, infos, base, base + n - 1, None)
    assert len(local.segments) >= 2
    leo = local.log_end_offset
    regions = 0
    for _ in range(300):
        offset = rnd.randrange(leo)
        max_bytes = rnd.choice([0, 1, 1000, ZERO_COPY_MIN_BYTES - 1, ZERO_COPY_MIN_BYTES,
                                rnd.randint(ZERO_COPY_MIN_BYTES, 4 << 20)])
        max_offset = rnd.choice([None, rnd.randint(offset + 1, leo)])
        min_one = rnd.random() < 0.8
        want = bytes(local.read(offset, max_bytes, max_offset, min_one))
        got = local.read(offset, max_bytes, max_offset, min_one, zero_copy=True)
        if isinstance(got, FileRegion):
            regions += 1
            # Offsets here are contiguous: the next batch starts right after the last one.
            assert got.next_offset == offsets(want)[-1] + 1
        assert _region_bytes(got) == want, (offset, max_bytes, max_offset, min_one)
    assert regions > 50
