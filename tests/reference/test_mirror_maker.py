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

The other direction is issue 17's online migration (docs/migrating.md): snakka mirrored to the
reference Kafka with the config ``snakka migrate mirror-config`` writes (IdentityReplicationPolicy:
the same topic names). Every record arrives with its key, value and headers; the group's offsets
are translated with MM2's guarantee: never past the group's position (no loss), exact where the
group committed at the end of what was mirrored (the cut-over: producers stopped, consumers
caught up), and otherwise behind it only by records the group had already read, which a consumer
resuming on Kafka reads again (at-least-once).

One MM2 JVM per scenario (10-35 s here); skipped where the reference distribution or ``java``
is absent.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Producer,
    TopicPartition,
)
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


def read_all(bootstrap: str, topic: str, partition: int = 0) -> list[tuple]:
    """Every record of one partition: (key, value, headers), in order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    try:
        _, end = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        c.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple] = []
        while len(out) < end:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                out.append((m.key(), m.value(), m.headers()))
        return out
    finally:
        c.close()


def committed(admin: AdminClient, group: str, topic: str, partition: int = 0) -> int | None:
    """The group's committed offset for ``topic``-``partition`` (None: none yet)."""
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    try:
        res = fut.result(30)
    except Exception:
        return None
    for tp in res.topic_partitions:
        if tp.topic == topic and tp.partition == partition and tp.offset >= 0:
            return tp.offset
    return None


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
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


# ------------------------------------------------------------------ snakka -> Kafka (issue 17)

MIGRATE_TOPIC = f"ledger-{RUN}"
MIGRATE_GROUP = f"auditors-{RUN}"
PER_PARTITION = 300
# Where the group stands on snakka: part of partition 0, all of partition 1.
POSITIONS = {0: 120, 1: PER_PARTITION}


def produce_with_headers(bootstrap: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part in (0, 1):
        for i in range(PER_PARTITION):
            p.produce(MIGRATE_TOPIC, key=b"acct-%d" % (i % 23), value=b"entry %d/%d" % (part, i),
                      headers=[("source", b"snakka"), ("seq", b"%d" % i)], partition=part)
    assert p.flush(30) == 0


def consume_to_positions(bootstrap: str) -> None:
    """The group reads each partition up to its position in POSITIONS and commits that."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": MIGRATE_GROUP,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([MIGRATE_TOPIC])
        seen = {0: -1, 1: -1}
        while any(seen[p] < POSITIONS[p] - 1 for p in seen):
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                seen[m.partition()] = max(seen[m.partition()], m.offset())
        c.commit(offsets=[TopicPartition(MIGRATE_TOPIC, p, o) for p, o in POSITIONS.items()],
                 asynchronous=False)
    finally:
        c.close()


def resume_on(bootstrap: str) -> dict[int, list[int]]:
    """A consumer of the group on ``bootstrap`` reads to the end: the offsets it got."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": MIGRATE_GROUP,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "enable.partition.eof": True})
    got: dict[int, list[int]] = {0: [], 1: []}
    at_end: set[int] = set()
    try:
        c.subscribe([MIGRATE_TOPIC])
        while at_end != {0, 1}:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error() is None:
                got[m.partition()].append(m.offset())
            elif m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
        return got
    finally:
        c.close()


def test_mirror_maker_from_snakka_to_kafka(reference_kafka, tmp_path):
    """Issue 17's online path, with the MM2 config `snakka migrate mirror-config` writes."""
    kafka = reference_kafka.bootstrap_servers
    with EmbeddedBroker(config=SNAKKA_CONFIG, host="127.0.0.1") as snakka:
        src = snakka.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": src})
        for fut in admin.create_topics([NewTopic(MIGRATE_TOPIC, 2, 1)]).values():
            fut.result(30)
        produce_with_headers(src)
        consume_to_positions(src)

        props = tmp_path / "mm2.properties"
        r = subprocess.run(
            [sys.executable, "-m", "snakka", "migrate", "mirror-config", "--source", src,
             "--target", kafka, "--topics", MIGRATE_TOPIC, "--groups", MIGRATE_GROUP,
             "--replication-factor", "1", "--out", str(props)],
            capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "IdentityReplicationPolicy" in props.read_text()
        with props.open("a") as f:  # a test sees each step in seconds (the file says 5 s)
            f.write("emit.checkpoints.interval.seconds=1\nsync.group.offsets.interval.seconds=1\n"
                    "refresh.topics.interval.seconds=1\nrefresh.groups.interval.seconds=1\n"
                    "tasks.max=1\nplugin.discovery=service_load\n")
        app = JvmApp("mm2-migrate", "connect-mirror-maker.sh", [str(props)], tmp_path)
        k_admin = AdminClient({"bootstrap.servers": kafka})
        try:
            app.start()
            for p in (0, 1):
                wait_for(f"partition {p} mirrored to Kafka under the same name",
                         lambda p=p: end_offset(kafka, MIGRATE_TOPIC, p) >= PER_PARTITION, 120, app)
            # Committed at the end of what was mirrored: translated exactly.
            wait_for("the group's offset of partition 1 on Kafka",
                     lambda: committed(k_admin, MIGRATE_GROUP, MIGRATE_TOPIC, 1) == PER_PARTITION,
                     90, app)
            # 0 is a valid translation (MM2 had only the sync of offset 0 at or below the
            # group's position): wait for an offset, not for a truthy one.
            (translated0,) = wait_for(
                "the group's offset of partition 0 on Kafka",
                lambda: (lambda o: (o,) if o is not None else None)(
                    committed(k_admin, MIGRATE_GROUP, MIGRATE_TOPIC, 0)), 90, app)
        finally:
            app.close()
        assert app.error_lines() == [], "\n".join(app.error_lines()[:5])

        for p in (0, 1):
            mirrored = read_all(kafka, MIGRATE_TOPIC, p)
            assert mirrored == read_all(src, MIGRATE_TOPIC, p)
            assert len(mirrored) == PER_PARTITION
            assert mirrored[7][2] == [("source", b"snakka"), ("seq", b"7")]

        # MM2 never translates past the group's position: nothing is lost.
        assert 0 <= translated0 <= POSITIONS[0]
        got = resume_on(kafka)
        assert got[1] == []  # exact: nothing read twice, nothing left out
        # Partition 0 resumes at the translated offset: every record the group had not read,
        # once, after the ones it had read before (the bounded duplicates).
        assert got[0] == list(range(translated0, PER_PARTITION))
        print(f"partition 0: position {POSITIONS[0]}, translated {translated0}, "
              f"{POSITIONS[0] - translated0} records read again")
