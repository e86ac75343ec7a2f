"""The coordinator shell: group records persist in __consumer_offsets, survive restarts, and the
topic is kept small by snapshot-and-trim."""

from __future__ import annotations

import asyncio

import snakka.groups.coordinator as coordinator
from snakka.client.admin import Admin
from snakka.client.connection import KafkaConnection
from snakka.groups.coordinator import OFFSETS_TOPIC
from snakka.groups.partitioning import offsets_partition
from snakka.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from snakka.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
)
from snakka.testing import EmbeddedBroker


async def _create_topic(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic("t", 3)


async def _commit_many(port: int, rounds: int) -> None:
    async with KafkaConnection("127.0.0.1", port) as conn:
        for i in range(rounds):
            resp = await conn.send(OffsetCommitRequest(
                group_id="g", generation_id_or_member_epoch=-1, member_id="",
                topics=[OffsetCommitRequestTopic(name="t", partitions=[
                    OffsetCommitRequestPartition(partition_index=p, committed_offset=i * 10 + p,
                                                 committed_metadata=f"r{i}")
                    for p in range(3)])]), version=9)
            assert all(p.error_code == 0 for t in resp.topics for p in t.partitions)


async def _fetch(port: int) -> dict[int, tuple[int, str]]:
    async with KafkaConnection("127.0.0.1", port) as conn:
        resp = await conn.send(OffsetFetchRequest(group_id="g", topics=[
            OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1, 2])]), version=7)
        return {p.partition_index: (p.committed_offset, p.metadata)
                for t in resp.topics for p in t.partitions}


def test_offsets_survive_restart_and_topic_is_trimmed(monkeypatch):
    monkeypatch.setattr(coordinator, "COMPACT_MIN_RECORDS", 50)
    with EmbeddedBroker(config={"num.partitions": "3", "offsets.topic.num.partitions": "4"}) as b:
        asyncio.run(_create_topic(b.bootstrap_servers))
        asyncio.run(_commit_many(b.port, 100))  # 300 records for 3 live keys
        pl = b.broker.replicas.get_log(OFFSETS_TOPIC, offsets_partition("g", 4))
        assert pl.log_start_offset > 0, "snapshot-and-trim never ran"
        assert pl.log_end_offset - pl.log_start_offset < 60
        expected = {p: (990 + p, "r99") for p in range(3)}
        assert asyncio.run(_fetch(b.port)) == expected
        b.restart()
        assert asyncio.run(_fetch(b.port)) == expected
        assert b.broker.metadata.topics[OFFSETS_TOPIC].partitions == 4
