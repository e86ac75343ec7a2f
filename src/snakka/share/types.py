"""Share groups (KIP-932): the values shared by the share-partition core, the share-session cache,
the I/O shell (``share.manager``) and the group coordinator.

The split follows Kafka's: the *group coordinator* owns membership and assignment (which member
may fetch which partitions; ``groups.share_group``); the *share-partition leader* owns, per
(group, topic-partition), which records are in flight, who holds them and for how long
(``share.partition.SharePartition``, a sans-I/O core with an injected clock); the shell
(``share.manager``) reads the log, keeps share sessions, persists share-partition state in
``__share_group_state`` and wakes long polls.

Kafka's names and numeric ids are used throughout (``RecordState`` ids are the ones Kafka
persists). The wire-level values the share consumer uses too (``AcknowledgeType``, ``AckBatch``,
``AcquireMode``) live in ``snakka.protocol.share``, so the client imports nothing broker-side.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from snakka.config import broker_default_int


class RecordState(IntEnum):
    """State of an in-flight record; ids as Kafka persists them."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    """Effective limits of one share-partition (group config overrides broker defaults). The
    defaults are the broker configs' (snakka.config, one definition)."""

    record_lock_duration_ms: int = broker_default_int("group.share.record.lock.duration.ms")
    delivery_count_limit: int = broker_default_int("group.share.delivery.count.limit")
    max_record_locks: int = broker_default_int("group.share.partition.max.record.locks")


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """A log batch the shell read for a ShareFetch: offsets ``base_offset..last_offset``
    inclusive. The shell sends the bytes of every batch that overlaps an acquired range.

    ``archive``: the batch holds nothing a share consumer may get (a control batch, i.e. a
    COMMIT/ABORT marker, or under ``share.isolation.level=read_committed`` a batch of an
    aborted transaction); its offsets are ARCHIVED instead of acquired."""

    base_offset: int
    last_offset: int
    archive: bool = False


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """``AcquiredRecords`` of a ShareFetch response: offsets ``first..last`` acquired with the
    same delivery count."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A persisted run of offsets in one state (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: int  # RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    """Durable state of one share-partition: the share-partition start offset (SPSO) and the
    state batches at or after it. Records before ``start_offset`` are done; offsets at or after
    it and not covered by a batch have never been delivered. (A share *group*'s state, Empty or
    Stable, is ``snakka.groups.types.ShareGroupState``; the persister's record key keeps the
    name ``"ShareState"``, an on-disk format.)"""

    start_offset: int
    state_epoch: int = 0
    batches: tuple[StateBatch, ...] = ()


class ShareGroupListener(Protocol):
    """What the group coordinator tells the share-partition side (Kafka's ShareGroupListener).
    Registered with ``GroupCoordinator.add_share_listener``."""

    def partitions_assigned(self, group_id: str, partitions: list[tuple[uuid.UUID, int]]) -> None:
        """Partitions (topic id, index) were assigned in this group for the first time or
        again: initialise their share-partition state if none exists (``share.auto.offset.reset``
        is applied now, not at the first fetch, as Kafka 4.1+ does)."""

    def member_left(self, group_id: str, member_id: str) -> None:
        """The member left or was fenced/expired. Its acquired records are released only if it
        has no open share session: librdkafka sends its leaving heartbeat *before* its final
        ShareAcknowledge, so the session's final request (epoch -1), the connection closing or
        the acquisition locks expiring release them instead (Kafka's group coordinator never
        releases records itself)."""

    def group_deleted(self, group_id: str) -> None:
        """The share group was deleted: drop all its share-partition state (durably)."""
