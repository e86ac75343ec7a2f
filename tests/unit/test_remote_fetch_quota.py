"""remote/quota.py: the remote fetch quota's arithmetic (Kafka's RLMQuotaManager with a
SimpleRate, QuotaUtils.throttleTime)."""

from __future__ import annotations

from snakka.limits import INT64_MAX
from snakka.remote.quota import RemoteFetchQuota


def _quota(rate: int, clock: list[int]) -> RemoteFetchQuota:
    return RemoteFetchQuota(rate, num_samples=11, window_seconds=1, clock_ms=lambda: clock[0])


def test_within_the_quota_nothing_is_throttled():
    clock = [1_000]
    q = _quota(1000, clock)
    q.record(1000)  # 1,000 B over the minimum span of one window: 1,000 B/s, not above
    assert q.throttle_ms() == 0


def test_above_the_quota_the_throttle_time_is_kafkas():
    clock = [1_000]
    q = _quota(1000, clock)
    q.record(3000)
    # SimpleRate: 3,000 B over max(elapsed 0, one 1 s window) = 3,000 B/s;
    # (3000 - 1000) / 1000 x 1000 ms.
    assert q.throttle_ms() == 2000
    clock[0] += 1500  # the span is now 1.5 s: 2,000 B/s -> (2000 - 1000) / 1000 x 1500
    assert q.throttle_ms() == 1500
    clock[0] += 11_000  # the sample is older than the 11 windows: forgotten
    assert q.throttle_ms() == 0


def test_a_new_quota_judges_what_was_recorded_and_unlimited_never_throttles():
    clock = [0]
    q = _quota(INT64_MAX, clock)
    q.record(10**9)  # recorded while unlimited, as Kafka's sensor records
    assert q.unlimited and q.throttle_ms() == 0
    q.set_quota(10**6)
    assert q.throttle_ms() > 0
    q.set_quota(10**10)
    assert q.throttle_ms() == 0
