"""Unit tests of the share-partition core (``snakka.share.partition``), with a fake clock.

Log layout used by most tests: log batches of 16 records (``LOG``), offsets 0..319.
"""

from __future__ import annotations

import copy
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snakka.protocol.errors import ErrorCode
from snakka.protocol.share import AckBatch, AcknowledgeType, AcquireMode
from snakka.share.partition import SharePartition, apply_delta
from snakka.share.types import (
    AcquiredRange,
    FetchedBatch,
    RecordState,
    SharePartitionConfig,
    SharePartitionState,
    StateBatch,
)

BATCH = AcquireMode.BATCH_OPTIMIZED
LIMIT = AcquireMode.RECORD_LIMIT
ACCEPT, RELEASE, REJECT, RENEW, GAP = (int(AcknowledgeType.ACCEPT), int(AcknowledgeType.RELEASE),
                                       int(AcknowledgeType.REJECT), int(AcknowledgeType.RENEW),
                                       int(AcknowledgeType.GAP))
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED,
                                               RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
LOCK_MS = 30_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def log(first: int = 0, last: int = 319, size: int = 16) -> list[FetchedBatch]:
    base = first - first % size
    out = []
    while base <= last:
        out.append(FetchedBatch(base, base + size - 1))
        base += size
    return out


def make(state: SharePartitionState | None = None, **cfg) -> tuple[SharePartition, Clock]:
    clock = Clock()
    config = SharePartitionConfig(**cfg)
    sp = SharePartition("g", uuid.UUID(int=1), 0, config, clock, state or SharePartitionState(0))
    return sp, clock


def fetch(sp: SharePartition, member: str, max_records: int = 500, *, mode=BATCH,
          batch_size: int = 500, size: int = 16, log_end: int = 319) -> list[AcquiredRange]:
    """What the shell does: read from next_fetch_offset() up to the log end and acquire."""
    nfo = sp.next_fetch_offset()
    if nfo > log_end:
        return []
    return sp.acquire(member, log(nfo, log_end, size), max_records=max_records,
                      batch_size=batch_size, mode=mode)


def ack(sp: SharePartition, member: str, first: int, last: int, *types: int) -> int:
    return sp.acknowledge(member, [AckBatch(first, last, tuple(types))])


def window(sp: SharePartition) -> list[tuple[int, int, int, int, str | None]]:
    """(first, last, state, count, member) of every run, merged for comparison."""
    out: list[list] = []
    for r in sp._runs:
        row = [r.first, r.last, r.state, r.count, r.member]
        if out and out[-1][1] + 1 == r.first and out[-1][2:] == row[2:]:
            out[-1][1] = r.last
        else:
            out.append(row)
    return [tuple(x) for x in out]


def total(ranges: list[AcquiredRange]) -> int:
    return sum(r.last_offset - r.first_offset + 1 for r in ranges)


# ---------------------------------------------------------------------------- acquire


def test_batch_optimized_acquires_whole_log_batches():
    sp, clock = make()
    got = fetch(sp, "m1", max_records=20)
    # 20 records end inside the second 16-record batch: the whole batch is acquired.
    assert got == [AcquiredRange(0, 31, 1)]
    assert sp.end_offset == 32 and sp.start_offset == 0
    assert sp.next_fetch_offset() == 32
    assert sp.next_deadline() == clock.now + LOCK_MS
    assert sp.in_flight_counts()[ACQUIRED] == 32


def test_record_limit_never_exceeds_max_records():
    sp, _ = make()
    assert fetch(sp, "m1", max_records=20, mode=LIMIT) == [AcquiredRange(0, 19, 1)]
    # The rest of the log batch joins the window AVAILABLE, never delivered (Kafka caches the
    # whole batch): it is fetched next.
    assert sp.end_offset == 32 and sp.next_fetch_offset() == 20
    assert window(sp) == [(0, 19, ACQUIRED, 1, "m1"), (20, 31, AVAILABLE, 0, None)]
    assert fetch(sp, "m2", max_records=5, mode=LIMIT) == [AcquiredRange(20, 24, 1)]
    # Never-delivered records are not persisted.
    assert all(b.delivery_count > 0 for b in sp.state().batches)


def test_batch_size_splits_new_records_on_log_batch_bases():
    sp, _ = make()
    got = fetch(sp, "m1", max_records=100, batch_size=32)
    assert got == [AcquiredRange(0, 31, 1), AcquiredRange(32, 63, 1), AcquiredRange(64, 95, 1),
                   AcquiredRange(96, 111, 1)]
    sp2, _ = make()
    # Batches larger than batch_size are not cut; RECORD_LIMIT returns one range.
    assert fetch(sp2, "m1", max_records=100, batch_size=10, size=40) == [
        AcquiredRange(0, 39, 1), AcquiredRange(40, 79, 1), AcquiredRange(80, 119, 1)]
    sp3, _ = make()
    assert fetch(sp3, "m1", max_records=100, batch_size=32, mode=LIMIT) == [AcquiredRange(0, 99, 1)]


def test_acquire_skips_acquired_acknowledged_and_offsets_before_spso():
    sp, _ = make(SharePartitionState(10))
    # The log batch starts before SPSO: offsets 0..9 are not acquired.
    got = sp.acquire("m1", log(0, 47), max_records=500, batch_size=500, mode=BATCH)
    assert got == [AcquiredRange(10, 47, 1)]
    assert sp.start_offset == 10
    # Everything is acquired: another member gets nothing from the same batches.
    assert sp.acquire("m2", log(0, 47), max_records=500, batch_size=500, mode=BATCH) == []
    assert ack(sp, "m1", 20, 29, ACCEPT) == ErrorCode.NONE
    assert ack(sp, "m1", 30, 30, RELEASE) == ErrorCode.NONE
    # Re-reading the whole range only acquires the released offset.
    assert sp.acquire("m2", log(0, 47), max_records=500, batch_size=500, mode=BATCH) == [
        AcquiredRange(30, 30, 2)]


def test_acquire_from_the_middle_of_an_available_run():
    # A log read that raced with a release starts inside the now AVAILABLE range.
    sp, _ = make()
    fetch(sp, "m1", max_records=32)
    assert ack(sp, "m1", 0, 31, RELEASE) == ErrorCode.NONE
    got = sp.acquire("m2", log(16, 31), max_records=500, batch_size=500, mode=BATCH)
    assert got == [AcquiredRange(16, 31, 2)]
    assert window(sp) == [(0, 15, AVAILABLE, 1, None), (16, 31, ACQUIRED, 2, "m2")]
    assert sp.next_fetch_offset() == 0


def test_acquired_ranges_split_where_delivery_count_differs():
    sp, clock = make()
    fetch(sp, "m1", max_records=32)                      # 0..31 count 1
    assert ack(sp, "m1", 0, 15, RELEASE) == ErrorCode.NONE
    fetch(sp, "m2", max_records=16)                      # 0..15 count 2
    assert ack(sp, "m2", 0, 15, RELEASE) == ErrorCode.NONE
    assert ack(sp, "m1", 16, 31, RELEASE) == ErrorCode.NONE
    got = fetch(sp, "m3", max_records=64)
    assert got == [AcquiredRange(0, 15, 3), AcquiredRange(16, 31, 2), AcquiredRange(32, 63, 1)]


def test_empty_inputs_acquire_nothing():
    sp, _ = make()
    assert sp.acquire("m1", [], max_records=10, batch_size=10, mode=BATCH) == []
    assert sp.acquire("m1", log(0, 15), max_records=0, batch_size=10, mode=BATCH) == []
    assert sp.end_offset == 0 and sp.drain_delta() is None


# ---------------------------------------------------------------------------- acknowledge


def test_accept_advances_spso_and_drops_bookkeeping():
    sp, _ = make()
    fetch(sp, "m1", max_records=32)
    assert ack(sp, "m1", 16, 31, ACCEPT) == ErrorCode.NONE
    assert sp.start_offset == 0  # 0..15 still acquired
    assert ack(sp, "m1", 0, 15, ACCEPT) == ErrorCode.NONE
    assert sp.start_offset == 32 == sp.end_offset
    assert sp._runs == []
    assert sp.next_deadline() is None  # the lock entry is stale and dropped


def test_release_makes_records_available_with_count_kept():
    sp, _ = make()
    fetch(sp, "m1", max_records=16)
    assert not sp.take_wakeup()
    assert ack(sp, "m1", 4, 7, RELEASE) == ErrorCode.NONE
    assert sp.take_wakeup() and not sp.take_wakeup()
    assert sp.next_fetch_offset() == 4
    assert window(sp)[1] == (4, 7, AVAILABLE, 1, None)
    got = fetch(sp, "m2")
    assert got[0] == AcquiredRange(4, 7, 2)


def test_release_at_the_delivery_count_limit_archives():
    sp, _ = make(delivery_count_limit=2)
    fetch(sp, "m1", max_records=16)
    assert ack(sp, "m1", 0, 15, RELEASE) == ErrorCode.NONE
    assert fetch(sp, "m1", max_records=16)[0] == AcquiredRange(0, 15, 2)
    assert ack(sp, "m1", 0, 15, RELEASE) == ErrorCode.NONE
    # Delivered twice: archived, SPSO moves past it.
    assert sp.start_offset == 16 and sp.next_fetch_offset() == 16


def test_reject_and_gap_archive_and_are_never_redelivered():
    sp, _ = make()
    fetch(sp, "m1", max_records=16)
    assert sp.acknowledge("m1", [AckBatch(0, 3, (ACCEPT, REJECT, GAP, ACCEPT)),
                                 AckBatch(5, 5, (REJECT,))]) == ErrorCode.NONE
    assert window(sp)[:2] == [(4, 4, ACQUIRED, 1, "m1"), (5, 5, ARCHIVED, 1, None)]
    assert sp.start_offset == 4
    # 5 is done: releasing a range that includes it is refused.
    assert ack(sp, "m1", 4, 15, RELEASE) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("m1", [AckBatch(4, 4, (RELEASE,)),
                                 AckBatch(6, 15, (RELEASE,))]) == ErrorCode.NONE
    got = fetch(sp, "m2")
    offsets = {o for r in got for o in range(r.first_offset, r.last_offset + 1)}
    assert 5 not in offsets and 4 in offsets


def test_per_offset_types_mixed():
    sp, _ = make()
    fetch(sp, "m1", max_records=16)
    types = (ACCEPT,) * 5 + (RELEASE,) * 3 + (REJECT,) * 2 + (ACCEPT,) * 6
    assert ack(sp, "m1", 0, 15, *types) == ErrorCode.NONE
    assert sp.start_offset == 5
    assert window(sp) == [(5, 7, AVAILABLE, 1, None), (8, 9, ARCHIVED, 1, None),
                          (10, 15, ACKNOWLEDGED, 1, None)]


def test_renew_extends_the_lock_and_keeps_the_records_acquired():
    sp, clock = make()
    fetch(sp, "m1", max_records=16)
    first_deadline = sp.next_deadline()
    clock.now += 20_000
    assert ack(sp, "m1", 0, 7, RENEW) == ErrorCode.NONE
    assert sp.drain_delta() is not None  # the acquisition itself
    clock.now = first_deadline
    sp.on_timer(clock.now)
    # 8..15 expired, 0..7 were renewed.
    assert window(sp) == [(0, 7, ACQUIRED, 1, "m1"), (8, 15, AVAILABLE, 1, None)]
    assert sp.next_deadline() == first_deadline + 20_000
    assert sp.drain_delta() is None  # neither renew nor expiry changes the persisted form
    assert ack(sp, "m1", 0, 7, ACCEPT) == ErrorCode.NONE
    assert sp.next_deadline() is None


def test_renew_per_offset_with_other_types():
    sp, clock = make()
    fetch(sp, "m1", max_records=16)
    clock.now += 10_000
    assert ack(sp, "m1", 0, 3, RENEW, ACCEPT, RENEW, REJECT) == ErrorCode.NONE
    assert window(sp)[:4] == [(0, 0, ACQUIRED, 1, "m1"), (1, 1, ACKNOWLEDGED, 1, None),
                              (2, 2, ACQUIRED, 1, "m1"), (3, 3, ARCHIVED, 1, None)]
    assert {r.deadline for r in sp._runs if r.first in (0, 2)} == {clock.now + LOCK_MS}


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize("batches, code", [
    # Not acquired by this member.
    ([AckBatch(0, 3, (ACCEPT,))], ErrorCode.INVALID_RECORD_STATE),
    # Types length neither 1 nor the range length.
    ([AckBatch(16, 19, (ACCEPT, ACCEPT))], ErrorCode.INVALID_REQUEST),
    # Unknown acknowledge type.
    ([AckBatch(16, 19, (5,))], ErrorCode.INVALID_REQUEST),
    ([AckBatch(16, 17, (ACCEPT, -1))], ErrorCode.INVALID_REQUEST),
    # Overlapping / descending batches.
    ([AckBatch(16, 20, (ACCEPT,)), AckBatch(20, 21, (ACCEPT,))], ErrorCode.INVALID_REQUEST),
    ([AckBatch(20, 21, (ACCEPT,)), AckBatch(16, 17, (ACCEPT,))], ErrorCode.INVALID_REQUEST),
    ([AckBatch(18, 17, (ACCEPT,))], ErrorCode.INVALID_REQUEST),
    ([AckBatch(-1, 17, (ACCEPT,))], ErrorCode.INVALID_REQUEST),
    # Past SPEO (Kafka: "past acquired records").
    ([AckBatch(16, 40, (ACCEPT,))], ErrorCode.INVALID_REQUEST),
    ([AckBatch(100, 101, (ACCEPT,))], ErrorCode.INVALID_REQUEST),
    # A valid batch followed by an invalid one: nothing is applied.
    ([AckBatch(16, 19, (ACCEPT,)), AckBatch(31, 32, (ACCEPT,))], ErrorCode.INVALID_REQUEST),
    ([AckBatch(16, 19, (ACCEPT,)), AckBatch(20, 21, (9,))], ErrorCode.INVALID_REQUEST),
    # Released records are AVAILABLE, not acquired.
    ([AckBatch(8, 8, (ACCEPT,))], ErrorCode.INVALID_RECORD_STATE),
])
def test_acknowledge_errors_leave_state_unchanged(batches, code):
    sp, _ = make()
    fetch(sp, "m1", max_records=16)
    fetch(sp, "m2", max_records=16)   # m2 holds 16..31
    assert ack(sp, "m1", 8, 8, RELEASE) == ErrorCode.NONE
    sp.take_wakeup()
    before = (window(sp), sp.start_offset, sp.end_offset, sp.next_deadline(), sp.state())
    assert sp.acknowledge("m2", batches) == code
    after = (window(sp), sp.start_offset, sp.end_offset, sp.next_deadline(), sp.state())
    assert after == before
    assert sp.drain_delta() is None and not sp.take_wakeup()


def test_second_batch_not_owned_fails_the_whole_request():
    sp, _ = make()
    fetch(sp, "m1", max_records=16)
    fetch(sp, "m2", max_records=16)
    before = sp.state()
    assert sp.acknowledge("m1", [AckBatch(0, 3, (ACCEPT,)), AckBatch(14, 17, (ACCEPT,))]) == \
        ErrorCode.INVALID_RECORD_STATE
    assert sp.state() == before and sp.start_offset == 0
    assert window(sp) == [(0, 15, ACQUIRED, 1, "m1"), (16, 31, ACQUIRED, 1, "m2")]


def test_acknowledge_when_nothing_is_in_flight_is_invalid_record_state():
    sp, _ = make(SharePartitionState(50))
    assert ack(sp, "m1", 50, 52, ACCEPT) == ErrorCode.INVALID_RECORD_STATE


def test_acknowledge_before_spso_is_skipped_like_kafka():
    sp, _ = make()
    fetch(sp, "m1", max_records=32)
    assert ack(sp, "m1", 0, 15, ACCEPT) == ErrorCode.NONE
    # Duplicate acknowledgement of records already done: no error, no change.
    before = sp.state()
    assert ack(sp, "m1", 0, 15, REJECT) == ErrorCode.NONE
    assert sp.state() == before
    # A range straddling SPSO applies to the offsets at/after it only.
    assert ack(sp, "m1", 10, 20, ACCEPT) == ErrorCode.NONE
    assert sp.start_offset == 21


def test_empty_acknowledge_is_a_no_op():
    sp, _ = make()
    fetch(sp, "m1", max_records=16)
    assert sp.acknowledge("m1", []) == ErrorCode.NONE


# ---------------------------------------------------------------------------- locks and limits


def test_lock_expiry_makes_records_available_with_count_kept():
    sp, clock = make()
    fetch(sp, "m1", max_records=16)
    deadline = sp.next_deadline()
    sp.on_timer(deadline - 1)
    assert window(sp) == [(0, 15, ACQUIRED, 1, "m1")]
    clock.now = deadline
    sp.on_timer(deadline)
    assert window(sp) == [(0, 15, AVAILABLE, 1, None)]
    assert sp.take_wakeup()
    assert sp.next_deadline() is None
    # The old owner can no longer acknowledge them.
    assert ack(sp, "m1", 0, 15, ACCEPT) == ErrorCode.INVALID_RECORD_STATE
    assert fetch(sp, "m2", max_records=16) == [AcquiredRange(0, 15, 2)]


def test_lock_duration_config_change_applies_to_new_acquisitions():
    sp, clock = make()
    fetch(sp, "m1", max_records=16)
    sp.set_config(SharePartitionConfig(record_lock_duration_ms=5_000))
    fetch(sp, "m2", max_records=16)
    assert sp.next_deadline() == clock.now + 5_000
    sp.on_timer(clock.now + 5_000)
    assert window(sp) == [(0, 15, ACQUIRED, 1, "m1"), (16, 31, AVAILABLE, 1, None)]


def test_poison_record_is_archived_after_the_delivery_count_limit():
    sp, clock = make(delivery_count_limit=5)
    counts = []
    for _ in range(10):
        got = fetch(sp, "m1", max_records=1, mode=LIMIT, log_end=0)
        if not got:
            break
        counts.append(got[0].delivery_count)
        clock.now = sp.next_deadline()
        sp.on_timer(clock.now)
    assert counts == [1, 2, 3, 4, 5]
    # (the rest of the fetched 16-record batch is in the window, never delivered)
    assert sp.start_offset == 1 and window(sp) == [(1, 15, AVAILABLE, 0, None)]


def test_delivery_throttling_isolates_records_on_late_attempts():
    # limit 5: throttling starts at count 3 (ceil(5/2)); the last attempt (count 4 -> 5) is alone.
    sp, clock = make(delivery_count_limit=5)
    sizes = []
    for _ in range(4):
        got = fetch(sp, "m1", max_records=500, log_end=15)
        sizes.append((total(got), got[0].delivery_count))
        clock.now = sp.next_deadline()
        sp.on_timer(clock.now)
    # Attempts 1-3 deliver the whole batch; attempt 4 (count 3 before) half of it.
    assert sizes == [(16, 1), (16, 2), (16, 3), (8, 4)]
    got = fetch(sp, "m1", max_records=500, log_end=15)
    assert got == [AcquiredRange(0, 0, 5)]  # count 4 before: last attempt, alone
    # Throttled records are never delivered together with records acquired before them.
    sp2, _ = make(delivery_count_limit=5)
    fetch(sp2, "m1", max_records=16)
    for _ in range(3):
        assert ack(sp2, "m1", 0, 0, RELEASE) == ErrorCode.NONE
        fetch(sp2, "m1", max_records=1, mode=LIMIT)
    assert ack(sp2, "m1", 0, 0, RELEASE) == ErrorCode.NONE    # offset 0: count 4
    assert ack(sp2, "m1", 1, 15, RELEASE) == ErrorCode.NONE   # 1..15: count 1
    assert fetch(sp2, "m2") == [AcquiredRange(0, 0, 5)]
    assert fetch(sp2, "m2")[0] == AcquiredRange(1, 15, 2)


def test_max_record_locks_bounds_the_window():
    sp, _ = make(max_record_locks=48)
    assert total(fetch(sp, "m1", max_records=100, mode=LIMIT)) == 48
    assert not sp.can_acquire()
    assert fetch(sp, "m2") == []
    # Releasing a record inside the full window lets it be acquired again.
    assert ack(sp, "m1", 10, 10, RELEASE) == ErrorCode.NONE
    assert sp.can_acquire()
    assert fetch(sp, "m2") == [AcquiredRange(10, 10, 2)]
    assert not sp.can_acquire()
    sp.take_wakeup()
    # SPSO moving frees room and wakes waiting fetches.
    assert ack(sp, "m1", 0, 9, ACCEPT) == ErrorCode.NONE
    assert sp.can_acquire() and sp.take_wakeup()
    assert total(fetch(sp, "m2", mode=LIMIT)) == 10


def test_max_record_locks_batch_mode_rounds_up_to_the_log_batch():
    sp, _ = make(max_record_locks=40)
    got = fetch(sp, "m1", max_records=100)
    assert got == [AcquiredRange(0, 47, 1)]  # 40 ends inside 32..47: whole batch, as Kafka
    assert not sp.can_acquire()
    assert fetch(sp, "m2") == []


def test_max_record_locks_record_limit_is_strict_and_the_rest_of_the_batch_stays_available():
    # issue 9 item 2 with ShareAcquireMode record_limit: cap 40, 16-record log batches.
    sp, _ = make(max_record_locks=40)
    assert fetch(sp, "m1", max_records=100, mode=LIMIT) == [AcquiredRange(0, 39, 1)]
    assert window(sp) == [(0, 39, ACQUIRED, 1, "m1"), (40, 47, AVAILABLE, 0, None)]
    # The window (48) is over the cap, but it holds AVAILABLE records: those may be acquired,
    # nothing past SPEO.
    assert sp.can_acquire()
    assert fetch(sp, "m2", max_records=100, mode=LIMIT) == [AcquiredRange(40, 47, 1)]
    assert not sp.can_acquire()
    assert fetch(sp, "m2", mode=LIMIT) == []


def test_max_record_locks_caps_reacquisition_too():
    # Kafka takes min(MaxRecords, cap - in-flight) for re-acquired and new records together.
    sp, _ = make(max_record_locks=100)
    assert fetch(sp, "m1", max_records=32) == [AcquiredRange(0, 31, 1)]
    assert ack(sp, "m1", 0, 31, RELEASE) == ErrorCode.NONE
    # in flight 32, room 68: 0..31 again, then 36 new records rounded up to their batch's end.
    assert fetch(sp, "m2", max_records=500) == [AcquiredRange(0, 31, 2), AcquiredRange(32, 79, 1)]
    # in flight 80, room 20: 80..99, rounded up to 111.
    assert sp.can_acquire()
    assert fetch(sp, "m2", max_records=500) == [AcquiredRange(80, 111, 1)]
    assert not sp.can_acquire()


def test_max_record_locks_gate_counts_the_whole_window():
    # Acknowledged records inside the window still count (SPSO has not passed them).
    sp, _ = make(max_record_locks=100)
    assert fetch(sp, "m1", max_records=96) == [AcquiredRange(0, 95, 1)]
    assert ack(sp, "m1", 16, 95, ACCEPT) == ErrorCode.NONE   # 0..15 still held
    assert sp.can_acquire()                                  # 96 in flight < 100
    assert fetch(sp, "m2", max_records=500) == [AcquiredRange(96, 111, 1)]  # 4 -> whole batch
    assert not sp.can_acquire() and fetch(sp, "m2") == []
    assert ack(sp, "m1", 0, 15, ACCEPT) == ErrorCode.NONE    # SPSO moves to 96
    assert sp.can_acquire()


def test_delivery_count_limit_lowered_at_run_time_archives_instead_of_delivering():
    sp, _ = make(delivery_count_limit=5)
    fetch(sp, "m1", max_records=16)
    assert ack(sp, "m1", 0, 15, RELEASE) == ErrorCode.NONE
    fetch(sp, "m1", max_records=16)
    assert ack(sp, "m1", 0, 15, RELEASE) == ErrorCode.NONE   # count 2, AVAILABLE
    sp.config = SharePartitionConfig(delivery_count_limit=2)
    assert fetch(sp, "m1", max_records=16) == [AcquiredRange(16, 31, 1)]
    assert sp.start_offset == 16


# ---------------------------------------------------------------------------- members


def test_release_member_keeps_counts_and_archives_at_the_limit():
    sp, _ = make(delivery_count_limit=2)
    fetch(sp, "m1", max_records=16)            # 0..15 count 1
    fetch(sp, "m2", max_records=16)            # 16..31 count 1
    assert ack(sp, "m1", 0, 3, RELEASE) == ErrorCode.NONE
    fetch(sp, "m1", max_records=4)             # 0..3 count 2
    sp.take_wakeup()
    assert sp.release_member("m1") == 16
    assert sp.take_wakeup()
    # 0..3 reached the limit (2): archived; 4..15 available again with count 1.
    assert sp.start_offset == 4
    assert window(sp) == [(4, 15, AVAILABLE, 1, None), (16, 31, ACQUIRED, 1, "m2")]
    assert sp.release_member("m1") == 0
    assert sp.release_member("nobody") == 0
    assert sp.acquired_by("m2") == 16


# ---------------------------------------------------------------------------- admin


def test_reset_start_offset_requires_no_acquired_records():
    sp, _ = make()
    fetch(sp, "m1", max_records=16)
    assert sp.reset_start_offset(0) == ErrorCode.NON_EMPTY_GROUP
    assert sp.reset_start_offset(-5) == ErrorCode.INVALID_REQUEST
    sp.release_member("m1")
    sp.drain_delta()
    epoch = sp.state_epoch
    assert sp.reset_start_offset(100) == ErrorCode.NONE
    assert sp.start_offset == sp.end_offset == sp.next_fetch_offset() == 100
    assert sp.state_epoch == epoch + 1 and sp.take_wakeup()
    assert sp.in_flight_counts()[AVAILABLE] == 0


def test_reset_to_an_earlier_offset_is_a_full_snapshot_for_replay():
    sp, _ = make()
    replayed = sp.state()
    fetch(sp, "m1", max_records=64)
    assert ack(sp, "m1", 0, 9, ACCEPT) == ErrorCode.NONE
    assert ack(sp, "m1", 20, 63, REJECT) == ErrorCode.NONE
    sp.release_member("m1")
    replayed = apply_delta(replayed, sp.drain_delta())
    assert sp.reset_start_offset(0) == ErrorCode.NONE
    delta = sp.drain_delta()
    assert delta == SharePartitionState(0, 1, ())
    replayed = apply_delta(replayed, delta)
    assert replayed == sp.state() == SharePartitionState(0, 1, ())
    # A delta of the old epoch arriving late is ignored.
    assert apply_delta(replayed, SharePartitionState(5, 0, (StateBatch(5, 9, 2, 1),))) == replayed


def test_log_start_moving_past_spso_drops_records():
    sp, _ = make()
    fetch(sp, "m1", max_records=32)
    assert ack(sp, "m1", 20, 23, RELEASE) == ErrorCode.NONE
    sp.on_log_start_offset(10)
    assert sp.start_offset == 10
    assert window(sp)[0] == (10, 19, ACQUIRED, 1, "m1")
    # Acknowledging the dropped records is skipped, not an error.
    assert ack(sp, "m1", 0, 9, ACCEPT) == ErrorCode.NONE
    sp.on_log_start_offset(5)            # backwards: ignored
    assert sp.start_offset == 10
    sp.on_log_start_offset(100)          # past SPEO: nothing left in flight
    assert sp.start_offset == sp.end_offset == 100
    assert sp._runs == [] and sp.next_deadline() is None
    assert sp.drain_delta().start_offset == 100


def test_log_start_inside_the_window_moves_spso_over_following_done_records():
    sp, _ = make()
    fetch(sp, "m1", max_records=32)
    assert ack(sp, "m1", 10, 19, ACCEPT) == ErrorCode.NONE
    sp.on_log_start_offset(8)
    assert sp.start_offset == 8
    sp.on_log_start_offset(9)
    assert sp.start_offset == 9
    assert ack(sp, "m1", 9, 9, ACCEPT) == ErrorCode.NONE
    assert sp.start_offset == 20


def test_lag_counts_records_not_delivery_complete():
    sp, _ = make(SharePartitionState(100))
    assert sp.lag(100) == 0
    assert sp.lag(50) == 0
    assert sp.lag(150) == 50
    sp.acquire("m1", log(100, 131), max_records=32, batch_size=500, mode=BATCH)
    assert ack(sp, "m1", 105, 109, ACCEPT) == ErrorCode.NONE
    assert ack(sp, "m1", 110, 111, REJECT) == ErrorCode.NONE
    assert sp.lag(150) == 50 - 7
    assert sp.lag(108) == 8 - 3
    assert ack(sp, "m1", 100, 104, ACCEPT) == ErrorCode.NONE
    assert sp.start_offset == 112 and sp.lag(150) == 38


def test_in_flight_counts():
    sp, _ = make()
    fetch(sp, "m1", max_records=32)
    assert sp.acknowledge("m1", [AckBatch(4, 7, (ACCEPT,)), AckBatch(8, 9, (REJECT,)),
                                 AckBatch(10, 12, (RELEASE,))]) == ErrorCode.NONE
    assert sp.in_flight_counts() == {AVAILABLE: 3, ACQUIRED: 23, ACKNOWLEDGED: 4, ARCHIVED: 2}


# ---------------------------------------------------------------------------- compaction gaps


def test_fetch_offset_archives_available_records_compaction_removed():
    sp, _ = make()
    fetch(sp, "m1", max_records=32)
    assert ack(sp, "m1", 0, 31, RELEASE) == ErrorCode.NONE
    # The log no longer has 0..15: reading from 0 returns the batch at 16.
    got = sp.acquire("m2", log(16, 31), max_records=500, batch_size=500, mode=BATCH,
                     fetch_offset=0)
    assert got == [AcquiredRange(16, 31, 2)]
    assert sp.start_offset == 16


def test_new_records_after_a_gap_in_the_log():
    sp, _ = make()
    fetch(sp, "m1", max_records=16)
    # Offsets 16..31 do not exist (compaction): the next batch is 32..47.
    got = sp.acquire("m2", [FetchedBatch(32, 47)], max_records=500, batch_size=500, mode=BATCH)
    assert got == [AcquiredRange(32, 47, 1)]
    assert window(sp)[1] == (16, 31, ARCHIVED, 0, None)
    assert ack(sp, "m1", 0, 15, ACCEPT) == ErrorCode.NONE
    assert sp.start_offset == 32
    # With nothing in flight the SPSO just jumps.
    sp2, _ = make()
    assert sp2.acquire("m1", [FetchedBatch(50, 59)], max_records=5, batch_size=500,
                       mode=LIMIT) == [AcquiredRange(50, 54, 1)]
    assert sp2.start_offset == 50 and sp2._runs[0].first == 50


def test_offsets_between_fetched_batches_are_acquired_like_kafka():
    sp, _ = make()
    got = sp.acquire("m1", [FetchedBatch(0, 9), FetchedBatch(20, 29)], max_records=500,
                     batch_size=500, mode=BATCH)
    assert got == [AcquiredRange(0, 29, 1)]
    assert ack(sp, "m1", 10, 19, GAP) == ErrorCode.NONE


# ---------------------------------------------------------------------------- persistence


def test_acquire_produces_a_delta_with_the_counted_delivery():
    sp, _ = make()
    assert sp.drain_delta() is None
    fetch(sp, "m1", max_records=16)
    assert sp.drain_delta() == SharePartitionState(0, 0, (StateBatch(0, 15, 0, 1),))
    assert sp.drain_delta() is None
    assert ack(sp, "m1", 0, 7, ACCEPT) == ErrorCode.NONE
    assert sp.drain_delta() == SharePartitionState(8, 0, ())
    assert ack(sp, "m1", 10, 11, ACCEPT) == ErrorCode.NONE
    assert sp.drain_delta() == SharePartitionState(8, 0, (StateBatch(10, 11, 2, 1),))


def test_restart_keeps_acknowledged_and_returns_in_flight_records():
    sp, _ = make()
    snapshot = sp.state()
    fetch(sp, "m1", max_records=32)
    assert ack(sp, "m1", 0, 9, ACCEPT) == ErrorCode.NONE
    assert ack(sp, "m1", 12, 13, ACCEPT) == ErrorCode.NONE
    assert ack(sp, "m1", 14, 14, REJECT) == ErrorCode.NONE
    replayed = apply_delta(snapshot, sp.drain_delta())
    assert replayed == sp.state()
    # Broker restart: a new core from the persisted state.
    sp2, _ = make(replayed)
    assert sp2.start_offset == 10 and sp2.end_offset == 32
    assert window(sp2) == [(10, 11, AVAILABLE, 1, None), (12, 13, ACKNOWLEDGED, 1, None),
                           (14, 14, ARCHIVED, 1, None), (15, 31, AVAILABLE, 1, None)]
    got = fetch(sp2, "m9")
    assert got[:2] == [AcquiredRange(10, 11, 2), AcquiredRange(15, 31, 2)]


def test_load_archives_records_that_reached_the_limit_and_fills_gaps():
    state = SharePartitionState(10, 3, (StateBatch(10, 14, 0, 5), StateBatch(20, 24, 0, 2),
                               StateBatch(25, 29, 2, 1), StateBatch(5, 8, 2, 1)))
    sp, _ = make(state, delivery_count_limit=5)
    # 10..14 were delivered 5 times: archived; SPSO moves to the gap at 15 (never delivered).
    assert sp.start_offset == 15 and sp.end_offset == 30 and sp.state_epoch == 3
    assert window(sp) == [(15, 19, AVAILABLE, 0, None), (20, 24, AVAILABLE, 2, None),
                          (25, 29, ACKNOWLEDGED, 1, None)]
    assert sp.next_fetch_offset() == 15
    # The archiving is persisted with the first delta.
    assert sp.drain_delta() == SharePartitionState(15, 3, ())
    got = sp.acquire("m1", log(15, 40, 5), max_records=500, batch_size=500, mode=BATCH)
    assert got == [AcquiredRange(15, 19, 1), AcquiredRange(20, 24, 3), AcquiredRange(30, 44, 1)]


def test_load_with_overlapping_batches_takes_the_later_one():
    state = SharePartitionState(0, 0, (StateBatch(0, 9, 0, 1), StateBatch(5, 6, 2, 1)))
    sp, _ = make(state)
    assert window(sp) == [(0, 4, AVAILABLE, 1, None), (5, 6, ACKNOWLEDGED, 1, None),
                          (7, 9, AVAILABLE, 1, None)]


def test_apply_delta_overlays_and_merges():
    base = SharePartitionState(0, 0, (StateBatch(0, 9, 0, 1), StateBatch(10, 19, 2, 1)))
    delta = SharePartitionState(2, 0, (StateBatch(5, 12, 0, 1), StateBatch(15, 15, 4, 2)))
    assert apply_delta(base, delta) == SharePartitionState(2, 0, (
        StateBatch(2, 12, 0, 1), StateBatch(13, 14, 2, 1), StateBatch(15, 15, 4, 2),
        StateBatch(16, 19, 2, 1)))
    # AVAILABLE with count 0 in a delta erases (never delivered).
    assert apply_delta(base, SharePartitionState(0, 0, (StateBatch(0, 9, 0, 0),))) == SharePartitionState(
        0, 0, (StateBatch(10, 19, 2, 1),))
    # A newer epoch replaces everything.
    assert apply_delta(base, SharePartitionState(50, 1, (StateBatch(40, 55, 2, 1),))) == SharePartitionState(
        50, 1, (StateBatch(50, 55, 2, 1),))


def test_undrained_dirty_ranges_stay_bounded():
    sp, _ = make()
    for _ in range(200):
        got = fetch(sp, "m1", max_records=16, log_end=3_000)
        r = got[0]
        # Accept every other record: many small changed ranges, never drained.
        types = tuple(ACCEPT if (o % 2) else RELEASE for o in range(r.first_offset,
                                                                     r.last_offset + 1))
        assert ack(sp, "m1", r.first_offset, r.last_offset, *types) == ErrorCode.NONE
        sp.release_member("m1")
    assert len(sp._dirty) <= 2 * len(sp._runs) + 65
    snap = sp.state()
    sp2, _ = make(snap)
    assert sp2.state() == snap


def test_stale_lock_entries_do_not_pile_up_below_a_long_held_lock():
    sp, clock = make(max_record_locks=100_000)
    fetch(sp, "old", max_records=16)          # held until its lock expires
    first_deadline = sp.next_deadline()
    for _ in range(500):
        clock.now += 1
        got = fetch(sp, "m1", max_records=16, log_end=20_000)
        assert ack(sp, "m1", got[0].first_offset, got[-1].last_offset, ACCEPT) == ErrorCode.NONE
        assert sp.next_deadline() == first_deadline
    assert len(sp._heap) <= 2 * len(sp._locks) + 65
    sp.on_timer(first_deadline)
    assert sp.next_deadline() is None and sp.next_fetch_offset() == 0


# ------------------------------------------------------------------ read_through


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["fetch", "accept", "release", "reject",
                                                "expire", "lower"]),
                              st.integers(1, 60), st.sampled_from(["m1", "m2"])),
                    min_size=2, max_size=25),
       max_records=st.integers(1, 80), mode=st.sampled_from([BATCH, LIMIT]),
       limit=st.integers(2, 5))
def test_a_read_up_to_read_through_acquires_what_a_whole_read_does(ops, max_records, mode,
                                                                   limit):
    """The shell reads the log only up to read_through(nfo, max_records) (whole batches); the
    acquisition must equal one over the whole log, whatever the window holds (acquired,
    acknowledged, released, archived and expired runs, delivery counts at or over a limit
    lowered at run time)."""
    sp, clock = make(delivery_count_limit=limit)
    for op, n, member in ops:
        if op == "fetch":
            fetch(sp, member, n, mode=mode, size=7)
        elif op == "expire":
            clock.now += LOCK_MS
            sp.on_timer(clock.now)
        elif op == "lower":  # the group's delivery limit lowered at run time
            sp.set_config(SharePartitionConfig(delivery_count_limit=2))
        else:
            mine = [r for r in sp._runs if r.state == ACQUIRED and r.member == member]
            if mine:
                r = mine[n % len(mine)]
                t = {"accept": ACCEPT, "release": RELEASE, "reject": REJECT}[op]
                ack(sp, member, r.first, r.last, t)
    nfo = sp.next_fetch_offset()
    if nfo > 319:
        return
    through = sp.read_through(nfo, max_records)
    assert through >= nfo
    whole = copy.deepcopy(sp)
    short = copy.deepcopy(sp)
    full_log = log(nfo, 319, 7)
    cut_log = [b for b in full_log if b.base_offset <= through]
    got_whole = whole.acquire("m3", full_log, max_records=max_records, batch_size=500,
                              mode=mode, fetch_offset=nfo)
    got_short = short.acquire("m3", cut_log, max_records=max_records, batch_size=500,
                              mode=mode, fetch_offset=nfo)
    assert got_short == got_whole
    assert window(short) == window(whole)
    assert short.end_offset == whole.end_offset


def test_read_through_skips_offsets_other_members_hold():
    sp, _clock = make()
    fetch(sp, "m1", 32)  # 0..31 acquired by m1
    ack(sp, "m1", 0, 31, RELEASE)
    fetch(sp, "m2", 16)  # 0..15 acquired by m2, 16..31 AVAILABLE
    assert sp.read_through(16, 10) == 25  # inside the AVAILABLE run
    assert sp.read_through(16, 20) == 35  # 16 AVAILABLE, then 4 new past the window
    assert sp.read_through(0, 5) == 20  # 0..15 held by m2 do not count


def test_read_through_skips_records_a_lowered_delivery_limit_will_archive():
    sp, _clock = make(delivery_count_limit=5)
    for _ in range(2):
        fetch(sp, "m1", 16)
        ack(sp, "m1", 0, 15, RELEASE)  # AVAILABLE again, delivered twice
    assert sp.read_through(0, 5) == 4
    sp.set_config(SharePartitionConfig(delivery_count_limit=2))
    # acquire archives 0..15 instead of delivering them a third time: the read must go on
    assert sp.read_through(0, 5) == 20
    whole, short = copy.deepcopy(sp), copy.deepcopy(sp)
    assert short.acquire("m2", log(0, 20, 16), max_records=5, batch_size=500, mode=LIMIT) == \
        whole.acquire("m2", log(0, 319, 16), max_records=5, batch_size=500, mode=LIMIT) == \
        [AcquiredRange(16, 20, 1)]
