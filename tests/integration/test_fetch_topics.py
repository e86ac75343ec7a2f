"""One Fetch that lists several topics, known and unknown, in any order (the handler resolves
each topic once per run of its partitions, not once per partition): every partition gets its
own topic's answer, by name (v12) and by topic id (v13+)."""

from __future__ import annotations

import uuid

from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, raw_connect, run_async

A, B = "fetch-topics-a", "fetch-topics-b"


def produce(bootstrap: str, topic: str, partition: int, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, b"v%d" % i, partition=partition)
    assert p.flush(30) == 0


def fetch(bootstrap: str, version: int, topics: list[tuple[object, list[int]]]):
    async def go():
        conn = await raw_connect(bootstrap)
        try:
            req = FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, topics=[
                    FetchTopic(topic_id=key, partitions=[FetchPartition(
                        partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                        for p in parts]) if version >= 13 else
                    FetchTopic(topic=key, partitions=[FetchPartition(
                        partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                        for p in parts])
                    for key, parts in topics])
            return await conn.send(req, version=version)
        finally:
            await conn.close()
    resp = run_async(go())
    # The response lists each topic once (its partitions together), in first-seen order.
    return sorted(((str(t.topic_id) if version >= 13 else t.topic), p.partition_index,
                   p.error_code, p.high_watermark)
                  for t in resp.responses for p in t.partitions)


def topic_ids(bootstrap: str) -> dict[str, uuid.UUID]:
    async def go():
        conn = await raw_connect(bootstrap)
        try:
            return await conn.send(MetadataRequest(
                topics=[MetadataRequestTopic(name=A), MetadataRequestTopic(name=B)],
                allow_auto_topic_creation=False), version=12)
        finally:
            await conn.close()
    return {t.name: t.topic_id for t in run_async(go()).topics}


def test_interleaved_known_and_unknown_topics():
    with EmbeddedBroker(config={"auto.create.topics.enable": "false"}) as b:
        bs = b.bootstrap_servers
        ck_create_topic(bs, A, 2)
        ck_create_topic(bs, B, 1)
        produce(bs, A, 0, 3)
        produce(bs, A, 1, 1)
        produce(bs, B, 0, 2)
        unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert fetch(bs, 12, [(A, [0]), ("no-such-topic", [0]), (B, [0]), (A, [1, 5])]) == sorted([
            (A, 0, 0, 3), ("no-such-topic", 0, unknown, -1), (B, 0, 0, 2), (A, 1, 0, 1),
            (A, 5, unknown, -1)])
        ids = topic_ids(bs)
        stranger = uuid.uuid4()
        assert fetch(bs, 13, [(ids[B], [0]), (stranger, [0]), (ids[A], [1, 0])]) == sorted([
            (str(ids[B]), 0, 0, 2), (str(stranger), 0, ErrorCode.UNKNOWN_TOPIC_ID, -1),
            (str(ids[A]), 1, 0, 1), (str(ids[A]), 0, 0, 3)])
