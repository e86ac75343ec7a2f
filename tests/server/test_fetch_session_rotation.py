"""Fairness inside an incremental fetch session (Kafka's FetchSession.scala: a partition that
returned records moves to the end of the session's order). A session over more backlogged
partitions than one response holds must reach all of them in turn, not serve the first one
until it has caught up.

:func:`served_in_turn` is the scenario, also run against the reference Kafka 4.0 by
tests/reference/test_fetch_session_rotation_differential.py."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from integration.helpers import run_async  # tests/ is on sys.path

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.records import iter_records
from snakka.testing import EmbeddedBroker

PARTITIONS = 4
RECORD = 10_000
PER_PARTITION = 10
VERSION = 12  # topic names, sessions


def _produce(bs: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for fut in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        fut.result(60)
    # One record per batch: the byte limits below cut between batches.
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0, "batch.num.messages": 1})
    for part in range(PARTITIONS):
        for _ in range(PER_PARTITION):
            p.produce(topic, b"x" * RECORD, partition=part)
    assert p.flush(60) == 0


def _request(topic: str, session_id: int, epoch: int, offsets: dict[int, int]) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=25_000, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[FetchTopic(topic=topic, partitions=[
            FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=25_000,
                           log_start_offset=-1, current_leader_epoch=-1)
            for p, o in sorted(offsets.items())])] if offsets else [])


def served_in_turn(bootstrap: str, topic: str) -> list[list[int]]:
    """Create ``topic`` with a backlog on each partition, open a fetch session with a full
    fetch, then send incremental fetches naming only the partitions whose position moved;
    the partitions each response returned records for."""
    _produce(bootstrap, topic)

    async def fetches() -> list[list[int]]:
        host, port = parse_bootstrap(bootstrap)
        offsets = {p: 0 for p in range(PARTITIONS)}
        served: list[list[int]] = []
        async with KafkaConnection(host, port) as c:
            r = await c.send(_request(topic, 0, 0, offsets), VERSION)  # full: opens a session
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
                # Incremental: only the partitions whose position moved.
                r = await c.send(_request(topic, session_id, epoch, changed), VERSION)
                epoch += 1
        return served

    return run_async(fetches())


def test_an_incremental_session_serves_every_backlogged_partition_in_turn():
    with EmbeddedBroker() as broker:
        served = served_in_turn(broker.bootstrap_servers, "fair")
        # Each response holds one partition's worth (2 batches of ~10 KB in 25,000 bytes).
        # The full fetch and the first incremental one read in request order (partition 0,
        # as Kafka: only incremental responses rotate); from then on the partitions are
        # served in turn: [[0], [0], [1], [2], [3]] (without rotation: partition 0 only).
        assert all(len(s) == 1 for s in served), served
        assert [s[0] for s in served[1:]] == list(range(PARTITIONS)), served
