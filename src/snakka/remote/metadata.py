"""Remote log metadata, sans I/O: the records of ``__remote_log_metadata``, their pinning to a
metadata partition, and the per-partition state they build (Kafka's RemoteLogMetadataCache).

What this module owns (no sockets, no files, no clock: the topic-backed manager in
:mod:`snakka.remote.metadata_manager` does the I/O around it):

- **The serde** of Kafka's four records (``RemoteLogMetadataSerde``), byte for byte as Kafka
  writes them in the values of ``__remote_log_metadata``: a frame of unsigned varints (frame
  version 1, the record's api key, its version), then the record in its flexible encoding
  (codecs generated from Kafka's schemas: :mod:`snakka.protocol.internal.storage`). Api keys:
  0 segment metadata, 1 segment update, 2 partition delete, 3 segment snapshot. Anything else
  (frame version, api key, record version, trailing bytes, a truncated record) is a
  :class:`RemoteLogMetadataSerdeError` naming what was wrong: the manager logs and skips such a
  record, so a newer broker's record never stops an older one from starting.
- :func:`metadata_partition`: Kafka's RemoteLogMetadataTopicPartitioner, so that a partition's
  events land where Kafka would put them (checked against Kafka 4.0: topic id
  ``QAwrm_yyTwOIgHHbJilSdw`` partition 0 -> 25 of 50).
- :class:`RemoteLogMetadataCache`: one user partition's remote segments, with Kafka's
  semantics: a segment enters as COPY_SEGMENT_STARTED, moves only along legal transitions
  (:data:`snakka.remote.types.VALID_SEGMENT_TRANSITIONS`; a self transition is an idempotent
  retry, as Kafka's ``isValidTransition``), leaves at DELETE_SEGMENT_FINISHED. Reads go through
  a per-leader-epoch index of COPY_SEGMENT_FINISHED segments (start offset -> segment), so a
  lookup by (epoch, offset) finds the readable copy even when a later leader uploaded an
  overlapping one; the highest copied offset per epoch never goes down (deleting a segment does
  not mean its offsets need copying again).
- :class:`RemotePartitionMetadataStore`: the caches of every user partition plus the partition
  delete states (DELETE_PARTITION_FINISHED forgets the partition), fed with decoded events in log
  order; and :meth:`RemotePartitionMetadataStore.restate`, the events that rebuild the live state
  of some partitions from nothing. The manager appends them and moves the metadata partition's
  log start past everything older (snapshot-and-trim): replaying either the old records followed
  by the restatement, or the restatement alone, gives the same state, so a crash at any point
  of a trim is harmless.

Why the restatement uses the plain records and not Kafka's RemoteLogSegmentMetadataSnapshotRecord:
that record carries no topic partition (Kafka kept it in a per-partition snapshot file), so in a
shared topic it cannot say whose segment it is; restated records are also what Kafka's own
manager would replay correctly. The snapshot record is still decoded (and skipped by the store).
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

from snakka.protocol.errors import DecodeError
from snakka.protocol.internal.storage import RECORDS
from snakka.protocol.internal.storage import remote_log_segment_metadata_record as seg_mod
from snakka.protocol.internal.storage import (
    remote_log_segment_metadata_snapshot_record as snap_mod,
)
from snakka.protocol.internal.storage import (
    remote_log_segment_metadata_update_record as upd_mod,
)
from snakka.protocol.internal.storage import remote_partition_delete_metadata_record as del_mod
from snakka.protocol.primitives import read_uvarint, write_uvarint
from snakka.remote.types import (
    VALID_SEGMENT_TRANSITIONS,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from snakka.util.murmur2 import murmur2

log = logging.getLogger("snakka.remote.metadata")

__all__ = [
    "FRAME_VERSION", "RemoteLogMetadata", "RemoteLogMetadataCache",
    "RemoteLogMetadataSerdeError", "RemoteLogSegmentMetadataSnapshot",
    "RemotePartitionMetadataStore", "deserialize", "is_valid_transition", "metadata_partition",
    "serialize",
]

#: The frame version Kafka's AbstractApiMessageSerde writes (0 was KRaft's 2.8 preview).
FRAME_VERSION = 1
API_KEY_SEGMENT = 0
API_KEY_SEGMENT_UPDATE = 1
API_KEY_PARTITION_DELETE = 2
API_KEY_SEGMENT_SNAPSHOT = 3


class RemoteLogMetadataSerdeError(ValueError):
    """A ``__remote_log_metadata`` value that cannot be decoded (what was wrong is the text)."""


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """Kafka's RemoteLogSegmentMetadataSnapshot: a segment's metadata without its partition
    (api key 3). Decoded and encoded for compatibility; never applied (see module doc)."""

    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    state: RemoteLogSegmentState
    custom_metadata: bytes | None = None
    txn_index_empty: bool = False


RemoteLogMetadata: TypeAlias = (RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate
                                | RemotePartitionDeleteMetadata
                                | RemoteLogSegmentMetadataSnapshot)


# -- partitioner -------------------------------------------------------------------------------

def _java_long_hash(v: int) -> int:
    """Java's Long.hashCode: (int)(v ^ (v >>> 32)), as an unsigned 32-bit value."""
    u = v & 0xFFFFFFFFFFFFFFFF
    return (u ^ (u >> 32)) & 0xFFFFFFFF


def metadata_partition(tp: TopicIdPartition, num_partitions: int) -> int:
    """The ``__remote_log_metadata`` partition of ``tp`` (Kafka's
    RemoteLogMetadataTopicPartitioner): ``toPositive(murmur2(int32 big-endian of
    Objects.hash(topicId.lsb, topicId.msb, partition))) % num_partitions``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    as_int = tp.topic_id.int
    msb, lsb = as_int >> 64, as_int & 0xFFFFFFFFFFFFFFFF
    h = 1  # java.util.Objects.hash over (Long lsb, Long msb, Integer partition)
    for element in (_java_long_hash(lsb), _java_long_hash(msb), tp.partition & 0xFFFFFFFF):
        h = (31 * h + element) & 0xFFFFFFFF
    return (murmur2(h.to_bytes(4, "big")) & 0x7FFFFFFF) % num_partitions


# -- serde -------------------------------------------------------------------------------------

def _tp_entry(cls: Any, tp: TopicIdPartition) -> Any:
    return cls(name=tp.topic, id=tp.topic_id, partition=tp.partition)


def _record_of(md: RemoteLogMetadata) -> Any:
    """The generated record for one event (the fields Kafka's transforms set)."""
    if isinstance(md, RemoteLogSegmentMetadata):
        sid = md.segment_id
        return seg_mod.RemoteLogSegmentMetadataRecord(
            remote_log_segment_id=seg_mod.RemoteLogSegmentIdEntry(
                topic_id_partition=_tp_entry(seg_mod.TopicIdPartitionEntry,
                                             sid.topic_id_partition),
                id=sid.id),
            start_offset=md.start_offset, end_offset=md.end_offset, broker_id=md.broker_id,
            max_timestamp_ms=md.max_timestamp_ms, event_timestamp_ms=md.event_timestamp_ms,
            segment_leader_epochs=[seg_mod.SegmentLeaderEpochEntry(leader_epoch=e, offset=o)
                                   for e, o in sorted(md.segment_leader_epochs)],
            segment_size_in_bytes=md.segment_size_in_bytes,
            custom_metadata=md.custom_metadata, remote_log_segment_state=int(md.state),
            txn_index_empty=md.txn_index_empty)
    if isinstance(md, RemoteLogSegmentMetadataUpdate):
        sid = md.segment_id
        return upd_mod.RemoteLogSegmentMetadataUpdateRecord(
            remote_log_segment_id=upd_mod.RemoteLogSegmentIdEntry(
                topic_id_partition=_tp_entry(upd_mod.TopicIdPartitionEntry,
                                             sid.topic_id_partition),
                id=sid.id),
            broker_id=md.broker_id, event_timestamp_ms=md.event_timestamp_ms,
            custom_metadata=md.custom_metadata, remote_log_segment_state=int(md.state))
    if isinstance(md, RemotePartitionDeleteMetadata):
        return del_mod.RemotePartitionDeleteMetadataRecord(
            topic_id_partition=_tp_entry(del_mod.TopicIdPartitionEntry, md.topic_id_partition),
            broker_id=md.broker_id, event_timestamp_ms=md.event_timestamp_ms,
            remote_partition_delete_state=int(md.state))
    return snap_mod.RemoteLogSegmentMetadataSnapshotRecord(
        segment_id=md.segment_id, start_offset=md.start_offset, end_offset=md.end_offset,
        broker_id=md.broker_id, max_timestamp_ms=md.max_timestamp_ms,
        event_timestamp_ms=md.event_timestamp_ms,
        segment_leader_epochs=[snap_mod.SegmentLeaderEpochEntry(leader_epoch=e, offset=o)
                               for e, o in sorted(md.segment_leader_epochs)],
        segment_size_in_bytes=md.segment_size_in_bytes, custom_metadata=md.custom_metadata,
        remote_log_segment_state=int(md.state), txn_index_empty=md.txn_index_empty)


def serialize(md: RemoteLogMetadata) -> bytes:
    """The value Kafka writes for ``md`` in ``__remote_log_metadata`` (the key is null)."""
    record = _record_of(md)
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, record.API_KEY)
    version = record.VALID_VERSIONS[1]  # Kafka writes highestSupportedVersion()
    write_uvarint(out, version)
    record.write(out, version)
    return bytes(out)


def _tp_of(entry: Any) -> TopicIdPartition:
    return TopicIdPartition(entry.id, entry.name, entry.partition)


def _segment_state(value: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(value)
    except ValueError:
        raise RemoteLogMetadataSerdeError(f"unknown remote log segment state {value}") from None


def _epochs(entries: Iterable[Any]) -> tuple[tuple[int, int], ...]:
    # Kafka reads them into a map: a repeated epoch keeps its last offset.
    by_epoch = {e.leader_epoch: e.offset for e in entries}
    return tuple(sorted(by_epoch.items()))


def deserialize(data: bytes | bytearray | memoryview) -> RemoteLogMetadata:
    """Decode one ``__remote_log_metadata`` value (raises RemoteLogMetadataSerdeError)."""
    buf = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    try:
        frame, pos = read_uvarint(buf, 0)
        api_key, pos = read_uvarint(buf, pos)
        version, pos = read_uvarint(buf, pos)
    except (IndexError, DecodeError) as exc:
        raise RemoteLogMetadataSerdeError(f"truncated record frame: {exc}") from None
    if frame != FRAME_VERSION:
        raise RemoteLogMetadataSerdeError(
            f"unknown frame version {frame} (only {FRAME_VERSION} is supported)")
    cls: Any = RECORDS.get(api_key)
    if cls is None:
        raise RemoteLogMetadataSerdeError(f"unknown remote log metadata api key {api_key}")
    lo, hi = cls.VALID_VERSIONS
    if not lo <= version <= hi:
        raise RemoteLogMetadataSerdeError(
            f"unsupported version {version} of {cls.NAME} (api key {api_key}; "
            f"supported {lo}-{hi})")
    try:
        rec, end = cls.read(buf, pos, version)
    except DecodeError as exc:
        raise RemoteLogMetadataSerdeError(f"cannot decode {cls.NAME}: {exc}") from None
    if end != len(buf):
        raise RemoteLogMetadataSerdeError(
            f"found {len(buf) - end} byte(s) of garbage after {cls.NAME}")
    if api_key == API_KEY_SEGMENT:
        sid = RemoteLogSegmentId(_tp_of(rec.remote_log_segment_id.topic_id_partition),
                                 rec.remote_log_segment_id.id)
        return RemoteLogSegmentMetadata(
            segment_id=sid, start_offset=rec.start_offset, end_offset=rec.end_offset,
            max_timestamp_ms=rec.max_timestamp_ms, broker_id=rec.broker_id,
            event_timestamp_ms=rec.event_timestamp_ms,
            segment_size_in_bytes=rec.segment_size_in_bytes,
            segment_leader_epochs=_epochs(rec.segment_leader_epochs),
            state=_segment_state(rec.remote_log_segment_state),
            custom_metadata=None if rec.custom_metadata is None else bytes(rec.custom_metadata),
            txn_index_empty=bool(rec.txn_index_empty))
    if api_key == API_KEY_SEGMENT_UPDATE:
        sid = RemoteLogSegmentId(_tp_of(rec.remote_log_segment_id.topic_id_partition),
                                 rec.remote_log_segment_id.id)
        return RemoteLogSegmentMetadataUpdate(
            segment_id=sid, event_timestamp_ms=rec.event_timestamp_ms,
            state=_segment_state(rec.remote_log_segment_state), broker_id=rec.broker_id,
            custom_metadata=None if rec.custom_metadata is None else bytes(rec.custom_metadata))
    if api_key == API_KEY_PARTITION_DELETE:
        try:
            pstate = RemotePartitionDeleteState(rec.remote_partition_delete_state)
        except ValueError:
            raise RemoteLogMetadataSerdeError(
                f"unknown remote partition delete state {rec.remote_partition_delete_state}"
            ) from None
        return RemotePartitionDeleteMetadata(
            topic_id_partition=_tp_of(rec.topic_id_partition), state=pstate,
            event_timestamp_ms=rec.event_timestamp_ms, broker_id=rec.broker_id)
    return RemoteLogSegmentMetadataSnapshot(
        segment_id=rec.segment_id, start_offset=rec.start_offset, end_offset=rec.end_offset,
        max_timestamp_ms=rec.max_timestamp_ms, broker_id=rec.broker_id,
        event_timestamp_ms=rec.event_timestamp_ms,
        segment_size_in_bytes=rec.segment_size_in_bytes,
        segment_leader_epochs=_epochs(rec.segment_leader_epochs),
        state=_segment_state(rec.remote_log_segment_state),
        custom_metadata=None if rec.custom_metadata is None else bytes(rec.custom_metadata),
        txn_index_empty=bool(rec.txn_index_empty))


# -- the cache ---------------------------------------------------------------------------------

def is_valid_transition(src: RemoteLogSegmentState | None, dst: RemoteLogSegmentState) -> bool:
    """Kafka's RemoteLogSegmentState.isValidTransition: a new segment starts as
    COPY_SEGMENT_STARTED; a self transition is a retry (idempotent); otherwise the table."""
    if src is None:
        return dst is RemoteLogSegmentState.COPY_SEGMENT_STARTED
    return src is dst or dst in VALID_SEGMENT_TRANSITIONS[src]


def _epoch_end(md: RemoteLogSegmentMetadata, epoch: int) -> int:
    """The last offset of ``epoch`` inside the segment: the next epoch's start - 1, or the
    segment's end offset."""
    for e, start in md.segment_leader_epochs:
        if e > epoch:
            return start - 1
    return md.end_offset


class _LeaderEpochState:
    """One leader epoch of one partition (Kafka's RemoteLogLeaderEpochState): start offset ->
    the COPY_SEGMENT_FINISHED copies starting there (sorted by start; per start, in the order
    they finished: the last one is read), the other segments of the epoch still tracked
    (copying, replaced, deleting), and the highest copied offset of the epoch.

    One difference from Kafka, for copies of the same offsets (a copy retried after an
    ambiguous failure): Kafka keeps only the last one in its index, so deleting it leaves the
    range unreadable although the earlier copy is still complete; here the earlier copy is read
    again. That also makes the index depend only on the live copies and the order they
    finished, which is what a restatement replays."""

    __slots__ = ("offsets", "ids", "unreferenced", "highest")

    def __init__(self) -> None:
        self.offsets: list[int] = []  # sorted start offsets of referenced segments
        self.ids: dict[int, list[RemoteLogSegmentId]] = {}  # start -> copies, last is read
        self.unreferenced: set[RemoteLogSegmentId] = set()
        self.highest: int | None = None

    def copy_started(self, sid: RemoteLogSegmentId) -> None:
        self.unreferenced.add(sid)

    def copy_finished(self, start: int, sid: RemoteLogSegmentId, epoch_end: int) -> None:
        # A later upload that covers what earlier ones did (a new leader copied a superset)
        # replaces those starting after it: they become unreferenced (still listed, so they
        # get deleted). Copies starting at the same offset stay behind it (class doc).
        while (self.offsets and self.offsets[-1] > start and self.highest is not None
               and self.highest <= epoch_end):
            last = self.offsets.pop()
            self.unreferenced.update(self.ids.pop(last))
        copies = self.ids.get(start)
        if copies is None:
            bisect.insort(self.offsets, start)
            copies = self.ids[start] = []
        copies.append(sid)
        self.unreferenced.discard(sid)
        if self.highest is None or epoch_end > self.highest:
            self.highest = epoch_end

    def delete_started(self, start: int, sid: RemoteLogSegmentId) -> None:
        copies = self.ids.get(start)
        if copies is not None and sid in copies:
            copies.remove(sid)
            if not copies:
                del self.ids[start]
                self.offsets.pop(bisect.bisect_left(self.offsets, start))
        self.unreferenced.add(sid)

    def delete_finished(self, sid: RemoteLogSegmentId) -> None:
        self.unreferenced.discard(sid)

    def referenced(self) -> list[RemoteLogSegmentId]:
        return [sid for o in self.offsets for sid in self.ids[o]]

    def floor(self, offset: int) -> RemoteLogSegmentId | None:
        i = bisect.bisect_right(self.offsets, offset)
        return self.ids[self.offsets[i - 1]][-1] if i else None


class RemoteLogMetadataCache:
    """The remote segments of one user partition (Kafka's RemoteLogMetadataCache; module doc).

    Mutations raise ValueError for an event that is not legal in the current state; the store
    that replays the log catches that, logs it and drops the event (as Kafka does), the manager
    refuses such a call before anything is written."""

    def __init__(self) -> None:
        # Every segment that did not reach DELETE_SEGMENT_FINISHED.
        self._segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self._epochs: dict[int, _LeaderEpochState] = {}
        # Arrival order of the segments and of their COPY_SEGMENT_FINISHED: the order a
        # restatement replays them in.
        self._seq = 0
        self._added: dict[RemoteLogSegmentId, int] = {}
        self._finished: dict[RemoteLogSegmentId, int] = {}
        # epoch -> the copied segment (as it was when copied) that set the epoch's highest
        # offset: a restatement needs it once that segment is deleted.
        self._highest_source: dict[int, tuple[int, RemoteLogSegmentMetadata]] = {}

    def __len__(self) -> int:
        return len(self._segments)

    def is_empty(self) -> bool:
        """No segment and no copied offset: nothing a restatement would say."""
        return not self._segments and not self._highest_source

    # -- events ----------------------------------------------------------------------------
    def check_add(self, md: RemoteLogSegmentMetadata) -> None:
        """Raise ValueError unless ``md`` may be added now."""
        if md.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"a new remote segment must be COPY_SEGMENT_STARTED, not "
                             f"{md.state.name}: {md.segment_id}")
        existing = self._segments.get(md.segment_id)
        if existing is not None and not is_valid_transition(existing.state, md.state):
            raise ValueError(f"segment {md.segment_id} is already {existing.state.name}"
                             f" (its copy cannot start again)")
        if existing is None and any(src.segment_id == md.segment_id
                                    for _seq, src in self._highest_source.values()):
            # Kafka would take a deleted segment's id again (copy ids are fresh uuids, so no
            # copier does). Refused for the deleted copy that still holds an epoch's highest
            # offset: the restatement brings it back to life and deletes it again, and a
            # second life under the same id could not be told apart from the first.
            raise ValueError(f"segment {md.segment_id} was deleted (a copy id is not reused)")

    def add_copy_in_progress_segment(self, md: RemoteLogSegmentMetadata) -> None:
        self.check_add(md)
        if md.segment_id in self._segments:  # a retry: the copy is already started
            self._segments[md.segment_id] = md
            return
        for epoch, _start in md.segment_leader_epochs:
            self._epoch(epoch).copy_started(md.segment_id)
        self._seq += 1
        self._added[md.segment_id] = self._seq
        self._segments[md.segment_id] = md

    def check_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        """The segment's metadata after ``update``; ValueError if the update is not legal."""
        if update.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError("an update cannot move a segment to COPY_SEGMENT_STARTED "
                             "(add the segment's metadata instead)")
        existing = self._segments.get(update.segment_id)
        if existing is None:
            raise ValueError(f"no remote segment {update.segment_id}")
        if not is_valid_transition(existing.state, update.state):
            raise ValueError(f"segment {update.segment_id}: {existing.state.name} cannot become"
                             f" {update.state.name}")
        return existing.create_with_update(update)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        md = self.check_update(update)
        sid = md.segment_id
        if self._segments[sid].state is md.state:
            # A retried event (Kafka accepts self transitions): its fields, not the indexes.
            # Re-running the index step would let a retry of an older copy's
            # COPY_SEGMENT_FINISHED displace a newer copy of the same offsets.
            self._segments[sid] = md
            return
        if md.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            self._seq += 1
            self._finished[sid] = self._seq
            for epoch, start in md.segment_leader_epochs:
                state = self._epoch(epoch)
                end = _epoch_end(md, epoch)
                state.copy_finished(start, sid, end)
                if state.highest == end:
                    self._highest_source[epoch] = (self._finished[sid], md)
            self._segments[sid] = md
        elif md.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            for epoch, start in md.segment_leader_epochs:
                self._epoch(epoch).delete_started(start, sid)
            self._segments[sid] = md
        else:  # DELETE_SEGMENT_FINISHED: the segment is gone
            for epoch, _start in md.segment_leader_epochs:
                self._epoch(epoch).delete_finished(sid)
            del self._segments[sid]
            self._added.pop(sid, None)
            self._finished.pop(sid, None)

    def _epoch(self, epoch: int) -> _LeaderEpochState:
        state = self._epochs.get(epoch)
        if state is None:
            state = self._epochs[epoch] = _LeaderEpochState()
        return state

    # -- reads -----------------------------------------------------------------------------
    def segments(self) -> list[RemoteLogSegmentMetadata]:
        """Every tracked segment in any state, by start offset, then event time."""
        return sorted(self._segments.values(), key=_listing_order)

    def segment(self, sid: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        return self._segments.get(sid)

    def segments_for_epoch(self, epoch: int) -> list[RemoteLogSegmentMetadata]:
        """The segments of one leader epoch (copied ones and those still tracked), by start."""
        state = self._epochs.get(epoch)
        if state is None:
            return []
        ids = state.referenced() + list(state.unreferenced)
        return sorted((self._segments[i] for i in ids if i in self._segments),
                      key=_listing_order)

    def remote_log_segment_metadata(self, leader_epoch: int, offset: int
                                    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` written in ``leader_epoch``."""
        state = self._epochs.get(leader_epoch)
        if state is None:
            return None
        sid = state.floor(offset)
        if sid is None:
            return None
        md = self._segments[sid]
        return None if offset > _epoch_end(md, leader_epoch) else md

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        state = self._epochs.get(leader_epoch)
        return None if state is None else state.highest

    def epochs(self) -> list[int]:
        return sorted(self._epochs)

    def remote_log_size(self) -> int:
        """Bytes of the COPY_SEGMENT_FINISHED segments."""
        return sum(m.segment_size_in_bytes for m in self._segments.values()
                   if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED)

    # -- restatement -----------------------------------------------------------------------
    def restate(self) -> Iterator[list[RemoteLogMetadata]]:
        """Events that rebuild this cache's observable state from nothing (module doc), in
        units: each unit is the life of one segment and must be appended atomically (one
        batch), so that replaying the old records plus any prefix of whole units changes
        nothing (a unit re-applied on top of the state it restates is a no-op overall).
        Units are built lazily (the caller may yield between them); the cache must not change
        meanwhile.

        Exact for everything one leader produces (copies in order, retried copies of the same
        offsets, deletions). Not exact in one case only several leaders produce: a copy that
        replaced overlapping copies starting after it (a new leader's superset) and was then
        deleted itself; the replaced copies, still complete, are readable again after a
        restatement."""
        finished = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        # The deleted segments that still hold an epoch's highest copied offset come back
        # whole (added, copied, deleted); then every live segment. Copied segments in the
        # order they were copied (what the per-epoch index depends on), then the segments
        # never copied, in arrival order.
        order: list[tuple[tuple[int, int], bool, RemoteLogSegmentMetadata]] = []
        seen: set[RemoteLogSegmentId] = set()
        for seq, md in self._highest_source.values():
            sid = md.segment_id
            if sid not in self._segments and sid not in seen:
                seen.add(sid)
                order.append(((0, seq), True, md))
        for sid, md in self._segments.items():
            copied = self._finished.get(sid)
            order.append(((0, copied) if copied is not None else (1, self._added[sid]),
                          False, md))
        order.sort(key=lambda x: x[0])
        for _key, gone, md in order:
            unit: list[RemoteLogMetadata] = [
                dataclasses.replace(md, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)]
            if gone:
                unit.extend(_update_to(md, state) for state in (
                    finished, RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED))
            else:
                if md.segment_id in self._finished:
                    unit.append(_update_to(md, finished))
                if md.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
                    unit.append(_update_to(md, md.state))
            yield unit


def _listing_order(md: RemoteLogSegmentMetadata) -> tuple[int, int, int]:
    # Start offset, then event time; the segment id only makes ties deterministic.
    return (md.start_offset, md.event_timestamp_ms, md.segment_id.id.int)


def _update_to(md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
               ) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.segment_id, md.event_timestamp_ms, state,
                                          md.broker_id, md.custom_metadata)


class RemotePartitionMetadataStore:
    """Every user partition's remote metadata, fed with events in log order (Kafka's
    RemotePartitionMetadataStore)."""

    def __init__(self) -> None:
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._deletes: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    def cache(self, tp: TopicIdPartition) -> RemoteLogMetadataCache | None:
        return self._caches.get(tp)

    def partitions(self) -> list[TopicIdPartition]:
        """User partitions with any metadata (segments or a delete state)."""
        tps = set(self._caches) | set(self._deletes)
        return sorted(tps, key=lambda t: (t.topic, t.partition, t.topic_id.int))

    def partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        md = self._deletes.get(tp)
        return None if md is None else md.state

    def check(self, event: RemoteLogMetadata) -> None:
        """Raise ValueError unless ``event`` is legal now (nothing changes)."""
        if isinstance(event, RemoteLogSegmentMetadata):
            self._cache_for(event.topic_id_partition, create=False).check_add(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            self._cache_for(event.segment_id.topic_id_partition, create=False).check_update(event)
        elif isinstance(event, RemoteLogSegmentMetadataSnapshot):
            raise ValueError("a segment snapshot carries no partition and is never appended")

    def _cache_for(self, tp: TopicIdPartition, *, create: bool) -> RemoteLogMetadataCache:
        cache = self._caches.get(tp)
        if cache is None:
            cache = RemoteLogMetadataCache()
            if create:
                self._caches[tp] = cache
        return cache

    def apply(self, event: RemoteLogMetadata) -> None:
        """Apply one event; ValueError (nothing changed) if it is not legal now."""
        if isinstance(event, RemoteLogSegmentMetadata):
            cache = self._cache_for(event.topic_id_partition, create=False)
            cache.add_copy_in_progress_segment(event)
            self._caches[event.topic_id_partition] = cache
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            tp = event.segment_id.topic_id_partition
            existing = self._caches.get(tp)
            if existing is None:
                raise ValueError(f"no remote segment {event.segment_id}")
            existing.update_remote_log_segment_metadata(event)
            if existing.is_empty():  # its only copies were cleaned up before they finished
                del self._caches[tp]
        elif isinstance(event, RemotePartitionDeleteMetadata):
            tp = event.topic_id_partition
            if event.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                # Everything of the partition is gone (Kafka forgets it too).
                self._caches.pop(tp, None)
                self._deletes.pop(tp, None)
            else:
                self._deletes[tp] = event
        else:
            raise ValueError("a segment snapshot carries no partition: skipped")

    def replay(self, event: RemoteLogMetadata, where: str = "") -> bool:
        """Apply an event read back from the log: an illegal one is logged and dropped (as
        Kafka's cache does). Returns whether it was applied."""
        try:
            self.apply(event)
        except ValueError as exc:
            log.warning("remote log metadata%s dropped: %s", f" at {where}" if where else "", exc)
            return False
        return True

    def restate_partition(self, tp: TopicIdPartition) -> Iterator[list[RemoteLogMetadata]]:
        """The units (see RemoteLogMetadataCache.restate) that rebuild ``tp``'s state."""
        cache = self._caches.get(tp)
        if cache is not None:
            yield from cache.restate()
        delete = self._deletes.get(tp)
        if delete is not None:
            yield [delete]

    def restate(self, tps: Iterable[TopicIdPartition]) -> Iterator[list[RemoteLogMetadata]]:
        """The units that rebuild the state of ``tps`` from nothing, partition by partition."""
        for tp in tps:
            yield from self.restate_partition(tp)
