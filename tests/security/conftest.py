"""Integration-test guard: an in-process broker must not log errors behind the clients' backs.

A request the broker fails internally can still look fine to a client (it retries, or the
answer happens to be harmless); an ERROR (or an exception traceback) from a ``snakka`` logger
during a test fails that test (the shared ``no_broker_errors`` fixture of tests/conftest.py, made
autouse here). Subprocess brokers are checked by the tests that use them.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _guard_broker_errors(no_broker_errors):
    yield
