"""Fixtures for the Spark data source tests (shared with the pipeline tests).

* ``spark``: ONE local SparkSession for the whole test session (starting Spark costs
  seconds), ``local[2]``, no UI, 2 shuffle partitions, the ``snakka`` format registered.
* ``spark_broker``: one embedded snakka broker (in-process thread) for the session; tests
  keep apart by using their own topics (``new_topic``).
* ``new_topic(partitions=..., config=...)``: creates a uniquely named topic and returns its
  name.

``SPARK_LOCAL_IP=127.0.0.1`` keeps Spark on the loopback interface. pyspark is an optional
extra: without it the whole directory is skipped with the reason.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Iterator

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", __import__("sys").executable)

pyspark = pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")

from snakka.testing import EmbeddedBroker  # noqa: E402

_topic_ids = itertools.count()


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    import snakka.spark

    session = (SparkSession.builder.master("local[2]")
               .appName("snakka-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    snakka.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def new_topic(spark_broker: EmbeddedBroker, request) -> Callable[..., str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap_servers})

    def make(partitions: int = 1, config: dict[str, str] | None = None,
             name: str | None = None) -> str:
        base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
        topic = name or f"{base}-{next(_topic_ids)}"
        fut = admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic]
        fut.result(30)
        return topic

    return make


@pytest.fixture(autouse=True)
def no_broker_errors(caplog):
    """An in-process broker must not log errors behind the clients' backs (as in
    tests/integration)."""
    yield
    bad = [r for r in caplog.get_records("call")
           if r.name.startswith("snakka") and not r.name.startswith("snakka.spark")
           and (r.levelno >= logging.ERROR or r.exc_info)]
    if bad:
        lines = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in bad[:10])
        pytest.fail(f"the broker logged {len(bad)} error(s) during the test:\n{lines}",
                    pytrace=False)
