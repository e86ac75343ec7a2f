"""Tiered storage under an open transaction (issue 12): only what lies below the last stable
offset is copied, and read_committed readers of remote data see exactly the committed records.

For each backend: a transactional producer (confluent-kafka) opens a transaction on a tiered
partition of 256 KiB segments and writes ~1 MB in it, while a plain producer keeps writing
after it. While the transaction is open the last stable offset stays at its first record:
ListOffsets -5 (latest tiered) stays below it, however many segments close behind it, and
those segments stay on the local disk. Once the transaction is aborted and a second one
committed, the copier catches up to the end; a read_committed consumer reads the whole
partition from offset 0 (all of it remote but the active segment) and sees every plain
record and the committed transaction's, none of the aborted one's.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from snakka.testing import EmbeddedBroker

from .helpers import ck_consumer_config, ck_create_topic, wait_until
from .tiered_support import (
    LATEST_TIERED,
    RECORD,
    TIERED_BROKER,
    assert_clean_output,
    list_offsets,
    local_log_bytes,
    tiered_backend,  # noqa: F401  (fixture)
    tiered_topic_config,
    wait_tiered,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiered"), pytest.mark.timeout(300)]

SEG = 256 * 1024
TOPIC = "tiered-txn"


def _produce(p: Producer, tag: bytes, n: int) -> None:
    for i in range(n):
        while True:
            try:
                p.produce(TOPIC, value=tag + b"-%06d:" % i + b"t" * RECORD, partition=0)
                break
            except BufferError:
                p.poll(0.05)


def test_copier_stops_at_the_last_stable_offset(tiered_backend):  # noqa: F811
    broker = EmbeddedBroker(mode="subprocess", log_level="INFO",
                            config={**TIERED_BROKER, **tiered_backend.configs()})
    broker.start()
    try:
        bs = broker.bootstrap_servers
        ck_create_topic(bs, TOPIC, 1, tiered_topic_config(SEG, SEG))
        plain = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.size": 32 * 1024,
                          "enable.idempotence": True})
        _produce(plain, b"plain-a", 500)
        assert plain.flush(30) == 0
        txn = Producer({"bootstrap.servers": bs, "transactional.id": "tiered-txn",
                        "linger.ms": 5, "batch.size": 32 * 1024})
        txn.init_transactions(30)
        txn.begin_transaction()
        _produce(txn, b"aborted", 1000)
        assert txn.flush(30) == 0
        _produce(plain, b"plain-b", 2000)  # ~8 segments close behind the open transaction
        assert plain.flush(30) == 0
        # The first record of the open transaction bounds what may be copied.
        c = Consumer(ck_consumer_config(bs, **{"isolation.level": "read_committed"}))
        lso = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10, cached=False)[1]
        c.close()
        assert lso == 500, lso
        # The copier works (the segments wholly below the LSO go up), and then, for ten more
        # of its rounds (an absence cannot be awaited), nothing at or after the LSO does.
        wait_until(lambda: list_offsets(bs, TOPIC, [0], LATEST_TIERED)[0] >= 0, 30,
                   "the segments below the open transaction copied", interval=0.1)
        time.sleep(2)
        assert list_offsets(bs, TOPIC, [0], LATEST_TIERED)[0] < lso
        assert local_log_bytes(broker.data_dir, TOPIC, 0) > 8 * SEG  # kept locally
        txn.abort_transaction(30)
        txn.begin_transaction()
        _produce(txn, b"committed", 500)
        txn.commit_transaction(30)
        _produce(plain, b"plain-c", 500)
        assert plain.flush(30) == 0
        end = wait_tiered(bs, broker.data_dir, TOPIC, [0], timeout=60, local_max=3 * SEG)[0]
        assert end > 3500

        c = Consumer(ck_consumer_config(bs, **{"isolation.level": "read_committed"}))
        try:
            c.assign([TopicPartition(TOPIC, 0, 0)])
            values: list[bytes] = []
            wait_until(lambda: values.extend(
                m.value() for m in c.consume(1000, 0.5) if not m.error()) or
                sum(1 for v in values if v.startswith(b"plain-c")) == 500, 60,
                "read_committed reads to the end")
        finally:
            c.close()
        tags = [v.split(b"-", 1)[0] if not v.startswith(b"plain") else v[:7] for v in values]
        assert tags.count(b"plain-a") == 500 and tags.count(b"plain-b") == 2000
        assert tags.count(b"committed") == 500 and tags.count(b"plain-c") == 500
        assert b"aborted" not in tags
        assert len(values) == 3500
        assert_clean_output(broker)
    finally:
        broker.close()
