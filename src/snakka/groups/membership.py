"""What the two assignment-based heartbeat protocols share: KIP-848 consumer groups
(:mod:`.consumer`, ConsumerGroupHeartbeat) and KIP-932 share groups (:mod:`.share_group`,
ShareGroupHeartbeat).

Both answer a heartbeat with the same response shape (:class:`HeartbeatResult`), carry
assignments as topic id -> partitions, persist them in the same record encoding, and reject a
bad request the same way (:class:`GroupRejected`, caught at the core's entry point and turned
into an error response). Kept in one public module so neither core reaches into the other's
private names.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from snakka.protocol.errors import ErrorCode

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "GroupRejected",
    "HeartbeatResult",
    "Partitions",
    "TopicPartitions",
    "decode_partitions",
    "encode_partitions",
    "partitions_to_wire",
]

#: The member epoch a heartbeat sends to leave the group (both protocols).
LEAVE_GROUP_MEMBER_EPOCH = -1

#: An assignment as the wire carries it: (topic id, sorted partitions), topics sorted.
TopicPartitions = list[tuple[uuid.UUID, list[int]]]
#: An assignment as the cores hold it.
Partitions = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat response. ``assignment`` is ``None`` when
    it is not sent (unchanged); otherwise the member's complete assignment, sorted."""

    error_code: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None


class GroupRejected(Exception):
    """A client error; carries the error code and message of the response."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def partitions_to_wire(parts: Partitions) -> TopicPartitions:
    """The wire form: topics in a stable order (by id text), partitions sorted."""
    return [(tid, sorted(parts[tid])) for tid in sorted(parts, key=str)]


def encode_partitions(parts: Partitions) -> dict[str, list[int]]:
    """The JSON form of an assignment in a group record."""
    return {str(tid): sorted(ps) for tid, ps in sorted(parts.items(), key=lambda kv: str(kv[0]))}


def decode_partitions(value: dict[str, list[int]] | None) -> Partitions:
    """Inverse of :func:`encode_partitions`; topics with no partitions are dropped."""
    return {uuid.UUID(t): frozenset(ps) for t, ps in (value or {}).items() if ps}
