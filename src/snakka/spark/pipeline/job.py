"""The reference Structured Streaming job: clickstream topic -> windowed aggregates -> topic + Parquet.

What this module owns
    * :data:`EVENT_SCHEMA`, the explicit ``from_json`` schema of the events
      (:mod:`.events` writes them);
    * :func:`parse_events` and :func:`windowed_aggregates`, the transformation shared by the
      streaming job and the batch cross-check (:mod:`.check`): a watermark on the event time and
      an event-time tumbling window per country, in append mode, so a window is emitted once,
      when the watermark passes its end, and rows that arrive for an already closed window are
      dropped (see :mod:`.reference` for Spark's exact rules);
    * :class:`AggregateSinks`, the ``foreachBatch`` writer to both sinks, idempotent per batch
      id; :func:`start_query`; and :class:`ProgressMonitor`, which prints rows/s, batch
      durations, the watermark and the lag while the query runs.

Exactly-once per sink
    Spark replays a micro-batch whose commit did not reach the checkpoint with the same
    offsets and the same state, so its output is the same rows. Parquet: each batch overwrites
    its own directory ``<output>/aggregates/batch_id=<id>``, so a replay replaces rather than
    duplicates. Topic: the sink writes each micro-batch in Kafka transactions
    (``transactionalIdPrefix``, :data:`PipelineSettings.transactional_id_prefix`, the query's
    name by default; see :mod:`snakka.spark.writer`), so a read_committed reader sees each
    record once even when Spark replays a batch whose output had already been committed
    (the sink group's marker says so and the replay writes nothing), and never sees the
    output of a run that died before its commit (aborted). Without transactions
    (``transactional_id_prefix=None``) a replayed batch can append a byte-identical copy of a
    record (keyed by window and country, the value a function of the key's aggregate), so
    "last value per key" (what the checker reads, and what compaction would do) stays exact.

Cluster mode
    Nothing here depends on the driver's machine except the output directory: on a cluster
    (``--master spark://...``) it must be a path every executor and the driver can reach (HDFS,
    S3, NFS), and snakka must be installed where the executors run Python.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType
    from rich.console import Console

DEFAULT_INPUT_TOPIC = "clickstream"
DEFAULT_OUTPUT_TOPIC = "clickstream-aggregates"
DEFAULT_WINDOW_MS = 10_000
DEFAULT_WATERMARK_DELAY_MS = 10_000
QUERY_NAME = "snakka-reference-pipeline"
AGGREGATE_COLUMNS = ("window_start_ms", "window_end_ms", "country", "events", "page_views",
                     "clicks", "add_to_carts", "purchases", "revenue_cents")


def _event_schema() -> StructType:
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("event_id", T.StringType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("user_id", T.StringType()),
        T.StructField("country", T.StringType()),
        T.StructField("device", T.StringType()),
        T.StructField("page", T.StringType()),
        T.StructField("event_type", T.StringType()),
        T.StructField("amount_cents", T.LongType()),
    ])


@dataclass(frozen=True)
class PipelineSettings:
    """Where the job reads and writes, and its event-time parameters."""

    bootstrap_servers: str
    output_dir: str
    input_topic: str = DEFAULT_INPUT_TOPIC
    output_topic: str = DEFAULT_OUTPUT_TOPIC
    window_ms: int = DEFAULT_WINDOW_MS
    watermark_delay_ms: int = DEFAULT_WATERMARK_DELAY_MS
    max_offsets_per_trigger: int | None = None
    trigger_interval: str = "1 second"
    available_now: bool = False  # process what is there (in maxOffsetsPerTrigger steps), stop
    extra_source_options: dict[str, str] = field(default_factory=dict)
    # The sink's transactionalIdPrefix (exactly-once output); None: at-least-once. It must be
    # unique to the query and the same across its restarts (the checkpoint's companion).
    transactional_id_prefix: str | None = QUERY_NAME
    # Kafka client configs (security.protocol, ssl.*, sasl.*: the CLI's --command-config / -X)
    # for every connection: the source, the sink and the admin client.
    client_config: dict[str, str] = field(default_factory=dict)

    @property
    def parquet_dir(self) -> str:
        return os.path.join(self.output_dir, "aggregates")

    @property
    def checkpoint_dir(self) -> str:
        return os.path.join(self.output_dir, "checkpoint")

    def kafka_options(self) -> dict[str, str]:
        """``kafka.bootstrap.servers`` and the client configs as Spark's connector options."""
        return {"kafka.bootstrap.servers": self.bootstrap_servers,
                **{f"kafka.{k}": v for k, v in self.client_config.items()
                   if k != "bootstrap.servers"}}

    def source_options(self) -> dict[str, str]:
        opts = {**self.kafka_options(),
                "subscribe": self.input_topic, "startingOffsets": "earliest"}
        if self.max_offsets_per_trigger is not None:
            opts["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        opts.update(self.extra_source_options)
        return opts


def ensure_registered(spark: SparkSession) -> None:
    """Register the ``snakka`` data source with this session (idempotent)."""
    import snakka.spark

    snakka.spark.register(spark)


def parse_events(raw: DataFrame, *, keep_malformed: bool = False) -> DataFrame:
    """Kafka rows -> one row per well-formed event (plus its partition and offset).

    Values that are not JSON or lack an event time or country are left out: they cannot be
    placed in a window, and letting them through would make the watermark depend on garbage.
    ``keep_malformed`` keeps them, flagged by the boolean column ``malformed`` (the check
    counts them)."""
    from pyspark.sql import functions as F

    events = (raw
              .select("partition", "offset",
                      F.from_json(F.col("value").cast("string"), _event_schema()).alias("e"))
              .select("partition", "offset", "e.*"))
    well_formed = F.col("ts").isNotNull() & F.col("country").isNotNull()
    if keep_malformed:
        return events.withColumn("malformed", ~well_formed)
    return events.where(well_formed)


def aggregate_exprs() -> list[Column]:
    """The aggregate columns of a window (shared by the stream and the batch check)."""
    from pyspark.sql import functions as F

    def count_of(kind: str) -> Column:
        return F.sum(F.when(F.col("event_type") == kind, 1).otherwise(0)).cast("long")

    return [F.count(F.lit(1)).alias("events"),
            count_of("page_view").alias("page_views"),
            count_of("click").alias("clicks"),
            count_of("add_to_cart").alias("add_to_carts"),
            count_of("purchase").alias("purchases"),
            F.sum(F.when(F.col("event_type") == "purchase", F.col("amount_cents"))
                  .otherwise(0)).cast("long").alias("revenue_cents")]


def _window_columns(window_col: str = "window") -> list[Column]:
    from pyspark.sql import functions as F

    return [F.unix_millis(F.col(f"{window_col}.start")).alias("window_start_ms"),
            F.unix_millis(F.col(f"{window_col}.end")).alias("window_end_ms")]


def windowed_aggregates(events: DataFrame, window_ms: int, watermark_delay_ms: int | None
                        ) -> DataFrame:
    """Per tumbling event-time window and country: event counts per type and revenue.

    ``watermark_delay_ms`` None computes the same aggregate without a watermark (the batch
    check's view of the full history)."""
    from pyspark.sql import functions as F

    if watermark_delay_ms is not None:
        events = events.withWatermark("ts", f"{watermark_delay_ms} milliseconds")
    return (events
            .groupBy(F.window("ts", f"{window_ms} milliseconds").alias("window"), "country")
            .agg(*aggregate_exprs())
            .select(*_window_columns(), "country", "events", "page_views", "clicks",
                    "add_to_carts", "purchases", "revenue_cents"))


def aggregate_records(aggregates: DataFrame) -> DataFrame:
    """Aggregates -> Kafka rows: key ``<window start ms>|<country>``, JSON value."""
    from pyspark.sql import functions as F

    return aggregates.select(
        F.concat_ws("|", F.col("window_start_ms").cast("string"), F.col("country"))
        .cast("binary").alias("key"),
        F.to_json(F.struct(*AGGREGATE_COLUMNS)).cast("binary").alias("value"))


def aggregate_value_schema() -> StructType:
    from pyspark.sql import types as T

    return T.StructType([T.StructField(c, T.StringType() if c == "country" else T.LongType())
                         for c in AGGREGATE_COLUMNS])


class AggregateSinks:
    """``foreachBatch`` writer: each micro-batch's emitted windows to Parquet and to a topic."""

    def __init__(self, settings: PipelineSettings) -> None:
        self.settings = settings

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        s = self.settings
        # count() runs the micro-batch (the stateful stage at full parallelism) into the cache;
        # the few rows it emits (the windows the watermark closed) then go out in one task per
        # sink. (A coalesce before the cache would shrink the stateful stage to one task.)
        rows = batch.persist()
        try:
            if rows.count() == 0:  # most micro-batches close no window
                return
            one = rows.coalesce(1)
            one.write.mode("overwrite").parquet(
                os.path.join(s.parquet_dir, f"batch_id={batch_id}"))
            out = (aggregate_records(one).write.format("snakka").mode("append")
                   .options(**s.kafka_options())
                   .option("topic", s.output_topic))
            if s.transactional_id_prefix is not None:
                # The tasks learn batch_id from Spark (the streaming.sql.batchId property).
                out = out.option("transactionalIdPrefix", s.transactional_id_prefix)
            out.save()
        finally:
            rows.unpersist()


def ensure_output_topic(settings: PipelineSettings) -> None:
    """Create the output topic (one partition) unless it exists: the sink writes to an
    existing topic only, as Kafka's producer does without auto-creation."""
    from .generator import ensure_topic

    async def go() -> None:
        from snakka.client.admin import Admin

        async with Admin(settings.bootstrap_servers, client_id="snakka-pipeline",
                         config=settings.client_config) as admin:
            await ensure_topic(admin, settings.output_topic, 1)

    asyncio.run(go())


def start_query(spark: SparkSession, settings: PipelineSettings) -> StreamingQuery:
    """Start the streaming job (does not wait). Creates the output topic if needed."""
    ensure_registered(spark)
    ensure_output_topic(settings)
    raw = spark.readStream.format("snakka").options(**settings.source_options()).load()
    agg = windowed_aggregates(parse_events(raw), settings.window_ms, settings.watermark_delay_ms)
    writer = (agg.writeStream.queryName(QUERY_NAME).outputMode("append")
              .foreachBatch(AggregateSinks(settings))
              .option("checkpointLocation", settings.checkpoint_dir))
    if settings.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=settings.trigger_interval)
    return writer.start()


# ---------------------------------------------------------------------------- progress
def progress_dict(p: Any) -> dict:
    """A StreamingQueryProgress (object in PySpark 4, dict before) as a plain dict."""
    if isinstance(p, dict):
        return p
    return json.loads(p.json)


def parse_source_offsets(offsets: Any) -> dict[tuple[str, int], int]:
    """A source offset as Spark reports it (JSON text or already parsed) -> {(topic, p): next
    offset}. Understands the Kafka connector's layout ``{"topic": {"0": 42}}``."""
    if offsets is None:
        return {}
    if isinstance(offsets, str):
        offsets = json.loads(offsets)
    out: dict[tuple[str, int], int] = {}
    if isinstance(offsets, dict):
        for topic, parts in offsets.items():
            if isinstance(parts, dict):
                for p, off in parts.items():
                    if str(p).lstrip("-").isdigit() and isinstance(off, int):
                        out[(topic, int(p))] = off
    return out


class LogEndOffsets:
    """Log end offsets of a topic, through snakka's protocol client (any Kafka broker)."""

    def __init__(self, bootstrap: str, topic: str,
                 config: dict[str, str] | None = None) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.config = dict(config or {})

    def fetch(self) -> dict[tuple[str, int], int]:
        return asyncio.run(self._fetch())

    async def _fetch(self) -> dict[tuple[str, int], int]:
        from snakka.client.admin import Admin

        async with Admin(self.bootstrap, client_id="snakka-pipeline-monitor",
                         config=self.config) as admin:
            (meta,) = await admin.list_topics([self.topic])
            if meta.error_code:
                return {}
            ends = await admin.list_offsets(self.topic, [p.partition_index
                                                         for p in meta.partitions], -1)
        return {(self.topic, p): off for p, off in ends.items()}


@dataclass
class StreamSummary:
    batches: int = 0
    input_rows: int = 0
    seconds: float = 0.0
    batch_ms: list[int] = field(default_factory=list)
    max_lag: int = 0
    final_lag: int | None = None

    @property
    def rows_per_second(self) -> float:
        """Rows over the wall time the query ran (bounded by the producer's pace)."""
        return self.input_rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def busy_rows_per_second(self) -> float:
        """Rows over the time spent inside micro-batches: what the job sustains when busy."""
        busy = sum(self.batch_ms) / 1000
        return self.input_rows / busy if busy > 0 else 0.0


class ProgressMonitor:
    """Prints one line per micro-batch (rows, rows/s, duration, watermark, lag) with rich."""

    def __init__(self, console: Console | None, lag_probe: LogEndOffsets | None) -> None:
        self.console = console
        self.lag_probe = lag_probe
        self.summary = StreamSummary()
        self.last_batch_id = -1
        self.processed: dict[tuple[str, int], int] = {}
        self.lag: int | None = None
        self._header_done = False
        self._started = time.monotonic()

    def poll(self, query: StreamingQuery) -> int:
        """Report progress entries not seen yet; returns how many there were."""
        new = [d for d in map(progress_dict, query.recentProgress)
               if d.get("batchId", -1) > self.last_batch_id]
        for d in new:
            self.last_batch_id = d["batchId"]
            for src in d.get("sources", []):
                self.processed.update(parse_source_offsets(src.get("endOffset")))
            rows = int(d.get("numInputRows") or 0)
            ms = int((d.get("durationMs") or {}).get("triggerExecution") or 0)
            self.summary.batches += 1
            self.summary.input_rows += rows
            self.summary.batch_ms.append(ms)
            self.refresh_lag()
            self._print_batch(d, rows, ms)
        self.summary.seconds = time.monotonic() - self._started
        return len(new)

    def refresh_lag(self) -> None:
        """lag = log end offsets - offsets the query has processed, summed over partitions."""
        if self.lag_probe is None:
            return
        try:
            ends = self.lag_probe.fetch()
        except (OSError, ConnectionError, TimeoutError):
            return  # a monitoring hiccup must not stop the job
        if ends and self.processed:
            self.lag = sum(max(0, end - self.processed.get(tp, 0)) for tp, end in ends.items())
        elif ends:
            self.lag = sum(ends.values())
        if self.lag is not None:
            self.summary.max_lag = max(self.summary.max_lag, self.lag)
            self.summary.final_lag = self.lag

    def _print_batch(self, d: dict, rows: int, ms: int) -> None:
        if self.console is None:
            return
        if not self._header_done:
            self.console.print("[bold]batch   rows   rows/s in  rows/s out  duration  "
                               "watermark                 lag[/bold]")
            self._header_done = True
        wm = (d.get("eventTime") or {}).get("watermark", "-")
        rate_in = float(d.get("inputRowsPerSecond") or 0.0)
        rate_out = float(d.get("processedRowsPerSecond") or 0.0)
        lag = "-" if self.lag is None else f"{self.lag:,}"
        self.console.print(f"{d['batchId']:>5} {rows:>7,} {rate_in:>10,.0f} {rate_out:>11,.0f} "
                           f"{ms:>7,}ms  {wm:<24} {lag:>6}")


def run_until_drained(query: StreamingQuery, monitor: ProgressMonitor, *,
                      input_done: Callable[[], bool], idle_seconds: float = 3.0,
                      poll_seconds: float = 0.5, timeout_s: float | None = None) -> StreamSummary:
    """Drive the progress display until the query has consumed everything the (finished)
    producer wrote, then stop it. With ``available_now`` the query stops by itself.

    "Drained" = the producer is done, the lag is 0, the query is idle, and no micro-batch
    completed for ``idle_seconds`` (longer than a trigger interval, so that the no-data batch
    Spark runs to emit the windows the last watermark closed has happened)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    last_change = time.monotonic()
    try:
        while query.isActive:
            if monitor.poll(query):
                last_change = time.monotonic()
            if input_done() and time.monotonic() - last_change >= idle_seconds:
                st = query.status
                if not st.get("isTriggerActive") and not st.get("isDataAvailable"):
                    monitor.refresh_lag()
                    if monitor.lag_probe is None or monitor.lag == 0:
                        break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("the streaming query did not drain the topic in time")
            try:
                # PySpark takes seconds as int or float; its annotation says int only.
                query.awaitTermination(poll_seconds)  # type: ignore[arg-type]
            except Exception:  # the query failed: reported by check_query_failed below
                break
    finally:
        if query.isActive:
            query.stop()
    monitor.poll(query)
    check_query_failed(query)
    return monitor.summary


class StreamingJobError(RuntimeError):
    """The streaming query stopped with an error (the message is Spark's, without the plan)."""


def check_query_failed(query: StreamingQuery) -> None:
    exc = query.exception()
    if exc is not None:
        text = str(exc).split("=== Streaming Query ===")[0].strip()
        raise StreamingJobError(f"streaming query failed: {text}")
