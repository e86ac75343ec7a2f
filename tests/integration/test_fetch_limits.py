"""Fetch's limit fields against the reference Apache Kafka 4.0 broker (issue 9 item 2b): the same
topic, the same batches and the same Fetch requests go to both brokers, and what a client reads
must match: per partition the error code and the offsets of the whole batches returned.

The cases are KAFKA-FACTS' "Fetch MaxBytes is soft (KIP-74)": MaxBytes or PartitionMaxBytes 0
or 1 give the first whole batch, a limit ending inside the second batch gives the first batch
(Kafka adds the truncated bytes of the second, which clients drop; only whole batches are
compared), PartitionMaxBytes -1 is UNKNOWN_SERVER_ERROR where there is data, a negative request
MaxBytes is that error for the first partition and 0 for the rest. Skips with one clear reason
when the reference Kafka or java is absent.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from snakka.protocol.errors import ErrorCode
from snakka.records import Record, build_batch
from snakka.share.manager import split_batches

from .helpers import raw_connect, run_async

reference_kafka = pytest.importorskip("tests.reference_kafka")

TOPIC = "fetch-limits"
PARTITIONS = 3
BATCHES = 3          # per partition, 10 records each, all of one size
BIG = 1 << 20


def _batch(p: int, k: int) -> bytes:
    # Fixed timestamps and equal-length values: every batch has the same size on both brokers.
    return bytes(build_batch([Record(timestamp=1_700_000_000_000 + i, key=b"k",
                                     value=b"p%d-b%d-r%02d" % (p, k, i)) for i in range(10)]))


BATCH_SIZE = len(_batch(0, 0))

# (name, request MaxBytes, PartitionMaxBytes of each partition)
CASES = [
    ("max_bytes_0", 0, [BIG] * PARTITIONS),
    ("max_bytes_1", 1, [BIG] * PARTITIONS),
    ("max_bytes_inside_second_batch", BATCH_SIZE + 10, [BIG] * PARTITIONS),
    ("max_bytes_two_and_a_half_batches", 2 * BATCH_SIZE + BATCH_SIZE // 2, [BIG] * PARTITIONS),
    ("max_bytes_negative", -1, [BIG] * PARTITIONS),
    ("partition_max_bytes_0_and_1", BIG, [0, 1, BIG]),
    ("partition_max_bytes_negative", BIG, [BIG, -1, 1]),
    ("partition_max_bytes_negative_first", BIG, [-1, 0, BIG]),
    ("partition_max_bytes_inside_second_batch", BIG, [BATCH_SIZE + 10] * PARTITIONS),
]


async def _prepare(bootstrap: str) -> None:
    from snakka.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
    from snakka.protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    conn = await raw_connect(bootstrap)
    try:
        resp = await conn.send(CreateTopicsRequest(topics=[CreatableTopic(
            name=TOPIC, num_partitions=PARTITIONS, replication_factor=1, assignments=[],
            configs=[])], timeout_ms=30_000, validate_only=False))
        assert resp.topics[0].error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS), resp
        for p in range(PARTITIONS):
            for k in range(BATCHES):
                deadline = time.monotonic() + 30
                while True:  # the reference broker elects leaders asynchronously
                    r = await conn.send(ProduceRequest(
                        transactional_id=None, acks=-1, timeout_ms=10_000,
                        topic_data=[TopicProduceData(name=TOPIC, partition_data=[
                            PartitionProduceData(index=p, records=_batch(p, k))])]), version=9)
                    err = r.responses[0].partition_responses[0].error_code
                    if err == 0:
                        break
                    assert time.monotonic() < deadline, f"produce to {p}: error {err}"
                    await asyncio.sleep(0.2)
    finally:
        await conn.close()


async def _fetch_all(bootstrap: str) -> dict[str, list[tuple[int, list[tuple[int, int]]]]]:
    """Each case's answer: per partition (error code, [(base, last) of whole batches])."""
    from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic

    conn = await raw_connect(bootstrap)
    out = {}
    try:
        for name, max_bytes, pmb in CASES:
            resp = await conn.send(FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
                isolation_level=0, session_id=0, session_epoch=-1,
                topics=[FetchTopic(topic=TOPIC, partitions=[
                    FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=pmb[p])
                    for p in range(PARTITIONS)])]), version=12)
            assert resp.error_code == 0, (name, resp.error_code)
            rows = {}
            for t in resp.responses:
                for pd in t.partitions:
                    whole = [(b, last) for b, last, _s, _e in split_batches(bytes(pd.records or b""))]
                    rows[pd.partition_index] = (pd.error_code, whole)
            out[name] = [rows.get(p) for p in range(PARTITIONS)]
    finally:
        await conn.close()
    return out


@pytest.fixture(scope="module")
def reference_broker():
    reason = reference_kafka.skip_reason()
    if reason:
        pytest.skip(reason)
    ref = reference_kafka.ReferenceKafka().start()
    try:
        yield ref
    finally:
        ref.stop()


def test_fetch_limits_match_the_reference_kafka(snakka_broker, reference_broker):
    async def go():
        answers = {}
        for label, bs in (("snakka", snakka_broker.bootstrap_servers),
                          ("kafka", reference_broker.bootstrap_servers)):
            await _prepare(bs)
            answers[label] = await _fetch_all(bs)
        return answers

    answers = run_async(go(), timeout=180)
    assert answers["snakka"] == answers["kafka"]
    # And what Kafka answers is what KAFKA-FACTS says (a guard against a vacuous comparison).
    kafka = answers["kafka"]
    first = [(0, 9)]
    assert kafka["max_bytes_0"] == [(0, first), (0, []), (0, [])]
    assert kafka["partition_max_bytes_0_and_1"][0] == (0, first)
    assert kafka["partition_max_bytes_negative"][1][0] == ErrorCode.UNKNOWN_SERVER_ERROR
    assert kafka["max_bytes_negative"][0][0] == ErrorCode.UNKNOWN_SERVER_ERROR


def test_fetch_limits_on_snakka_alone(snakka_broker):
    """The same cases without the reference broker (runs everywhere): Kafka's answers as
    recorded from the reference Kafka 4.0."""
    async def go():
        await _prepare(snakka_broker.bootstrap_servers)
        return await _fetch_all(snakka_broker.bootstrap_servers)

    got = run_async(go(), timeout=60)
    b1, b2 = (0, 9), (10, 19)
    err = ErrorCode.UNKNOWN_SERVER_ERROR
    assert got["max_bytes_0"] == [(0, [b1]), (0, []), (0, [])]
    assert got["max_bytes_1"] == [(0, [b1]), (0, []), (0, [])]
    assert got["max_bytes_inside_second_batch"] == [(0, [b1]), (0, []), (0, [])]
    assert got["max_bytes_two_and_a_half_batches"] == [(0, [b1, b2]), (0, []), (0, [])]
    assert got["max_bytes_negative"] == [(err, []), (0, [b1]), (0, [])]
    assert got["partition_max_bytes_0_and_1"] == [(0, [b1]), (0, []), (0, [b1, b2, (20, 29)])]
    assert got["partition_max_bytes_negative"] == [(0, [b1, b2, (20, 29)]), (err, []), (0, [])]
    assert got["partition_max_bytes_negative_first"] == [(err, []), (0, [b1]), (0, [b1, b2, (20, 29)])]
    assert got["partition_max_bytes_inside_second_batch"] == [(0, [b1])] * PARTITIONS
