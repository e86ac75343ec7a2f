"""Issue 17: one data directory, both brokers. The reference Kafka 4.0 starts on a stopped
snakka's directory and shows its topics (same ids, partitions, configs) and SCRAM users;
snakka serves a directory Kafka 4.0 wrote; ``kafka-dump-log.sh --cluster-metadata-decoder``
reads snakka's metadata log.

Kafka runs on the directory as a single combined node with a static quorum
(``controller.quorum.voters=<node.id>@127.0.0.1:<port + 1>``: snakka's log is kraft.version 0),
node.id 1 as in snakka's meta.properties (docs/data-directory.md)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from reference_kafka import KafkaOnDir, run_tool

from snakka.metadata.store import METADATA_DIR
from snakka.protocol.primitives import uuid_to_base64
from snakka.testing.embedded import EmbeddedBroker

# One JVM broker at a time on this machine: these tests share the reference tests' worker.
pytestmark = pytest.mark.xdist_group("reference-kafka")


@pytest.fixture
def tmp_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="snakka-kraft-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_kafka_starts_on_snakkas_data_dir(kafka_distribution, tmp_dir):
    data = os.path.join(tmp_dir, "data")
    with EmbeddedBroker(data, config={"node.id": "1"}, host="127.0.0.1") as b:
        bs = b.bootstrap_servers
        for args in (["--create", "--topic", "orders", "--partitions", "3", "--config",
                      "retention.ms=12345", "--config", "cleanup.policy=compact"],
                     ["--create", "--topic", "plain", "--partitions", "1"],
                     ["--alter", "--topic", "plain", "--partitions", "2"]):
            r = run_tool("kafka-topics.sh", "--bootstrap-server", bs, *args)
            assert r.returncode == 0, r.stderr
        r = run_tool("kafka-configs.sh", "--bootstrap-server", bs, "--alter", "--entity-type",
                     "users", "--entity-name", "alice", "--add-config",
                     "SCRAM-SHA-256=[iterations=4096,password=secret]")
        assert r.returncode == 0, r.stderr
        ids = {n: uuid_to_base64(t.topic_id)
               for n, t in b.broker.controller.metadata.topics.items()}

    log = os.path.join(data, METADATA_DIR, "00000000000000000000.log")
    dump = run_tool("kafka-dump-log.sh", "--cluster-metadata-decoder", "--print-data-log",
                    "--files", log)
    assert dump.returncode == 0 and "Exception" not in dump.stdout + dump.stderr, dump.stderr
    for kind in ("LEADER_CHANGE", "FEATURE_LEVEL_RECORD", "REGISTER_BROKER_RECORD",
                 "TOPIC_RECORD", "PARTITION_RECORD", "CONFIG_RECORD",
                 "USER_SCRAM_CREDENTIAL_RECORD"):
        assert kind in dump.stdout, kind

    kafka = KafkaOnDir(data)
    try:
        kafka.start()
        r = run_tool("kafka-topics.sh", "--bootstrap-server", kafka.bootstrap_servers,
                     "--describe", "--exclude-internal")
        assert r.returncode == 0, r.stderr
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("Topic:")]
        described = {ln.split()[1]: ln for ln in lines}
        assert set(described) >= {"orders", "plain"}
        assert f"TopicId: {ids['orders']}" in described["orders"]
        assert "PartitionCount: 3" in described["orders"]
        assert "cleanup.policy=compact,retention.ms=12345" in described["orders"]
        assert f"TopicId: {ids['plain']}" in described["plain"]
        assert "PartitionCount: 2" in described["plain"]
        r = run_tool("kafka-configs.sh", "--bootstrap-server", kafka.bootstrap_servers,
                     "--describe", "--entity-type", "users", "--entity-name", "alice")
        assert "SCRAM-SHA-256=iterations=4096" in r.stdout, r.stdout + r.stderr
        r = run_tool("kafka-configs.sh", "--bootstrap-server", kafka.bootstrap_servers,
                     "--describe", "--entity-type", "topics", "--entity-name", "orders")
        assert "retention.ms=12345" in r.stdout, r.stdout + r.stderr
    finally:
        kafka.stop()


def test_snakka_serves_a_data_dir_kafka_wrote(kafka_distribution, tmp_dir):
    kafka = KafkaOnDir(None)
    try:
        kafka.start()
        bs = kafka.bootstrap_servers
        for args in (["--create", "--topic", "k1", "--partitions", "3", "--config",
                      "retention.ms=4242"],
                     ["--create", "--topic", "k2", "--partitions", "1"],
                     ["--alter", "--topic", "k2", "--partitions", "2"]):
            r = run_tool("kafka-topics.sh", "--bootstrap-server", bs, *args)
            assert r.returncode == 0, r.stderr
        for entity, config in ((["--entity-type", "users", "--entity-name", "bob"],
                                "SCRAM-SHA-512=[iterations=8192,password=pw]"),
                               (["--entity-type", "users", "--entity-name", "bob"],
                                "producer_byte_rate=2048"),
                               (["--entity-type", "groups", "--entity-name", "g1"],
                                "consumer.session.timeout.ms=50000")):
            r = run_tool("kafka-configs.sh", "--bootstrap-server", bs, "--alter", *entity,
                         "--add-config", config)
            assert r.returncode == 0, r.stderr
        r = run_tool("kafka-topics.sh", "--bootstrap-server", bs, "--describe")
        kafka_ids = {ln.split()[1]: ln.split()[3] for ln in r.stdout.splitlines()
                     if ln.startswith("Topic:")}
        data = kafka.stop_keeping_data()
        copy = os.path.join(tmp_dir, "from-kafka")
        shutil.copytree(data, copy)
    finally:
        kafka.stop()

    with EmbeddedBroker(copy, config={"node.id": "1"}, host="127.0.0.1") as b:
        r = run_tool("kafka-topics.sh", "--bootstrap-server", b.bootstrap_servers,
                     "--describe", "--exclude-internal")
        assert r.returncode == 0, r.stderr
        described = {ln.split()[1]: ln for ln in r.stdout.splitlines() if ln.startswith("Topic:")}
        assert f"TopicId: {kafka_ids['k1']}" in described["k1"]
        assert "PartitionCount: 3" in described["k1"] and "retention.ms=4242" in described["k1"]
        assert f"TopicId: {kafka_ids['k2']}" in described["k2"]
        assert "PartitionCount: 2" in described["k2"]
        md = b.broker.controller.metadata
        assert set(md.scram.users) == {"bob"}
        assert md.client_quotas.quotas == {(("user", "bob"),): {"producer_byte_rate": 2048.0}}
        assert md.dynamic_configs[(32, "g1")] == {"consumer.session.timeout.ms": "50000"}
        assert md.features["metadata.version"] == 25
