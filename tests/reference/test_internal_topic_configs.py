"""The internal topics' configs, against the reference Kafka 4.0 (issue 13).

``__consumer_offsets`` and ``__transaction_state`` are compacted topics with Kafka's own
overrides; a DescribeConfigs of each, on both brokers after a group commit and a transactional
producer created them, shows the same policy, codec and segment size as topic overrides.
"""

from __future__ import annotations

import time

import pytest

TOPICS = ("__consumer_offsets", "__transaction_state")
KEYS = ("cleanup.policy", "compression.type", "segment.bytes")


def _create_internal_topics(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic("itc", num_partitions=1, replication_factor=1)],
                             operation_timeout=30, request_timeout=30)
    fs["itc"].result(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "itc-g",
                  "enable.auto.commit": False})
    try:
        # The first commit creates __consumer_offsets: until its coordinator is loaded, Kafka
        # answers a retriable NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, which a
        # synchronous commit raises instead of retrying (a CI run saw it). Retry those.
        from confluent_kafka import KafkaError, KafkaException

        retriable = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                     KafkaError.COORDINATOR_NOT_AVAILABLE}
        deadline = time.monotonic() + 60
        while True:
            try:
                c.commit(offsets=[TopicPartition("itc", 0, 1)], asynchronous=False)
                break
            except KafkaException as e:
                if e.args[0].code() not in retriable or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "itc-tx"})
    p.init_transactions(60)


def _overrides(bootstrap: str) -> dict[str, dict[str, tuple[str, bool]]]:
    """topic -> key -> (value, is a topic override)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    out: dict[str, dict[str, tuple[str, bool]]] = {}
    for t in TOPICS:
        res = ConfigResource(ConfigResource.Type.TOPIC, t)
        entries = admin.describe_configs([res], request_timeout=30)[res].result(30)
        out[t] = {k: (entries[k].value,
                      int(getattr(entries[k].source, "value", entries[k].source))
                      == ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
                  for k in KEYS}
    return out


@pytest.mark.timeout(300)
def test_internal_topics_have_kafkas_compaction_configs(brokers):
    kafka, snakka = brokers
    for bs in (kafka, snakka):
        _create_internal_topics(bs)
    got_kafka, got_snakka = _overrides(kafka), _overrides(snakka)
    assert got_kafka["__consumer_offsets"]["cleanup.policy"] == ("compact", True)
    assert got_snakka == got_kafka
