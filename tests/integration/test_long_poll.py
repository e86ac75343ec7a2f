"""Fetch long polling: a parked fetch is woken by an append, and an empty one really waits.

These are event-order assertions, not benchmarks: a fetch with max_wait 5 s that is parked on
an empty partition must return well before the 5 s once a record is appended (< 1 s after the
produce is acknowledged), and a fetch with nothing to return must not come back early.

The raw-protocol tests (snakka's protocol client sending real Fetch v12 requests) run against
an in-process broker so they can wait until the fetch is actually parked in the broker before
producing (``Broker._waiters``, the broker's long-poll wait list) instead of sleeping. The
confluent-kafka test is the same check through librdkafka's fetcher (Fetch v16, topic ids,
fetch sessions).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from snakka.records import Record, build_batch, iter_records

from .helpers import ck_consumer_config, ck_create_topic, now_ms, raw_connect, run_async

FETCH_VERSION = 12


def _fetch_request(topic: str, partitions: dict[int, int], max_wait_ms: int, min_bytes: int = 1):
    from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic

    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                        max_bytes=8 * 1024 * 1024, isolation_level=0, session_id=0,
                        session_epoch=-1, topics=[FetchTopic(topic=topic, partitions=[
                            FetchPartition(partition=p, fetch_offset=off,
                                           partition_max_bytes=4 * 1024 * 1024)
                            for p, off in partitions.items()])],
                        forgotten_topics_data=[], rack_id="")


async def _produce(conn, topic: str, partition: int, value: bytes) -> int:
    from snakka.protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    batch = build_batch([Record(timestamp=now_ms(), key=b"k", value=value)])
    resp = await conn.send(ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000,
                                          topic_data=[TopicProduceData(name=topic, partition_data=[
                                              PartitionProduceData(index=partition,
                                                                   records=batch)])]),
                           version=9)
    r = resp.responses[0].partition_responses[0]
    assert r.error_code == 0, r
    return r.base_offset


def _records(resp) -> dict[int, list[bytes]]:
    out = {}
    for t in resp.responses:
        for p in t.partitions:
            assert p.error_code == 0, p
            out[p.partition_index] = [r.value for r in iter_records(bytes(p.records or b""))]
    return out


async def _until_parked(broker, topic: str, partition: int, timeout: float = 5.0) -> None:
    """Wait (bounded) until the broker has a long-poll waiter on topic-partition."""
    waiters = broker.replicas.append_waiters
    deadline = time.monotonic() + timeout
    while not waiters.get((topic, partition)):
        if time.monotonic() > deadline:
            raise AssertionError("the fetch never parked in the broker")
        await asyncio.sleep(0.005)


def test_empty_long_poll_waits_for_max_wait(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "lp-empty", 1)

    async def go():
        conn = await raw_connect(bs)
        try:
            t0 = time.monotonic()
            resp = await conn.send(_fetch_request("lp-empty", {0: 0}, 1500), version=FETCH_VERSION)
            return time.monotonic() - t0, resp
        finally:
            await conn.close()

    elapsed, resp = run_async(go())
    assert _records(resp) == {0: []}
    assert elapsed >= 1.4, f"an empty long poll returned after {elapsed:.3f}s, max_wait 1.5s"
    assert elapsed < 4.0, f"an empty long poll overstayed: {elapsed:.3f}s, max_wait 1.5s"


@pytest.mark.parametrize("wake_partition", [0, 2])
def test_parked_fetch_returns_as_soon_as_a_record_arrives(snakka_broker, wake_partition):
    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "lp-wake", 3)

    async def go():
        fetcher, producer = await raw_connect(bs), await raw_connect(bs)
        try:
            t0 = time.monotonic()
            fetch = asyncio.ensure_future(fetcher.send(
                _fetch_request("lp-wake", {0: 0, 1: 0, 2: 0}, 5000), version=FETCH_VERSION))
            for p in range(3):
                await _until_parked(snakka_broker.broker, "lp-wake", p)
            assert not fetch.done()
            offset = await _produce(producer, "lp-wake", wake_partition, b"wake up")
            t_acked = time.monotonic()
            resp = await fetch
            t_done = time.monotonic()
            return offset, resp, t_done - t_acked, t_done - t0
        finally:
            await fetcher.close()
            await producer.close()

    offset, resp, after_produce, total = run_async(go())
    assert offset == 0
    assert _records(resp).get(wake_partition) == [b"wake up"]
    assert after_produce < 1.0, f"fetch returned {after_produce:.3f}s after the produce"
    assert total < 4.0, f"fetch took {total:.3f}s of its 5s max_wait: not woken"


def test_min_bytes_keeps_waiting_until_enough_data(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "lp-minbytes", 1)

    async def go():
        fetcher, producer = await raw_connect(bs), await raw_connect(bs)
        try:
            # A small record does not satisfy min_bytes: the fetch keeps waiting...
            t0 = time.monotonic()
            fetch = asyncio.ensure_future(fetcher.send(
                _fetch_request("lp-minbytes", {0: 0}, 1500, min_bytes=50_000),
                version=FETCH_VERSION))
            await _until_parked(snakka_broker.broker, "lp-minbytes", 0)
            await _produce(producer, "lp-minbytes", 0, b"small")
            resp1 = await fetch
            waited = time.monotonic() - t0
            # ...until max_wait, when it returns what there is. Then enough bytes wake it early.
            t1 = time.monotonic()
            fetch = asyncio.ensure_future(fetcher.send(
                _fetch_request("lp-minbytes", {0: 1}, 5000, min_bytes=50_000),
                version=FETCH_VERSION))
            await _until_parked(snakka_broker.broker, "lp-minbytes", 0)
            await _produce(producer, "lp-minbytes", 0, b"B" * 60_000)
            resp2 = await fetch
            return resp1, waited, resp2, time.monotonic() - t1
        finally:
            await fetcher.close()
            await producer.close()

    resp1, waited, resp2, second = run_async(go())
    assert _records(resp1) == {0: [b"small"]}
    assert waited >= 1.4, f"returned after {waited:.3f}s with fewer than min_bytes"
    assert _records(resp2) == {0: [b"B" * 60_000]}
    assert second < 4.0, f"enough data arrived but the fetch waited {second:.3f}s"


def test_confluent_consumer_gets_record_long_before_fetch_wait_max(snakka_broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "lp-ck", 1)
    c = Consumer(ck_consumer_config(bs, **{"fetch.wait.max.ms": 5000}))
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0, "acks": 1})
    try:
        c.assign([TopicPartition("lp-ck", 0, 0)])
        # The consumer's first fetch (empty partition) parks in the broker.
        assert c.consume(num_messages=1, timeout=0.5) == []
        latencies = []
        for i in range(3):
            wait_parked = time.monotonic() + 6
            while not snakka_broker.broker.replicas.append_waiters.get(("lp-ck", 0)):
                assert time.monotonic() < wait_parked, "librdkafka's fetch never parked"
                time.sleep(0.005)
            p.produce("lp-ck", value=b"ping-%d" % i)
            assert p.flush(5) == 0
            t_acked = time.monotonic()
            msgs = c.consume(num_messages=1, timeout=6)
            latencies.append(time.monotonic() - t_acked)
            assert len(msgs) == 1 and msgs[0].error() is None
            assert msgs[0].value() == b"ping-%d" % i and msgs[0].offset() == i
        assert max(latencies) < 1.0, f"delivery latencies {latencies} with fetch.wait.max.ms=5000"
    finally:
        c.close()
