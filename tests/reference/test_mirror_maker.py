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
the same topic names), while producers and the group go on. Every record arrives with its key,
value and headers; the group's offsets are translated with MM2's guarantee: never past the
group's position (no loss), exact where the group committed at the end of what was mirrored
(the cut-over: producers stopped, consumers caught up), and otherwise behind it only by records
the group had already read, which a consumer resuming on Kafka reads again (at-least-once).
When MM2 translates at all is subtler (a group's position needs an offset sync at or below it):
see the comment above that test.

One MM2 JVM per scenario (10-35 s here); skipped where the reference distribution or ``java``
is absent.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from snakka.testing.embedded import EmbeddedBroker

from .conftest import SNAKKA_CONFIG
from .jvm_apps import JvmApp, T, wait_for, write_properties

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


def committed(bootstrap: str, group: str, topic: str, partition: int = 0) -> int | None:
    """The group's committed offset for ``topic``-``partition`` (None: none yet, or the
    cluster's group coordinator is not up yet).

    A consumer that never subscribes asks (OffsetFetch) without joining, so the group stays
    Empty on the target, as MM2 needs to write to it. Not AdminClient's
    list_consumer_group_offsets: confluent-kafka 2.16.1 (librdkafka 2.16.0) crashes the process
    (SIGSEGV) when that runs against a Kafka 4.0 with no __consumer_offsets yet, the reference
    broker before MM2's Connect worker joins its group there."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = c.committed([TopicPartition(topic, partition)], timeout=10)
    except Exception:  # NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE while it starts
        return None
    finally:
        c.close()
    return tp.offset if tp.error is None and tp.offset >= 0 else None


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
        # The worker's offset commits (default 60 s) also write MM2's held-back offset syncs,
        # among them the last record's, which translates a group at the end exactly.
        "b.offset.flush.interval.ms": "1000",
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
                 lambda: committed(b, GROUP, mirrored) == 100, 90, app)

        # Records produced while MM2 runs are mirrored, and the group's newer commit follows.
        produce(a, 100, 50)
        consume_and_commit(a, 150)
        wait_for("the next 50 records on b", lambda: end_offset(b, mirrored) >= 150, 60, app)
        wait_for("the group's new offset translated on b",
                 lambda: committed(b, GROUP, mirrored) == 150, 90, app)

        assert read_all(b, mirrored) == read_all(a, TOPIC)
        # MM2 created the remote topic with the source's non-default configs.
        described = b_admin.describe_configs([ConfigResource("topic", mirrored)])
        got = next(iter(described.values())).result(30)
        assert {k: got[k].value for k in TOPIC_CONFIGS} == TOPIC_CONFIGS
        assert app.error_lines() == [], "\n".join(app.error_lines()[:5])
    finally:
        app.close()


# ------------------------------------------------------------------ snakka -> Kafka (issue 17)
#
# When MM2 4.0 translates a group's offset (connect/mirror: MirrorSourceTask, OffsetSyncWriter,
# OffsetSyncStore, MirrorCheckpointTask), which this scenario is built on:
# - MirrorSourceTask wants an offset sync (upstream, downstream) for every mirrored record
#   (offset.lag.max=0), but OffsetSyncWriter keeps at most 10 in flight and one pending per
#   partition, the newest replacing the older: of a burst it writes the first syncs that find a
#   free slot and, at the task's next offset commit (the worker's offset.flush.interval.ms), the
#   burst's last record. Which partition's records take the slots depends on the order the
#   target's produce acknowledgements complete.
# - MirrorCheckpointTask translates a group's committed offset o through the newest sync its
#   OffsetSyncStore holds at or below o (exact when that sync is o - 1's or o's, else its
#   downstream + 1); with no sync at or below o it emits no checkpoint for that partition, ever,
#   until the group moves past a newer sync.
# The first version of this test committed 120 of partition 0's 300 records before MM2 started:
# when partition 1's acknowledgements took all 10 slots, partition 0's only sync was offset
# 299 (at the offset commit), and its offset was never translated (the CI failure; reproduced
# with MM2's DEBUG log: "Skipped (OffsetSync{...upstreamOffset=299...} is ahead of upstream
# consumer group 120)"). So here the group is caught up when MM2 starts (the translation is
# exact, through the syncs of the ends written at the offset commit); then records are
# produced while MM2 runs and the group reads part of them: MM2 has the sync of the first
# part's end at or below the group's new position, whatever else it wrote.

MIGRATE_TOPIC = f"ledger-{RUN}"
MIGRATE_GROUP = f"auditors-{RUN}"
PER_PARTITION = 300
# Partition 0 holds FIRST_PART records when MM2 starts, and the group has read them all (and
# all of partition 1); then partition 0 gets the rest and the group reads on to PART_WAY.
FIRST_PART = 100
PART_WAY = 120
OFFSET_SYNCS = "mm2-offset-syncs.snakka.internal"  # on the target (offset-syncs.topic.location)
# Waits fail when nothing they depend on changed for this long (MM2's JVM first starts, slower
# on a loaded machine), not after a fixed total.
MM2_START_S = 240.0
MM2_STALL_S = 90.0
CONSUME_S = 60.0
# MM2's own DEBUG line for a translation (OffsetSyncStore), the decisive evidence of a wait.
LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %X{connector.context}%m (%c:%L)%n"
  Loggers:
    Logger:
      - name: org.apache.kafka.connect.mirror.OffsetSyncStore
        level: DEBUG
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
"""


def produce_with_headers(bootstrap: str, partition: int, start: int, stop: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, stop):
        p.produce(MIGRATE_TOPIC, key=b"acct-%d" % (i % 23), value=b"entry %d/%d" % (partition, i),
                  headers=[("source", b"snakka"), ("seq", b"%d" % i)], partition=partition)
    assert p.flush(30) == 0


def consume_to(bootstrap: str, positions: dict[int, int]) -> None:
    """The group reads on from its committed offsets until each partition of ``positions`` is
    at its position, and commits those."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": MIGRATE_GROUP,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([MIGRATE_TOPIC])
        need = dict(positions)
        deadline = time.monotonic() + CONSUME_S
        while need:
            assert time.monotonic() < deadline, f"the group did not reach {need} on snakka"
            m = c.poll(1.0)
            if (m is not None and m.error() is None and m.partition() in need
                    and m.offset() >= need[m.partition()] - 1):
                del need[m.partition()]
        c.commit(offsets=[TopicPartition(MIGRATE_TOPIC, p, o) for p, o in positions.items()],
                 asynchronous=False)
    finally:
        c.close()


def offset_syncs(bootstrap: str) -> dict[int, list[int]]:
    """MM2's offset syncs of MIGRATE_TOPIC in its offset-syncs topic: partition -> upstream
    offsets, in order. The record format is OffsetSync's: key (int16-length topic, int32
    partition), value (int64 upstream, int64 downstream)."""
    out: dict[int, list[int]] = {0: [], 1: []}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "enable.auto.commit": False})
    try:
        tp = TopicPartition(OFFSET_SYNCS, 0, 0)
        try:
            end = c.get_watermark_offsets(tp, timeout=10)[1]
        except Exception:  # not created yet
            return out
        c.assign([tp])
        read, deadline = 0, time.monotonic() + 30
        while read < end and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None or m.error() is not None:
                continue
            read += 1
            key, value = m.key() or b"", m.value() or b""
            n = struct.unpack(">h", key[:2])[0]
            if key[2:2 + n].decode() == MIGRATE_TOPIC:
                part = struct.unpack(">i", key[2 + n:6 + n])[0]
                out.setdefault(part, []).append(struct.unpack(">qq", value)[0])
        return out
    finally:
        c.close()


def translations(app: JvmApp, partition: int, upstream: int) -> list[int]:
    """Every translation of the group's offset ``upstream`` of ``partition`` MM2 logged."""
    line = re.compile(rf"translateDownstream\({re.escape(MIGRATE_GROUP)},"
                      rf"{re.escape(MIGRATE_TOPIC)}-{partition},{upstream}\): Translated (\d+)")
    return [int(m.group(1)) for m in line.finditer(app.log_text())]


class Mm2Watch:
    """What MM2's progress towards a translated offset consists of, for waits and for failure
    messages: the mirrored end offsets and the group's offsets on Kafka, the offset syncs MM2
    wrote, and its relevant log lines."""

    RELEVANT = re.compile(r"translateDownstream|OffsetSyncStore|checkpoints|offset-syncs|"
                          r"consumer groups|Committing offsets| WARN | ERROR |Exception")

    def __init__(self, app: JvmApp, kafka: str) -> None:
        self.app, self.kafka = app, kafka

    def state(self) -> tuple:
        return (tuple(end_offset(self.kafka, MIGRATE_TOPIC, p) for p in (0, 1)),
                tuple(committed(self.kafka, MIGRATE_GROUP, MIGRATE_TOPIC, p) for p in (0, 1)),
                tuple((p, tuple(u)) for p, u in sorted(offset_syncs(self.kafka).items())))

    def evidence(self) -> str:
        ends, offsets, syncs = self.state()
        lines = [ln[:300] for ln in self.app.log_text().splitlines() if self.RELEVANT.search(ln)]
        return (f"mirrored ends on Kafka {ends}, the group's offsets there {offsets}, "
                f"offset syncs (upstream offsets per partition) {dict(syncs)}; "
                f"MM2's relevant log lines (last 40 of {len(lines)}):\n" + "\n".join(lines[-40:]))

    def wait(self, what: str, check: Callable[[], T], stall: float = MM2_STALL_S) -> T:
        """Poll ``check`` until it returns something truthy (and return that). Fail when MM2
        exited, or when none of :meth:`state` changed for ``stall`` seconds."""
        last, since = self.state(), time.monotonic()
        while True:
            got = check()
            if got:
                return got
            proc = self.app.proc
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"MM2 exited ({proc.returncode}) while waiting for {what}; "
                                     f"{self.evidence()}\n{self.app.log_tail()}")
            now = self.state()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > stall:
                raise AssertionError(f"no progress for {stall:.0f} s waiting for {what}; "
                                     f"{self.evidence()}")
            time.sleep(0.25)


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
        produce_with_headers(src, 0, 0, FIRST_PART)
        produce_with_headers(src, 1, 0, PER_PARTITION)
        consume_to(src, {0: FIRST_PART, 1: PER_PARTITION})

        props = tmp_path / "mm2.properties"
        r = subprocess.run(
            [sys.executable, "-m", "snakka", "migrate", "mirror-config", "--source", src,
             "--target", kafka, "--topics", MIGRATE_TOPIC, "--groups", MIGRATE_GROUP,
             "--replication-factor", "1", "--out", str(props)],
            capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        text = props.read_text()
        assert "IdentityReplicationPolicy" in text and "kafka.offset.flush.interval.ms=" in text
        with props.open("a") as f:  # a test sees each step in seconds (the file says 5 s)
            f.write("emit.checkpoints.interval.seconds=1\nsync.group.offsets.interval.seconds=1\n"
                    "refresh.topics.interval.seconds=1\nrefresh.groups.interval.seconds=1\n"
                    "kafka.offset.flush.interval.ms=1000\n"
                    "tasks.max=1\nplugin.discovery=service_load\n")
        log_config = tmp_path / "mm2-log4j2.yaml"
        log_config.write_text(LOG4J2)
        app = JvmApp("mm2-migrate", "connect-mirror-maker.sh", [str(props)], tmp_path,
                     extra_env={"KAFKA_LOG4J_OPTS": f"-Dlog4j2.configurationFile={log_config}"})
        watch = Mm2Watch(app, kafka)

        def group_on_kafka() -> tuple[int | None, ...]:
            return tuple(committed(kafka, MIGRATE_GROUP, MIGRATE_TOPIC, p) for p in (0, 1))

        try:
            app.start()
            watch.wait("what exists mirrored to Kafka under the same names",
                       lambda: (end_offset(kafka, MIGRATE_TOPIC, 0) >= FIRST_PART
                                and end_offset(kafka, MIGRATE_TOPIC, 1) >= PER_PARTITION),
                       stall=MM2_START_S)
            # The group had read everything mirrored: translated exactly, through the syncs of
            # both partitions' last records (written at MM2's next offset commit).
            watch.wait("the group's offsets on Kafka, exact",
                       lambda: group_on_kafka() == (FIRST_PART, PER_PARTITION))

            # Producers go on while MM2 runs; the group reads part of the new records.
            produce_with_headers(src, 0, FIRST_PART, PER_PARTITION)
            watch.wait("partition 0's new records mirrored",
                       lambda: end_offset(kafka, MIGRATE_TOPIC, 0) >= PER_PARTITION)
            consume_to(src, {0: PART_WAY})
            # MM2 translates the new position through its newest sync at or below it (at least
            # the first part's last record's), and writes it on Kafka when that is past the
            # previous one.
            translated = watch.wait(
                f"MM2's translation of the group's offset {PART_WAY} of partition 0",
                lambda: translations(app, 0, PART_WAY))
            expected = max(FIRST_PART, *translated)
            watch.wait(f"the group's offset of partition 0 on Kafka (at least {expected})",
                       lambda: (group_on_kafka()[0] or 0) >= expected)
        finally:
            app.close()
        assert app.error_lines() == [], "\n".join(app.error_lines()[:5])

        for p in (0, 1):
            mirrored = read_all(kafka, MIGRATE_TOPIC, p)
            assert mirrored == read_all(src, MIGRATE_TOPIC, p)
            assert len(mirrored) == PER_PARTITION
            assert mirrored[7][2] == [("source", b"snakka"), ("seq", b"7")]

        # MM2 never translates past the group's position (nothing is lost), nor moves a
        # group's offset on Kafka back.
        translated0, translated1 = group_on_kafka()
        assert translated1 == PER_PARTITION
        assert translated0 is not None and FIRST_PART <= translated0 <= PART_WAY
        assert all(t <= PART_WAY for t in translations(app, 0, PART_WAY))
        got = resume_on(kafka)
        assert got[1] == []  # exact: nothing read twice, nothing left out
        # Partition 0 resumes at the translated offset: every record the group had not read,
        # once, after the ones it had read before (the bounded duplicates).
        assert got[0] == list(range(translated0, PER_PARTITION))
        print(f"partition 0: position {PART_WAY}, translated {translated0}, "
              f"{PART_WAY - translated0} records read again")
