"""The coordinator shell: group records persist in __consumer_offsets and survive restarts; the
topic is compacted (the log cleaner keeps it small), never snapshotted and trimmed."""

from __future__ import annotations

import asyncio

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


async def _overrides(bootstrap: str, topic: str) -> dict[str, str]:
    async with Admin(bootstrap) as admin:
        return await admin.topic_overrides(topic)


def test_offsets_survive_restart_in_a_compacted_topic_that_is_never_trimmed(monkeypatch):
    """Kafka's configs for the topic; the old snapshot-and-trim is gone even past its old
    thresholds (one mechanism: the cleaner)."""
    import snakka.coordinator_log as coordinator_log

    monkeypatch.setattr(coordinator_log, "COMPACT_MIN_RECORDS", 50)
    with EmbeddedBroker(config={"num.partitions": "3", "offsets.topic.num.partitions": "4",
                                "log.cleaner.enable": "false"}) as b:
        asyncio.run(_create_topic(b.bootstrap_servers))
        asyncio.run(_commit_many(b.port, 100))  # 300 records for 3 live keys
        overrides = asyncio.run(_overrides(b.bootstrap_servers, OFFSETS_TOPIC))
        assert overrides == {"cleanup.policy": "compact", "compression.type": "producer",
                             "segment.bytes": str(100 * 1024 * 1024)}
        pl = b.broker.replicas.get_log(OFFSETS_TOPIC, offsets_partition("g", 4))
        assert pl.log_start_offset == 0 and pl.log_end_offset == 300, "trimmed"
        expected = {p: (990 + p, "r99") for p in range(3)}
        assert asyncio.run(_fetch(b.port)) == expected
        b.restart()
        assert asyncio.run(_fetch(b.port)) == expected
        assert b.broker.metadata.topics[OFFSETS_TOPIC].partitions == 4
