"""A coordinator's internal topic of JSON key/value records.

Coordinators (the group coordinator's ``__consumer_offsets``, the transaction coordinator's
``__transaction_state``, the share-group state persister's ``__share_group_state``) store their
facts as records in an internal topic: the key is a JSON array, the value a JSON object or null
(a tombstone). At start-up every partition is replayed in order, before the broker accepts
connections. Replay takes the latest record of a key and needs nothing else: offsets may have
gaps and a tombstone may have no earlier record of its key (the log cleaner removed them).

The topic is created on the first write (with ``lazy=True``), so a broker that never uses the
coordinator pays nothing for its partitions at start-up and shutdown; its metadata record is
fsynced in the background, and :meth:`CoordinatorLog.durable` waits for it in strict mode.

How a topic is kept small is its owner's choice, made in ``topic_configs``:

- ``cleanup.policy=compact`` (``__consumer_offsets``, ``__transaction_state``, as in Kafka):
  the log cleaner keeps the latest record of every key and drops tombstones after
  ``delete.retention.ms``. Every record the owner writes must then be keyed by what it
  describes and every deletion must be a tombstone with the same key, so that what compaction
  keeps replays to exactly the live state. A topic created before compaction existed gets the
  policy at start-up (:meth:`CoordinatorLog.open`, logged once).
- otherwise (``__share_group_state``, whose deltas are not one-record-per-key state; Kafka's
  share coordinator prunes it with DeleteRecords too) snapshot-and-trim: the owner knows its live
  state per partition; once a partition holds more than ``compact_min_records`` records and more
  than ``compact_ratio`` times its live records, :meth:`CoordinatorLog.maybe_trim` appends the
  live state again (as records that restate it) and moves the log start offset past everything
  before it (DeleteRecords). A crash at any point replays to the same state: the rewrite only
  restates what is already there.

Appends and durability go through the replica manager, which decides it for produce too
(``ReplicaManager.append_internal`` / ``coordinator_durable``): with ``log.flush.strict=true`` a
caller that must answer only after its records are on disk awaits :meth:`CoordinatorLog.durable`
with what :meth:`CoordinatorLog.append` returned. The topic itself is created, and its policy
set, through the controller.

How a fact becomes record bytes is the owner's :class:`RecordSerde` (``serde=``): Kafka's own
coordinator records (issue 17: a data directory Apache Kafka can run on), or :data:`JSON_SERDE`,
the JSON key/value records snakka wrote before. An owner that moved to Kafka's records passes
``legacy_serde=JSON_SERDE``: replay then still reads a record its ``legacy_serde`` recognises,
notes its partition in :attr:`CoordinatorLog.legacy_partitions`, and the owner calls
:meth:`CoordinatorLog.restate` for each of them once replay is done: the live state is appended
again in the new format and the log start offset moves past everything before it (the segments
holding the old records are deleted). A crash in between replays both and restates again.

Transactions (``__consumer_offsets``, as Kafka's coordinator runtime writes it): an owner may
append records in a transactional batch of a producer (``append(..., producer=(id, epoch))``)
and later that producer's COMMIT / ABORT control marker (:meth:`CoordinatorLog.append_marker`);
:meth:`CoordinatorLog.replay_entries` then gives each record with its batch's producer and the
markers in log order (:meth:`CoordinatorLog.replay` stays the plain view, markers skipped).

Ordering: every method runs on the event loop; appends to one partition happen in call order.
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

from snakka.groups.partitioning import offsets_partition
from snakka.limits import COMPACT_MIN_RECORDS, COMPACT_RATIO, SNAPSHOT_BATCH_RECORDS
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.records import Record, batch_records, build_batch, iter_batches
from snakka.records.control import EndTxnMarker, read_end_txn_marker

if TYPE_CHECKING:
    from snakka.controller import Controller
    from snakka.replica.manager import ReplicaManager
    from snakka.storage import UnifiedLog

log = logging.getLogger("snakka.coordinator")

_REPLAY_CHUNK = 8 << 20

# One stored fact: (key, value); value None is a tombstone.
KeyValue = tuple[tuple, dict | None]
# (partition log, offset after the appended records): what durable() waits for.
AppendMark = tuple["UnifiedLog", int]
# (producer id, producer epoch) of a transactional batch.
Producer = tuple[int, int]


class ReplayEntry(NamedTuple):
    """One replayed record with its batch's producer (``producer_id`` -1 unless the batch is
    transactional), or (``marker`` set, no key) a COMMIT / ABORT control marker."""

    partition: int
    offset: int
    key: tuple | None
    value: dict | None
    producer_id: int = -1
    producer_epoch: int = -1
    marker: EndTxnMarker | None = None


class RecordSerde(Protocol):
    """How an owner's facts are stored: (key tuple, value dict or None) <-> record bytes."""

    def serialize(self, key: tuple, value: dict | None) -> tuple[bytes, bytes | None]:
        """The record key and value (None: a tombstone) of one fact."""
        ...

    def deserialize(self, key: bytes, value: bytes | None) -> tuple[tuple, dict | None] | None:
        """The fact of one record; None for a record this owner ignores (a record type it does
        not keep, as Kafka's loaders skip unknown types); ValueError if undecodable."""
        ...

    def recognizes(self, key: bytes) -> bool:
        """True if ``key`` is in this serde's format (how replay tells legacy records apart)."""
        ...


class JsonSerde:
    """snakka's first format: the key a JSON array, the value a JSON object."""

    def serialize(self, key: tuple, value: dict | None) -> tuple[bytes, bytes | None]:
        return (json.dumps(list(key), separators=(",", ":")).encode(),
                None if value is None else json.dumps(value, separators=(",", ":")).encode())

    def deserialize(self, key: bytes, value: bytes | None) -> tuple[tuple, dict | None] | None:
        return tuple(json.loads(key)), None if value is None else json.loads(value)

    def recognizes(self, key: bytes) -> bool:
        # A JSON array starts with "["; Kafka's coordinator keys start with an int16 record
        # type (0x00 0x..), so the two never collide.
        return key[:1] == b"["


JSON_SERDE = JsonSerde()


def encode(key: tuple, value: dict | None, timestamp: int,
           serde: RecordSerde = JSON_SERDE) -> Record:
    k, v = serde.serialize(key, value)
    return Record(key=k, value=v, timestamp=timestamp)


class CoordinatorLog:
    """One internal topic: create, replay, append, snapshot-and-trim, durability waits."""

    def __init__(self, controller: Controller, replicas: ReplicaManager,
                 time_ms: Callable[[], int], topic: str, partitions: int, *,
                 topic_configs: Mapping[str, str],
                 compact_min_records: int = COMPACT_MIN_RECORDS,
                 compact_ratio: int = COMPACT_RATIO,
                 snapshot_batch_records: int = SNAPSHOT_BATCH_RECORDS,
                 lazy: bool = False, serde: RecordSerde = JSON_SERDE,
                 legacy_serde: RecordSerde | None = None) -> None:
        self.controller = controller
        self.replicas = replicas
        self.time_ms = time_ms
        self.topic = topic
        self.num_partitions = partitions
        # The configs the topic is created with (its owner's: policy, segment size, ...).
        self.topic_configs = dict(topic_configs)
        self.compact_min_records = compact_min_records
        self.compact_ratio = compact_ratio
        self.snapshot_batch_records = snapshot_batch_records
        self.lazy = lazy
        self.serde = serde
        self.legacy_serde = legacy_serde
        # Partitions where replay met a record of ``legacy_serde`` (module doc: restate them).
        self.legacy_partitions: set[int] = set()
        # partition -> records held since its log start offset
        self._held: dict[int, int] = {}
        self._metadata_unsynced = False

    def _configs(self) -> dict[str, str | None]:
        return dict(self.topic_configs)

    @property
    def compacted(self) -> bool:
        """True if the owner relies on the log cleaner (no snapshot-and-trim)."""
        return "compact" in self.topic_configs.get("cleanup.policy", "delete")

    @property
    def exists(self) -> bool:
        return self.topic in self.controller.metadata.topics

    async def open(self) -> None:
        """Adopt the existing topic's partition count (fixed once created), or create the topic
        now unless ``lazy``."""
        ti = self.controller.metadata.topics.get(self.topic)
        if ti is None and not self.lazy:
            ti, recs = self.controller.create_topic_now(self.topic, self.num_partitions,
                                                        self._configs())
            await self.controller.commit_metadata(recs)
        if ti is not None:
            self.num_partitions = ti.partitions
            await self._adopt_policy()

    async def _adopt_policy(self) -> None:
        """A topic created before its owner relied on compaction (a data directory of an older
        snakka, kept small by snapshot-and-trim) gets the owner's ``cleanup.policy`` once, so
        an upgraded broker compacts it too. An explicit policy already set is left alone."""
        ti = self.controller.metadata.topics[self.topic]
        policy = self.topic_configs.get("cleanup.policy")
        if policy is None or "cleanup.policy" in ti.configs:
            return
        recs = self.controller.metadata.set_internal_topic_configs(
            self.topic, {"cleanup.policy": policy})
        await self.controller.commit_metadata(recs)
        self.controller.reconfigure_topics([self.topic])
        log.info("%s: cleanup.policy=%s set on the existing topic (created before compaction); "
                 "the log cleaner keeps it small from now on", self.topic, policy)

    def _ensure_topic(self) -> None:
        if self.exists:
            return
        try:
            _ti, recs = self.controller.create_topic_now(self.topic, self.num_partitions,
                                                         self._configs())
        except KafkaError as exc:
            # Its logs could not be made (ENOSPC, EMFILE, ...; nothing entered metadata): to
            # the coordinator writing through it, that is a failed write like any other.
            raise OSError(errno.EIO, f"cannot create {self.topic}: {exc.message}") from exc
        self.controller.commit_metadata_soon(recs)
        self._metadata_unsynced = True

    def partition_for(self, key: str) -> int:
        """Kafka's Utils.abs(key.hashCode()) % partitions."""
        return offsets_partition(key, self.num_partitions)

    def held(self, partition: int) -> int:
        return self._held.get(partition, 0)

    # -- replay --------------------------------------------------------------------------
    def replay(self, partitions: Iterable[int] | None = None
               ) -> Iterator[tuple[int, tuple, dict | None]]:
        """Every stored (partition, key, value) in log order, of every partition or of
        ``partitions`` (a coordinator reloading one after a failed write); undecodable records
        are skipped with a warning, records the serde ignores silently."""
        for p in range(self.num_partitions) if partitions is None else partitions:
            pl = self.replicas.get_log(self.topic, p)
            self._held[p] = 0
            if pl is None:
                continue
            for rec in pl.iter_records(_REPLAY_CHUNK):
                self._held[p] = self._held.get(p, 0) + 1
                if rec.key is None:
                    continue
                serde = self.serde
                if self.legacy_serde is not None and self.legacy_serde.recognizes(rec.key):
                    serde = self.legacy_serde
                    self.legacy_partitions.add(p)
                try:
                    fact = serde.deserialize(rec.key, rec.value)
                except (ValueError, TypeError, KeyError, IndexError) as e:
                    log.warning("%s-%d offset %d: undecodable record skipped (%s)", self.topic,
                                p, rec.offset, e)
                    continue
                if fact is not None:
                    yield p, fact[0], fact[1]

    def replay_entries(self, partitions: Iterable[int] | None = None) -> Iterator[ReplayEntry]:
        """:meth:`replay` with each record's batch producer and the control markers (module
        doc: transactions), for an owner that writes transactional batches."""
        for p in range(self.num_partitions) if partitions is None else partitions:
            pl = self.replicas.get_log(self.topic, p)
            self._held[p] = 0
            if pl is None:
                continue
            offset = pl.log_start_offset
            while offset < pl.log_end_offset:
                data = pl.read(offset, _REPLAY_CHUNK)
                before = offset
                for h, pos in iter_batches(data):
                    next_offset = h.base_offset + h.last_offset_delta + 1
                    if next_offset <= offset:
                        continue
                    if h.is_control:
                        marker = read_end_txn_marker(data, pos, h)
                        if marker is not None:
                            self._held[p] = self._held.get(p, 0) + 1
                            yield ReplayEntry(p, h.base_offset, None, None, h.producer_id,
                                              h.producer_epoch, marker)
                    elif h.records_count:
                        pid = h.producer_id if h.is_transactional else -1
                        for rec in batch_records(data, pos, h):
                            if rec.offset < offset:
                                continue
                            self._held[p] = self._held.get(p, 0) + 1
                            fact = self._decode(p, rec)
                            if fact is not None:
                                yield ReplayEntry(p, rec.offset, fact[0], fact[1], pid,
                                                  h.producer_epoch if pid >= 0 else -1)
                    offset = next_offset
                if offset == before:
                    log.error("%s-%d: no decodable batch at offset %d; replay stops there",
                              self.topic, p, offset)
                    break

    def _decode(self, p: int, rec: Record) -> tuple[tuple, dict | None] | None:
        if rec.key is None:
            return None
        serde = self.serde
        if self.legacy_serde is not None and self.legacy_serde.recognizes(rec.key):
            serde = self.legacy_serde
            self.legacy_partitions.add(p)
        try:
            return serde.deserialize(rec.key, rec.value)
        except (ValueError, TypeError, KeyError, IndexError) as e:
            log.warning("%s-%d offset %d: undecodable record skipped (%s)", self.topic, p,
                        rec.offset, e)
            return None

    # -- writes --------------------------------------------------------------------------
    def append(self, partition: int, records: Iterable[KeyValue], *,
               producer: Producer | None = None) -> AppendMark | None:
        """Append records to one partition as one batch (a transactional batch of
        ``producer`` if given). Returns what :meth:`durable` needs, or None if the partition
        is missing (the topic was deleted under us: logged)."""
        records = list(records)
        if not records:
            return None
        self._ensure_topic()
        now = self.time_ms()
        batch = [encode(k, v, now, self.serde) for k, v in records]
        if producer is None:
            buf = bytearray(build_batch(batch))
        else:
            buf = bytearray(build_batch(
                batch, producer_id=producer[0], producer_epoch=producer[1],
                base_sequence=self._next_sequence(partition, producer), is_transactional=True))
        mark = self.replicas.append_internal(self.topic, partition, buf)
        if mark is not None:
            self._held[partition] = self._held.get(partition, 0) + len(records)
        return mark

    def _next_sequence(self, partition: int, producer: Producer) -> int:
        """The base sequence of a coordinator's transactional batch. Kafka's coordinator writes
        NO_SEQUENCE and its log skips the sequence check for coordinator appends; snakka's log
        checks every producer batch, so the coordinator continues the producer's sequence in
        this partition (0 on a new epoch), which Kafka's loader accepts as well."""
        pl = self.replicas.get_log(self.topic, partition)
        entry = None if pl is None else pl.producer_state.last_entry(producer[0])
        if entry is None or entry.producer_epoch != producer[1] or entry.last_seq < 0:
            return 0
        return entry.last_seq + 1

    def append_marker(self, partition: int, producer: Producer, commit: bool,
                      coordinator_epoch: int = 0) -> AppendMark | None:
        """Append ``producer``'s COMMIT (``commit``) or ABORT control marker to ``partition``
        (module doc: transactions). Raises OSError if the write failed."""
        self._ensure_topic()
        err, mark = self.replicas.write_txn_marker(self.topic, partition, producer[0],
                                                   producer[1], commit, coordinator_epoch)
        if err == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        if err != ErrorCode.NONE:
            raise OSError(errno.EIO, f"cannot write a transaction marker to {self.topic}-"
                          f"{partition}: {ErrorCode(err).name}")
        self._held[partition] = self._held.get(partition, 0) + 1
        pl = self.replicas.get_log(self.topic, partition)
        return mark if mark is not None or pl is None else (pl, pl.log_end_offset)

    def maybe_trim(self, partition: int, live_count: int,
                   live_records: Callable[[], list[KeyValue]]) -> bool:
        """Snapshot-and-trim ``partition`` if it holds too many dead records (module doc).
        ``live_records`` restates the owner's whole live state of that partition. Never on a
        compacted topic: the cleaner keeps it small."""
        if self.compacted:
            return False
        held = self._held.get(partition, 0)
        if held <= self.compact_min_records or held <= self.compact_ratio * live_count:
            return False
        return self._rewrite(partition, live_records(), checkpoint=False) is not None

    def restate(self, partition: int, live: list[KeyValue], *,
                producer_of: Callable[[KeyValue], Producer | None] | None = None
                ) -> int | None:
        """Rewrite ``partition`` as ``live`` (its owner's whole live state) in the current
        serde and move the log start offset past everything before (module doc: legacy
        records). The old records' segments are closed first, so they are deleted whole and
        no file of the partition keeps a record of the old format. Checkpointed. Returns the
        new log start offset (None if the partition has no log).
        ``producer_of`` names the producer of a record that belongs to an open transaction
        (written in a transactional batch of it, consecutive records of one producer
        sharing a batch).
        """
        start = self._rewrite(partition, live, checkpoint=True, roll=True,
                              producer_of=producer_of)
        self.legacy_partitions.discard(partition)
        return start

    def _rewrite(self, partition: int, live: list[KeyValue], *, checkpoint: bool,
                 roll: bool = False,
                 producer_of: Callable[[KeyValue], Producer | None] | None = None
                 ) -> int | None:
        pl = self.replicas.get_log(self.topic, partition)
        if pl is None:
            return None
        if roll:
            pl.roll()
        start = pl.log_end_offset
        run: list[KeyValue] = []
        run_producer: Producer | None = None
        for kv in live:
            producer = None if producer_of is None else producer_of(kv)
            if run and (producer != run_producer or len(run) >= self.snapshot_batch_records):
                self.append(partition, run, producer=run_producer)
                run = []
            run_producer = producer
            run.append(kv)
        if run:
            self.append(partition, run, producer=run_producer)
        if checkpoint:
            # The new start is checkpointed, and the old records' segments deleted: the
            # restatement must be on disk first, or a power loss could keep neither (a one-off
            # fsync at start-up, on the loop before anything is served).
            pl.flush()
        self.replicas.delete_records_before(pl, start, checkpoint=checkpoint)
        self._held[partition] = len(live)
        log.info("%s-%d: %d live record(s) rewritten, log start offset now %d", self.topic,
                 partition, len(live), start)
        return start

    def strict(self) -> bool:
        """True if answers must wait for fsync (``log.flush.strict``)."""
        return self.replicas.strict_durability

    async def durable(self, marks: Iterable[AppendMark | None]) -> None:
        """With ``log.flush.strict=true``: return once the marked appends are fsynced."""
        if not self.replicas.strict_durability:
            return
        if self._metadata_unsynced:  # the topic was created lazily: its record must be durable
            await self.controller.sync_metadata()
            self._metadata_unsynced = False
        await self.replicas.coordinator_durable(marks)
