"""Batch and streaming writes through the ``snakka`` sink, checked with kafka-python:
keys, values, headers and partitions exactly as written; Spark's sink column rules."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, TopicPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from snakka.util.murmur2 import murmur2_partition

HEADER_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                    StructField("value", BinaryType())]))


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        out = []
        while len(out) < expected:
            batch = consumer.poll(timeout_ms=5000)
            if not batch:
                break
            for recs in batch.values():
                out.extend(recs)
        return out
    finally:
        consumer.close()


def test_batch_write_read_by_kafka_python(spark, spark_broker, new_topic):
    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=3)
    schema = StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
        StructField("partition", IntegerType()), StructField("headers", HEADER_TYPE),
        StructField("ignored", StringType())])
    rows = []
    for i in range(3000):
        key = None if i % 10 == 0 else f"k{i}"
        part = i % 3 if i % 2 == 0 else None  # explicit partition, or the key's hash
        headers = [("i", str(i).encode()), ("n", None)] if i % 3 == 0 else []
        rows.append((key, f"value-{i}".encode(), part, headers, "x"))
    df = spark.createDataFrame(rows, schema).repartition(2)
    (df.write.format("snakka").option("kafka.bootstrap.servers", bs).option("topic", topic)
     .mode("append").save())

    got = consume_all(bs, topic, 3, len(rows))
    assert len(got) == len(rows)
    by_value = {r.value: r for r in got}
    for key, value, part, headers, _ in rows:
        r = by_value[value]
        assert r.key == (key.encode() if key is not None else None)
        assert [(k, v) for k, v in r.headers] == headers
        if part is not None:
            assert r.partition == part
        elif key is not None:
            assert r.partition == murmur2_partition(key.encode(), 3)
    # Records of one write task keep their order within a partition.
    assert all(r.timestamp_type == 0 for r in got)


def test_batch_write_topic_column_and_read_back(spark, spark_broker, new_topic):
    bs = spark_broker.bootstrap_servers
    a, b = new_topic(partitions=1), new_topic(partitions=2)
    df = spark.createDataFrame([(a if i % 2 else b, f"v{i}") for i in range(100)],
                               "topic string, value string")
    df.write.format("snakka").option("kafka.bootstrap.servers", bs).mode("append").save()
    back = (spark.read.format("snakka").option("kafka.bootstrap.servers", bs)
            .option("subscribe", f"{a},{b}").load())
    got = sorted((r.topic, bytes(r.value).decode()) for r in back.collect())
    assert got == sorted((a if i % 2 else b, f"v{i}") for i in range(100))


def test_compressed_write(spark, spark_broker, new_topic):
    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=1)
    df = spark.createDataFrame([(f"v{i}" * 10,) for i in range(500)], "value string")
    (df.coalesce(1).write.format("snakka").option("kafka.bootstrap.servers", bs)
     .option("topic", topic).option("kafka.compression.type", "zstd").mode("append").save())
    got = consume_all(bs, topic, 1, 500)
    assert [r.value for r in got] == [(f"v{i}" * 10).encode() for i in range(500)]


def test_streaming_write(spark, spark_broker, new_topic, tmp_path):
    bs = spark_broker.bootstrap_servers
    src, dst = new_topic(partitions=2), new_topic(partitions=2)
    seed = spark.createDataFrame([(f"k{i}", f"v{i}", i % 2) for i in range(400)],
                                 "key string, value string, partition int")
    seed.write.format("snakka").option("kafka.bootstrap.servers", bs).option("topic", src) \
        .mode("append").save()
    stream = (spark.readStream.format("snakka").option("kafka.bootstrap.servers", bs)
              .option("subscribe", src).option("startingOffsets", "earliest")
              .option("includeHeaders", "true").load())
    out = stream.selectExpr("key", "upper(cast(value as string)) as value", "partition",
                            "array(named_struct('key', 'src', 'value', "
                            "cast(concat(topic, '-', partition) as binary))) as headers")
    q = (out.writeStream.format("snakka").option("kafka.bootstrap.servers", bs)
         .option("topic", dst).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert q.exception() is None
    got = consume_all(bs, dst, 2, 400)
    assert len(got) == 400
    for r in got:
        i = int(r.key.decode()[1:])
        assert r.value == f"V{i}".encode()
        assert r.partition == i % 2
        assert r.headers == [("src", f"{src}-{i % 2}".encode())]


def test_write_schema_errors(spark, spark_broker, new_topic):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=1)
    errors = (PySparkException, Py4JJavaError)

    def write(df, **opts):
        w = df.write.format("snakka").option("kafka.bootstrap.servers", bs).mode("append")
        for k, v in opts.items():
            w = w.option(k, v)
        w.save()

    with pytest.raises(errors, match="needs a 'value' column"):
        write(spark.createDataFrame([("k",)], "key string"), topic=topic)
    with pytest.raises(errors, match="set the 'topic' option or add a 'topic' column"):
        write(spark.createDataFrame([("v",)], "value string"))
    with pytest.raises(errors, match="column 'partition' must be an int"):
        write(spark.createDataFrame([("v", "x")], "value string, partition string"), topic=topic)
    with pytest.raises(errors, match="'kafka.sasl.mechanism' needs 'kafka.security.protocol'"):
        write(spark.createDataFrame([("v",)], "value string"), topic=topic,
              **{"kafka.sasl.mechanism": "PLAIN"})
    with pytest.raises(errors, match="partition 5 of topic"):
        write(spark.createDataFrame([("v", 5)], "value string, partition int"), topic=topic)
    with pytest.raises(errors, match="does not exist"):
        write(spark.createDataFrame([("v",)], "value string"), topic=topic + "-missing")
