"""Hypothesis state machine: random appends, reads, restarts (clean and crash), torn
tails, truncations and DeleteRecords against a simple in-memory model of the log."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from snakka.records import iter_records, parse_header
from snakka.storage import LogConfig, OffsetOutOfRangeError, UnifiedLog

from .helpers import Clock, batch


class PartitionLogMachine(RuleBasedStateMachine):
    @initialize(
        segment_bytes=st.integers(150, 1200),
        interval=st.integers(0, 400),
    )
    def setup(self, segment_bytes, interval):
        self.tmp = tempfile.mkdtemp(prefix="snakka-sm-")
        self.path = os.path.join(self.tmp, "t-0")
        self.cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval)
        self.clock = Clock()
        self.log = UnifiedLog(self.path, self.cfg, recover=False, time_ms=self.clock)
        self.batches: list[tuple[int, list[bytes]]] = []  # (base offset, values)
        self.start = 0
        self.end = 0
        self.counter = 0

    def teardown(self):
        if hasattr(self, "log") and not self.log.closed:
            self.log.close()
        if hasattr(self, "tmp"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------ model helpers

    @property
    def leo(self) -> int:
        return self.end

    def model_records(self) -> list[tuple[int, bytes]]:
        return [(b + i, v) for b, vals in self.batches for i, v in enumerate(vals) if b + i >= self.start]

    # ------------------------------------------------------------ rules

    @rule(n=st.integers(1, 6), size=st.integers(1, 60))
    def append(self, n, size):
        self.counter += 1
        buf = batch(n, value_size=size, tag=f"{self.counter}:")
        values = [r.value for r in iter_records(bytes(buf))]
        r = self.log.append(buf, self.log.validate(buf))
        assert r.base_offset == self.leo and r.last_offset == self.leo + n - 1
        self.batches.append((r.base_offset, values))
        self.end += n

    @rule(data=st.data(), max_bytes=st.integers(0, 2000))
    def read(self, data, max_bytes):
        off = data.draw(st.integers(self.start, self.leo))
        got = bytes(self.log.read(off, max_bytes))
        if off == self.leo:
            assert got == b""
            return
        pos, bases = 0, []
        while pos < len(got):
            h = parse_header(got, pos)
            bases.append(h.base_offset)
            pos += h.size
        assert pos == len(got), "partial batch returned"
        assert bases, "nothing returned below the log end"
        model_bases = [b for b, _ in self.batches]
        first = max(i for i, b in enumerate(model_bases) if b <= off)
        assert bases == model_bases[first : first + len(bases)]
        assert len(bases) == 1 or len(got) <= max_bytes
        recs = [(r.offset, r.value) for r in iter_records(got)]
        expect = [(b + i, v) for b, vals in self.batches[first : first + len(bases)] for i, v in enumerate(vals)]
        assert recs == expect

    @rule()
    def clean_restart(self):
        self.log.close()
        self.log = UnifiedLog(
            self.path, self.cfg, recover=False, time_ms=self.clock, log_start_offset=self.start
        )

    @rule()
    def crash_restart(self):
        rp = self.log.recovery_point
        self._crash()
        self._reopen_after_crash(rp)

    @precondition(lambda self: self.batches and self.batches[-1][0] >= self.log.active_segment.base_offset)
    @rule(data=st.data())
    def torn_tail_crash(self, data):
        """kill -9 in the middle of writing the last batch."""
        active = self.log.active_segment
        size = active.size
        # find where the last batch starts: walk the active segment
        pos, last_pos = 0, 0
        raw = active.read(0, size)
        while pos < size:
            last_pos = pos
            pos += parse_header(raw, pos).size
        cut = data.draw(st.integers(1, size - last_pos - 1))
        path = active.path
        rp = min(self.log.recovery_point, self.batches[-1][0])
        self._crash()
        os.truncate(path, size - cut)
        self.end = self.batches.pop()[0]
        if self.start > self.end:
            # DeleteRecords had moved the start past what survived: the log restarts
            # empty at the checkpointed start (see LogLoader.load)
            self.batches, self.end = [], self.start
        self._reopen_after_crash(rp)

    @rule(data=st.data())
    def truncate_to(self, data):
        off = data.draw(st.integers(self.start, self.leo))
        whole = off <= self.log.segments[0].base_offset
        self.log.truncate_to(off)
        if off >= self.end:
            return
        if whole:  # everything goes; the log restarts at off
            self.batches, self.end, self.start = [], off, off
            return
        removed = [b for b, v in self.batches if b + len(v) - 1 >= off]
        self.batches = [(b, v) for b, v in self.batches if b + len(v) - 1 < off]
        self.end = removed[0]
        self.start = min(self.start, self.end)

    @rule(data=st.data())
    def delete_records(self, data):
        off = data.draw(st.integers(0, self.leo + 2))
        if off > self.leo:
            try:
                self.log.delete_records_before(off)
            except OffsetOutOfRangeError:
                return
            raise AssertionError("beyond the high watermark must fail")
        self.log.delete_records_before(off)
        self.start = max(self.start, off)

    @rule()
    def flush(self):
        self.log.flush()
        assert self.log.recovery_point == self.leo

    # ------------------------------------------------------------ invariants

    @invariant()
    def offsets_match_model(self):
        if not hasattr(self, "log"):
            return
        assert self.log.log_end_offset == self.leo
        assert self.log.log_start_offset == self.start
        segs = self.log.segments
        assert all(a.next_offset <= b.base_offset for a, b in zip(segs, segs[1:], strict=False))
        assert segs[-1].next_offset == self.leo

    @invariant()
    def reading_everything_matches_model(self):
        if not hasattr(self, "log"):
            return
        got, off = [], self.start
        while off < self.leo:
            recs = [(r.offset, r.value) for r in iter_records(bytes(self.log.read(off, 700))) if r.offset >= off]
            assert recs
            got += recs
            off = recs[-1][0] + 1
        assert got == self.model_records()

    def _reopen_after_crash(self, recovery_point: int) -> None:
        self.log = UnifiedLog(
            self.path,
            self.cfg,
            recover=True,
            time_ms=self.clock,
            recovery_point=recovery_point,
            log_start_offset=self.start,
        )

    def _crash(self):
        for seg in self.log.segments:
            seg.file.close()
            seg.closed = True
        self.log.local_log.closed = True


PartitionLogMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPartitionLogMachine = PartitionLogMachine.TestCase
