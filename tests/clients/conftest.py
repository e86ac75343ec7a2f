"""Fixtures of the client-library tests (KafkaJS): the guard that fails a test whose in-process
broker logged an ERROR behind the client's back (as in tests/integration)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _guard_broker_errors(no_broker_errors):
    yield
