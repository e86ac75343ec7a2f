"""Share-group offset admin APIs at the protocol level: DescribeShareGroupOffsets (start offset
and lag), AlterShareGroupOffsets (reset to earliest / to a timestamp's offset, only while the
group is empty) and DeleteShareGroupOffsets."""

from __future__ import annotations

from snakka.protocol.errors import ErrorCode

from .helpers import raw_connect, run_async
from .share_protocol import ACCEPT, ShareMember, acks, create_topic, produce, set_group_configs


async def describe(conn, group: str, topics: dict[str, list[int]] | None, version: int = 1):
    from snakka.protocol.messages.describe_share_group_offsets_request import (
        DescribeShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsRequestGroup,
        DescribeShareGroupOffsetsRequestTopic,
    )

    resp = await conn.send(DescribeShareGroupOffsetsRequest(groups=[
        DescribeShareGroupOffsetsRequestGroup(
            group_id=group,
            topics=None if topics is None else [
                DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                for t, ps in topics.items()])]), version=version)
    g = resp.groups[0]
    return g.error_code, {(t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
                          for t in g.topics for p in t.partitions}


async def alter(conn, group: str, offsets: dict[tuple[str, int], int]):
    from snakka.protocol.messages.alter_share_group_offsets_request import (
        AlterShareGroupOffsetsRequest,
        AlterShareGroupOffsetsRequestPartition,
        AlterShareGroupOffsetsRequestTopic,
    )

    topics: dict = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(AlterShareGroupOffsetsRequestPartition(
            partition_index=p, start_offset=o))
    resp = await conn.send(AlterShareGroupOffsetsRequest(group_id=group, topics=[
        AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
        for t, ps in topics.items()]))
    return resp.error_code, {(t.topic_name, p.partition_index): p.error_code
                             for t in resp.responses for p in t.partitions}


async def delete(conn, group: str, topics: list[str]):
    from snakka.protocol.messages.delete_share_group_offsets_request import (
        DeleteShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsRequestTopic,
    )

    resp = await conn.send(DeleteShareGroupOffsetsRequest(group_id=group, topics=[
        DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]))
    return resp.error_code, {t.topic_name: t.error_code for t in resp.responses}


async def list_offset(conn, topic: str, partition: int, timestamp: int) -> int:
    from snakka.protocol.messages.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    resp = await conn.send(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsTopic(name=topic, partitions=[ListOffsetsPartition(
            partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])]))
    return resp.topics[0].partitions[0].offset


def test_describe_alter_delete_share_group_offsets(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin = await raw_connect(bs)
        tid = await create_topic(admin, "so", 2)
        await set_group_configs(admin, "g", {"share.auto.offset.reset": "earliest"})
        await produce(admin, "so", 0, [b"a%d" % i for i in range(10)])
        # unknown group
        err, _ = await describe(admin, "nope", None)
        assert err == ErrorCode.GROUP_ID_NOT_FOUND
        m = await ShareMember.connect(bs, "g")
        await m.join(["so"])
        tp = (tid, 0)
        f = await m.fetch([tp, (tid, 1)])
        assert len(f.records(*tp)) == 10
        await m.acknowledge({tp: acks((0, 3, ACCEPT), (5, 5, ACCEPT))})
        err, got = await describe(admin, "g", None)
        assert err == 0
        # SPSO 4; lag: 10 - 4 - 1 acknowledged after the start
        assert got == {("so", 0): (4, 5, 0), ("so", 1): (0, 0, 0)}
        err, got = await describe(admin, "g", {"so": [0], "missing": [0]}, version=0)
        assert got[("so", 0)][0] == 4
        assert got[("missing", 0)][2] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # the group has a member: altering and deleting are refused
        err, per = await alter(admin, "g", {("so", 0): 0})
        assert err == ErrorCode.NON_EMPTY_GROUP and per == {("so", 0): ErrorCode.NON_EMPTY_GROUP}
        err, _ = await delete(admin, "g", ["so"])
        assert err == ErrorCode.NON_EMPTY_GROUP
        # leave; then reset partition 0 to earliest and partition 1 to "now" (by timestamp)
        assert (await m.heartbeat(epoch=-1)).error_code == 0
        await m.close()
        earliest = await list_offset(admin, "so", 0, -2)
        err, per = await alter(admin, "g", {("so", 0): earliest, ("so", 1): 0, ("nope", 0): 1})
        assert err == 0
        assert per == {("so", 0): 0, ("so", 1): 0, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        err, got = await describe(admin, "g", {"so": [0]})
        assert got == {("so", 0): (0, 10, 0)}
        # a new member gets every record of partition 0 again, delivery counts start afresh
        m = await ShareMember.connect(bs, "g")
        await m.join(["so"])
        f = await m.fetch([tp])
        assert [(o, c) for o, _v, c in f.records(*tp)] == [(o, 1) for o in range(10)]
        await m.fetch(ack={tp: acks((0, 9, ACCEPT))})
        assert (await m.heartbeat(epoch=-1)).error_code == 0
        await m.close()
        err, got = await describe(admin, "g", {"so": [0]})
        assert got == {("so", 0): (10, 0, 0)}
        # delete the topic's state: describe has nothing for it any more
        err, per = await delete(admin, "g", ["so", "nope"])
        assert err == 0 and per == {"so": 0, "nope": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        err, got = await describe(admin, "g", None)
        assert got == {}
        err, got = await describe(admin, "g", {"so": [0]})
        assert got == {("so", 0): (-1, -1, 0)}
        await admin.close()

    run_async(go())
