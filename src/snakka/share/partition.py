"""The share-partition core (KIP-932): which records of one (share group, topic-partition) are in
flight, who holds them, for how long, and how often they were delivered. Sans-I/O with an
injected clock (the contract of ``snakka.groups.types``: ``next_deadline()`` / ``on_timer()``).

What it owns
------------
The *in-flight window* ``[start_offset, end_offset)``: the share-partition start offset (SPSO,
every record before it is done) up to the share-partition end offset (SPEO, the first offset never
acquired). Every offset of the window is in one of Kafka's four states: AVAILABLE (may be
acquired, again), ACQUIRED (held by one member until its acquisition lock expires),
ACKNOWLEDGED and ARCHIVED (both terminal). Offsets at or after SPEO have never been delivered.

The window is a list of *runs* (``_Run``): maximal ranges of offsets with one state, delivery
count, owner and lock. Operations split runs on demand and merge equal neighbours back, so a
consumer that acquires and accepts 500-record ranges keeps a handful of runs however many records
flow through; nothing is per record. Acquisition locks live in a heap keyed by deadline; an entry
stands for one ``acquire`` (or one RENEW) and a dict counts how many offsets still hold it, so
stale entries (records acknowledged before the deadline) are dropped in O(1) and ``on_timer``
touches only the runs of expiring locks.

Persistence
-----------
``state()`` is a full snapshot (Kafka's ShareSnapshot), ``drain_delta()`` the changes since the
last ``state()``/``drain_delta()`` (Kafka's ShareUpdate): the current SPSO plus the persisted form
of the changed ranges. The persisted form has no ACQUIRED: an acquired record is written as
AVAILABLE with its (already incremented) delivery count, so ``acquire`` produces a delta and a
broker that crashes with records in flight hands them out again with the delivery counted.
``apply_delta`` replays; snapshot + deltas always equals ``state()`` (property-tested).

Where this follows Kafka (``kafka.server.share.SharePartition``, 4.2) and where it differs
-----------------------------------------------------------------------------------------
* Acquire: new records are acquired in whole log batches in BATCH_OPTIMIZED mode (MaxRecords is a
  soft limit: acquisition stops at the end of the log batch holding the MaxRecords-th record) and
  exactly MaxRecords at most in RECORD_LIMIT mode. In RECORD_LIMIT mode the rest of a cut log
  batch joins the window as AVAILABLE with delivery count 0 (Kafka caches the whole batch), so it
  is fetched next and counts against the record-lock cap; it is not persisted (a restart finds
  those offsets past SPEO again, which is the same thing). New records are returned in ranges of about ``batch_size`` records split on log-batch bases
  (Kafka's ``createBatches``), only in BATCH_OPTIMIZED mode. Offsets between fetched log batches
  (compaction) are acquired too, as Kafka does; clients acknowledge them as GAP.
* ``group.share.partition.max.record.locks`` (the cap) bounds the in-flight window SPEO - SPSO,
  Kafka's ``numInFlightRecords`` (ACKNOWLEDGED/ARCHIVED records inside the window count until SPSO
  passes them). As Kafka 4.2's ``lastOffsetAndMaxRecordsToAcquire``: one ``acquire`` takes at
  most ``min(MaxRecords, cap - in-flight)`` records, re-acquired and new together, rounded up to
  the end of the log batch in BATCH_OPTIMIZED mode (so the window may overshoot the cap by part of
  one batch: acquiring 200 with a cap of 100 and 200-record producer batches is Kafka's
  behaviour) and exact in RECORD_LIMIT mode. A window at or over the cap acquires nothing new;
  a fetch starting inside it may still take the AVAILABLE records between its fetch offset and
  SPEO (at most ``min(MaxRecords, SPEO - fetch offset)``), and ``can_acquire`` (the shell's gate,
  Kafka's ``canAcquireRecords``) is true only then.
* Delivery throttling (Kafka 4.2): once a record's delivery count reaches
  ``max(2, ceil(limit / 2))`` it is no longer delivered together with records acquired before it
  in the same fetch, and the number delivered with it halves with every further attempt; on its
  last attempt (count ``limit - 1``, limit > 2) it is delivered alone, so a poison record gets
  archived without dragging its neighbours to the limit. Kafka halves the size of its in-flight
  batch; we halve the length of the AVAILABLE run (the same thing when runs follow acquisitions).
* Acknowledge errors: shape errors (types length not 1 or the range length, unknown type, ranges
  not ascending/overlapping) are INVALID_REQUEST (Kafka checks those in KafkaApis); an offset not
  ACQUIRED by this member is INVALID_RECORD_STATE; a range past SPEO is INVALID_REQUEST and any
  range when nothing is in flight INVALID_RECORD_STATE (Kafka's ``fetchSubMapForAcknowledgement
  Batch``); offsets before SPSO are skipped without error, as Kafka does (they are done already,
  e.g. because the log start moved past them). All ranges are validated before anything is
  applied, so an error leaves the state unchanged (Kafka rolls back instead).
* ``release_member`` (member left / fenced / share session closed): its ACQUIRED records become
  AVAILABLE with the delivery count kept, ARCHIVED once it reached the limit. Kafka 4.0/4.1
  decremented the count here (KAFKA-17541: the records were "fetched but not delivered"); Kafka
  4.2 bumps/keeps it (KAFKA-19972) because a crashing consumer otherwise loops on a poison record
  forever. We follow 4.2: delivery counts never decrease.
* Lock expiry: ACQUIRED -> AVAILABLE with the count kept, ARCHIVED at the limit (as Kafka).
* Persistence: Kafka writes state only on acknowledge/release/expiry, so acquisitions in flight
  at a crash are not counted; we count them (see above). On load, AVAILABLE records whose count
  already reached the limit are ARCHIVED: they were delivered that many times, and a record that
  crashes its consumers must not come back after every broker restart.
* Log start moving past SPSO (retention, DeleteRecords): records before it are gone; we drop
  them from the window at once, ACQUIRED ones included (Kafka keeps those until their lock
  expires; acknowledgements for them are skipped in both).
* AlterShareGroupOffsets (``reset_start_offset``): allowed only while nothing is ACQUIRED
  (NON_EMPTY_GROUP otherwise; Kafka requires an empty group). It drops the window and increments
  ``state_epoch`` (Kafka re-initialises the share-partition state with a new state epoch); the next
  ``drain_delta()`` is then a full snapshot, and ``apply_delta`` replaces the state when the epoch
  of a delta is newer and ignores deltas of an older epoch (Kafka fences those with
  FENCED_STATE_EPOCH).
* Compacted topics: pass ``fetch_offset`` (where the log was read) to ``acquire`` and AVAILABLE
  records between it and the first fetched batch are ARCHIVED, as Kafka's
  ``maybeArchiveStaleBatches`` does, so the SPSO can pass records compaction removed.
* Lag (KIP-1226): records between SPSO and the high watermark minus the ACKNOWLEDGED/ARCHIVED
  ones among them (Kafka's ``deliveryCompleteCount``).
* A delivery-count limit lowered at run time applies at the next transition: AVAILABLE records
  already at/over the new limit are archived instead of acquired.
* Records a share consumer must never get (``FetchedBatch.archive``: the shell marks control
  batches, and under ``share.isolation.level=read_committed`` the batches of aborted
  transactions): as Kafka 4.1+'s ``filterAbortedTransactionalAcquiredRecords``, ``acquire``
  takes them like any other record and then moves those it took to ARCHIVED (their delivery
  count kept) and drops them from the AcquiredRecords ranges, so they use up part of that
  acquisition's record budget but are never handed out; AVAILABLE ones met in the fetched
  range are archived too. The ARCHIVED state is persisted like any other, so it survives a restart.
  Kafka archives only aborted data this way and hands COMMIT/ABORT markers out inside the
  acquired ranges, relying on the consumer to acknowledge them as GAP (the Java consumer and
  ours do); we archive markers at once under both isolation levels, which a correct consumer
  cannot tell apart (an offset outside the acquired ranges is skipped) and which keeps a
  consumer that does not acknowledge them from holding markers until their locks expire and
  the delivery limit is reached.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from bisect import bisect_right
from collections.abc import Callable, Sequence
from operator import attrgetter

from snakka.protocol.errors import ErrorCode
from snakka.protocol.share import AckBatch, AcknowledgeType, AcquireMode
from snakka.share.types import (
    AcquiredRange,
    FetchedBatch,
    RecordState,
    SharePartitionConfig,
    SharePartitionState,
    StateBatch,
)

__all__ = ["SharePartition", "apply_delta"]

# Plain ints on the hot paths (IntEnum comparisons are several times slower).
_AVAILABLE = int(RecordState.AVAILABLE)
_ACQUIRED = int(RecordState.ACQUIRED)
_ACKNOWLEDGED = int(RecordState.ACKNOWLEDGED)
_ARCHIVED = int(RecordState.ARCHIVED)
_GAP = int(AcknowledgeType.GAP)
_ACCEPT = int(AcknowledgeType.ACCEPT)
_RELEASE = int(AcknowledgeType.RELEASE)
_REJECT = int(AcknowledgeType.REJECT)
_RENEW = int(AcknowledgeType.RENEW)
_MAX_ACK_TYPE = _RENEW
_PERSISTED_STATES = (_AVAILABLE, _ACKNOWLEDGED, _ARCHIVED)

# Kafka's MINIMUM_THROTTLE_RECORDS_DELIVERY_LIMIT: throttling never starts below this count.
_MIN_THROTTLE_DELIVERY_COUNT = 2

_first = attrgetter("first")
_base = attrgetter("base_offset")
_sb_first = attrgetter("first_offset")


class _Run:
    """Offsets ``first..last`` (inclusive) in one state. ``member``/``deadline``/``lock`` are set
    only while ACQUIRED; ``lock`` identifies the acquisition (or RENEW) that set the deadline."""

    __slots__ = ("first", "last", "state", "count", "member", "deadline", "lock")

    def __init__(self, first: int, last: int, state: int, count: int,
                 member: str | None = None, deadline: int = 0, lock: int = 0) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        self.member = member
        self.deadline = deadline
        self.lock = lock

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        owner = f" {self.member}@{self.deadline}#{self.lock}" if self.state == _ACQUIRED else ""
        return f"_Run({self.first}..{self.last} s={self.state} n={self.count}{owner})"


def _batch_end(batches: Sequence[FetchedBatch], offset: int) -> int:
    """Last offset of the fetched log batch holding ``offset`` (``offset`` itself in a gap)."""
    i = bisect_right(batches, offset, key=_base) - 1
    if i >= 0 and batches[i].last_offset >= offset:
        return batches[i].last_offset
    return offset


class SharePartition:
    """Acquisition state of one share-partition. See the module docstring for the rules."""

    def __init__(self, group_id: str, topic_id: uuid.UUID, partition: int,
                 config: SharePartitionConfig, clock: Callable[[], int],
                 state: SharePartitionState) -> None:
        self.group_id = group_id
        self.topic_id = topic_id
        self.partition = partition
        self.config = config
        self._clock = clock
        self.start_offset = state.start_offset
        self.state_epoch = state.state_epoch
        self._runs: list[_Run] = []
        self._heap: list[tuple[int, int, int, int]] = []  # (deadline, lock, first, last)
        self._locks: dict[int, int] = {}  # lock id -> offsets still ACQUIRED under it
        self._lock_ids = itertools.count(1)
        self._dirty: list[tuple[int, int]] = []  # changed ranges since the last drain
        self._persisted_start = state.start_offset
        self._persisted_epoch = state.state_epoch
        self._wakeup = False
        self._nfo_hint = state.start_offset  # no AVAILABLE offset below this
        # Log bytes per offset seen by the shell's last read of this partition (0: none yet);
        # sizes the next read (SharePartitionManager._read_for_acquire).
        self.read_bytes_per_offset = 0.0
        self._load(state)

    # ------------------------------------------------------------------ configuration

    def set_config(self, config: SharePartitionConfig) -> None:
        """Group configs changed: new limits apply to future acquisitions and transitions."""
        self.config = config

    # ------------------------------------------------------------------ loading

    def _load(self, state: SharePartitionState) -> None:
        limit = self.config.delivery_count_limit
        start = self.start_offset
        runs = self._runs
        pos = start
        for b in _canonical(start, _sorted_disjoint(state.batches)):
            if b.first_offset > pos:
                # Offsets not covered by a batch were never delivered.
                runs.append(_Run(pos, b.first_offset - 1, _AVAILABLE, 0))
            st = b.delivery_state
            if st == _AVAILABLE and b.delivery_count >= limit:
                # Delivered `limit` times already (the last delivery may have crashed the
                # consumer or the broker): archive rather than hand a poison record out again.
                st = _ARCHIVED
                self._mark(b.first_offset, b.last_offset)
            runs.append(_Run(b.first_offset, b.last_offset, st, b.delivery_count))
            pos = b.last_offset + 1
        self.end_offset = pos
        if runs:
            self._coalesce(0, len(runs) - 1)
        self._advance_start()

    # ------------------------------------------------------------------ queries

    def next_fetch_offset(self) -> int:
        """Where the shell reads the log from: the lowest AVAILABLE offset, else SPEO."""
        runs = self._runs
        hint = self._nfo_hint
        if hint < self.start_offset:
            hint = self.start_offset
        if hint < self.end_offset:
            i = bisect_right(runs, hint, key=_first) - 1
            if i < 0:
                i = 0
            for k in range(i, len(runs)):
                r = runs[k]
                if r.state == _AVAILABLE:
                    found = r.first if r.first > hint else hint
                    self._nfo_hint = found
                    return found
        self._nfo_hint = self.end_offset
        return self.end_offset

    def read_through(self, offset: int, max_records: int) -> int:
        """How far a log read from ``offset`` must reach for ``acquire(max_records=...)`` to
        find every record it could take: the ``max_records``-th offset from ``offset`` on that
        acquire may hand out (AVAILABLE below the delivery limit, or past the window). Acquire
        goes in offset order, stops after at most ``max_records`` records and rounds up only
        to the end of the log batch holding the last one, so a read whose whole batches cover
        this offset gives it the same records as a longer read (the shell reads less: Kafka's
        log reads are lazy file slices, snakka's are preads). Offsets counted here may still
        be acquired fewer (throttling, the record-lock cap): a longer read changes nothing
        then either."""
        n = max_records if max_records > 0 else 1
        start = self.start_offset
        if offset < start:
            offset = start
        end = self.end_offset
        if offset >= end or not self._runs:
            return offset + n - 1
        limit = self.config.delivery_count_limit
        runs = self._runs
        i = bisect_right(runs, offset, key=_first) - 1
        if i < 0:
            i = 0
        count = 0
        for k in range(i, len(runs)):
            r = runs[k]
            if r.state != _AVAILABLE or r.count >= limit or r.last < offset:
                continue
            a = r.first if r.first > offset else offset
            have = r.last - a + 1
            if count + have >= n:
                return a + (n - count) - 1
            count += have
        return end + (n - count) - 1

    def can_acquire(self) -> bool:
        """False when the window is full (max record locks) and nothing in it is AVAILABLE."""
        if self.end_offset - self.start_offset < self.config.max_record_locks:
            return True
        return self.next_fetch_offset() < self.end_offset

    def next_deadline(self) -> int | None:
        """Earliest acquisition-lock expiry, or None."""
        heap = self._heap
        locks = self._locks
        while heap and heap[0][1] not in locks:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def take_wakeup(self) -> bool:
        """True once after records became AVAILABLE (or the full window got room)."""
        w = self._wakeup
        self._wakeup = False
        return w

    def lag(self, high_watermark: int) -> int:
        """KIP-1226 lag: offsets in [SPSO, HWM) not ACKNOWLEDGED/ARCHIVED."""
        start = self.start_offset
        if high_watermark <= start:
            return 0
        done = 0
        for r in self._runs:
            if r.first >= high_watermark:
                break
            if r.state == _ACKNOWLEDGED or r.state == _ARCHIVED:
                done += min(r.last, high_watermark - 1) - r.first + 1
        return max(0, high_watermark - start - done)

    def in_flight_counts(self) -> dict[RecordState, int]:
        """Number of offsets of the window in each state."""
        counts = dict.fromkeys(RecordState, 0)
        for r in self._runs:
            counts[RecordState(r.state)] += r.last - r.first + 1
        return counts

    def runs_snapshot(self) -> list[tuple[int, int, int, int, str | None]]:
        """The window as (first, last, state, delivery count, owner) runs, read-only (the
        console shows them; :meth:`state` would reset the persister's delta tracking)."""
        return [(r.first, r.last, r.state, r.count, r.member) for r in self._runs]

    def acquired_by(self, member_id: str) -> int:
        """Number of offsets currently ACQUIRED by ``member_id``."""
        return sum(r.last - r.first + 1 for r in self._runs
                   if r.state == _ACQUIRED and r.member == member_id)

    # ------------------------------------------------------------------ acquire

    def acquire(self, member_id: str, batches: Sequence[FetchedBatch], *, max_records: int,
                batch_size: int, mode: AcquireMode,
                fetch_offset: int | None = None) -> list[AcquiredRange]:
        """Acquire the records of ``batches`` (log batches read from ``next_fetch_offset()``) that
        are AVAILABLE or new, for ``member_id``. Returns the acquired ranges, ascending.

        ``fetch_offset``: where the log read started; when given, AVAILABLE records between it
        and the first fetched batch no longer exist (compaction) and are archived."""
        if max_records <= 0 or not batches:
            return []
        cfg = self.config
        limit = cfg.delivery_count_limit
        now = self._clock()
        deadline = now + cfg.record_lock_duration_ms
        if fetch_offset is not None and fetch_offset < batches[0].base_offset:
            self._archive_available(fetch_offset, batches[0].base_offset - 1)
        start = self.start_offset
        lo = batches[0].base_offset
        if lo < start:
            lo = start
        hi = batches[-1].last_offset
        if hi < lo:
            self._advance_start()
            return []
        # The record-lock cap (Kafka's lastOffsetAndMaxRecordsToAcquire): at most
        # min(MaxRecords, cap - in-flight) records, re-acquired and new together. A window at
        # or over the cap may still hand out what it holds: a fetch starting inside it takes
        # at most the offsets from there to SPEO, and nothing past SPEO.
        end = self.end_offset
        in_flight = end - start if self._runs else 0
        quota = min(max_records, cfg.max_record_locks - in_flight)
        if quota <= 0:
            at = lo if fetch_offset is None else max(fetch_offset, start)
            if at >= end:
                self._advance_start()
                return []
            quota = min(max_records, end - at)
            if hi >= end:
                hi = end - 1
                if hi < lo:
                    self._advance_start()
                    return []
        record_limit = mode == AcquireMode.RECORD_LIMIT
        throttle_from = max(_MIN_THROTTLE_DELIVERY_COUNT, -(-limit // 2))
        runs = self._runs
        lock_id = next(self._lock_ids)
        out: list[list[int]] = []  # [first, last, delivery_count]
        acquired = 0
        stop = False
        throttled = False
        acq_lo = -1
        acq_hi = -1
        touched_lo = -1
        touched_hi = -1

        # Phase 1: AVAILABLE records inside the window.
        end = self.end_offset
        if lo < end:
            wend = hi if hi < end else end - 1
            i = bisect_right(runs, lo, key=_first) - 1
            if i < 0:
                i = 0
            while i < len(runs):
                r = runs[i]
                if r.first > wend:
                    break
                if r.state != _AVAILABLE:
                    i += 1
                    continue
                a = r.first if r.first > lo else lo
                b = r.last if r.last < wend else wend
                c = r.count
                if c >= limit:
                    # The limit was lowered at run time: archive instead of delivering again.
                    i = self._set_range_state(i, a, b, _ARCHIVED)
                    touched_lo = i if touched_lo < 0 else touched_lo
                    touched_hi = i
                    i += 1
                    continue
                if c >= throttle_from:
                    if acquired:
                        stop = True
                        break
                    throttled = True
                    if limit > 2 and c == limit - 1:
                        q = 1  # last attempt: deliver it alone
                    else:
                        q = max(1, (r.last - r.first + 1) >> (c - throttle_from + 1))
                    if q < quota:
                        quota = q
                room = quota - acquired
                if b - a + 1 >= room:
                    cut = a + room - 1
                    if not (record_limit or throttled):
                        cut = _batch_end(batches, cut)
                    if cut < b:
                        b = cut
                    stop = True
                if a > r.first:
                    i = self._split(i, a)
                    r = runs[i]
                if b < r.last:
                    self._split(i, b + 1)
                r.state = _ACQUIRED
                r.count = c + 1
                r.member = member_id
                r.deadline = deadline
                r.lock = lock_id
                n = b - a + 1
                acquired += n
                if out and out[-1][1] + 1 == a and out[-1][2] == c + 1:
                    out[-1][1] = b
                else:
                    out.append([a, b, c + 1])
                if acq_lo < 0:
                    acq_lo = a
                acq_hi = b
                self._mark(a, b)
                if touched_lo < 0:
                    touched_lo = i
                touched_hi = i
                i += 1
                if stop:
                    break
            if touched_lo >= 0:
                self._coalesce(touched_lo, touched_hi)

        # Phase 2: records never acquired before (at/after SPEO).
        n_new = 0
        end = self.end_offset
        if not stop and not throttled and hi >= end:
            first_new = lo if lo > end else end
            window_empty = not runs
            room = quota - acquired
            if room > 0:
                x = first_new + room - 1
                # RECORD_LIMIT acquires exactly up to x; the rest of x's log batch joins the
                # window as AVAILABLE (never delivered), as Kafka caches the whole batch and
                # counts it against the cap. BATCH_OPTIMIZED acquires the whole batch.
                residue = -1
                if x >= hi:
                    last_new = hi
                elif record_limit:
                    last_new = x
                    residue = min(hi, _batch_end(batches, x))
                else:
                    last_new = min(hi, _batch_end(batches, x))
                if first_new > end:
                    if window_empty:
                        self.start_offset = first_new
                        self._nfo_hint = first_new
                    else:
                        # Offsets the log no longer has (compaction, aborted data removed):
                        # nothing to deliver, so they are done.
                        runs.append(_Run(end, first_new - 1, _ARCHIVED, 0))
                        self._mark(end, first_new - 1)
                runs.append(_Run(first_new, last_new, _ACQUIRED, 1, member_id, deadline, lock_id))
                self.end_offset = last_new + 1
                if residue > last_new:
                    # Not persisted: never-delivered records need no state (a restart simply
                    # finds them past SPEO again).
                    runs.append(_Run(last_new + 1, residue, _AVAILABLE, 0))
                    self.end_offset = residue + 1
                n_new = last_new - first_new + 1
                acquired += n_new
                if acq_lo < 0:
                    acq_lo = first_new
                acq_hi = last_new
                self._mark(first_new, last_new)
                # BatchSize <= 0 splits at every log batch (Kafka's createBatches does the
                # same, after a bogus empty first range we do not copy).
                if batch_size <= 0:
                    batch_size = 1
                if not record_limit and batch_size < n_new:
                    cur = first_new
                    k = bisect_right(batches, first_new, key=_base)
                    while k < len(batches):
                        base = batches[k].base_offset
                        if base > last_new:
                            break
                        if base - cur >= batch_size:
                            out.append([cur, base - 1, 1])
                            cur = base
                        k += 1
                    out.append([cur, last_new, 1])
                else:
                    out.append([first_new, last_new, 1])

        if acquired:
            self._locks[lock_id] = acquired
            self._push_lock(deadline, lock_id, acq_lo, acq_hi)
        if any(b.archive for b in batches):
            out = self._archive_undeliverable(batches, lock_id, out)
        self._advance_start()
        return [AcquiredRange(f, la, c) for f, la, c in out]

    def _archive_undeliverable(self, batches: Sequence[FetchedBatch], lock: int,
                               out: list[list[int]]) -> list[list[int]]:
        """Kafka's ``filterAbortedTransactionalAcquiredRecords``, applied to control batches
        too: inside the window, the offsets of ``archive`` batches that this acquisition took
        (ACQUIRED under ``lock``, delivery count kept) or that are AVAILABLE become ARCHIVED,
        and leave the acquired ranges ``out``. Offsets acquired by an earlier acquisition are
        left to their holder (e.g. taken under read_uncommitted before the group's isolation
        level changed)."""
        start = self.start_offset
        last = self.end_offset - 1
        spans: list[list[int]] = []
        for b in batches:
            if not b.archive:
                continue
            a = b.base_offset if b.base_offset > start else start
            z = b.last_offset if b.last_offset < last else last
            if a > z:
                continue
            if spans and spans[-1][1] + 1 >= a:
                spans[-1][1] = z
            else:
                spans.append([a, z])
        if not spans:
            return out
        was_full = self.end_offset - start >= self.config.max_record_locks
        runs = self._runs
        for a, z in spans:
            i = self._split_at(a)
            j = self._split_at(z + 1)
            for k in range(i, j):
                r = runs[k]
                if r.state == _ACQUIRED and r.lock == lock:
                    self._unlock(r)
                    r.member = None
                    r.deadline = 0
                    r.lock = 0
                elif r.state != _AVAILABLE:
                    continue
                r.state = _ARCHIVED
                self._mark(r.first, r.last)
            self._coalesce(i, j - 1)
        if was_full:
            self._advance_start()
            if self.end_offset - self.start_offset < self.config.max_record_locks:
                self._wakeup = True
        return _subtract_spans(out, spans)

    # ------------------------------------------------------------------ acknowledge

    def acknowledge(self, member_id: str, batches: Sequence[AckBatch]) -> int:
        """Apply acknowledgements of ``member_id``; returns an ErrorCode (NONE on success).
        All batches are validated before any is applied."""
        start = self.start_offset
        end = self.end_offset
        runs = self._runs
        prev_last = -1
        for b in batches:
            f = b.first_offset
            la = b.last_offset
            if f < 0 or la < f or f <= prev_last:
                return ErrorCode.INVALID_REQUEST
            prev_last = la
            types = b.types
            nt = len(types)
            if nt == 1:
                t = types[0]
                if t < 0 or t > _MAX_ACK_TYPE:
                    return ErrorCode.INVALID_REQUEST
            elif nt == la - f + 1:
                if min(types) < 0 or max(types) > _MAX_ACK_TYPE:
                    return ErrorCode.INVALID_REQUEST
            else:
                return ErrorCode.INVALID_REQUEST
        for b in batches:
            la = b.last_offset
            if la < start:
                continue  # already done (Kafka skips these too)
            if not runs:
                return ErrorCode.INVALID_RECORD_STATE
            if la >= end:
                return ErrorCode.INVALID_REQUEST
            a = b.first_offset if b.first_offset > start else start
            i = bisect_right(runs, a, key=_first) - 1
            while i < len(runs):
                r = runs[i]
                if r.first > la:
                    break
                if r.state != _ACQUIRED or r.member != member_id:
                    return ErrorCode.INVALID_RECORD_STATE
                i += 1

        was_full = end - start >= self.config.max_record_locks
        renew_lock = 0
        renew_deadline = 0
        renew_lo = renew_hi = -1
        for b in batches:
            la = b.last_offset
            if la < start:
                continue
            f = b.first_offset if b.first_offset > start else start
            types = b.types
            if len(types) == 1:
                segments: Sequence[tuple[int, int, int]] = ((f, la, types[0]),)
            else:
                segments = _type_segments(b.first_offset, f, types)
            for a, z, t in segments:
                if t == _RENEW:
                    if not renew_lock:
                        renew_lock = next(self._lock_ids)
                        renew_deadline = self._clock() + self.config.record_lock_duration_ms
                        self._locks[renew_lock] = 0
                        renew_lo = a
                    renew_hi = z
                    self._renew(a, z, renew_lock, renew_deadline)
                else:
                    self._settle(a, z, t)
        if renew_lock:
            self._push_lock(renew_deadline, renew_lock, renew_lo, renew_hi)
        self._advance_start()
        if was_full and self.end_offset - self.start_offset < self.config.max_record_locks:
            self._wakeup = True
        return ErrorCode.NONE

    def _settle(self, a: int, z: int, ack_type: int) -> None:
        """ACCEPT/RELEASE/REJECT/GAP of ``a..z``, all ACQUIRED by the acknowledging member."""
        runs = self._runs
        i = self._split_at(a)
        j = self._split_at(z + 1)
        limit = self.config.delivery_count_limit
        for k in range(i, j):
            r = runs[k]
            self._unlock(r)
            if ack_type == _ACCEPT:
                r.state = _ACKNOWLEDGED
            elif ack_type == _RELEASE and r.count < limit:
                r.state = _AVAILABLE
                self._became_available(r.first)
            else:  # REJECT, GAP, or RELEASE at the delivery-count limit
                r.state = _ARCHIVED
            r.member = None
            r.deadline = 0
            r.lock = 0
        self._mark(a, z)
        self._coalesce(i, j - 1)

    def _renew(self, a: int, z: int, lock: int, deadline: int) -> None:
        """RENEW (KIP-1222): move ``a..z`` to a new lock; the persisted form does not change."""
        runs = self._runs
        i = self._split_at(a)
        j = self._split_at(z + 1)
        locks = self._locks
        for k in range(i, j):
            r = runs[k]
            n = self._unlock(r)
            locks[lock] += n
            r.lock = lock
            r.deadline = deadline
        self._coalesce(i, j - 1)

    # ------------------------------------------------------------------ release / timers

    def release_member(self, member_id: str) -> int:
        """The member left, was fenced or closed its share session: its ACQUIRED records become
        AVAILABLE with the delivery count kept, or ARCHIVED at the limit (Kafka 4.2,
        KAFKA-19972; 4.0/4.1 decremented the count, which let a crashing consumer loop on a
        poison record). Returns the number of offsets released."""
        runs = self._runs
        limit = self.config.delivery_count_limit
        released = 0
        for r in runs:
            if r.state != _ACQUIRED or r.member != member_id:
                continue
            released += self._unlock(r)
            self._expire_run(r, limit)
        if released:
            self._coalesce(0, len(runs) - 1)
            self._advance_start()
        return released

    def on_timer(self, now_ms: int) -> None:
        """Expire acquisition locks whose deadline is <= ``now_ms``."""
        heap = self._heap
        locks = self._locks
        runs = self._runs
        limit = self.config.delivery_count_limit
        expired = False
        while heap and heap[0][0] <= now_ms:
            _deadline, lock, first, last = heapq.heappop(heap)
            if lock not in locks:
                continue
            i = bisect_right(runs, first, key=_first) - 1
            if i < 0:
                i = 0
            lo = i
            while i < len(runs):
                r = runs[i]
                if r.first > last:
                    break
                if r.state == _ACQUIRED and r.lock == lock:
                    self._expire_run(r, limit)
                i += 1
            locks.pop(lock, None)
            self._coalesce(lo, i - 1)
            expired = True
        if expired:
            self._advance_start()

    def _expire_run(self, r: _Run, limit: int) -> None:
        """ACQUIRED -> AVAILABLE (count kept) or ARCHIVED at the limit; lock counts are the
        caller's business."""
        r.member = None
        r.deadline = 0
        r.lock = 0
        if r.count >= limit:
            r.state = _ARCHIVED
            self._mark(r.first, r.last)
        else:
            # Persisted form unchanged (ACQUIRED is persisted as AVAILABLE): no delta.
            r.state = _AVAILABLE
            self._became_available(r.first)

    # ------------------------------------------------------------------ admin

    def reset_start_offset(self, offset: int) -> int:
        """AlterShareGroupOffsets / share.auto.offset.reset re-initialisation: drop the window
        and start at ``offset``. NON_EMPTY_GROUP while anything is ACQUIRED."""
        if offset < 0:
            return ErrorCode.INVALID_REQUEST
        if any(r.state == _ACQUIRED for r in self._runs):
            return ErrorCode.NON_EMPTY_GROUP
        self._runs.clear()
        self._heap.clear()
        self._locks.clear()
        self._dirty.clear()
        self.start_offset = self.end_offset = offset
        self._nfo_hint = offset
        self.state_epoch += 1  # the next drain_delta() is a full snapshot
        self._wakeup = True
        return ErrorCode.NONE

    def on_log_start_offset(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start: records before it are gone."""
        if log_start_offset <= self.start_offset:
            return
        was_full = self.end_offset - self.start_offset >= self.config.max_record_locks
        runs = self._runs
        if runs:
            j = self._split_at(log_start_offset)
            for k in range(j):
                if runs[k].state == _ACQUIRED:
                    self._unlock(runs[k])
            del runs[:j]
        self.start_offset = log_start_offset
        if self.end_offset < log_start_offset:
            self.end_offset = log_start_offset
        self._advance_start()
        if was_full and self.end_offset - self.start_offset < self.config.max_record_locks:
            self._wakeup = True

    # ------------------------------------------------------------------ persistence

    def state(self) -> SharePartitionState:
        """Full snapshot (persisted form); also resets delta tracking."""
        self._dirty.clear()
        self._persisted_start = self.start_offset
        self._persisted_epoch = self.state_epoch
        return SharePartitionState(self.start_offset, self.state_epoch,
                          tuple(_persisted_batches(self._runs, self.start_offset,
                                                   self.end_offset - 1, keep_untouched=False)))

    def drain_delta(self) -> SharePartitionState | None:
        """Changes since the last ``state()``/``drain_delta()``: the current SPSO and the
        persisted form of every changed range (None if nothing changed). After a
        ``reset_start_offset`` this is a full snapshot with the new ``state_epoch``."""
        if self.state_epoch != self._persisted_epoch:
            return self.state()
        dirty = self._dirty
        start = self.start_offset
        if not dirty and start == self._persisted_start:
            return None
        out: list[StateBatch] = []
        last = self.end_offset - 1
        for a, z in _merge_intervals(dirty):
            if a < start:
                a = start
            if z > last:
                z = last
            if a > z:
                continue
            for sb in _persisted_batches(self._runs, a, z, keep_untouched=True):
                if out and _same_batch(out[-1], sb) and out[-1].last_offset + 1 == sb.first_offset:
                    out[-1] = StateBatch(out[-1].first_offset, sb.last_offset,
                                         sb.delivery_state, sb.delivery_count)
                else:
                    out.append(sb)
        dirty.clear()
        if not out and start == self._persisted_start:
            return None
        self._persisted_start = start
        return SharePartitionState(start, self.state_epoch, tuple(out))

    # ------------------------------------------------------------------ internals

    def _unlock(self, r: _Run) -> int:
        """Take the ACQUIRED run ``r``'s offsets off its lock's count (the lock is forgotten when
        none are left, so its heap entry goes stale); returns how many offsets ``r`` holds."""
        n = r.last - r.first + 1
        locks = self._locks
        left = locks[r.lock] - n
        if left:
            locks[r.lock] = left
        else:
            del locks[r.lock]
        return n

    def _mark(self, a: int, z: int) -> None:
        """Record that the persisted form of ``a..z`` may have changed."""
        dirty = self._dirty
        if dirty:
            pa, pz = dirty[-1]
            if a <= pz + 1 and z >= pa - 1:
                dirty[-1] = (pa if pa < a else a, pz if pz > z else z)
                return
        dirty.append((a, z))
        if len(dirty) > 2 * len(self._runs) + 64:
            # Bound the list for a partition whose deltas are never drained.
            start = self.start_offset
            self._dirty = [(max(x, start), y) for x, y in _merge_intervals(dirty) if y >= start]

    def _push_lock(self, deadline: int, lock: int, first: int, last: int) -> None:
        heap = self._heap
        heapq.heappush(heap, (deadline, lock, first, last))
        if len(heap) > 2 * len(self._locks) + 64:
            # Entries of locks nobody holds any more (acknowledged early) pile up below a
            # long-held lock at the top; rebuild without them (amortised O(1) per push).
            locks = self._locks
            self._heap = [e for e in heap if e[1] in locks]
            heapq.heapify(self._heap)

    def _became_available(self, offset: int) -> None:
        self._wakeup = True
        if offset < self._nfo_hint:
            self._nfo_hint = offset

    def _split(self, i: int, offset: int) -> int:
        """Split run ``i`` so that a run starts at ``offset`` (inside it); returns its index."""
        r = self._runs[i]
        assert r.first < offset <= r.last, (r.first, r.last, offset)  # a split inside the run
        self._runs.insert(i + 1, _Run(offset, r.last, r.state, r.count, r.member, r.deadline,
                                      r.lock))
        r.last = offset - 1
        return i + 1

    def _split_at(self, offset: int) -> int:
        """Index of the run starting at ``offset`` after splitting (len(runs) at/after SPEO)."""
        runs = self._runs
        if offset >= self.end_offset:
            return len(runs)
        i = bisect_right(runs, offset, key=_first) - 1
        if i < 0:
            return 0
        if runs[i].first == offset:
            return i
        return self._split(i, offset)

    def _set_range_state(self, i: int, a: int, b: int, state: int) -> int:
        """Set ``a..b`` inside the non-ACQUIRED run ``i`` to ``state``; returns its index."""
        r = self._runs[i]
        # Acquired records change state only through their lock's owner (acknowledge, release,
        # expiry), never by a range update; and the range lies inside the run.
        assert r.state != _ACQUIRED and r.first <= a <= b <= r.last, (r, a, b)
        if a > r.first:
            i = self._split(i, a)
            r = self._runs[i]
        if b < r.last:
            self._split(i, b + 1)
        r.state = state
        self._mark(a, b)
        return i

    def _archive_available(self, a: int, z: int) -> None:
        """Archive the AVAILABLE offsets of ``a..z`` (records compaction removed)."""
        if a < self.start_offset:
            a = self.start_offset
        if z >= self.end_offset:
            z = self.end_offset - 1
        if a > z:
            return
        runs = self._runs
        i = self._split_at(a)
        j = self._split_at(z + 1)
        for k in range(i, j):
            r = runs[k]
            if r.state == _AVAILABLE:
                r.state = _ARCHIVED
                self._mark(r.first, r.last)
        self._coalesce(i, j - 1)

    def _coalesce(self, lo: int, hi: int) -> None:
        """Merge equal neighbours among runs ``lo-1 .. hi+1``."""
        runs = self._runs
        if not runs:
            return
        lo = lo - 1 if lo > 0 else 0
        hi = hi + 1 if hi + 1 < len(runs) else len(runs) - 1
        w = lo
        p = runs[lo]
        for i in range(lo + 1, hi + 1):
            r = runs[i]
            if (r.state == p.state and r.count == p.count and r.lock == p.lock
                    and r.member == p.member):
                p.last = r.last
            else:
                w += 1
                runs[w] = r
                p = r
        if w < hi:
            del runs[w + 1:hi + 1]

    def _advance_start(self) -> None:
        """Move SPSO over the leading ACKNOWLEDGED/ARCHIVED runs and forget them."""
        runs = self._runs
        n = 0
        for r in runs:
            if r.state == _ACKNOWLEDGED or r.state == _ARCHIVED:
                n += 1
            else:
                break
        if n:
            self.start_offset = runs[n - 1].last + 1
            del runs[:n]


def _subtract_spans(ranges: list[list[int]], spans: list[list[int]]) -> list[list[int]]:
    """``ranges`` ([first, last, delivery count], ascending) without the offsets of ``spans``
    ([first, last], ascending, disjoint)."""
    out: list[list[int]] = []
    j = 0
    ns = len(spans)
    for f, la, c in ranges:
        while j < ns and spans[j][1] < f:
            j += 1
        cur = f
        k = j
        while k < ns and spans[k][0] <= la:
            a, z = spans[k]
            if a > cur:
                out.append([cur, a - 1, c])
            if z + 1 > cur:
                cur = z + 1
            k += 1
        if cur <= la:
            out.append([cur, la, c])
    return out


def _type_segments(batch_first: int, a: int, types: Sequence[int]) -> list[tuple[int, int, int]]:
    """Per-offset acknowledge types from offset ``a`` on, grouped into runs of one type."""
    out: list[tuple[int, int, int]] = []
    off = a
    for t, grp in itertools.groupby(types[a - batch_first:]):
        n = sum(1 for _ in grp)
        out.append((off, off + n - 1, t))
        off += n
    return out


def _persisted_batches(runs: list[_Run], a: int, z: int, *, keep_untouched: bool) -> list[StateBatch]:
    """Persisted form of ``a..z``: ACQUIRED is written as AVAILABLE with its count; equal
    neighbours merged. AVAILABLE with count 0 (never delivered) is left out of snapshots and
    written explicitly in deltas, where it erases older batches."""
    out: list[StateBatch] = []
    if a > z or not runs:
        return out
    i = bisect_right(runs, a, key=_first) - 1
    if i < 0:
        i = 0
    pf = pl = ps = pc = -1
    for k in range(i, len(runs)):
        r = runs[k]
        if r.first > z:
            break
        f = r.first if r.first > a else a
        la = r.last if r.last < z else z
        if f > la:
            continue
        st = _AVAILABLE if r.state == _ACQUIRED else r.state
        c = r.count
        if pf >= 0 and st == ps and c == pc and pl + 1 == f:
            pl = la
            continue
        if pf >= 0 and (keep_untouched or ps != _AVAILABLE or pc != 0):
            out.append(StateBatch(pf, pl, ps, pc))
        pf, pl, ps, pc = f, la, st, c
    if pf >= 0 and (keep_untouched or ps != _AVAILABLE or pc != 0):
        out.append(StateBatch(pf, pl, ps, pc))
    return out


def _merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, z in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            if z > out[-1][1]:
                out[-1] = (out[-1][0], z)
        else:
            out.append((a, z))
    return out


def _same_batch(x: StateBatch, y: StateBatch) -> bool:
    return x.delivery_state == y.delivery_state and x.delivery_count == y.delivery_count


def _sorted_disjoint(batches: Sequence[StateBatch]) -> list[StateBatch]:
    """Sort; where batches overlap, the later one in the input wins (overlay order)."""
    if all(batches[k].last_offset < batches[k + 1].first_offset for k in range(len(batches) - 1)):
        return list(batches)
    out: list[StateBatch] = []
    for b in batches:
        out = _overlay(out, [b])
    return out


def _canonical(start: int, batches: Sequence[StateBatch]) -> list[StateBatch]:
    """Sorted, disjoint batches -> canonical persisted form: clipped to >= ``start``, no
    never-delivered (AVAILABLE, count 0) ranges, ACQUIRED as AVAILABLE, unknown states as
    AVAILABLE (redelivering is the safe reading of a state we do not know), equal neighbours
    merged."""
    out: list[StateBatch] = []
    for b in batches:
        if b.last_offset < start:
            continue
        f = b.first_offset if b.first_offset >= start else start
        st = b.delivery_state if b.delivery_state in _PERSISTED_STATES else _AVAILABLE
        c = b.delivery_count
        if st == _AVAILABLE and c <= 0:
            continue
        if out and out[-1].last_offset + 1 == f and out[-1].delivery_state == st \
                and out[-1].delivery_count == c:
            out[-1] = StateBatch(out[-1].first_offset, b.last_offset, st, c)
        else:
            out.append(StateBatch(f, b.last_offset, st, c))
    return out


def _overlay(old: Sequence[StateBatch], new: Sequence[StateBatch]) -> list[StateBatch]:
    """Both sorted and disjoint; offsets in ``new`` replace those in ``old``."""
    out: list[StateBatch] = []
    j = 0
    nn = len(new)
    for o in old:
        cur = o.first_offset
        while j < nn and new[j].last_offset < cur:
            j += 1
        k = j
        while cur <= o.last_offset:
            if k < nn and new[k].first_offset <= o.last_offset:
                nb = new[k]
                if nb.first_offset > cur:
                    out.append(StateBatch(cur, nb.first_offset - 1, o.delivery_state,
                                          o.delivery_count))
                if nb.last_offset + 1 > cur:
                    cur = nb.last_offset + 1
                k += 1
            else:
                out.append(StateBatch(cur, o.last_offset, o.delivery_state, o.delivery_count))
                break
    out.extend(new)
    out.sort(key=_sb_first)
    return out


def apply_delta(state: SharePartitionState, delta: SharePartitionState) -> SharePartitionState:
    """Replay one delta onto a state: the delta's SPSO, its batches overlaid on the older ones,
    batches before SPSO dropped, equal neighbours merged. A delta with a newer ``state_epoch``
    is a re-initialisation and replaces the state; one with an older epoch is stale and
    ignored."""
    if delta.state_epoch < state.state_epoch:
        return state
    start = delta.start_offset
    new = _sorted_disjoint(delta.batches)
    if delta.state_epoch > state.state_epoch:
        merged = new
    else:
        merged = _overlay(_sorted_disjoint(state.batches), new)
    return SharePartitionState(start, delta.state_epoch, tuple(_canonical(start, merged)))
