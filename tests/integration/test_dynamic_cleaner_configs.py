"""The log cleaner's configs changed at run time, as in Kafka (LogCleaner.reconfigure): a
``log.cleaner.*`` change made with a real admin client reaches the running cleaner without a
restart. The broker starts with ``log.cleaner.backoff.ms`` of an hour, so after its first
(empty) pass the cleaner sleeps; setting it to 100 ms wakes the cleaner, which compacts what
a confluent-kafka producer wrote and a confluent-kafka consumer then reads compacted.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, ConfigSource

from snakka.testing import EmbeddedBroker

from .helpers import (
    ck_admin,
    ck_alter_broker_configs,
    ck_create_topic,
    ck_read_to_end,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)

KEYS = 10
ROUNDS = 20


def _set_broker_config(bootstrap: str, changes: dict[str, str]) -> None:
    ck_alter_broker_configs(bootstrap, dict(changes))
    admin = ck_admin(bootstrap)
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    entries = admin.describe_configs([res])[res].result(30)
    for k, v in changes.items():
        assert entries[k].value == v
        assert int(getattr(entries[k].source, "value", entries[k].source)) == \
            ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_cleaner_reconfigured_at_run_time_compacts():
    with EmbeddedBroker(config={"log.cleaner.backoff.ms": "3600000"}) as broker:
        bs = broker.bootstrap_servers
        ck_create_topic(bs, "dyn-cleaner", 1, {
            "cleanup.policy": "compact", "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})
        producer = Producer({"bootstrap.servers": bs, "linger.ms": 0})
        for r in range(ROUNDS):
            for k in range(KEYS):
                producer.produce("dyn-cleaner", key=f"k{k}".encode(),
                                 value=f"r{r}-".encode() + b"x" * 100)
            producer.flush(30)  # one batch per round: many rolled segments
        assert len(ck_read_to_end(bs, "dyn-cleaner", "read_uncommitted")) == KEYS * ROUNDS

        # The cleaner sleeps its hour; a smaller backoff (and a new I/O rate and buffer,
        # applied with it) wakes it.
        _set_broker_config(bs, {"log.cleaner.backoff.ms": "100",
                                "log.cleaner.io.max.bytes.per.second": "1.0E9",
                                "log.cleaner.dedupe.buffer.size": "1048576"})
        values = wait_until(
            lambda: (v := ck_read_to_end(bs, "dyn-cleaner", "read_uncommitted"))
            and len(v) < KEYS * ROUNDS and v, 60, "the cleaner to compact")
        # Every key's latest value survives (the active segment is never cleaned).
        last = {f"r{ROUNDS - 1}-".encode() + b"x" * 100}
        assert last <= set(values)
        cleaner = broker.broker.log_cleaner
        assert cleaner.config.backoff_ms == 100
        assert cleaner.config.dedupe_buffer_size == 1048576
