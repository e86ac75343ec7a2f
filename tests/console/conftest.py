"""Fixtures of the web console's tests: a broker with the console on, and its HTTP client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from console.support import Http
from snakka.testing import EmbeddedBroker


@pytest.fixture
def console_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={"console.port": "0", "num.partitions": "3"}) as b:
        yield b


@pytest.fixture
def http(console_broker: EmbeddedBroker) -> Http:
    return Http(console_broker.console_url)
