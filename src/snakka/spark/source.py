"""The ``snakka`` Spark data source: Spark's Kafka connector schema and options, in Python.

``SnakkaDataSource`` is what ``spark.dataSource.register`` receives. It only validates
options and hands out readers and writers (see :mod:`.reader`, :mod:`.writer`); every
check happens in ``reader()`` / ``streamReader()`` / ``writer()`` / ``streamWriter()``,
which Spark calls while planning, so a bad option fails before any task runs.

Spark's Kafka source has a fixed schema; so does this one: a user-specified schema that
differs is refused (as the JVM connector does).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .arrow_decode import kafka_schema
from .options import (
    FORMAT_NAME,
    SnakkaSparkOptionError,
    include_headers,
    parse_read_options,
    parse_write_options,
)
from .reader import SnakkaBatchReader, SnakkaStreamReader
from .writer import SnakkaBatchWriter, SnakkaStreamWriter, check_write_schema


def _check_schema(schema: StructType, options) -> None:
    expected = kafka_schema(include_headers(options))
    if schema != expected:
        raise SnakkaSparkOptionError(
            "the snakka source has a fixed schema (Spark's Kafka source schema) and cannot "
            f"be read with a user-specified one: expected {expected.simpleString()}, got "
            f"{schema.simpleString()}")


class SnakkaDataSource(DataSource):
    """Read and write Kafka topics (any Kafka-compatible cluster) from Spark."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return kafka_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        settings = parse_read_options(self.options, streaming=False)
        _check_schema(schema, self.options)
        return SnakkaBatchReader(settings)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        settings = parse_read_options(self.options, streaming=True)
        _check_schema(schema, self.options)
        return SnakkaStreamReader(settings)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise SnakkaSparkOptionError(
                "save mode 'overwrite' is not possible for Kafka topics (records cannot be "
                "replaced); use mode 'append'")
        settings = parse_write_options(self.options)
        check_write_schema(schema, settings)
        return SnakkaBatchWriter(settings)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        settings = parse_write_options(self.options)
        check_write_schema(schema, settings)
        return SnakkaStreamWriter(settings)
