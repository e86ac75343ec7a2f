"""Streaming reads through the ``snakka`` source: admission control
(maxOffsetsPerTrigger, split across partitions like Spark's Kafka source), AvailableNow,
restart from the checkpoint with every record exactly once, failOnDataLoss."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer


def produce_values(bootstrap: str, topic: str, values_by_partition: dict[int, list[str]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part, values in values_by_partition.items():
        for v in values:
            p.produce(topic, value=v.encode(), key=v.encode(), partition=part)
    assert p.flush(60) == 0


def stream(spark, bootstrap: str, topic: str, **options):
    r = (spark.readStream.format("snakka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def batch_sizes(q) -> list[int]:
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"] > 0]


def test_max_offsets_per_trigger_available_now(spark, spark_broker, new_topic, tmp_path):
    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=3)
    produce_values(bs, topic, {0: [f"a{i}" for i in range(1000)],
                               1: [f"b{i}" for i in range(500)],
                               2: [f"c{i}" for i in range(1500)]})
    df = stream(spark, bs, topic, startingOffsets="earliest", maxOffsetsPerTrigger="600")
    q = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(180)
    # 3000 records, 600 per trigger, shared 2:1:3 by backlog: five batches of exactly 600.
    assert batch_sizes(q) == [600] * 5
    offsets = [p["sources"][0]["endOffset"] for p in q.recentProgress if p["numInputRows"]]
    first = json.loads(offsets[0]) if isinstance(offsets[0], str) else offsets[0]
    assert first == {topic: {"0": 200, "1": 100, "2": 300}}

    # Without a limit, AvailableNow reads everything in one batch.
    df = stream(spark, bs, topic, startingOffsets="earliest")
    q = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck2"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(180)
    assert batch_sizes(q) == [3000]


def test_restart_from_checkpoint_exactly_once(spark, spark_broker, new_topic, tmp_path):
    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=2)
    produce_values(bs, topic, {0: [f"x{i}" for i in range(1500)],
                               1: [f"y{i}" for i in range(1500)]})
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")

    def start(trigger: dict):
        df = stream(spark, bs, topic, startingOffsets="earliest", maxOffsetsPerTrigger="200")
        return (df.selectExpr("cast(value as string) as v", "partition", "offset")
                .writeStream.format("parquet").option("path", sink)
                .option("checkpointLocation", ck).trigger(**trigger).start())

    q = start({"processingTime": "0 seconds"})
    deadline = time.monotonic() + 120
    while len(batch_sizes(q)) < 2:  # stop mid-way: after two of the fifteen batches
        assert time.monotonic() < deadline, "the query made no progress"
        assert q.exception() is None
        time.sleep(0.05)
    q.stop()
    done_first = sum(batch_sizes(q))
    assert 400 <= done_first < 3000

    produce_values(bs, topic, {0: [f"x{i}" for i in range(1500, 2000)],
                               1: [f"y{i}" for i in range(1500, 2000)]})
    q = start({"availableNow": True})
    assert q.awaitTermination(180)
    assert q.exception() is None
    rows = spark.read.parquet(sink).collect()
    values = [r.v for r in rows]
    assert len(values) == 4000, f"{len(values)} rows in the sink (duplicates or gaps)"
    assert set(values) == {f"{c}{i}" for c in "xy" for i in range(2000)}
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in range(2) for o in range(2000)]


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.delete_records([TopicPartition(topic, partition, before)])
    for f in futs.values():
        f.result(30)


def test_fail_on_data_loss(spark, spark_broker, new_topic, tmp_path):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=1)
    produce_values(bs, topic, {0: [f"v{i}" for i in range(100)]})
    # A stream that has read 0..99, then records 0..149 are deleted while it is stopped.
    ck, sink = str(tmp_path / "ck"), str(tmp_path / "sink")

    def run(fail: str):
        df = stream(spark, bs, topic, startingOffsets="earliest", failOnDataLoss=fail)
        q = (df.selectExpr("cast(value as string) as v").writeStream.format("parquet")
             .option("path", sink).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination(180)
        except Exception:  # noqa: BLE001 - the failure is asserted through q.exception()
            pass
        return q

    q = run("true")
    assert q.exception() is None and batch_sizes(q) == [100]
    produce_values(bs, topic, {0: [f"v{i}" for i in range(100, 200)]})
    delete_records(bs, topic, 0, 150)

    q = run("true")
    assert q.exception() is not None
    assert "offsets 100..149 are no longer available" in str(q.exception())
    assert "failOnDataLoss=false" in str(q.exception())

    q = run("false")
    assert q.exception() is None
    got = sorted(r.v for r in spark.read.parquet(sink).collect())
    assert got == sorted(f"v{i}" for i in list(range(100)) + list(range(150, 200)))

    # The batch source applies the same rule.
    def batch(fail: str):
        return (spark.read.format("snakka").option("kafka.bootstrap.servers", bs)
                .option("subscribe", topic).option("failOnDataLoss", fail)
                .option("startingOffsets", json.dumps({topic: {"0": 120}})).load())

    with pytest.raises((PySparkException, Py4JJavaError), match="no longer available"):
        batch("true").collect()
    assert batch("false").count() == 50


def test_new_partitions_are_read_from_the_start(spark, spark_broker, new_topic, tmp_path):
    from confluent_kafka.admin import AdminClient, NewPartitions

    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=1)
    produce_values(bs, topic, {0: ["a", "b"]})
    ck = str(tmp_path / "ck")

    def run():
        df = stream(spark, bs, topic, startingOffsets="earliest")
        q = (df.writeStream.format("noop").option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        assert q.awaitTermination(180)
        assert q.exception() is None
        return sum(batch_sizes(q))

    assert run() == 2
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    produce_values(bs, topic, {0: ["c"], 1: ["d", "e", "f"]})
    assert run() == 4


def test_deleted_topic_is_data_loss(spark, spark_broker, new_topic, tmp_path):
    """A topic deleted under a running read: failOnDataLoss decides (as a batch read of a
    range planned before the deletion)."""
    from confluent_kafka.admin import AdminClient

    from snakka.spark.options import parse_read_options
    from snakka.spark.reader import SnakkaDataLossError, SnakkaStreamReader, read_partition

    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=1)
    produce_values(bs, topic, {0: [f"v{i}" for i in range(10)]})
    opts = {"kafka.bootstrap.servers": bs, "subscribe": topic, "startingOffsets": "earliest"}
    planner = SnakkaStreamReader(parse_read_options(opts, streaming=True))
    start = planner.initialOffset()
    end = planner.latestOffset(start, planner.getDefaultReadLimit())
    parts = planner.partitions(start, end)
    planner.stop()
    admin = AdminClient({"bootstrap.servers": bs})
    admin.delete_topics([topic])[topic].result(30)

    with pytest.raises(SnakkaDataLossError, match=f"{topic}-0 no longer exists"):
        list(read_partition(parts[0]))
    lenient = SnakkaStreamReader(parse_read_options({**opts, "failOnDataLoss": "false"},
                                                    streaming=True))
    parts = lenient.partitions(start, end)
    assert list(read_partition(parts[0])) == []
    # Planning after the deletion: the partition disappeared.
    with pytest.raises(SnakkaDataLossError, match="disappeared"):
        planner.partitions(end, planner.latestOffset(end, planner.getDefaultReadLimit()))
    planner.stop()
