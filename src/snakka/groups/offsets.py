"""Committed offsets and pending transactional offsets: commit, fetch, delete, expire and the
transaction markers that resolve them, sans-I/O (see groups.types).

Owns the committed offset of every (group, topic, partition): offset, leader epoch, metadata
string and commit time. Membership checks (generation / member epoch) are the group cores' job;
the coordinator asks them before calling :meth:`OffsetStore.commit` or
:meth:`OffsetStore.commit_transactional`.

Transactional offsets (TxnOffsetCommit, issue 11) are held per producer id as PENDING: OffsetFetch
does not see them (RequireStable reports the partition UNSTABLE_OFFSET_COMMIT instead, see
:meth:`OffsetStore.has_pending`) until the producer's COMMIT marker reaches the group's
``__consumer_offsets`` partition (:meth:`OffsetStore.complete_transaction`); they then become
the committed offsets, and an ABORT drops them. Precedence is Kafka's
(``OffsetMetadataManager.replayEndTransactionMarker``): of a pending offset and the committed
offset of the same partition, the one written LAST wins, so a plain commit made after the
TxnOffsetCommit survives the transaction's COMMIT, and one made before is replaced. Kafka compares
the records' offsets in ``__consumer_offsets``; here every offset record carries ``seq``, a
store-wide counter, and the comparison is on it. In Kafka's record format (the shell's, see
``snakka.groups.records``) seq is not stored: replay numbers the offset records in log order,
which is Kafka's comparison.

Every fact is its own key, so the latest record of a key is all a restart needs (the shell's
snapshot restates only those): ``("offset", group, topic, partition)`` for a committed offset and
``("txn_offset", group, producer_id, topic, partition)`` for a pending one. A marker is emitted as
tombstones of the pending keys plus the offsets it materialises (what the shell tracks; in
Kafka's format it writes the control marker instead of them); a marker repeated after a restart
finds nothing pending and writes nothing. Deleting a group, its offsets or a topic
drops the pending offsets too (Kafka writes an offset tombstone, which its replay applies to the
open transactions of the group).

A group with only pending offsets exists for the group APIs as an Empty group without a protocol
(:meth:`OffsetStore.has_offsets`): Kafka creates that "simple" group when it replays the
TxnOffsetCommit record. Kafka keeps it until its next cleanup after an abort; here it goes as
soon as nothing is left.

Expiry (``offsets.retention.minutes``, KIP-211): offsets of a group that has active members never
expire; once a group has no members (or for standalone consumers that commit without joining), an
offset expires ``retention`` after it was last committed. Kafka counts from the moment the group
became empty when that is later; snakka uses the commit time, which can only expire offsets of a
long-empty group earlier than Kafka would, never those of an active group. As in Kafka, a
committed offset with a pending transactional offset for its partition does not expire.

Bounds: ``offset.metadata.max.bytes`` for the metadata string (OFFSET_METADATA_TOO_LARGE). Pending
offsets exist only for partitions that exist and producers the transaction coordinator verified
(the handler's job), so they are bounded like committed offsets, by partitions x open
transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from snakka.groups.types import Clock, GroupConfig, GroupRecord
from snakka.protocol.errors import ErrorCode

KIND = "offset"
TXN_KIND = "txn_offset"

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    seq: int = 0  # write order across the store (module doc: precedence)


class OffsetStore:
    def __init__(self, config: GroupConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # producer id -> group -> partition -> pending offset (Kafka's pendingTransactionalOffsets)
        self._pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        # group -> producer ids with pending offsets in it (Kafka's openTransactionsByGroup)
        self._open: dict[str, set[int]] = {}
        self._seq = 0
        self._records: list[GroupRecord] = []

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- commands ------------------------------------------------------------------------
    def commit(self, group_id: str, entries: Iterable[tuple[str, int, int, int, str | None]]
               ) -> list[int]:
        """entries: (topic, partition, offset, leader_epoch, metadata). Returns an error code
        per entry, in order."""
        return self._commit(group_id, None, -1, entries)

    def commit_transactional(self, group_id: str, producer_id: int, producer_epoch: int,
                             entries: Iterable[tuple[str, int, int, int, str | None]]
                             ) -> list[int]:
        """TxnOffsetCommit: the entries become PENDING offsets of ``producer_id`` (module doc).
        Same entries and answers as :meth:`commit`."""
        return self._commit(group_id, producer_id, producer_epoch, entries)

    def _commit(self, group_id: str, producer_id: int | None, producer_epoch: int,
                entries: Iterable[tuple[str, int, int, int, str | None]]) -> list[int]:
        now = self.clock()
        limit = self.config.offset_metadata_max_bytes
        errors: list[int] = []
        for topic, partition, offset, leader_epoch, metadata in entries:
            md = metadata or ""
            if len(md.encode()) > limit:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            co = CommittedOffset(offset, leader_epoch, md, now, self._next_seq())
            value = _value(co)
            if producer_id is None:
                self._offsets.setdefault(group_id, {})[(topic, partition)] = co
                key: tuple[Any, ...] = (KIND, group_id, topic, partition)
            else:
                self._put_pending(group_id, producer_id, (topic, partition), co)
                key = (TXN_KIND, group_id, producer_id, topic, partition)
                value["producer_epoch"] = producer_epoch
            self._records.append(GroupRecord(key, value))
            errors.append(ErrorCode.NONE)
        return errors

    def complete_transaction(self, producer_id: int, commit: bool,
                             group_ids: Iterable[str] | None = None) -> int:
        """The COMMIT (``commit``) or ABORT marker of ``producer_id`` reached the offsets
        partition of ``group_ids`` (every group if None). Returns how many pending offsets it
        resolved; 0 for a marker with nothing pending (a repeat after a restart)."""
        by_group = self._pending.get(producer_id)
        if not by_group:
            return 0
        n = 0
        for group_id in list(by_group) if group_ids is None else list(group_ids):
            pending = by_group.get(group_id)
            if pending is None:
                continue
            for tp, po in sorted(pending.items()):
                self._records.append(GroupRecord((TXN_KIND, group_id, producer_id) + tp, None))
                n += 1
                if not commit:
                    continue
                current = self._offsets.get(group_id, {}).get(tp)
                if current is None or po.seq > current.seq:
                    self._offsets.setdefault(group_id, {})[tp] = po
                    self._records.append(GroupRecord((KIND, group_id) + tp, _value(po)))
                # else: a plain commit written after the TxnOffsetCommit stays (module doc)
            self._drop_pending(group_id, producer_id)
        return n

    def delete(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Drop the committed and the pending offsets of ``partitions``."""
        group = self._offsets.get(group_id)
        for tp in partitions:
            if group is not None and group.pop(tp, None) is not None:
                self._records.append(GroupRecord((KIND, group_id) + tp, None))
            for pid in sorted(self._open.get(group_id, ())):
                pending = self._pending[pid][group_id]
                if pending.pop(tp, None) is not None:
                    self._records.append(GroupRecord((TXN_KIND, group_id, pid) + tp, None))
                    if not pending:
                        self._drop_pending(group_id, pid)
        if group is not None and not group:
            del self._offsets[group_id]

    def delete_group(self, group_id: str) -> None:
        tps = set(self._offsets.get(group_id, {}))
        for pid in self._open.get(group_id, ()):
            tps.update(self._pending[pid][group_id])
        if tps:
            self.delete(group_id, sorted(tps))

    def delete_topic(self, topic: str) -> None:
        """A deleted topic's offsets go in every group, pending ones included (as Kafka)."""
        for group_id in sorted(set(self._offsets) | set(self._open)):
            tps = {tp for tp in self._offsets.get(group_id, {}) if tp[0] == topic}
            for pid in self._open.get(group_id, ()):
                tps.update(tp for tp in self._pending[pid][group_id] if tp[0] == topic)
            if tps:
                self.delete(group_id, sorted(tps))

    def expire(self, is_active: Callable[[str], bool]) -> int:
        """Expire offsets of inactive groups older than the retention. Returns how many. A
        partition with a pending transactional offset keeps its committed offset (Kafka)."""
        cutoff = self.clock() - self.config.offsets_retention_ms
        n = 0
        for group_id in list(self._offsets):
            if is_active(group_id):
                continue
            old = [tp for tp, co in self._offsets[group_id].items()
                   if co.commit_timestamp_ms <= cutoff and not self.has_pending(group_id, *tp)]
            group = self._offsets[group_id]
            for tp in old:
                del group[tp]
                self._records.append(GroupRecord((KIND, group_id) + tp, None))
            if not group:
                del self._offsets[group_id]
            n += len(old)
        return n

    # -- queries -------------------------------------------------------------------------
    def fetch(self, group_id: str, partitions: Iterable[TopicPartition] | None
              ) -> list[tuple[str, int, CommittedOffset | None]]:
        """The committed offsets of ``partitions`` (None for those without one), or of every
        partition the group has committed when ``partitions`` is None. Pending transactional
        offsets are not committed offsets: they are never returned."""
        group = self._offsets.get(group_id, {})
        if partitions is None:
            return [(t, p, co) for (t, p), co in sorted(group.items())]
        return [(t, p, group.get((t, p))) for t, p in partitions]

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """True if an open transaction holds a pending offset for the partition (OffsetFetch
        RequireStable answers UNSTABLE_OFFSET_COMMIT for it)."""
        return any((topic, partition) in self._pending[pid][group_id]
                   for pid in self._open.get(group_id, ()))

    def pending(self, group_id: str) -> dict[int, dict[TopicPartition, CommittedOffset]]:
        """The pending offsets of the group by producer id (admin views and tests)."""
        return {pid: dict(self._pending[pid][group_id])
                for pid in sorted(self._open.get(group_id, ()))}

    def pending_groups(self, producer_id: int) -> set[str]:
        """The groups where ``producer_id`` has pending offsets."""
        return set(self._pending.get(producer_id, ()))

    def groups(self) -> set[str]:
        """Groups that hold committed or pending offsets."""
        return set(self._offsets) | set(self._open)

    def has_offsets(self, group_id: str) -> bool:
        """True if the group holds committed or pending offsets (module doc: such a group
        exists for the group APIs even without members)."""
        return group_id in self._offsets or group_id in self._open

    # -- the sans-I/O contract -------------------------------------------------------------
    def drain_records(self) -> list[GroupRecord]:
        out, self._records = self._records, []
        return out

    def replay(self, record: GroupRecord) -> None:
        kind = record.key[0]
        if kind == KIND:
            _, group_id, topic, partition = record.key
            tp = (topic, int(partition))
            if record.value is None:
                group = self._offsets.get(group_id)
                if group is not None:
                    group.pop(tp, None)
                    if not group:
                        del self._offsets[group_id]
                return
            self._offsets.setdefault(group_id, {})[tp] = self._from_value(record.value)
        elif kind == TXN_KIND:
            _, group_id, producer_id, topic, partition = record.key
            pid, tp = int(producer_id), (topic, int(partition))
            if record.value is None:
                pending = self._pending.get(pid, {}).get(group_id)
                if pending is not None and pending.pop(tp, None) is not None and not pending:
                    self._drop_pending(group_id, pid)
                return
            self._put_pending(group_id, pid, tp, self._from_value(record.value))

    def loaded(self) -> None:
        pass

    def next_deadline(self) -> int | None:
        return None  # expiry runs on offsets.retention.check.interval.ms from the shell

    def on_timer(self, now_ms: int) -> None:
        pass

    # -- internals -----------------------------------------------------------------------
    def _from_value(self, v: dict[str, Any]) -> CommittedOffset:
        # Records written before transactions carry no seq: they are older than any pending one.
        seq = int(v.get("seq", 0))
        self._seq = max(self._seq, seq)
        return CommittedOffset(int(v["offset"]), int(v["leader_epoch"]), v["metadata"],
                               int(v["commit_timestamp_ms"]), seq)

    def _put_pending(self, group_id: str, producer_id: int, tp: TopicPartition,
                     co: CommittedOffset) -> None:
        self._pending.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = co
        self._open.setdefault(group_id, set()).add(producer_id)

    def _drop_pending(self, group_id: str, producer_id: int) -> None:
        by_group = self._pending.get(producer_id)
        if by_group is not None:
            by_group.pop(group_id, None)
            if not by_group:
                del self._pending[producer_id]
        pids = self._open.get(group_id)
        if pids is not None:
            pids.discard(producer_id)
            if not pids:
                del self._open[group_id]


def _value(co: CommittedOffset) -> dict[str, Any]:
    return {"offset": co.offset, "leader_epoch": co.leader_epoch, "metadata": co.metadata,
            "commit_timestamp_ms": co.commit_timestamp_ms, "seq": co.seq}
