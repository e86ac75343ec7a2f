"""Fetch-session fairness against the reference Kafka 4.0: the same raw Fetch sequence (a full
fetch opening a session, then incremental ones, each response holding one partition's worth)
serves the backlogged partitions in the same order on both brokers (Kafka's FetchSession moves a
partition that returned records to the end of the session)."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from integration.helpers import run_async  # tests/ is on sys.path

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.records import iter_records

PARTITIONS = 4
RECORD = 10_000
VERSION = 12  # topic names, sessions


def _request(topic: str, session_id: int, epoch: int, offsets: dict[int, int]) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=25_000, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[FetchTopic(topic=topic, partitions=[
            FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=25_000,
                           log_start_offset=-1, current_leader_epoch=-1)
            for p, o in sorted(offsets.items())])] if offsets else [])


def _served(bootstrap: str) -> list[list[int]]:
    topic = f"fair-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        fut.result(60)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for part in range(PARTITIONS):
        for _ in range(10):
            p.produce(topic, b"x" * RECORD, partition=part)
    assert p.flush(60) == 0

    async def fetches() -> list[list[int]]:
        host, port = parse_bootstrap(bootstrap)
        offsets = {q: 0 for q in range(PARTITIONS)}
        served: list[list[int]] = []
        async with KafkaConnection(host, port) as c:
            r = await c.send(_request(topic, 0, 0, offsets), VERSION)
            session_id, epoch = r.session_id, 1
            assert session_id != 0
            for _ in range(PARTITIONS + 1):
                got, changed = [], {}
                for t in r.responses:
                    for pd in t.partitions:
                        assert pd.error_code == 0
                        # Whole batches only (Kafka cuts the last one short; clients drop it).
                        recs = list(iter_records(bytes(pd.records or b"")))
                        if recs:
                            got.append(pd.partition_index)
                            offsets[pd.partition_index] = recs[-1].offset + 1
                            changed[pd.partition_index] = offsets[pd.partition_index]
                served.append(got)
                r = await c.send(_request(topic, session_id, epoch, changed), VERSION)
                epoch += 1
        return served

    return run_async(fetches())


def test_incremental_sessions_rotate_partitions_as_kafka(brokers):
    kafka, snakka = brokers
    on_kafka = _served(kafka)
    assert on_kafka == [[0], [0], [1], [2], [3]], on_kafka  # what Kafka 4.0 does
    assert _served(snakka) == on_kafka
