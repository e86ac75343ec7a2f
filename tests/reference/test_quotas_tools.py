"""``kafka-configs.sh`` (the reference Kafka 4.0 tool) manages client quotas on snakka:
``--entity-type clients|users|ips``, ``--entity-default``, ``--alter --add-config`` /
``--delete-config`` and ``--describe`` (which for users also sends
DescribeUserScramCredentials). Skipped, with the reason, where the reference distribution or
java is absent (tests/reference/conftest.py)."""

from __future__ import annotations

import uuid

from .test_java_tools import tool

RUN = uuid.uuid4().hex[:6]


def _configs(bootstrap: str, *args: str) -> str:
    return tool("kafka-configs.sh", "--bootstrap-server", bootstrap, *args)


def test_client_quotas_with_kafka_configs(snakka_beside_reference):
    bs = snakka_beside_reference.bootstrap_servers
    client = f"limited-{RUN}"
    out = _configs(bs, "--alter", "--add-config", "producer_byte_rate=1048576,"
                   "consumer_byte_rate=2097152", "--entity-type", "clients",
                   "--entity-name", client)
    assert f"Completed updating config for client {client}." in out, out
    out = _configs(bs, "--describe", "--entity-type", "clients", "--entity-name", client)
    assert f"Quota configs for client-id '{client}' are " in out, out
    assert "producer_byte_rate=1048576.0" in out and "consumer_byte_rate=2097152.0" in out

    _configs(bs, "--alter", "--add-config", "request_percentage=200",
             "--entity-type", "users", "--entity-default")
    user = f"alice-{RUN}"
    _configs(bs, "--alter", "--add-config", "controller_mutation_rate=10",
             "--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
             "--entity-default")
    out = _configs(bs, "--describe", "--entity-type", "users", "--entity-default")
    assert "Quota configs for the default user-principal are request_percentage=200.0" in out, out
    bob = f"bob-{RUN}"
    _configs(bs, "--alter", "--add-config", "producer_byte_rate=1000", "--entity-type", "users",
             "--entity-name", bob)
    # no name: every named user (strict: user-only entities), and their SCRAM credentials
    out = _configs(bs, "--describe", "--entity-type", "users")
    assert f"Quota configs for user-principal '{bob}' are producer_byte_rate=1000.0" in out, out
    out = _configs(bs, "--describe", "--entity-type", "users", "--entity-name", user,
                   "--entity-type", "clients", "--entity-default")
    assert "controller_mutation_rate=10.0" in out, out

    _configs(bs, "--alter", "--add-config", "connection_creation_rate=50",
             "--entity-type", "ips", "--entity-name", "10.1.2.3")
    out = _configs(bs, "--describe", "--entity-type", "ips", "--entity-name", "10.1.2.3")
    assert "connection_creation_rate=50.0" in out, out

    _configs(bs, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "clients",
             "--entity-name", client)
    out = _configs(bs, "--describe", "--entity-type", "clients", "--entity-name", client)
    assert "producer_byte_rate" not in out and "consumer_byte_rate=2097152.0" in out, out
