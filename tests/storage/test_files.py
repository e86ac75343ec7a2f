"""The segment-file pool (``log.max.open.files``): idle partitions hold no descriptor, the pool
never exceeds its bound, evicted files reopen transparently (also across restarts and with a
flush thread running), and EMFILE while opening gives back idle files and retries."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from snakka.storage import LogConfig, LogManager
from snakka.storage.files import POOL, derived_limit

from .helpers import Clock, append, batch


@pytest.fixture
def small_pool():
    before = POOL.limit
    POOL.set_limit(4)
    yield POOL
    POOL.set_limit(before)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def manager(path):
    return LogManager([str(path)], LogConfig(segment_bytes=2000), time_ms=Clock())


def test_many_partitions_hold_at_most_the_bound(tmp_path, small_pool):
    fds0 = open_fds()
    # The pool is process-wide: a log another test of this xdist worker left open (or a
    # broker thread still closing) holds files in it too. What this test owns is measured
    # from here (a CI run saw one such file).
    held0 = small_pool.open_count
    lm = manager(tmp_path / "d")
    logs = [lm.get_or_create_log("t", p) for p in range(60)]
    for _round in range(3):
        for pl in logs:
            append(pl, batch(5, value_size=200))  # several segments per partition
        assert small_pool.open_count <= max(4, held0)
        assert open_fds() - fds0 <= 4 + 2  # + the dir lock and slack
    assert all(len(pl.segments) > 1 for pl in logs)
    for pl in logs:  # every evicted segment reads back whole
        got = pl.read(0, 1 << 20)
        assert len(got) > 0
        assert pl.log_end_offset == 15
    lm.close()
    assert small_pool.open_count <= held0  # all of ours closed (0 when nothing else holds any)

    lm = manager(tmp_path / "d")  # restart: loading 60 partitions stays within the bound
    lm.load_all()
    assert small_pool.open_count <= 4
    assert [lm.get_log("t", p).log_end_offset for p in range(60)] == [15] * 60
    lm.close()


def test_flush_thread_and_eviction_interleave(tmp_path, small_pool):
    lm = manager(tmp_path / "d")
    logs = [lm.get_or_create_log("t", p) for p in range(20)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher():
        while not stop.is_set():
            try:
                lm.flush_all()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for _ in range(30):
            for pl in logs:
                append(pl, batch(2, value_size=100))
    finally:
        stop.set()
        t.join()
    assert not errors
    lm.close()
    lm = manager(tmp_path / "d")
    lm.load_all()
    for p in range(20):  # nothing landed in the wrong file: every partition recovers whole
        assert lm.get_log("t", p).log_end_offset == 60
    lm.close()


def test_emfile_while_opening_gives_back_idle_files(tmp_path, small_pool, monkeypatch):
    lm = manager(tmp_path / "d")
    logs = [lm.get_or_create_log("t", p) for p in range(6)]
    for pl in logs:
        append(pl, batch(1))
    evicted = [pl for pl in logs if not pl.active_segment.file.is_open]
    assert evicted
    real_open = os.open
    failures = [1]

    def emfile_once(path, flags, mode=0o777):
        if failures[0] and path.endswith(".log"):
            failures[0] -= 1
            raise OSError(errno.EMFILE, "Too many open files", path)
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", emfile_once)
    assert evicted[0].read(0, 1000)  # retried after closing the idle files
    assert small_pool.open_count == 1
    monkeypatch.setattr(os, "open", real_open)
    lm.close()


def test_derived_limit_follows_rlimit():
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert derived_limit() == max(16, soft // 4)


# -- record sets waiting for sendfile (regions) count in the bound ---------------------------


def big_logs(tmp_path, n: int):
    """``n`` partitions holding one batch of ~80 KiB each (above ZERO_COPY_MIN_BYTES)."""
    lm = manager(tmp_path / "d")
    logs = [lm.get_or_create_log("z", p) for p in range(n)]
    for pl in logs:
        append(pl, batch(80, value_size=1000))
    return lm, logs


def zero_copy_read(pl):
    return pl.read(0, 1 << 20, zero_copy=True)


def test_regions_count_in_the_bound_then_reads_go_to_memory(tmp_path, small_pool):
    lm, logs = big_logs(tmp_path, 4)
    held0 = small_pool.open_count  # files other tests of this worker left in the pool
    regions0 = small_pool.regions
    assert small_pool.max_regions == 2  # half of log.max.open.files=4
    got = [zero_copy_read(pl) for pl in logs]
    kinds = [type(g).__name__ for g in got]
    assert kinds == ["PooledRegion", "PooledRegion", "bytes", "bytes"], kinds
    assert small_pool.regions - regions0 == 2
    # Files and regions together stay within the bound (idle files were closed for them).
    assert small_pool.open_count + small_pool.regions <= 4 + held0
    # The bytes read into memory are exactly what a region would have sent.
    whole = [pl.read(0, 1 << 20) for pl in logs]
    assert got[0].read_all() == bytes(whole[0]) and got[2] == bytes(whole[2])
    # Sent (closed) or dropped (collected), a region gives its slot back.
    got[0].close()
    got[0].close()  # idempotent: counted once
    assert small_pool.regions - regions0 == 1
    got[1] = None
    import gc

    gc.collect()
    assert small_pool.regions == regions0
    again = zero_copy_read(logs[3])
    assert type(again).__name__ == "PooledRegion"
    again.close()
    lm.close()


def test_out_of_descriptors_while_making_a_region_reads_into_memory(tmp_path, small_pool,
                                                                    monkeypatch, caplog):
    """EMFILE on the region's dup: idle files are given back and dup retried; failing again the
    record set is read into memory through the descriptor already open, with one warning line
    (not per record set), never an exception."""
    lm, logs = big_logs(tmp_path, 3)
    import snakka.storage.files as files

    real_dup = os.dup
    calls = [0]

    def emfile(fd):
        calls[0] += 1
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(files.os, "dup", emfile)
    fallbacks0 = small_pool.region_fallbacks
    with caplog.at_level("WARNING", logger="snakka.storage"):
        first = zero_copy_read(logs[0])
        second = zero_copy_read(logs[1])
    assert calls[0] == 4  # each tried twice (the second time after closing idle files)
    assert first == bytes(logs[0].read(0, 1 << 20)) and len(first) > 64 * 1024
    assert second == bytes(logs[1].read(0, 1 << 20))
    assert small_pool.region_fallbacks - fallbacks0 == 2
    warnings = [r for r in caplog.records if "out of file descriptors" in r.getMessage()]
    assert len(warnings) == 1
    monkeypatch.setattr(files.os, "dup", real_dup)
    region = zero_copy_read(logs[2])  # descriptors again: sendfile again
    assert type(region).__name__ == "PooledRegion"
    region.close()
    lm.close()
