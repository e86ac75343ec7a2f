"""``kafka.isolation.level=read_committed`` on Spark reads, end to end (issue 11, item 6): a
confluent-kafka transactional producer writes committed and aborted transactions interleaved
with plain records over 2 partitions, and leaves one transaction open; the batch and the
streaming readers see exactly the committed records (and read_uncommitted sees them all), and
nothing at or after the open transaction's first record until it commits."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(300)


def _produce_transactions(bs: str, topic: str, tid: str) -> tuple[list[bytes], list[bytes], object]:
    """6 transactions over both partitions (odd ones aborted) plus plain records, then one
    transaction left open; returns (committed values, all values written, the producer)."""
    from confluent_kafka import Producer

    plain = Producer({"bootstrap.servers": bs})
    p = Producer({"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 5})
    p.init_transactions(30)
    committed: list[bytes] = []
    written: list[bytes] = []
    for t in range(6):
        p.begin_transaction()
        vals = [b"t%d-%d" % (t, i) for i in range(10)]
        for i, v in enumerate(vals):
            p.produce(topic, value=v, partition=i % 2)
        assert p.flush(30) == 0  # in the log before an abort (which purges unsent records)
        written += vals
        if t % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed += vals
        v = b"plain-%d" % t
        plain.produce(topic, value=v, partition=t % 2)
        assert plain.flush(30) == 0
        committed.append(v)
        written.append(v)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, value=b"open-%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    return committed, written, p


def _batch_values(spark, bs: str, topic: str, isolation: str) -> list[bytes]:
    df = (spark.read.format("snakka").option("kafka.bootstrap.servers", bs)
          .option("kafka.isolation.level", isolation).option("subscribe", topic).load())
    return [bytes(r.value) for r in df.select("value").collect()]


def test_batch_and_stream_reads_see_committed_transactions_only(spark, spark_broker,
                                                                new_topic, tmp_path):
    bs = spark_broker.bootstrap_servers
    topic = new_topic(2)
    committed, written, producer = _produce_transactions(bs, topic, "spark-rc-1")
    plain_after = [b"after-open-%d" % i for i in range(2)]
    from confluent_kafka import Producer

    q = Producer({"bootstrap.servers": bs})
    for i, v in enumerate(plain_after):
        q.produce(topic, value=v, partition=i % 2)
    assert q.flush(30) == 0

    # Batch: the open transaction holds back everything from its first record on.
    assert sorted(_batch_values(spark, bs, topic, "read_committed")) == sorted(committed)
    assert sorted(_batch_values(spark, bs, topic, "read_uncommitted")) == \
        sorted(written + [b"open-%d" % i for i in range(4)] + plain_after)

    # Streaming (AvailableNow), read_committed: the same, then the rest after the commit.
    out = tmp_path / "rows"
    checkpoint = str(tmp_path / "ck")

    def stream() -> list[bytes]:
        sq = (spark.readStream.format("snakka").option("kafka.bootstrap.servers", bs)
              .option("kafka.isolation.level", "read_committed").option("subscribe", topic)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "7")
              .load().select("value").writeStream.format("parquet")
              .option("path", str(out)).option("checkpointLocation", checkpoint)
              .trigger(availableNow=True).start())
        assert sq.awaitTermination(120)
        assert sq.exception() is None, sq.exception()
        return [bytes(r.value) for r in spark.read.parquet(str(out)).collect()]

    assert sorted(stream()) == sorted(committed)
    producer.commit_transaction(30)
    assert sorted(stream()) == sorted(committed + [b"open-%d" % i for i in range(4)]
                                      + plain_after)
