"""util.pacing: the byte-rate arithmetic behind tiered storage's copy quota and the log
cleaner's throttle."""

from __future__ import annotations

import pytest

from snakka.limits import INT64_MAX
from snakka.util.pacing import BytePacer


def test_calls_are_spaced_by_the_rate_with_no_burst_beyond_one_call():
    p = BytePacer(1000)
    assert p.delay(500, now=10.0) == 0.0  # fits at once; the next 500 B may start at 10.5
    assert p.delay(500, now=10.0) == pytest.approx(0.5)
    assert p.delay(1000, now=10.2) == pytest.approx(0.8)  # after the 1000 B reserved before it
    assert p.delay(100, now=20.0) == 0.0  # idle time is not saved up as credit
    assert p.delay(100, now=20.0) == pytest.approx(0.1)


def test_kafkas_unlimited_defaults_never_wait():
    for rate in (2**63 - 1, 1.7976931348623157e308):
        p = BytePacer(rate)
        assert p.unlimited and p.delay(1 << 40, now=0.0) == 0.0
    assert BytePacer(1).delay(0, now=0.0) == 0.0


def test_a_new_rate_pays_off_what_is_owed_at_that_rate():
    p = BytePacer(1000)
    assert p.delay(10_000, 0.0) == 0.0  # goes at once, owes 10 s at 1,000 B/s
    assert p.wait_s(2.0) == 8.0
    p.set_rate(4000, 2.0)  # the 8 s still owed (8,000 B) take 2 s at the new rate
    assert p.wait_s(2.0) == 2.0
    assert p.delay(4000, 2.0) == 2.0  # and the next caller's own bytes follow at the new rate
    assert p.wait_s(2.0) == 3.0
    p.set_rate(float(INT64_MAX), 2.5)  # unlimited: nothing owed
    assert p.wait_s(2.5) == 0.0 and p.delay(10**9, 2.5) == 0.0
    p.set_rate(100, 3.0)  # limited again: starts from no debt
    assert p.wait_s(3.0) == 0.0


def test_copy_quota_wakes_a_waiting_copy_when_the_rate_changes():
    import asyncio

    from snakka.remote.manager import _RateLimit

    async def go() -> None:
        rl = _RateLimit(1000)
        await rl.acquire(1_000_000)  # at once; the next copy would wait ~1,000 s
        waiting = asyncio.ensure_future(rl.acquire(1_000))
        await asyncio.sleep(0)
        assert not waiting.done()
        rl.set_rate(10**12)
        await asyncio.wait_for(waiting, 30)  # woken, and the debt is now ~1 us

    asyncio.run(go())
