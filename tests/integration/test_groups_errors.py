"""Classic group protocol misuse at the wire level: the Kafka error code a real broker sends, a
clean close for what cannot be answered, and a broker that stays healthy.

Real clients never send most of these requests on purpose, so they are built with snakka's
protocol client (``snakka.client.connection.KafkaConnection`` + the generated request classes).
The codes are Kafka's (its GroupCoordinator / GroupMetadataManager):

* JoinGroup v4+ with an empty member id: MEMBER_ID_REQUIRED (79) with the id to use; v3 joins
  directly; a static member (group.instance.id) is never asked for one.
* Heartbeat / SyncGroup / OffsetCommit with a generation other than the group's:
  ILLEGAL_GENERATION (22); with a member id the group does not know: UNKNOWN_MEMBER_ID (25),
  which LeaveGroup v3+ reports per member.
* JoinGroup whose protocol type, or whose protocol names, do not match a non-empty group's, or
  an empty group joined with no protocols: INCONSISTENT_GROUP_PROTOCOL (23).
* An empty group id: INVALID_GROUP_ID (24) from JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  DescribeGroups and DeleteGroups; a session timeout outside the broker's
  ``group.{min,max}.session.timeout.ms``: INVALID_SESSION_TIMEOUT (26).
* A static member replaced by a newer instance with the same group.instance.id is fenced:
  FENCED_INSTANCE_ID (82) on its Heartbeat, SyncGroup, JoinGroup, OffsetCommit and LeaveGroup.
* Member metadata of several MB: any answer or a clean close, no crash.
* DescribeGroups of an unknown group: Dead with no error up to v5, GROUP_ID_NOT_FOUND from v6
  (KIP-1043).
* Timers and KIP-394: a member that does not rejoin is dropped after its rebalance timeout; a
  pending member (answered MEMBER_ID_REQUIRED, never back) starts no rebalance.

After each case a second connection (open all along) and a fresh group prove the broker is
healthy; the last test drives a real confluent-kafka group after all of the above.
"""

from __future__ import annotations

import struct
import time

import pytest

from snakka.protocol.errors import ErrorCode as E
from snakka.protocol.messages.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
)
from snakka.protocol.messages.consumer_protocol_assignment import (
    TopicPartition as AssignedPartitions,
)
from snakka.protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from snakka.protocol.messages.delete_groups_request import DeleteGroupsRequest
from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest
from snakka.protocol.messages.heartbeat_request import HeartbeatRequest
from snakka.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from snakka.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from snakka.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
)
from snakka.protocol.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, raw_connect, run_async
from .test_groups_harness import GROUP_BROKER_CONFIG

TOPIC = "events"
pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def broker():
    b = EmbeddedBroker(config=GROUP_BROKER_CONFIG)
    b.start()
    ck_create_topic(b.bootstrap_servers, TOPIC, 6)
    yield b
    b.close()


def subscription(topics=(TOPIC,), user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription v0 as a consumer puts it in JoinGroup (version prefix)."""
    return struct.pack(">h", 0) + ConsumerProtocolSubscription(
        topics=list(topics), user_data=user_data).encode(0)


def assignment(partitions, user_data: bytes | None = None) -> bytes:
    return struct.pack(">h", 0) + ConsumerProtocolAssignment(
        assigned_partitions=[AssignedPartitions(topic=TOPIC, partitions=list(partitions))],
        user_data=user_data).encode(0)


def join_request(group: str, member_id: str = "", *, instance_id: str | None = None,
                 protocol_type: str = "consumer", protocols=None, session_ms: int = 10000,
                 rebalance_ms: int = 10000, metadata: bytes | None = None) -> JoinGroupRequest:
    if protocols is None:
        protocols = [JoinGroupRequestProtocol(name="range",
                                              metadata=metadata or subscription())]
    return JoinGroupRequest(group_id=group, session_timeout_ms=session_ms,
                            rebalance_timeout_ms=rebalance_ms, member_id=member_id,
                            group_instance_id=instance_id, protocol_type=protocol_type,
                            protocols=protocols)


async def join(conn, group: str, version: int = 5, **kw):
    """JoinGroup, answering MEMBER_ID_REQUIRED with the id the broker gave."""
    r = await conn.send(join_request(group, **kw), version=version)
    if r.error_code == E.MEMBER_ID_REQUIRED:
        kw["member_id"] = r.member_id
        r = await conn.send(join_request(group, **kw), version=version)
    return r


async def sync(conn, group: str, generation: int, member_id: str, assignments=(), *,
               instance_id: str | None = None, version: int = 3):
    return await conn.send(SyncGroupRequest(
        group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance_id, protocol_type="consumer", protocol_name="range",
        assignments=[SyncGroupRequestAssignment(member_id=m, assignment=a)
                     for m, a in assignments]), version=version)


async def heartbeat(conn, group: str, generation: int, member_id: str,
                    instance_id: str | None = None, version: int = 3) -> int:
    r = await conn.send(HeartbeatRequest(group_id=group, generation_id=generation,
                                         member_id=member_id, group_instance_id=instance_id),
                        version=version)
    return r.error_code


async def commit(conn, group: str, generation: int, member_id: str, offsets: dict[int, int],
                 instance_id: str | None = None, version: int = 8) -> dict[int, int]:
    r = await conn.send(OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=instance_id, topics=[OffsetCommitRequestTopic(
            name=TOPIC, partitions=[OffsetCommitRequestPartition(partition_index=p,
                                                                 committed_offset=o)
                                    for p, o in offsets.items()])]), version=version)
    return {p.partition_index: p.error_code for t in r.topics for p in t.partitions}


async def fetch_committed(conn, group: str) -> dict[int, int]:
    r = await conn.send(OffsetFetchRequest(
        group_id=group, topics=[OffsetFetchRequestTopic(name=TOPIC,
                                                         partition_indexes=list(range(6)))]),
        version=5)
    assert r.error_code == 0, r.error_code
    return {p.partition_index: p.committed_offset for t in r.topics for p in t.partitions}


async def joined_member(conn, group: str, **kw):
    """A one-member group, joined and synced: (generation, member id, JoinGroup response)."""
    r = await join(conn, group, **kw)
    assert r.error_code == 0, r.error_code
    assert r.leader == r.member_id
    s = await sync(conn, group, r.generation_id, r.member_id,
                   [(r.member_id, assignment(range(6)))], instance_id=kw.get("instance_id"))
    assert s.error_code == 0, s.error_code
    return r.generation_id, r.member_id, r


async def assert_healthy(bootstrap: str, bystander, tag: str) -> None:
    """The long-lived connection still answers, and a new group works end to end."""
    md = await bystander.send(MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)]),
                              version=9)
    assert md.topics[0].error_code == 0 and len(md.topics[0].partitions) == 6
    conn = await raw_connect(bootstrap)
    group = f"healthy-{tag}"
    try:
        gen, mid, _ = await joined_member(conn, group)
        assert await heartbeat(conn, group, gen, mid) == 0
        assert await commit(conn, group, gen, mid, {0: 7}) == {0: 0}
        assert (await fetch_committed(conn, group))[0] == 7
        lv = await conn.send(LeaveGroupRequest(group_id=group, member_id=mid), version=1)
        assert lv.error_code == 0, lv.error_code
    finally:
        await conn.close()


def scenario(broker, body, tag: str):
    """Run ``body(conn, bystander)`` and then the health check (in a group of its own: a
    group shared between tests would wait for the previous test's member to rejoin), in one
    event loop."""
    bs = broker.bootstrap_servers

    async def go():
        bystander = await raw_connect(bs)
        conn = await raw_connect(bs)
        try:
            await body(conn, bystander)
        finally:
            await conn.close()
        try:
            await assert_healthy(bs, bystander, tag)
        finally:
            await bystander.close()

    run_async(go(), timeout=60)


@pytest.mark.parametrize("version", [4, 5, 7, 9])
def test_join_requires_member_id(broker, version):
    group = f"g-member-id-v{version}"
    meta = subscription(user_data=b"\x00\x01opaque-user-data\xff")

    async def body(conn, _bystander):
        r = await conn.send(join_request(group, metadata=meta), version=version)
        assert r.error_code == E.MEMBER_ID_REQUIRED, r.error_code
        assert r.member_id, "MEMBER_ID_REQUIRED must carry the member id to use"
        mid = r.member_id
        r = await conn.send(join_request(group, mid, metadata=meta), version=version)
        assert r.error_code == 0, r.error_code
        assert r.member_id == mid and r.leader == mid and r.generation_id >= 1
        if version >= 7:
            assert r.protocol_type == "consumer" and r.protocol_name == "range"
        # The leader gets every member's metadata byte for byte.
        assert [(m.member_id, bytes(m.metadata)) for m in r.members] == [(mid, meta)]
        mine = assignment([0, 2, 4], user_data=b"sticky\x00state")
        s = await sync(conn, group, r.generation_id, mid, [(mid, mine)])
        assert s.error_code == 0 and bytes(s.assignment) == mine
        assert await heartbeat(conn, group, r.generation_id, mid) == 0

    scenario(broker, body, f"member-id-v{version}")


def test_join_v3_needs_no_member_id(broker):
    async def body(conn, _bystander):
        r = await conn.send(join_request("g-v3"), version=3)
        assert r.error_code == 0 and r.member_id and r.leader == r.member_id, r.error_code

    scenario(broker, body, "v3")


def test_stale_generation_and_unknown_member(broker):
    group = "g-stale"

    async def body(conn, _bystander):
        gen, mid, _ = await joined_member(conn, group)
        ghost = "ghost-" + mid
        assert await heartbeat(conn, group, gen + 1, mid) == E.ILLEGAL_GENERATION
        assert await heartbeat(conn, group, gen - 1, mid) == E.ILLEGAL_GENERATION
        assert await heartbeat(conn, group, gen, ghost) == E.UNKNOWN_MEMBER_ID
        for v in (0, 4):
            assert await heartbeat(conn, group, gen + 5, mid, version=v) == E.ILLEGAL_GENERATION
        s = await sync(conn, group, gen + 1, mid, [(mid, assignment([0]))])
        assert s.error_code == E.ILLEGAL_GENERATION, s.error_code
        s = await sync(conn, group, gen, ghost)
        assert s.error_code == E.UNKNOWN_MEMBER_ID, s.error_code
        assert await commit(conn, group, gen + 1, mid, {0: 5, 1: 5}) == {
            0: E.ILLEGAL_GENERATION, 1: E.ILLEGAL_GENERATION}
        assert await commit(conn, group, gen, ghost, {0: 5}) == {0: E.UNKNOWN_MEMBER_ID}
        assert (await fetch_committed(conn, group))[0] == -1, "a rejected commit was stored"
        assert await commit(conn, group, gen, mid, {0: 5}) == {0: 0}
        lv = await conn.send(LeaveGroupRequest(group_id=group, members=[
            MemberIdentity(member_id=ghost)]), version=3)
        assert lv.error_code == 0 and [(m.member_id, m.error_code) for m in lv.members] == [
            (ghost, E.UNKNOWN_MEMBER_ID)]
        lv = await conn.send(LeaveGroupRequest(group_id=group, member_id=ghost), version=0)
        assert lv.error_code == E.UNKNOWN_MEMBER_ID, lv.error_code
        # None of that disturbed the real member.
        assert await heartbeat(conn, group, gen, mid) == 0

    scenario(broker, body, "stale")


def test_inconsistent_group_protocol(broker):
    group = "g-protocol"

    async def body(conn, bystander):
        gen, mid, _ = await joined_member(conn, group)
        r = await join(bystander, group, protocol_type="connect")
        assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL, r.error_code
        r = await join(bystander, group, protocols=[
            JoinGroupRequestProtocol(name="roundrobin", metadata=subscription())])
        assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL, r.error_code
        # An empty group cannot be created without protocols or protocol type.
        r = await join(bystander, "g-no-protocols", protocols=[])
        assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL, r.error_code
        r = await join(bystander, "g-no-protocol-type", protocol_type="")
        assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL, r.error_code
        # The rejected joins did not start a rebalance of the existing group.
        assert await heartbeat(conn, group, gen, mid) == 0

    scenario(broker, body, "protocol")


def test_invalid_group_id_and_session_timeout(broker):
    async def body(conn, _bystander):
        for v in (0, 3, 5, 9):
            r = await conn.send(join_request(""), version=v)
            assert r.error_code == E.INVALID_GROUP_ID, (v, r.error_code)
        assert await heartbeat(conn, "", 1, "m") == E.INVALID_GROUP_ID
        s = await sync(conn, "", 1, "m")
        assert s.error_code == E.INVALID_GROUP_ID, s.error_code
        lv = await conn.send(LeaveGroupRequest(group_id="", member_id="m"), version=1)
        assert lv.error_code == E.INVALID_GROUP_ID, lv.error_code
        d = await conn.send(DescribeGroupsRequest(groups=[""]), version=5)
        assert [g.error_code for g in d.groups] == [E.INVALID_GROUP_ID]
        dg = await conn.send(DeleteGroupsRequest(groups_names=[""]), version=2)
        assert [g.error_code for g in dg.results] == [E.INVALID_GROUP_ID]
        for timeout_ms in (500, 1_800_001):  # min is 1000 here, max Kafka's 30 minutes
            r = await join(conn, "g-timeout", session_ms=timeout_ms)
            assert r.error_code == E.INVALID_SESSION_TIMEOUT, (timeout_ms, r.error_code)

    scenario(broker, body, "invalid-id")


def test_fenced_instance_id(broker):
    group = "g-fenced"

    async def body(conn, bystander):
        r = await conn.send(join_request(group, instance_id="inst-1"), version=5)
        assert r.error_code == 0, "a static member needs no MEMBER_ID_REQUIRED round trip"
        gen, old = r.generation_id, r.member_id
        s = await sync(conn, group, gen, old, [(old, assignment(range(6)))],
                       instance_id="inst-1")
        assert s.error_code == 0
        # A new instance with the same group.instance.id replaces (fences) the old one.
        r = await bystander.send(join_request(group, instance_id="inst-1"), version=5)
        assert r.error_code == 0, r.error_code
        new = r.member_id
        assert new != old
        assert await heartbeat(conn, group, gen, old, "inst-1") == E.FENCED_INSTANCE_ID
        s = await sync(conn, group, gen, old, instance_id="inst-1")
        assert s.error_code == E.FENCED_INSTANCE_ID, s.error_code
        assert await commit(conn, group, gen, old, {0: 1}, instance_id="inst-1") == {
            0: E.FENCED_INSTANCE_ID}
        r2 = await conn.send(join_request(group, old, instance_id="inst-1"), version=5)
        assert r2.error_code == E.FENCED_INSTANCE_ID, r2.error_code
        lv = await conn.send(LeaveGroupRequest(group_id=group, members=[
            MemberIdentity(member_id=old, group_instance_id="inst-1")]), version=3)
        assert [m.error_code for m in lv.members] == [E.FENCED_INSTANCE_ID], lv.members
        # The new instance is the member now.
        s = await sync(bystander, group, r.generation_id, new, [(new, assignment(range(6)))],
                       instance_id="inst-1")
        assert s.error_code == 0, s.error_code
        assert await heartbeat(bystander, group, r.generation_id, new, "inst-1") == 0

    scenario(broker, body, "fenced")


def test_oversized_member_metadata(broker):
    """4 MiB of member metadata (and assignment): answered or closed cleanly, no crash."""
    group = "g-huge"
    big = subscription(user_data=bytes(range(256)) * (4 * 4096))

    async def body(conn, _bystander):
        from snakka.client.connection import ConnectionClosed

        try:
            r = await join(conn, group, metadata=big)
            if r.error_code == 0:
                if r.members:
                    assert bytes(r.members[0].metadata) == big
                s = await sync(conn, group, r.generation_id, r.member_id,
                               [(r.member_id, assignment(range(6), user_data=big[:4 << 20]))])
                d = await conn.send(DescribeGroupsRequest(groups=[group]), version=5)
                assert d.groups[0].error_code == 0
                if s.error_code == 0:
                    assert len(d.groups[0].members) == 1
        except (TimeoutError, ConnectionClosed) as e:
            # A close is acceptable; a hang is not (the request timeout would be 30 s).
            assert isinstance(e, ConnectionClosed), f"no answer to a 4 MiB JoinGroup: {e!r}"

    scenario(broker, body, "huge")


def test_member_that_does_not_rejoin_is_removed_after_rebalance_timeout(broker):
    """A rebalance waits for the current members at most their rebalance timeout; one that
    never rejoins is removed, and the others' join completes without it."""
    group = "g-rebalance-timeout"

    async def body(conn, bystander):
        r = await join(conn, group, rebalance_ms=1500)
        assert r.error_code == 0
        s = await sync(conn, group, r.generation_id, r.member_id,
                       [(r.member_id, assignment(range(6)))])
        assert s.error_code == 0
        stale_gen, stale = r.generation_id, r.member_id
        # A second member starts a rebalance; the first never rejoins. (The rebalance waits
        # for the largest rebalance timeout among the members, so both use 1.5 s.)
        t0 = time.monotonic()
        r2 = await join(bystander, group, rebalance_ms=1500)
        waited = time.monotonic() - t0
        assert r2.error_code == 0, r2.error_code
        assert r2.leader == r2.member_id and [m.member_id for m in r2.members] == [
            r2.member_id], "the member that did not rejoin is still in the group"
        assert r2.generation_id > stale_gen
        assert waited >= 1.0, f"the join completed after {waited:.2f}s, before the timeout"
        assert await heartbeat(conn, group, stale_gen, stale) == E.UNKNOWN_MEMBER_ID

    scenario(broker, body, "rebalance-timeout")


def test_pending_member_does_not_start_a_rebalance(broker):
    """KIP-394: a JoinGroup answered MEMBER_ID_REQUIRED makes a *pending* member; it triggers
    no rebalance until it rejoins with its id."""
    group = "g-pending"

    async def body(conn, bystander):
        gen, mid, _ = await joined_member(conn, group)
        r = await bystander.send(join_request(group), version=5)
        assert r.error_code == E.MEMBER_ID_REQUIRED
        assert await heartbeat(conn, group, gen, mid) == 0  # not REBALANCE_IN_PROGRESS
        d = await conn.send(DescribeGroupsRequest(groups=[group]), version=5)
        assert d.groups[0].group_state == "Stable" and len(d.groups[0].members) == 1

    scenario(broker, body, "pending")


def test_describe_unknown_group_before_v6(broker):
    """DescribeGroups v0-5: an unknown group is state Dead with no error."""
    async def body(conn, _bystander):
        for v in (0, 3, 5):
            d = await conn.send(DescribeGroupsRequest(groups=["g-never-existed"]), version=v)
            g = d.groups[0]
            assert (g.error_code, g.group_state, g.members) == (0, "Dead", []), (v, g)

    scenario(broker, body, "describe-v5")


def test_describe_unknown_group_v6(broker):
    from kafka import KafkaAdminClient

    async def body(conn, _bystander):
        d = await conn.send(DescribeGroupsRequest(groups=["g-never-existed"]), version=6)
        g = d.groups[0]
        assert (g.error_code, g.group_state) == (E.GROUP_ID_NOT_FOUND, "Dead"), g
        assert g.error_message and "not found" in g.error_message, g.error_message

    scenario(broker, body, "describe-v6")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:  # kafka-python 3 sends DescribeGroups v6
        err = admin.describe_groups(["g-never-existed"])["g-never-existed"]["error"]
        assert err and "GroupIdNotFound" in err, err
    finally:
        admin.close()


def test_real_group_after_bad_input(broker):
    """After everything above, a real client group consumes and commits normally."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    bs = broker.bootstrap_servers
    p = Producer({"bootstrap.servers": bs})
    for i in range(12):
        p.produce(TOPIC, value=b"after-%d" % i, partition=i % 6)
    assert p.flush(15) == 0
    c = Consumer({"bootstrap.servers": bs, "group.id": "g-after", "auto.offset.reset":
                  "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 300})
    try:
        c.subscribe([TOPIC])
        got = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not {b"after-%d" % i for i in range(12)} <= {
                m.value() for m in got}:
            got += [m for m in c.consume(100, timeout=0.2) if not m.error()]
        assert {b"after-%d" % i for i in range(12)} <= {m.value() for m in got}
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(TOPIC, q) for q in range(6)], timeout=10)
        ends = {q: c.get_watermark_offsets(TopicPartition(TOPIC, q), timeout=10)[1]
                for q in range(6)}
        assert {tp.partition: tp.offset for tp in committed} == ends
    finally:
        c.close()
