"""snakka.client.Admin / ShareAdmin ask each partition's *leader* for ListOffsets (as a Kafka
cluster requires; other brokers answer NOT_LEADER_OR_FOLLOWER), against two scripted brokers."""

from __future__ import annotations

import asyncio

import pytest

from snakka.client.admin import Admin, AdminError
from snakka.client.share_admin import ShareAdmin
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.list_offsets_response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

from .fake_broker import FakeBroker, FakeCluster


def leader_of(cluster: FakeCluster, node: int, offsets: dict[int, tuple[int, int]]):
    """A ListOffsets handler for broker ``node``: answers for the partitions it leads
    (earliest, latest from ``offsets``), NOT_LEADER_OR_FOLLOWER for the others."""

    def handle(req, version, conn):
        topic = req.topics[0]
        parts = []
        for p in topic.partitions:
            if cluster.leaders[(topic.name, p.partition_index)] != node:
                parts.append(ListOffsetsPartitionResponse(
                    partition_index=p.partition_index,
                    error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, timestamp=-1, offset=-1))
                continue
            lo, hi = offsets[p.partition_index]
            parts.append(ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=0, timestamp=-1,
                offset=lo if p.timestamp == -2 else hi))
        return ListOffsetsResponse(topics=[ListOffsetsTopicResponse(name=topic.name,
                                                                    partitions=parts)])
    return handle


async def _two_brokers():
    cluster = FakeCluster()
    cluster.add_topic("t", 4, leader=1)
    cluster.leaders[("t", 1)] = cluster.leaders[("t", 3)] = 2
    offsets = {p: (p * 10, p * 10 + 5) for p in range(4)}
    b1 = await FakeBroker(cluster, 1).start()
    b2 = await FakeBroker(cluster, 2).start()
    b1.handlers[2] = leader_of(cluster, 1, offsets)
    b2.handlers[2] = leader_of(cluster, 2, offsets)
    return cluster, b1, b2


@pytest.mark.parametrize("admin_class", [Admin, ShareAdmin])
def test_list_offsets_goes_to_each_partitions_leader(admin_class):
    async def go():
        cluster, b1, b2 = await _two_brokers()
        try:
            async with admin_class(b1.bootstrap) as admin:
                assert await admin.partition_offsets("t", 4) == {
                    0: (0, 5), 1: (10, 15), 2: (20, 25), 3: (30, 35)}
            # each broker was asked only for the partitions it leads
            asked = {b.node_id: sorted(p.partition_index for r in b.of(2)
                                       for p in r.topics[0].partitions) for b in (b1, b2)}
            assert asked == {1: [0, 0, 2, 2], 2: [1, 1, 3, 3]}
        finally:
            await b2.stop()
            await b1.stop()

    asyncio.run(go())


def test_list_offsets_of_a_missing_partition_is_an_admin_error():
    async def go():
        cluster, b1, b2 = await _two_brokers()
        try:
            async with Admin(b1.bootstrap) as admin:
                with pytest.raises(AdminError, match="UNKNOWN_TOPIC_OR_PARTITION"):
                    await admin.list_offsets("t", [7], -1)
                with pytest.raises(AdminError, match="UNKNOWN_TOPIC_OR_PARTITION"):
                    await admin.list_offsets("nope", [0], -1)
        finally:
            await b2.stop()
            await b1.stop()

    asyncio.run(go())
