"""Configs that imply a feature snakka lacks are refused, never silently accepted (issue 9 item 7).

The process-level behaviour (one line, exit code, nothing served) is in
tests/integration/test_unsupported_features.py; these pin the rules themselves.
"""

from __future__ import annotations

import pytest

from snakka.config import BrokerConfig, ConfigError
from snakka.metadata.core import RESOURCE_BROKER, ClusterMetadata


@pytest.mark.parametrize("overrides, match", [
    ({"listeners": "CLIENT://:9092"}, "No security protocol defined for listener CLIENT"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "NAME:PROTOCOL"),
    ({"log.dirs": "/a,/b"}, "JBOD"),
    ({"authorizer.class.name": "x.Authorizer"}, "Unknown authorizer"),
])
def test_static_configs_for_absent_features_stop_the_broker(overrides, match):
    with pytest.raises(ConfigError, match=match):
        BrokerConfig(overrides)


@pytest.mark.parametrize("overrides", [
    {},
    {"listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
     "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"},
    {"listeners": "plaintext://:9092"},
    {"log.cleanup.policy": "delete", "remote.log.storage.system.enable": "false",
     "authorizer.class.name": ""},
    {"remote.log.storage.system.enable": "true"},  # tiered storage exists (issue 12)
    {"log.cleanup.policy": "compact"},  # and compaction (issue 13)
    {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
     "super.users": "User:admin;User:ANONYMOUS"},  # and ACLs (issue 14)
    {"log.cleanup.policy": "delete,compact"},
])
def test_plaintext_and_available_features_still_start(overrides):
    BrokerConfig(overrides)


def test_dynamic_broker_compaction_policy_is_accepted():
    """Compaction exists (issue 13): log.cleanup.policy=compact is a valid dynamic default."""
    md = ClusterMetadata()
    for entity in ("", "1"):
        md.alter_configs(RESOURCE_BROKER, entity, {"log.cleanup.policy": "compact"})
    md.alter_configs(RESOURCE_BROKER, "", {"log.cleanup.policy": "delete"})
