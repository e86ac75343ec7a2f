"""Which ``__consumer_offsets`` partition holds a group: Kafka's own rule, so a group's data
would sit in the same partition number as on Apache Kafka."""

from __future__ import annotations

from snakka.util.java import java_string_hash


def offsets_partition(group_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode()) % partitions (abs maps MIN_VALUE to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
