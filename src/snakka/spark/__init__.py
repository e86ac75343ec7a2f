"""snakka's PySpark data source: read and write Kafka topics from Spark 4 in pure Python.

One-liner setup (needs the ``spark`` extra: ``pip install 'snakka[spark]'``)::

    import snakka.spark; snakka.spark.register(spark)

    df = (spark.read.format("snakka")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events").load())

The source has the schema and option names of Spark's Kafka connector, so moving a job
between the two means changing only the format name; see docs/spark.md. It speaks only the
Kafka protocol, so it works against any Kafka-compatible cluster, not only snakka.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMAT_NAME", "SnakkaDataSource", "register"]

FORMAT_NAME = "snakka"


def register(spark: Any) -> None:
    """Register the ``snakka`` format with a SparkSession (idempotent)."""
    from .source import SnakkaDataSource

    spark.dataSource.register(SnakkaDataSource)


def __getattr__(name: str) -> Any:
    # Importing snakka.spark must not import pyspark (the extra is optional).
    if name == "SnakkaDataSource":
        from .source import SnakkaDataSource

        return SnakkaDataSource
    raise AttributeError(name)
