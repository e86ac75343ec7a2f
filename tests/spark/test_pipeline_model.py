"""Unit tests of the reference pipeline's pure parts: the event generator and the pure-Python
model of Spark's watermark rules (the oracle of tests/spark/test_pipeline.py). No Spark here."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from snakka.spark.pipeline.events import (
    DEFAULT_START_MS,
    LATE_DELAY_MS,
    MAX_DELAY_MS,
    VERY_LATE_DELAY_MS,
    format_ts,
    generate_events,
)
from snakka.spark.pipeline.reference import aggregate, simulate_streaming, window_start


def test_generator_is_deterministic_per_seed():
    a = [e.value() for e in generate_events(2000, seed=1)]
    assert a == [e.value() for e in generate_events(2000, seed=1)]
    assert a != [e.value() for e in generate_events(2000, seed=2)]


def test_generator_emits_every_event_once_in_arrival_order():
    evs = list(generate_events(5000, seed=3))
    assert sorted(e.seq for e in evs) == list(range(5000))
    keys = [(e.arrival_ms, e.seq) for e in evs]
    assert keys == sorted(keys)
    assert all(e.ts_ms <= e.arrival_ms <= e.ts_ms + MAX_DELAY_MS for e in evs)
    # Out of order in event time, with both kinds of late events present.
    assert any(b.ts_ms < a.ts_ms for a, b in zip(evs, evs[1:], strict=False))
    delays = [e.arrival_ms - e.ts_ms for e in evs]
    late = sum(LATE_DELAY_MS[0] <= d < VERY_LATE_DELAY_MS[0] for d in delays)
    very_late = sum(d >= VERY_LATE_DELAY_MS[0] for d in delays)
    assert 150 < late < 350 and 20 < very_late < 90  # 5 % and 1 % of 5000


def test_event_record_encoding():
    ev = next(iter(generate_events(1, seed=5)))
    v = json.loads(ev.value())
    assert v["ts"] == format_ts(ev.ts_ms) and v["ts"].endswith("Z")
    assert v["event_id"] == ev.event_id and v["country"] == ev.country
    assert ev.key() == ev.user_id.encode()
    assert format_ts(DEFAULT_START_MS + 7) == "2026-01-01T00:00:00.007Z"
    purchases = [e for e in generate_events(3000, seed=5) if e.event_type == "purchase"]
    assert purchases and all(e.amount_cents > 0 for e in purchases)


def test_generator_rejects_bad_arguments():
    with pytest.raises(ValueError):
        list(generate_events(10, events_per_second=0))
    with pytest.raises(ValueError):
        list(generate_events(10, late_fraction=0.8, very_late_fraction=0.5))


def _ev(ts_ms, country="DE", event_type="page_view", amount_cents=0):
    return SimpleNamespace(ts_ms=ts_ms, country=country, event_type=event_type,
                           amount_cents=amount_cents)


def test_model_follows_spark_watermark_rules():
    # window 10 s, watermark delay 5 s
    b0 = [_ev(1_000), _ev(12_000)]          # wm(0)=0; afterwards 12 s - 5 s = 7 s
    b1 = [_ev(26_000), _ev(2_000)]          # wm(1)=7 s; late filter uses wm(0)=0: kept
    b2 = [_ev(3_000, event_type="purchase", amount_cents=250)]
    # ^ wm(2)=21 s, but the late filter uses wm(1)=7 s < window end 10 s: still counted,
    #   although 3 s is far behind the current watermark; then [0,10) and [10,20) close.
    b3 = [_ev(4_000)]                       # late filter wm(2)=21 s >= 10 s: dropped
    out = simulate_streaming([b0, b1, b2, b3, []], window_ms=10_000, watermark_delay_ms=5_000)
    assert out.watermarks == [0, 7_000, 21_000, 21_000, 21_000]
    assert {k: a.as_tuple()[3:] for k, a in out.emitted.items()} == {
        (0, "DE"): (3, 2, 0, 0, 1, 250),
        (10_000, "DE"): (1, 1, 0, 0, 0, 0),
    }
    assert out.emitted_in_batch == {(0, "DE"): 2, (10_000, "DE"): 2}
    assert [e.ts_ms for e in out.dropped] == [4_000]
    assert list(out.open) == [(20_000, "DE")] and out.open_events == 1
    assert out.next_watermark == 21_000


def test_model_without_late_rows_equals_batch_aggregate():
    evs = sorted(generate_events(3000, seed=9, late_fraction=0, very_late_fraction=0),
                 key=lambda e: e.seq)
    batches = [evs[i:i + 500] for i in range(0, len(evs), 500)]
    out = simulate_streaming(batches + [[]], window_ms=1000, watermark_delay_ms=0)
    full = aggregate(evs, 1000)
    assert not out.dropped
    assert out.emitted_events + out.open_events == 3000
    for key, agg in out.emitted.items():
        assert agg.as_tuple() == full[key].as_tuple()
    assert window_start(1_767_225_601_999, 1000) == 1_767_225_601_000


def test_trigger_interval_parsing():
    from snakka.spark.pipeline.session import interval_seconds

    assert interval_seconds("1 second") == 1.0
    assert interval_seconds("500 milliseconds") == 0.5
    assert interval_seconds("2 minutes") == 120.0
    assert interval_seconds("250") == 0.25
    assert interval_seconds("soon") == 1.0
