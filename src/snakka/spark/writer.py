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
    At-least-once by default, like Spark's Kafka sink: each write task is one idempotent
    producer (InitProducerId; per-partition sequence numbers), so a batch retried after a lost
    response or a reconnect is written once; a task that Spark re-runs as a whole writes its
    records again. Batches are sent one at a time per task (acks=all by default).

Exactly once (option ``transactionalIdPrefix``)
    Named after Flink's ``transactionalIdPrefix`` (its KafkaSink's exactly-once mode) and
    Spark's own ``groupIdPrefix``: the user names the query, the sink derives one Kafka
    transactional id per write task. Spark's Kafka sink has no such mode; Kafka's producer
    config ``transactional.id`` is refused with a pointer here, since one id cannot serve
    several concurrent tasks. The design is a two-phase commit over Kafka transactions:

    1. Task ``P`` of micro-batch ``B`` of query ``Q`` (``P`` = its Spark partition id; ``B``
       and ``Q`` = Spark's ``streaming.sql.batchId`` and ``sql.streaming.queryId`` local
       properties, which Spark sets for the stream sink's tasks and for batch writes inside
       ``foreachBatch``; ``Q`` is the id in the checkpoint, the same across restarts and new
       with a new checkpoint) uses the transactional id ``T = <prefix>-<Q>-<P>``. At its first
       row it sends InitProducerId(T): the coordinator fences every older producer of ``T``
       (an earlier attempt of the task, a zombie of a crashed driver's run) and aborts the
       transaction one of them left open.
    2. It then reads, with OffsetFetch RequireStable, the offset that the *sink group* ``T``
       committed for the marker partition (partition 0 of the ``topic`` option, else of the
       first row's topic): the last batch id whose output of task ``P`` was committed. If it
       is ``>= B``, this is a replay of a batch that already reached Kafka (the driver died
       between the sink's commit and Spark's checkpoint commit): the task writes nothing.
    3. Otherwise it writes its rows in a transaction (AddPartitionsToTxn before a partition's
       first batch, transactional Produce), and, in the same transaction, commits offset ``B``
       for the marker partition in group ``T`` (AddOffsetsToTxn + TxnOffsetCommit). It does
       NOT end the transaction: it returns (``T``, producer id, epoch) in its commit message.
    4. The driver's ``commit(messages, batchId)`` ends every task's transaction with
       EndTxn(commit), using the tasks' producer ids and epochs (EndTxn is not tied to a
       connection or process). The records and the marker become visible together, per task.
       ``abort`` ends them with EndTxn(abort) (best effort; the coordinator's
       ``transaction.timeout.ms`` aborts whatever is left).

    Crashes: a driver that dies before step 4 leaves open transactions; the replay's tasks
    abort them (step 1) and write again. One that dies during step 4 leaves some tasks'
    transactions committed (their markers say ``B``: step 2 skips them) and others open
    (aborted and rewritten). One that dies after step 4 but before Spark's checkpoint commit
    replays a batch every task skips. A failed EndTxn(commit) (the transaction timed out, a
    zombie driver fenced) fails the batch, and the query's restart replays it the same way.
    So each record of the output is visible once to read_committed consumers, provided the
    query is deterministic (a replayed batch gives each task the same rows, which Spark's
    replay of the same offsets and state gives) and ``spark.speculation`` is off (a
    speculative copy of a task would fence the copy whose message Spark keeps). The query id
    in ``T`` keeps two queries (or a query restarted from a new checkpoint, whose batch ids
    start again at 0) from sharing markers, whatever their prefix. A batch write outside a
    stream has neither id (``T = <prefix>-<P>``): its tasks' transactions are committed by the
    driver (all-or-nothing per task) but a re-run of the job writes again. Each micro-batch must finish (write + commit) within
    ``kafka.transaction.timeout.ms`` (default 60000, capped by the broker's
    ``transaction.max.timeout.ms``). Read the output with ``isolation.level=read_committed``.
    The sink groups (named ``T``) are ordinary consumer groups holding only the marker
    offset; deleting them makes the next replay of the last batch write it again.
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

from .client import (
    SnakkaAuthenticationError,
    SnakkaSparkError,
    SparkKafkaClient,
    error_name,
    is_retriable,
)
from .options import SnakkaSparkOptionError, WriteSettings

# The TaskContext local property Spark sets to the micro-batch id for a stream sink's tasks
# and for jobs run inside foreachBatch (PySpark's foreach writer reads it too).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
# ...and the streaming query's id (StreamExecution.QUERY_ID_KEY), kept in the checkpoint.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
# Partition of the marker topic whose offset in the sink group is the last committed batch.
MARKER_PARTITION = 0

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
    # The exactly-once sink: the task's open transaction, which the driver ends.
    transactional_id: str | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    # This batch's output of the task was committed by an earlier run: nothing was written.
    already_committed: bool = False


@dataclass(frozen=True)
class TaskInfo:
    """What a write task needs to know about itself for the exactly-once sink."""

    partition_id: int
    batch_id: int | None  # None outside a micro-batch (a plain batch write)
    query_id: str | None = None

    def transactional_id(self, prefix: str) -> str:
        if self.query_id:
            return f"{prefix}-{self.query_id}-{self.partition_id}"
        return f"{prefix}-{self.partition_id}"


def current_task() -> TaskInfo:
    """The running Spark task's partition id and micro-batch id (see BATCH_ID_PROPERTY)."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise SnakkaSparkError("the transactional sink must run inside a Spark task")
    prop = tc.getLocalProperty(BATCH_ID_PROPERTY)
    return TaskInfo(tc.partitionId(), int(prop) if prop not in (None, "") else None,
                    tc.getLocalProperty(QUERY_ID_PROPERTY) or None)


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

    def __init__(self, settings: WriteSettings, task: TaskInfo | None = None) -> None:
        self.s = settings
        self.client = SparkKafkaClient(settings.client)
        self.pid, self.epoch = (-1, -1)
        self.transactional_id: str | None = None
        self.txn_partitions: set[tuple[str, int]] = set()
        self.marker: tuple[str, int] | None = None  # the sink group's marker partition
        self.task = task
        if settings.transactional_id_prefix is not None:
            assert task is not None
            self.transactional_id = task.transactional_id(settings.transactional_id_prefix)
        elif settings.idempotent:
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
                            producer_epoch=self.epoch, base_sequence=seq,
                            is_transactional=self.transactional_id is not None)
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

    # -- the exactly-once sink (see the module docstring) ----------------------------------
    def begin_transaction(self, marker_topic: str) -> bool:
        """Steps 1 and 2: fence older producers of this task's transactional id (aborting
        what they left open) and check the sink group's marker. False when this micro-batch's
        output of the task was committed before (nothing must be written)."""
        tid, task = self.transactional_id, self.task
        assert tid is not None and task is not None
        self.pid, self.epoch = self.client.init_transactions(tid, self.s.transaction_timeout_ms)
        if task.batch_id is None:
            return True
        self.marker = (marker_topic, MARKER_PARTITION)
        last, _meta = self.client.committed_offsets(tid, [self.marker]).get(self.marker,
                                                                            (-1, None))
        if last >= task.batch_id:
            log.info("snakka sink: batch %d of task %d was committed before (the sink group "
                     "%r says batch %d); writing nothing", task.batch_id, task.partition_id,
                     tid, last)
            return False
        return True

    def prepare_commit(self) -> None:
        """Step 3's end: the marker offset joins the transaction, which stays open."""
        tid, task = self.transactional_id, self.task
        assert tid is not None and task is not None
        if task.batch_id is not None:
            assert self.marker is not None  # set by begin_transaction
            self.client.add_offsets_to_txn(tid, self.pid, self.epoch, tid)
            self.client.txn_offset_commit(
                tid, self.pid, self.epoch, tid,
                {self.marker: (task.batch_id, f"snakka-spark-sink batch {task.batch_id}")})

    def abort_transaction(self) -> None:
        """Best effort after a failure in the task (the coordinator's timeout or the next
        attempt's InitProducerId aborts it otherwise)."""
        if self.transactional_id is None or self.pid < 0:
            return
        try:
            self.client.end_txn(self.transactional_id, self.pid, self.epoch, commit=False)
        except SnakkaSparkError as e:
            log.warning("snakka sink: aborting the transaction of %r failed: %s",
                        self.transactional_id, e)

    def _send(self, tp: tuple[str, int], batch: bytes, count: int) -> None:
        if self.transactional_id is not None and tp not in self.txn_partitions:
            self.client.add_partitions_to_txn(self.transactional_id, self.pid, self.epoch, [tp])
            self.txn_partitions.add(tp)
        attempt = 0
        while True:
            try:
                code, _base = self.client.produce(tp, batch, acks=self.s.acks,
                                                  timeout_ms=self.s.client.request_timeout_ms,
                                                  transactional_id=self.transactional_id)
            except SnakkaAuthenticationError:
                raise  # refused credentials stay refused
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
        if self.transactional_id is not None and self.pid >= 0:
            self.prepare_commit()
            return SnakkaCommitMessage(self.records, self.batches, self.transactional_id,
                                       self.pid, self.epoch)
        return SnakkaCommitMessage(self.records, self.batches)

    def close(self) -> None:
        self.client.close()


def write_arrow(settings: WriteSettings, batches: Iterator[pa.RecordBatch],
                task: TaskInfo | None = None) -> SnakkaCommitMessage:
    """Produce every row of ``batches`` (runs in a Spark executor). With
    ``transactionalIdPrefix`` the rows go into one transaction left open for the driver
    (``task``: the Spark task, read from its TaskContext when not given)."""
    transactional = settings.transactional_id_prefix is not None
    if transactional and task is None:
        task = current_task()
    producer = _PartitionProducer(settings, task)
    begun = False
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
            if transactional and not begun:
                begun = True
                marker_topic = topics[0]
                if marker_topic is None:
                    raise SnakkaSparkError(
                        "a row has a null 'topic' and no 'topic' option is set")
                if not producer.begin_transaction(marker_topic):
                    for _rest in batches:  # the replayed rows were written before
                        pass
                    return SnakkaCommitMessage(0, 0, already_committed=True)
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
    except BaseException:
        producer.abort_transaction()
        raise
    finally:
        producer.close()


def end_transactions(settings: WriteSettings, messages: list, *, commit: bool,
                     batch_id: int | None = None) -> None:
    """Step 4 on the driver: commit (or abort) every task's open transaction. A failed
    commit raises, failing the batch (Spark then aborts it and the query's restart replays
    it, see the module docstring); aborting is best effort."""
    txns = [m for m in messages if m is not None and m.transactional_id is not None]
    if not txns:
        return
    failed: list[str] = []
    with SparkKafkaClient(settings.client) as client:
        for m in txns:
            try:
                client.end_txn(m.transactional_id, m.producer_id, m.producer_epoch,
                               commit=commit)
            except SnakkaSparkError as e:
                failed.append(f"{m.transactional_id}: {e}")
    what = "batch" if batch_id is None else f"micro-batch {batch_id}"
    if failed and commit:
        raise SnakkaSparkError(
            f"snakka sink: committing the transactions of {what} failed ({len(failed)} of "
            f"{len(txns)}): " + "; ".join(failed[:5]))
    if failed:
        log.warning("snakka sink: aborting the transactions of %s failed for %d of %d "
                    "(the coordinator aborts them at transaction.timeout.ms): %s", what,
                    len(failed), len(txns), "; ".join(failed[:5]))
    else:
        log.info("snakka sink: %s the transactions of %s (%d tasks)",
                 "committed" if commit else "aborted", what, len(txns))


class SnakkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, settings: WriteSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SnakkaCommitMessage:
        return write_arrow(self.settings, iterator)

    def commit(self, messages: list) -> None:
        end_transactions(self.settings, messages, commit=True)
        n = sum(m.records for m in messages if m is not None)
        log.info("snakka sink: wrote %d records", n)

    def abort(self, messages: list) -> None:
        if self.settings.transactional_id_prefix is not None:
            end_transactions(self.settings, messages, commit=False)
            return
        n = sum(m.records for m in messages if m is not None)
        # Kafka has no rollback outside transactions: what finished tasks wrote stays.
        log.warning("snakka sink: write aborted; %d records of finished tasks remain in Kafka", n)


class SnakkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, settings: WriteSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SnakkaCommitMessage:
        return write_arrow(self.settings, iterator)

    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        end_transactions(self.settings, messages, commit=True, batch_id=batchId)

    def abort(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        if self.settings.transactional_id_prefix is not None:
            end_transactions(self.settings, messages, commit=False, batch_id=batchId)
            return
        n = sum(m.records for m in messages if m is not None)
        log.warning("snakka sink: micro-batch %d aborted; %d records of finished tasks remain "
                    "in Kafka", batchId, n)
