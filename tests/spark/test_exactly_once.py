"""The exactly-once sink (option ``transactionalIdPrefix``) against the real broker.

* On the wire, without Spark: the tasks' side (``write_arrow`` with a TaskInfo) and the
  driver's (``end_transactions``) driven directly through every crash point of a micro-batch
  and its replay; a read_committed confluent-kafka consumer must read each record once (the
  same matrix as the in-memory model, tests/spark/test_exactly_once_model.py).
* With Spark: a streaming query whose ``foreachBatch`` fails after the sink committed
  micro-batch 0 and before Spark's checkpoint commit; the restarted query replays batch 0,
  and the output holds each record once under read_committed. And the stream sink itself
  (``writeStream.format("snakka")``), whose driver-side commit ends the tasks' transactions.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from snakka.spark.options import parse_write_options
from snakka.spark.writer import TaskInfo, end_transactions, write_arrow

pytestmark = pytest.mark.timeout(300)


def read_committed(bootstrap: str, topic: str, partitions: int, *,
                   isolation: str = "read_committed") -> list[bytes]:
    """Every value of ``topic`` a consumer with ``isolation`` reads up to the end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "auto.offset.reset": "earliest"})
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
        c.assign(tps)
        out: list[bytes] = []
        done: set[int] = set()
        for _ in range(200):
            if len(done) == partitions:
                break
            for m in c.consume(100, timeout=0.2):
                if m.error() is None:
                    out.append(m.value())
            for p in range(partitions):
                pos = c.position([TopicPartition(topic, p)])[0].offset
                lso = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                              cached=False)[1]
                if pos >= ends[p] or (pos >= 0 and pos >= lso):
                    done.add(p)
        return out
    finally:
        c.close()


def _settings(bootstrap: str, topic: str, prefix: str):
    return parse_write_options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                                "transactionalIdPrefix": prefix,
                                "kafka.transaction.timeout.ms": "60000"})


def _rows(*values: bytes) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_pydict({"key": [b"k-" + v for v in values],
                                        "value": list(values)})]


@pytest.mark.parametrize("crash_after", [0, 1, 2])
def test_replays_on_the_wire_give_each_record_once(spark_broker, new_topic, crash_after):
    """Batch 0 commits; the driver dies after ``crash_after`` of batch 1's two EndTxn(commit)
    (2: after all, before Spark's checkpoint commit); the replay of batch 1 runs to the end."""
    bs = spark_broker.bootstrap_servers
    topic = new_topic(2)
    replay = _wire_replay(bs, topic, f"eos-wire-{crash_after}", crash_after)
    assert [m.already_committed for m in replay] == [crash_after >= 1, crash_after >= 2]
    got = read_committed(bs, topic, 2)
    assert sorted(got) == sorted(b"b%d-%s" % (b, x) for b in (0, 1) for x in (b"a", b"b", b"c"))
    # The aborted first attempt is in the log all the same (read_uncommitted sees it).
    if crash_after < 2:
        assert len(read_committed(bs, topic, 2, isolation="read_uncommitted")) > len(got)


def _wire_replay(bs: str, topic: str, prefix: str, crash_after: int) -> list:
    s = _settings(bs, topic, prefix)

    def batch(b: int, commits: int | None = None) -> list:
        msgs = [write_arrow(s, iter(_rows(b"b%d-a" % b, b"b%d-b" % b)), TaskInfo(0, b, "q")),
                write_arrow(s, iter(_rows(b"b%d-c" % b)), TaskInfo(1, b, "q"))]
        end_transactions(s, msgs if commits is None else msgs[:commits], commit=True,
                         batch_id=b)
        return msgs

    batch(0)
    batch(1, crash_after)
    return batch(1)


def test_the_same_against_the_reference_kafka(reference_kafka):
    """Kafka is the judge of the sink's protocol: the crash-during-commit replay against the
    reference Kafka 4.0 gives each record once too."""
    from confluent_kafka.admin import AdminClient, NewTopic

    bs = reference_kafka.bootstrap_servers
    topic = "snakka-spark-eos-wire"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    replay = _wire_replay(bs, topic, "eos-ref", 1)
    assert [m.already_committed for m in replay] == [True, False]
    got = read_committed(bs, topic, 2)
    assert sorted(got) == sorted(b"b%d-%s" % (b, x) for b in (0, 1) for x in (b"a", b"b", b"c"))


def test_abort_and_a_plain_batch_write(spark_broker, new_topic):
    """The driver's abort leaves nothing visible and unblocks the partition; a write outside
    a stream (no batch id) is transactional but keeps no marker."""
    bs = spark_broker.bootstrap_servers
    topic = new_topic(1)
    s = _settings(bs, topic, "eos-abort")
    msgs = [write_arrow(s, iter(_rows(b"x", b"y")), TaskInfo(0, 4, "q"))]
    end_transactions(s, msgs, commit=False, batch_id=4)
    plain = [write_arrow(s, iter(_rows(b"z")), TaskInfo(0, None))]
    assert plain[0].transactional_id == "eos-abort-0"
    end_transactions(s, plain, commit=True)
    assert read_committed(bs, topic, 1) == [b"z"]


STREAM_FAIL = "snakka-test-fail-after-sink"


def test_a_streaming_query_replayed_after_its_sink_committed(spark, spark_broker, new_topic,
                                                             tmp_path):
    """writeStream.format("snakka") with transactionalIdPrefix: the query fails after the
    sink's commit of batch 0 and before Spark's checkpoint commit (a StreamingQueryListener
    cannot do that; a failing second sink in the same batch, foreachBatch, can: Spark commits
    the checkpoint only when the whole batch succeeded). The restarted query replays batch 0:
    read_committed sees every input record once in the output."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    bs = spark_broker.bootstrap_servers
    src, out = new_topic(2), new_topic(2)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs})
    for i in range(200):
        p.produce(src, key=b"%d" % i, value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    checkpoint = str(tmp_path / "ck")
    fail_once = {"armed": True}

    def sink(df, batch_id):
        (df.write.format("snakka").mode("append").option("kafka.bootstrap.servers", bs)
         .option("topic", out).option("transactionalIdPrefix", "eos-stream").save())
        if fail_once["armed"]:
            fail_once["armed"] = False
            raise RuntimeError(STREAM_FAIL)

    def run():
        raw = (spark.readStream.format("snakka").option("kafka.bootstrap.servers", bs)
               .option("subscribe", src).option("startingOffsets", "earliest").load())
        q = (raw.select("key", F.concat(F.col("value"), F.lit(b"!")).alias("value"))
             .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination(120)
        except StreamingQueryException:
            pass  # q.exception() tells
        return q

    first = run()
    assert first.exception() is not None and STREAM_FAIL in str(first.exception())
    # The batch reached Kafka before the failure: committed, visible.
    assert len(read_committed(bs, out, 2)) == 200
    second = run()
    assert second.exception() is None, second.exception()
    got = read_committed(bs, out, 2)
    assert sorted(got) == sorted(b"v%d!" % i for i in range(200))


def test_the_stream_sink_commits_each_micro_batch(spark, spark_broker, new_topic, tmp_path):
    """writeStream.format("snakka") with transactionalIdPrefix: Spark's stream writer commit
    (on the driver) ends the tasks' transactions; two runs from one checkpoint."""
    from confluent_kafka import Producer

    bs = spark_broker.bootstrap_servers
    src, out = new_topic(2), new_topic(2)
    checkpoint = str(tmp_path / "ck")
    p = Producer({"bootstrap.servers": bs})
    for part in range(2):
        for i in range(part * 100, part * 100 + 100):
            p.produce(src, value=b"s%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        q = (spark.readStream.format("snakka").option("kafka.bootstrap.servers", bs)
             .option("subscribe", src).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "60").load()
             .select("value").writeStream.format("snakka")
             .option("kafka.bootstrap.servers", bs).option("topic", out)
             .option("transactionalIdPrefix", "eos-sink")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        assert q.awaitTermination(120)
        assert q.exception() is None, q.exception()
    assert sorted(read_committed(bs, out, 2)) == sorted(b"s%d" % i for i in range(200))
