"""`snakka pipeline generate` (no Spark needed): what it writes, and clean errors. The Spark
verbs (demo/stream/check) are covered through their functions in test_pipeline*.py: run
in-process they would stop the shared SparkSession."""

from __future__ import annotations

import json

from click.testing import CliRunner
from kafka import KafkaConsumer, TopicPartition

from snakka.cli import main
from snakka.spark.pipeline.events import generate_events
from snakka.util.murmur2 import murmur2_partition


def test_generate_writes_the_deterministic_stream(spark_broker, new_topic):
    topic = new_topic(3)
    res = CliRunner().invoke(main, ["pipeline", "generate", "-b", spark_broker.bootstrap_servers,
                                    "--topic", topic, "-n", "500", "--seed", "5"])
    assert res.exit_code == 0, res.output
    c = KafkaConsumer(bootstrap_servers=spark_broker.bootstrap_servers,
                      enable_auto_commit=False, consumer_timeout_ms=5000)
    tps = [TopicPartition(topic, p) for p in range(3)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got = {}
    while len(got) < 500:
        batch = c.poll(timeout_ms=5000)
        assert batch, f"only {len(got)} records"
        for recs in batch.values():
            for r in recs:
                got[json.loads(r.value)["event_id"]] = (r.key, r.value, r.partition,
                                                        dict(r.headers))
    c.close()
    want = {e.event_id: e for e in generate_events(500, seed=5)}
    assert set(got) == set(want)
    for eid, (key, value, _p, headers) in got.items():
        assert key == want[eid].key() and value == want[eid].value()
        assert headers == {"content-type": b"application/json"}
    # Keyed by user, placed by Kafka's default (murmur2) partitioner as a Java client would.
    assert all(p == murmur2_partition(k, 3) for k, _v, p, _h in got.values())
    assert len({p for _k, _v, p, _h in got.values()}) == 3


def test_generate_reports_an_unreachable_broker():
    res = CliRunner().invoke(main, ["pipeline", "generate", "-b", "127.0.0.1:1", "-n", "10"])
    assert res.exit_code == 1
    assert "cannot reach the broker" in res.output
