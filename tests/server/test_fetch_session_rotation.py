"""Fairness inside an incremental fetch session (Kafka's FetchSession.scala: a partition that
returned records moves to the end of the session's order). A session over more backlogged
partitions than one response holds must reach all of them in turn, not serve the first one
until it has caught up."""

from __future__ import annotations

from confluent_kafka import Producer
from integration.helpers import run_async  # tests/ is on sys.path

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.testing import EmbeddedBroker

PARTITIONS = 4
RECORD = 10_000
PER_PARTITION = 10
VERSION = 12  # topic names, sessions


def _produce(bs: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bs})
    for fut in admin.create_topics([NewTopic("fair", PARTITIONS, 1)]).values():
        fut.result(30)
    # One record per batch: the byte limits below cut between batches.
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0, "batch.num.messages": 1})
    for part in range(PARTITIONS):
        for _ in range(PER_PARTITION):
            p.produce("fair", b"x" * RECORD, partition=part)
    assert p.flush(30) == 0


def _request(session_id: int, epoch: int, offsets: dict[int, int]) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=25_000, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[FetchTopic(topic="fair", partitions=[
            FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=25_000,
                           log_start_offset=-1, current_leader_epoch=-1)
            for p, o in sorted(offsets.items())])] if offsets else [])


def test_an_incremental_session_serves_every_backlogged_partition_in_turn():
    with EmbeddedBroker() as broker:
        _produce(broker.bootstrap_servers)
        from snakka.records import iter_records

        async def fetches() -> list[list[int]]:
            host, port = parse_bootstrap(broker.bootstrap_servers)
            offsets = {p: 0 for p in range(PARTITIONS)}
            served: list[list[int]] = []
            async with KafkaConnection(host, port) as c:
                r = await c.send(_request(0, 0, offsets), VERSION)  # full: opens a session
                session_id, epoch = r.session_id, 1
                assert session_id != 0
                for _ in range(PARTITIONS + 1):
                    got = []
                    changed = {}
                    for t in r.responses:
                        for pd in t.partitions:
                            assert pd.error_code == 0
                            recs = list(iter_records(bytes(pd.records or b"")))
                            if recs:
                                got.append(pd.partition_index)
                                offsets[pd.partition_index] = recs[-1].offset + 1
                                changed[pd.partition_index] = offsets[pd.partition_index]
                    served.append(got)
                    # Incremental: only the partitions whose position moved.
                    r = await c.send(_request(session_id, epoch, changed), VERSION)
                    epoch += 1
            return served

        served = run_async(fetches())
        # Each response holds one partition's worth (2 batches of ~10 KB in 25,000 bytes).
        # The full fetch and the first incremental one read in request order (partition 0,
        # as Kafka: only incremental responses rotate); from then on the partitions are
        # served in turn: [[0], [0], [1], [2], [3]] (without rotation: partition 0 only).
        assert all(len(s) == 1 for s in served), served
        assert [s[0] for s in served[1:]] == list(range(PARTITIONS)), served
