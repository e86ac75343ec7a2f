"""The SparkSession and output directory of the reference pipeline, shared by its CLI verbs
(``snakka pipeline demo|stream|check``) and the benchmark.

What this module owns
    Building the SparkSession the pipeline runs on (:func:`build_spark`: any master URL, the
    Python workers pointed at this interpreter), clearing the output directory without touching
    anything the pipeline did not write (:func:`prepare_output_dir`), and reading Spark's
    trigger interval strings (:func:`interval_seconds`). It speaks to Spark only; the one-command
    demo with its embedded broker is an entry point, :mod:`snakka.demo`.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
DEFAULT_OUTPUT_DIR = "pipeline-output"
# Few shuffle partitions: each is a state-store instance per micro-batch; Spark's default of
# 200 costs seconds per batch on a small machine for no gain at this data size.
DEFAULT_SHUFFLE_PARTITIONS = 4
OUR_OUTPUT_ENTRIES = {"checkpoint", "aggregates"}


def build_spark(master: str = DEFAULT_MASTER, *, app_name: str = "snakka-pipeline",
                shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS) -> SparkSession:
    """A SparkSession for the pipeline: ``master`` is any Spark master URL."""
    # Python workers (the data source's readers, UDFs) must run this interpreter, where snakka
    # and pyarrow are installed, unless the user chose one (on a cluster, they must).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName(app_name)
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def prepare_output_dir(path: str) -> None:
    """Start from an empty output directory; refuse to delete anything we did not write."""
    if not os.path.exists(path):
        return
    entries = set(os.listdir(path))
    if entries - OUR_OUTPUT_ENTRIES:
        raise RuntimeError(f"output directory {path!r} holds files the pipeline did not write "
                           f"({', '.join(sorted(entries - OUR_OUTPUT_ENTRIES))}); choose another "
                           "--output-dir")
    shutil.rmtree(path)


def interval_seconds(interval: str) -> float:
    """A Spark interval string as the processing-time trigger takes it ("1 second",
    "500 milliseconds", "2 minutes") -> seconds; unknown forms count as 1 s."""
    units = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1.0, "sec": 1.0,
             "second": 1.0, "seconds": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
             "minutes": 60.0}
    parts = interval.strip().lower().removeprefix("interval ").split()
    try:
        if len(parts) == 2 and parts[1] in units:
            return float(parts[0]) * units[parts[1]]
        if len(parts) == 1:
            return float(parts[0]) / 1000  # Spark reads a bare number as milliseconds
    except ValueError:
        pass
    return 1.0
