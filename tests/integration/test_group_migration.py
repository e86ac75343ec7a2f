"""KIP-848 online upgrade/downgrade between classic and consumer groups, with real clients.

Our version of confluent-kafka-python's ``test_consumer_upgrade_downgrade``
(tests/integration/consumer/test_consumer_upgrade_downgrade.py): one group on a 10-partition
topic goes through

    + classic member        → classic group, it owns all 10 partitions
    + consumer member       → upgraded to a consumer group, 5 + 5
    - the classic member    → consumer group, the consumer member owns all 10
    + classic member        → still a consumer group (a classic member inside it), 5 + 5
    - the consumer member   → downgraded to a classic group, the classic member owns all 10

and after every step the members own disjoint partitions covering the topic, the group type
reported by the admin client (ConsumerGroupDescribe, falling back to DescribeGroups) is the
expected one, and 100 freshly produced records are all consumed. The classic members are
confluent-kafka (``group.protocol=classic`` with the roundrobin, range and cooperative-sticky
assignors, as upstream) or kafka-python; the consumer-protocol members are confluent-kafka.
Committed offsets survive both conversions, and the downgraded classic group survives a
broker restart.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from snakka.testing import EmbeddedBroker

from .helpers import ck_admin, ck_create_topic

PARTITIONS = 10
RECORDS = 100
pytestmark = pytest.mark.timeout(240)

BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
}


class Member:
    """One group member driven from the test thread: ``poll`` a little, report what it owns,
    count what it read."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str,
                 strategy: str = "range", **extra: object) -> None:
        self.kind = kind
        self.read = 0
        if kind == "kafka-python":
            from kafka import KafkaConsumer
            from kafka.coordinator.assignors.range import RangePartitionAssignor

            self.kp = KafkaConsumer(
                bootstrap_servers=bootstrap, group_id=group,
                auto_offset_reset="earliest", session_timeout_ms=6000,
                heartbeat_interval_ms=300, max_poll_interval_ms=60000,
                partition_assignment_strategy=[RangePartitionAssignor])
            # kafka-python may send its first JoinGroup before its metadata knows a topic it
            # subscribed to; as the group's leader it then assigns nothing and only rejoins at
            # the next metadata refresh (metadata.max.age.ms, 5 min), whatever the broker. Its
            # metadata knows the topic before it subscribes (a CI run saw the race).
            assert self.kp.partitions_for_topic(topic), f"kafka-python does not see {topic}"
            self.kp.subscribe([topic])
            return
        from confluent_kafka import Consumer

        conf = {"bootstrap.servers": bootstrap, "group.id": group,
                "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100}
        if kind == "classic":
            conf.update({"group.protocol": "classic", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 300,
                         "partition.assignment.strategy": strategy})
        else:
            conf["group.protocol"] = "consumer"
        conf.update(extra)
        self.ck = Consumer(conf)
        self.ck.subscribe([topic])

    def poll(self) -> None:
        if self.kind == "kafka-python":
            for records in self.kp.poll(timeout_ms=100).values():
                self.read += len(records)
            return
        m = self.ck.poll(0.1)
        if m is not None and not m.error():
            self.read += 1

    def owned(self) -> set[int]:
        if self.kind == "kafka-python":
            return {tp.partition for tp in self.kp.assignment()}
        return {tp.partition for tp in self.ck.assignment()}

    def close(self) -> None:
        if self.kind == "kafka-python":
            self.kp.close()
        else:
            self.ck.close()


def group_type(admin, group: str) -> str:
    g = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return g.type.name  # ConsumerGroupType: CLASSIC / CONSUMER


def poll_until(members: list[Member], pred: Callable[[], bool], what: str,
               timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            owned = {f"{m.kind}#{i}": sorted(m.owned()) for i, m in enumerate(members)}
            raise AssertionError(f"timed out waiting for {what}; owned: {owned}")
        for m in members:
            m.poll()


def produce(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=f"test-key{i}", value=f"test-data{i}")
    assert p.flush(30) == 0


def check_members(bootstrap: str, admin, members: list[Member], group: str, topic: str,
                  expected_type: str) -> None:
    """The upstream ``check_consumer``: an even, complete, disjoint split; the group type; all
    of 100 new records consumed."""
    share = PARTITIONS // len(members)

    def split_done() -> bool:
        owned = [m.owned() for m in members]
        return (all(len(o) == share for o in owned)
                and len(set().union(*owned)) == PARTITIONS)

    poll_until(members, split_done, f"{share} partitions per member")
    assert group_type(admin, group) == expected_type
    before = sum(m.read for m in members)
    produce(bootstrap, topic, RECORDS)
    poll_until(members, lambda: sum(m.read for m in members) - before >= RECORDS,
               f"{RECORDS} records")
    assert sum(m.read for m in members) - before == RECORDS


def upgrade_downgrade(bootstrap: str, classic_kind: str, strategy: str = "range") -> None:
    topic = f"migrate-{classic_kind}-{strategy}-{uuid.uuid4().hex[:6]}"
    group = topic
    ck_create_topic(bootstrap, topic, PARTITIONS)
    admin = ck_admin(bootstrap)
    def classic() -> Member:
        return Member(classic_kind, bootstrap, group, topic, strategy)

    def consumer() -> Member:
        return Member("consumer", bootstrap, group, topic)

    members: list[Member] = []
    try:
        for op, make, expected in [("add", classic, "CLASSIC"),
                                   ("add", consumer, "CONSUMER"),
                                   ("remove", None, "CONSUMER"),
                                   ("add", classic, "CONSUMER"),
                                   ("remove", None, "CLASSIC")]:
            if op == "add":
                assert make is not None
                members.append(make())
            else:
                members.pop(0).close()
            check_members(bootstrap, admin, members, group, topic, expected)
        assert len(members) == 1
    finally:
        for m in members:
            m.close()


@pytest.fixture(scope="module")
def broker():
    b = EmbeddedBroker(config=BROKER_CONFIG)
    b.start()
    yield b
    b.close()


@pytest.mark.parametrize("strategy", ["roundrobin", "range", "cooperative-sticky"])
def test_consumer_upgrade_downgrade_confluent(broker, strategy):
    upgrade_downgrade(broker.bootstrap_servers, "classic", strategy)


def test_consumer_upgrade_downgrade_kafka_python_classic(broker):
    upgrade_downgrade(broker.bootstrap_servers, "kafka-python")


def committed(admin, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = admin.list_consumer_group_offsets([req])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def test_offsets_and_conversions_survive_restarts():
    """Committed offsets are untouched by both conversions; an upgraded group (with its classic
    member) and a downgraded group come back as such after a broker restart."""
    from confluent_kafka import TopicPartition

    topic, group, n = "durable", "durable-group", 4
    with EmbeddedBroker(config=BROKER_CONFIG) as b:
        bs = b.bootstrap_servers
        ck_create_topic(bs, topic, n)
        produce(bs, topic, 40)
        # Nothing is committed but the offsets the test commits.
        classic = Member("classic", bs, group, topic, **{"enable.auto.commit": False})
        members = [classic]
        try:
            poll_until(members, lambda: len(classic.owned()) == n, "the classic member")
            classic.ck.commit(offsets=[TopicPartition(topic, p, 3) for p in range(n)],
                              asynchronous=False)
            expected = dict.fromkeys(range(n), 3)
            consumer = Member("consumer", bs, group, topic, **{"enable.auto.commit": False})
            members.append(consumer)
            poll_until(members, lambda: len(classic.owned()) == len(consumer.owned()) == n // 2,
                       "an even split after the upgrade")
            admin = ck_admin(bs)
            assert group_type(admin, group) == "CONSUMER"
            assert committed(admin, group, topic, n) == expected

            b.restart()
            admin = ck_admin(bs)
            assert group_type(admin, group) == "CONSUMER"
            desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
            assert len(desc.members) == 2
            poll_until(members, lambda: len(classic.owned()) == len(consumer.owned()) == n // 2,
                       "an even split after the restart")

            members.remove(consumer)
            consumer.close()
            poll_until(members, lambda: len(classic.owned()) == n, "all partitions, downgraded")
            assert group_type(admin, group) == "CLASSIC"
            assert committed(admin, group, topic, n) == expected
        finally:
            for m in members:
                m.close()
        b.restart()
        admin = ck_admin(bs)
        assert group_type(admin, group) == "CLASSIC"
        assert committed(admin, group, topic, n) == expected
