"""The log cleaner over real logs on disk: passes, the dirty range, the swap and its crash
recovery, aborts when the log changes under a pass (snakka.storage.cleaner.cleaner / .manager
/ .swap). Filter rules in detail are in test_filter*.py; the end-to-end property is in
test_compaction_property.py."""

from __future__ import annotations

import os

import pytest

from snakka.records import Record, build_batch
from snakka.records.record import iter_records
from snakka.storage import LogConfig
from snakka.storage.checkpoint import read_offset_checkpoint
from snakka.storage.cleaner import swap as swap_mod
from snakka.storage.cleaner.manager import CLEANER_OFFSET_CHECKPOINT, CleanerConfig, LogCleaner
from storage.helpers import Clock, append, open_log

DAY = 86_400_000


def keyed(pairs: list[tuple[bytes | None, bytes | None]], ts: int) -> bytearray:
    return bytearray(build_batch([Record(timestamp=ts + i, key=k, value=v)
                                  for i, (k, v) in enumerate(pairs)]))


def compact_config(**kw) -> LogConfig:
    base = dict(segment_bytes=400, cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.01,
                retention_ms=-1)
    base.update(kw)
    return LogConfig(**base)


def cleaner_for(plog, clock, tmp_path, **kw) -> LogCleaner:
    cfg = CleanerConfig(backoff_ms=10, **kw)
    return LogCleaner(cfg, lambda: [plog], clock, log_dir=str(tmp_path))


def read_all(plog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20)
        if not data:
            break
        recs = list(iter_records(bytes(data)))
        out += [(r.offset, r.key, r.value) for r in recs]
        # The next read starts after the last batch returned (control batches included).
        from snakka.records.record import iter_batches
        last = [h for h, _p in iter_batches(bytes(data))][-1]
        offset = last.base_offset + last.last_offset_delta + 1
    return out


def latest_per_key(writes: list[tuple[int, bytes | None, bytes | None]]) -> dict:
    latest: dict = {}
    for off, k, v in writes:
        latest[k] = (off, v)
    return latest


def write_rounds(plog, clock, rounds: int, keys: int) -> list[tuple[int, bytes, bytes]]:
    written = []
    for r in range(rounds):
        pairs = [(f"k{i}".encode(), f"r{r}-v{i}".encode()) for i in range(keys)]
        res = append(plog, keyed(pairs, clock()))
        written += [(res.base_offset + i, k, v) for i, (k, v) in enumerate(pairs)]
        clock.advance(10)
    return written


def test_a_pass_keeps_the_latest_record_per_key_at_its_offset(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(), clock=clock)
    written = write_rounds(plog, clock, rounds=12, keys=5)
    plog.roll()
    before_segments = len(plog.segments)
    assert before_segments > 3
    cleaner = cleaner_for(plog, clock, tmp_path)
    results = cleaner.clean_once()
    assert len(results) == 1 and not results[0].aborted
    got = read_all(plog)
    want = sorted((off, k, v) for k, (off, v) in latest_per_key(written).items())
    assert got == want
    assert read_offset_checkpoint(str(tmp_path / CLEANER_OFFSET_CHECKPOINT)) == {
        ("t", 0): plog.active_segment.base_offset}
    # Nothing new: not due again.
    assert cleaner.clean_once() == []
    # Groups are formed from the segments' sizes before cleaning (as Kafka): the next pass
    # merges the small segments the first one left.
    assert len(plog.segments) == before_segments
    written += write_rounds(plog, clock, rounds=4, keys=5)
    plog.roll()
    assert cleaner.clean_once()
    want = sorted((off, k, v) for k, (off, v) in latest_per_key(written).items())
    assert read_all(plog) == want
    assert len(plog.segments) < before_segments
    # Reopened from disk (indexes written by the cleaner), the same records.
    plog.close()
    again = open_log(tmp_path / "t-0", compact_config(), clock=clock, recover=True)
    assert read_all(again) == want
    assert not [n for n in os.listdir(tmp_path / "t-0")
                if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_the_active_segment_and_the_compaction_lag_are_never_cleaned(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(min_compaction_lag_ms=60_000), clock=clock)
    write_rounds(plog, clock, rounds=6, keys=5)
    plog.roll()
    cleaner = cleaner_for(plog, clock, tmp_path)
    assert cleaner.clean_once() == []  # every closed segment is younger than the lag
    clock.advance(61_000)
    write_rounds(plog, clock, rounds=2, keys=5)  # in the active segment: not cleanable
    res = cleaner.clean_once()
    assert res and not res[0].aborted
    active = plog.active_segment.base_offset
    assert res[0].end_offset <= active
    # The records of the active segment are all still there.
    tail = [r for r in read_all(plog) if r[0] >= active]
    assert len(tail) == plog.log_end_offset - active


def test_tombstones_stay_for_delete_retention_ms_then_go(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(delete_retention_ms=DAY), clock=clock)
    append(plog, keyed([(b"a", b"1"), (b"b", b"1")], clock()))
    append(plog, keyed([(b"a", None)], clock()))  # tombstone
    plog.roll()
    cleaner = cleaner_for(plog, clock, tmp_path)
    assert cleaner.clean_once()
    assert [(k, v) for _o, k, v in read_all(plog)] == [(b"b", b"1"), (b"a", None)]
    clock.advance(DAY + 1)
    assert cleaner.clean_once()  # due again once the horizon passed, with nothing new
    assert [(k, v) for _o, k, v in read_all(plog)] == [(b"b", b"1")]


def test_keyless_records_are_dropped_by_the_cleaner(tmp_path):
    clock = Clock()
    # Produce refuses keyless records on a compacted topic (INVALID_RECORD); they are there
    # when the topic was altered to compact after they were written.
    plog = open_log(tmp_path / "t-0", LogConfig(), clock=clock)
    append(plog, keyed([(None, b"x"), (b"k", b"1")], clock()))
    plog.set_config(compact_config())
    append(plog, keyed([(b"k", b"2")], clock()))
    plog.roll()
    assert cleaner_for(plog, clock, tmp_path).clean_once()
    assert [(k, v) for _o, k, v in read_all(plog)] == [(b"k", b"2")]


def test_a_log_changed_under_the_pass_aborts_it_and_loses_nothing(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(), clock=clock)
    write_rounds(plog, clock, rounds=12, keys=5)
    plog.roll()
    before = read_all(plog)
    calls = []

    def owner(fn):
        calls.append(fn)
        if len(calls) == 3:  # the first swap: DeleteRecords has just removed a segment
            plog.delete_records_before(plog.segments[1].base_offset)
        return fn()

    cleaner = LogCleaner(CleanerConfig(), lambda: [plog], clock, log_dir=str(tmp_path),
                         run_on_owner=owner)
    res = cleaner.clean_once()
    assert res and res[0].aborted
    start = plog.log_start_offset
    assert read_all(plog) == [r for r in before if r[0] >= start]
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith((".cleaned", ".swap"))]
    # The next pass cleans what is left.
    res = cleaner.clean_once()
    assert res and not res[0].aborted


@pytest.mark.parametrize("crash_after", range(1, 12))
def test_a_crash_anywhere_in_the_swap_recovers_to_a_complete_log(tmp_path, monkeypatch,
                                                                 crash_after):
    """Kill the swap after its n-th rename: reopening (recovery) gives a log in which every
    group is either as before the pass or as after it: every record is one that was written,
    at its offset; nothing the pass keeps is missing; the latest value per key is unchanged;
    no leftover files."""
    clock = Clock()
    cfg = compact_config()
    plog = open_log(tmp_path / "t-0", cfg, clock=clock)
    written = write_rounds(plog, clock, rounds=12, keys=5)
    plog.roll()
    before = read_all(plog)
    after = sorted((off, k, v) for k, (off, v) in latest_per_key(written).items())
    real = os.replace
    n = {"i": 0}

    class Crash(BaseException):
        pass

    def replace(a, b):
        n["i"] += 1
        if n["i"] > crash_after:
            raise Crash()
        return real(a, b)

    monkeypatch.setattr(swap_mod.os, "replace", replace)
    with pytest.raises(Crash):
        cleaner_for(plog, clock, tmp_path).clean_once()
    monkeypatch.setattr(swap_mod.os, "replace", real)
    # The process "dies": nothing more of the old objects runs; reopen with recovery.
    again = open_log(tmp_path / "t-0", cfg, clock=clock, recover=True)
    got = read_all(again)
    assert set(after) <= set(got) <= set(before), crash_after
    assert got == sorted(got)
    assert latest_per_key(got) == latest_per_key(before)
    assert not [n for n in os.listdir(tmp_path / "t-0")
                if n.endswith((".cleaned", ".swap", ".deleted"))]
    # And cleaning it again ends where a clean pass ends.
    cleaner_for(again, clock, tmp_path).clean_once()
    assert read_all(again) == after


def test_cleaning_is_bounded_by_the_offset_map(tmp_path):
    """A dedupe buffer that holds fewer keys than the dirty range: the pass stops where the
    map is full, the checkpoint says so, later passes finish the job."""
    from snakka.storage.cleaner.offset_map import ENTRY_BYTES

    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(segment_bytes=2000), clock=clock)
    written = []
    for r in range(3):
        pairs = [(f"k{r}-{i}".encode(), b"v") for i in range(40)]
        res = append(plog, keyed(pairs, clock()))
        written += [(res.base_offset + i, k, v) for i, (k, v) in enumerate(pairs)]
        plog.roll()
    cleaner = cleaner_for(plog, clock, tmp_path,
                          dedupe_buffer_size=int(ENTRY_BYTES * 50 / 0.9) + ENTRY_BYTES)
    first = cleaner.clean_once()
    assert first and first[0].end_offset < plog.active_segment.base_offset
    for _ in range(5):
        if not cleaner.clean_once():
            break
    assert read_all(plog) == sorted(written)


def test_a_corrupt_segment_marks_the_partition_uncleanable_not_the_cleaner(tmp_path, caplog):
    """A batch whose records are garbage (CRC fixed up, so only the cleaner sees it): that
    partition is skipped from then on (Kafka's uncleanable partitions); others still clean."""
    from snakka.records.batch import _rewrite_crc

    clock = Clock()
    bad = open_log(tmp_path / "bad-0", compact_config(), clock=clock)
    good = open_log(tmp_path / "good-0", compact_config(), clock=clock)
    for plog in (bad, good):
        write_rounds(plog, clock, rounds=6, keys=5)
        plog.roll()
    seg = bad.segments[0]
    with open(seg.path, "r+b") as f:
        data = bytearray(f.read())
        data[70:80] = b"\xff" * 10  # inside the first record of the first batch
        _rewrite_crc(data, 0, len(data) if len(bad.segments) == 1 else
                     int.from_bytes(data[8:12], "big") + 12)
        f.seek(0)
        f.write(data)
    cleaner = LogCleaner(CleanerConfig(), lambda: [bad, good], clock, log_dir=str(tmp_path))
    results = {r.tp: r for r in cleaner.clean_once()}
    assert results["bad-0"].aborted and not results["good-0"].aborted
    assert cleaner.uncleanable == {("bad", 0)}
    assert any("marked uncleanable" in r.getMessage() for r in caplog.records)
    write_rounds(good, clock, rounds=2, keys=5)
    write_rounds(bad, clock, rounds=2, keys=5)
    good.roll()
    bad.roll()
    assert [r.tp for r in cleaner.clean_once()] == ["good-0"]


def test_a_pass_holds_one_segment_descriptor_at_a_time(tmp_path):
    """The cleaner's own descriptors bypass the broker's file pool (log.max.open.files): a
    pass over a log of many segments must not open them all at once."""
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(segment_bytes=200), clock=clock)
    write_rounds(plog, clock, rounds=40, keys=5)
    plog.roll()
    assert len(plog.segments) > 30
    baseline = len(os.listdir("/proc/self/fd"))
    peak = [0]

    def owner(fn):  # called at the pass's start and for every swap
        peak[0] = max(peak[0], len(os.listdir("/proc/self/fd")) - baseline)
        return fn()

    res = LogCleaner(CleanerConfig(), lambda: [plog], clock, run_on_owner=owner).clean_once()
    assert res and not res[0].aborted
    assert peak[0] <= 3, peak[0]


def test_a_batch_failing_its_crc_is_never_rewritten_with_a_fresh_one(tmp_path, caplog):
    """Segments below the recovery point are opened without checking every CRC: a damaged
    batch the cleaner would rebuild (records dropped) would get a new, valid CRC and the
    damage would be served as good data. The cleaner checks each CRC and leaves such a
    partition alone (uncleanable), its files untouched."""
    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(), clock=clock)
    write_rounds(plog, clock, rounds=6, keys=5)
    plog.roll()
    seg = plog.segments[0]
    with open(seg.path, "r+b") as f:
        data = bytearray(f.read())
        data[-3] ^= 0x01  # a value byte of the last record of the segment: CRC now wrong
        f.seek(0)
        f.write(data)
    cleaner = cleaner_for(plog, clock, tmp_path)
    res = cleaner.clean_once()
    assert res and res[0].aborted and cleaner.uncleanable == {("t", 0)}
    with open(seg.path, "rb") as f:
        assert f.read() == bytes(data)
    assert any("fails its CRC" in r.getMessage() for r in caplog.records)


def test_a_full_disk_aborts_the_pass_and_the_next_one_cleans(tmp_path, monkeypatch):
    """ENOSPC while writing the cleaned segment: the pass is abandoned (no .cleaned file
    left, the log unchanged) and the partition is not given up on: compaction is what frees
    the space."""
    import errno

    from snakka.storage.cleaner import swap

    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(), clock=clock)
    written = write_rounds(plog, clock, rounds=12, keys=5)
    plog.roll()
    before = read_all(plog)
    real = swap.os.fsync
    fail = {"n": 1}

    def fsync(fd):
        if fail["n"]:
            fail["n"] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(swap.os, "fsync", fsync)
    cleaner = cleaner_for(plog, clock, tmp_path)
    res = cleaner.clean_once()
    assert res and res[0].aborted and not cleaner.uncleanable
    assert read_all(plog) == before
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".cleaned")]
    res = cleaner.clean_once()
    assert res and not res[0].aborted
    assert read_all(plog) == sorted((off, k, v) for k, (off, v) in latest_per_key(written).items())


def test_the_swap_reads_nothing_back(tmp_path, monkeypatch):
    """The swap runs on the event loop: it builds the new segment from what the cleaner
    wrote (indexes in memory) and never loads or rebuilds it from disk there; reads, time
    lookups and a reopen still agree."""
    from snakka.storage.segment import LogSegment

    clock = Clock()
    plog = open_log(tmp_path / "t-0", compact_config(index_interval_bytes=50), clock=clock)
    written = write_rounds(plog, clock, rounds=12, keys=5)
    plog.roll()

    def refuse(*_a, **_k):
        raise AssertionError("the swap read a segment back")

    with monkeypatch.context() as m:
        m.setattr(LogSegment, "load", refuse)
        m.setattr(LogSegment, "recover", refuse)
        assert cleaner_for(plog, clock, tmp_path).clean_once()
    want = sorted((off, k, v) for k, (off, v) in latest_per_key(written).items())
    assert read_all(plog) == want
    ts = [plog.offset_for_timestamp(clock() - 10_000)]
    plog.close()
    again = open_log(tmp_path / "t-0", compact_config(index_interval_bytes=50), clock=clock)
    assert read_all(again) == want
    assert [again.offset_for_timestamp(clock() - 10_000)] == ts
