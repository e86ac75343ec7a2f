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

    def set_rate(self, bytes_per_second: float, now: float) -> None:
        """A new rate from ``now`` on (a dynamic config change): the bytes reserved and not yet
        paid off at the old rate are paid off at the new one (none when it is unlimited), as
        Kafka judges the bytes already measured against a new quota."""
        new = float(bytes_per_second)
        owed_s = max(0.0, self._next_free - now)
        if owed_s > 0:
            self._next_free = now if new >= _UNLIMITED else now + owed_s * self.rate / new
        self.rate = new

    def wait_s(self, now: float) -> float:
        """How long a caller must wait at ``now`` before its bytes may start (those reserved
        before it are paid off), without reserving anything."""
        return 0.0 if self.unlimited else max(0.0, self._next_free - now)

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
