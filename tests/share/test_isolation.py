"""share.isolation.level and control records in the share-partition core, on logs built directly
(transactional batches + ``UnifiedLog.append_control_marker``, as tests/replica/
test_aborted_transactions.py; producers cannot write transactions through this layer):

* read_committed: nothing past the last stable offset is acquired, and the records of aborted
  transactions are ARCHIVED, never handed out (Kafka 4.1+'s
  ``SharePartition.filterAbortedTransactionalAcquiredRecords``);
* control records (COMMIT/ABORT markers) are never acquired under either level;
* the ARCHIVED ranges are persisted (snapshot, deltas) and survive a reload.

What the shell reads is what ``ReplicaManager.read_log`` returns; ``share.manager.fetched_batches``
turns it into the core's ``FetchedBatch`` list, exactly as ``SharePartitionManager`` does."""

from __future__ import annotations

import uuid

from replica.test_manager import _replicas  # tests/ is on sys.path
from storage.helpers import append, batch

from snakka.protocol.errors import ErrorCode
from snakka.protocol.share import AckBatch, AcknowledgeType, AcquireMode
from snakka.records import iter_records
from snakka.share.manager import fetched_batches
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
ACCEPT = int(AcknowledgeType.ACCEPT)
ARCHIVED = int(RecordState.ARCHIVED)
PID, PID2 = 1000, 2000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def _sp(state: SharePartitionState | None = None, **cfg) -> SharePartition:
    return SharePartition("g", uuid.UUID(int=1), 0, SharePartitionConfig(**cfg), Clock(),
                          state or SharePartitionState(0))


def _txn(plog, pid, n, seq, tag, epoch=0):
    append(plog, batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=True, tag=tag))


def _fetch(rm, sp, member, *, committed, max_records=500, mode=BATCH, max_bytes=1 << 20):
    """One ShareFetch of partition t-0 as the shell does it: read at the core's next fetch
    offset (to the LSO or the HWM), mark the batches, acquire."""
    pl = rm.get_log("t", 0)
    offset = max(sp.next_fetch_offset(), pl.log_start_offset)
    read = rm.read_log(pl, offset, max_bytes, read_committed=committed, min_one_message=True)
    if not read.records:
        return [], read
    batches = fetched_batches(read.records,
                              read.aborted_transactions if committed else None)
    got = sp.acquire(member, [fb for fb, _s, _e in batches], max_records=max_records,
                     batch_size=500, mode=mode, fetch_offset=offset)
    return got, read


def _offsets(ranges) -> list[int]:
    return [o for r in ranges for o in range(r.first_offset, r.last_offset + 1)]


def _values(read, ranges) -> list[bytes]:
    """The records of the response a consumer keeps: data records at acquired offsets."""
    want = set(_offsets(ranges))
    return [r.value for r in iter_records(read.records) if r.offset in want]


def _mixed_log(rm):
    """0 plain | 1-2 PID aborted | 3 PID2 committed | 4 ABORT(PID) | 5 COMMIT(PID2) | 6 plain"""
    plog = rm.get_log("t", 0)
    append(plog, batch(1, tag="p"))
    _txn(plog, PID, 2, 0, "a")
    _txn(plog, PID2, 1, 0, "c")
    plog.append_control_marker(PID, 0, False, 0)
    plog.append_control_marker(PID2, 0, True, 0)
    append(plog, batch(1, tag="q"))
    return plog


def test_read_committed_archives_aborted_records_and_markers(tmp_path):
    rm = _replicas(tmp_path)
    _mixed_log(rm)
    sp = _sp()
    got, read = _fetch(rm, sp, "m1", committed=True)
    assert got == [AcquiredRange(0, 0, 1), AcquiredRange(3, 3, 1), AcquiredRange(6, 6, 1)]
    assert _values(read, got) == [b"pv0.......", b"cv0.......", b"qv0......."]
    # The aborted records were taken by this acquisition (count 1, as Kafka) and archived; the
    # markers too. Nothing of them is held by the member.
    assert sp.acquired_by("m1") == 3
    state = sp.state()
    assert StateBatch(1, 2, ARCHIVED, 1) in state.batches
    assert StateBatch(4, 5, ARCHIVED, 1) in state.batches
    for off in (0, 3, 6):
        assert sp.acknowledge("m1", [AckBatch(off, off, (ACCEPT,))]) == 0
    assert (sp.start_offset, sp.end_offset) == (7, 7)
    assert _fetch(rm, sp, "m1", committed=True)[0] == []


def test_read_uncommitted_delivers_aborted_records_but_never_markers(tmp_path):
    rm = _replicas(tmp_path)
    _mixed_log(rm)
    sp = _sp()
    got, read = _fetch(rm, sp, "m1", committed=False)
    assert got == [AcquiredRange(0, 3, 1), AcquiredRange(6, 6, 1)]
    assert len(_values(read, got)) == 5
    assert StateBatch(4, 5, ARCHIVED, 1) in sp.state().batches
    # Acknowledging the acquired offsets completes the partition: the markers need no GAP.
    assert sp.acknowledge("m1", [AckBatch(0, 3, (ACCEPT,)), AckBatch(6, 6, (ACCEPT,))]) == 0
    assert sp.start_offset == 7


def test_acknowledging_a_marker_is_invalid_record_state(tmp_path):
    """The markers were never handed out, so they cannot be acknowledged (a client that sends
    GAP only for acquired offsets without a record, as Kafka's, never does)."""
    rm = _replicas(tmp_path)
    _mixed_log(rm)
    sp = _sp()
    _fetch(rm, sp, "m1", committed=True)
    assert sp.acknowledge("m1", [AckBatch(4, 4, (int(AcknowledgeType.GAP),))]) == \
        ErrorCode.INVALID_RECORD_STATE


def test_nothing_past_the_lso_then_the_abort_archives_it(tmp_path):
    rm = _replicas(tmp_path)
    plog = rm.get_log("t", 0)
    append(plog, batch(2, tag="p"))  # 0-1
    _txn(plog, PID, 3, 0, "o")  # 2-4, open
    append(plog, batch(1, tag="q"))  # 5
    sp = _sp()
    got, read = _fetch(rm, sp, "m1", committed=True)
    assert got == [AcquiredRange(0, 1, 1)] and read.last_stable_offset == 2
    assert sp.end_offset == 2  # nothing at/after the LSO entered the window
    assert _fetch(rm, sp, "m1", committed=True)[0] == []
    rm.write_txn_marker("t", 0, PID, 0, False, 0)  # 6: ABORT
    got, _read = _fetch(rm, sp, "m2", committed=True)
    assert got == [AcquiredRange(5, 5, 1)]
    assert [b for b in sp.state().batches if b.delivery_state == ARCHIVED] == \
        [StateBatch(2, 4, ARCHIVED, 1), StateBatch(6, 6, ARCHIVED, 1)]


def test_a_producer_that_aborted_then_commits_is_delivered(tmp_path):
    """The ABORT marker ends the aborted transaction of its producer: its next transaction
    (committed) is delivered, an interleaved producer's records are judged on their own."""
    rm = _replicas(tmp_path)
    plog = rm.get_log("t", 0)
    _txn(plog, PID, 1, 0, "a")  # 0 aborted
    _txn(plog, PID2, 1, 0, "b")  # 1 committed
    _txn(plog, PID, 1, 1, "a")  # 2 aborted
    plog.append_control_marker(PID, 0, False, 0)  # 3
    _txn(plog, PID, 2, 2, "c")  # 4-5 committed
    _txn(plog, PID2, 1, 1, "b")  # 6 committed
    plog.append_control_marker(PID2, 0, True, 0)  # 7
    plog.append_control_marker(PID, 0, True, 0)  # 8
    sp = _sp()
    got, read = _fetch(rm, sp, "m1", committed=True)
    assert _offsets(got) == [1, 4, 5, 6]
    assert [v[:2] for v in _values(read, got)] == [b"bv", b"cv", b"cv", b"bv"]


def test_a_fetch_starting_inside_an_aborted_transaction(tmp_path):
    """The fetch offset lies after the first batch of an aborted transaction (the earlier
    records were done before): the aborted list still names it, its later batch is archived."""
    rm = _replicas(tmp_path)
    plog = rm.get_log("t", 0)
    _txn(plog, PID, 2, 0, "a")  # 0-1
    append(plog, batch(1, tag="p"))  # 2
    _txn(plog, PID, 2, 2, "a")  # 3-4
    plog.append_control_marker(PID, 0, False, 0)  # 5
    append(plog, batch(1, tag="q"))  # 6
    sp = _sp(SharePartitionState(2))
    got, _read = _fetch(rm, sp, "m1", committed=True)
    assert _offsets(got) == [2, 6]


def test_record_limit_makes_progress_through_an_aborted_batch(tmp_path):
    """MaxRecords smaller than an aborted batch: each fetch archives what it took, the rest of
    the batch is archived as it is met, and the committed record after it comes out."""
    rm = _replicas(tmp_path)
    plog = rm.get_log("t", 0)
    _txn(plog, PID, 10, 0, "a")  # 0-9
    plog.append_control_marker(PID, 0, False, 0)  # 10
    append(plog, batch(1, tag="p"))  # 11
    sp = _sp()
    seen: list[int] = []
    for _ in range(20):
        got, _read = _fetch(rm, sp, "m1", committed=True, max_records=3, mode=LIMIT)
        seen += _offsets(got)
        if seen:
            break
    assert seen == [11]
    assert sp.start_offset == 11


def test_released_records_of_an_aborted_transaction_are_archived_not_redelivered(tmp_path):
    """Records acquired under read_uncommitted and released (the group's isolation level
    changed meanwhile) are AVAILABLE in the window: a read_committed fetch archives them."""
    rm = _replicas(tmp_path)
    _mixed_log(rm)
    sp = _sp()
    assert _offsets(_fetch(rm, sp, "m1", committed=False)[0]) == [0, 1, 2, 3, 6]
    sp.release_member("m1")
    got, _read = _fetch(rm, sp, "m2", committed=True)
    assert got == [AcquiredRange(0, 0, 2), AcquiredRange(3, 3, 2), AcquiredRange(6, 6, 2)]
    # Taken by this acquisition, then archived: the delivery count says so (as Kafka).
    assert StateBatch(1, 2, ARCHIVED, 2) in sp.state().batches


def test_archived_ranges_survive_a_reload_and_deltas_replay(tmp_path):
    rm = _replicas(tmp_path)
    _mixed_log(rm)
    sp = _sp()
    base = sp.state()
    _fetch(rm, sp, "m1", committed=True)
    delta = sp.drain_delta()
    assert delta is not None
    snap = sp.state()
    assert apply_delta(base, delta) == snap
    # A broker restart: the acquired records come back AVAILABLE, the archived stay archived.
    again = _sp(snap)
    got, _read = _fetch(rm, again, "m2", committed=True)
    assert got == [AcquiredRange(0, 0, 2), AcquiredRange(3, 3, 2), AcquiredRange(6, 6, 2)]
    assert again.in_flight_counts()[RecordState.ARCHIVED] == 4


def test_only_the_archive_batches_leave_the_acquired_ranges():
    """The core alone: archive spans cut ranges split by batch_size and those of re-acquired
    AVAILABLE records; the lock only counts what is held."""
    sp = _sp()
    fb = [FetchedBatch(0, 4), FetchedBatch(5, 5, True), FetchedBatch(6, 9),
          FetchedBatch(10, 12, True), FetchedBatch(13, 19)]
    got = sp.acquire("m1", fb, max_records=500, batch_size=7, mode=BATCH)
    assert got == [AcquiredRange(0, 4, 1), AcquiredRange(6, 9, 1), AcquiredRange(13, 19, 1)]
    assert sp.acquired_by("m1") == 16
    assert sp.in_flight_counts()[RecordState.ARCHIVED] == 4
    sp.release_member("m1")
    assert sp.acquire("m2", fb, max_records=500, batch_size=500, mode=BATCH) == \
        [AcquiredRange(0, 4, 2), AcquiredRange(6, 9, 2), AcquiredRange(13, 19, 2)]
    # Lock expiry releases exactly what is held.
    sp._clock.now += 10**9
    sp.on_timer(sp._clock.now)
    assert sp.in_flight_counts()[RecordState.AVAILABLE] == 16


def test_random_operations_never_hand_out_an_archive_batch():
    """Seeded random fetches (both modes, stale reads), acknowledgements, releases, lock expiry
    and reloads from snapshot + deltas over a log where every fourth 5-record batch must never
    be delivered: no such offset is ever acquired, the lock bookkeeping adds up, the persisted
    form replays to ``state()``, and draining the partition delivers every other record."""
    import random

    last_offset, size = 199, 5
    archive = {b for b in range(0, last_offset + 1, size) if (b // size) % 4 == 1}

    def batches_from(offset: int, n: int) -> list[FetchedBatch]:
        base = offset - offset % size
        return [FetchedBatch(b, b + size - 1, b in archive)
                for b in range(base, min(base + n * size, last_offset + 1), size)]

    def never(o: int) -> bool:
        return o - o % size in archive

    for seed in range(30):
        rnd = random.Random(seed)
        sp = _sp(record_lock_duration_ms=1_000, delivery_count_limit=3, max_record_locks=60)
        persisted = sp.state()
        delivered: set[int] = set()
        for _step in range(120):
            op = rnd.random()
            member = rnd.choice(["m0", "m1", "m2"])
            if op < 0.45:
                # Sometimes a stale read from before the next fetch offset (one from after it
                # would stand for records compaction removed: they are archived unseen).
                nfo = sp.next_fetch_offset() - (rnd.randint(1, 6) if rnd.random() < 0.1 else 0)
                if 0 <= nfo <= last_offset:
                    got = sp.acquire(member, batches_from(nfo, rnd.randint(1, 6)),
                                     max_records=rnd.randint(1, 25),
                                     batch_size=rnd.randint(1, 30),
                                     mode=rnd.choice([BATCH, LIMIT]), fetch_offset=nfo)
                    offs = _offsets(got)
                    assert not [o for o in offs if never(o)], (seed, got)
                    delivered.update(offs)
            elif op < 0.75:
                held = [r for r in sp._runs if r.member == member]
                if held:
                    r = rnd.choice(held)
                    t = rnd.choice([ACCEPT, ACCEPT, 2, 3])  # accept, release, reject
                    assert sp.acknowledge(member, [AckBatch(r.first, r.last, (t,))]) == 0
            elif op < 0.85:
                sp.release_member(member)
            elif op < 0.95:
                sp._clock.now += 1_500
                sp.on_timer(sp._clock.now)
            else:
                sp = _sp(sp.state(), record_lock_duration_ms=1_000, delivery_count_limit=3,
                         max_record_locks=60)
            delta = sp.drain_delta()
            if delta is not None:
                persisted = apply_delta(persisted, delta)
            assert persisted == sp.state(), seed
            assert not [r for r in sp._runs if r.state == int(RecordState.ACQUIRED)
                        and never(r.first)], seed
            held_locks: dict[int, int] = {}
            for r in sp._runs:
                if r.state == int(RecordState.ACQUIRED):
                    held_locks[r.lock] = held_locks.get(r.lock, 0) + r.last - r.first + 1
            assert held_locks == sp._locks, seed
        # Drain: one member takes and accepts everything left.
        for _ in range(200):
            sp.release_member("m1")
            sp.release_member("m2")
            nfo = sp.next_fetch_offset()
            if nfo > last_offset:
                break
            got = sp.acquire("m0", batches_from(nfo, 8), max_records=40, batch_size=500,
                             mode=BATCH, fetch_offset=nfo)
            assert not [o for o in _offsets(got) if never(o)], seed
            delivered.update(_offsets(got))
            for r in got:
                sp.acknowledge("m0", [AckBatch(r.first_offset, r.last_offset, (ACCEPT,))])
            sp._clock.now += 1_500
            sp.on_timer(sp._clock.now)
        assert sp.start_offset == last_offset + 1, seed
        # Every record outside the archive batches was delivered (at least once).
        assert delivered == {o for o in range(last_offset + 1) if not never(o)}, seed
