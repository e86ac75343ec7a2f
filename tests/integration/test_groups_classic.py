"""Classic consumer groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit) with real
clients: kafka-python, confluent-kafka (librdkafka) and aiokafka, each test once per client.

Members are client processes started by :mod:`.test_groups_harness` (read its doc for why a
process per member, and what the members report). A ``Feeder`` produces numbered records
round-robin over the partitions while the group changes, and at the end every record must have
been consumed with its produced value, and a record consumed twice only if its first
consumption was never committed (``check_deliveries``); no partition may ever have been owned
by two members at once (``check_no_overlap``).

* membership: 3 members share 6 partitions (each owns some, none twice, all covered); a 4th
  joins; one is SIGKILLed (no LeaveGroup) and its partitions move to the others once its
  session times out; one closes normally (LeaveGroup) and its partitions move too.
* committed offsets survive broker restarts: one restart while members consume and commit,
  one with the group empty; new members resume exactly at the committed offsets; and a
  SIGKILL of a subprocess broker loses no acknowledged commit.
* static membership (``group.instance.id``): a member restarts within its session timeout and
  gets its partitions back while the others see no rebalance (no callbacks, same generation
  where the client exposes it, same member ids in DescribeGroups).
* mixed clients: a kafka-python leader assigns to librdkafka and aiokafka members.
* cooperative-sticky (librdkafka and kafka-python 3's ``CooperativeStickyAssignor``,
  KIP-429): a member joins and one leaves with incremental rebalances: partitions that do not
  move are never revoked. aiokafka has no cooperative protocol: it runs the same scenario with
  its (eager) sticky assignor, where everything is revoked at each rebalance but the final
  placement must still keep every partition that did not have to move.

The broker runs in-process (thread mode), so any ERROR it logs fails the test (conftest).
"""

from __future__ import annotations

import time

import pytest

from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic
from .test_groups_harness import (
    CLASSIC_CLIENTS,
    GROUP_BROKER_CONFIG,
    Feeder,
    Members,
    check_deliveries,
    check_no_overlap,
    membership_scenario,
    restart_scenario,
    revoked_since,
)

PARTITIONS = 6
pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def broker():
    b = EmbeddedBroker(config=GROUP_BROKER_CONFIG)
    b.start()
    yield b
    b.close()


@pytest.fixture
def topic(broker):
    ck_create_topic(broker.bootstrap_servers, "events", PARTITIONS)
    return "events"


@pytest.fixture
def members_of(broker, topic):
    """``members_of(client, group, **member_defaults)`` -> Members; all killed at teardown."""
    made: list[Members] = []

    def make(client: str, group: str, **defaults) -> Members:
        ms = Members(client, broker.bootstrap_servers, group, topic, **defaults)
        made.append(ms)
        return ms

    yield make
    for ms in made:
        ms.stop_all()


@pytest.mark.parametrize("client", CLASSIC_CLIENTS)
def test_members_share_rebalance_and_expire(client, broker, topic, members_of):
    ms = members_of(client, "g-membership", session_timeout_ms=3000)
    feeder = Feeder(broker.bootstrap_servers, topic, PARTITIONS, "m").start()
    membership_scenario(ms, feeder, PARTITIONS, incremental=False)


@pytest.mark.parametrize("client", CLASSIC_CLIENTS)
def test_committed_offsets_survive_restarts(client, broker, topic, members_of):
    ms = members_of(client, "g-restart", session_timeout_ms=6000, max_batch=25)
    restart_scenario(broker, ms, Feeder(broker.bootstrap_servers, topic, PARTITIONS, "r"),
                     PARTITIONS)


@pytest.mark.parametrize("client", CLASSIC_CLIENTS)
def test_static_member_restarts_without_rebalance(client, broker, topic, members_of):
    from confluent_kafka.admin import AdminClient

    bs = broker.bootstrap_servers
    group = "g-static"
    ms = members_of(client, group, session_timeout_ms=15000, assignor="range")
    # a joins alone first, so it is the group leader; the restarted member is not the leader
    # (a restarted static leader may legitimately trigger a rebalance, KIP-814).
    a = ms.start("a", instance_id="static-a")
    ms.wait_shared([a], PARTITIONS)
    b = ms.start("b", instance_id="static-b")
    c = ms.start("c", instance_id="static-c")
    owned = ms.wait_shared([a, b, c], PARTITIONS)
    before = {m.name: m.snapshot() for m in (a, b, c)}

    c.close()  # a static member sends no LeaveGroup
    c2 = ms.start("c2", instance_id="static-c")
    ms.wait(lambda: c2.snapshot()["owned"] == owned["c"], 30,
            f"the restarted static member to get {sorted(owned['c'])} back")
    if before["c"]["gen"] is not None:
        assert c2.snapshot()["gen"] == before["c"]["gen"], (before["c"], c2.snapshot())

    admin = AdminClient({"bootstrap.servers": bs})
    desc = admin.describe_consumer_groups([group])[group].result(timeout=15)
    assert desc.state.name == "STABLE", desc.state
    ids = {m.group_instance_id: m.member_id for m in desc.members}
    assert set(ids) == {"static-a", "static-b", "static-c"}, ids
    assert ids["static-a"] == before["a"]["member"] and ids["static-b"] == before["b"]["member"]
    assert ids["static-c"] == c2.snapshot()["member"]

    # The absence of a rebalance can only be observed over a window (no event to await): a
    # rebalance the rejoin had started would reach a and b at their next heartbeat (300 ms).
    time.sleep(1.5)
    for m in (a, b):
        assert m.events_since(before[m.name]["n_events"]) == [], (
            f"{m.name} saw a rebalance: {m.events_since(before[m.name]['n_events'])}")
        assert m.snapshot()["owned"] == owned[m.name]
        assert m.snapshot()["gen"] == before[m.name]["gen"]


COOPERATIVE = {"confluent-kafka": "cooperative-sticky", "kafka-python": "cooperative-sticky",
               "aiokafka": "sticky"}  # aiokafka: no cooperative protocol, eager sticky


@pytest.mark.parametrize("client", CLASSIC_CLIENTS)
def test_cooperative_sticky_incremental_rebalances(client, broker, topic, members_of):
    bs = broker.bootstrap_servers
    cooperative = COOPERATIVE[client] == "cooperative-sticky"
    ms = members_of(client, "g-coop", session_timeout_ms=6000, assignor=COOPERATIVE[client])
    feeder = Feeder(bs, topic, PARTITIONS, "c").start()
    a, b, c = ms.start("a"), ms.start("b"), ms.start("c")
    before = ms.wait_shared([a, b, c], PARTITIONS)
    marks = {m.name: m.snapshot()["n_events"] for m in (a, b, c)}

    d = ms.start("d")
    after = ms.wait_shared([a, b, c, d], PARTITIONS, what="the 4th member to get partitions")
    sizes = sorted(len(s) for s in after.values())
    assert sizes[-1] - sizes[0] <= 1, after
    for m in (a, b, c):  # sticky: old members only give partitions away
        assert after[m.name] <= before[m.name], (before, after)
        revoked = revoked_since(m, marks[m.name])
        if cooperative:
            assert revoked <= before[m.name] - after[m.name], (
                f"{m.name} kept {sorted(after[m.name])} but had {sorted(revoked)} revoked")
        else:  # eager: everything is revoked, and the kept partitions come back
            assert revoked == before[m.name], (m.name, revoked, before)

    marks = {m.name: m.snapshot()["n_events"] for m in (a, b, d)}
    c.close()
    final = ms.wait_shared([a, b, d], PARTITIONS, what="c's partitions to move after it left")
    for m in (a, b, d):
        assert final[m.name] >= after[m.name], (after, final)
        if cooperative:
            revoked = [e for e in m.events_since(marks[m.name]) if e["ev"] == "revoked"]
            assert revoked == [], f"{m.name} had partitions revoked: {revoked}"

    produced = feeder.stop()
    ms.wait_delivered(produced)
    check_deliveries(ms.deliveries(), produced)
    check_no_overlap(ms.all)


def test_mixed_clients_share_a_group(broker, topic, members_of):
    """kafka-python, librdkafka and aiokafka members in one group (all ``range``): each
    decodes the assignment another client's leader computed; the killed leader's partitions
    move to the others."""
    ms = members_of("kafka-python", "g-mixed", session_timeout_ms=3000, assignor="range")
    feeder = Feeder(broker.bootstrap_servers, topic, PARTITIONS, "x").start()
    a = ms.start("a")  # first, so the leader: kafka-python
    ms.wait_shared([a], PARTITIONS)
    b, c = ms.start("b", client="confluent-kafka"), ms.start("c", client="aiokafka")
    owned = ms.wait_shared([a, b, c], PARTITIONS)
    assert all(len(s) == 2 and max(s) - min(s) == 1 for s in owned.values()), owned  # range
    a.kill()
    owned = ms.wait_shared([b, c], PARTITIONS, timeout=60, what="the killed leader's partitions")
    assert sorted(sorted(s) for s in owned.values()) == [[0, 1, 2], [3, 4, 5]], owned
    produced = feeder.stop()
    ms.wait_delivered(produced)
    check_deliveries(ms.deliveries(), produced)
    check_no_overlap(ms.all)


def test_committed_offsets_survive_kill_9():
    """Acknowledged commits survive a SIGKILL of the broker (subprocess) with the default
    flush policy: a new consumer of the group resumes exactly at them."""
    from confluent_kafka import Consumer, TopicPartition

    from .test_groups_harness import committed_offsets

    b = EmbeddedBroker(config=GROUP_BROKER_CONFIG, mode="subprocess")
    b.start()
    try:
        bs = b.bootstrap_servers
        ck_create_topic(bs, "events", PARTITIONS)
        feeder = Feeder(bs, "events", PARTITIONS, "k")
        feeder.burst(60)
        ms = Members("confluent-kafka", bs, "g-kill", "events", session_timeout_ms=6000)
        try:
            m = ms.start("a")
            ms.wait(lambda: sum(d.committed for d in m.deliveries) >= 60, 30,
                    "60 records consumed and committed")
            m.close()
        finally:
            ms.stop_all()
        assert committed_offsets(bs, "g-kill", "events", PARTITIONS) == {
            p: 10 for p in range(PARTITIONS)}
        b.kill()
        b.start()
        assert committed_offsets(bs, "g-kill", "events", PARTITIONS) == {
            p: 10 for p in range(PARTITIONS)}
        feeder.burst(12)
        c = Consumer({"bootstrap.servers": bs, "group.id": "g-kill", "auto.offset.reset":
                      "earliest", "enable.auto.commit": False})
        try:
            c.subscribe(["events"])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 12 and time.monotonic() < deadline:
                got += [msg for msg in c.consume(100, timeout=0.2) if not msg.error()]
            assert sorted((msg.partition(), msg.offset()) for msg in got) == sorted(
                (p, o) for p in range(PARTITIONS) for o in (10, 11)), "not resumed at commits"
            c.commit(offsets=[TopicPartition("events", p, 12) for p in range(PARTITIONS)],
                     asynchronous=False)
        finally:
            c.close()
    finally:
        b.close()
    bad = [ln for ln in b.output if "Traceback" in ln or " ERROR " in ln]
    assert not bad, "the broker logged errors:\n" + "\n".join(bad[:20])
