"""MirrorMaker 2 (``connect-mirror-maker.sh``) from the reference Kafka 4.0 between two snakka
brokers (issue 13): the path for users who move from one cluster to another.

Cluster ``a`` holds a topic and a consumer group that has read all of it; MM2 (a->b only)
mirrors the topic to ``b`` as ``a.<topic>`` (same records, same order, the source's topic
configs), keeps mirroring what is produced while it runs, and with
``sync.group.offsets.enabled=true`` writes the group's offsets, translated through its offset
syncs, to ``b``'s group (MM2 only writes to a group that has no active member on the target). Translation is Kafka's conservative one: an upstream offset
``o`` maps to ``downstream(sync) + 1`` of the newest sync below ``o``, so the test's group
commits at the end of the topic, where the last record's sync makes the translation exact.

MM2 runs with its defaults otherwise, topic ACL sync included: it must run without one ERROR
(before DescribeAcls existed it logged one on every refresh).

The same scenario runs from the reference Kafka 4.0 broker to snakka (a user moving to snakka;
the session's shared reference broker, so names carry a run id).

One MM2 JVM per scenario (10-35 s here); skipped where the reference distribution or ``java``
is absent.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from snakka.testing.embedded import EmbeddedBroker

from .conftest import SNAKKA_CONFIG
from .jvm_apps import JvmApp, wait_for, write_properties

pytestmark = pytest.mark.xdist_group("reference-kafka")

RUN = uuid.uuid4().hex[:8]  # the reference broker may outlive a run: names must be fresh
TOPIC = f"orders-{RUN}"
GROUP = f"billing-{RUN}"
TOPIC_CONFIGS = {"retention.ms": "12345678", "max.message.bytes": "200000"}


def produce(bootstrap: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(TOPIC, key=b"k%d" % (i % 17), value=b"order %d" % i)
    assert p.flush(30) == 0


def consume_and_commit(bootstrap: str, upto: int) -> None:
    """The group reads the topic up to ``upto`` and commits that."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([TOPIC])
        seen = -1
        while seen < upto - 1:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                seen = m.offset()
        c.commit(offsets=[TopicPartition(TOPIC, 0, upto)], asynchronous=False)
    finally:
        c.close()


def read_all(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    try:
        _, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[bytes, bytes]] = []
        while len(out) < end:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                out.append((m.key(), m.value()))
        return out
    finally:
        c.close()


def committed(admin: AdminClient, group: str, topic: str) -> int | None:
    """The group's committed offset for ``topic``-0 (None: none yet)."""
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    try:
        res = fut.result(30)
    except Exception:
        return None
    for tp in res.topic_partitions:
        if tp.topic == topic and tp.partition == 0 and tp.offset >= 0:
            return tp.offset
    return None


def end_offset(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    except Exception:
        return -1
    finally:
        c.close()


def test_mirror_maker_mirrors_topics_and_group_offsets(kafka_distribution, tmp_path):
    with EmbeddedBroker(config=SNAKKA_CONFIG, host="127.0.0.1") as a, \
            EmbeddedBroker(config=SNAKKA_CONFIG, host="127.0.0.1") as b:
        mirror_and_check(a.bootstrap_servers, b.bootstrap_servers, tmp_path)


def test_mirror_maker_from_kafka_to_snakka(reference_kafka, tmp_path):
    """The migration path: the source is the reference Kafka 4.0 broker, the target snakka."""
    with EmbeddedBroker(config=SNAKKA_CONFIG, host="127.0.0.1") as b:
        mirror_and_check(reference_kafka.bootstrap_servers, b.bootstrap_servers, tmp_path)


def mirror_and_check(a: str, b: str, tmp_path: Path) -> None:
    """Cluster ``a`` (bootstrap) mirrored to ``b`` by one MM2 run: records, topic configs and
    group offsets."""
    a_admin = AdminClient({"bootstrap.servers": a})
    for fut in a_admin.create_topics([NewTopic(TOPIC, 1, 1, config=TOPIC_CONFIGS)]).values():
        fut.result(30)
    produce(a, 0, 100)
    consume_and_commit(a, 100)

    props = write_properties(tmp_path / "mm2.properties", {
        "clusters": "a, b",
        "a.bootstrap.servers": a,
        "b.bootstrap.servers": b,
        "a->b.enabled": "true",
        "a->b.topics": TOPIC,
        "b->a.enabled": "false",
        "tasks.max": "1",
        **{f"{t}.replication.factor": "1" for t in (
            "checkpoints.topic", "heartbeats.topic", "offset-syncs.topic",
            "offset.storage", "status.storage", "config.storage")},
        "replication.factor": "1",
        "sync.group.offsets.enabled": "true",
        # Short periods so a test sees each step in seconds (defaults: 60 s / 10 min).
        "sync.group.offsets.interval.seconds": "1",
        "emit.checkpoints.interval.seconds": "1",
        "refresh.topics.interval.seconds": "1",
        "refresh.groups.interval.seconds": "1",
        "emit.heartbeats.interval.seconds": "1",
        # An offset sync for every record, so the group's offset translates exactly.
        "offset.lag.max": "0",
        "plugin.discovery": "service_load",
    })
    app = JvmApp("mm2", "connect-mirror-maker.sh", [str(props)], tmp_path)
    b_admin = AdminClient({"bootstrap.servers": b})
    try:
        app.start()
        mirrored = f"a.{TOPIC}"
        wait_for("the first 100 records on b",
                 lambda: end_offset(b, mirrored) >= 100, 120, app)
        wait_for("the group's offset translated on b",
                 lambda: committed(b_admin, GROUP, mirrored) == 100, 90, app)

        # Records produced while MM2 runs are mirrored, and the group's newer commit follows.
        produce(a, 100, 50)
        consume_and_commit(a, 150)
        wait_for("the next 50 records on b", lambda: end_offset(b, mirrored) >= 150, 60, app)
        wait_for("the group's new offset translated on b",
                 lambda: committed(b_admin, GROUP, mirrored) == 150, 90, app)

        assert read_all(b, mirrored) == read_all(a, TOPIC)
        # MM2 created the remote topic with the source's non-default configs.
        described = b_admin.describe_configs([ConfigResource("topic", mirrored)])
        got = next(iter(described.values())).result(30)
        assert {k: got[k].value for k in TOPIC_CONFIGS} == TOPIC_CONFIGS
        assert app.error_lines() == [], "\n".join(app.error_lines()[:5])
    finally:
        app.close()
