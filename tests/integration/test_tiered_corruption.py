"""A corrupt object in the remote store is never served (issue 12: checksums verified on read).

For each backend, a tiered partition's third remote segment gets one byte of its ``.log``
object flipped behind the broker's back (bit rot on the NAS, a bad object in the bucket).
A confluent-kafka consumer of that partition and of a healthy one, from offset 0:

- reads partition 0 up to the corrupt segment and then nothing more (the chunk's CRC32C does
  not match the manifest: the partition is answered KAFKA_STORAGE_ERROR, which the client
  retries), never a record of the corrupt segment nor of any later one;
- reads the healthy partition 1 to its end meanwhile;
- the broker says why in a WARNING naming the checksum, and logs no ERROR.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from snakka.testing import EmbeddedBroker

from .helpers import ck_consumer_config, ck_create_topic, wait_until
from .tiered_support import (
    RECORD,
    TIERED_BROKER,
    assert_clean_output,
    tiered_backend,  # noqa: F401  (fixture)
    tiered_topic_config,
    wait_tiered,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiered"), pytest.mark.timeout(300)]

SEG = 256 * 1024
TOPIC = "tiered-corrupt"
N = 2000  # per partition


def test_a_corrupt_remote_segment_is_never_served(tiered_backend):  # noqa: F811
    broker = EmbeddedBroker(mode="subprocess", log_level="INFO",
                            config={**TIERED_BROKER, **tiered_backend.configs()})
    broker.start()
    try:
        bs = broker.bootstrap_servers
        ck_create_topic(bs, TOPIC, 2, tiered_topic_config(SEG, SEG))
        p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5,
                      "batch.size": 32 * 1024})
        for i in range(N):
            for part in (0, 1):
                p.produce(TOPIC, value=b"%010d:" % i + b"x" * RECORD, partition=part)
            if i % 200 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        wait_tiered(bs, broker.data_dir, TOPIC, [0, 1], timeout=60, local_max=3 * SEG)
        logs = sorted((o for o in tiered_backend.objects(TOPIC)
                       if o.partition_of(TOPIC) == 0 and o.suffix == "log"),
                      key=lambda o: o.start_offset)
        assert len(logs) >= 4, [o.start_offset for o in logs]
        bad = logs[2]
        tiered_backend.corrupt(bad.key, 1000)

        c = Consumer(ck_consumer_config(bs))
        try:
            c.assign([TopicPartition(TOPIC, 0, 0), TopicPartition(TOPIC, 1, 0)])
            got: dict[int, list[int]] = {0: [], 1: []}

            def poll() -> bool:
                for m in c.consume(num_messages=1000, timeout=0.2):
                    assert not m.error(), m.error()
                    assert m.value().startswith(b"%010d:" % m.offset())
                    got[m.partition()].append(m.offset())
                return (len(got[1]) == N and got[0][-1:] == [bad.start_offset - 1]
                        and any("checksum" in line.lower() for line in broker.output))

            wait_until(poll, 60, "partition 1 read, partition 0 read up to the corrupt segment")
            # A while longer: still nothing from the corrupt segment on.
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                poll()
        finally:
            c.close()
        assert got[1] == list(range(N))
        assert got[0] == list(range(bad.start_offset)), (got[0][-3:], bad.start_offset)
        warnings = [line for line in broker.output
                    if "WARNING" in line and "checksum" in line.lower()]
        assert warnings, "no WARNING names the checksum mismatch"
        assert_clean_output(broker)
    finally:
        broker.close()
