"""The one-command demo (``snakka pipeline demo``) end to end, on the embedded default's code
path: a live generator on 3 partitions, the streaming job with a processing-time trigger
(batch boundaries depend on timing here), progress output, and the batch cross-check, whose
verdict must be exact whatever the boundaries were. Small data, the shared session."""

from __future__ import annotations

import io

from confluent_kafka import Producer
from rich.console import Console

from snakka.demo import run_demo
from snakka.spark.pipeline.session import prepare_output_dir


def test_demo_runs_and_cross_check_agrees(spark, spark_broker, new_topic, tmp_path):
    # A record that is not an event: the job must skip it, the check must count it.
    in_topic = new_topic(3)
    p = Producer({"bootstrap.servers": spark_broker.bootstrap_servers})
    p.produce(in_topic, key=b"u1", value=b"not json")
    assert p.flush(30) == 0
    out = io.StringIO()
    console = Console(file=out, width=120)
    result = run_demo(console=console, spark=spark, bootstrap=spark_broker.bootstrap_servers,
                      events=4000, rate=2000, seed=3, partitions=3,
                      events_per_second=200,
                      output_dir=str(tmp_path / "out"), input_topic=in_topic,
                      output_topic="demo-out", window_ms=2_000, watermark_delay_ms=2_000,
                      max_offsets_per_trigger=1000, trigger_interval="500 milliseconds",
                      timeout_s=240)
    text = out.getvalue()
    assert result.produced.events == 4000
    assert result.stream.input_rows == 4001 and result.stream.final_lag == 0
    assert result.stream.batches >= 4  # at most 1000 records per micro-batch
    r = result.report
    assert r.ok, text
    assert r.log_records == r.records == 4001 and r.by_status["malformed"] == 1
    assert r.events == 4000 and r.by_status.get("unprocessed", 0) == 0
    assert r.by_status["emitted"] > 0 and r.parquet_windows > 0
    assert r.by_status.get("dropped", 0) > 0  # the 1-2 minute late events
    assert "batch   rows" in text and "VERDICT: OK" in text


def test_prepare_output_dir_refuses_foreign_files(tmp_path):
    (tmp_path / "checkpoint").mkdir()
    prepare_output_dir(str(tmp_path))
    assert not tmp_path.exists()
    tmp_path.mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    try:
        prepare_output_dir(str(tmp_path))
    except RuntimeError as e:
        assert "notes.txt" in str(e)
    else:
        raise AssertionError("a directory with foreign files was accepted")
    assert (tmp_path / "notes.txt").exists()
