"""Durable share-partition state in ``__share_group_state`` (Kafka's share coordinator, on one node).

What it owns
    The internal topic ``__share_group_state`` (``share.coordinator.state.topic.num.partitions``
    partitions, fixed once created) and, in memory, the latest durable :class:`SharePartitionState` of
    every share-partition (group, topic id, partition) that has one. The share-partition for a
    key lives in partition ``abs(hash("group:topicId:partition")) % partitions``, as Kafka.

Records (Kafka 4.0's ShareSnapshot / ShareUpdate, :mod:`snakka.share.records`)
    A ShareSnapshot restates the whole state of a share-partition (start offset, state epoch,
    batches); a ShareUpdate is a delta applied on top of the state before it
    (``share.partition.apply_delta``, as Kafka's ShareCoordinatorShard merges one through
    PersisterStateBatchCombiner: its batches overlaid, batches before its start offset
    dropped). A ShareUpdate holds no state epoch, so a delta that changes it (a
    re-initialisation) or is older than it (stale, ignored) is written as a snapshot of the
    resulting state instead. After ``share.coordinator.snapshot.update.records.per.snapshot``
    updates of one key (Kafka's default 500) the next write is a snapshot, so replaying one key
    never applies more than that many deltas. SnapshotEpoch counts a key's snapshots from 0
    (Kafka's rule; a ShareUpdate carries the epoch of the snapshot it builds on); LeaderEpoch is
    the data partition's leader epoch, which the share-partition leader writes in Kafka.

    Deleting a share-partition's state (its group was deleted) cannot be a tombstone: Kafka 4.0's
    ShareCoordinatorShard replays a null value as a ShareSnapshot and fails the load (4.1 added
    tombstones). It is a ShareSnapshot with StartOffset -1 and no batches, what Kafka's share
    coordinator answers for a share-partition it has no state for (its share-partition then
    starts from ``share.auto.offset.reset``), which replay here reads as "no state". Tombstones
    of a later Kafka are read as deletions too.

    The topic is kept small by snapshot-and-trim (CoordinatorLog): a trim rewrites one snapshot
    per live key. A data directory of an older snakka holds JSON records: replay still reads
    them, and every partition that had one is restated once in Kafka's format at start-up
    (:meth:`snakka.coordinator_log.CoordinatorLog.restate`, logged, crash-safe).

Replay happens once at start-up (:meth:`SharePersister.load`), before the broker accepts
connections; share-partitions are then built lazily from :meth:`read` on first use.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from snakka.config import broker_default_int
from snakka.coordinator_log import JSON_SERDE, AppendMark, CoordinatorLog, KeyValue
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.primitives import uuid_to_base64
from snakka.share.records import (
    NO_START_OFFSET,
    SHARE_STATE_SERDE,
    SNAPSHOT,
    SNAPSHOT_EPOCH_MODULUS,
    STATE_KEY,
    UPDATE,
)
from snakka.share.types import SharePartitionState, StateBatch

if TYPE_CHECKING:
    from collections.abc import Callable

    from snakka.controller import Controller
    from snakka.replica.manager import ReplicaManager

log = logging.getLogger("snakka.share")

SHARE_STATE_TOPIC = "__share_group_state"
DEFAULT_PARTITIONS = broker_default_int("share.coordinator.state.topic.num.partitions")
DEFAULT_UPDATES_PER_SNAPSHOT = broker_default_int(
    "share.coordinator.snapshot.update.records.per.snapshot")
DEFAULT_SEGMENT_BYTES = broker_default_int("share.coordinator.state.topic.segment.bytes")

# (group id, topic id, partition index)
StateKey = tuple[str, uuid.UUID, int]

# The logical record of a deleted state (module doc): Kafka's "no state" snapshot.
_DELETED_START = NO_START_OFFSET


def encode_state(kind: str, state: SharePartitionState, *, snapshot_epoch: int = 0,
                 leader_epoch: int = 0) -> dict:
    d: dict = {"type": kind, "snapshot_epoch": snapshot_epoch, "leader_epoch": leader_epoch,
               "start_offset": state.start_offset,
               "batches": [[b.first_offset, b.last_offset, int(b.delivery_state),
                            b.delivery_count] for b in state.batches]}
    if kind == SNAPSHOT:
        d["state_epoch"] = state.state_epoch
    return d


def decode_state(value: dict, base: SharePartitionState | None = None) -> SharePartitionState:
    """The state (a snapshot) or delta (an update) of a record's value; an update's start offset
    -1 and its missing state epoch are the base's."""
    start = int(value["start_offset"])
    if start == NO_START_OFFSET and base is not None and value.get("type") == UPDATE:
        start = base.start_offset
    default_epoch = base.state_epoch if base is not None else 0
    return SharePartitionState(
        start_offset=start, state_epoch=int(value.get("state_epoch", default_epoch)),
        batches=tuple(StateBatch(int(f), int(last), int(s), int(c))
                      for f, last, s, c in value.get("batches", ())))


def _is_empty(state: SharePartitionState) -> bool:
    """True for the "no state" snapshot (module doc)."""
    return state.start_offset == _DELETED_START and not state.batches


def _record_key(key: StateKey) -> tuple:
    group, topic_id, partition = key
    return (STATE_KEY, group, str(topic_id), partition)


class SharePersister:
    def __init__(self, controller: Controller, replicas: ReplicaManager,
                 time_ms: Callable[[], int], *, partitions: int = DEFAULT_PARTITIONS,
                 updates_per_snapshot: int = DEFAULT_UPDATES_PER_SNAPSHOT,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 on_rolled_back: Callable[[StateKey], None] | None = None) -> None:
        self.replicas = replicas
        # Told of every key rolled back to its durable state (the manager drops what it loaded).
        self.on_rolled_back = on_rolled_back
        self.updates_per_snapshot = max(1, updates_per_snapshot)
        # Created on the first share-group write: brokers without share groups do not pay for
        # its partitions.
        # Not compacted (Kafka's is cleanup.policy=delete too, compression.type=producer): a
        # key's ShareUpdate deltas all matter, so the latest record per key is not its state;
        # snapshot-and-trim keeps it small (module doc), which retention must never undercut.
        # Kafka 4.0 leaves retention at the broker default (7 days) and loses a share-partition
        # untouched that long (4.1 re-snapshots cold partitions); snakka keeps it for ever.
        self.log = CoordinatorLog(controller, replicas, time_ms, SHARE_STATE_TOPIC, partitions,
                                  topic_configs={"retention.ms": "-1", "retention.bytes": "-1",
                                                 "cleanup.policy": "delete",
                                                 "compression.type": "producer",
                                                 "segment.bytes": str(segment_bytes)},
                                  lazy=True, serde=SHARE_STATE_SERDE, legacy_serde=JSON_SERDE)
        self._states: dict[StateKey, SharePartitionState] = {}
        self._updates: dict[StateKey, int] = {}  # updates since the key's last snapshot
        # The SnapshotEpoch of the key's last snapshot (kept after a deletion: it only grows).
        self._snapshot_epochs: dict[StateKey, int] = {}
        self._by_partition: dict[int, set[StateKey]] = {}
        self._partition_of: dict[StateKey, int] = {}  # cache of _partition()

    # -- start-up ------------------------------------------------------------------------
    async def load(self) -> int:
        """Replay the topic if it exists; returns the number of records read."""
        from snakka.share.partition import apply_delta

        await self.log.open()
        n = 0
        for p, rkey, value in self.log.replay():
            n += 1
            if len(rkey) != 4 or rkey[0] != STATE_KEY:
                continue
            try:
                key: StateKey = (str(rkey[1]), uuid.UUID(rkey[2]), int(rkey[3]))
                if value is None:  # a later Kafka's deletion
                    self._forget(key)
                    continue
                if value.get("type") == SNAPSHOT:
                    self._snapshot_epochs[key] = int(value.get("snapshot_epoch", 0))
                base = self._states.get(key)
                state = decode_state(value, base)
                if value.get("type") == UPDATE and base is not None:
                    self._states[key] = apply_delta(base, state)
                    self._updates[key] = self._updates.get(key, 0) + 1
                else:  # a snapshot (an update without a base restates what it has)
                    self._states[key] = state
                    self._updates[key] = 0
                self._by_partition.setdefault(p, set()).add(key)
                self._partition_of[key] = p
            except (KeyError, TypeError, ValueError) as e:
                log.warning("%s-%d: bad share-state record %r skipped: %s", SHARE_STATE_TOPIC, p,
                            rkey, e)
        # A "no state" snapshot (snakka's deletion; Kafka's first record of a share-partition)
        # is a base for the updates after it, as in Kafka, but no state of its own.
        for key in [k for k, st in self._states.items() if _is_empty(st)]:
            self._forget(key)
        log.info("share-group state loaded: %d record(s), %d share-partition(s)", n,
                 len(self._states))
        self._migrate()
        return n

    def _migrate(self) -> None:
        """Restate every partition that held JSON records in Kafka's format (module doc)."""
        legacy = sorted(self.log.legacy_partitions)
        if not legacy:
            return
        log.info("%s: %d partition(s) hold snakka's old JSON records; rewriting them in Kafka's "
                 "record format", SHARE_STATE_TOPIC, len(legacy))
        for p in legacy:
            self.log.restate(p, self._live_records(p))

    def _live_records(self, p: int) -> list[KeyValue]:
        """One snapshot per live key of partition ``p`` (a trim or a migration)."""
        keys = sorted(self._by_partition.get(p, set()), key=lambda k: (k[0], str(k[1]), k[2]))
        out: list[KeyValue] = []
        for k in keys:
            self._updates[k] = 0
            out.append((_record_key(k), self._snapshot_value(k, self._states[k])))
        return out

    # -- reads ---------------------------------------------------------------------------
    def read(self, key: StateKey) -> SharePartitionState | None:
        return self._states.get(key)

    def keys(self) -> list[StateKey]:
        return list(self._states)

    def keys_of_group(self, group_id: str) -> list[StateKey]:
        return [k for k in self._states if k[0] == group_id]

    def groups(self) -> set[str]:
        return {k[0] for k in self._states}

    # -- writes --------------------------------------------------------------------------
    def write_snapshot(self, key: StateKey, state: SharePartitionState) -> AppendMark | None:
        p = self._partition(key)
        saved = self._save([key])
        record = self._stage_snapshot(key, state)
        return self._append_or_roll_back(p, [record], saved)

    def write_delta(self, key: StateKey, delta: SharePartitionState) -> AppendMark | None:
        return self.write_deltas([(key, delta)])[0]

    def write_deltas(self, items: Iterable[tuple[StateKey, SharePartitionState]]
                     ) -> list[AppendMark | None]:
        """Write the deltas of one request: one append per ``__share_group_state`` partition."""
        by_partition: dict[int, list[tuple[StateKey, SharePartitionState]]] = {}
        for key, delta in items:
            by_partition.setdefault(self._partition(key), []).append((key, delta))
        marks = []
        for p, pairs in by_partition.items():
            saved = self._save([k for k, _d in pairs])
            records = [self._stage_delta(k, d) for k, d in pairs]
            marks.append(self._append_or_roll_back(p, records, saved))
        return marks

    # -- write failures ------------------------------------------------------------------
    # A write that fails (ENOSPC, EIO, EMFILE) must leave nothing in memory that is not in the
    # log: the persister restores its own staged state, and the share-partitions it covers are
    # unloaded so that SharePartitionManager.get rebuilds them from the durable state on next
    # use (Kafka's SharePartition rolls back the state transitions of a failed persister write).
    # The request gets COORDINATOR_NOT_AVAILABLE, which is what Kafka's SharePartition answers
    # when its persister write fails (the share coordinator's NOT_COORDINATOR for a storage
    # error, seen through the persister).

    def _save(self, keys: list[StateKey]) -> list[tuple[StateKey, SharePartitionState | None, int | None]]:
        return [(k, self._states.get(k), self._updates.get(k)) for k in keys]

    def _append_or_roll_back(self, p: int, records: list[KeyValue],
                             saved: list[tuple[StateKey, SharePartitionState | None, int | None]]
                             ) -> AppendMark | None:
        try:
            return self._append(p, records)
        except OSError as exc:
            self._roll_back(saved)
            log.error("%s-%d: cannot write %d share-state record(s), rolled back to the durable "
                      "state: %s", SHARE_STATE_TOPIC, p, len(records), exc)
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"Share-group state could not be written: {exc}") from exc

    def _roll_back(self, saved: list[tuple[StateKey, SharePartitionState | None, int | None]]) -> None:
        for key, state, updates in saved:
            if state is None:
                self._forget(key)
            else:
                self._set(key, state)
                self._updates[key] = updates or 0
            if self.on_rolled_back is not None:
                self.on_rolled_back(key)

    def _snapshot_value(self, key: StateKey, state: SharePartitionState) -> dict:
        """A ShareSnapshot of ``state``: the key's next SnapshotEpoch (0 for its first)."""
        prev = self._snapshot_epochs.get(key)
        epoch = 0 if prev is None else (prev + 1) % SNAPSHOT_EPOCH_MODULUS
        self._snapshot_epochs[key] = epoch
        return encode_state(SNAPSHOT, state, snapshot_epoch=epoch,
                            leader_epoch=self._leader_epoch(key))

    def _stage_snapshot(self, key: StateKey, state: SharePartitionState) -> KeyValue:
        self._updates[key] = 0
        self._set(key, state)
        return _record_key(key), self._snapshot_value(key, state)

    def _stage_delta(self, key: StateKey, delta: SharePartitionState) -> KeyValue:
        from snakka.share.partition import apply_delta

        base = self._states.get(key)
        if (base is None or self._updates.get(key, 0) + 1 >= self.updates_per_snapshot
                or delta.state_epoch != base.state_epoch):
            # No base (first write), enough deltas, or a state epoch a ShareUpdate cannot
            # carry (module doc): restate the whole state instead.
            return self._stage_snapshot(key, delta if base is None else apply_delta(base, delta))
        self._updates[key] = self._updates.get(key, 0) + 1
        self._set(key, apply_delta(base, delta))
        return _record_key(key), encode_state(
            UPDATE, delta, snapshot_epoch=self._snapshot_epochs.get(key, 0),
            leader_epoch=self._leader_epoch(key))

    def _leader_epoch(self, key: StateKey) -> int:
        return self.replicas.leader_epoch(key[1], key[2])

    def delete(self, key: StateKey) -> AppendMark | None:
        if key not in self._states:
            return None
        p = self._partition(key)
        saved = self._save([key])
        gone = SharePartitionState(_DELETED_START, self._states[key].state_epoch)
        record = (_record_key(key), self._snapshot_value(key, gone))
        self._forget(key)
        try:
            mark = self.log.append(p, [record])
        except OSError as exc:
            for k, state, updates in saved:  # still there, as the log says
                if state is not None:
                    self._set(k, state)
                    self._updates[k] = updates or 0
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"Share-group state could not be deleted: {exc}") from exc
        try:
            self._maybe_trim(p)
        except OSError as exc:
            log.warning("%s-%d: snapshot-and-trim failed (retried on a later write): %s",
                        SHARE_STATE_TOPIC, p, exc)
        return mark

    async def durable(self, marks: list[AppendMark | None]) -> None:
        await self.log.durable(marks)

    def strict(self) -> bool:
        return self.log.strict()

    # -- internals -----------------------------------------------------------------------
    def _partition(self, key: StateKey) -> int:
        p = self._partition_of.get(key)
        if p is None:
            group, topic_id, partition = key
            p = self.log.partition_for(f"{group}:{uuid_to_base64(topic_id)}:{partition}")
            self._partition_of[key] = p
        return p

    def _set(self, key: StateKey, state: SharePartitionState) -> None:
        self._states[key] = state
        self._by_partition.setdefault(self._partition(key), set()).add(key)

    def _append(self, p: int, records: list[KeyValue]) -> AppendMark | None:
        mark = self.log.append(p, records)
        try:
            trimmed = self._maybe_trim(p)
        except OSError as exc:  # the records are written; only the rewrite failed
            log.warning("%s-%d: snapshot-and-trim failed (retried on a later write): %s",
                        SHARE_STATE_TOPIC, p, exc)
            return mark
        if trimmed:
            pl = self.replicas.get_log(SHARE_STATE_TOPIC, p)
            mark = (pl, pl.log_end_offset) if pl is not None else mark
        return mark

    def _forget(self, key: StateKey) -> None:
        self._states.pop(key, None)
        self._updates.pop(key, None)
        self._snapshot_epochs.pop(key, None)
        self._by_partition.get(self._partition(key), set()).discard(key)
        self._partition_of.pop(key, None)

    def _maybe_trim(self, p: int) -> bool:
        keys = self._by_partition.get(p, set())
        return self.log.maybe_trim(p, len(keys), lambda: self._live_records(p))
