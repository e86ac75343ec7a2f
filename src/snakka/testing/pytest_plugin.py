"""pytest fixtures for testing against a real snakka broker (auto-registered plugin).

- ``snakka_broker``: a fresh in-process broker per test; ``.bootstrap_servers`` for clients.
- ``snakka_broker_factory``: ``factory(config={...}, mode="subprocess")`` makes more brokers;
  all are closed (and their temporary data removed) when the test ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from snakka.testing.embedded import EmbeddedBroker


@pytest.fixture
def snakka_broker_factory() -> Iterator:
    made: list[EmbeddedBroker] = []

    def factory(**kwargs) -> EmbeddedBroker:
        b = EmbeddedBroker(**kwargs).start()
        made.append(b)
        return b

    yield factory
    for b in made:
        b.close()


@pytest.fixture
def snakka_broker(snakka_broker_factory) -> EmbeddedBroker:
    return snakka_broker_factory()
