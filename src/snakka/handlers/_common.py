"""Small helpers shared by handlers: partition lookup with Kafka's errors, leader epoch checks."""

from __future__ import annotations

from snakka.protocol.errors import ErrorCode

# A single broker: every partition's leader epoch is 0 forever.
LEADER_EPOCH = 0
# Kafka's "unknown" authorized-operations marker.
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def named_assignment(metadata, parts) -> list[tuple]:
    """A group member's assignment ``[(topic_id, partitions), ...]`` as
    ``[(topic_id, topic_name, sorted partitions), ...]`` for the describe APIs; topics deleted
    since the assignment was computed are left out."""
    out = []
    for tid, ps in parts:
        ti = metadata.topics_by_id.get(tid)
        if ti is not None:
            out.append((tid, ti.name, sorted(ps)))
    return out


def check_leader_epoch(current_leader_epoch: int) -> ErrorCode:
    """KIP-320 fencing: -1 means 'no check'; a newer epoch than ours is UNKNOWN_LEADER_EPOCH,
    an older one FENCED_LEADER_EPOCH."""
    if current_leader_epoch < 0 or current_leader_epoch == LEADER_EPOCH:
        return ErrorCode.NONE
    if current_leader_epoch > LEADER_EPOCH:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.FENCED_LEADER_EPOCH


def lookup_log(broker, topic: str, partition: int):
    """(log, error): UNKNOWN_TOPIC_OR_PARTITION for an unknown topic or partition index."""
    ti = broker.metadata.topics.get(topic)
    if ti is None or not 0 <= partition < ti.partitions:
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    pl = broker.partition_log(topic, partition)
    if pl is None:
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return pl, ErrorCode.NONE
