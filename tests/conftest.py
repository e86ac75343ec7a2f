"""Session-wide fixtures: the one reference Apache Kafka broker a test run shares.

``reference_kafka`` starts a Kafka 4.0 broker (tests/reference_kafka.py) the first time a test
asks for it and stops it when the session ends, so a run pays the 7-25 s start-up once, and a
run that selects no such test pays nothing. Where the reference distribution or ``java`` is
missing (a user's clone), every test using it is skipped with the one reason skip_reason() gives.
Tests that use it must not depend on the broker being empty: name topics and groups uniquely.

``no_broker_errors`` fails a test during which an in-process broker logged an ERROR (or an
exception) behind the clients' backs: a request the broker fails internally can still look fine
to a client. Test directories with in-process brokers make it autouse.

Parallel runs (pytest-xdist, ``make test`` runs ``-n 4 --dist loadgroup``): most tests are
spread one by one over the workers; tests that share something expensive per process are kept
on one worker by an ``xdist_group`` mark added here: every test using ``reference_kafka`` (one
JVM broker, ~1 GB) and every Spark test (one SparkSession; two at once on 2 cores starve each
other's Python workers).

``SNAKKA_REFERENCE_KAFKA=host:port`` points the fixture at a reference broker you already run
(``kafka-ref.sh start``), which saves its start-up on every run while you iterate.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference_kafka as _ref  # noqa: E402  (tests/ is not a package)

_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if "reference_kafka" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("reference-kafka"))
        elif (_TESTS / "spark") in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def reference_kafka() -> Iterator[_ref.ReferenceKafka | _ref.RunningKafka]:
    reason = _ref.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    running = os.environ.get("SNAKKA_REFERENCE_KAFKA")
    if running:
        yield _ref.RunningKafka(running)
        return
    broker = _ref.ReferenceKafka()
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def no_broker_errors(caplog):
    yield
    bad = [r for r in caplog.get_records("call")
           if r.name.startswith("snakka") and (r.levelno >= logging.ERROR or r.exc_info)]
    if bad:
        lines = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in bad[:10])
        pytest.fail(f"the broker logged {len(bad)} error(s) during the test:\n{lines}",
                    pytrace=False)
