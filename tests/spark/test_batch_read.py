"""Batch reads through the ``snakka`` Spark data source against an embedded broker,
with records written by confluent-kafka (librdkafka): exact rows, offsets, timestamps and
headers; compression codecs; offset/timestamp options; minPartitions splitting."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import Producer

N_RECORDS = 100_000
BASE_TS = 1_700_000_000_000


def produce(bootstrap: str, topic: str, records, **config) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  **config})
    for i, (part, key, value, ts, headers) in enumerate(records):
        while True:
            try:
                p.produce(topic, key=key, value=value, partition=part, timestamp=ts,
                          headers=headers)
                break
            except BufferError:
                p.poll(0.1)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def make_records(n: int, partitions: int, seed: int):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 11 == 0 else f"key-{i}".encode()
        value = None if i % 97 == 0 else rng.randbytes(rng.randrange(0, 120))
        headers = None
        if i % 5 == 0:
            headers = [("trace", str(i).encode()), ("empty", b""), ("none", None)]
        out.append((i % partitions, key, value, BASE_TS + i, headers))
    return out


def read_df(spark, bootstrap: str, **options):
    r = spark.read.format("snakka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows_by_tp(table) -> dict:
    d = table.to_pydict()
    out = {}
    for i in range(table.num_rows):
        out[(d["topic"][i], d["partition"][i], d["offset"][i])] = {c: d[c][i] for c in d}
    return out


def test_batch_read_exact_rows(spark, spark_broker, new_topic):
    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=3)
    records = make_records(N_RECORDS, 3, seed=5)
    produce(bs, topic, records, **{"compression.type": "lz4"})

    df = read_df(spark, bs, subscribe=topic, includeHeaders="true")
    table = df.toArrow()
    assert table.num_rows == N_RECORDS
    got = rows_by_tp(table)
    next_offset = [0, 0, 0]
    for part, key, value, ts, headers in records:
        off = next_offset[part]
        next_offset[part] += 1
        row = got[(topic, part, off)]
        assert row["key"] == key
        assert row["value"] == value
        assert int(row["timestamp"].timestamp() * 1000) == ts
        assert row["timestampType"] == 0
        want_headers = [{"key": k, "value": v} for k, v in headers or []]
        assert row["headers"] == want_headers
    # The declared schema is Spark's Kafka source schema.
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(spark, spark_broker, new_topic, codec):
    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=1)
    records = [(0, f"k{i}".encode(), (f"value {i} " * 20).encode(), BASE_TS + i, None)
               for i in range(2000)]
    produce(bs, topic, records, **{"compression.type": codec})
    rows = read_df(spark, bs, subscribe=topic).orderBy("offset").collect()
    assert [(r.offset, bytes(r.key), bytes(r.value)) for r in rows] == [
        (i, k, v) for i, (_p, k, v, _t, _h) in enumerate(records)]


def test_offsets_timestamps_and_splitting(spark, spark_broker, new_topic):
    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=2)
    records = [(i % 2, None, str(i).encode(), BASE_TS + i * 10, None) for i in range(1000)]
    produce(bs, topic, records)  # 500 per partition, offsets 0..499

    def offsets(df):
        return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())

    df = read_df(spark, bs, subscribe=topic,
                 startingOffsets=f'{{"{topic}":{{"0":10,"1":-2}}}}',
                 endingOffsets=f'{{"{topic}":{{"0":20,"1":5}}}}')
    assert offsets(df) == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]

    # Partition 0 holds records 0, 2, 4...: record i has timestamp BASE_TS + 10 * i, so
    # the first record at or after BASE_TS + 100 is record 10 (offset 5 of partition 0),
    # and record 11 (offset 5 of partition 1).
    df = read_df(spark, bs, assign=f'{{"{topic}":[0,1]}}', startingTimestamp=str(BASE_TS + 100),
                 endingOffsetsByTimestamp=f'{{"{topic}":{{"0":{BASE_TS + 200},"1":{BASE_TS + 9_999_999}}}}}')
    got = offsets(df)
    assert got == [(0, o) for o in range(5, 10)] + [(1, o) for o in range(5, 500)]

    df = read_df(spark, bs, subscribe=topic, minPartitions="8")
    assert df.rdd.getNumPartitions() == 8
    assert offsets(df) == [(p, o) for p in range(2) for o in range(500)]
    df = read_df(spark, bs, subscribe=topic, maxRecordsPerPartition="100")
    assert df.rdd.getNumPartitions() == 10
    assert df.count() == 1000

    # A pattern subscription reads every matching topic; an empty range reads nothing.
    df = read_df(spark, bs, subscribePattern=topic.replace("-", ".") + "$")
    assert df.count() == 1000
    df = read_df(spark, bs, subscribe=topic, startingOffsets="earliest",
                 endingOffsets=f'{{"{topic}":{{"0":0,"1":0}}}}')
    assert df.count() == 0


def test_log_append_time_topic(spark, spark_broker, new_topic):
    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    produce(bs, topic, [(0, None, b"x", BASE_TS, None)] * 10)
    rows = read_df(spark, bs, subscribe=topic).collect()
    assert len(rows) == 10
    assert {r.timestampType for r in rows} == {1}
    assert all(r.timestamp.year >= 2025 for r in rows)  # the broker's clock, not BASE_TS
