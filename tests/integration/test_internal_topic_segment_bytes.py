"""The coordinators' internal topics take their segment size from Kafka's broker configs
(``offsets.topic.segment.bytes``, ``transaction.state.log.segment.bytes``,
``share.coordinator.state.topic.segment.bytes``) when they are created, and keep Kafka's other
overrides beside it; a value below 1 stops the broker at start, naming the key.

Each topic is created by a real client the way a user creates it: a confluent-kafka commit, a
transactional producer's init_transactions, a share consumer's first fetch.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from snakka.client import ShareConsumer
from snakka.config import BrokerConfig, ConfigError
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, wait_until

SEGMENTS = {"offsets.topic.segment.bytes": "1048576",
            "transaction.state.log.segment.bytes": "2097152",
            "share.coordinator.state.topic.segment.bytes": "3145728"}


def _describe(bs: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res], request_timeout=30)[res].result(30)
    return {k: e.value for k, e in entries.items()}


def _topics(bs: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bs}).list_topics(timeout=10).topics)


def test_internal_topics_are_created_with_the_configured_segment_size():
    with EmbeddedBroker(config=SEGMENTS) as b:
        bs = b.bootstrap_servers
        ck_create_topic(bs, "seg-t", 1)
        c = Consumer({"bootstrap.servers": bs, "group.id": "seg-g", "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition("seg-t", 0, 1)], asynchronous=False)
        finally:
            c.close()
        p = Producer({"bootstrap.servers": bs, "transactional.id": "seg-tx"})
        p.init_transactions(30)
        sc = ShareConsumer({"bootstrap.servers": bs, "group.id": "seg-share",
                            "fetch.max.wait.ms": 100})
        try:
            sc.subscribe(["seg-t"])

            def created() -> bool:
                sc.poll(0.2)   # joins, then fetches: the first write creates the topic
                return "__share_group_state" in _topics(bs)

            wait_until(created, 30, "__share_group_state created by the share group's first write")
        finally:
            sc.close()

        offsets = _describe(bs, "__consumer_offsets")
        assert offsets["segment.bytes"] == "1048576"
        assert (offsets["cleanup.policy"], offsets["compression.type"]) == ("compact", "producer")
        txn = _describe(bs, "__transaction_state")
        assert txn["segment.bytes"] == "2097152"
        assert (txn["cleanup.policy"], txn["compression.type"]) == ("compact", "uncompressed")
        share = _describe(bs, "__share_group_state")
        assert share["segment.bytes"] == "3145728"
        # Kafka 4.0's overrides, plus retention that never deletes live state (docs).
        assert (share["cleanup.policy"], share["compression.type"]) == ("delete", "producer")
        assert (share["retention.ms"], share["retention.bytes"]) == ("-1", "-1")


@pytest.mark.parametrize("key", sorted(SEGMENTS))
def test_a_segment_size_below_one_names_the_key(key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        BrokerConfig({key: "0"})
