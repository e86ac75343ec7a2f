"""OffsetIndex / TimeIndex: lookups, truncation, incremental file writes, loading."""

from __future__ import annotations

import os
import struct

import pytest

from snakka.storage import CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_lookup_and_floor_position(tmp_path):
    idx = OffsetIndex(str(tmp_path / "0.index"), 100, 1024)
    for rel, pos in [(4, 0), (9, 500), (20, 1200)]:
        idx.append(100 + rel, pos)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(104) == (104, 0)
    assert idx.lookup(108) == (104, 0)
    assert idx.lookup(109) == (109, 500)
    assert idx.lookup(10**9) == (120, 1200)
    assert idx.floor_position(499) == 0 and idx.floor_position(500) == 500
    assert idx.floor_position(10**9) == 1200
    assert idx.max_entries == 128 and not idx.is_full()


def test_offset_index_incremental_flush_and_truncate(tmp_path):
    path = str(tmp_path / "0.index")
    idx = OffsetIndex(path, 0, 1024)
    idx.flush()
    assert os.path.getsize(path) == 0  # empty file exists, like Kafka's
    for i in range(5):
        idx.append(i * 10, i * 100)
    idx.flush()
    assert list(struct.iter_unpack(">ii", open(path, "rb").read())) == [(i * 10, i * 100) for i in range(5)]
    idx.truncate_to_offset(25)  # drops entries with offset >= 25
    assert idx.entries == 3
    idx.append(27, 250)
    idx.flush()
    assert list(struct.iter_unpack(">ii", open(path, "rb").read())) == [(0, 0), (10, 100), (20, 200), (27, 250)]
    idx.truncate_to_position(100)
    idx.flush()
    assert open(path, "rb").read() == struct.pack(">ii", 0, 0)


def test_offset_index_load_checks(tmp_path):
    path = str(tmp_path / "0.index")
    with open(path, "wb") as f:
        f.write(struct.pack(">iiii", 3, 0, 7, 400))
    idx = OffsetIndex.load(path, 50, 1024, log_size=1000)
    assert idx.lookup(57) == (57, 400) and not idx.dirty
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(path, 50, 1024, log_size=400)  # points past the log end
    with open(path, "wb") as f:
        f.write(struct.pack(">iiii", 7, 0, 3, 400))
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(path, 50, 1024, log_size=1000)
    with open(path, "wb") as f:
        f.write(b"\x00" * 9)
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(path, 50, 1024, log_size=1000)


def test_time_index(tmp_path):
    path = str(tmp_path / "0.timeindex")
    ti = TimeIndex(path, 1000, 12 * 10)
    ti.maybe_append(500, 1003)
    ti.maybe_append(500, 1004)  # not larger: skipped
    ti.maybe_append(400, 1005)  # timestamps never go back
    ti.maybe_append(900, 1010)
    assert ti.entries == 2
    assert ti.lookup(499) == (-1, 1000)
    assert ti.lookup(500) == (500, 1003)
    assert ti.lookup(10**15) == (900, 1010)
    ti.flush()
    assert list(struct.iter_unpack(">qi", open(path, "rb").read())) == [(500, 3), (900, 10)]
    loaded = TimeIndex.load(path, 1000, 120, next_offset=1011)
    assert loaded.last_entry() == (900, 1010)
    with pytest.raises(CorruptIndexError):
        TimeIndex.load(path, 1000, 120, next_offset=1005)
    ti.truncate_to_offset(1010)
    assert ti.last_entry() == (500, 1003)
