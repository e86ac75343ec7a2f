"""Segment indexes in Kafka's on-disk formats: ``.index``, ``.timeindex``, ``.txnindex``.

What this module owns
    :class:`OffsetIndex` (8-byte entries: relative offset int32, file position int32)
    and :class:`TimeIndex` (12-byte entries: timestamp int64, relative offset int32), big
    endian, exactly Kafka's files. As in Kafka's LogSegment, an offset-index entry maps
    a batch's LAST offset to the file position where that batch starts, and a
    time-index entry maps the largest timestamp so far to the last offset of the batch
    that carried it; timestamps in the time index strictly increase.
    :class:`TransactionIndex` (34-byte entries: version int16 = 0, producerId int64,
    firstOffset int64, lastOffset int64, lastStableOffset int64) lists the transactions
    aborted by an ABORT marker in the segment, in marker order; read_committed fetches
    return them (Kafka's TransactionIndex / AbortedTxn). Like Kafka, the file exists only
    once the segment has an entry.

Design
    The index lives in memory (Python lists for ``bisect`` lookups plus a ``bytearray``
    already in file format) and is written to its file incrementally by :meth:`flush`
    (only the entries added since the last write) and at close. No mmap: the files are
    small, append-only between truncations, and a lookup is one C-level bisect.
    Kafka preallocates index files to ``segment.index.bytes``; we do not, so our files
    are always exactly ``entries * entry_size`` long (Kafka reads them fine).

    On open, :meth:`load` parses the file and sanity-checks it (size multiple of the
    entry size, monotone offsets/positions/timestamps, bounds against the .log);
    ``CorruptIndexError`` tells the segment to rebuild from the .log.

Threading
    Appends, lookups and truncation happen on the partition's event-loop thread.
    :meth:`flush` may run on a flush worker thread concurrently with appends: it
    snapshots the length of the append-only ``bytearray`` (atomic under the GIL) and
    writes that prefix; entries appended meanwhile are written by the next flush.
    Truncation must not run concurrently with a flush: the owner
    (:class:`~snakka.storage.local_log.LocalLog`) holds its flush lock for truncations.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from typing import NamedTuple, TypeVar

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")  # Kafka's AbortedTxn, version 0: 34 bytes
TXN_ENTRY_VERSION = 0


class CorruptIndexError(Exception):
    """An index file failed its sanity check; rebuild it from the log."""


_I = TypeVar("_I", bound="_IndexFile")


class _IndexFile:
    """Incremental writer of an in-memory, file-formatted index (``self._buf``)."""

    entry_size = 0

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._buf = bytearray()
        self._file_bytes = 0  # bytes of _buf known to be in the file
        self._dirty_from = 0  # first byte of _buf that differs from the file
        self._on_disk = False  # the file exists (written or loaded by us)

    @property
    def entries(self) -> int:
        return len(self._buf) // self.entry_size

    def is_full(self) -> bool:
        return len(self._buf) >= self.max_entries * self.entry_size

    @property
    def dirty(self) -> bool:
        return self._dirty_from < len(self._buf) or self._file_bytes != len(self._buf)

    def flush(self, *, sync: bool = True) -> None:
        """Write the entries not yet in the file (and fsync if ``sync``)."""
        end = len(self._buf)  # snapshot: appends after this go to the next flush
        start = min(self._dirty_from, self._file_bytes, end)
        if start == end and self._file_bytes == end and self._on_disk:
            return
        data = bytes(self._buf[start:end])
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if self._file_bytes > end or os.fstat(fd).st_size > end:
                os.ftruncate(fd, end)
            _pwrite_all(fd, data, start)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._file_bytes = end
        self._dirty_from = end
        self._on_disk = True

    def _read_file(self) -> bytes:
        with open(self.path, "rb") as f:
            data = f.read()
        self._check_size(self.path, data)
        return data

    @classmethod
    def _check_size(cls, path: str, data: bytes) -> None:
        if len(data) % cls.entry_size:
            raise CorruptIndexError(
                f"index file {path} has size {len(data)}, not a multiple of {cls.entry_size}"
            )

    @classmethod
    def from_bytes(cls: type[_I], data: bytes, base_offset: int, limit: int,
                   name: str = "<remote>") -> _I:
        """An index held in memory only (a remote segment's, fetched from object storage),
        with the same checks as ``load``: ``limit`` is what they bound entries by (the
        offset index: the .log's size; the time and transaction indexes: the segment's next
        offset); ``name`` is for messages."""
        cls._check_size(name, data)
        idx = cls._empty(name, base_offset, len(data))
        idx._parse(data, limit)
        idx._on_disk = False
        return idx

    @classmethod
    def _empty(cls: type[_I], path: str, base_offset: int, nbytes: int) -> _I:
        return cls(path, base_offset, nbytes + cls.entry_size)

    def _parse(self, data: bytes, limit: int) -> None:
        """Fill the index from file bytes (``load`` / ``from_bytes``), checking them."""
        raise NotImplementedError

    def _truncate_entries(self, n: int) -> None:
        cut = n * self.entry_size
        if cut < len(self._buf):
            del self._buf[cut:]
            self._dirty_from = min(self._dirty_from, cut)

    def adopt_empty_file(self) -> None:
        """The file exists and holds no entries (an empty segment's index after a clean
        close) and this index is empty: nothing to write until an entry is added, so a
        flush of an idle empty segment opens nothing. A longer file is still cut at the
        first flush with entries (``flush`` checks the file's size whenever it writes)."""
        if not self._buf:
            self._file_bytes = 0
            self._dirty_from = 0
            self._on_disk = True

    def delete_file(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._file_bytes = 0
        self._dirty_from = 0
        self._on_disk = False


class OffsetIndex(_IndexFile):
    """``.index``: last offset of a batch -> position of the batch in the .log."""

    entry_size = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._rel: list[int] = []
        self._pos: list[int] = []

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        self._rel.append(rel)
        self._pos.append(position)
        self._buf += _OFFSET_ENTRY.pack(rel, position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= target, else
        (base_offset, 0): the place to start scanning for ``target_offset``."""
        i = bisect_right(self._rel, target_offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def floor_position(self, position: int) -> int:
        """Largest indexed batch position <= ``position`` (0 if none): a batch
        boundary from which to walk headers."""
        i = bisect_right(self._pos, position) - 1
        return self._pos[i] if i >= 0 else 0

    def last_entry(self) -> tuple[int, int]:
        if not self._rel:
            return self.base_offset, 0
        return self.base_offset + self._rel[-1], self._pos[-1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        n = bisect_right(self._rel, offset - self.base_offset - 1)
        self._truncate(n)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at ``position`` or later."""
        n = bisect_right(self._pos, position - 1)
        self._truncate(n)

    def _truncate(self, n: int) -> None:
        del self._rel[n:]
        del self._pos[n:]
        self._truncate_entries(n)

    def reset(self) -> None:
        self._truncate(0)

    @classmethod
    def load(
        cls, path: str, base_offset: int, max_index_size: int, log_size: int
    ) -> OffsetIndex:
        idx = cls(path, base_offset, max_index_size)
        idx._parse(idx._read_file(), log_size)
        return idx

    def _parse(self, data: bytes, limit: int) -> None:
        log_size = limit  # the .log's size
        idx = self
        path = self.path
        n = len(data) // 8
        prev_rel = -1
        prev_pos = -1
        rels = idx._rel
        poss = idx._pos
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            if rel <= prev_rel or pos <= prev_pos or pos >= log_size:
                raise CorruptIndexError(
                    f"offset index {path}: entry ({rel}, {pos}) after ({prev_rel}, {prev_pos}) "
                    f"is not increasing or points past the log end {log_size}"
                )
            rels.append(rel)
            poss.append(pos)
            prev_rel, prev_pos = rel, pos
        if n > idx.max_entries:
            raise CorruptIndexError(f"offset index {path} has {n} entries > max {idx.max_entries}")
        idx._buf[:] = data
        idx._file_bytes = len(data)
        idx._dirty_from = len(data)
        idx._on_disk = True


class TimeIndex(_IndexFile):
    """``.timeindex``: max timestamp so far -> last offset of the batch carrying it."""

    entry_size = 12

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._ts: list[int] = []
        self._off: list[int] = []  # absolute offsets

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append if ``timestamp`` is larger than the last entry's (Kafka's rule)."""
        if self._ts and timestamp <= self._ts[-1]:
            return
        self._ts.append(timestamp)
        self._off.append(offset)
        self._buf += _TIME_ENTRY.pack(timestamp, offset - self.base_offset)

    def lookup(self, target_ts: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= target, else
        (-1, base_offset)."""
        i = bisect_right(self._ts, target_ts) - 1
        if i < 0:
            return -1, self.base_offset
        return self._ts[i], self._off[i]

    def last_entry(self) -> tuple[int, int]:
        if not self._ts:
            return -1, self.base_offset
        return self._ts[-1], self._off[-1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        n = len(self._off)
        while n and self._off[n - 1] >= offset:
            n -= 1
        del self._ts[n:]
        del self._off[n:]
        self._truncate_entries(n)

    def reset(self) -> None:
        self._ts.clear()
        self._off.clear()
        self._truncate_entries(0)

    @classmethod
    def load(
        cls, path: str, base_offset: int, max_index_size: int, next_offset: int
    ) -> TimeIndex:
        idx = cls(path, base_offset, max_index_size)
        idx._parse(idx._read_file(), next_offset)
        return idx

    def _parse(self, data: bytes, limit: int) -> None:
        next_offset = limit  # the segment's next offset
        idx = self
        path = self.path
        base_offset = self.base_offset
        prev_ts = None
        prev_off = -1
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            off = base_offset + rel
            if (prev_ts is not None and ts <= prev_ts) or rel < 0 or off < prev_off or off >= next_offset:
                raise CorruptIndexError(
                    f"time index {path}: entry ({ts}, {off}) after ({prev_ts}, {prev_off}) is "
                    f"not increasing or beyond the segment's next offset {next_offset}"
                )
            idx._ts.append(ts)
            idx._off.append(off)
            prev_ts, prev_off = ts, off
        if len(data) // self.entry_size > idx.max_entries:
            raise CorruptIndexError(f"time index {path} has too many entries")
        idx._buf[:] = data
        idx._file_bytes = len(data)
        idx._dirty_from = len(data)
        idx._on_disk = True


class AbortedTxn(NamedTuple):
    """One ``.txnindex`` entry: a transaction of ``producer_id`` spanning
    [first_offset, last_offset] (last_offset is the ABORT marker's offset) and the last
    stable offset once it completed (how far a read_committed reader must look)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _TXN_ENTRY.pack(TXN_ENTRY_VERSION, *self)


class TxnSearchResult(NamedTuple):
    """Aborted transactions of one segment overlapping a fetch; ``complete`` when an
    entry's last stable offset passed the upper bound (later segments cannot matter)."""

    aborted: list[AbortedTxn]
    complete: bool


class TransactionIndex(_IndexFile):
    """``.txnindex``: the aborted transactions whose ABORT marker is in the segment."""

    entry_size = _TXN_ENTRY.size

    def __init__(self, path: str, base_offset: int) -> None:
        super().__init__(path, base_offset, 1 << 62)  # no size limit (Kafka has none)
        self.txns: list[AbortedTxn] = []

    @classmethod
    def _empty(cls, path: str, base_offset: int, nbytes: int) -> TransactionIndex:
        return cls(path, base_offset)

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; its last offset must be above the previous entry's (markers are
        appended in offset order)."""
        if self.txns and txn.last_offset <= self.txns[-1].last_offset:
            raise ValueError(
                f"transaction index {self.path}: last offset {txn.last_offset} is not above "
                f"{self.txns[-1].last_offset}"
            )
        self.txns.append(txn)
        self._buf += txn.encode()

    @property
    def last_offset(self) -> int:
        """Last offset of the newest entry, or -1."""
        return self.txns[-1].last_offset if self.txns else -1

    def flush(self, *, sync: bool = True) -> None:
        if not self._buf and not self._on_disk:
            return  # as Kafka: no file until the first entry
        super().flush(sync=sync)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnSearchResult:
        """Entries overlapping [fetch_offset, upper_bound_offset) (Kafka's
        collectAbortedTxns): last offset >= fetch_offset and first offset < upper bound;
        stops as complete at the first entry whose last stable offset reaches the bound
        (nothing after it can start below the bound)."""
        out = []
        for t in self.txns:
            if t.last_offset >= fetch_offset and t.first_offset < upper_bound_offset:
                out.append(t)
            if t.last_stable_offset >= upper_bound_offset:
                return TxnSearchResult(out, True)
        return TxnSearchResult(out, False)

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose marker (last offset) is at or after ``offset``."""
        n = len(self.txns)
        while n and self.txns[n - 1].last_offset >= offset:
            n -= 1
        del self.txns[n:]
        self._truncate_entries(n)

    def reset(self) -> None:
        self.txns.clear()
        self._truncate_entries(0)

    @classmethod
    def load(cls, path: str, base_offset: int, next_offset: int) -> TransactionIndex:
        """Read and check the file (a missing file is an empty index)."""
        idx = cls(path, base_offset)
        if not os.path.exists(path):
            return idx
        idx._parse(idx._read_file(), next_offset)
        return idx

    def _parse(self, data: bytes, limit: int) -> None:
        next_offset = limit  # the segment's next offset
        idx = self
        path = self.path
        base_offset = self.base_offset
        prev_last = -1
        for version, pid, first, last, lso in _TXN_ENTRY.iter_unpack(data):
            if (
                version != TXN_ENTRY_VERSION
                or last <= prev_last
                or first > last
                or last < base_offset
                or last >= next_offset
            ):
                raise CorruptIndexError(
                    f"transaction index {path}: bad entry (version {version}, producer {pid}, "
                    f"offsets {first}..{last}) after last offset {prev_last} in a segment "
                    f"[{base_offset}, {next_offset})"
                )
            idx.txns.append(AbortedTxn(pid, first, last, lso))
            prev_last = last
        idx._buf[:] = data
        idx._file_bytes = len(data)
        idx._dirty_from = len(data)
        idx._on_disk = True


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n
