"""Kafka's tiered-storage rules for topic configs (LogConfig.validate, KIP-405/KIP-950), as
ClusterMetadata applies them at CreateTopics and AlterConfigs."""

from __future__ import annotations

import pytest

from snakka.metadata.core import RESOURCE_TOPIC, ClusterMetadata
from snakka.protocol.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.fast


def _md(enabled: bool = True) -> ClusterMetadata:
    md = ClusterMetadata()
    md.remote_storage_system_enabled = enabled
    return md


def _refused(fn, match: str) -> None:
    with pytest.raises(KafkaError, match=match) as e:
        fn()
    assert e.value.code == ErrorCode.INVALID_CONFIG


def test_remote_storage_needs_the_broker_setting():
    _refused(lambda: _md(False).check_create_topic("t", 1, 1, {"remote.storage.enable": "true"}),
             "Tiered Storage functionality is disabled")
    _md(True).check_create_topic("t", 1, 1, {"remote.storage.enable": "true"})
    _md(False).check_create_topic("t", 1, 1, {"remote.storage.enable": "false"})


@pytest.mark.parametrize("configs, match", [
    ({"local.retention.ms": "1000", "retention.ms": "999"}, "not be more than retention.ms"),
    ({"local.retention.bytes": "10", "retention.bytes": "5"}, "not be more than retention.bytes"),
    ({"local.retention.ms": "-1", "retention.ms": "1000"}, "must not be -1"),
])
def test_local_retention_within_total(configs, match):
    _refused(lambda: _md().check_create_topic(
        "t", 1, 1, {"remote.storage.enable": "true", **configs}), match)
    # without remote storage the local settings do not matter (Kafka validates them only then)
    _md().check_create_topic("u", 1, 1, configs)


def test_local_retention_within_total_accepts_the_usual_settings():
    md = _md()
    md.check_create_topic("t", 1, 1, {"remote.storage.enable": "true",
                                      "local.retention.ms": "1000", "retention.ms": "-1",
                                      "local.retention.bytes": "-2"})


def test_turning_remote_storage_off_requires_deleting_remote_data():
    md = _md()
    md.apply(md.topic_record("t", 1, {"remote.storage.enable": "true"}))
    _refused(lambda: md.check_config_change(RESOURCE_TOPIC, "t", {"remote.storage.enable": "false"}),
             "invalid to disable remote storage")
    md.check_config_change(RESOURCE_TOPIC, "t", {"remote.storage.enable": "false",
                                                 "remote.log.copy.disable": "true",
                                                 "remote.log.delete.on.disable": "true"})
    # read-only remote data: copying off, remote storage still on
    md.check_config_change(RESOURCE_TOPIC, "t", {"remote.log.copy.disable": "true"})
