"""Acceptance tests of the reference pipeline (issue 5, scope item 2).

The main test runs the real streaming job (``format("snakka")`` source, ``from_json``,
watermark, event-time windows, ``foreachBatch`` to Parquet and to a topic) over a generated
clickstream and compares both sinks with a pure-Python computation over the same events
(:func:`snakka.spark.pipeline.reference.simulate_streaming`), late-event handling included.

Making the late events deterministic
    Whether Spark drops a late row depends on the micro-batch it arrives in (the late filter
    uses the previous batch's watermark, see reference.py). The test pins the batch boundaries:
    one input partition, ``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger=M``, so micro-batch
    ``k`` is exactly offsets ``[k*M, (k+1)*M)``, whatever the machine's speed. AvailableNow then
    runs one final no-data batch, because the last data batch moved the watermark (Spark runs
    one whenever that would evict state); the model gets that empty batch too, and the test
    checks the checkpoint's offset log (batch ends and watermarks) against the model, so a
    change in Spark's batching fails loudly instead of silently shifting the oracle.
    The generator's event rate (50 events/s of event time) and the 5 s window/watermark are
    chosen so that every kind of event occurs: on time, late but still counted, dropped.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from snakka.spark.pipeline.check import read_checkpoint, run_check
from snakka.spark.pipeline.events import generate_events
from snakka.spark.pipeline.generator import produce_events
from snakka.spark.pipeline.job import (
    AGGREGATE_COLUMNS,
    AggregateSinks,
    PipelineSettings,
    start_query,
)
from snakka.spark.pipeline.reference import simulate_streaming, window_start

N_EVENTS = 2000
PER_TRIGGER = 500
WINDOW_MS = 5_000
DELAY_MS = 5_000
QUERY_TIMEOUT_S = 240


def _read_topic_values(spark, bootstrap: str, topic: str,
                       isolation: str = "read_committed") -> list[tuple[bytes, bytes]]:
    rows = (spark.read.format("snakka").option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.isolation.level", isolation)
            .option("subscribe", topic).load().orderBy("partition", "offset")
            .select("key", "value").collect())
    return [(bytes(r.key), bytes(r.value)) for r in rows]


def _as_record(t: tuple) -> tuple[bytes, bytes]:
    """A model row -> the exact record the job must write (key, JSON value)."""
    key = f"{t[0]}|{t[2]}".encode()
    return key, json.dumps(dict(zip(AGGREGATE_COLUMNS, t, strict=True)),
                           separators=(",", ":")).encode()


@pytest.fixture(scope="module")
def pipeline_run(spark, spark_broker, tmp_path_factory):
    """Produce the clickstream to a 1-partition topic and run the job with AvailableNow."""
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = spark_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for t in ("pipeline-in", "pipeline-out"):
        admin.create_topics([NewTopic(t, 1, 1)])[t].result(30)
    events = list(generate_events(N_EVENTS, seed=11, events_per_second=50))
    stats = asyncio.run(produce_events(bootstrap, "pipeline-in", events, partitions=1))
    assert stats.events == N_EVENTS
    settings = PipelineSettings(
        bootstrap_servers=bootstrap, output_dir=str(tmp_path_factory.mktemp("pipeline")),
        input_topic="pipeline-in", output_topic="pipeline-out", window_ms=WINDOW_MS,
        watermark_delay_ms=DELAY_MS, max_offsets_per_trigger=PER_TRIGGER, available_now=True)
    query = start_query(spark, settings)
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the AvailableNow query did not finish"
    assert query.exception() is None, query.exception()
    batches = [events[i:i + PER_TRIGGER] for i in range(0, N_EVENTS, PER_TRIGGER)]
    model = simulate_streaming(batches + [[]], window_ms=WINDOW_MS, watermark_delay_ms=DELAY_MS)
    return settings, events, model


def test_batches_and_watermarks_are_the_modelled_ones(spark, pipeline_run):
    settings, _events, model = pipeline_run
    log = read_checkpoint(spark, settings.checkpoint_dir)
    assert all(b.committed for b in log)
    assert [b.end_offsets for b in log] == [
        {("pipeline-in", 0): min(N_EVENTS, (k + 1) * PER_TRIGGER)}
        for k in range(N_EVENTS // PER_TRIGGER + 1)]
    assert [b.watermark_ms for b in log] == model.watermarks


def test_aggregates_equal_pure_python_reference(spark, spark_broker, pipeline_run):
    settings, events, model = pipeline_run
    # The run exercises every case: dropped rows, and rows behind the watermark of their
    # arrival batch that still count (their window was open when the batch started).
    assert len(model.dropped) > 0 and model.emitted and model.open
    delays = {e.seq: e.arrival_ms - e.ts_ms for e in events}
    dropped = {e.seq for e in model.dropped}
    assert any(d > DELAY_MS and s not in dropped for s, d in delays.items())
    assert model.emitted_events + len(model.dropped) + model.open_events == N_EVENTS

    want = sorted(a.as_tuple() + (model.emitted_in_batch[k],) for k, a in model.emitted.items())
    parquet = spark.read.parquet(settings.parquet_dir).select(*AGGREGATE_COLUMNS, "batch_id")
    assert sorted(tuple(r) for r in parquet.collect()) == want

    # The topic holds exactly one record per emitted window (no replay happened), in the
    # order of the batches that emitted them, with the job's key and JSON layout.
    records = _read_topic_values(spark, spark_broker.bootstrap_servers, settings.output_topic)
    assert sorted(records) == sorted(_as_record(t[:-1]) for t in want)
    batch_of_key = {_as_record(t[:-1])[0]: t[-1] for t in want}
    order = [batch_of_key[k] for k, _v in records]
    assert order == sorted(order)


def test_batch_cross_check_accounts_for_every_event(spark, pipeline_run):
    settings, _events, model = pipeline_run
    report = run_check(spark, settings)
    assert report.ok, report
    assert report.events == report.records == report.log_records == N_EVENTS
    assert report.by_status == {"emitted": model.emitted_events,
                                "dropped": len(model.dropped),
                                "open": model.open_events} | (
        {"unprocessed": 0} if "unprocessed" in report.by_status else {})
    assert report.expected_windows == report.parquet_windows == len(model.emitted)
    assert report.final_watermark_ms == model.watermarks[-1]


@pytest.mark.parametrize("transactional", [True, False])
def test_a_replayed_batch_changes_neither_sink(spark, spark_broker, new_topic, tmp_path,
                                               transactional):
    """Spark re-runs foreachBatch with the same batch id after a failure: Parquet must hold
    the rows once, and the topic each record once with the transactional sink (the default),
    at most byte-identical copies without it (last value per key exact). Spark tells the
    sink's tasks the batch and query ids through local properties; set here as Spark does."""
    out_topic = new_topic(1)
    settings = PipelineSettings(bootstrap_servers=spark_broker.bootstrap_servers,
                                output_dir=str(tmp_path), output_topic=out_topic,
                                **({} if transactional else {"transactional_id_prefix": None}))
    rows = [(1_767_225_600_000, 1_767_225_610_000, "DE", 3, 1, 1, 0, 1, 995),
            (1_767_225_600_000, 1_767_225_610_000, "US", 1, 1, 0, 0, 0, 0)]
    df = spark.createDataFrame(rows, "window_start_ms long, window_end_ms long, country string, "
                                     "events long, page_views long, clicks long, "
                                     "add_to_carts long, purchases long, revenue_cents long")
    sinks = AggregateSinks(settings)
    sc = spark.sparkContext
    sc.setLocalProperty("sql.streaming.queryId", f"replay-test-{out_topic}")
    try:
        for batch_id in (7, 7, 8):  # 7 twice: the replay
            sc.setLocalProperty("streaming.sql.batchId", str(batch_id))
            sinks(df if batch_id == 7 else df.limit(0), batch_id)  # 8 closes no window
    finally:
        sc.setLocalProperty("streaming.sql.batchId", None)
        sc.setLocalProperty("sql.streaming.queryId", None)
    parquet = spark.read.parquet(settings.parquet_dir)
    assert sorted(tuple(r) for r in parquet.select(*AGGREGATE_COLUMNS, "batch_id").collect()) \
        == sorted(r + (7,) for r in rows)
    records = _read_topic_values(spark, spark_broker.bootstrap_servers, out_topic)
    assert sorted(records) == sorted([_as_record(r) for r in rows] * (1 if transactional else 2))


class _KilledAfterTheWrite(AggregateSinks):
    """Fails the query once, right after the first micro-batch that wrote both sinks: the
    sink's transactions are committed, Spark's checkpoint commit of the batch is not."""

    killed: list[int] = []

    def __call__(self, batch, batch_id: int) -> None:
        super().__call__(batch, batch_id)
        wrote = os.path.isdir(os.path.join(self.settings.parquet_dir, f"batch_id={batch_id}"))
        if wrote and not self.killed:
            self.killed.append(batch_id)
            raise RuntimeError(f"killed after the write of batch {batch_id}")


def test_a_micro_batch_replayed_after_its_output_was_committed(spark, spark_broker, new_topic,
                                                               tmp_path, monkeypatch):
    """The reference pipeline (transactional sink) is killed after a micro-batch's output
    reached the topic and before the checkpoint's commit; the restarted query replays that
    batch: the output topic holds each expected record exactly once under read_committed
    (and, the replay having written nothing, under read_uncommitted too)."""
    import snakka.spark.pipeline.job as job

    bootstrap = spark_broker.bootstrap_servers
    in_topic, out_topic = new_topic(1), new_topic(1)
    events = list(generate_events(N_EVENTS, seed=31, events_per_second=50))
    asyncio.run(produce_events(bootstrap, in_topic, events, partitions=1))
    settings = PipelineSettings(
        bootstrap_servers=bootstrap, output_dir=str(tmp_path), input_topic=in_topic,
        output_topic=out_topic, window_ms=WINDOW_MS, watermark_delay_ms=DELAY_MS,
        max_offsets_per_trigger=PER_TRIGGER, available_now=True)
    monkeypatch.setattr(job, "AggregateSinks", _KilledAfterTheWrite)
    _KilledAfterTheWrite.killed.clear()
    query = start_query(spark, settings)
    with pytest.raises(Exception, match="killed after the write"):
        query.awaitTermination(QUERY_TIMEOUT_S)
    (killed,) = _KilledAfterTheWrite.killed
    committed = [b.batch_id for b in read_checkpoint(spark, settings.checkpoint_dir)
                 if b.committed]
    assert killed not in committed  # Spark will replay it
    written = _read_topic_values(spark, bootstrap, out_topic)
    assert written  # ...although its output is already in the topic
    query = start_query(spark, settings)
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the restarted query did not finish"
    assert query.exception() is None, query.exception()
    batches = [events[i:i + PER_TRIGGER] for i in range(0, N_EVENTS, PER_TRIGGER)]
    model = simulate_streaming(batches + [[]], window_ms=WINDOW_MS, watermark_delay_ms=DELAY_MS)
    want = sorted(_as_record(a.as_tuple()) for a in model.emitted.values())
    assert sorted(_read_topic_values(spark, bootstrap, out_topic)) == want
    assert sorted(_read_topic_values(spark, bootstrap, out_topic,
                                     isolation="read_uncommitted")) == want


def test_restarted_query_continues_exactly(spark, spark_broker, new_topic, tmp_path):
    """Stop after the first part of the stream, produce more, restart from the checkpoint: the
    state (open windows) and the watermark survive, and the output of both runs together is
    what one uninterrupted run of the model gives (each run ends with its no-data batch)."""
    bootstrap = spark_broker.bootstrap_servers
    in_topic, out_topic = new_topic(1), new_topic(1)
    first = list(generate_events(1000, seed=21, events_per_second=50))
    # The second part continues in event time where the first one stopped.
    second = list(generate_events(1000, seed=22, events_per_second=50,
                                  start_ms=max(e.ts_ms for e in first)))
    settings = PipelineSettings(
        bootstrap_servers=bootstrap, output_dir=str(tmp_path), input_topic=in_topic,
        output_topic=out_topic, window_ms=WINDOW_MS, watermark_delay_ms=DELAY_MS,
        max_offsets_per_trigger=PER_TRIGGER, available_now=True)
    for part in (first, second):
        asyncio.run(produce_events(bootstrap, in_topic, part, partitions=1))
        query = start_query(spark, settings)
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the AvailableNow query did not finish"
        assert query.exception() is None, query.exception()

    def chunks(evs):
        return [evs[i:i + PER_TRIGGER] for i in range(0, len(evs), PER_TRIGGER)] + [[]]

    model = simulate_streaming(chunks(first) + chunks(second), window_ms=WINDOW_MS,
                               watermark_delay_ms=DELAY_MS)
    log = read_checkpoint(spark, settings.checkpoint_dir)
    assert [b.watermark_ms for b in log] == model.watermarks
    # The first run left windows open (in the state store) that the second run emitted.
    first_windows = {(window_start(e.ts_ms, WINDOW_MS), e.country) for e in first}
    assert any(model.emitted_in_batch[k] >= len(chunks(first)) for k in first_windows
               if k in model.emitted)
    want = sorted(a.as_tuple() + (model.emitted_in_batch[k],) for k, a in model.emitted.items())
    parquet = spark.read.parquet(settings.parquet_dir).select(*AGGREGATE_COLUMNS, "batch_id")
    assert sorted(tuple(r) for r in parquet.collect()) == want
    records = _read_topic_values(spark, bootstrap, out_topic)
    assert sorted(records) == sorted(_as_record(t[:-1]) for t in want)
