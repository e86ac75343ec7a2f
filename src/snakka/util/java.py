"""Java's hashing, where Kafka's behaviour depends on it: ``String.hashCode`` (which partition
of ``__consumer_offsets`` / ``__transaction_state`` holds a group or transactional id) and the
iteration order of a ``java.util.HashSet<String>`` (the order Kafka's controller processes the
topics of a CreatePartitions, a client-metrics subscription's metric prefixes).

One home, so the rule is written once and tested once (tests/groups/test_offsets.py,
tests/unit/test_telemetry_core.py against values computed by a JVM).
"""

from __future__ import annotations

from collections.abc import Iterable


def java_string_hash_unsigned(s: str) -> int:
    """Java's ``String.hashCode`` over UTF-16 code units, as an unsigned 32-bit value (a lone
    surrogate counts as its code unit, as in Java)."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFF_FFFF
    return h


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` as a signed 32-bit int."""
    h = java_string_hash_unsigned(s)
    return h - (1 << 32) if h & 0x8000_0000 else h


def java_hash_set_order(items: Iterable[str], set_size: int | None = None) -> tuple[str, ...]:
    """The iteration order of a ``java.util.HashSet<String>`` that ``items`` were added to in
    this order: by bucket of the final table (HashMap's ``hash ^ (hash >>> 16)`` over a
    capacity of 16 doubled past a 0.75 load), within a bucket in insertion order (HashMap keeps
    it through resizes). A bucket of 8 or more in a table of 64 or more becomes a tree, whose
    iteration moves its root first: not modelled (8 names in one bucket).

    ``set_size``: how many names the set held if ``items`` are only some of them (the table's
    capacity follows the whole set): the order of just those, without hashing the others."""
    unique = list(dict.fromkeys(items))
    capacity = 16
    while max(len(unique), set_size or 0) > capacity * 3 // 4:
        capacity *= 2

    def bucket(item: str) -> int:
        h = java_string_hash_unsigned(item)
        return (h ^ (h >> 16)) & (capacity - 1)

    return tuple(sorted(unique, key=bucket))  # stable: insertion order within a bucket
