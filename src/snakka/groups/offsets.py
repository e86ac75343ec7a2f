"""Committed offsets: commit, fetch, delete and expire, sans-I/O (see groups.types).

Owns the committed offset of every (group, topic, partition): offset, leader epoch, metadata
string and commit time. Membership checks (generation / member epoch) are the group cores' job;
the coordinator asks them before calling :meth:`OffsetStore.commit`.

Expiry (``offsets.retention.minutes``, KIP-211): offsets of a group that has active members never
expire; once a group has no members (or for standalone consumers that commit without joining), an
offset expires ``retention`` after it was last committed. Kafka counts from the moment the group
became empty when that is later; snakka uses the commit time, which can only expire offsets of a
long-empty group earlier than Kafka would, never those of an active group.

Bounds: ``offset.metadata.max.bytes`` for the metadata string (OFFSET_METADATA_TOO_LARGE).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from snakka.groups.types import Clock, GroupConfig, GroupRecord
from snakka.protocol.errors import ErrorCode

KIND = "offset"


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


class OffsetStore:
    def __init__(self, config: GroupConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self._offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self._records: list[GroupRecord] = []

    # -- commands ------------------------------------------------------------------------
    def commit(self, group_id: str, entries: Iterable[tuple[str, int, int, int, str | None]]
               ) -> list[int]:
        """entries: (topic, partition, offset, leader_epoch, metadata). Returns an error code
        per entry, in order."""
        now = self.clock()
        limit = self.config.offset_metadata_max_bytes
        errors: list[int] = []
        group = self._offsets.setdefault(group_id, {})
        for topic, partition, offset, leader_epoch, metadata in entries:
            md = metadata or ""
            if len(md.encode()) > limit:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            co = CommittedOffset(offset, leader_epoch, md, now)
            group[(topic, partition)] = co
            self._records.append(GroupRecord((KIND, group_id, topic, partition), {
                "offset": offset, "leader_epoch": leader_epoch, "metadata": md,
                "commit_timestamp_ms": now}))
            errors.append(ErrorCode.NONE)
        if not group:
            del self._offsets[group_id]
        return errors

    def delete(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        group = self._offsets.get(group_id)
        if group is None:
            return
        for tp in partitions:
            if group.pop(tp, None) is not None:
                self._records.append(GroupRecord((KIND, group_id, tp[0], tp[1]), None))
        if not group:
            del self._offsets[group_id]

    def delete_group(self, group_id: str) -> None:
        group = self._offsets.get(group_id)
        if group:
            self.delete(group_id, list(group))

    def delete_topic(self, topic: str) -> None:
        """A deleted topic's offsets go in every group (Kafka does the same)."""
        for group_id in list(self._offsets):
            self.delete(group_id, [tp for tp in self._offsets[group_id] if tp[0] == topic])

    def expire(self, is_active: Callable[[str], bool]) -> int:
        """Expire offsets of inactive groups older than the retention. Returns how many."""
        cutoff = self.clock() - self.config.offsets_retention_ms
        n = 0
        for group_id in list(self._offsets):
            if is_active(group_id):
                continue
            old = [tp for tp, co in self._offsets[group_id].items()
                   if co.commit_timestamp_ms <= cutoff]
            self.delete(group_id, old)
            n += len(old)
        return n

    # -- queries -------------------------------------------------------------------------
    def fetch(self, group_id: str, partitions: Iterable[tuple[str, int]] | None
              ) -> list[tuple[str, int, CommittedOffset | None]]:
        """The committed offsets of ``partitions`` (None for those without one), or of every
        partition the group has committed when ``partitions`` is None."""
        group = self._offsets.get(group_id, {})
        if partitions is None:
            return [(t, p, co) for (t, p), co in sorted(group.items())]
        return [(t, p, group.get((t, p))) for t, p in partitions]

    def groups(self) -> set[str]:
        return set(self._offsets)

    def has_offsets(self, group_id: str) -> bool:
        return group_id in self._offsets

    # -- the sans-I/O contract -------------------------------------------------------------
    def drain_records(self) -> list[GroupRecord]:
        out, self._records = self._records, []
        return out

    def replay(self, record: GroupRecord) -> None:
        if record.key[0] != KIND:
            return
        _, group_id, topic, partition = record.key
        tp = (topic, int(partition))
        if record.value is None:
            group = self._offsets.get(group_id)
            if group is not None:
                group.pop(tp, None)
                if not group:
                    del self._offsets[group_id]
            return
        v = record.value
        self._offsets.setdefault(group_id, {})[tp] = CommittedOffset(
            int(v["offset"]), int(v["leader_epoch"]), v["metadata"], int(v["commit_timestamp_ms"]))

    def loaded(self) -> None:
        pass

    def next_deadline(self) -> int | None:
        return None  # expiry runs on offsets.retention.check.interval.ms from the shell

    def on_timer(self, now_ms: int) -> None:
        pass
