"""Batch and streaming readers of the ``snakka`` data source.

What this module owns
    * resolving a subscription and offset specs to concrete offset ranges (driver side):
      :func:`resolve_offsets`, :func:`plan_ranges` (``minPartitions`` /
      ``maxRecordsPerPartition`` splitting), :func:`rate_limit` (``maxOffsetsPerTrigger``,
      split across partitions in proportion to their backlog, as Spark's Kafka source does);
    * :class:`SnakkaBatchReader` (``DataSourceReader``) and :class:`SnakkaStreamReader`
      (``DataSourceStreamReader`` + ``SupportsTriggerAvailableNow``);
    * :func:`read_partition`, which runs in executors: it opens its own connection, fetches
      each range with the Fetch API and yields ``pyarrow.RecordBatch`` objects.

Exactly-once reads
    Streaming offsets are Spark offsets in the Kafka source's JSON form
    (``{"topic": {"0": 123}}``, the next offset to read per partition) and live only in
    Spark's checkpoint: a restarted query resumes at the checkpointed end of its last
    planned micro-batch. Nothing is committed to the cluster.

Data loss (``failOnDataLoss``)
    If a range starts below the partition's log start offset (retention or DeleteRecords
    removed it), or a partition vanished, ``failOnDataLoss=true`` (the default) fails the
    query with a message saying what was lost; ``false`` logs a warning and reads what is
    still there.

Picklability
    Readers hold only settings (frozen dataclasses); the driver-side stream reader keeps a
    lazily opened client that is dropped when pickled. ``read()`` depends on nothing but its
    :class:`KafkaInputPartition`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from snakka.protocol.errors import ErrorCode

from .arrow_decode import ArrowBatchBuilder
from .client import SnakkaAuthenticationError, SnakkaSparkError, SparkKafkaClient, error_name
from .options import EARLIEST, LATEST, ClientSettings, OffsetSpec, ReadSettings

log = logging.getLogger("snakka.spark")

TopicPartition = tuple[str, int]
# Rows / bytes accumulated before read() yields an Arrow batch to Spark.
ARROW_BATCH_ROWS = 65_536
ARROW_BATCH_BYTES = 8 * 1024 * 1024

DATA_LOSS_HINT = ("If losing these records is acceptable, set the source option "
                  "failOnDataLoss=false to log a warning and continue instead.")


class SnakkaDataLossError(SnakkaSparkError):
    """Records the query should have read are gone (retention, DeleteRecords, a deleted
    topic or partition) and ``failOnDataLoss`` is true."""


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # first offset to read
    end: int  # first offset not to read

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


class KafkaInputPartition(InputPartition):
    """Everything an executor needs to read its share: offset ranges and settings."""

    def __init__(self, index: int, ranges: list[OffsetRange], client: ClientSettings,
                 include_headers: bool, fail_on_data_loss: bool, poll_timeout_ms: int) -> None:
        super().__init__(index)
        self.ranges = ranges
        self.client = client
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.poll_timeout_ms = poll_timeout_ms

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.value}, {self.ranges})"


# ------------------------------------------------------------------------------ planning


def subscribed_partitions(client: SparkKafkaClient, settings: ReadSettings, *,
                          missing_ok: bool = False) -> list[TopicPartition]:
    return client.partitions_for(subscribe=settings.subscribe, pattern=settings.subscribe_pattern,
                                 assign=settings.assign, missing_ok=missing_ok)


def _require_all(spec_name: str, given: dict, tps: list[TopicPartition]) -> None:
    missing = sorted(set(tps) - set(given))
    unknown = sorted(set(given) - set(tps))
    if unknown:
        raise SnakkaSparkError(
            f"option '{spec_name}' names partitions that are not subscribed or do not exist: "
            + ", ".join(f"{t}-{p}" for t, p in unknown))
    if missing:
        raise SnakkaSparkError(
            f"option '{spec_name}' must give a value for every subscribed partition; missing: "
            + ", ".join(f"{t}-{p}" for t, p in missing))


def resolve_offsets(client: SparkKafkaClient, spec: OffsetSpec, tps: list[TopicPartition], *,
                    starting: bool, strategy_latest: bool = False) -> dict[TopicPartition, int]:
    """Concrete offsets for a starting/ending spec (see options module for the forms)."""
    side = "starting" if starting else "ending"
    kind = spec[0]
    if not tps:
        return {}
    if kind == "earliest":
        return client.earliest(tps)
    if kind == "latest":
        return client.latest(tps)
    if kind == "offsets":
        given: dict[TopicPartition, int] = spec[1]
        _require_all(f"{side}Offsets", given, tps)
        earliest = client.earliest(tps)
        latest = client.latest(tps)
        out = {}
        for tp in tps:
            off = given[tp]
            if off == EARLIEST:
                out[tp] = earliest[tp]
            elif off == LATEST:
                out[tp] = latest[tp]
            elif off > latest[tp]:
                raise SnakkaSparkError(
                    f"option '{side}Offsets' asks for offset {off} of {tp[0]}-{tp[1]}, but the "
                    f"partition's latest offset is {latest[tp]}")
            else:
                out[tp] = off  # below the log start: reported as data loss when read
        return out
    # by timestamp
    if kind == "timestamp":
        query = {tp: spec[1] for tp in tps}
    else:
        _require_all(f"{side}OffsetsByTimestamp", spec[1], tps)
        query = {tp: spec[1][tp] for tp in tps}
    found = client.list_offsets(query)
    missing = [tp for tp in tps if found[tp] < 0]
    if missing:
        if starting and not strategy_latest:
            raise SnakkaSparkError(
                f"no record has a timestamp >= the {side} timestamp in "
                + ", ".join(f"{t}-{p} ({query[(t, p)]})" for t, p in missing)
                + "; set startingOffsetsByTimestampStrategy=latest to start at the latest "
                  "offset in that case")
        latest = client.latest(missing)
        for tp in missing:
            found[tp] = latest[tp]
    return found


def plan_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                max_records: int | None) -> list[list[OffsetRange]]:
    """Split ranges into Spark partitions: one per non-empty range, more when
    ``maxRecordsPerPartition`` caps a range's size or ``minPartitions`` asks for more
    partitions than ranges (big ranges are split in proportion to their size)."""
    parts = [r for r in ranges if r.size > 0]
    if max_records:
        parts = [piece for r in parts for piece in _split(r, math.ceil(r.size / max_records))]
    if min_partitions and len(parts) < min_partitions:
        total = sum(r.size for r in parts)
        out = []
        for r in parts:
            # Ranges above the average are split so that the count reaches minPartitions;
            # small ranges stay whole (splitting them buys nothing).
            want = r.size * min_partitions / total if total else 1
            out.extend(_split(r, max(1, math.floor(want))) if want > 1 else [r])
        parts = out
    return [[r] for r in parts]


def _split(r: OffsetRange, n: int) -> list[OffsetRange]:
    n = max(1, min(n, r.size))
    bounds = [r.start + (r.size * i) // n for i in range(n + 1)]
    return [OffsetRange(r.topic, r.partition, bounds[i], bounds[i + 1]) for i in range(n)]


def rate_limit(start: dict[TopicPartition, int], latest: dict[TopicPartition, int],
               limit: int) -> dict[TopicPartition, int]:
    """End offsets admitting about ``limit`` records, shared across partitions in
    proportion to each one's backlog (fractional shares below one record round up so that
    a small partition is never starved; others round down)."""
    sizes = {tp: latest[tp] - start.get(tp, latest[tp]) for tp in latest}
    total = sum(s for s in sizes.values() if s > 0)
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        size = sizes[tp]
        if size <= 0:
            out[tp] = end
            continue
        share = limit * (size / total)
        n = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + n)
    return out


def to_spark_offset(offsets: dict[TopicPartition, int]) -> dict:
    """{(t, p): off} -> Spark's Kafka source offset JSON {"t": {"p": off}} (sorted)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def from_spark_offset(offset: dict) -> dict[TopicPartition, int]:
    try:
        return {(t, int(p)): int(off) for t, parts in offset.items() for p, off in parts.items()}
    except (AttributeError, TypeError, ValueError):
        raise SnakkaSparkError(
            f"checkpointed offset {offset!r} is not a snakka/Kafka source offset "
            '(expected {"topic": {"partition": offset}})') from None


# ------------------------------------------------------------------------------ executor side


def read_partition(part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Read one input partition (runs in a Spark executor; opens its own connection)."""
    if not isinstance(part, KafkaInputPartition):
        return  # Spark's placeholder partition for an empty plan
    with SparkKafkaClient(part.client) as client:
        for r in part.ranges:
            yield from _read_range(client, part, r)


def _data_loss(part: KafkaInputPartition, message: str) -> None:
    if part.fail_on_data_loss:
        raise SnakkaDataLossError(f"{message}. {DATA_LOSS_HINT}")
    log.warning("%s; continuing because failOnDataLoss=false", message)


def _read_range(client: SparkKafkaClient, part: KafkaInputPartition,
                r: OffsetRange) -> Iterator[pa.RecordBatch]:
    tp = (r.topic, r.partition)
    builder = ArrowBatchBuilder(r.topic, r.partition, part.include_headers,
                                check_crcs=part.client.check_crcs,
                                read_committed=part.client.isolation_level == 1)
    pos = r.start
    deadline = time.monotonic() + part.poll_timeout_ms / 1000
    while pos < r.end:
        f = client.fetch(tp, pos)
        if f.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            earliest = client.earliest([tp])[tp]
            if pos < earliest:
                _data_loss(part, f"{r.topic}-{r.partition}: offsets {pos}..{min(earliest, r.end) - 1}"
                                 f" are no longer available (the log now starts at {earliest})")
                pos = earliest
                continue
            latest = client.latest([tp])[tp]
            _data_loss(part, f"{r.topic}-{r.partition}: offsets {max(pos, latest)}..{r.end - 1} "
                             f"are no longer available (the log now ends at {latest}; was the "
                             "topic deleted and re-created?)")
            break
        if f.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            meta = client.metadata([r.topic]).get(r.topic)
            if isinstance(meta, int) or r.partition not in {p.partition for p in meta or ()}:
                _data_loss(part, f"{r.topic}-{r.partition} no longer exists; offsets "
                                 f"{pos}..{r.end - 1} cannot be read")
                break
            if time.monotonic() > deadline:  # the partition exists but its leader says not
                raise SnakkaSparkError(f"Fetch of {r.topic}-{r.partition} keeps failing with "
                                       "UNKNOWN_TOPIC_OR_PARTITION")
            time.sleep(0.1)
            continue
        if f.error_code:
            raise SnakkaSparkError(f"Fetch of {r.topic}-{r.partition} at offset {pos} failed: "
                                   f"{error_name(f.error_code)}")
        progressed = False
        if f.records is not None and len(f.records):
            next_offset, _n = builder.add_fetched(f.records, pos, r.end, f.aborted_transactions)
            if next_offset > pos:
                pos = next_offset
                progressed = True
                deadline = time.monotonic() + part.poll_timeout_ms / 1000
            if builder.num_rows >= ARROW_BATCH_ROWS or builder.num_bytes >= ARROW_BATCH_BYTES:
                rb = builder.flush()
                if rb is not None:
                    yield rb
        if progressed:
            continue
        visible_end = f.last_stable_offset if part.client.isolation_level == 1 \
            and f.last_stable_offset >= 0 else f.high_watermark
        if pos >= visible_end and f.high_watermark >= 0 and pos >= f.high_watermark:
            # The planned range ends beyond what the partition holds now (truncated log).
            _data_loss(part, f"{r.topic}-{r.partition}: offsets {pos}..{r.end - 1} were planned "
                             f"but the partition now ends at {f.high_watermark}")
            break
        if time.monotonic() > deadline:
            raise SnakkaSparkError(
                f"{r.topic}-{r.partition}: no records at offset {pos} within "
                f"kafkaConsumer.pollTimeoutMs={part.poll_timeout_ms} (the range ends at {r.end})")
    rb = builder.flush()
    if rb is not None:
        yield rb


# ------------------------------------------------------------------------------ readers


def _make_partitions(settings: ReadSettings, ranges: list[OffsetRange]) -> list[InputPartition]:
    planned = plan_ranges(ranges, settings.min_partitions, settings.max_records_per_partition)
    return [KafkaInputPartition(i, group, settings.client, settings.include_headers,
                                settings.fail_on_data_loss, settings.poll_timeout_ms)
            for i, group in enumerate(planned)]


class SnakkaBatchReader(DataSourceReader):
    def __init__(self, settings: ReadSettings) -> None:
        self.settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        s = self.settings
        with SparkKafkaClient(s.client) as client:
            tps = subscribed_partitions(client, s)
            start = resolve_offsets(client, s.starting, tps, starting=True,
                                    strategy_latest=s.timestamp_strategy_latest)
            end = resolve_offsets(client, s.ending, tps, starting=False)
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise SnakkaSparkError(
                    f"{tp[0]}-{tp[1]}: the starting offset {start[tp]} is after the ending "
                    f"offset {end[tp]}")
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        return _make_partitions(s, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


class SnakkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, settings: ReadSettings) -> None:
        self.settings = settings
        self._client: SparkKafkaClient | None = None
        self._available_now: dict[TopicPartition, int] | None = None

    # The driver-side client is a cache: never pickled, reopened on demand.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _c(self) -> SparkKafkaClient:
        if self._client is None:
            self._client = SparkKafkaClient(self.settings.client)
        return self._client

    def _call(self, fn):  # one reconnect: a broker restart between micro-batches is normal
        try:
            return fn(self._c())
        except SnakkaAuthenticationError:
            self.stop()
            raise  # refused credentials stay refused
        except SnakkaSparkError:
            self.stop()
            return fn(self._c())

    def initialOffset(self) -> dict:
        s = self.settings

        def go(c: SparkKafkaClient) -> dict:
            tps = subscribed_partitions(c, s)
            return to_spark_offset(resolve_offsets(c, s.starting, tps, starting=True,
                                                   strategy_latest=s.timestamp_strategy_latest))
        return self._call(go)

    def _latest(self) -> dict[TopicPartition, int]:
        if self._available_now is not None:
            return dict(self._available_now)

        def go(c: SparkKafkaClient) -> dict:
            return c.latest(subscribed_partitions(c, self.settings, missing_ok=True))
        return self._call(go)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.settings.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_spark_offset(start)
        latest = self._latest()
        new = [tp for tp in latest if tp not in begin]
        if new:  # partitions added since the last batch are read from their beginning
            begin.update(self._call(lambda c: c.earliest(new)))
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, latest, limit.max_rows)
        else:
            end = dict(latest)
        # Never move a partition backwards here; partitions() reports that as data loss.
        for tp, off in begin.items():
            if tp in end and end[tp] < off:
                end[tp] = off
        return to_spark_offset(end)

    def reportLatestOffset(self) -> dict | None:
        return to_spark_offset(self._latest())

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = None
        self._available_now = self._latest()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        s = self.settings
        begin = from_spark_offset(start)
        stop = from_spark_offset(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            earliest = self._call(lambda c: c.earliest(new))
            begin.update(earliest)
            # A partition created after the query started should still hold its first
            # record; if it does not, records were deleted before the query saw them.
            for tp in new:
                if earliest[tp] > 0:
                    msg = (f"{tp[0]}-{tp[1]} was added after the query started but its log "
                           f"starts at offset {earliest[tp]}: offsets 0..{earliest[tp] - 1} "
                           "were never read")
                    if s.fail_on_data_loss:
                        raise SnakkaDataLossError(f"{msg}. {DATA_LOSS_HINT}")
                    log.warning("%s; continuing because failOnDataLoss=false", msg)
        ranges = []
        for tp, e in sorted(stop.items()):
            b = begin[tp]
            if e < b:
                msg = (f"{tp[0]}-{tp[1]}: the end offset {e} is before the start offset {b} "
                       "(was the topic deleted and re-created?)")
                if s.fail_on_data_loss:
                    raise SnakkaDataLossError(f"{msg}. {DATA_LOSS_HINT}")
                log.warning("%s; skipping because failOnDataLoss=false", msg)
                continue
            ranges.append(OffsetRange(tp[0], tp[1], b, e))
        gone = sorted(set(begin) - set(stop))
        if gone:
            msg = "partitions " + ", ".join(f"{t}-{p}" for t, p in gone) + " disappeared"
            if s.fail_on_data_loss:
                raise SnakkaDataLossError(f"{msg}. {DATA_LOSS_HINT}")
            log.warning("%s; continuing because failOnDataLoss=false", msg)
        return _make_partitions(s, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint; nothing to commit to the cluster.
        return None

    def stop(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None
