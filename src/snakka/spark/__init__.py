"""snakka's PySpark data source: read and write Kafka topics from Spark 4 in pure Python.

One-liner setup (needs the ``spark`` extra: ``pip install 'snakka[spark]'``)::

    import snakka.spark; snakka.spark.register(spark)

    df = (spark.read.format("snakka")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events").load())

The source has the schema and option names of Spark's Kafka connector, so moving a job
between the two means changing only the format name; see docs/spark.md. It speaks only the
Kafka protocol, so it works against any Kafka-compatible cluster, not only snakka.

The source's readers and writers run in Spark's Python workers, started with the SparkContext's
``pythonExec`` (``PYSPARK_PYTHON``, else ``python3`` from PATH), captured when the source is
registered. A plain ``python3`` rarely has snakka and pyarrow, so :func:`register` points a
local session's workers at this interpreter when the user chose none, and otherwise checks that
the chosen one can import what the workers need: a clear error at once, instead of a
``ModuleNotFoundError`` deep in a task's traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from .options import FORMAT_NAME

__all__ = ["FORMAT_NAME", "SnakkaDataSource", "SparkSetupError", "register"]

# What a Python worker imports to run the source (snakka.spark.source and its decoder).
WORKER_MODULES = ("snakka.spark.source", "pyarrow")
_WORKER_CHECK_TIMEOUT_S = 60


class SparkSetupError(RuntimeError):
    """The session's Python workers cannot run the snakka source (message says how to fix)."""


def register(spark: Any) -> None:
    """Register the ``snakka`` format with a SparkSession (idempotent).

    On a local master without ``PYSPARK_PYTHON``, the workers are pointed at this interpreter
    (``sys.executable``), which has snakka. With a user-chosen interpreter on a local master,
    that interpreter is checked (:class:`SparkSetupError` if it cannot import the source); on a
    cluster the executors' Python must have snakka installed (see docs/spark.md)."""
    from .source import SnakkaDataSource

    sc = spark.sparkContext
    if sc.master.startswith("local"):
        if not os.environ.get("PYSPARK_PYTHON"):
            sc.pythonExec = sys.executable  # read by the registration below
        elif sc.pythonExec != sys.executable:
            _check_worker_python(sc.pythonExec)
    spark.dataSource.register(SnakkaDataSource)


def _check_worker_python(python: str) -> None:
    code = "import " + ", ".join(WORKER_MODULES)
    try:
        p = subprocess.run([python, "-c", code], capture_output=True, text=True,
                           timeout=_WORKER_CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SparkSetupError(f"Spark's Python workers ({python}, from PYSPARK_PYTHON) "
                              f"cannot be run: {e}") from None
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        raise SparkSetupError(
            f"Spark's Python workers ({python}, from PYSPARK_PYTHON) cannot run the snakka source ({last}): install snakka[spark] there, or unset "
            f"PYSPARK_PYTHON to use {sys.executable}") from None


def __getattr__(name: str) -> Any:
    # Importing snakka.spark must not import pyspark (the extra is optional).
    if name == "SnakkaDataSource":
        from .source import SnakkaDataSource

        return SnakkaDataSource
    raise AttributeError(name)
