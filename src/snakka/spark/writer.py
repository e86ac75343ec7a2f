"""Batch and streaming writers of the ``snakka`` data source (Spark's Kafka sink semantics).

What this module owns
    Checking a DataFrame's columns against the Kafka sink's contract on the driver
    (:func:`check_write_schema`) and, in executors, turning Arrow batches of rows into
    Kafka v2 record batches built by snakka's own builder (:func:`snakka.records.build_batch`)
    and producing them to the partition leaders.

Columns (as Spark's Kafka sink)
    ``value`` (required, binary or string), ``key`` (optional, binary or string),
    ``topic`` (string; required unless the ``topic`` option is set, which then wins),
    ``partition`` (optional int; otherwise the key's murmur2 hash as the Java producer does,
    or a sticky partition for records without a key), ``headers`` (optional
    array<struct<key string, value binary>>). Other columns are ignored. Records get the
    producing time as their CreateTime, like the JVM sink.

Delivery
    At-least-once, like Spark's Kafka sink: each write task is one idempotent producer
    (InitProducerId; per-partition sequence numbers), so a batch retried after a lost
    response or a reconnect is written once; a task that Spark re-runs as a whole writes its
    records again. Batches are sent one at a time per task (acks=all by default).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from snakka.protocol.errors import ErrorCode
from snakka.records import Record, build_batch, increment_sequence
from snakka.util.murmur2 import murmur2_partition

from .client import SnakkaSparkError, SparkKafkaClient, error_name, is_retriable
from .options import SnakkaSparkOptionError, WriteSettings

log = logging.getLogger("snakka.spark")

RETRY_BACKOFF_S = 0.2
# Records per produced batch at most, whatever batch.size says (bounds memory per batch).
MAX_RECORDS_PER_BATCH = 100_000
_BYTES_OVERHEAD_PER_RECORD = 16  # varints and attributes, for the batch.size estimate


def check_write_schema(schema: StructType, settings: WriteSettings) -> None:
    """Spark's Kafka sink rules for the DataFrame being written; raises a clear error."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise SnakkaSparkOptionError(
            "the DataFrame written to snakka needs a 'value' column (binary or string)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (BinaryType, StringType)):
            raise SnakkaSparkOptionError(
                f"column '{name}' must be binary or string, not {fields[name].simpleString()}")
    if "topic" in fields:
        if not isinstance(fields["topic"], StringType):
            raise SnakkaSparkOptionError(
                f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    elif settings.topic is None:
        raise SnakkaSparkOptionError(
            "no topic to write to: set the 'topic' option or add a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise SnakkaSparkOptionError(
            f"column 'partition' must be an int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        t = fields["headers"]
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [f.name for f in t.elementType.fields] == ["key", "value"]
              and isinstance(t.elementType["key"].dataType, StringType)
              and isinstance(t.elementType["value"].dataType, BinaryType))
        if not ok:
            raise SnakkaSparkOptionError(
                "column 'headers' must be array<struct<key:string,value:binary>>, not "
                f"{t.simpleString()}")


@dataclass
class SnakkaCommitMessage(WriterCommitMessage):
    records: int
    batches: int


def _bytes(v: object) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    # check_write_schema admits only binary and string columns
    raise TypeError(f"a {type(v).__name__} cannot be written as Kafka bytes")


class _PartitionProducer:
    """Per-task producer: batching per partition, idempotent sequences, bounded retries."""

    def __init__(self, settings: WriteSettings) -> None:
        self.s = settings
        self.client = SparkKafkaClient(settings.client)
        self.pid, self.epoch = (-1, -1)
        if settings.idempotent:
            self.pid, self.epoch = self.client.init_producer_id()
        self.sequences: dict[tuple[str, int], int] = {}
        self.pending: dict[tuple[str, int], list[Record]] = {}
        self.pending_bytes: dict[tuple[str, int], int] = {}
        self.n_partitions: dict[str, int] = {}
        self.sticky: dict[str, int] = {}
        self.records = 0
        self.batches = 0

    def partitions_of(self, topic: str) -> int:
        n = self.n_partitions.get(topic)
        if n is None:
            meta = self.client.metadata([topic])
            parts = meta.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if isinstance(parts, int):
                raise SnakkaSparkError(f"cannot write to topic '{topic}': {error_name(parts)}"
                                       + (" (the topic does not exist)"
                                          if parts == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                                          else ""))
            n = self.n_partitions[topic] = len(parts)
        return n

    def add(self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
            headers: list, now_ms: int) -> None:
        n = self.partitions_of(topic)
        if partition is None:
            if key is not None:
                partition = murmur2_partition(key, n)
            else:
                partition = self.sticky.setdefault(topic, random.randrange(n))
        elif not 0 <= partition < n:
            raise SnakkaSparkError(
                f"partition {partition} of topic '{topic}' does not exist ({n} partitions)")
        tp = (topic, partition)
        batch = self.pending.setdefault(tp, [])
        batch.append(Record(timestamp=now_ms, key=key, value=value, headers=headers))
        size = self.pending_bytes.get(tp, 0) + _BYTES_OVERHEAD_PER_RECORD \
            + len(key or b"") + len(value or b"")
        if headers:
            size += sum(len(k) + len(v or b"") for k, v in headers)
        self.pending_bytes[tp] = size
        if size >= self.s.batch_size or len(batch) >= MAX_RECORDS_PER_BATCH:
            self.flush_partition(tp)

    def flush_partition(self, tp: tuple[str, int]) -> None:
        records = self.pending.pop(tp, None)
        self.pending_bytes.pop(tp, None)
        if not records:
            return
        if self.sticky.get(tp[0]) == tp[1]:  # sticky partitioner: next batch elsewhere
            n = self.n_partitions[tp[0]]
            self.sticky[tp[0]] = (tp[1] + 1 + random.randrange(max(1, n - 1))) % n if n > 1 else 0
        seq = self.sequences.get(tp, 0) if self.pid >= 0 else -1
        batch = build_batch(records, compression=self.s.compression, producer_id=self.pid,
                            producer_epoch=self.epoch, base_sequence=seq)
        if len(batch) > self.s.max_request_size and len(records) > 1:
            half = len(records) // 2  # too big for one request: send it as two batches
            self.pending[tp] = records[:half]
            self.flush_partition(tp)
            self.pending[tp] = records[half:]
            self.flush_partition(tp)
            return
        self._send(tp, batch, len(records))
        if self.pid >= 0:
            self.sequences[tp] = increment_sequence(seq, len(records))  # wraps at INT32_MAX
        self.records += len(records)
        self.batches += 1

    def _send(self, tp: tuple[str, int], batch: bytes, count: int) -> None:
        attempt = 0
        while True:
            try:
                code, _base = self.client.produce(tp, batch, acks=self.s.acks,
                                                  timeout_ms=self.s.client.request_timeout_ms)
            except SnakkaSparkError as e:
                # A lost connection may or may not have written the batch; with idempotence
                # the resend is deduplicated by the broker (same producer id and sequence).
                if attempt >= self.s.retries:
                    raise SnakkaSparkError(f"producing {count} records to {tp[0]}-{tp[1]} "
                                           f"failed after {attempt} retries: {e}") from None
                attempt += 1
                time.sleep(RETRY_BACKOFF_S * attempt)
                continue
            if code == 0 or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                return
            if is_retriable(code) and attempt < self.s.retries:
                attempt += 1
                time.sleep(RETRY_BACKOFF_S * attempt)
                continue
            raise SnakkaSparkError(
                f"producing {count} records to {tp[0]}-{tp[1]} failed: {error_name(code)}")

    def finish(self) -> SnakkaCommitMessage:
        for tp in list(self.pending):
            self.flush_partition(tp)
        return SnakkaCommitMessage(self.records, self.batches)

    def close(self) -> None:
        self.client.close()


def write_arrow(settings: WriteSettings, batches: Iterator[pa.RecordBatch]) -> SnakkaCommitMessage:
    """Produce every row of ``batches`` (runs in a Spark executor)."""
    producer = _PartitionProducer(settings)
    try:
        for rb in batches:
            n = rb.num_rows
            if n == 0:
                continue
            names = rb.schema.names
            col = {name: rb.column(i) for i, name in enumerate(names)}
            values = col["value"].to_pylist()
            keys = col["key"].to_pylist() if "key" in col else [None] * n
            if settings.topic is not None:
                topics = [settings.topic] * n
            else:
                topics = col["topic"].to_pylist()
            parts = col["partition"].to_pylist() if "partition" in col else [None] * n
            headers = col["headers"].to_pylist() if "headers" in col else [None] * n
            now = time.time_ns() // 1_000_000
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise SnakkaSparkError("a row has a null 'topic' and no 'topic' option is set")
                hs = headers[i]
                hdrs = [(h["key"], h["value"]) for h in hs] if hs else []
                if any(k is None for k, _ in hdrs):
                    raise SnakkaSparkError("a header has a null key (Kafka header keys are "
                                           "non-null strings)")
                producer.add(topic, parts[i], _bytes(keys[i]), _bytes(values[i]), hdrs, now)
        return producer.finish()
    finally:
        producer.close()


class SnakkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, settings: WriteSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SnakkaCommitMessage:
        return write_arrow(self.settings, iterator)

    def commit(self, messages: list) -> None:
        n = sum(m.records for m in messages if m is not None)
        log.info("snakka sink: wrote %d records", n)

    def abort(self, messages: list) -> None:
        n = sum(m.records for m in messages if m is not None)
        # Kafka has no rollback outside transactions: what finished tasks wrote stays.
        log.warning("snakka sink: write aborted; %d records of finished tasks remain in Kafka", n)


class SnakkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, settings: WriteSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SnakkaCommitMessage:
        return write_arrow(self.settings, iterator)

    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        return None

    def abort(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        n = sum(m.records for m in messages if m is not None)
        log.warning("snakka sink: micro-batch %d aborted; %d records of finished tasks remain "
                    "in Kafka", batchId, n)
