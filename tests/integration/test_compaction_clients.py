"""Real clients on a compacted topic, end to end (issue 13).

An embedded broker (cleaner backing off 50 ms) holds compacted topics with small segments;
confluent-kafka writes keyed values and tombstones (uncompressed, and lz4: the cleaner
rewrites compressed batches in their codec). Once the cleaner has removed records (the
partition has gaps in its offsets), kafka-python, confluent-kafka, aiokafka and kcat each
read the partition from offset 0: all four see the same records, offsets strictly
increasing, the latest value per key, and the tombstones that are younger than
delete.retention.ms (here an hour) with a null value.

A record without a key is refused on a compacted topic with INVALID_RECORD (87), as Kafka
does ("Compacted topic cannot accept message without key"), for confluent-kafka and
kafka-python; the same record is accepted on a topic with cleanup.policy=delete.
"""

from __future__ import annotations

import random

import pytest

from .compaction_support import (
    KeyedWriter,
    aiokafka_read_all,
    check_offsets,
    ck_read_all,
    compacted_topic_config,
    end_offset,
    kcat_read_all,
    kp_read_all,
    latest_per_key,
)
from .helpers import ck_create_topic, wait_until

pytestmark = [pytest.mark.timeout(300)]

BROKER = {"log.cleaner.backoff.ms": "50"}
KEYS = 40
READERS = {
    "confluent-kafka": ck_read_all,
    "kafka-python": kp_read_all,
    "aiokafka": aiokafka_read_all,
    "kcat": kcat_read_all,
}


@pytest.fixture
def broker(snakka_broker_factory):
    return snakka_broker_factory(config=BROKER)


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_every_client_reads_a_cleaned_topic_from_zero(broker, codec):
    bs = broker.bootstrap_servers
    topic = f"compacted-{codec}"
    ck_create_topic(bs, topic, 1, compacted_topic_config(
        16 * 1024, **{"delete.retention.ms": "3600000"}))
    rnd = random.Random(13)
    w = KeyedWriter(bs, topic, **{"compression.type": codec, "linger.ms": 20})
    tombstoned = set()
    for i in range(3000):
        key = f"key-{rnd.randrange(KEYS):03d}".encode()
        if rnd.random() < 0.05:
            w.write(key, None)
            tombstoned.add(key)
        else:
            w.write(key, f"value-{i}-".encode().ljust(rnd.randrange(20, 200), b"."))
            tombstoned.discard(key)
    w.flush()
    expected = w.expected()
    end = end_offset(bs, topic)
    assert end == 3000

    # Cleaned: far fewer records than offsets (gaps everywhere but the active segment).
    wait_until(lambda: len(ck_read_all(bs, topic, end)) < end // 3, 60,
               "the cleaner to remove superseded records", interval=0.5)

    views = {}
    for name, reader in READERS.items():
        seen = reader(bs, topic, end)
        check_offsets(seen, end)
        assert latest_per_key(seen) == expected, name
        # Tombstones younger than delete.retention.ms stay readable, with a null value.
        last = {k: v for _, k, v in seen}
        assert {k for k, v in last.items() if v is None} == tombstoned, name
        views[name] = seen
    first = views["confluent-kafka"]
    for name, seen in views.items():
        assert seen == first, f"{name} reads other records than confluent-kafka"


def test_keyless_record_refused_on_a_compacted_topic(broker):
    from confluent_kafka import KafkaError, Producer
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "compacted-keyless", 1, compacted_topic_config(16 * 1024))
    ck_create_topic(bs, "deleting-keyless", 1, {"cleanup.policy": "delete"})

    # One record per flush: Kafka refuses the whole batch that holds a keyless record.
    p = Producer({"bootstrap.servers": bs, "acks": "all", "retries": 0,
                  "enable.idempotence": False})
    errors: list = []
    for topic, key in (("compacted-keyless", None), ("compacted-keyless", b"k"),
                       ("deleting-keyless", None)):
        p.produce(topic, key=key, value=b"keyed" if key else b"no key",
                  on_delivery=lambda e, m: errors.append(e))
        assert p.flush(30) == 0
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD, errors[0]
    assert errors[1] is None and errors[2] is None, errors

    kp = KafkaProducer(bootstrap_servers=bs, acks="all", retries=0)
    try:
        with pytest.raises(InvalidRecordError):
            kp.send("compacted-keyless", value=b"no key").get(timeout=30)
        kp.send("compacted-keyless", key=b"k", value=b"keyed again").get(timeout=30)
    finally:
        kp.close()
    end = end_offset(bs, "compacted-keyless")
    seen = ck_read_all(bs, "compacted-keyless", end)
    assert [(k, v) for _, k, v in seen] == [(b"k", b"keyed"), (b"k", b"keyed again")]
