"""Fixtures for tests against the reference Kafka: one snakka broker beside it, common versions.

The snakka broker runs in-process (thread mode) with the same non-default settings the
reference broker has (tests/reference_kafka.py's kafka-ref.sh: one partition per topic, no
initial rebalance delay), so both answer the same requests under the same configuration.
An in-process broker must not log errors behind the clients' backs: any ERROR from a snakka
logger fails the test that caused it (as in tests/integration).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from reference_kafka import reference_dir, skip_reason

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.testing.embedded import EmbeddedBroker

from .differential import common_versions

# kafka-ref.sh's non-default broker settings, mirrored.
SNAKKA_CONFIG = {"num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="package")
def kafka_distribution() -> Path:
    """The reference Kafka distribution (its Java tools), or skip with the one reason."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    home = reference_dir()
    assert home is not None
    return home


@pytest.fixture(scope="package")
def snakka_beside_reference(kafka_distribution) -> Iterator[EmbeddedBroker]:
    """One snakka broker for the package's tests (only started when the reference is usable)."""
    with EmbeddedBroker(config=SNAKKA_CONFIG, host="127.0.0.1") as b:
        yield b


@pytest.fixture(scope="package")
def brokers(reference_kafka, snakka_beside_reference) -> tuple[str, str]:
    """(reference Kafka bootstrap, snakka bootstrap)."""
    return reference_kafka.bootstrap_servers, snakka_beside_reference.bootstrap_servers


async def _api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    host, port = parse_bootstrap(bootstrap)
    conn = await KafkaConnection(host, port).connect()
    try:
        return dict(conn.versions)
    finally:
        await conn.close()


@pytest.fixture(scope="package")
def api_versions(brokers) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int]]]:
    """Each broker's advertised ``{api_key: (min, max)}``: (kafka, snakka)."""
    return asyncio.run(_api_versions(brokers[0])), asyncio.run(_api_versions(brokers[1]))


@pytest.fixture(scope="package")
def versions(api_versions) -> dict[int, int]:
    """API key -> the highest version both brokers support."""
    return common_versions(*api_versions)


@pytest.fixture(autouse=True)
def _no_broker_errors(no_broker_errors):
    """Every test here is guarded (the fixture lives in tests/conftest.py)."""
