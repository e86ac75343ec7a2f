"""Share-group membership and the group-level admin surface against real clients.

* confluent-kafka's ``ShareConsumer`` (librdkafka 2.16) joins share groups with
  ShareGroupHeartbeat v1 (it finds its coordinator with a group key, FindCoordinator v2): two
  consumers split a 3-partition topic; ShareGroupDescribe and ListGroups (type filter "share")
  show them; a third topic subscription change is picked up.
* Membership ends: a member that stops heartbeating is removed after
  ``group.share.session.timeout.ms`` and its partitions go to the others; DeleteGroups refuses a
  group with members (NON_EMPTY_GROUP) and deletes an empty one.
* One group-id namespace: ShareGroupHeartbeat on a classic group's id and JoinGroup /
  DescribeGroups on a share group's id get Kafka's errors.
* Group configs (resource type GROUP) through confluent-kafka's AdminClient
  ``incremental_alter_configs`` / ``describe_configs``: validated, durable across a restart,
  and ``share.heartbeat.interval.ms`` / ``share.session.timeout.ms`` take effect on heartbeats.
* FindCoordinator key type 2 (share-partition keys) at v6.
* ``snakka groups list/describe`` show share groups, their members and partitions.
"""

from __future__ import annotations

import time
import uuid

import pytest

from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.consumer_group_describe_request import (
    ConsumerGroupDescribeRequest,
)
from snakka.protocol.messages.delete_groups_request import DeleteGroupsRequest
from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.messages.list_groups_request import ListGroupsRequest
from snakka.protocol.messages.share_group_describe_request import ShareGroupDescribeRequest
from snakka.protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from snakka.protocol.primitives import uuid_to_base64
from snakka.testing import EmbeddedBroker

from .helpers import SNAKKA, ck_admin, ck_create_topic, raw_connect, run, run_async, wait_until

pytestmark = pytest.mark.timeout(120)

# Long enough that a member heartbeating every 0.2 s stays in the group on a loaded CI machine
# (3 s was seen to expire one there), short enough for the expiry tests.
SESSION_MS = 6000
CONFIG = {
    # Short sessions so expiry is observable in a test; the bounds must allow them.
    "group.share.min.session.timeout.ms": "2000",
    "group.share.session.timeout.ms": str(SESSION_MS),
    "group.share.min.heartbeat.interval.ms": "200",
    "group.share.heartbeat.interval.ms": "500",
}


@pytest.fixture
def broker():
    b = EmbeddedBroker(config=CONFIG)
    b.start()
    yield b
    b.close()


async def _send(bs: str, request, version: int | None = None):
    conn = await raw_connect(bs)
    try:
        return await conn.send(request, version)
    finally:
        await conn.close()


def send(bs: str, request, version: int | None = None):
    return run_async(_send(bs, request, version))


def describe(bs: str, group: str):
    return send(bs, ShareGroupDescribeRequest(group_ids=[group],
                                              include_authorized_operations=False)).groups[0]


def list_groups(bs: str, types: list[str] | None = None) -> dict[str, tuple[str, str, str]]:
    r = send(bs, ListGroupsRequest(states_filter=[], types_filter=types or []))
    assert r.error_code == 0
    return {g.group_id: (g.group_type, g.group_state, g.protocol_type) for g in r.groups}


def heartbeat(bs: str, group: str, member: str, epoch: int, topics: list[str] | None = None):
    return send(bs, ShareGroupHeartbeatRequest(group_id=group, member_id=member,
                                               member_epoch=epoch, rack_id=None,
                                               subscribed_topic_names=topics))


class KeptMember:
    """A share-group member the test keeps in its group by heartbeating (one request each).

    The broker may expire it only when an answer came more than a session after the last
    heartbeat that kept it was sent: then the machine kept the test from heartbeating in time
    (a CI run at load 10 did) and the member rejoins. An expiry sooner than that is the
    broker's fault and fails the test."""

    def __init__(self, bs: str, group: str, topics: list[str]) -> None:
        self.bs, self.group, self.topics = bs, group, topics
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.sent_ok = 0.0  # when the last heartbeat that kept it was sent

    def heartbeat(self):
        sent = time.monotonic()
        if self.epoch == 0:
            r = heartbeat(self.bs, self.group, self.member_id, 0, self.topics)
        else:
            r = heartbeat(self.bs, self.group, self.member_id, self.epoch)
            if r.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                late = time.monotonic() - self.sent_ok
                assert late > SESSION_MS / 1000, (
                    f"{self.member_id} expired {late:.1f} s after the heartbeat that kept it")
                sent = time.monotonic()
                r = heartbeat(self.bs, self.group, self.member_id, 0, self.topics)
        assert r.error_code == 0, r
        self.epoch, self.sent_ok = r.member_epoch, sent
        return r


def assigned(member) -> set[tuple[str, int]]:
    return {(tp.topic_name, p) for tp in member.assignment.topic_partitions for p in tp.partitions}


class ShareConsumers:
    """confluent-kafka ShareConsumers driven by polling in the test thread."""

    def __init__(self, bs: str, group: str) -> None:
        self.bs, self.group = bs, group
        self.consumers: list = []

    def start(self, topics: list[str]):
        from confluent_kafka import ShareConsumer

        c = ShareConsumer({"bootstrap.servers": self.bs, "group.id": self.group,
                           "client.id": f"share-{len(self.consumers)}"})
        c.subscribe(topics)
        self.consumers.append(c)
        return c

    def poll_until(self, pred, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in self.consumers:
                c.poll(0.05)
            v = pred()
            if v:
                return v
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    def close_all(self) -> None:
        for c in self.consumers:
            c.close()
        self.consumers.clear()


def test_confluent_share_consumers_join_split_and_are_described(broker):
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "jobs", 3)
    ck_create_topic(bs, "more", 2)
    cs = ShareConsumers(bs, "workers")
    try:
        cs.start(["jobs"])
        d = cs.poll_until(lambda: (g := describe(bs, "workers")).members and g, 30,
                          "the first share consumer to join")
        assert (d.error_code, d.group_state, d.assignor_name) == (0, "Stable", "simple")
        [m] = d.members
        assert m.client_id == "share-0" and m.subscribed_topic_names == ["jobs"]
        assert assigned(m) == {("jobs", p) for p in range(3)}
        cs.start(["jobs"])

        def split():
            g = describe(bs, "workers")
            mine = [assigned(x) for x in g.members]
            if (len(mine) == 2 and all(x.member_epoch == g.assignment_epoch for x in g.members)
                    and all(mine)):
                return g
            return None

        g = cs.poll_until(split, 30, "both share consumers to reconcile")
        a, b = (assigned(x) for x in g.members)
        assert a | b == {("jobs", p) for p in range(3)} and not a & b
        assert sorted(len(x) for x in (a, b)) == [1, 2]
        assert {x.client_id for x in g.members} == {"share-0", "share-1"}
        # ListGroups: the share group with its type, state and protocol type; type filters.
        assert list_groups(bs)["workers"] == ("share", "Stable", "share")
        assert set(list_groups(bs, ["share"])) == {"workers"}
        assert "workers" not in list_groups(bs, ["consumer", "classic"])
        r = send(bs, ListGroupsRequest(states_filter=["Empty"], types_filter=[]))
        assert "workers" not in {x.group_id for x in r.groups}
        # DeleteGroups refuses a group with members.
        r = send(bs, DeleteGroupsRequest(groups_names=["workers"]))
        assert r.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    finally:
        cs.close_all()
    # Closed consumers leave (or, at the latest, expire after the session timeout).
    wait_until(lambda: describe(bs, "workers").group_state == "Empty", SESSION_MS / 1000 + 10,
               "the group to become empty after the consumers closed")
    admin = ck_admin(bs)
    admin.delete_consumer_groups(["workers"])["workers"].result(timeout=20)
    assert "workers" not in list_groups(bs)
    gone = describe(bs, "workers")
    assert (gone.error_code, gone.error_message, gone.group_state) == (
        ErrorCode.GROUP_ID_NOT_FOUND, "Group workers not found.", "")


def test_silent_member_expires_and_its_partitions_move(broker):
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "q", 4)
    kept = KeptMember(bs, "g", ["q"])
    stays, silent = kept.member_id, str(uuid.uuid4())
    r = kept.heartbeat()
    assert r.error_code == 0 and r.heartbeat_interval_ms == 500
    assert sum(len(tp.partitions) for tp in r.assignment.topic_partitions) == 4
    r = heartbeat(bs, "g", silent, 0, ["q"])
    assert r.error_code == 0 and r.member_epoch == 2
    assert sum(len(tp.partitions) for tp in r.assignment.topic_partitions) == 2
    t0 = time.monotonic()
    owned = 0
    # Keep one member alive; the other never heartbeats again.
    while time.monotonic() - t0 < SESSION_MS / 1000 + 10:
        r = kept.heartbeat()
        if r.assignment is not None:
            owned = sum(len(tp.partitions) for tp in r.assignment.topic_partitions)
        if owned == 4 and len(describe(bs, "g").members) == 1:
            break
        time.sleep(0.2)
    assert owned == 4
    assert [m.member_id for m in describe(bs, "g").members] == [stays]

    # `stays` heartbeats before each step: on a loaded machine the steps can take longer than
    # its session, and what is checked here is the silent member, not how fast this test runs.
    # The expired member is unknown now; it may rejoin with epoch 0.
    kept.heartbeat()
    assert heartbeat(bs, "g", silent, 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    kept.heartbeat()
    assert heartbeat(bs, "g", silent, 0, ["q"]).error_code == 0
    # Leaving with epoch -1 is immediate.
    kept.heartbeat()
    r = heartbeat(bs, "g", silent, -1)
    assert (r.error_code, r.member_epoch) == (0, -1)
    assert [m.member_id for m in describe(bs, "g").members] == [stays]


def test_group_id_namespace_is_shared(broker):
    from confluent_kafka import Consumer

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "t", 1)
    c = Consumer({"bootstrap.servers": bs, "group.id": "classic-g", "session.timeout.ms": 6000})
    try:
        c.subscribe(["t"])
        wait_until(lambda: c.poll(0.1) is None and c.assignment(), 30, "the classic member")
        r = heartbeat(bs, "classic-g", str(uuid.uuid4()), 0, ["t"])
        assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                   "Group classic-g is not a share group.")
        d = describe(bs, "classic-g")
        assert (d.error_code, d.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                   "Group classic-g is not a share group.")
    finally:
        c.close()
    sg_member = KeptMember(bs, "sg", ["t"])
    sg_member.heartbeat()
    # A classic consumer cannot use the share group's id.
    c2 = Consumer({"bootstrap.servers": bs, "group.id": "sg", "session.timeout.ms": 6000})
    errors = []
    try:
        c2.subscribe(["t"], on_assign=lambda *_: errors.append("assigned"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not errors:
            m = c2.poll(0.1)
            if m is not None and m.error():
                errors.append(m.error().code())
            # The share member keeps heartbeating meanwhile, so the group's state at the end
            # says what the classic consumer did to it, not whether its session ran out.
            sg_member.heartbeat()
    finally:
        c2.close()
    from confluent_kafka import KafkaError

    assert errors and errors[0] == KafkaError.INCONSISTENT_GROUP_PROTOCOL
    r = send(bs, DescribeGroupsRequest(groups=["sg"], include_authorized_operations=False),
             version=5)
    assert r.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    r = send(bs, ConsumerGroupDescribeRequest(group_ids=["sg", "nope"],
                                              include_authorized_operations=False), version=0)
    assert [g.error_code for g in r.groups] == [ErrorCode.GROUP_ID_NOT_FOUND] * 2
    assert r.groups[0].error_message == "Group sg is not a consumer group."
    assert r.groups[1].error_message == "Group nope not found."
    assert describe(bs, "sg").group_state == "Stable"


def test_group_configs_via_confluent_admin(broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    bs = broker.bootstrap_servers
    admin = ck_admin(bs)

    def alter(group: str, **entries: str | None):
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(k.replace("_", "."), v,
                        incremental_operation=AlterConfigOpType.SET if v is not None
                        else AlterConfigOpType.DELETE) for k, v in entries.items()])
        return admin.incremental_alter_configs([res])[res].result(timeout=20)

    def described(group: str) -> dict[str, tuple[str, int]]:
        res = ConfigResource(ResourceType.GROUP, group)
        entries = admin.describe_configs([res])[res].result(timeout=20)
        return {n: (e.value, int(e.source)) for n, e in entries.items()}

    before = described("cfg")
    assert before["share.auto.offset.reset"] == ("latest", 5)                # DEFAULT_CONFIG
    assert before["share.session.timeout.ms"] == (str(SESSION_MS), 4)        # STATIC_BROKER
    alter("cfg", share_auto_offset_reset="earliest", share_record_lock_duration_ms="20000",
          share_heartbeat_interval_ms="300")
    after = described("cfg")
    assert after["share.auto.offset.reset"] == ("earliest", 8)               # GROUP_CONFIG
    assert after["share.record.lock.duration.ms"] == ("20000", 8)
    assert described("other")["share.auto.offset.reset"] == ("latest", 5)
    for bad in ({"share_record_lock_duration_ms": "1000"},          # below the broker minimum
                {"share_isolation_level": "serializable"},
                {"share_auto_offset_reset": "by_duration:yesterday"},
                {"consumer_session_timeout_ms": "50000"},           # not applied by snakka
                {"no_such_config": "1"}):
        with pytest.raises(KafkaException) as e:
            alter("cfg", **bad)
        assert e.value.args[0].code() == 40, bad  # INVALID_CONFIG
    assert described("cfg")["share.record.lock.duration.ms"] == ("20000", 8)
    # The group's heartbeat interval applies to its members at once.
    r = heartbeat(bs, "cfg", str(uuid.uuid4()), 0, ["anything"])
    assert r.error_code == 0 and r.heartbeat_interval_ms == 300
    # Durable: the metadata log keeps group configs across a restart.
    broker.restart()
    assert described("cfg")["share.auto.offset.reset"] == ("earliest", 8)
    alter("cfg", share_auto_offset_reset=None)
    assert described("cfg")["share.auto.offset.reset"] == ("latest", 5)
    assert broker.broker.controller.resolver.group_value("cfg", "share.record.lock.duration.ms") == "20000"


def test_find_coordinator_share_keys(broker):
    bs = broker.bootstrap_servers
    tid = uuid_to_base64(uuid.uuid4())
    r = send(bs, FindCoordinatorRequest(key_type=2, coordinator_keys=[
        f"g:{tid}:0", f"a:b:{tid}:7", f"g:{tid}", "g:notanid:0"]), version=6)
    got = [(c.key, c.error_code, c.node_id) for c in r.coordinators]
    node = broker.broker.node_id
    assert got == [(f"g:{tid}:0", 0, node), (f"a:b:{tid}:7", 0, node),
                   (f"g:{tid}", ErrorCode.INVALID_REQUEST, -1),
                   ("g:notanid:0", ErrorCode.INVALID_REQUEST, -1)]
    assert all(c.port == broker.port for c in r.coordinators if c.error_code == 0)
    old = send(bs, FindCoordinatorRequest(key_type=2, coordinator_keys=[f"g:{tid}:0"]),
               version=5)
    assert old.coordinators[0].error_code == ErrorCode.INVALID_REQUEST


def test_cli_lists_and_describes_share_groups(snakka_broker_factory):
    # The default 45 s session: the members heartbeat once and must stay members while two CLI
    # subprocesses start on a busy machine (a 3 s session let them expire: a flaky test).
    broker = snakka_broker_factory()
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "cli-topic", 2)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    assert heartbeat(bs, "cli-g", a, 0, ["cli-topic"]).error_code == 0
    assert heartbeat(bs, "cli-g", b, 0, ["cli-topic"]).error_code == 0
    assert heartbeat(bs, "cli-g", a, 1).error_code == 0
    env = {"COLUMNS": "300", "NO_COLOR": "1", "TERM": "dumb"}
    out = run([SNAKKA, "groups", "list", "-b", bs], env=env, timeout=60).stdout.decode()
    assert "cli-g\tshare\tStable" in out
    out = run([SNAKKA, "groups", "describe", "cli-g", "-b", bs], env=env,
              timeout=60).stdout.decode()
    assert "type share" in out and "assignor simple" in out and "members 2" in out
    rows = [ln for ln in out.splitlines() if "cli-topic" in ln]
    assert len(rows) == 2
    # One member per partition, each member on its own partition.
    assert {a in rows[0], a in rows[1]} == {True, False}
    assert {b in rows[0], b in rows[1]} == {True, False}
