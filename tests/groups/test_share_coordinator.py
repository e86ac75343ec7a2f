"""The coordinator shell for share groups: listener calls (partitions assigned, member left,
group deleted), the queries the share-partition side uses, and share-group state kept in
__consumer_offsets across a broker restart."""

from __future__ import annotations

import asyncio
import uuid

from snakka.client.admin import Admin
from snakka.client.connection import KafkaConnection
from snakka.protocol.messages.delete_groups_request import DeleteGroupsRequest
from snakka.protocol.messages.share_group_describe_request import ShareGroupDescribeRequest
from snakka.protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from snakka.testing import EmbeddedBroker


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def partitions_assigned(self, group_id, partitions):
        self.calls.append(("assigned", group_id, sorted(partitions)))

    def member_left(self, group_id, member_id):
        self.calls.append(("left", group_id, member_id))

    def group_deleted(self, group_id):
        self.calls.append(("deleted", group_id))


def on_loop(b: EmbeddedBroker, fn):
    """Run ``fn()`` on the broker's event loop (the coordinator is not thread-safe)."""
    async def call():
        return fn()
    return asyncio.run_coroutine_threadsafe(call(), b._loop).result(10)


async def create_topic(b: EmbeddedBroker, name: str, partitions: int) -> None:
    async with Admin(b.bootstrap_servers) as admin:
        await admin.create_topic(name, partitions)


async def hb(port: int, member: str, epoch: int, topics=None, group="g"):
    async with KafkaConnection("127.0.0.1", port) as conn:
        return await conn.send(ShareGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
            subscribed_topic_names=topics))


async def describe(port: int, group="g"):
    async with KafkaConnection("127.0.0.1", port) as conn:
        r = await conn.send(ShareGroupDescribeRequest(group_ids=[group],
                                                      include_authorized_operations=False))
        return r.groups[0]


async def delete(port: int, group: str):
    async with KafkaConnection("127.0.0.1", port) as conn:
        return await conn.send(DeleteGroupsRequest(groups_names=[group]))


def test_listener_calls_and_queries():
    m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
    with EmbeddedBroker() as b:
        asyncio.run(create_topic(b, "t", 2))
        tid = b.broker.metadata.topics["t"].topic_id
        rec = Recorder()
        on_loop(b, lambda: b.broker.groups.add_share_listener(rec))
        assert rec.calls == []
        g = b.broker.groups
        assert asyncio.run(hb(b.port, m1, 0, ["t"])).error_code == 0
        assert rec.calls == [("assigned", "g", [(tid, 0), (tid, 1)])]
        assert asyncio.run(hb(b.port, m2, 0, ["t"])).error_code == 0
        assert on_loop(b, lambda: (g.share_group_exists("g"), g.share_group_is_empty("g"),
                                   g.share_group_members("g"))) == (True, False, {m1, m2})
        a2 = on_loop(b, lambda: g.share_assignment("g", m2))
        assert len(a2) == 1 and a2 <= {(tid, 0), (tid, 1)}
        assert on_loop(b, lambda: g.share_assignment("g", "nobody")) is None
        assert on_loop(b, lambda: g.share_assignment("nogroup", m1)) is None
        assert asyncio.run(hb(b.port, m2, -1)).error_code == 0
        assert rec.calls[-1] == ("left", "g", m2)
        assert asyncio.run(hb(b.port, m1, -1)).error_code == 0
        assert on_loop(b, lambda: g.share_group_is_empty("g"))
        assert on_loop(b, lambda: g.share_group_is_empty("unknown"))
        assert not on_loop(b, lambda: g.share_group_exists("unknown"))

        assert asyncio.run(delete(b.port, "g")).results[0].error_code == 0
        assert rec.calls[-1] == ("deleted", "g")
        assert not on_loop(b, lambda: g.share_group_exists("g"))


def test_share_groups_survive_restart_and_late_listeners_learn_assignments():
    m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
    with EmbeddedBroker() as b:
        asyncio.run(create_topic(b, "t", 3))
        tid = b.broker.metadata.topics["t"].topic_id
        asyncio.run(hb(b.port, m1, 0, ["t"]))
        r2 = asyncio.run(hb(b.port, m2, 0, ["t"]))
        before = asyncio.run(describe(b.port))
        b.restart()
        after = asyncio.run(describe(b.port))
        assert after == before
        assert (after.group_epoch, len(after.members)) == (2, 2)
        # Members carry on with their epochs.
        r = asyncio.run(hb(b.port, m2, r2.member_epoch))
        assert (r.error_code, r.member_epoch, r.assignment) == (0, 2, None)
        r = asyncio.run(hb(b.port, m1, 1))
        assert r.error_code == 0 and r.member_epoch == 2 and r.assignment is not None
        rec = Recorder()
        on_loop(b, lambda: b.broker.groups.add_share_listener(rec))
        assert rec.calls == [("assigned", "g", [(tid, 0), (tid, 1), (tid, 2)])]
