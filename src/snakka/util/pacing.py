"""Byte-rate pacing shared by the throttled background writers (sans-I/O).

:class:`BytePacer` is the arithmetic of "at most N bytes per second over all callers": each
call reserves its bytes right after everything reserved before it and says how long the
caller must wait first (no burst beyond one call's bytes). The caller waits its own way:
tiered storage's copier with ``asyncio.sleep`` (``remote.log.manager.copy.max.bytes.per.second``),
the log cleaner's thread on its stop event (``log.cleaner.io.max.bytes.per.second``).
A rate at or above 2**63 (Kafka's "unlimited" defaults, Long.MAX and Double.MAX) never waits.
"""

from __future__ import annotations

from snakka.limits import INT64_MAX

_UNLIMITED = float(INT64_MAX)


class BytePacer:
    def __init__(self, bytes_per_second: float) -> None:
        self.rate = float(bytes_per_second)
        self._next_free = 0.0

    @property
    def unlimited(self) -> bool:
        return self.rate >= _UNLIMITED

    def delay(self, nbytes: int, now: float) -> float:
        """Reserve ``nbytes`` at time ``now`` (seconds, any monotonic clock); the seconds to
        wait before using them (0 when they fit at once)."""
        if self.unlimited or nbytes <= 0:
            return 0.0
        start = max(now, self._next_free)
        self._next_free = start + nbytes / self.rate
        return start - now
