"""What the transaction tests share: consumers of each real client at an isolation level, the
last stable offset as ListOffsets reports it, and a raw Produce of given batches.

The consumers assign partitions (no group), read from offset 0 and return every record they get
as (partition, offset, value). They stop once ``expected`` records have arrived and ``quiet``
more seconds brought nothing new (how a test checks that nothing ELSE arrives: a negative can
only be observed for a while), or at ``timeout``.
"""

from __future__ import annotations

import time

from .helpers import raw_connect, run_async

Got3 = tuple[int, int, bytes]  # (partition, offset, value)
CLIENTS = ("confluent", "kafka-python", "aiokafka")


def consume(client: str, bootstrap: str, topic: str, partitions: list[int], isolation: str,
            expected: int, *, quiet: float = 1.0, timeout: float = 40.0) -> list[Got3]:
    fn = {"confluent": _ck, "kafka-python": _kp, "aiokafka": _aio}[client]
    return fn(bootstrap, topic, partitions, isolation, expected, quiet, timeout)


class _Until:
    """The stop rule of every consumer loop (expected reached, then ``quiet`` seconds)."""

    def __init__(self, expected: int, quiet: float, timeout: float) -> None:
        self.expected, self.quiet = expected, quiet
        self.deadline = time.monotonic() + timeout
        self.quiet_until: float | None = None

    def done(self, n: int) -> bool:
        now = time.monotonic()
        if n >= self.expected and self.quiet_until is None:
            self.quiet_until = now + self.quiet
        return now > self.deadline or (self.quiet_until is not None and now > self.quiet_until)


def _ck(bootstrap, topic, partitions, isolation, expected, quiet, timeout) -> list[Got3]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-acceptance-unused",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": False, "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[Got3] = []
        until = _Until(expected, quiet, timeout)
        while not until.done(len(out)):
            for m in c.consume(1000, 0.2):
                if m.error():
                    raise AssertionError(f"confluent-kafka consumer error: {m.error()}")
                out.append((m.partition(), m.offset(), m.value()))
        return out
    finally:
        c.close()


def _kp(bootstrap, topic, partitions, isolation, expected, quiet, timeout) -> list[Got3]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, group_id=None,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      fetch_max_wait_ms=100)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[Got3] = []
        until = _Until(expected, quiet, timeout)
        while not until.done(len(out)):
            for tp, msgs in c.poll(timeout_ms=200).items():
                out.extend((tp.partition, m.offset, m.value) for m in msgs)
        return out
    finally:
        c.close()


def _aio(bootstrap, topic, partitions, isolation, expected, quiet, timeout) -> list[Got3]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> list[Got3]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_wait_ms=100)
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            out: list[Got3] = []
            until = _Until(expected, quiet, timeout)
            while not until.done(len(out)):
                for tp, msgs in (await c.getmany(timeout_ms=200)).items():
                    out.extend((tp.partition, m.offset, m.value) for m in msgs)
            return out
        finally:
            await c.stop()

    return run_async(go(), timeout=timeout + 30)


# -- ListOffsets ---------------------------------------------------------------------------
LATEST = -1


async def list_offsets_async(conn, topic: str, partitions: list[int], isolation_level: int,
                             timestamp: int = LATEST) -> dict[int, int]:
    from snakka.protocol.messages.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    resp = await conn.send(ListOffsetsRequest(
        replica_id=-1, isolation_level=isolation_level, topics=[ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsPartition(
                partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
                for p in partitions])]))
    out = {}
    for p in resp.topics[0].partitions:
        assert p.error_code == 0, p
        out[p.partition_index] = p.offset
    return out


def stable_and_high(bootstrap: str, topic: str, partitions: list[int]
                    ) -> dict[int, tuple[int, int]]:
    """partition -> (LSO, high watermark): ListOffsets LATEST read_committed / uncommitted."""

    async def go():
        conn = await raw_connect(bootstrap)
        try:
            lso = await list_offsets_async(conn, topic, partitions, 1)
            hw = await list_offsets_async(conn, topic, partitions, 0)
            return {p: (lso[p], hw[p]) for p in partitions}
        finally:
            await conn.close()

    return run_async(go(), timeout=30)


def wait_stable(bootstrap: str, topic: str, partitions: list[int], timeout: float = 30.0
                ) -> dict[int, tuple[int, int]]:
    """Poll ListOffsets until every partition's LSO reached its high watermark (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        now = stable_and_high(bootstrap, topic, partitions)
        if all(lso == hw for lso, hw in now.values()):
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"partitions still blocked after {timeout}s: {now}")
        time.sleep(0.05)


def run_in_new_loop(coro):
    """An asyncio coroutine to completion on a fresh loop (for a producer thread)."""
    return run_async(coro, timeout=None)


async def raw_produce(conn, topic: str, batches: dict[int, bytes], transactional_id=None,
                      version: int = 9) -> dict[int, object]:
    """One Produce (acks=all) of ``batches`` (partition -> record batch) on a raw connection:
    partition -> its PartitionProduceResponse."""
    from snakka.protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    resp = await conn.send(ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout_ms=5000,
        topic_data=[TopicProduceData(name=topic, partition_data=[
            PartitionProduceData(index=p, records=b) for p, b in batches.items()])]),
        version=version)
    return {r.index: r for r in resp.responses[0].partition_responses}


def fill_topic(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    """``n`` records ``%05d`` round-robin over the partitions (confluent-kafka, all acked)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=b"%05d" % i, partition=i % partitions)
    assert p.flush(30) == 0
