"""Live throughput for the console's charts: rates computed from the broker's request counters
(server/metrics.py's BrokerMetrics), sampled at a fixed interval into a bounded ring.

A sans-I/O core (:class:`ThroughputHistory`, fed totals and a time by its caller) plus the
loop task that feeds it (:func:`sample_forever`). Rates are per second between two samples:
bytes and records produced, bytes fetched, requests answered; per topic too (latest interval
only, for the topics table). Nothing here runs on the request path.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from snakka.server.metrics import BrokerMetrics

__all__ = ["CONSOLE_THROUGHPUT_INTERVAL_S", "CONSOLE_THROUGHPUT_SAMPLES", "Totals",
           "ThroughputHistory", "sample_forever", "totals_of"]

# One sample per this many seconds ...
CONSOLE_THROUGHPUT_INTERVAL_S = 1.0
# ... and this many kept (five minutes of charts).
CONSOLE_THROUGHPUT_SAMPLES = 300

SERIES = ("bytes_in", "messages_in", "bytes_out", "requests")


@dataclass(frozen=True, slots=True)
class Totals:
    """Counters since the broker started (all monotonic)."""

    bytes_in: int
    messages_in: int
    bytes_out: int
    requests: int
    topics: Mapping[str, tuple[int, int]]  # topic -> (bytes in, messages in)


def totals_of(metrics: BrokerMetrics) -> Totals:
    requests = sum(sum(h.counts) for h in metrics.requests.values())
    topics = {t: (metrics.bytes_in.get(t, 0), metrics.messages_in.get(t, 0))
              for t in metrics.bytes_in}
    return Totals(sum(metrics.bytes_in.values()), sum(metrics.messages_in.values()),
                  sum(metrics.bytes_out.values()), requests, topics)


class ThroughputHistory:
    def __init__(self, samples: int = CONSOLE_THROUGHPUT_SAMPLES) -> None:
        self._points: deque[tuple[float, float, float, float, float]] = deque(maxlen=samples)
        self._last: tuple[float, Totals] | None = None
        self._topic_rates: dict[str, dict[str, float]] = {}

    def sample(self, now_s: float, totals: Totals) -> None:
        """Record ``totals`` read at ``now_s`` (a monotonic clock, seconds)."""
        last = self._last
        self._last = (now_s, totals)
        if last is None:
            return
        t0, prev = last
        dt = now_s - t0
        if dt <= 0:
            return
        self._points.append((
            now_s,
            max(0, totals.bytes_in - prev.bytes_in) / dt,
            max(0, totals.messages_in - prev.messages_in) / dt,
            max(0, totals.bytes_out - prev.bytes_out) / dt,
            max(0, totals.requests - prev.requests) / dt))
        rates: dict[str, dict[str, float]] = {}
        for topic, (b, m) in totals.topics.items():
            pb, pm = prev.topics.get(topic, (0, 0))
            if b != pb or m != pm:
                rates[topic] = {"bytes_in": max(0, b - pb) / dt,
                                "messages_in": max(0, m - pm) / dt}
        self._topic_rates = rates

    def series(self, wall_now_ms: int, mono_now_s: float) -> dict[str, Any]:
        """The kept samples, each as (wall-clock ms, rate per series)."""
        pts = list(self._points)
        return {
            "interval_s": CONSOLE_THROUGHPUT_INTERVAL_S,
            "series": list(SERIES),
            "points": [[int(wall_now_ms - (mono_now_s - t) * 1000), *vals]
                       for t, *vals in pts],
        }

    def latest(self) -> dict[str, float] | None:
        if not self._points:
            return None
        return dict(zip(SERIES, self._points[-1][1:], strict=True))

    def topic_rates(self) -> dict[str, dict[str, float]]:
        return self._topic_rates


async def sample_forever(history: ThroughputHistory, read: Callable[[], Totals],
                         interval_s: float = CONSOLE_THROUGHPUT_INTERVAL_S) -> None:
    """The loop task: sample, sleep, forever (cancelled when the console stops)."""
    while True:
        history.sample(time.monotonic(), read())
        await asyncio.sleep(interval_s)
