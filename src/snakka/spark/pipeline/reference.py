"""A pure-Python model of the streaming job: windowed aggregates and Spark's watermark rules.

What this module owns
    The aggregate the pipeline computes (:class:`WindowAggregate`: per event-time tumbling
    window and country, counts per event type and revenue) and :func:`simulate_streaming`,
    which replays a sequence of micro-batches with exactly the rules Spark Structured Streaming
    applies to a windowed aggregation in append mode. Tests use it as the oracle for the Spark
    job; it has no Spark dependency.

Spark's rules, as modelled (Spark 3.5+/4.x, the default
``spark.sql.streaming.statefulOperator.allowMultiple=true``):

* Every micro-batch ``b`` carries a global watermark ``wm(b)`` (``batchWatermarkMs`` in the
  checkpoint's offset log). ``wm(0) = 0``; after a batch with input rows, the watermark
  becomes ``max(wm, max event time of that batch's rows - delay)`` and applies from the next
  batch on. Batches without rows do not move it.
* Late rows are filtered with the *previous* batch's watermark (Spark's
  ``PropagateWatermarkSimulator.getInputWatermarkForLateEvents`` uses batch ``b - 1``): a row
  is dropped when its window's end ``<= wm(b - 1)``. The comparison is on the window end, not
  on the row's own event time: a row older than the watermark still counts while its window
  is open.
* State is evicted with the batch's own watermark: append mode emits, in batch ``b``, every
  window whose end ``<= wm(b)``, once, and forgets it.
* Windows are aligned to the epoch: ``start = ts - ts % size``; ``end = start + size``
  (exclusive).

Which rows are late therefore depends on the micro-batch boundaries (and on no-data batches,
which Spark runs when the watermark moves and no new data is there). Callers pass the batches
explicitly: tests derive them from ``maxOffsetsPerTrigger`` with a single partition, and the
pipeline's checker reads them from the query's checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

AggKey = tuple[int, str]  # (window start ms, country)


class EventLike(Protocol):
    ts_ms: int
    country: str
    event_type: str
    amount_cents: int


@dataclass(slots=True)
class WindowAggregate:
    """One output row of the pipeline: a window of event time and a country."""

    window_start_ms: int
    window_end_ms: int
    country: str
    events: int = 0
    page_views: int = 0
    clicks: int = 0
    add_to_carts: int = 0
    purchases: int = 0
    revenue_cents: int = 0

    def add(self, ev: EventLike) -> None:
        self.events += 1
        if ev.event_type == "page_view":
            self.page_views += 1
        elif ev.event_type == "click":
            self.clicks += 1
        elif ev.event_type == "add_to_cart":
            self.add_to_carts += 1
        elif ev.event_type == "purchase":
            self.purchases += 1
            self.revenue_cents += ev.amount_cents

    def as_tuple(self) -> tuple[int, int, str, int, int, int, int, int, int]:
        return (self.window_start_ms, self.window_end_ms, self.country, self.events,
                self.page_views, self.clicks, self.add_to_carts, self.purchases,
                self.revenue_cents)


def window_start(ts_ms: int, window_ms: int) -> int:
    return ts_ms - ts_ms % window_ms


def aggregate(events: Iterable[EventLike], window_ms: int) -> dict[AggKey, WindowAggregate]:
    """Windowed aggregates of ``events`` with no watermark (what a batch job computes)."""
    out: dict[AggKey, WindowAggregate] = {}
    for ev in events:
        _add(out, ev, window_ms)
    return out


def _add(table: dict[AggKey, WindowAggregate], ev: EventLike, window_ms: int) -> None:
    start = window_start(ev.ts_ms, window_ms)
    key = (start, ev.country)
    agg = table.get(key)
    if agg is None:
        agg = table[key] = WindowAggregate(start, start + window_ms, ev.country)
    agg.add(ev)


@dataclass
class StreamingOutcome:
    """What the streaming job has produced after the given micro-batches."""

    emitted: dict[AggKey, WindowAggregate] = field(default_factory=dict)
    emitted_in_batch: dict[AggKey, int] = field(default_factory=dict)
    dropped: list = field(default_factory=list)  # late rows, in processing order
    open: dict[AggKey, WindowAggregate] = field(default_factory=dict)  # still in the state
    watermarks: list[int] = field(default_factory=list)  # wm(b), per batch
    next_watermark: int = 0  # the watermark the next batch would get

    @property
    def emitted_events(self) -> int:
        return sum(a.events for a in self.emitted.values())

    @property
    def open_events(self) -> int:
        return sum(a.events for a in self.open.values())


def simulate_streaming(batches: Iterable[Sequence[EventLike]], *, window_ms: int,
                       watermark_delay_ms: int) -> StreamingOutcome:
    """Replay micro-batches (each a sequence of rows; empty = a no-data batch) through a
    windowed append-mode aggregation with a watermark, following Spark's rules (module doc)."""
    out = StreamingOutcome()
    state = out.open
    wm = 0
    for b, rows in enumerate(batches):
        wm_late = out.watermarks[-1] if out.watermarks else 0
        out.watermarks.append(wm)
        max_ts: int | None = None
        for ev in rows:
            if max_ts is None or ev.ts_ms > max_ts:
                max_ts = ev.ts_ms
            if window_start(ev.ts_ms, window_ms) + window_ms <= wm_late:
                out.dropped.append(ev)
            else:
                _add(state, ev, window_ms)
        for key in sorted(k for k, a in state.items() if a.window_end_ms <= wm):
            out.emitted[key] = state.pop(key)
            out.emitted_in_batch[key] = b
        if max_ts is not None:
            wm = max(wm, max_ts - watermark_delay_ms)
    out.next_watermark = wm
    return out
