"""Bad input through a real SparkSession: every mistake fails with a message naming the
problem, before any task runs where possible, and never hangs beyond the documented
timeouts (kafka.request.timeout.ms, kafka.socket.connection.setup.timeout.ms)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

ERRORS = (PySparkException, Py4JJavaError)


def load(spark, bootstrap: str, **options):
    r = spark.read.format("snakka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def fails(fn, *messages: str) -> str:
    with pytest.raises(ERRORS) as e:
        fn()
    text = str(e.value)
    for m in messages:
        assert m in text, f"{m!r} not in error:\n{text[:3000]}"
    return text


def test_unknown_topic_and_partitions(spark, spark_broker, new_topic):
    bs = spark_broker.bootstrap_servers
    topic = new_topic(partitions=2)
    fails(lambda: load(spark, bs, subscribe="no-such-topic").count(),
          "topic 'no-such-topic' cannot be read: UNKNOWN_TOPIC_OR_PARTITION",
          "the topic does not exist")
    fails(lambda: load(spark, bs, assign=f'{{"{topic}":[0,7]}}').count(),
          f"'assign' names partitions that do not exist: {topic}-7")
    fails(lambda: load(spark, bs, subscribe=topic,
                       startingOffsets=f'{{"{topic}":{{"0":0}}}}').count(),
          f"must give a value for every subscribed partition; missing: {topic}-1")
    fails(lambda: load(spark, bs, subscribe=topic,
                       endingOffsets=f'{{"{topic}":{{"0":5,"1":0}}}}').count(),
          f"asks for offset 5 of {topic}-0, but the partition's latest offset is 0")
    q = None
    try:
        q = (spark.readStream.format("snakka").option("kafka.bootstrap.servers", bs)
             .option("subscribe", "no-such-topic").load()
             .writeStream.format("noop").trigger(availableNow=True).start())
        with pytest.raises(ERRORS) as e:
            q.awaitTermination(120)
        assert "topic 'no-such-topic' cannot be read" in str(e.value)
    finally:
        if q is not None:
            q.stop()


def test_malformed_json_options(spark, spark_broker):
    bs = spark_broker.bootstrap_servers
    fails(lambda: load(spark, bs, assign="{topic: [0]}").count(),
          "option 'assign' is not valid JSON", '{"topicA":[0,1],"topicB":[2,4]}')
    fails(lambda: load(spark, bs, subscribe="t", startingOffsets='{"t": [1]}').count(),
          "option 'startingOffsets': topic 't' must map partition numbers to values")
    fails(lambda: load(spark, bs, subscribe="t", assign='{"t":[0]}').count(),
          "only one of the options 'subscribe', 'subscribePattern' or 'assign'")
    fails(lambda: load(spark, bs, subscribe="t", startingoffsets="latest").count(),
          "'startingOffsets' cannot be 'latest' for batch queries")
    fails(lambda: spark.readStream.format("snakka").option("kafka.bootstrap.servers", bs)
          .option("subscribe", "t").option("endingOffsets", "latest").load()
          .writeStream.format("noop").start().awaitTermination(60),
          "option 'endingoffsets' is not valid for streaming queries")
    fails(lambda: spark.read.format("snakka").schema("value string")
          .option("kafka.bootstrap.servers", bs).option("subscribe", "t").load().count(),
          "fixed schema")


def test_broker_down_fails_fast(spark):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    t0 = time.monotonic()
    fails(lambda: load(spark, f"127.0.0.1:{port}", subscribe="t").count(),
          f"cannot connect to Kafka broker 127.0.0.1:{port}")
    assert time.monotonic() - t0 < 60


def test_unresponsive_broker_times_out(spark):
    """A peer that accepts connections but never answers: the request timeout bounds it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        fails(lambda: load(spark, f"127.0.0.1:{port}", subscribe="t",
                           **{"kafka.request.timeout.ms": "1500"}).count(),
              f"cannot connect to Kafka broker 127.0.0.1:{port}: timed out",
              "kafka.request.timeout.ms=1500")
        assert time.monotonic() - t0 < 60
    finally:
        stop.set()
        t.join()
        server.close()
        for c in accepted:
            c.close()
