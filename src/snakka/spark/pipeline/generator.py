"""Produce the reference pipeline's clickstream into a Kafka topic (snakka or any broker).

What this module owns
    :func:`produce_events`: creates the input topic if needed and writes
    :class:`~.events.ClickEvent` records to it, keyed by user (Kafka's murmur2 partitioner, as
    a Java or kafka-python producer would place them), with a ``content-type`` header,
    optionally paced to a target rate.

Record timestamps
    The record timestamp (CreateTime) is the wall clock at produce time, as a collector's
    producer would set it; the event time is the JSON field ``ts``. Not the generated
    ``arrival_ms``: the stream's event time is a fixed replayed day (deterministic, see
    :mod:`.events`), and record timestamps that old would make the broker's time-based
    retention (``retention.ms``, 7 days by default) delete the topic under the job.

Why its own small producer
    The pipeline depends only on snakka's runtime dependencies plus the ``spark`` extra
    (confluent-kafka is a test-only dependency), so it speaks the Kafka protocol through
    snakka's client (:class:`snakka.client.connection.KafkaConnection`): one connection to the
    bootstrap broker, one ProduceRequest per chunk covering every partition, a bounded number
    of requests in flight (the broker answers a connection's requests in order, so per-partition
    order holds), ``acks=all``. Like the CLI's ``produce`` verb it is single-broker oriented:
    against a multi-broker cluster, partitions led elsewhere fail with NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from snakka.client.admin import Admin, AdminError
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.metadata_response import MetadataResponseTopic
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.records import Record, build_batch
from snakka.util.murmur2 import murmur2_partition

from .events import CONTENT_TYPE_HEADER, ClickEvent

# Events per ProduceRequest (split across partitions) and requests in flight: enough to keep
# the broker busy while this process encodes the next chunk, small enough to bound memory.
CHUNK_EVENTS = 2000
MAX_IN_FLIGHT = 4
PRODUCE_TIMEOUT_MS = 30_000


class ProduceError(RuntimeError):
    """A produce request failed (the message names the partition and Kafka error)."""


@dataclass
class ProduceStats:
    events: int = 0
    seconds: float = 0.0

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


async def ensure_topic(admin: Admin, topic: str, partitions: int,
                       configs: dict[str, str] | None = None) -> MetadataResponseTopic:
    """Create ``topic`` with ``partitions`` unless it exists; return its Metadata entry."""
    try:
        await admin.create_topic(topic, partitions, -1, configs)
    except AdminError as e:
        if ErrorCode.TOPIC_ALREADY_EXISTS.name not in str(e):
            raise
    (meta,) = await admin.list_topics([topic])
    if meta.error_code:
        raise AdminError(f"metadata of {topic}: {ErrorCode(meta.error_code).name}")
    return meta


async def produce_events(bootstrap: str, topic: str, events: Iterable[ClickEvent], *,
                         partitions: int = 3, rate: float | None = None,
                         on_progress: Callable[[int], None] | None = None,
                         config: dict[str, str] | None = None) -> ProduceStats:
    """Write ``events`` to ``topic`` (created with ``partitions`` if missing), in order.

    ``rate`` (events per second of wall time) paces the stream so that a streaming job has
    something to chase; ``None`` produces as fast as the broker takes it. ``on_progress``
    gets the running count after every acknowledged request. ``config``: Kafka client
    configs (``security.protocol``, ``ssl.*``, ``sasl.*``).
    """
    stats = ProduceStats()
    async with Admin(bootstrap, client_id="snakka-pipeline-generator", config=config) as admin:
        meta = await ensure_topic(admin, topic, partitions)
        n_parts = len(meta.partitions)
        conn = admin.conn
        in_flight: set[asyncio.Task] = set()
        started = time.monotonic()
        acked = 0

        async def send(req: ProduceRequest, count: int) -> None:
            nonlocal acked
            resp = await conn.send(req)
            for tr in resp.responses:
                for pr in tr.partition_responses:
                    if pr.error_code:
                        raise ProduceError(f"produce to {topic}-{pr.index}: "
                                           f"{ErrorCode(pr.error_code).name}"
                                           + (f" ({pr.error_message})" if pr.error_message
                                              else ""))
            acked += count
            if on_progress is not None:
                on_progress(acked)

        def request(chunk: list[ClickEvent]) -> ProduceRequest:
            by_partition: dict[int, list[Record]] = {}
            now_ms = int(time.time() * 1000)
            for ev in chunk:
                key = ev.key()
                by_partition.setdefault(murmur2_partition(key, n_parts), []).append(
                    Record(timestamp=now_ms, key=key, value=ev.value(),
                           headers=(CONTENT_TYPE_HEADER,)))
            return ProduceRequest(
                transactional_id=None, acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS,
                # name for Produce <= v12, topic id from v13
                topic_data=[TopicProduceData(name=topic, topic_id=meta.topic_id, partition_data=[
                    PartitionProduceData(index=p, records=build_batch(recs))
                    for p, recs in sorted(by_partition.items())])])

        async def flush_one() -> None:
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                in_flight.discard(t)
                t.result()  # re-raise a failed produce

        chunk: list[ClickEvent] = []
        total = 0

        async def submit() -> None:
            nonlocal total
            while len(in_flight) >= MAX_IN_FLIGHT:
                await flush_one()
            total += len(chunk)
            in_flight.add(asyncio.ensure_future(send(request(chunk), len(chunk))))
            if rate:
                ahead = total / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)

        # Paced runs send smaller chunks so the stream arrives smoothly, ~10 requests/s.
        chunk_size = CHUNK_EVENTS if not rate else max(1, min(CHUNK_EVENTS, int(rate / 10)))
        try:
            for ev in events:
                chunk.append(ev)
                if len(chunk) >= chunk_size:
                    await submit()
                    chunk = []
            if chunk:
                await submit()
            while in_flight:
                await flush_one()
        finally:
            for t in in_flight:  # only after a failure: do not leave requests behind
                t.cancel()
        stats.events = acked
        stats.seconds = time.monotonic() - started
    return stats
