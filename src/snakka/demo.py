"""``snakka pipeline demo``: generator -> streaming job -> batch cross-check, in one command.

What this module owns
    The orchestration behind the CLI's ``pipeline demo`` verb: running the generator in a
    background thread while the streaming job chases it (:func:`run_demo`), and the final
    verdict. The pieces themselves live in :mod:`snakka.spark.pipeline` (``events``,
    ``generator``, ``job``, ``check``, and ``session`` for the SparkSession).

Why it is not in ``snakka.spark``
    It is an entry point, like the CLI: without ``--bootstrap-server`` it starts an embedded
    snakka broker (:mod:`snakka.testing`), and ``snakka.spark`` is client-side code that never
    imports the broker.

The embedded default
    Without ``--bootstrap-server``, the demo starts a snakka broker in a child process (its own
    interpreter: the generator, the broker and Spark's driver do not share one GIL) on an
    ephemeral localhost port with a temporary data directory, and Spark runs ``local[*]``.
    With ``--bootstrap-server`` and ``--master spark://...`` the same code runs against an
    existing broker and cluster; the output directory must then be shared storage.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING

from snakka.spark.pipeline.events import DEFAULT_EVENTS_PER_SECOND, generate_events
from snakka.spark.pipeline.generator import ProduceStats, ensure_topic, produce_events
from snakka.spark.pipeline.job import (
    LogEndOffsets,
    PipelineSettings,
    ProgressMonitor,
    StreamSummary,
    run_until_drained,
    start_query,
)
from snakka.spark.pipeline.session import (
    DEFAULT_MASTER,
    DEFAULT_OUTPUT_DIR,
    build_spark,
    interval_seconds,
    prepare_output_dir,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession
    from rich.console import Console

    from snakka.spark.pipeline.check import CheckReport


@dataclass
class DemoResult:
    produced: ProduceStats
    stream: StreamSummary
    report: CheckReport


class _GeneratorThread(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, *, events: int, seed: int, partitions: int,
                 rate: float | None, events_per_second: float) -> None:
        super().__init__(name="snakka-pipeline-generator", daemon=True)
        self.args = (bootstrap, topic)
        self.events, self.seed, self.partitions, self.rate = events, seed, partitions, rate
        self.events_per_second = events_per_second
        self.produced = 0
        self.stats: ProduceStats | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        def progress(n: int) -> None:
            self.produced = n

        try:
            self.stats = asyncio.run(produce_events(
                *self.args, generate_events(self.events, seed=self.seed,
                                            events_per_second=self.events_per_second),
                partitions=self.partitions, rate=self.rate, on_progress=progress))
        except BaseException as e:  # reported by the main thread
            self.error = e


def run_demo(*, console: Console, master: str = DEFAULT_MASTER,
             bootstrap: str | None = None, events: int = 200_000, rate: float | None = 10_000,
             seed: int = 42, partitions: int = 3, output_dir: str = DEFAULT_OUTPUT_DIR,
             events_per_second: float = DEFAULT_EVENTS_PER_SECOND,
             input_topic: str = "clickstream", output_topic: str = "clickstream-aggregates",
             window_ms: int = 10_000, watermark_delay_ms: int = 10_000,
             max_offsets_per_trigger: int | None = 20_000, trigger_interval: str = "1 second",
             timeout_s: float | None = 1800.0, spark: SparkSession | None = None
             ) -> DemoResult:
    """Run the whole pipeline; ``spark`` reuses a session instead of building one for
    ``master``. ``rate`` paces the producer in wall time; ``events_per_second`` is the
    stream's own pace in event time (the demo replays event time faster than real time)."""
    from snakka.spark.pipeline.check import run_check

    prepare_output_dir(output_dir)
    embedded = bootstrap is None
    with ExitStack() as stack:
        if bootstrap is None:
            from snakka.testing import EmbeddedBroker

            console.print("Starting an embedded snakka broker ...")
            broker = stack.enter_context(EmbeddedBroker(mode="subprocess"))
            bootstrap = broker.bootstrap_servers
        console.print(f"Broker [bold]{bootstrap}[/bold], Spark master [bold]{master}[/bold], "
                      f"output {os.path.abspath(output_dir)}")
        settings = PipelineSettings(
            bootstrap_servers=bootstrap, output_dir=output_dir, input_topic=input_topic,
            output_topic=output_topic, window_ms=window_ms,
            watermark_delay_ms=watermark_delay_ms, max_offsets_per_trigger=max_offsets_per_trigger,
            trigger_interval=trigger_interval)
        # Topics first, then the query (its initial offsets are the topic's beginning), then
        # the generator: the job chases a live stream from its first event.
        asyncio.run(_create_topics(bootstrap, input_topic, partitions, output_topic))
        if spark is None:
            spark = build_spark(master)
            # Stopped before the broker (LIFO): on a cluster master a JVM exiting with a live
            # session makes the workers relaunch executors during shutdown.
            stack.callback(spark.stop)
        console.print(f"Streaming job: {window_ms / 1000:g} s tumbling windows per country, "
                      f"watermark {watermark_delay_ms / 1000:g} s, trigger {trigger_interval}; "
                      f"sinks: topic '{output_topic}' and Parquet")
        query = start_query(spark, settings)
        monitor = ProgressMonitor(console, LogEndOffsets(bootstrap, input_topic))
        gen = _GeneratorThread(bootstrap, input_topic, events=events, seed=seed,
                               partitions=partitions, rate=rate,
                               events_per_second=events_per_second)
        console.print(f"Generating {events:,} clickstream events (seed {seed}"
                      + (f", {rate:,.0f} events/s" if rate else "") + f") into '{input_topic}'")
        gen.start()

        def input_done() -> bool:
            if gen.error is not None:
                query.stop()
                raise gen.error
            return not gen.is_alive()

        # Idle for longer than two trigger intervals: the no-data batch that emits the
        # windows the last watermark closed has had its chance to run.
        summary = run_until_drained(query, monitor, input_done=input_done, timeout_s=timeout_s,
                                    idle_seconds=max(3.0, 2 * interval_seconds(trigger_interval)))
        gen.join()
        assert gen.stats is not None
        print_stream_summary(console, gen.stats, summary)
        console.print("Batch job: reading the full topic history to cross-check ...")
        report = run_check(spark, settings, console=console)
        console.print(f"Aggregates: Parquet in {os.path.abspath(settings.parquet_dir)}"
                      + (f", topic '{output_topic}' on {bootstrap}" if not embedded else
                         " (the embedded broker and its topics are gone when the demo ends)"))
        return DemoResult(gen.stats, summary, report)


async def _create_topics(bootstrap: str, input_topic: str, partitions: int,
                         output_topic: str) -> None:
    from snakka.client.admin import Admin

    async with Admin(bootstrap, client_id="snakka-pipeline") as admin:
        await ensure_topic(admin, input_topic, partitions)
        await ensure_topic(admin, output_topic, 1)


def print_stream_summary(console: Console, produced: ProduceStats, s: StreamSummary) -> None:
    ms = s.batch_ms or [0]
    console.print(f"Produced {produced.events:,} events in {produced.seconds:.1f} s "
                  f"({produced.events_per_second:,.0f}/s). Streaming: {s.batches} micro-batches, "
                  f"{s.input_rows:,} rows in {s.seconds:.1f} s ({s.rows_per_second:,.0f} rows/s; "
                  f"{s.busy_rows_per_second:,.0f} rows/s while busy), "
                  f"batch duration median {statistics.median(ms):,.0f} ms / max {max(ms):,} ms, "
                  f"max lag {s.max_lag:,}")
