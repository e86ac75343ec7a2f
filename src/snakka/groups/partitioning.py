"""Which ``__consumer_offsets`` partition holds a group: Kafka's own rule, so a group's data
would sit in the same partition number as on Apache Kafka."""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition(group_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode()) % partitions (abs maps MIN_VALUE to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
