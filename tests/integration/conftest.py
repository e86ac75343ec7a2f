"""Integration-test guard: an in-process broker must not log errors behind the clients' backs.

A request the broker fails internally can still look fine to a client (it retries, or the
answer happens to be harmless); an ERROR (or an exception traceback) from a ``snakka`` logger
during a test fails that test. Subprocess brokers are checked by the tests that use them.
"""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def no_broker_errors(caplog):
    yield
    bad = [r for r in caplog.get_records("call")
           if r.name.startswith("snakka") and (r.levelno >= logging.ERROR or r.exc_info)]
    if bad:
        lines = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in bad[:10])
        pytest.fail(f"the broker logged {len(bad)} error(s) during the test:\n{lines}",
                    pytrace=False)
