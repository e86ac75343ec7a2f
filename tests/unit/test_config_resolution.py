"""Config resolution: Kafka's precedence and sources, unit fallbacks, validation messages."""

import pytest

from snakka.config import BrokerConfig, ConfigError, ConfigSource, Listener
from snakka.metadata.configs import ConfigResolver
from snakka.metadata.core import RESOURCE_BROKER, RESOURCE_TOPIC, ClusterMetadata


def test_precedence_topic_over_dynamic_over_static_over_default():
    static = BrokerConfig({"log.retention.hours": "24"})
    md = ClusterMetadata()
    md.create_topic("t", 1, {})
    r = ConfigResolver(static, md)
    rc = r.topic_config(md.topics["t"], "retention.ms")
    assert rc.value == str(24 * 3600 * 1000)
    assert rc.source == ConfigSource.STATIC_BROKER_CONFIG
    md.alter_configs(RESOURCE_BROKER, "", {"log.retention.ms": "5000"})
    rc = r.topic_config(md.topics["t"], "retention.ms")
    assert (rc.value, rc.source) == ("5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    md.alter_configs(RESOURCE_TOPIC, "t", {"retention.ms": "7"})
    rc = r.topic_config(md.topics["t"], "retention.ms")
    assert (rc.value, rc.source) == ("7", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    names = [s[0] for s in rc.synonyms]
    assert names[0] == "retention.ms" and "log.retention.ms" in names and "log.retention.hours" in names


def test_defaults_are_kafkas():
    md = ClusterMetadata()
    md.create_topic("t", 1, {})
    m = ConfigResolver(BrokerConfig(), md).effective_topic_config_map(md.topics["t"])
    assert m["retention.ms"] == "604800000"
    assert m["segment.bytes"] == "1073741824"
    assert m["max.message.bytes"] == "1048588"
    assert m["cleanup.policy"] == "delete"
    assert m["message.timestamp.type"] == "CreateTime"


def test_static_config_validation_names_the_key():
    with pytest.raises(ConfigError, match="num.partitions"):
        BrokerConfig({"num.partitions": "zero"})
    with pytest.raises(ConfigError, match="listeners"):
        BrokerConfig({"listeners": "localhost:9092"})
    with pytest.raises(ConfigError, match="default.replication.factor"):
        BrokerConfig({"default.replication.factor": "3"})


def test_properties_file_parsing():
    cfg = BrokerConfig.from_properties(
        "# comment\n! other\nnum.partitions=3\nlog.dirs : /tmp/x\nlisteners PLAINTEXT://:9093\n",
        {"node.id": "7"})
    assert cfg.num_partitions == 3
    assert cfg.log_dirs == ["/tmp/x"]
    assert cfg.listeners == [Listener("PLAINTEXT", "", 9093)]
    assert cfg.node_id == 7


def test_listener_parsing():
    assert Listener.parse("PLAINTEXT://[::1]:9092") == Listener("PLAINTEXT", "::1", 9092)
    assert str(Listener("PLAINTEXT", "::1", 9092)) == "PLAINTEXT://[::1]:9092"
    with pytest.raises(ConfigError):
        Listener.parse("PLAINTEXT://host:99999")


def test_compaction_and_tiered_storage_are_available_topic_configs():
    from snakka.config import validate_topic_configs

    # Compaction exists (issue 13); a policy outside Kafka's two values is still refused.
    validate_topic_configs({"cleanup.policy": "compact,delete"})
    with pytest.raises(ConfigError, match="cleanup.policy"):
        validate_topic_configs({"cleanup.policy": "compress"})
    # Tiered storage exists (issue 12): the topic rules need the broker's setting, so they
    # live in ClusterMetadata (tests/unit/test_tiered_configs.py).
    validate_topic_configs({"remote.storage.enable": "true"})


def test_configuration_doc_is_current():
    import subprocess
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parents[2] / "tools" / "gen_config_docs.py"
    r = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("props,expected", [
    ({"log.retention.minutes": "3"}, "180000"),
    ({"log.retention.hours": "-1"}, "-1"),
    ({"log.retention.ms": "5", "log.retention.hours": "9"}, "5"),
    ({"log.retention.minutes": "2", "log.retention.hours": "9"}, "120000"),
])
def test_retention_unit_fallbacks(props, expected):
    md = ClusterMetadata()
    md.create_topic("t", 1, {})
    assert ConfigResolver(BrokerConfig(props), md).topic_config(md.topics["t"], "retention.ms").value == expected


def test_broker_synonyms_reach_the_log_config():
    from snakka.storage import LogConfig

    md = ClusterMetadata()
    md.create_topic("t", 1, {})
    r = ConfigResolver(BrokerConfig({"log.segment.bytes": "4096", "message.max.bytes": "500",
                                     "log.roll.hours": "1", "log.roll.ms": "123"}), md)
    c = LogConfig.from_dict(r.effective_topic_config_map(md.topics["t"]))
    assert (c.segment_bytes, c.max_message_bytes, c.segment_ms) == (4096, 500, 123)


def test_stale_dynamic_value_of_a_static_config_is_ignored():
    """num.partitions was dynamic in older snakka; Kafka defines it as static. A value stored
    then (replayed from the metadata log) is not in force: the static value is."""
    md = ClusterMetadata()
    md.apply({"type": "config", "resource_type": RESOURCE_BROKER, "resource_name": "",
               "configs": {"num.partitions": "7", "log.retention.ms": "5000"}})
    r = ConfigResolver(BrokerConfig({"num.partitions": "3"}), md)
    assert r.broker_value("num.partitions") == "3"
    assert r.broker_value("log.retention.ms") == "5000"
    by_name = {rc.name: rc for rc in r.broker_configs("1")}
    assert (by_name["num.partitions"].value, by_name["num.partitions"].source) == (
        "3", ConfigSource.STATIC_BROKER_CONFIG)
    assert ConfigResolver(BrokerConfig(), md).broker_value("num.partitions") == "1"


def test_validation_messages_are_kafkas():
    from snakka.config import BROKER_CONFIGS

    cases = {("log.retention.ms", "abc"): "Not a number of type LONG",
             ("num.partitions", "x"): "Not a number of type INT",
             ("num.partitions", "0"): "Value must be at least 1",
             ("log.cleaner.min.cleanable.ratio", "2.0"): "Value must be no more than 1",
             ("log.cleaner.min.cleanable.ratio", "x"): "Not a number of type DOUBLE"}
    for (name, value), reason in cases.items():
        with pytest.raises(ConfigError) as e:
            BROKER_CONFIGS[name].value(value)
        assert str(e.value) == f"Invalid value {value} for configuration {name}: {reason}"


def test_dynamic_broker_config_sets_are_consistent():
    from snakka.config import (
        BROKER_CONFIGS,
        DYNAMIC_BROKER_CONFIGS,
        KAFKA_DYNAMIC_BROKER_CONFIGS,
        UNAPPLIED_DYNAMIC_BROKER_CONFIGS,
    )

    assert UNAPPLIED_DYNAMIC_BROKER_CONFIGS <= KAFKA_DYNAMIC_BROKER_CONFIGS
    assert DYNAMIC_BROKER_CONFIGS <= KAFKA_DYNAMIC_BROKER_CONFIGS
    # Static in Kafka 4.0, though older snakka let them change.
    assert not {"num.partitions", "auto.create.topics.enable", "fetch.max.bytes"} & (
        KAFKA_DYNAMIC_BROKER_CONFIGS)
    # Applied at run time (each has an integration test with a real client).
    assert {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
            "log.cleaner.backoff.ms", "log.cleaner.io.max.bytes.per.second",
            "remote.fetch.max.wait.ms", "remote.list.offsets.request.timeout.ms"} <= (
        DYNAMIC_BROKER_CONFIGS)
    # Every Kafka-dynamic name snakka knows but cannot apply is refused, not stored.
    assert all(n in UNAPPLIED_DYNAMIC_BROKER_CONFIGS or n in DYNAMIC_BROKER_CONFIGS
               for n in KAFKA_DYNAMIC_BROKER_CONFIGS if n in BROKER_CONFIGS)
