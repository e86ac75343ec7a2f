"""Online migration between classic groups and KIP-848 consumer groups (KIP-848 "online
upgrade/downgrade", Kafka 4's ``GroupMetadataManager.convertToConsumerGroup`` /
``convertToClassicGroup``).

Owns the hand-over format between the two cores: :class:`MigratingGroup`, a core-neutral
snapshot of a group's members (their classic protocol metadata, sessions and current
assignment as consumer-protocol ``Assignment`` bytes), and the helpers both cores use to read
and write the embedded consumer protocol. The cores stay independent of each other: the
classic core produces a snapshot and forgets the group (a tombstone); the consumer core builds
its group from it (or the other way round), and the coordinator shell moves the snapshot
between them. Committed offsets are keyed by group id, not by group type, so they are
untouched by a conversion.

When a conversion happens (Kafka 4.0's rules, ``group.consumer.migration.policy``):

* **Upgrade** (``upgrade`` / ``bidirectional``): a ConsumerGroupHeartbeat joining (epoch 0) a
  non-empty classic group whose protocol type is ``consumer`` and whose size is at most
  ``group.consumer.max.size``. Its pending JoinGroup/SyncGroup requests are answered
  REBALANCE_IN_PROGRESS; its members become classic-protocol members of the consumer group with
  their last assignment, at member epoch = the classic generation. Otherwise the heartbeat is
  GROUP_ID_NOT_FOUND, as in Kafka. An empty classic group is simply deleted first.
* **Downgrade** (``downgrade`` / ``bidirectional``): the last member using the consumer
  protocol leaves or is fenced, at least one member remains, every remaining member uses the
  classic protocol, and they are at most ``group.max.size``. The classic group starts at
  generation = the group epoch with the members' current assignments and rebalances at once.
  A classic JoinGroup to an *empty* consumer group deletes it and creates a classic group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from snakka.protocol import consumer_protocol
from snakka.protocol.messages.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
    TopicPartition,
)

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "ClassicSide",
    "ConsumerSide",
    "MIGRATION_POLICIES",
    "MigratingGroup",
    "MigratingMember",
    "assignment_version",
    "complete_downgrades",
    "try_upgrade",
    "decode_assignment",
    "encode_assignment",
]

#: The protocol type of the embedded consumer protocol (Kafka's ConsumerProtocol.PROTOCOL_TYPE).
CONSUMER_PROTOCOL_TYPE = "consumer"
#: Values of ``group.consumer.migration.policy`` (Kafka's ConsumerGroupMigrationPolicy).
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


@dataclass(frozen=True, slots=True)
class MigratingMember:
    """One member as the group being converted held it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    #: The member's classic (name, metadata) protocols, in its order of preference.
    protocols: tuple[tuple[str, bytes], ...]
    #: Its current assignment as a consumer-protocol Assignment (b"" if none).
    assignment: bytes


@dataclass(frozen=True, slots=True)
class MigratingGroup:
    """A group handed from one core to the other. ``generation`` is the classic generation
    (upgrade) or the consumer group epoch (downgrade)."""

    group_id: str
    generation: int
    protocol_type: str
    protocol_name: str | None
    leader_id: str | None
    members: tuple[MigratingMember, ...]


def assignment_version(protocols: Any) -> int:
    """The consumer-protocol version to answer a classic member in: the version of its first
    protocol's subscription (Kafka's ``prepareAssignment``), capped at the newest we know."""
    newest = ConsumerProtocolAssignment.VALID_VERSIONS[1]
    for _name, meta in protocols:
        if len(meta) >= 2:
            return max(0, min(int.from_bytes(meta[:2], "big", signed=True), newest))
        break
    return 0


def encode_assignment(partitions: dict[str, list[int]], version: int) -> bytes:
    """A consumer-protocol Assignment (2-byte version + body) of ``topic -> partitions``."""
    body = ConsumerProtocolAssignment(
        assigned_partitions=[TopicPartition(topic=t, partitions=sorted(ps))
                             for t, ps in sorted(partitions.items()) if ps])
    return version.to_bytes(2, "big", signed=True) + body.encode(version)


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """``topic -> partitions`` of a consumer-protocol Assignment (empty bytes: nothing).
    Raises DecodeError if malformed."""
    if not data:
        return {}
    out: dict[str, list[int]] = {}
    for tp in consumer_protocol.decode_assignment(data).assigned_partitions:
        out.setdefault(tp.topic, []).extend(tp.partitions)
    return out


class ClassicSide(Protocol):
    """What the migration needs of :class:`snakka.groups.classic.ClassicGroups` (a protocol,
    so that the cores never import each other through this module)."""

    def snapshot(self, group_id: str) -> MigratingGroup | None: ...
    def convert_out(self, group_id: str) -> None: ...
    def adopt(self, snapshot: MigratingGroup) -> None: ...


class ConsumerSide(Protocol):
    """What the migration needs of :class:`snakka.groups.consumer.ConsumerGroups`."""

    def can_upgrade(self, classic: MigratingGroup) -> bool: ...
    def upgrade(self, classic: MigratingGroup) -> None: ...
    def drain_downgrades(self) -> list[MigratingGroup]: ...


def try_upgrade(classic: ClassicSide, consumer: ConsumerSide, group_id: str) -> bool:
    """Convert the non-empty classic group ``group_id`` into a consumer group if Kafka's rules
    allow it (``ConsumerGroups.can_upgrade``); False (nothing changed) otherwise."""
    snapshot = classic.snapshot(group_id)
    if snapshot is None or not consumer.can_upgrade(snapshot):
        return False
    classic.convert_out(group_id)
    consumer.upgrade(snapshot)
    return True


def complete_downgrades(consumer: ConsumerSide, classic: ClassicSide) -> int:
    """Hand every consumer group the consumer core downgraded to the classic core; returns
    how many. The shell calls this after every call into the consumer core."""
    snapshots = consumer.drain_downgrades()
    for snapshot in snapshots:
        classic.adopt(snapshot)
    return len(snapshots)
