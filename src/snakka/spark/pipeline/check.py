"""The batch cross-check: re-derive the streaming job's output from the full topic history.

What this module owns
    :func:`run_check`, a Spark *batch* job that reads every record of the input topic
    (``format("snakka")``, from the log start to the log end offsets listed when the check
    starts) and the query's checkpoint, decides for every event what the streaming job must
    have done with it, recomputes the aggregates the job must have emitted, and compares them
    with both sinks (the Parquet directory and the output topic). The verdict accounts for
    every record: the read returned ``log end - log start`` records per partition, and
    ``emitted + dropped + open + unprocessed = events`` (records that are not events are
    counted as **malformed**: the job filters them out before the watermark).

How each event is classified (the rules of :mod:`.reference`, applied with Spark SQL)
    * The checkpoint's offset log (``<checkpoint>/offsets/<batch id>``: a version line, the
      batch metadata with ``batchWatermarkMs``, then the source's end offsets) and commit log
      (``commits/<batch id>``) tell which offsets each committed micro-batch covered and its
      watermark. A local checkpoint is read directly; any other (hdfs://, s3a://, ...) with
      ``spark.read.text``, so every Hadoop file system works.
    * The event's micro-batch ``b`` is the first committed batch whose end offset for its
      partition is beyond the event's offset; none = **unprocessed** (arrived after the last
      committed batch).
    * **dropped** (late): its window's end ``<= wm(b - 1)``.
    * **emitted**: otherwise, if its window's end ``<=`` the last committed batch's watermark;
      such a window must be in the output, emitted by the first batch whose watermark reached
      its end.
    * **open**: otherwise (its window still waits in the state store for the watermark).

The comparison is exact: same windows, same counts and revenue, same emitting batch id
(Parquet), and for the topic, the last record per key, read with read_committed (see
:mod:`.job` for why duplicates of a key can exist without the transactional sink, and are
identical); with the transactional sink a duplicate is a mismatch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .job import (
    AGGREGATE_COLUMNS,
    PipelineSettings,
    aggregate_exprs,
    aggregate_value_schema,
    ensure_registered,
    parse_events,
    parse_source_offsets,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from rich.console import Console

STATUSES = ("emitted", "dropped", "open", "unprocessed")


@dataclass(frozen=True)
class MicroBatch:
    """One entry of a streaming query's offset log."""

    batch_id: int
    watermark_ms: int
    end_offsets: dict[tuple[str, int], int]
    committed: bool


def parse_offset_log_entry(text: str) -> tuple[int, dict[tuple[str, int], int]]:
    """``offsets/<id>`` content -> (batchWatermarkMs, end offsets of the (single) source)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise ValueError(f"not a Spark offset log entry: {text[:200]!r}")
    meta = json.loads(lines[1])
    return int(meta.get("batchWatermarkMs", 0)), parse_source_offsets(lines[2])


def read_checkpoint(spark: SparkSession, checkpoint_dir: str) -> list[MicroBatch]:
    """The committed and planned micro-batches of the query, in batch order."""
    from pyspark.sql import functions as F

    local = _local_path(checkpoint_dir)

    def entries(sub: str) -> dict[int, str]:
        path = os.path.join(checkpoint_dir, sub)
        if local is not None:  # a local checkpoint: no Spark job needed for a few small files
            d = os.path.join(local, sub)
            if not os.path.isdir(d):
                return {}
            return {int(n): open(os.path.join(d, n), encoding="utf-8").read()
                    for n in os.listdir(d) if n.isdigit()}
        try:
            rows = (spark.read.text(path, wholetext=True)
                    .select(F.input_file_name().alias("f"), "value").collect())
        except Exception as e:  # AnalysisException: PATH_NOT_FOUND on a fresh checkpoint
            if "PATH_NOT_FOUND" in str(e) or "does not exist" in str(e):
                return {}
            raise
        out = {}
        for r in rows:
            name = r.f.rstrip("/").rsplit("/", 1)[-1]
            if name.isdigit():
                out[int(name)] = r.value
        return out

    offsets, commits = entries("offsets"), entries("commits")
    out = []
    for bid in sorted(offsets):
        wm, ends = parse_offset_log_entry(offsets[bid])
        out.append(MicroBatch(bid, wm, ends, bid in commits))
    return out


def _local_path(path: str) -> str | None:
    """The local file system path of ``path`` (plain or file:), None for other schemes."""
    if path.startswith("file:"):
        return path[len("file:"):] or "/"
    if path.split("/", 1)[0].endswith(":"):
        return None  # hdfs://, s3a://, ...
    return path


class CheckError(RuntimeError):
    """The check cannot run (e.g. the input topic does not exist)."""


@dataclass
class CheckReport:
    log_records: int = 0  # sum of (log end - log start) offsets of the input topic
    records: int = 0  # records the batch read returned
    events: int = 0  # of which well-formed events (the rest: by_status["malformed"])
    by_status: dict[str, int] = field(default_factory=dict)
    committed_batches: int = 0
    final_watermark_ms: int = 0
    expected_windows: int = 0
    parquet_windows: int = 0
    topic_records: int = 0
    topic_windows: int = 0
    mismatches: dict[str, int] = field(default_factory=dict)

    @property
    def accounted(self) -> bool:
        """The read returned every record the log offsets promise, and every event has
        exactly one fate."""
        return (self.records == self.log_records
                and sum(self.by_status.get(s, 0) for s in STATUSES) == self.events)

    @property
    def ok(self) -> bool:
        return (self.accounted and not any(self.mismatches.values())
                and self.expected_windows == self.parquet_windows == self.topic_windows)


def _classify(spark: SparkSession, events: DataFrame, committed: list[MicroBatch],
              window_ms: int) -> DataFrame:
    """Add ``batch_id`` (-1: unprocessed), ``window_*_ms`` and ``status`` to every record,
    keeping only the columns the check needs."""
    import numpy as np
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    partitions = sorted({p for b in committed for _, p in b.end_offsets})
    # ends[p][b]: end offset of partition p after batch b (non-decreasing in b).
    ends: dict[int, np.ndarray] = {}
    for p in partitions:
        running, col = 0, []
        for b in committed:
            running = max(running, max((o for (_, pp), o in b.end_offsets.items() if pp == p),
                                       default=running))
            col.append(running)
        ends[p] = np.asarray(col, dtype=np.int64)

    def batch_of(partition, offset):
        out = np.full(len(offset), -1, dtype=np.int64)
        parts = partition.to_numpy()
        offs = offset.to_numpy()
        for p, e in ends.items():
            mask = parts == p
            if mask.any():
                idx = np.searchsorted(e, offs[mask], side="right")
                out[mask] = np.where(idx < len(e), idx, -1)
        return pd.Series(out)

    # Real classes, not the strings `from __future__ import annotations` would leave: Spark
    # infers the UDF kind (Series -> Series) from the hints.
    batch_of.__annotations__ = {"partition": pd.Series, "offset": pd.Series,
                                "return": pd.Series}
    # PySpark's overloads cannot see the hints set just above (they are set at run time).
    batch_of_udf = F.pandas_udf(batch_of, T.LongType())  # type: ignore[call-overload]
    wm_late = [(b.batch_id, committed[i - 1].watermark_ms if i else 0)
               for i, b in enumerate(committed)]
    wm_df = spark.createDataFrame(wm_late, "batch_id long, wm_late_ms long")
    final_wm = committed[-1].watermark_ms if committed else 0
    return (events
            .select("partition", "offset", "ts", "country", "event_type", "amount_cents",
                    "malformed")
            # Tumbling windows aligned to the epoch, as Spark's window() places them; not
            # window() itself, which filters out rows without a time (the malformed ones).
            .withColumn("window_start_ms", F.unix_millis("ts")
                        - F.pmod(F.unix_millis("ts"), F.lit(window_ms)))
            .withColumn("window_end_ms", F.col("window_start_ms") + F.lit(window_ms))
            .withColumn("batch_id", batch_of_udf(F.col("partition"), F.col("offset")))
            .join(F.broadcast(wm_df), "batch_id", "left")
            .withColumn("status",
                        F.when(F.col("malformed"), "malformed")
                        .when(F.col("batch_id") < 0, "unprocessed")
                        .when(F.col("window_end_ms") <= F.col("wm_late_ms"), "dropped")
                        .when(F.col("window_end_ms") <= F.lit(final_wm), "emitted")
                        .otherwise("open")))


def _read_topic(spark: SparkSession, settings: PipelineSettings, topic: str,
                ending: dict[int, int] | None = None) -> DataFrame:
    # read_committed: the output of a transactional sink run that died before its commit is
    # aborted and must not count (a topic without transactions reads the same either way).
    return (spark.read.format("snakka")
            .options(**settings.kafka_options())
            .option("kafka.isolation.level", "read_committed")
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest" if ending is None else
                    json.dumps({topic: {str(p): o for p, o in ending.items()}}))
            .load())


def _log_offsets(settings: PipelineSettings, topic: str) -> dict[int, tuple[int, int]] | None:
    """{partition: (log start, log end)} through the Kafka protocol; None: no such topic."""
    import asyncio

    from snakka.client.admin import Admin

    async def go() -> dict[int, tuple[int, int]] | None:
        async with Admin(settings.bootstrap_servers, client_id="snakka-pipeline-check",
                         config=settings.client_config) as admin:
            (meta,) = await admin.list_topics([topic])
            if meta.error_code:
                return None
            return await admin.partition_offsets(topic, len(meta.partitions))

    return asyncio.run(go())


def run_check(spark: SparkSession, settings: PipelineSettings, *,
              console: Console | None = None) -> CheckReport:
    """Cross-check the streaming job's sinks against the full input history (module doc)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ensure_registered(spark)
    report = CheckReport()
    committed = [b for b in read_checkpoint(spark, settings.checkpoint_dir) if b.committed]
    report.committed_batches = len(committed)
    report.final_watermark_ms = committed[-1].watermark_ms if committed else 0

    # The read ends at the log end offsets listed here, so that the record count can be
    # checked against the offsets even while a producer is still writing.
    offsets = _log_offsets(settings, settings.input_topic)
    if offsets is None:
        raise CheckError(f"input topic '{settings.input_topic}' does not exist")
    report.log_records = sum(end - start for start, end in offsets.values())
    # Only the narrow classified rows are cached, not the records' values.
    raw = _read_topic(spark, settings, settings.input_topic,
                      {p: end for p, (_start, end) in offsets.items()})
    classified = _classify(spark, parse_events(raw, keep_malformed=True), committed,
                           settings.window_ms).cache()
    report.by_status = {r.status: r["count"] for r in classified.groupBy("status").count()
                        .collect()}
    report.records = sum(report.by_status.values())
    report.events = report.records - report.by_status.get("malformed", 0)

    # The first committed batch whose watermark reached a window's end emitted it.
    wms = spark.createDataFrame([(b.batch_id, b.watermark_ms) for b in committed],
                                "batch_id long, wm long")
    expected = (classified.where(F.col("status") == "emitted")
                .groupBy("window_start_ms", "window_end_ms", "country")
                .agg(*aggregate_exprs()))
    emitted_by = (expected.select("window_end_ms").distinct()
                  .join(F.broadcast(wms), F.col("wm") >= F.col("window_end_ms"))
                  .groupBy("window_end_ms").agg(F.min("batch_id").alias("batch_id")))
    expected = expected.join(emitted_by, "window_end_ms").select(*AGGREGATE_COLUMNS, "batch_id")
    expected = expected.cache()
    report.expected_windows = expected.count()

    parquet = _read_parquet(spark, settings.parquet_dir)
    if parquet is not None:
        parquet = parquet.select(*AGGREGATE_COLUMNS, F.col("batch_id").cast("long")).cache()
        report.parquet_windows = parquet.count()
        report.mismatches["expected not in parquet"] = expected.exceptAll(parquet).count()
        report.mismatches["parquet not expected"] = parquet.exceptAll(expected).count()
    else:
        report.mismatches["expected not in parquet"] = report.expected_windows
        report.mismatches["parquet not expected"] = 0

    if _log_offsets(settings, settings.output_topic) is None:
        report.mismatches["expected not in topic"] = report.expected_windows
        report.mismatches["topic not expected"] = 0
        _finish(report, console, classified, expected, parquet)
        return report
    out = _read_topic(spark, settings, settings.output_topic)
    report.topic_records = out.count()
    latest = (out.withColumn("n", F.row_number().over(
                  Window.partitionBy("key").orderBy(F.col("offset").desc())))
              .where(F.col("n") == 1)
              .select(F.from_json(F.col("value").cast("string"), aggregate_value_schema())
                      .alias("a"))
              .select("a.*").cache())
    report.topic_windows = latest.count()
    if settings.transactional_id_prefix is not None:
        # Exactly-once output: no key twice, not even byte-identical copies.
        report.mismatches["topic duplicates"] = report.topic_records - report.topic_windows
    exp_rows = expected.drop("batch_id")
    report.mismatches["expected not in topic"] = exp_rows.exceptAll(latest).count()
    report.mismatches["topic not expected"] = latest.exceptAll(exp_rows).count()
    _finish(report, console, classified, expected, parquet, latest)
    return report


def _finish(report: CheckReport, console: Console | None, *cached: DataFrame | None) -> None:
    for df in cached:
        if df is not None:
            df.unpersist()
    if console is not None:
        print_report(console, report)


def _read_parquet(spark: SparkSession, path: str) -> DataFrame | None:
    try:
        return spark.read.parquet(path)
    except Exception as e:  # no batch has closed a window yet: no directory
        if "PATH_NOT_FOUND" in str(e) or "UNABLE_TO_INFER_SCHEMA" in str(e) \
                or "does not exist" in str(e):
            return None
        raise


def print_report(console: Console, r: CheckReport) -> None:
    from rich.table import Table

    from .events import format_ts

    t = Table(title="Cross-check: full topic history (batch) vs streaming output",
              show_header=True)
    t.add_column("what")
    t.add_column("count", justify="right")
    t.add_row("records in the input topic (log offsets / read)",
              f"{r.log_records:,} / {r.records:,}", style=None if r.records == r.log_records
              else "red")
    if r.by_status.get("malformed"):
        t.add_row("  not an event (malformed JSON, no ts/country)",
                  f"{r.by_status['malformed']:,}")
    t.add_row("events", f"{r.events:,}")
    for s, label in (("emitted", "  in windows the stream emitted"),
                     ("dropped", "  late, dropped by the watermark"),
                     ("open", "  in windows still open (waiting for the watermark)"),
                     ("unprocessed", "  not yet processed")):
        t.add_row(label, f"{r.by_status.get(s, 0):,}")
    t.add_row("committed micro-batches", f"{r.committed_batches:,}")
    t.add_row("final watermark", format_ts(r.final_watermark_ms) if r.final_watermark_ms
              else "-")
    t.add_row("windows expected (batch recomputation)", f"{r.expected_windows:,}")
    t.add_row("windows in Parquet", f"{r.parquet_windows:,}")
    t.add_row("windows in the output topic (records)",
              f"{r.topic_windows:,} ({r.topic_records:,})")
    for k, v in r.mismatches.items():
        t.add_row(f"mismatching rows: {k}", f"{v:,}", style="red" if v else None)
    console.print(t)
    if r.ok:
        console.print("[bold green]VERDICT: OK[/bold green] every event is accounted for and "
                      "both sinks hold exactly the aggregates the full history implies.")
    else:
        console.print("[bold red]VERDICT: MISMATCH[/bold red] see the rows above.")
