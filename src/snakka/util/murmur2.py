"""Kafka's default partitioner hash: murmur2 of the key bytes, as the Java client computes it.

Used so that ``snakka produce`` puts a keyed record in the same partition a Java or
kafka-python producer would (librdkafka's default, consistent_random, uses CRC32 instead).
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """32-bit murmur2 as in org.apache.kafka.common.utils.Utils.murmur2 (signed result)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    tail = 4 * n4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """Kafka's toPositive(murmur2(key)) % numPartitions."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
