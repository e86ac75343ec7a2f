"""FlushScheduler: group commit in strict mode, due-log selection in background mode."""

from __future__ import annotations

import asyncio
import os
import threading

from snakka.storage import FlushScheduler, LogConfig, LogManager

from .helpers import Clock, append, batch


def test_strict_flush_through_group_commits(tmp_path):
    clock = Clock()
    lm = LogManager([str(tmp_path / "d")], LogConfig(), time_ms=clock)
    logs = [lm.get_or_create_log("t", i) for i in range(3)]
    gate = threading.Event()
    calls = []
    real = type(logs[0]).flush

    def slow_flush(self, up_to_offset=None):
        calls.append(self.name)
        gate.wait(5)  # the first fsync is "slow": everyone else queues up behind it
        return real(self, up_to_offset)

    async def main():
        sched = FlushScheduler(lm, strict=True)
        type(logs[0]).flush = slow_flush
        try:
            r = append(logs[0], batch(2))
            first = asyncio.create_task(sched.flush_through(logs[0], r.last_offset + 1))
            await asyncio.sleep(0)
            waiters = []
            for i in range(30):  # 30 produces arrive while the first fsync runs
                plog = logs[i % 3]
                r = append(plog, batch(1))
                waiters.append(asyncio.create_task(sched.flush_through(plog, r.last_offset + 1)))
            await asyncio.sleep(0)  # every waiter has registered
            gate.set()
            await asyncio.wait_for(asyncio.gather(first, *waiters), 5)
            for plog in logs:
                assert plog.recovery_point == plog.log_end_offset
            # round 1: log 0 alone; round 2: the three logs once each
            assert sched.fsync_rounds == 2
            assert len(calls) == 4
            # already durable: returns at once, no new round
            await sched.flush_through(logs[0], 1)
            assert sched.fsync_rounds == 2
        finally:
            type(logs[0]).flush = real
            await sched.close()

    asyncio.run(main())
    lm.close()


def test_background_due_logs_and_checkpoint(tmp_path):
    clock = Clock()
    lm = LogManager([str(tmp_path / "d")], LogConfig(), time_ms=clock)
    a = lm.get_or_create_log("a", 0)
    b = lm.get_or_create_log("b", 0, LogConfig(flush_messages=5))
    c = lm.get_or_create_log("c", 0, LogConfig(flush_ms=100))
    lm.get_or_create_log("idle", 0)
    sched = FlushScheduler(lm, interval_ms=1000)
    append(a, batch(1))
    append(b, batch(5))
    append(c, batch(1))
    assert sched.due_logs() == [b]
    clock.advance(100)
    assert sched.due_logs() == [b, c]
    clock.advance(900)
    assert sched.due_logs() == [a, b, c]

    async def main():
        assert await sched.flush_due() == 3
        assert sched.due_logs() == []
        await sched.close()

    asyncio.run(main())
    assert (a.recovery_point, b.recovery_point, c.recovery_point) == (1, 5, 1)
    cp = open(tmp_path / "d" / "recovery-point-offset-checkpoint").read().split("\n")
    assert "a 0 1" in cp and "b 0 5" in cp
    lm.close()


def test_on_append_flushes_when_flush_messages_reached(tmp_path):
    lm = LogManager([str(tmp_path / "d")], LogConfig(flush_messages=3), time_ms=Clock())
    plog = lm.get_or_create_log("t", 0)

    async def main():
        sched = FlushScheduler(lm)
        append(plog, batch(2))
        sched.on_append(plog)
        assert sched._urgent_task is None
        append(plog, batch(1))
        sched.on_append(plog)
        await sched._urgent_task
        assert plog.recovery_point == 3
        await sched.close()

    asyncio.run(main())
    lm.close()


def test_background_ticker_runs(tmp_path):
    lm = LogManager([str(tmp_path / "d")], LogConfig())
    plog = lm.get_or_create_log("t", 0)
    append(plog, batch(1))

    async def main():
        sched = FlushScheduler(lm, interval_ms=1)
        sched.start()
        for _ in range(500):
            if plog.recovery_point == 1:
                break
            await asyncio.sleep(0.002)
        await sched.close()

    asyncio.run(main())
    assert plog.recovery_point == 1
    lm.close()


def test_flush_thread_concurrent_with_appends_rolls_and_deletions(tmp_path):
    """The discipline of UnifiedLog: a worker thread flushing in a loop while the
    owner appends (rolling segments) and retention deletes segments under it."""
    from snakka.storage import UnifiedLog

    clock = Clock()
    plog = UnifiedLog(
        str(tmp_path / "t-0"),
        LogConfig(segment_bytes=400, index_interval_bytes=50, retention_bytes=2000, retention_ms=-1),
        recover=False,
        time_ms=clock,
    )
    stop = threading.Event()
    errors = []

    def flusher():
        try:
            while not stop.is_set():
                plog.flush()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(400):
            append(plog, batch(2))
            if i % 10 == 0:
                plog.enforce_retention(clock())
    finally:
        stop.set()
        t.join()
    assert not errors
    plog.flush()
    assert plog.local_log._pending_delete == []
    on_disk = sorted(n for n in os.listdir(tmp_path / "t-0") if n.endswith((".log", ".index", ".timeindex")))
    expected = sorted(
        f"{s.base_offset:020d}.{ext}" for s in plog.segments for ext in ("log", "index", "timeindex")
    )
    assert on_disk == expected  # no deleted segment's file came back, none is missing
    plog.close()
    again = UnifiedLog(str(tmp_path / "t-0"), plog.config, recover=True, time_ms=clock, log_start_offset=plog.log_start_offset)
    assert again.log_end_offset == 800
    again.close()
