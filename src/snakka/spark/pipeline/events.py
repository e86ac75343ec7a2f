"""The reference pipeline's event stream: a deterministic web clickstream with late events.

What this module owns
    The event model (:class:`ClickEvent`), its JSON/record encoding (the contract between the
    generator and the Spark job's explicit ``from_json`` schema), and :func:`generate_events`,
    a seeded generator of a realistic stream. Pure Python, no I/O: the producer lives in
    :mod:`.generator`, the Spark side in :mod:`.job`.

How the stream looks
    Users (a fixed pool, each with a home country and a device) produce page views, clicks,
    add-to-carts and purchases (with an amount in integer cents, so sums are exact in both
    Spark and Python). Event time advances with exponential inter-arrival gaps at
    ``events_per_second`` of *event time*. Every event then gets an arrival delay: a small
    network jitter for all, a few seconds for a fraction (``late_fraction``: out of order but
    normally within the watermark), and one to two minutes for a small fraction
    (``very_late_fraction``: normally beyond the watermark, so a streaming job drops them).
    The topic order is the arrival order; the event time is the JSON field ``ts`` (the
    record timestamp is the produce time, see :mod:`.generator`).

    Arrival order is produced incrementally with a heap whose horizon is the largest delay,
    so generating millions of events needs memory for only a couple of minutes of stream.

Determinism
    Everything derives from ``random.Random(seed)`` and a fixed ``start_ms`` (default
    2026-01-01T00:00:00Z, not "now"), so the same arguments always give the same bytes. Tests
    rely on that to compare Spark's output with a pure-Python computation.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

# 2026-01-01T00:00:00Z: a fixed default so that a seed alone pins the whole stream.
DEFAULT_START_MS = 1_767_225_600_000
DEFAULT_EVENTS_PER_SECOND = 1000.0
DEFAULT_USERS = 5000
DEFAULT_LATE_FRACTION = 0.05
DEFAULT_VERY_LATE_FRACTION = 0.01
# Arrival delays, in ms of event time.
JITTER_MS = 200
LATE_DELAY_MS = (1_000, 8_000)
VERY_LATE_DELAY_MS = (60_000, 120_000)
MAX_DELAY_MS = JITTER_MS + VERY_LATE_DELAY_MS[1]

COUNTRIES = ("US", "DE", "GB", "FR", "IN", "BR", "JP")
COUNTRY_WEIGHTS = (30, 15, 12, 10, 15, 10, 8)
DEVICES = ("mobile", "desktop", "tablet")
DEVICE_WEIGHTS = (60, 32, 8)
EVENT_TYPES = ("page_view", "click", "add_to_cart", "purchase")
EVENT_TYPE_WEIGHTS = (60, 25, 10, 5)
PRODUCTS = 200

CONTENT_TYPE_HEADER = ("content-type", b"application/json")


@dataclass(frozen=True, slots=True)
class ClickEvent:
    """One clickstream event. ``seq`` is the generation (event-time) order; ``arrival_ms`` is
    when it reached the collector, which decides its place in the topic."""

    seq: int
    ts_ms: int
    arrival_ms: int
    user_id: str
    country: str
    device: str
    page: str
    event_type: str
    amount_cents: int

    @property
    def event_id(self) -> str:
        return f"e{self.seq:010d}"

    def key(self) -> bytes:
        """Record key: the user, so one user's events stay in one partition, in order."""
        return self.user_id.encode()

    def value(self) -> bytes:
        """The JSON record value; ``ts`` is ISO 8601 UTC with milliseconds."""
        return json.dumps({
            "event_id": self.event_id,
            "ts": format_ts(self.ts_ms),
            "user_id": self.user_id,
            "country": self.country,
            "device": self.device,
            "page": self.page,
            "event_type": self.event_type,
            "amount_cents": self.amount_cents,
        }, separators=(",", ":")).encode()


def format_ts(ms: int) -> str:
    """ISO 8601 with milliseconds and a ``Z``: what Spark's JSON timestamp parser reads as UTC."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{ms % 1000:03d}Z"


def generate_events(n: int, *, seed: int = 42, start_ms: int = DEFAULT_START_MS,
                    events_per_second: float = DEFAULT_EVENTS_PER_SECOND,
                    users: int = DEFAULT_USERS, late_fraction: float = DEFAULT_LATE_FRACTION,
                    very_late_fraction: float = DEFAULT_VERY_LATE_FRACTION,
                    ) -> Iterator[ClickEvent]:
    """Yield ``n`` events in arrival order (ties by generation order). Deterministic."""
    if n < 0 or events_per_second <= 0 or users <= 0:
        raise ValueError("n >= 0, events_per_second > 0 and users > 0 are required")
    if not 0 <= late_fraction + very_late_fraction <= 1:
        raise ValueError("late_fraction + very_late_fraction must be within [0, 1]")
    rng = random.Random(seed)
    user_country = rng.choices(COUNTRIES, COUNTRY_WEIGHTS, k=users)
    user_device = rng.choices(DEVICES, DEVICE_WEIGHTS, k=users)
    mean_gap_ms = 1000.0 / events_per_second
    heap: list[tuple[int, int, ClickEvent]] = []
    t = float(start_ms)
    for seq in range(n):
        t += rng.expovariate(1.0 / mean_gap_ms)
        ts = int(t)
        u = rng.randrange(users)
        etype = rng.choices(EVENT_TYPES, EVENT_TYPE_WEIGHTS)[0]
        if etype == "page_view":
            page = rng.choice(("/", "/search", f"/product/{rng.randrange(PRODUCTS)}"))
        elif etype == "click":
            page = rng.choice(("/search", f"/product/{rng.randrange(PRODUCTS)}"))
        elif etype == "add_to_cart":
            page = f"/product/{rng.randrange(PRODUCTS)}"
        else:
            page = "/checkout"
        amount = rng.randrange(500, 50_000) if etype == "purchase" else 0
        r = rng.random()
        delay = rng.randrange(JITTER_MS)
        if r < very_late_fraction:
            delay += rng.randrange(*VERY_LATE_DELAY_MS)
        elif r < very_late_fraction + late_fraction:
            delay += rng.randrange(*LATE_DELAY_MS)
        ev = ClickEvent(seq, ts, ts + delay, f"u{u:05d}", user_country[u], user_device[u], page,
                        etype, amount)
        heapq.heappush(heap, (ev.arrival_ms, seq, ev))
        # Every later event has arrival >= its ts >= this ts (and a larger seq), so all
        # heap entries arriving at or before ts are final in arrival order.
        while heap and heap[0][0] <= ts:
            yield heapq.heappop(heap)[2]
    while heap:
        yield heapq.heappop(heap)[2]
