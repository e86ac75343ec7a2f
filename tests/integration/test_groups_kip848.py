"""KIP-848 consumer groups (ConsumerGroupHeartbeat, server-side assignors) with confluent-kafka.

librdkafka speaks the new protocol with ``group.protocol=consumer``; the client then sets no
``partition.assignment.strategy`` / ``session.timeout.ms`` / ``heartbeat.interval.ms``: the
broker's ``group.consumer.*`` configs decide (here a 3 s session and a 300 ms heartbeat
interval, lowered from Kafka's 45 s / 5 s through their ``min`` configs). Members are
processes (:mod:`.test_groups_harness`).

* The classic suite's membership scenario: 3 members share 6 partitions, a 4th joins, one is
  SIGKILLed and its partitions move after the group's session timeout, one leaves. KIP-848
  rebalances are incremental, so a partition that stays with its owner is never revoked.
  ConsumerGroupDescribe (confluent AdminClient ``describe_consumer_groups``) reports the group
  as a ``consumer`` group with the members' real assignments.
* Committed offsets (OffsetCommit with member epochs) survive broker restarts.
* ``group.remote.assignor``: with two 6-partition topics, ``range`` co-partitions (a member
  owns the same partition numbers of both topics, 2+2 / 1+1 per member with 4 members) and
  ``uniform`` balances the 12 partitions (3 per member).
* Protocol misuse (snakka's protocol client): the codes Kafka's GroupMetadataManager returns.
"""

from __future__ import annotations

import uuid

import pytest

from snakka.protocol.errors import ErrorCode as E
from snakka.protocol.messages.consumer_group_heartbeat_request import (
    ConsumerGroupHeartbeatRequest,
)
from snakka.protocol.messages.consumer_group_heartbeat_request import (
    TopicPartitions as OwnedPartitions,
)
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, raw_connect, run_async
from .test_groups_harness import (
    GROUP_BROKER_CONFIG,
    Feeder,
    Members,
    membership_scenario,
    restart_scenario,
)

PARTITIONS = 6
pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def broker():
    b = EmbeddedBroker(config=GROUP_BROKER_CONFIG)
    b.start()
    ck_create_topic(b.bootstrap_servers, "events", PARTITIONS)
    yield b
    b.close()


def broker_settled(bootstrap: str, group: str, topic: str):
    """A ``Members.settled_check``: ConsumerGroupDescribe shows the group Stable with every
    member at its target assignment, and that assignment is what the clients report."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    multi = "," in topic

    def keys(tps) -> set:
        return {f"{tp.topic}:{tp.partition}" if multi else tp.partition for tp in tps}

    def check(owned: dict[str, set]) -> bool:
        d = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
        return (d.state == ConsumerGroupState.STABLE
                and all(keys(m.assignment.topic_partitions) ==
                        keys(m.target_assignment.topic_partitions) for m in d.members)
                and {m.client_id: keys(m.assignment.topic_partitions) for m in d.members}
                == owned)

    return check


@pytest.fixture
def members_of(broker):
    made: list[Members] = []

    def make(group: str, topic: str = "events", **defaults) -> Members:
        ms = Members("confluent-kafka", broker.bootstrap_servers, group, topic,
                     group_protocol="consumer", **defaults)
        ms.settled_check = broker_settled(broker.bootstrap_servers, group, topic)
        made.append(ms)
        return ms

    yield make
    for ms in made:
        ms.stop_all()


def describe(bootstrap: str, group: str):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group], request_timeout=15)[group].result()


def test_membership_rebalance_expiry_leave(broker, members_of):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType

    bs = broker.bootstrap_servers
    group = "g-848"
    ms = members_of(group)
    feeder = Feeder(bs, "events", PARTITIONS, "k").start()

    def check_describe(owned):
        # The broker's view settles once every member acknowledged its assignment in a
        # heartbeat, which may be just after the clients' callbacks ran.
        def settled():
            d = describe(bs, group)
            got = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions}
                   for m in d.members}
            return d if d.state == ConsumerGroupState.STABLE and got == owned else None

        d = ms.wait(settled, 20, "ConsumerGroupDescribe to show the clients' assignment")
        assert d.type == ConsumerGroupType.CONSUMER, d.type
        assert d.partition_assignor == "uniform", d.partition_assignor  # the broker default
        assert {m.member_id for m in d.members} == {m.member_id for m in ms.alive}
        for m in d.members:
            assert {tp.partition for tp in m.target_assignment.topic_partitions} == \
                owned[m.client_id]

    membership_scenario(ms, feeder, PARTITIONS, incremental=True, with_four=check_describe)


def test_committed_offsets_survive_restarts(broker, members_of):
    ms = members_of("g-848-restart", max_batch=25)
    restart_scenario(broker, ms, Feeder(broker.bootstrap_servers, "events", PARTITIONS, "r"),
                     PARTITIONS)


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_remote_assignor(assignor, broker, members_of):
    bs = broker.bootstrap_servers
    for t in ("left", "right"):
        ck_create_topic(bs, t, PARTITIONS)
    universe = {f"{t}:{p}" for t in ("left", "right") for p in range(PARTITIONS)}
    group = f"g-assignor-{assignor}"
    ms = members_of(group, topic="left,right", remote_assignor=assignor)

    def check(owned: dict[str, set[str]], n: int) -> None:
        sizes = sorted(len(s) for s in owned.values())
        if assignor == "uniform":
            assert sizes[-1] - sizes[0] <= 1, owned
        else:  # range: per topic, and the same partition numbers of both topics together
            for name, s in owned.items():
                left = {k.split(":")[1] for k in s if k.startswith("left:")}
                right = {k.split(":")[1] for k in s if k.startswith("right:")}
                assert left == right, f"{name} is not co-partitioned: {sorted(s)}"
            assert sizes == sorted(2 * (PARTITIONS // n + (i < PARTITIONS % n))
                                   for i in range(n)), owned

    first = [ms.start(n) for n in ("a", "b", "c")]
    check(ms.wait_shared(first, universe), 3)
    d = ms.start("d")
    owned = ms.wait_shared([*first, d], universe, what="the 4th member to get partitions")
    check(owned, 4)
    if assignor == "uniform":
        assert sorted(len(s) for s in owned.values()) == [3, 3, 3, 3], owned
    else:
        assert sorted(len(s) for s in owned.values()) == [2, 2, 4, 4], owned
    assert describe(bs, group).partition_assignor == assignor


def hb(**kw) -> ConsumerGroupHeartbeatRequest:
    """A joining heartbeat (epoch 0) for group g-848-errors, with ``kw`` overriding fields."""
    return ConsumerGroupHeartbeatRequest(**{"group_id": "g-848-errors", "member_id":
                                            str(uuid.uuid4()), "member_epoch": 0,
                                            "rebalance_timeout_ms": 10000,
                                            "subscribed_topic_names": ["events"],
                                            "topic_partitions": [], **kw})


def test_heartbeat_empty_group_id(broker):
    """Kafka (throwIfConsumerGroupHeartbeatRequestIsInvalid): INVALID_REQUEST, not 24."""

    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            for epoch in (0, 1, -1):
                r = await conn.send(hb(group_id="", member_epoch=epoch), version=1)
                assert r.error_code == E.INVALID_REQUEST, (epoch, r.error_code)
        finally:
            await conn.close()

    run_async(go(), timeout=30)


def test_heartbeat_protocol_errors(broker):
    """ConsumerGroupHeartbeat misuse gets Kafka's codes; the group keeps working."""

    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            send = conn.send
            r = await send(hb(member_id=""), version=1)
            assert r.error_code == E.INVALID_REQUEST, r.error_code  # v1: client-made member id
            r = await send(hb(subscribed_topic_names=None), version=1)
            assert r.error_code == E.INVALID_REQUEST, r.error_code  # joining needs topics
            r = await send(hb(rebalance_timeout_ms=-1), version=1)
            assert r.error_code == E.INVALID_REQUEST, r.error_code  # joining needs a timeout
            r = await send(hb(server_assignor="no-such-assignor"), version=1)
            assert r.error_code == E.UNSUPPORTED_ASSIGNOR, r.error_code

            me = str(uuid.uuid4())
            r = await send(hb(member_id=me), version=1)
            assert r.error_code == 0 and r.member_id == me and r.member_epoch >= 1, r
            assert r.heartbeat_interval_ms == 300, r.heartbeat_interval_ms  # the broker's config
            epoch = r.member_epoch
            owned = [OwnedPartitions(topic_id=tp.topic_id, partitions=tp.partitions)
                     for tp in (r.assignment.topic_partitions if r.assignment else [])]
            # A member epoch ahead of the group's, or an unknown member: fenced / unknown.
            r = await send(hb(member_id=me, member_epoch=epoch + 7, rebalance_timeout_ms=-1,
                              subscribed_topic_names=None, topic_partitions=None), version=1)
            assert r.error_code == E.FENCED_MEMBER_EPOCH, r.error_code
            r = await send(hb(member_id=str(uuid.uuid4()), member_epoch=epoch,
                              rebalance_timeout_ms=-1, subscribed_topic_names=None,
                              topic_partitions=None), version=1)
            assert r.error_code == E.UNKNOWN_MEMBER_ID, r.error_code
            # Re-joining with epoch 0 while owning partitions is invalid.
            r = await send(hb(member_id=str(uuid.uuid4()), topic_partitions=owned or [
                OwnedPartitions(topic_id=uuid.uuid4(), partitions=[0])]), version=1)
            assert r.error_code == E.INVALID_REQUEST, r.error_code
            # The member is still there (a rejected heartbeat changes nothing); it leaves, and
            # then it is unknown.
            r = await send(hb(member_id=me, member_epoch=epoch, rebalance_timeout_ms=-1,
                              subscribed_topic_names=None, topic_partitions=owned), version=1)
            assert r.error_code == 0 and r.member_epoch == epoch, (r.error_code, r.member_epoch)
            r = await send(hb(member_id=me, member_epoch=-1, rebalance_timeout_ms=-1,
                              subscribed_topic_names=None, topic_partitions=None), version=1)
            assert r.error_code == 0 and r.member_epoch == -1, (r.error_code, r.member_epoch)
            r = await send(hb(member_id=me, member_epoch=1, rebalance_timeout_ms=-1,
                              subscribed_topic_names=None, topic_partitions=None), version=1)
            assert r.error_code == E.UNKNOWN_MEMBER_ID, r.error_code
        finally:
            await conn.close()

    run_async(go(), timeout=60)
