"""Issue 17's acceptance: one data directory, handed from snakka to Apache Kafka 4.0 and back.

A workload runs on one broker: a topic with configs, 100,000 records with keys and headers on
three partitions, a classic consumer group and a KIP-848 consumer group with committed offsets,
and (snakka only) a share group with acknowledged and in-flight records. The broker stops; the
other broker starts on a copy of its directory, and confluent-kafka checks that

- every record is there at the same offset, with the same key, value, headers and timestamp
  (a digest per partition);
- the topic id and configs are the same;
- both groups' committed offsets are the same, and a consumer joining the classic group resumes
  exactly there;
- a new produce continues at the old log end offset;
- (snakka -> Kafka) the share group's state is what Kafka's own decoder reads in the copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration.coordinator_state_work import do_share_work, segment_paths
from integration.helpers import ck_admin, ck_consumer_config, ck_create_topic, wait_until
from reference_kafka import KafkaOnDir, run_tool

from snakka.testing.embedded import EmbeddedBroker

pytestmark = pytest.mark.xdist_group("reference-kafka")

TOPIC, PARTITIONS, RECORDS = "events", 3, 100_000
TOPIC_CONFIGS = {"retention.ms": "604800000", "max.message.bytes": "2000000",
                 "cleanup.policy": "delete", "segment.bytes": "1048576"}
CLASSIC, MODERN = "cg-classic", "cg-848"
# What each group commits per partition (both below the partitions' ends).
COMMITS = {CLASSIC: {0: 1000, 1: 2000, 2: 3000}, MODERN: {0: 10, 1: 20, 2: 30}}


@pytest.fixture
def tmp_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="snakka-handover-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _produce(bs: str) -> None:
    from confluent_kafka import Producer

    ck_create_topic(bs, TOPIC, PARTITIONS, TOPIC_CONFIGS)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.size": 200_000,
                  "queue.buffering.max.messages": RECORDS * 2, "compression.type": "lz4"})
    for i in range(RECORDS):
        p.produce(TOPIC, key=b"k%d" % (i % 997), value=b"value-%d" % i,
                  headers=[("seq", str(i).encode()), ("src", b"handover")])
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def _digests(bs: str) -> tuple[dict[int, str], dict[int, int]]:
    """(sha256 of every record of each partition, end offset of each partition)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(ck_consumer_config(bs))
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30,
                                           cached=False)[1] for p in range(PARTITIONS)}
        assert sum(ends.values()) == RECORDS, ends
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        hashes = {p: hashlib.sha256() for p in range(PARTITIONS)}
        nexts = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 120
        while nexts != ends and time.monotonic() < deadline:
            for m in c.consume(num_messages=10_000, timeout=0.5):
                assert not m.error(), m.error()
                p = m.partition()
                assert m.offset() == nexts[p], (p, m.offset(), nexts[p])  # no gap, no repeat
                nexts[p] = m.offset() + 1
                hashes[p].update(repr((m.offset(), m.key(), m.value(), m.headers(),
                                       m.timestamp())).encode())
        assert nexts == ends, (nexts, ends)
        return {p: h.hexdigest() for p, h in hashes.items()}, ends
    finally:
        c.close()


def _commit_groups(bs: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    for group, extra in ((CLASSIC, {}), (MODERN, {"group.protocol": "consumer"})):
        c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                      **extra})
        try:
            c.subscribe([TOPIC])
            wait_until(lambda c=c: c.poll(0.2) is not None or len(c.assignment()) == PARTITIONS,
                       60, f"{group} assigned")
            c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITS[group].items()],
                     asynchronous=False)
        finally:
            c.close()


def _committed(bs: str, group: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = ck_admin(bs)
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, p)
                                               for p in range(PARTITIONS)])
    res = admin.list_consumer_group_offsets([req])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def _resume_positions(bs: str) -> dict[int, int]:
    """The first offset a new member of the classic group gets on each partition."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bs, "group.id": CLASSIC, "enable.auto.commit": False,
                  "auto.offset.reset": "latest"})
    first: dict[int, int] = {}
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 90
        while len(first) < PARTITIONS and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                first.setdefault(m.partition(), m.offset())
        return first
    finally:
        c.close()


def _topic(bs: str) -> tuple[str, dict[str, str]]:
    """(topic id as kafka-topics.sh prints it, the topic's dynamic configs)."""
    r = run_tool("kafka-topics.sh", "--bootstrap-server", bs, "--describe", "--topic", TOPIC)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("Topic:"))
    topic_id = line.split("TopicId:")[1].split()[0]
    configs = dict(kv.split("=", 1) for kv in line.split("Configs:")[1].strip().split(",")
                   if "=" in kv)
    return topic_id, configs


def _produce_one(bs: str) -> int:
    from confluent_kafka import Producer

    offsets: list[int] = []
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    p.produce(TOPIC, key=b"after", value=b"after-handover", partition=0,
              on_delivery=lambda err, m: offsets.append(-1 if err else m.offset()))
    assert p.flush(30) == 0
    return offsets[0]


def _state(bs: str) -> dict:
    digests, ends = _digests(bs)
    return {"digests": digests, "ends": ends, "topic": _topic(bs),
            "committed": {g: _committed(bs, g) for g in COMMITS}}


def _check_same(before: dict, bs: str) -> None:
    after = _state(bs)
    assert after["topic"][0] == before["topic"][0], "topic id changed"
    for k, v in TOPIC_CONFIGS.items():
        assert after["topic"][1].get(k) == v, (k, after["topic"][1])
    assert after["ends"] == before["ends"]
    assert after["digests"] == before["digests"], "records differ"
    assert after["committed"] == before["committed"] == COMMITS
    assert _resume_positions(bs) == COMMITS[CLASSIC]
    assert _produce_one(bs) == before["ends"][0]


def test_snakka_data_dir_runs_on_kafka(kafka_distribution, tmp_dir):
    data = os.path.join(tmp_dir, "snakka")
    with EmbeddedBroker(data, config={"node.id": "1"}, host="127.0.0.1") as b:
        bs = b.bootstrap_servers
        _produce(bs)
        _commit_groups(bs)
        do_share_work(bs)
        before = _state(bs)

    # The share group's state as Kafka's own decoder reads it in the directory Kafka gets.
    files = segment_paths(data, "__share_group_state")
    assert files
    dump = run_tool("kafka-dump-log.sh", "--share-group-state-decoder", "--print-data-log",
                    "--files", *files)
    assert dump.returncode == 0 and "Exception" not in dump.stdout + dump.stderr, dump.stderr
    assert '"groupId":"sg"' in dump.stdout.replace(" ", ""), dump.stdout[-2000:]

    # The user's path (docs/migrating.md): `snakka migrate check`, then Kafka runs with the
    # server.properties `snakka migrate kafka-config` writes (its log.dirs is where the copy goes:
    # here the reference harness's directory).
    check = subprocess.run([sys.executable, "-m", "snakka", "migrate", "check", "--data-dir",
                            data], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0 and "Ready for Kafka 4.0" in check.stdout, (
        check.stdout + check.stderr)

    def kafka_config(port: int) -> dict[str, str]:
        r = subprocess.run([sys.executable, "-m", "snakka", "migrate", "kafka-config",
                            "--data-dir", data, "--listeners", f"PLAINTEXT://127.0.0.1:{port}",
                            "--controller-listener", f"CONTROLLER://127.0.0.1:{port + 1}"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        props = dict(ln.split("=", 1) for ln in r.stdout.splitlines()
                     if "=" in ln and not ln.startswith("#"))
        assert props["node.id"] == "1" and props["process.roles"] == "broker,controller"
        del props["log.dirs"]
        return props

    kafka = KafkaOnDir(data, kafka_config)
    try:
        kafka.start()
        _check_same(before, kafka.bootstrap_servers)
    finally:
        kafka.stop()


def test_kafka_data_dir_runs_on_snakka(kafka_distribution, tmp_dir):
    kafka = KafkaOnDir(None)
    try:
        kafka.start()
        bs = kafka.bootstrap_servers
        _produce(bs)
        _commit_groups(bs)
        before = _state(bs)
        copy = os.path.join(tmp_dir, "from-kafka")
        shutil.copytree(kafka.stop_keeping_data(), copy)
    finally:
        kafka.stop()

    assert (Path(copy) / "__consumer_offsets-0").is_dir()
    with EmbeddedBroker(copy, config={"node.id": "1"}, host="127.0.0.1") as b:
        _check_same(before, b.bootstrap_servers)
