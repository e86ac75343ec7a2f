"""Throughput of the reference streaming pipeline (snakka.spark.pipeline), end to end.

    .venv/bin/python bench/bench_pipeline.py                       # 500k events, 100k per batch
    .venv/bin/python bench/bench_pipeline.py --events 1000000 --per-trigger 200000
    .venv/bin/python bench/bench_pipeline.py --live-rate 20000     # also: a paced live run

What is measured (a snakka broker in a child process, Spark local[*], one machine):
  produce:   the generator writing N clickstream events (JSON, ~200 B) to a 3-partition topic
             through snakka's protocol client, as fast as the broker acknowledges (acks=all);
  catch-up:  the streaming job (snakka source -> from_json -> watermark -> 10 s windows per
             country -> foreachBatch to Parquet and to a topic) over that backlog with
             Trigger.AvailableNow and maxOffsetsPerTrigger: events/s from query start to
             termination (Spark session start excluded, the first micro-batch's warm-up
             included) and per-batch durations; "steady" is the rows/s of the batches after
             the first;
  check:     the batch cross-check over the same topic (full read, classification, recomputed
             aggregates, comparison with both sinks), events/s;
  live:      (--live-rate R) a second topic produced at R events/s while the job runs with a
             1 s processing-time trigger: the lag it reaches and whether it drains.

Prints one JSON object per phase, then a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from snakka.demo import _create_topics  # noqa: E402
from snakka.spark.pipeline.check import run_check  # noqa: E402
from snakka.spark.pipeline.events import generate_events  # noqa: E402
from snakka.spark.pipeline.generator import produce_events  # noqa: E402
from snakka.spark.pipeline.job import (  # noqa: E402
    LogEndOffsets,
    PipelineSettings,
    ProgressMonitor,
    progress_dict,
    run_until_drained,
    start_query,
)
from snakka.spark.pipeline.session import build_spark  # noqa: E402
from snakka.testing import EmbeddedBroker  # noqa: E402


def _batch_stats(progress: list[dict]) -> dict:
    ms = [int(p["durationMs"].get("triggerExecution", 0)) for p in progress]
    rows = [int(p.get("numInputRows") or 0) for p in progress]
    steady_ms = sum(ms[1:])
    return {"batches": len(ms), "batch_ms_first": ms[0] if ms else 0,
            "batch_ms_median": statistics.median(ms) if ms else 0,
            "batch_ms_max": max(ms, default=0),
            "rows_per_batch_max": max(rows, default=0),
            "steady_rows_per_s": round(sum(rows[1:]) / (steady_ms / 1000)) if steady_ms else 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=500_000)
    ap.add_argument("--per-trigger", type=int, default=100_000, help="maxOffsetsPerTrigger")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--shuffle-partitions", type=int, default=4)
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--live-rate", type=float, default=0,
                    help="also run a live phase at this many events/s (0 = skip)")
    ap.add_argument("--live-events", type=int, default=200_000)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="snakka-bench-pipeline-")
    results = []
    try:
        with EmbeddedBroker(mode="subprocess") as broker:
            bootstrap = broker.bootstrap_servers
            asyncio.run(_create_topics(bootstrap, "clicks", args.partitions, "aggregates"))
            stats = asyncio.run(produce_events(bootstrap, "clicks",
                                               generate_events(args.events, seed=1),
                                               partitions=args.partitions))
            results.append({"phase": "produce", "events": stats.events,
                            "seconds": round(stats.seconds, 2),
                            "events_per_s": round(stats.events_per_second)})
            print(json.dumps(results[-1]), flush=True)

            spark = build_spark(args.master, shuffle_partitions=args.shuffle_partitions)
            settings = PipelineSettings(bootstrap_servers=bootstrap,
                                        output_dir=os.path.join(work, "out"),
                                        input_topic="clicks", output_topic="aggregates",
                                        max_offsets_per_trigger=args.per_trigger,
                                        available_now=True)
            t0 = time.perf_counter()
            query = start_query(spark, settings)
            query.awaitTermination()
            elapsed = time.perf_counter() - t0
            if query.exception() is not None:
                raise SystemExit(f"streaming query failed: {query.exception()}")
            progress = [progress_dict(p) for p in query.recentProgress]
            rows = sum(int(p.get("numInputRows") or 0) for p in progress)
            results.append({"phase": "catch-up", "events": rows, "seconds": round(elapsed, 2),
                            "events_per_s": round(rows / elapsed), **_batch_stats(progress)})
            print(json.dumps(results[-1]), flush=True)

            if not args.skip_check:
                t0 = time.perf_counter()
                report = run_check(spark, settings)
                elapsed = time.perf_counter() - t0
                results.append({"phase": "check", "events": report.events,
                                "seconds": round(elapsed, 2),
                                "events_per_s": round(report.events / elapsed),
                                "ok": report.ok})
                print(json.dumps(results[-1]), flush=True)

            if args.live_rate:
                results.append(_live(spark, bootstrap, work, args))
                print(json.dumps(results[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    for r in results:
        print(f"{r['phase']:>9}: {r['events']:>10,} events in {r['seconds']:>7.1f} s = "
              f"{r['events_per_s']:>9,} events/s"
              + (f"; {r['batches']} batches, median {r['batch_ms_median']:,.0f} ms, first "
                 f"{r['batch_ms_first']:,} ms, steady {r['steady_rows_per_s']:,} rows/s"
                 if "batches" in r else "")
              + (f"; max lag {r['max_lag']:,}, drained in {r['drain_s']} s after the producer"
                 if "max_lag" in r else ""))


def _live(spark, bootstrap: str, work: str, args) -> dict:
    """Produce at --live-rate while the job runs with a 1 s trigger; report lag and drain."""
    asyncio.run(_create_topics(bootstrap, "live", args.partitions, "live-aggregates"))
    settings = PipelineSettings(bootstrap_servers=bootstrap,
                                output_dir=os.path.join(work, "live"), input_topic="live",
                                output_topic="live-aggregates")
    query = start_query(spark, settings)
    done = threading.Event()
    produced_at: list[float] = []

    def produce() -> None:
        try:
            asyncio.run(produce_events(bootstrap, "live",
                                       generate_events(args.live_events, seed=2),
                                       partitions=args.partitions, rate=args.live_rate))
        finally:
            produced_at.append(time.perf_counter())
            done.set()

    t0 = time.perf_counter()
    threading.Thread(target=produce, daemon=True).start()
    monitor = ProgressMonitor(None, LogEndOffsets(bootstrap, "live"))
    summary = run_until_drained(query, monitor, input_done=done.is_set, idle_seconds=2.0,
                                timeout_s=1800)
    end = time.perf_counter()
    progress = [progress_dict(p) for p in query.recentProgress]
    return {"phase": "live", "events": summary.input_rows, "seconds": round(end - t0, 2),
            "events_per_s": round(summary.input_rows / (end - t0)),
            "target_rate": args.live_rate, "max_lag": summary.max_lag,
            # includes the idle wait that proves the query has nothing left to do
            "drain_s": round(end - produced_at[0], 1), **_batch_stats(progress)}


if __name__ == "__main__":
    main()
