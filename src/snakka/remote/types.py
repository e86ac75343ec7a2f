"""The values of tiered storage that every part shares (Kafka's KIP-405 types).

Frozen dataclasses, no I/O. Names and state ids are Kafka's
(``org.apache.kafka.server.log.remote.storage``): the state ids are what
``__remote_log_metadata`` records carry, so they never change.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from enum import IntEnum


class RemoteLogSegmentState(IntEnum):
    """A remote segment's lifecycle (Kafka's RemoteLogSegmentState, ids as stored).

    COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED ->
    DELETE_SEGMENT_FINISHED; COPY_SEGMENT_STARTED -> DELETE_SEGMENT_STARTED cleans up a copy
    that never finished. Only COPY_SEGMENT_FINISHED segments are readable."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


# Kafka's RemoteLogSegmentState.isValidTransition.
VALID_SEGMENT_TRANSITIONS: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset({
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED}),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset({
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED}),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset({
        RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


class RemotePartitionDeleteState(IntEnum):
    """A deleted topic partition's remote data (Kafka's RemotePartitionDeleteState)."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


class IndexType(IntEnum):
    """The per-segment files besides the log (Kafka's RemoteStorageManager.IndexType)."""

    OFFSET = 0
    TIMESTAMP = 1
    PRODUCER_SNAPSHOT = 2
    TRANSACTION = 3
    LEADER_EPOCH = 4


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """One copy of one segment: a fresh uuid per copy attempt, so a retried copy never
    overwrites the objects of an earlier attempt."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate(cls, tp: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(tp, uuid.uuid4())


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """What is known of one remote segment (Kafka's RemoteLogSegmentMetadata).

    ``end_offset`` is the segment's last offset (inclusive); ``segment_leader_epochs`` maps
    each leader epoch to its first offset in the segment; ``custom_metadata`` is the storage
    manager's own (here: the checksum of the segment's manifest), at most
    ``remote.log.metadata.custom.metadata.max.bytes``."""

    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]  # (epoch, start offset), epoch order
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    txn_index_empty: bool = False

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition

    def create_with_update(self, update: RemoteLogSegmentMetadataUpdate
                           ) -> RemoteLogSegmentMetadata:
        """This metadata after ``update`` (the caller checks the transition is legal)."""
        return dataclasses.replace(
            self, state=update.state, event_timestamp_ms=update.event_timestamp_ms,
            broker_id=update.broker_id,
            custom_metadata=(update.custom_metadata if update.custom_metadata is not None
                             else self.custom_metadata))


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    broker_id: int
    custom_metadata: bytes | None = None


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """What the copier hands the storage manager for one closed segment (Kafka's
    LogSegmentData): paths of the local files, read by the storage manager while the
    segment cannot be deleted (the copier holds it), and the leader-epoch checkpoint's
    bytes (Kafka's text format, truncated to the segment)."""

    log_segment: str
    offset_index: str
    time_index: str
    transaction_index: str | None  # None when the segment has no aborted transactions
    producer_snapshot_index: str
    leader_epoch_index: bytes
