"""The object store goes down and comes back (issue 12): nothing recent is affected, nothing is
lost, and the copier catches up, all within bounded time.

For each backend, the store goes away under a running broker (subprocess, a 1-partition
topic of 256 KiB segments keeping one segment locally) after part of the topic was already
copied: the loopback S3 server stops (its port refuses, open connections are reset); the
local directory's root disappears (an unmounted NAS). While it is down:

- produce is answered as usual and a consumer reads the new records from the earliest local
  offset (ListOffsets -4): produce and consume of recent data are unaffected;
- a consumer of the history (offset 0, remote only) gets nothing and no error (the partition
  is answered KAFKA_STORAGE_ERROR, which clients retry), and it goes on from where it was, no
  gap, once the store is back;
- uploads fail and back off: the broker logs the retries (``retrying in N ms``), the latest
  tiered offset (-5) stays where it was, and local retention waits: the partition's local
  ``.log`` bytes grow well past ``local.retention.bytes`` (nothing is deleted that is not
  remote);

When the server is back, within a bounded time (the retry backoff is capped at 2 s here) the
copier catches up (-5 reaches the end of the closed segments), the local size shrinks to
about one segment again, and a consumer from offset 0 reads every record, in order, no gap.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition

from snakka.testing import EmbeddedBroker

from .helpers import ck_admin, ck_consumer_config, ck_create_topic, wait_until
from .tiered_support import (
    EARLIEST_LOCAL,
    LATEST_TIERED,
    TIERED_BROKER,
    assert_clean_output,
    list_offsets,
    local_log_bytes,
    produce_numbered,
    read_from_earliest,
    tiered_backend,  # noqa: F401  (fixture)
    tiered_topic_config,
    wait_tiered,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiered"), pytest.mark.timeout(300)]

SEG = 256 * 1024
TOPIC = "tiered-outage"


def _retry_lines(broker: EmbeddedBroker) -> list[str]:
    """The copier's failure lines (a WARNING each; the store's error text may span lines,
    the backoff ("retrying in N ms") is at the end of the message)."""
    return [line for line in broker.output if "tiered storage task failed" in line]


def test_object_store_outage(tiered_backend):  # noqa: F811  (the imported fixture)
    broker = EmbeddedBroker(mode="subprocess", log_level="INFO",
                            config={**TIERED_BROKER, **tiered_backend.configs()})
    broker.start()
    try:
        bs = broker.bootstrap_servers
        ck_create_topic(bs, TOPIC, 1, tiered_topic_config(SEG, SEG))
        produce_numbered(bs, TOPIC, 0, 2000)  # ~8 segments
        before = wait_tiered(bs, broker.data_dir, TOPIC, [0], timeout=60, local_max=3 * SEG)[0]

        tiered_backend.down()
        try:
            produce_numbered(bs, TOPIC, 2000, 4000)  # ~16 more segments, acknowledged
            local_start = list_offsets(bs, TOPIC, [0], EARLIEST_LOCAL)[0]
            assert local_start <= 2000
            got = read_from_earliest(bs, TOPIC, 6000, start=local_start)
            assert got == list(range(local_start, 6000))
            wait_until(lambda: len(_retry_lines(broker)) >= 2, 30,
                       "the copier's failures logged with their backoff")
            assert any("retrying in" in line for line in broker.output)
            # Local retention waits for the copies: the local part keeps growing.
            assert local_log_bytes(broker.data_dir, TOPIC, 0) > 12 * SEG
            assert list_offsets(bs, TOPIC, [0], LATEST_TIERED)[0] == before
            # A consumer of the history gets nothing (the broker answers
            # KAFKA_STORAGE_ERROR for the partition; librdkafka retries) and no error...
            history = Consumer(ck_consumer_config(bs))
            history.assign([TopicPartition(TOPIC, 0, 0)])
            got = [m for _ in range(4) for m in history.consume(num_messages=1000, timeout=0.5)]
            assert not got, [m.error() or m.offset() for m in got[:5]]
        finally:
            tiered_backend.up()

        # ... and, with the store back, the same consumer goes on from offset 0.
        offsets: list[int] = []
        wait_until(lambda: offsets.extend(_offsets(history.consume(1000, 0.5))) or
                   len(offsets) >= 6000, 60, "the history consumer resumes")
        history.close()
        assert offsets == list(range(6000))
        wait_tiered(bs, broker.data_dir, TOPIC, [0], timeout=60, local_max=3 * SEG)
        assert read_from_earliest(bs, TOPIC, 6000) == list(range(6000))
        assert_clean_output(broker)
    finally:
        broker.close()


def _offsets(msgs) -> list[int]:
    for m in msgs:
        assert not m.error(), m.error()
        assert m.value().startswith(b"%010d:" % m.offset())
    return [m.offset() for m in msgs]


def test_restart_and_delete_topic_while_the_store_is_down(tiered_backend):  # noqa: F811
    """The broker does not need the store to start: restarted (SIGKILL) during an outage it
    serves produce and local reads at once, and leaves the store alone (the local backend
    must not recreate a missing root: on an unmounted NAS that is the mount point, and what
    it wrote there would be hidden by the mount, and the deletions below would "succeed"
    on an empty directory); a topic deleted during the outage loses its remote objects once
    the store is back; nothing of the surviving topic is lost."""
    broker = EmbeddedBroker(mode="subprocess", log_level="INFO",
                            config={**TIERED_BROKER, **tiered_backend.configs()})
    broker.start()
    try:
        bs = broker.bootstrap_servers
        for t in (TOPIC + "-kept", TOPIC + "-deleted"):
            ck_create_topic(bs, t, 1, tiered_topic_config(SEG, SEG))
            produce_numbered(bs, t, 0, 2000)
            wait_tiered(bs, broker.data_dir, t, [0], timeout=60, local_max=3 * SEG)
        assert tiered_backend.objects(TOPIC + "-deleted")
        tiered_backend.down()
        try:
            broker.kill()
            broker.start()
            assert tiered_backend.is_down(), "the restarted broker recreated the store"
            bs = broker.bootstrap_servers
            produce_numbered(bs, TOPIC + "-kept", 2000, 500)
            local_start = list_offsets(bs, TOPIC + "-kept", [0], EARLIEST_LOCAL)[0]
            assert 0 < local_start < 2000
            assert (read_from_earliest(bs, TOPIC + "-kept", 2500, start=local_start)
                    == list(range(local_start, 2500)))
            admin = ck_admin(bs)  # must outlive its futures
            admin.delete_topics([TOPIC + "-deleted"])[TOPIC + "-deleted"].result(30)
            wait_until(lambda: any("deleting remote data failed" in line
                                   for line in broker.output), 30,
                       "the deletion's failure logged (retried)")
        finally:
            tiered_backend.up()
        wait_until(lambda: not tiered_backend.objects(TOPIC + "-deleted"), 60,
                   "the deleted topic's objects gone once the store is back", interval=0.2)
        wait_tiered(bs, broker.data_dir, TOPIC + "-kept", [0], timeout=60, local_max=3 * SEG)
        assert read_from_earliest(bs, TOPIC + "-kept", 2500) == list(range(2500))
        assert_clean_output(broker)
    finally:
        broker.close()
