"""The cleaner's key -> latest offset map, bounded by memory (Kafka's SkimpyOffsetMap).

What this module owns
    :class:`OffsetMap`: for one cleaning pass, the latest offset of every key seen in the
    dirty part of a log. Kafka keeps a flat array of (MD5 of the key, offset) slots sized from
    ``log.cleaner.dedupe.buffer.size``; we keep a dict from a 16-byte BLAKE2b digest of the key
    (as Kafka keeps MD5: the key itself may be large, the digest is what bounds memory) to the
    offset, with a capacity computed from the memory budget, so the map never grows past it.

How the memory bound is kept
    :data:`ENTRY_BYTES` is what one entry really costs in CPython 3.11, measured with
    ``tracemalloc`` while filling a dict of ``blake2b(digest_size=16)`` digests to offsets
    beyond 2**31 (the case where every offset is its own int object), at sizes from 2 000 to
    800 000 entries in steps of 7 %: the worst *peak* (which includes the moment a dict
    resize holds the old and the new table) was 173.4 bytes per entry; we round up to 176.
    ``capacity = memory_bytes // ENTRY_BYTES * load_factor`` (Kafka's
    ``log.cleaner.io.buffer.load.factor``, 0.9 by default, here a safety margin rather than
    a probing bound), and :meth:`OffsetMap.put` refuses a new key once the map holds
    ``capacity`` keys (the caller checks :attr:`OffsetMap.full` first, as Kafka's cleaner
    stops mapping when the map is full and cleans up to where it got). A test fills a map
    to capacity under tracemalloc and checks the peak stays under ``memory_bytes``.

Collisions
    Two keys with the same 128-bit digest would be treated as one key (the older record
    dropped); with 2**-128 per pair this is the risk Kafka takes with MD5, accepted.

Threading
    One map per cleaner thread; not thread-safe (no locking: it is never shared).
"""

from __future__ import annotations

from hashlib import blake2b

__all__ = ["ENTRY_BYTES", "DIGEST_BYTES", "OffsetMap", "OffsetMapFullError"]

DIGEST_BYTES = 16
# Measured bytes per entry (see the module docstring for how; a test re-checks the bound).
ENTRY_BYTES = 176


class OffsetMapFullError(Exception):
    """A new key was put into a map that already holds ``capacity`` keys."""


def key_digest(key: bytes | bytearray | memoryview) -> bytes:
    """The 16-byte digest the map stores for ``key``."""
    return blake2b(key, digest_size=DIGEST_BYTES).digest()


class OffsetMap:
    """Key -> latest offset for one cleaning pass, bounded by memory (Kafka's SkimpyOffsetMap):
    keys are stored as 16-byte digests (hashlib.blake2b digest_size=16, as Kafka keeps MD5)."""

    __slots__ = ("_map", "capacity", "latest_offset", "memory_bytes")

    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        if memory_bytes < ENTRY_BYTES:
            raise ValueError(f"offset map memory {memory_bytes} is below one entry ({ENTRY_BYTES} bytes)")
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"offset map load factor {load_factor} must be in (0, 1]")
        self.memory_bytes = memory_bytes
        self.capacity: int = int(memory_bytes // ENTRY_BYTES * load_factor)
        if self.capacity < 1:
            raise ValueError(f"offset map of {memory_bytes} bytes at load factor {load_factor} "
                             "holds no key")
        self._map: dict[bytes, int] = {}
        self.latest_offset: int = -1

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Record ``offset`` as the latest for ``key`` (offsets come in increasing order).

        Raises :class:`OffsetMapFullError` for a key not yet in a full map."""
        digest = blake2b(key, digest_size=DIGEST_BYTES).digest()
        m = self._map
        if len(m) >= self.capacity and digest not in m:
            raise OffsetMapFullError(f"offset map full ({self.capacity} keys)")
        m[digest] = offset
        self.latest_offset = offset

    def put_if_room(self, key: bytes | bytearray | memoryview, offset: int) -> bool:
        """Kafka's map-building step in one call: False (nothing put) when the map is full,
        whether or not the key is already in it (Kafka checks the size before every put);
        else :meth:`put` and True."""
        m = self._map
        if len(m) >= self.capacity:
            return False
        m[blake2b(key, digest_size=DIGEST_BYTES).digest()] = offset
        self.latest_offset = offset
        return True

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The latest offset put for ``key``; -1 when absent."""
        return self._map.get(blake2b(key, digest_size=DIGEST_BYTES).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        """Advance :attr:`latest_offset` past batches that put no key (Kafka's
        ``updateLatestOffset``: control batches, aborted data, keyless records, offset gaps)."""
        if offset > self.latest_offset:
            self.latest_offset = offset

    def clear(self) -> None:
        self._map = {}  # a new dict: clear() keeps the old table's memory
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.capacity

    @property
    def utilization(self) -> float:
        """Share of the capacity in use (Kafka's ``utilization``, for cleaner stats)."""
        return len(self._map) / self.capacity
