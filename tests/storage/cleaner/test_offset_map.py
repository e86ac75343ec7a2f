"""OffsetMap: the cleaner's key -> latest offset map, bounded by memory (Kafka's SkimpyOffsetMap)."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from snakka.storage.cleaner.offset_map import ENTRY_BYTES, OffsetMap, OffsetMapFullError


def test_put_get_latest_offset_clear() -> None:
    m = OffsetMap(1 << 20)
    assert m.get(b"a") == -1 and m.latest_offset == -1 and len(m) == 0
    m.put(b"a", 5)
    m.put(b"b", 6)
    m.put(b"a", 9)
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c")) == (9, 6, -1)
    assert len(m) == 2 and m.latest_offset == 9
    m.update_latest_offset(20)
    assert m.latest_offset == 20
    m.update_latest_offset(3)  # never goes back
    assert m.latest_offset == 20
    m.clear()
    assert len(m) == 0 and m.latest_offset == -1 and m.get(b"a") == -1


def test_keys_are_digests_not_copies() -> None:
    m = OffsetMap(1 << 20)
    big = b"k" * 100_000
    m.put(big, 1)
    m.put(memoryview(b"x" * 10), 2)  # any buffer works as a key
    assert m.get(bytearray(big)) == 1 and m.get(b"x" * 10) == 2
    assert all(len(k) == 16 for k in m._map)


def test_capacity_follows_memory_and_load_factor() -> None:
    m = OffsetMap(ENTRY_BYTES * 100, load_factor=0.5)
    assert m.capacity == 50
    assert OffsetMap(ENTRY_BYTES * 100).capacity == 90
    for i in range(50):
        assert not m.full
        m.put(b"k%d" % i, i)
    assert m.full and m.utilization == 1.0
    m.put(b"k3", 60)  # a key already there may still move forward
    assert m.get(b"k3") == 60 and len(m) == 50
    with pytest.raises(OffsetMapFullError):
        m.put(b"new", 61)
    assert m.get(b"new") == -1 and m.latest_offset == 60


@pytest.mark.parametrize("memory, load", [(100, 0.9), (ENTRY_BYTES * 10, 0.0), (ENTRY_BYTES, 0.5),
                                          (ENTRY_BYTES * 10, 1.5)])
def test_bad_sizes_refused(memory: int, load: float) -> None:
    with pytest.raises(ValueError):
        OffsetMap(memory, load)


@pytest.mark.parametrize("memory_bytes", [1 << 20, 3 << 20])
def test_a_full_map_stays_under_its_memory_bytes(memory_bytes: int) -> None:
    """The bound is real: a map filled to capacity with offsets that are each their own int
    object (beyond the small-int cache) peaks under memory_bytes, resizes included."""
    keys = [b"key-%d" % i for i in range(OffsetMap(memory_bytes, 1.0).capacity)]
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        m = OffsetMap(memory_bytes, 1.0)
        for i, k in enumerate(keys):
            m.put(k, (1 << 40) + i)
        assert m.full
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak <= memory_bytes, (peak, memory_bytes, len(m))
    # ... and the estimate is not wildly pessimistic either (within 2x of the truth).
    assert peak > memory_bytes / 2


def test_put_if_room_checks_the_size_first_as_kafka() -> None:
    m = OffsetMap(ENTRY_BYTES * 2, load_factor=1.0)
    assert m.put_if_room(b"a", 1) and m.put_if_room(b"b", 2)
    # Full: nothing is put, not even a key already there (Kafka checks size < max first).
    assert not m.put_if_room(b"a", 3) and not m.put_if_room(b"c", 3)
    assert (m.get(b"a"), m.get(b"c"), m.latest_offset) == (1, -1, 2)
