"""Stateful property test of the share-partition core against a per-record reference model.

Hypothesis drives one ``SharePartition`` with three members and a fake clock through random
fetches (both acquire modes), acknowledgements (valid and invalid), lock expiry, member
departures, log-start movement, offset resets, persistence (deltas, snapshots) and broker
restarts. A naive shadow model keeps one entry per offset and applies the rules directly; after
every step the core's window must equal the model's, and:

* no offset is ACQUIRED by two members (an acquire only returns AVAILABLE or new offsets);
* every offset before SPSO is done (the model only moves its SPSO over ACKNOWLEDGED/ARCHIVED);
* delivery counts never decrease (except through an AlterShareGroupOffsets reset);
* no record is delivered more than ``delivery_count_limit`` times, restarts included;
* snapshot + ``drain_delta()`` deltas replayed with ``apply_delta`` equal ``state()``;
* ``next_deadline()`` is the earliest lock deadline, and the lock bookkeeping adds up.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from snakka.protocol.errors import ErrorCode
from snakka.protocol.share import AckBatch, AcquireMode
from snakka.share.partition import SharePartition, apply_delta
from snakka.share.types import FetchedBatch, RecordState, SharePartitionConfig, SharePartitionState

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (int(RecordState.AVAILABLE),
                                               int(RecordState.ACQUIRED),
                                               int(RecordState.ACKNOWLEDGED),
                                               int(RecordState.ARCHIVED))
TERMINAL = (ACKNOWLEDGED, ARCHIVED)
GAP, ACCEPT, RELEASE, REJECT, RENEW = range(5)
MEMBERS = ("m0", "m1", "m2")
LOG_END = 199      # last offset of the (fixed) log
B = 5              # records per log batch
LOCK_MS = 1_000
LIMIT = 3
MAX_LOCKS = 60
CONFIG = SharePartitionConfig(record_lock_duration_ms=LOCK_MS, delivery_count_limit=LIMIT,
                              max_record_locks=MAX_LOCKS)


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Shadow:
    """One entry per offset of [start, end): [state, count, member, deadline]."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.end = start
        self.recs: dict[int, list] = {}

    def advance(self) -> None:
        while self.start < self.end and self.recs[self.start][0] in TERMINAL:
            del self.recs[self.start]
            self.start += 1

    def expire(self, o: int) -> None:
        r = self.recs[o]
        r[0] = AVAILABLE if r[1] < LIMIT else ARCHIVED
        r[2] = None
        r[3] = 0

    def owned(self, member: str) -> list[int]:
        return sorted(o for o, r in self.recs.items() if r[0] == ACQUIRED and r[2] == member)

    def expected_ack(self, member: str, batches: list[AckBatch]) -> int:
        prev = -1
        for b in batches:
            n = b.last_offset - b.first_offset + 1
            if b.first_offset < 0 or n <= 0 or b.first_offset <= prev:
                return ErrorCode.INVALID_REQUEST
            prev = b.last_offset
            if len(b.types) not in (1, n) or any(t < 0 or t > 4 for t in b.types):
                return ErrorCode.INVALID_REQUEST
        for b in batches:
            if b.last_offset < self.start:
                continue
            if self.start == self.end:
                return ErrorCode.INVALID_RECORD_STATE
            if b.last_offset >= self.end:
                return ErrorCode.INVALID_REQUEST
            for o in range(max(b.first_offset, self.start), b.last_offset + 1):
                r = self.recs[o]
                if r[0] != ACQUIRED or r[2] != member:
                    return ErrorCode.INVALID_RECORD_STATE
        return ErrorCode.NONE


def core_window(sp: SharePartition) -> dict[int, tuple]:
    out = {}
    for r in sp._runs:
        for o in range(r.first, r.last + 1):
            out[o] = (r.state, r.count, r.member, r.deadline if r.state == ACQUIRED else 0)
    return out


class ShareMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.sp = SharePartition("g", uuid.UUID(int=7), 0, CONFIG, self.clock, SharePartitionState(0))
        self.shadow = Shadow(0)
        self.replayed = self.sp.state()
        self.high_count: dict[int, int] = {}
        self.deliveries: dict[int, int] = {}

    # ------------------------------------------------------------------ operations

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 40),
          n_batches=st.integers(1, 8), record_limit=st.booleans(),
          batch_size=st.integers(1, 30), stale=st.one_of(st.none(), st.integers(-6, 6)))
    def fetch(self, member, max_records, n_batches, record_limit, batch_size, stale):
        """The shell reads the log from next_fetch_offset() and acquires; ``stale`` reads from
        elsewhere instead, like a read that raced with a release or expiry."""
        sp, sh = self.sp, self.shadow
        nfo = sp.next_fetch_offset()
        avail = [o for o, r in sh.recs.items() if r[0] == AVAILABLE]
        assert nfo == (min(avail) if avail else sh.end)
        if stale is not None:
            nfo = max(0, nfo + stale)
        if nfo > LOG_END:
            return
        base = nfo - nfo % B
        batches = [FetchedBatch(b, min(b + B - 1, LOG_END))
                   for b in range(base, min(base + n_batches * B, LOG_END + 1), B)]
        mode = AcquireMode.RECORD_LIMIT if record_limit else AcquireMode.BATCH_OPTIMIZED
        got = sp.acquire(member, batches, max_records=max_records, batch_size=batch_size,
                         mode=mode)
        lo = max(batches[0].base_offset, sh.start)
        hi = batches[-1].last_offset
        # Kafka's record-lock cap: min(MaxRecords, cap - in-flight) for re-acquired and new
        # records together; a window at the cap only hands out what it holds.
        in_flight = sh.end - sh.start
        quota = min(max_records, MAX_LOCKS - in_flight)
        if quota <= 0:
            quota = max(0, min(max_records, sh.end - lo))
            hi = min(hi, sh.end - 1)
        prev = -1
        taken: list[tuple[int, int]] = []
        for r in got:
            assert prev < r.first_offset <= r.last_offset
            prev = r.last_offset
            assert 1 <= r.delivery_count <= LIMIT
            for o in range(r.first_offset, r.last_offset + 1):
                assert lo <= o <= hi
                if o < sh.end:
                    rec = sh.recs[o]
                    assert rec[0] == AVAILABLE, (o, rec)  # never two owners
                    assert rec[1] + 1 == r.delivery_count
                else:
                    assert r.delivery_count == 1
                taken.append((o, r.delivery_count))
        n = len(taken)
        assert n <= max(0, quota) + (0 if record_limit else B - 1)
        new = [o for o, _ in taken if o >= sh.end]
        first_new = max(lo, sh.end)
        empty = sh.start == sh.end
        gap = first_new - sh.end if new and not empty else 0
        if new:
            assert new == list(range(first_new, first_new + len(new)))
            if first_new > sh.end:
                # The log has nothing at end..first_new-1 (compaction): done, or SPSO jumps.
                if empty:
                    sh.start = sh.end = first_new
                else:
                    for o in range(sh.end, first_new):
                        sh.recs[o] = [ARCHIVED, 0, None, 0]
                    sh.end = first_new
        acquirable = any(sh.recs[o][0] == AVAILABLE for o in range(lo, min(hi, sh.end - 1) + 1))
        if hi >= first_new and quota > 0:
            acquirable = True
        assert bool(got) == acquirable
        if taken:
            event(f"acquired delivery count {max(c for _, c in taken)}")
        deadline = self.clock.now + LOCK_MS
        for o, c in taken:
            sh.recs[o] = [ACQUIRED, c, member, deadline]
            self.deliveries[o] = self.deliveries.get(o, 0) + 1
            assert self.deliveries[o] <= LIMIT
        if new:
            sh.end = new[-1] + 1
            if record_limit and new[-1] < hi:
                # Cut inside a log batch: the rest of it joins the window, never delivered.
                rest_end = min(hi, new[-1] - new[-1] % B + B - 1)
                for o in range(new[-1] + 1, rest_end + 1):
                    sh.recs[o] = [AVAILABLE, 0, None, 0]
                if rest_end > new[-1]:
                    event("record_limit left the rest of a log batch AVAILABLE")
                sh.end = max(sh.end, rest_end + 1)
        # The window may pass the cap only by the rest of one log batch (plus offsets a stale
        # read skipped, which are archived: records compaction removed).
        assert sh.end - sh.start <= max(MAX_LOCKS + B - 1 + gap, in_flight)
        sh.advance()

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge(self, member, data):
        sh = self.shadow
        owned = sh.owned(member)
        batches = []
        if owned and data.draw(st.integers(0, 9), label="mode") > 0:
            # Mostly valid: ranges inside runs of offsets this member holds.
            cursor = data.draw(st.sampled_from(owned), label="from")
            for _ in range(data.draw(st.integers(1, 3), label="k")):
                nxt = [o for o in owned if o >= cursor]
                if not nxt:
                    break
                first = nxt[0]
                run = 1
                while first + run in sh.recs and sh.recs[first + run][0] == ACQUIRED \
                        and sh.recs[first + run][2] == member:
                    run += 1
                length = data.draw(st.integers(1, run), label="len")
                batches.append(self._ack_batch(data, first, length))
                cursor = first + length + data.draw(st.integers(0, 3), label="skip")
        else:
            cursor = data.draw(st.integers(max(0, sh.start - 6), sh.end + 6), label="at")
            for _ in range(data.draw(st.integers(1, 3), label="k")):
                length = data.draw(st.integers(1, 12), label="len")
                batches.append(self._ack_batch(data, cursor, length))
                cursor += length + data.draw(st.integers(-2, 3), label="skip")
        expected = sh.expected_ack(member, batches)
        event(f"ack -> {ErrorCode(expected).name}")
        assert self.sp.acknowledge(member, batches) == expected
        if expected != ErrorCode.NONE:
            return
        now = self.clock.now
        for b in batches:
            for o in range(max(b.first_offset, sh.start), b.last_offset + 1):
                t = b.types[0] if len(b.types) == 1 else b.types[o - b.first_offset]
                r = sh.recs[o]
                if t == RENEW:
                    r[3] = now + LOCK_MS
                    continue
                if t == ACCEPT:
                    r[0] = ACKNOWLEDGED
                elif t == RELEASE and r[1] < LIMIT:
                    r[0] = AVAILABLE
                else:
                    r[0] = ARCHIVED
                r[2] = None
                r[3] = 0
        sh.advance()

    @rule(member=st.sampled_from(MEMBERS), ack_type=st.sampled_from([ACCEPT, RELEASE, RELEASE, REJECT]))
    def settle_everything(self, member, ack_type):
        """The member acknowledges all it holds with one type (what a consumer usually does)."""
        sh = self.shadow
        batches = []
        for o in sh.owned(member):
            if batches and batches[-1][1] + 1 == o:
                batches[-1][1] = o
            else:
                batches.append([o, o])
        acks = [AckBatch(a, z, (ack_type,)) for a, z in batches]
        assert self.sp.acknowledge(member, acks) == ErrorCode.NONE
        for a, z in batches:
            for o in range(a, z + 1):
                r = sh.recs[o]
                if ack_type == ACCEPT:
                    r[0] = ACKNOWLEDGED
                elif ack_type == RELEASE and r[1] < LIMIT:
                    r[0] = AVAILABLE
                else:
                    r[0] = ARCHIVED
                r[2] = None
                r[3] = 0
        sh.advance()

    def _ack_batch(self, data, first: int, length: int) -> AckBatch:
        kind = data.draw(st.integers(0, 24), label="types")
        if kind == 0:  # invalid type value
            return AckBatch(first, first + length - 1, (data.draw(st.sampled_from([5, -1])),))
        if kind == 1 and length > 1:  # wrong length
            return AckBatch(first, first + length - 1, (ACCEPT,) * (length - 1))
        if kind <= 8:
            types = tuple(data.draw(st.lists(st.integers(0, 4), min_size=length,
                                             max_size=length), label="per-offset"))
            return AckBatch(first, first + length - 1, types)
        weights = [GAP, ACCEPT, ACCEPT, ACCEPT, RELEASE, RELEASE, REJECT, RENEW]
        return AckBatch(first, first + length - 1, (data.draw(st.sampled_from(weights)),))

    @rule(dt=st.integers(0, 1_500))
    def tick(self, dt):
        sh = self.shadow
        self.clock.now += dt
        now = self.clock.now
        self.sp.on_timer(now)
        for o, r in sh.recs.items():
            if r[0] == ACQUIRED and r[3] <= now:
                sh.expire(o)
        sh.advance()

    @rule(member=st.sampled_from(MEMBERS))
    def member_leaves(self, member):
        sh = self.shadow
        owned = sh.owned(member)
        assert self.sp.release_member(member) == len(owned)
        for o in owned:
            sh.expire(o)
        sh.advance()

    @rule(k=st.integers(1, 15))
    def log_start_moves(self, k):
        sh = self.shadow
        lso = sh.start + k
        self.sp.on_log_start_offset(lso)
        for o in range(sh.start, min(lso, sh.end)):
            del sh.recs[o]
        sh.start = lso
        sh.end = max(sh.end, lso)
        sh.advance()

    @rule(offset=st.integers(0, LOG_END + 5))
    def reset(self, offset):
        sh = self.shadow
        code = self.sp.reset_start_offset(offset)
        if any(r[0] == ACQUIRED for r in sh.recs.values()):
            assert code == ErrorCode.NON_EMPTY_GROUP
            return
        assert code == ErrorCode.NONE
        self.shadow = Shadow(offset)
        self.high_count.clear()
        self.deliveries.clear()

    @rule()
    def drain(self):
        delta = self.sp.drain_delta()
        if delta is not None:
            self.replayed = apply_delta(self.replayed, delta)

    @rule()
    def snapshot(self):
        self.drain()
        snap = self.sp.state()
        assert self.replayed == snap
        self.replayed = snap
        assert self.sp.drain_delta() is None

    @rule()
    def restart(self):
        """Broker restart: a new core from snapshot + deltas; in-flight records come back."""
        self.drain()
        self.sp = SharePartition("g", uuid.UUID(int=7), 0, CONFIG, self.clock, self.replayed)
        sh = self.shadow
        for r in sh.recs.values():
            if r[0] == ACQUIRED or (r[0] == AVAILABLE and r[1] >= LIMIT):
                r[0] = AVAILABLE if r[1] < LIMIT else ARCHIVED
                r[2] = None
                r[3] = 0
        # Never-delivered records at the end of the window are not persisted: the reloaded
        # window ends before them.
        while sh.end > sh.start and sh.recs[sh.end - 1][:2] == [AVAILABLE, 0]:
            sh.end -= 1
            del sh.recs[sh.end]
        sh.advance()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def window_matches_the_model(self):
        sp, sh = self.sp, self.shadow
        assert (sp.start_offset, sp.end_offset) == (sh.start, sh.end)
        expected = {o: (r[0], r[1], r[2], r[3]) for o, r in sh.recs.items()}
        assert core_window(sp) == expected
        runs = sp._runs
        assert all(a.last + 1 == b.first for a, b in zip(runs, runs[1:], strict=False))
        assert not runs or runs[0].state not in TERMINAL

    @invariant()
    def counts_never_decrease_and_stay_within_the_limit(self):
        for o, r in self.shadow.recs.items():
            assert r[1] >= self.high_count.get(o, 0)
            self.high_count[o] = r[1]
            assert r[1] <= LIMIT
            if r[0] == AVAILABLE:
                assert r[1] < LIMIT

    @invariant()
    def lock_bookkeeping_adds_up(self):
        sp = self.sp
        held: dict[int, int] = {}
        for r in sp._runs:
            if r.state == ACQUIRED:
                held[r.lock] = held.get(r.lock, 0) + r.last - r.first + 1
        assert held == sp._locks
        deadlines = [r[3] for r in self.shadow.recs.values() if r[0] == ACQUIRED]
        assert sp.next_deadline() == (min(deadlines) if deadlines else None)

    @precondition(lambda self: True)
    @invariant()
    def counts_and_lag_are_consistent(self):
        sp, sh = self.sp, self.shadow
        counts = sp.in_flight_counts()
        for state in (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED):
            assert counts[RecordState(state)] == sum(1 for r in sh.recs.values() if r[0] == state)
        hwm = LOG_END + 1
        done = sum(1 for o, r in sh.recs.items() if r[0] in TERMINAL and o < hwm)
        assert sp.lag(hwm) == max(0, hwm - sh.start - done)


ShareMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSharePartitionStateful = ShareMachine.TestCase
