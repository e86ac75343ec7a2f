"""util.pacing: the byte-rate arithmetic behind tiered storage's copy quota and the log
cleaner's throttle."""

from __future__ import annotations

import pytest

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
