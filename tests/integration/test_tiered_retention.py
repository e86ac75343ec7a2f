"""Retention across the tiers (issue 12): what deletes remote segments, seen from outside.

For each backend (local directory, loopback S3), a subprocess broker with tiered storage and a
1-partition topic of 256 KiB segments keeping one segment locally; records carry their own
offset in the value (one producer, so record i lands at offset i) so that any read after a
deletion can be checked record by record:

- ``retention.bytes``: remote segments go oldest first until remote + local-only bytes fit;
  the log start offset moves to a segment boundary, ListOffsets -2 follows it, the deleted
  segments' objects leave the store, and a consumer from the earliest offset reads a gapless
  tail up to the end;
- ``retention.ms``: segments whose records are all older than retention.ms go (records
  produced with CreateTime an hour ago), the newer ones stay;
- DeleteRecords (confluent-kafka's admin) below the local log start offset: the start moves
  to exactly that offset, remote segments wholly below it leave the store, reads start there;
- DeleteTopics: every object of the topic leaves the store.
"""

from __future__ import annotations

import time

import pytest

from snakka.testing import EmbeddedBroker

from .helpers import ck_admin, ck_consumer_config, ck_create_topic, wait_until
from .tiered_support import (
    EARLIEST,
    LATEST,
    LATEST_TIERED,
    RECORD,
    TIERED_BROKER,
    assert_clean_output,
    list_offsets,
    produce_numbered,
    read_from_earliest,
    tiered_backend,  # noqa: F401  (fixture)
    tiered_topic_config,
    wait_tiered,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiered"), pytest.mark.timeout(300)]

SEG = 256 * 1024


@pytest.fixture
def broker(tiered_backend):  # noqa: F811  (the imported fixture)
    b = EmbeddedBroker(mode="subprocess", log_level="INFO",
                       config={**TIERED_BROKER, **tiered_backend.configs()})
    b.start()
    yield b
    try:
        assert_clean_output(b)
    finally:
        b.close()


def store_starts(backend, topic: str) -> list[int]:
    """Start offsets of the segments of partition 0 with a manifest in the store."""
    return sorted(s for s, suffixes in backend.segments(topic, 0).items()
                  if "manifest" in suffixes)


def assert_tail(bootstrap: str, topic: str, start: int, end: int) -> None:
    got = read_from_earliest(bootstrap, topic, end)
    assert got == list(range(start, end)), (got[:3], got[-3:], start, end)


def test_retention_bytes_deletes_remote_segments(broker, tiered_backend):  # noqa: F811
    bs = broker.bootstrap_servers
    topic = "tiered-ret-bytes"
    retention = 8 * SEG
    ck_create_topic(bs, topic, 1, tiered_topic_config(SEG, SEG,
                                                      **{"retention.bytes": str(retention)}))
    n = 6000  # ~6 MB: ~24 segments, three times the retention
    produce_numbered(bs, topic, 0, n)
    wait_tiered(bs, broker.data_dir, topic, [0], timeout=120, local_max=3 * SEG)

    def settled() -> int | None:
        start = list_offsets(bs, topic, [0], EARLIEST)[0]
        starts = store_starts(tiered_backend, topic)
        # Done when the store holds nothing wholly below the log start offset.
        return start if start > 0 and starts and starts[0] == start else None

    start = wait_until(settled, 60, "remote retention by bytes", interval=0.2)
    # Kafka deletes the oldest segment while the rest (remote + local-only bytes) still
    # reaches retention.bytes: what stays is at least retention.bytes and less than one
    # segment more (record values here, a little under the stored bytes).
    kept = (n - start) * RECORD
    assert retention - SEG <= kept < retention + SEG, (start, kept, retention)
    assert list_offsets(bs, topic, [0], LATEST)[0] == n
    assert_tail(bs, topic, start, n)


def test_retention_ms_deletes_old_remote_segments(broker, tiered_backend):  # noqa: F811
    bs = broker.bootstrap_servers
    topic = "tiered-ret-ms"
    ck_create_topic(bs, topic, 1, tiered_topic_config(SEG, SEG, **{"retention.ms": "600000"}))
    old = int(time.time() * 1000) - 3_600_000
    produce_numbered(bs, topic, 0, 2000, timestamp_ms=old)  # ~8 segments an hour old
    produce_numbered(bs, topic, 2000, 2000)
    wait_tiered(bs, broker.data_dir, topic, [0], timeout=120, local_max=3 * SEG)

    def settled() -> int | None:
        start = list_offsets(bs, topic, [0], EARLIEST)[0]
        starts = store_starts(tiered_backend, topic)
        return start if start > 0 and starts and starts[0] == start else None

    start = wait_until(settled, 60, "remote retention by time", interval=0.2)
    # Every segment wholly older than retention.ms went; the one holding offset 2000 (the
    # first new record) stays.
    assert 2000 - 2 * SEG // RECORD < start <= 2000, start
    assert_tail(bs, topic, start, 4000)


def test_delete_records_below_local_start(broker, tiered_backend):  # noqa: F811
    from confluent_kafka import TopicPartition

    bs = broker.bootstrap_servers
    topic = "tiered-delete-records"
    ck_create_topic(bs, topic, 1, tiered_topic_config(SEG, SEG))
    n = 4000
    produce_numbered(bs, topic, 0, n)
    tiered = wait_tiered(bs, broker.data_dir, topic, [0], timeout=120, local_max=3 * SEG)[0]
    before = store_starts(tiered_backend, topic)
    assert len(before) >= 6, before
    target = before[4] + 17  # inside the 5th remote segment, far below the local start
    assert target < tiered
    admin = ck_admin(bs)
    res = admin.delete_records([TopicPartition(topic, 0, target)])
    low = next(iter(res.values())).result(30)
    assert low.low_watermark == target
    assert list_offsets(bs, topic, [0], EARLIEST)[0] == target
    # The four segments wholly below the target leave the store; the one holding it stays.
    wait_until(lambda: store_starts(tiered_backend, topic)[0] == before[4], 60,
               "remote segments below the DeleteRecords offset deleted", interval=0.2)
    assert set(before[4:]) <= set(store_starts(tiered_backend, topic))
    assert list_offsets(bs, topic, [0], LATEST_TIERED)[0] == tiered
    assert_tail(bs, topic, target, n)


def test_delete_topic_deletes_remote_objects(broker, tiered_backend):  # noqa: F811
    """DeleteTopics removes every object of the topic; a topic created again under the same
    name starts from nothing (new topic id, its own objects, offset 0 is its own data)."""
    bs = broker.bootstrap_servers
    topic = "tiered-delete-topic"
    ck_create_topic(bs, topic, 2, tiered_topic_config(SEG, SEG))
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.size": 32 * 1024})
    for i in range(3000):
        p.produce(topic, value=b"%d" % i + b"y" * RECORD, partition=i % 2)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    wait_tiered(bs, broker.data_dir, topic, [0, 1], timeout=120, local_max=3 * SEG)
    assert tiered_backend.objects(topic)
    admin = ck_admin(bs)  # must outlive its futures
    fs = admin.delete_topics([topic], operation_timeout=30)
    fs[topic].result(30)
    wait_until(lambda: not tiered_backend.objects(topic), 60,
               "every remote object of the deleted topic gone", interval=0.2)
    # The same name again: a new topic id, new objects; offset 0 is the new topic's data.
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 30,
               "the deleted topic gone from the metadata")
    ck_create_topic(bs, topic, 1, tiered_topic_config(SEG, SEG))
    produce_numbered(bs, topic, 0, 2000)
    wait_tiered(bs, broker.data_dir, topic, [0], timeout=120, local_max=3 * SEG)
    assert read_from_earliest(bs, topic, 2000) == list(range(2000))
    ids = {o.topic_id(topic) for o in tiered_backend.objects(topic)}
    assert len(ids) == 1, ids


def test_readers_of_segments_being_deleted(broker, tiered_backend):  # noqa: F811
    """Remote segments deleted under readers: consumers reading the remote part in small
    fetches while DeleteRecords moves the log start forward, segment after segment. Each
    consumer sees offsets only increasing, every value the one written at its offset, jumps
    (OFFSET_OUT_OF_RANGE, auto.offset.reset=earliest) only forward to the new start, and
    reaches the end; the broker logs no error."""
    import threading

    from confluent_kafka import Consumer, TopicPartition

    bs = broker.bootstrap_servers
    topic = "tiered-delete-under-readers"
    ck_create_topic(bs, topic, 1, tiered_topic_config(SEG, SEG))
    n = 6000
    produce_numbered(bs, topic, 0, n)
    wait_tiered(bs, broker.data_dir, topic, [0], timeout=120, local_max=3 * SEG)
    starts = store_starts(tiered_backend, topic)
    problems: list[str] = []
    done: list[int] = []
    jumps: list[tuple[int, int]] = []
    # Each reader waits, after its first records, until the first deletion has passed its
    # position: the overtaking is certain, not a matter of relative speeds (a CI run under load
    # had the readers finish before the deletions reached them).
    first_deletion = threading.Event()

    def read(i: int) -> None:
        # librdkafka prefetches in the background while the reader waits below (by default up
        # to 64 MiB): a CI run saw every record queued before the first deletion, so no reader
        # was overtaken. A queue of about one fetch keeps the reader on the broker's heels.
        c = Consumer(ck_consumer_config(bs, **{"max.partition.fetch.bytes": 8 * 1024,
                                               "queued.max.messages.kbytes": 16,
                                               "queued.min.messages": 1}))
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            last = -1
            deadline = time.monotonic() + 120
            while last < n - 1 and time.monotonic() < deadline:
                for m in c.consume(num_messages=50, timeout=0.2):
                    if m.error():
                        problems.append(f"reader {i}: {m.error()}")
                        continue
                    if m.offset() <= last or not m.value().startswith(b"%010d:" % m.offset()):
                        problems.append(f"reader {i}: offset {m.offset()} after {last}")
                    if m.offset() != last + 1:
                        jumps.append((last, m.offset()))
                    last = m.offset()
                if last >= 0:
                    first_deletion.wait(60)
            done.append(last)
        finally:
            c.close()

    readers = [threading.Thread(target=read, args=(i,)) for i in range(3)]
    for r in readers:
        r.start()
    admin = ck_admin(bs)
    for s in starts[1:-2]:
        tp = TopicPartition(topic, 0, s + 5)
        admin.delete_records([tp])[tp].result(30)
        first_deletion.set()
        time.sleep(0.05)  # readers make some progress between deletions, on purpose
    for r in readers:
        r.join(150)
    assert not problems, problems[:10]
    assert done == [n - 1] * 3, done
    # The deletions overtook the readers: they were sent forward to the new start.
    assert jumps, "no reader was overtaken by a deletion (make the readers slower)"
    assert all(b in {s + 5 for s in starts} for _, b in jumps), jumps
    wait_until(lambda: store_starts(tiered_backend, topic)[0] == starts[-3], 60,
               "the deleted segments gone from the store", interval=0.2)
