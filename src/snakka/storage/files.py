"""Open segment files: opened lazily, kept in a bounded LRU pool (``log.max.open.files``).

What this module owns
    The file descriptors of every segment ``.log`` in the process. Kafka keeps every segment of
    every partition open (plus mmapped indexes) and so needs a ulimit in the hundreds of
    thousands; snakka does not: a :class:`SegmentFile` opens its file on first use, and a
    process-wide :class:`FilePool` closes the least recently used files beyond its limit. An
    idle partition therefore holds no descriptor at all, and 10,000+ partitions run under the
    default ``ulimit -n`` of 1024. Re-opening an evicted file costs one ``open`` (a few
    microseconds), paid only by partitions that were idle.

Why process-wide
    ``RLIMIT_NOFILE`` is a per-process limit, so the bound that protects it is too: several
    brokers embedded in one test process share one pool. :func:`configure` sets its limit
    (``log.max.open.files``; ``-1``, the default, derives it from the soft ``RLIMIT_NOFILE``:
    a quarter of it, at least 16, leaving the rest to connections, index writes and the
    metadata log).

Pinning, and why it is safe to close under a flush thread
    Every use borrows the descriptor (:meth:`SegmentFile.borrow`): while borrowed it is pinned
    and never evicted, so an ``os.pwrite`` can never land in a descriptor number that eviction
    closed and the kernel handed to another file. The pool's lock guards the LRU order and the
    pin counts; it is held only for the ``open``/``close`` calls themselves. If every file is
    pinned the pool briefly exceeds its limit rather than block. An ``fdatasync`` on a re-opened
    descriptor flushes the file's dirty pages like the original would (the page cache belongs
    to the inode, not the descriptor).

Record sets waiting to be sent count too
    A Fetch on a plaintext listener answers large record sets with a :class:`PooledRegion`: a
    duplicate of the segment's descriptor that the connection sends with ``sendfile`` and then
    closes (storage/segment.py ``region``). A slow reader keeps its regions for as long as it
    does not read, so they are counted in the same bound: open files plus regions stay within
    ``log.max.open.files`` (a new region or file first closes idle files), and regions may hold
    at most half of it (:data:`REGION_SHARE_DIVISOR`), so the files themselves always keep the
    other half and do not thrash. Once regions hold their half, further record sets are read
    into memory instead (:meth:`FilePool.dup_for_region` answers None): that memory is what
    the Fetch reserved anyway, bounded by ``queued.max.response.bytes`` (broker-wide) and
    ``queued.max.response.bytes.per.connection``, so the slow reader costs bounded memory and
    a bounded number of descriptors, and every record still reaches it once it reads.

When the process runs out anyway
    ``open`` failing with EMFILE/ENFILE (connections took the rest of the table) evicts every
    unpinned file and retries once; if that fails too the ``OSError`` reaches the caller, which
    answers KAFKA_STORAGE_ERROR for that partition (produce) or for the request. ``dup`` for a
    region failing the same way (after the same eviction) is not an error at all: the record
    set is read into memory through the descriptor already open (one warning line per episode).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from snakka.protocol.primitives import FileRegion

log = logging.getLogger("snakka.storage")

_MIN_LIMIT = 16
# Regions (record sets waiting for sendfile) may hold at most 1/REGION_SHARE_DIVISOR of the
# pool's limit (module doc): the rest is kept for the segment files themselves.
REGION_SHARE_DIVISOR = 2
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)


def derived_limit() -> int:
    """The default ``log.max.open.files``: a quarter of the soft RLIMIT_NOFILE, at least 16."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ValueError, OSError):
        return 256
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(_MIN_LIMIT, soft // 4)


class FilePool:
    """An LRU-bounded set of open :class:`SegmentFile` descriptors (module doc)."""

    def __init__(self, limit: int | None = None) -> None:
        # Reentrant: a region's close may run from ``__del__`` (a garbage collection) on a
        # thread that already holds the lock.
        self._lock = threading.RLock()
        self._open: OrderedDict[SegmentFile, None] = OrderedDict()
        self.limit = derived_limit() if limit is None or limit < 0 else max(1, limit)
        self.opens = 0  # opens since start (tests and metrics: how often files were reopened)
        self.evictions = 0
        self.regions = 0  # region descriptors open now (record sets waiting to be sent)
        # Record sets read into memory because regions held their share, or dup failed.
        self.region_fallbacks = 0
        self._out_of_fds_logged = False

    def set_limit(self, limit: int) -> None:
        """``limit`` < 0 derives it from RLIMIT_NOFILE (``log.max.open.files=-1``)."""
        with self._lock:
            self.limit = derived_limit() if limit < 0 else max(1, limit)
            self._evict_locked(self.limit - self.regions)

    @property
    def open_count(self) -> int:
        return len(self._open)

    @property
    def max_regions(self) -> int:
        """Region descriptors allowed at once: a share of the limit (module doc)."""
        return max(1, self.limit // REGION_SHARE_DIVISOR)

    def dup_for_region(self, fd: int) -> int | None:
        """A duplicate of ``fd`` (the descriptor of a file the caller holds pinned) for a
        region, counted in the pool's bound; None when regions hold their share or the process
        is out of descriptors: the caller reads the bytes into memory instead. The duplicate
        is handed back with :meth:`region_closed`."""
        with self._lock:
            if self.regions >= self.max_regions:
                self.region_fallbacks += 1
                return None
            self._evict_locked(self.limit - self.regions - 1)
            try:
                dup = os.dup(fd)  # non-inheritable, like every descriptor Python opens
            except OSError as exc:
                if exc.errno not in _OUT_OF_FDS:
                    raise
                self._evict_locked(0)
                try:
                    dup = os.dup(fd)
                except OSError as exc2:
                    if exc2.errno not in _OUT_OF_FDS:
                        raise
                    self.region_fallbacks += 1
                    if not self._out_of_fds_logged:
                        self._out_of_fds_logged = True
                        log.warning("out of file descriptors (%s): record sets are read into "
                                    "memory instead of sent with sendfile until descriptors "
                                    "are free again", exc2)
                    return None
            if self._out_of_fds_logged:
                self._out_of_fds_logged = False
                log.info("file descriptors available again: record sets sent with sendfile")
            self.regions += 1
            return dup

    def region_closed(self) -> None:
        with self._lock:
            self.regions -= 1

    def acquire(self, f: SegmentFile) -> int:
        with self._lock:
            fd = f._fd
            if fd >= 0:
                self._open.move_to_end(f)
            else:
                self._evict_locked(self.limit - self.regions - 1)
                try:
                    fd = os.open(f.path, f.flags, 0o644)
                except OSError as exc:
                    if exc.errno not in _OUT_OF_FDS:
                        raise
                    # The process's table is full (connections, index writes): give back
                    # every idle segment file and try once more.
                    self._evict_locked(0)
                    fd = os.open(f.path, f.flags, 0o644)
                f._fd = fd
                self._open[f] = None
                self.opens += 1
            f._pins += 1
            return fd

    def release(self, f: SegmentFile) -> None:
        with self._lock:
            f._pins -= 1

    def adopt(self, f: SegmentFile, fd: int) -> None:
        """Register a descriptor the caller opened (a freshly created segment)."""
        with self._lock:
            self._evict_locked(self.limit - self.regions - 1)
            f._fd = fd
            self._open[f] = None
            self.opens += 1

    def close(self, f: SegmentFile) -> None:
        with self._lock:
            fd = f._fd
            if fd < 0:
                return
            f._fd = -1
            self._open.pop(f, None)
        os.close(fd)

    def _evict_locked(self, keep: int) -> None:
        """Close least recently used unpinned files until at most ``keep`` are open."""
        if len(self._open) <= keep:
            return
        for f in list(self._open):
            if len(self._open) <= keep:
                break
            if f._pins:
                continue
            del self._open[f]
            fd, f._fd = f._fd, -1
            self.evictions += 1
            try:
                os.close(fd)
            except OSError as exc:  # a deferred write-back error: the data was not lost here
                log.warning("closing idle segment file %s: %s", f.path, exc)


class PooledRegion(FileRegion):
    """A :class:`FileRegion` whose descriptor counts in a :class:`FilePool`'s bound: closing
    it (the connection once sent or dropped, or ``__del__``) gives the slot back."""

    __slots__ = ("pool",)

    def __init__(self, pool: FilePool, fd: int, position: int, length: int,
                 next_offset: int = -1) -> None:
        super().__init__(fd, position, length, next_offset)
        self.pool = pool

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            finally:
                self.pool.region_closed()


POOL = FilePool()


def configure(limit: int) -> FilePool:
    """Set the process-wide pool's limit (``log.max.open.files``; < 0 derives it)."""
    POOL.set_limit(limit)
    return POOL


class SegmentFile:
    """The ``.log`` of one segment: a path and, while in the pool, an open descriptor."""

    # Identity hash and equality (object's, in C): the pool's LRU dict is keyed by the file.
    __slots__ = ("path", "flags", "pool", "_fd", "_pins", "__weakref__")

    def __init__(self, path: str, pool: FilePool | None = None) -> None:
        self.path = path
        self.flags = os.O_RDWR
        self.pool = pool or POOL
        self._fd = -1
        self._pins = 0

    @classmethod
    def create(cls, path: str, pool: FilePool | None = None) -> SegmentFile:
        """Create (or truncate) the file now and keep it open: it is the active segment."""
        f = cls(path, pool)
        pool = f.pool
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            if exc.errno not in _OUT_OF_FDS:
                raise
            with pool._lock:
                pool._evict_locked(0)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        pool.adopt(f, fd)
        return f

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    @contextmanager
    def borrow(self) -> Iterator[int]:
        """The open descriptor, pinned for the ``with`` block."""
        fd = self.pool.acquire(self)
        try:
            yield fd
        finally:
            self.pool.release(self)

    def close(self) -> None:
        self.pool.close(self)
