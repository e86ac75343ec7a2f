"""Share-group configs: the group.share.* broker configs and the group-level configs (resource
type GROUP): names, validation against the broker's bounds, the fallback chain of
ConfigResolver.group_value, and durability through the metadata log's replay."""

from __future__ import annotations

import pytest

from snakka.config import (
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    parse_iso_duration_ms,
    validate_group_configs,
)
from snakka.metadata.configs import ConfigResolver
from snakka.metadata.core import RESOURCE_GROUP, ClusterMetadata
from snakka.protocol.errors import ErrorCode, KafkaError


def defaults(key: str) -> str | None:
    return BROKER_CONFIGS[key].default


@pytest.mark.parametrize("name,default", [
    ("group.share.session.timeout.ms", "45000"),
    ("group.share.min.session.timeout.ms", "45000"),
    ("group.share.max.session.timeout.ms", "60000"),
    ("group.share.heartbeat.interval.ms", "5000"),
    ("group.share.min.heartbeat.interval.ms", "5000"),
    ("group.share.max.heartbeat.interval.ms", "15000"),
    ("group.share.max.size", "200"),
    ("group.share.assignors", "simple"),
    ("group.share.record.lock.duration.ms", "30000"),
    ("group.share.min.record.lock.duration.ms", "15000"),
    ("group.share.max.record.lock.duration.ms", "60000"),
    ("group.share.delivery.count.limit", "5"),
    ("group.share.min.delivery.count.limit", "2"),
    ("group.share.max.delivery.count.limit", "10"),
    ("group.share.partition.max.record.locks", "2000"),
    ("group.share.max.share.sessions", "2000"),
])
def test_broker_share_configs_have_kafka_defaults(name, default):
    assert BROKER_CONFIGS[name].default == default


@pytest.mark.parametrize("name,value", [
    ("group.share.delivery.count.limit", "1"),
    ("group.share.delivery.count.limit", "11"),
    ("group.share.record.lock.duration.ms", "999"),
    ("group.share.max.size", "1001"),
    ("group.share.assignors", "uniform"),
])
def test_broker_share_configs_are_validated(name, value):
    with pytest.raises(ConfigError, match=name):
        BrokerConfig({name: value})


def test_group_config_names_and_defaults():
    assert set(GROUP_CONFIGS) == {
        "share.session.timeout.ms", "share.heartbeat.interval.ms",
        "share.record.lock.duration.ms", "share.delivery.count.limit",
        "share.auto.offset.reset",
        "share.isolation.level", "share.renew.acknowledge.enable"}
    assert GROUP_CONFIGS["share.auto.offset.reset"].default == "latest"
    assert GROUP_CONFIGS["share.isolation.level"].default == "read_uncommitted"


@pytest.mark.parametrize("changes,match", [
    ({"no.such.config": "1"}, "Unknown group config name"),
    ({"consumer.session.timeout.ms": "50000"}, "not supported by snakka"),
    ({"share.record.lock.duration.ms": "14999"}, "range 15000 to 60000"),
    ({"share.record.lock.duration.ms": "60001"}, "range 15000 to 60000"),
    ({"share.delivery.count.limit": "11"}, "range 2 to 10"),
    ({"share.delivery.count.limit": "x"}, "Not a number"),
    ({"share.session.timeout.ms": "44999"}, "range 45000 to 60000"),
    ({"share.heartbeat.interval.ms": "15001"}, "range 5000 to 15000"),
    # Kafka 4.2 has no group-level record-lock cap (4.3 adds one): unknown, as Kafka answers.
    ({"share.partition.max.record.locks": "200"}, "Unknown group config name"),
    ({"share.isolation.level": "read_whatever"}, "read_committed"),
    ({"share.auto.offset.reset": "none"}, "expected latest, earliest"),
    ({"share.auto.offset.reset": "by_duration:-PT1H"}, "Negative duration"),
    ({"share.auto.offset.reset": "by_duration:1 hour"}, "ISO-8601"),
    ({"share.renew.acknowledge.enable": "maybe"}, "true or false"),
])
def test_invalid_group_configs(changes, match):
    with pytest.raises(ConfigError, match=match):
        validate_group_configs(changes, defaults, {})


def test_valid_group_configs_and_bounds_follow_the_broker():
    validate_group_configs({"share.record.lock.duration.ms": "15000",
                            "share.delivery.count.limit": "10",
                            "share.auto.offset.reset": "by_duration:P1DT2H",
                            "share.isolation.level": "read_committed",
                            "share.session.timeout.ms": None}, defaults, {})
    lower = {"group.share.min.record.lock.duration.ms": "1000"}
    validate_group_configs({"share.record.lock.duration.ms": "1000"},
                           lambda k: lower.get(k) or defaults(k), {})


def test_session_timeout_must_exceed_heartbeat_interval():
    wide = {"group.share.max.heartbeat.interval.ms": "60000"}

    def bv(k):
        return wide.get(k) or defaults(k)

    with pytest.raises(ConfigError, match="must be greater than share.heartbeat.interval.ms"):
        validate_group_configs({"share.heartbeat.interval.ms": "45000"}, bv, {})
    # The check sees the group's existing overrides too.
    with pytest.raises(ConfigError, match="must be greater"):
        validate_group_configs({"share.heartbeat.interval.ms": "50000"}, bv,
                               {"share.session.timeout.ms": "50000"})
    validate_group_configs({"share.heartbeat.interval.ms": "40000"}, bv,
                           {"share.session.timeout.ms": "50000"})


def test_iso_durations():
    assert parse_iso_duration_ms("PT1H") == 3_600_000
    assert parse_iso_duration_ms("P1D") == 86_400_000
    assert parse_iso_duration_ms("PT0.5S") == 500
    assert parse_iso_duration_ms("p2dt3m") == 2 * 86_400_000 + 180_000
    for bad in ("P", "PT", "1H", "P1H", "PT1D", ""):
        with pytest.raises(ValueError):
            parse_iso_duration_ms(bad)


def test_group_value_fallback_chain_and_replay():
    md = ClusterMetadata()
    r = ConfigResolver(BrokerConfig({"group.share.delivery.count.limit": "4"}), md)
    assert r.group_value("g", "share.delivery.count.limit") == "4"            # static broker
    assert r.group_value("g", "share.record.lock.duration.ms") == "30000"     # built-in
    assert r.group_value("g", "share.auto.offset.reset") == "latest"
    log: list[dict] = []
    log += md.alter_configs(RESOURCE_GROUP, "g", {"share.delivery.count.limit": "7",
                                                  "share.auto.offset.reset": "earliest"},
                            broker_value=r.broker_value)
    assert r.group_value("g", "share.delivery.count.limit") == "7"
    assert r.group_value("other", "share.delivery.count.limit") == "4"
    rc = r.group_config("g", "share.delivery.count.limit")
    assert rc.source == ConfigSource.GROUP_CONFIG
    assert [s for _n, _v, s in rc.synonyms] == [ConfigSource.GROUP_CONFIG,
                                               ConfigSource.STATIC_BROKER_CONFIG,
                                               ConfigSource.DEFAULT_CONFIG]
    # Legacy AlterConfigs replaces the whole set: the reset override is dropped.
    log += md.alter_configs(RESOURCE_GROUP, "g", {"share.delivery.count.limit": "6"},
                            replace=True, broker_value=r.broker_value)
    # Replaying the metadata log rebuilds the same state.
    md2 = ClusterMetadata()
    for rec in log:
        md2.apply(rec)
    r2 = ConfigResolver(BrokerConfig({"group.share.delivery.count.limit": "4"}), md2)
    assert r2.group_value("g", "share.delivery.count.limit") == "6"
    assert r2.group_value("g", "share.auto.offset.reset") == "latest"
    assert md2.current_overrides(RESOURCE_GROUP, "g") == {"share.delivery.count.limit": "6"}
    # Deleting the last override forgets the group's entry.
    md2.alter_configs(RESOURCE_GROUP, "g", {"share.delivery.count.limit": None})
    assert (RESOURCE_GROUP, "g") not in md2.dynamic_configs


def test_metadata_rejects_bad_group_changes_with_invalid_config():
    md = ClusterMetadata()
    with pytest.raises(KafkaError) as e:
        md.alter_configs(RESOURCE_GROUP, "g", {"share.delivery.count.limit": "1"})
    assert e.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaError) as e:
        md.alter_configs(RESOURCE_GROUP, "", {"share.delivery.count.limit": "3"})
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert md.current_overrides(RESOURCE_GROUP, "g") == {}


@pytest.mark.parametrize("props,match", [
    ({"group.share.session.timeout.ms": "3000"}, "group.share.min.session.timeout.ms"),
    ({"group.share.record.lock.duration.ms": "70000"}, "group.share.max.record.lock.duration"),
    ({"group.share.delivery.count.limit": "3", "group.share.min.delivery.count.limit": "4"},
     "group.share.delivery.count.limit"),
    ({"group.share.heartbeat.interval.ms": "15000", "group.share.min.session.timeout.ms": "10000",
      "group.share.session.timeout.ms": "10000"}, "must be less than"),
    ({"group.share.max.share.sessions": "100"}, "group.share.max.size"),
])
def test_broker_share_bounds_are_checked_at_start(props, match):
    with pytest.raises(ConfigError, match=match):
        BrokerConfig(props)


def test_broker_share_bounds_allow_consistent_overrides():
    BrokerConfig({"group.share.min.session.timeout.ms": "2000",
                  "group.share.session.timeout.ms": "3000",
                  "group.share.min.heartbeat.interval.ms": "200",
                  "group.share.heartbeat.interval.ms": "500"})


def test_group_value_is_canonical():
    md = ClusterMetadata()
    r = ConfigResolver(BrokerConfig({}), md)
    md.alter_configs(RESOURCE_GROUP, "g", {"share.auto.offset.reset": " EARLIEST",
                                           "share.delivery.count.limit": "3 ",
                                           "share.renew.acknowledge.enable": "FALSE"})
    assert r.group_value("g", "share.auto.offset.reset") == "earliest"
    assert r.group_value("g", "share.delivery.count.limit") == "3"
    assert r.group_value("g", "share.renew.acknowledge.enable") == "false"
    md.alter_configs(RESOURCE_GROUP, "g", {"share.auto.offset.reset": "By_Duration:PT10M"})
    assert r.group_value("g", "share.auto.offset.reset") == "by_duration:PT10M"
    # DescribeConfigs reports what was set, as Kafka does.
    assert r.group_config("g", "share.auto.offset.reset").value == "By_Duration:PT10M"
