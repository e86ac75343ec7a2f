"""One log segment: ``<base>.log`` + ``<base>.index`` + ``<base>.timeindex`` (+
``<base>.txnindex`` once a transaction is aborted in it) (Kafka's LogSegment).

What this module owns
    Appending validated batches at the end of the ``.log`` (one ``pwrite`` per append),
    maintaining the sparse indexes exactly as Kafka's LogSegment does (an entry every
    ``index.interval.bytes``), finding the batch that contains an offset, reading whole
    batches, scanning headers (with or without CRC32C checks) for recovery and index
    rebuilds, truncation, flushing (fdatasync + index files) and deletion. The
    aborted-transaction index travels with the segment (rolled, truncated, flushed,
    deleted with it); its entries need producer state, so :meth:`recover` only empties it
    and sets :attr:`LogSegment.txn_index_stale`: the loader's producer-state replay
    refills it (:func:`snakka.storage.loader.rebuild_producer_state`).

File handles
    The ``.log`` is a :class:`~snakka.storage.files.SegmentFile`: opened on first use and
    closed again when the process-wide pool (``log.max.open.files``) needs room, so an idle
    segment holds no descriptor. Every I/O call borrows the descriptor for its duration
    (pinned: never closed under it). Index files are opened only while being written (by
    :meth:`flush`/:meth:`close`).

Threading
    Everything runs on the owning partition's event-loop thread except :meth:`flush`,
    which a flush worker thread may call concurrently with :meth:`append`/reads; see
    :class:`~snakka.storage.local_log.LocalLog` for the lock discipline (the partition's
    flush lock serialises flush, truncation, close and file deletion).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Container, Iterator, Sequence

from snakka.limits import RECOVERY_CHUNK
from snakka.protocol.primitives import FileRegion
from snakka.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    HEADER_SIZE,
    INT32_MAX,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    BatchHeader,
    BatchInfo,
    parse_header,
)
from snakka.util.crc32c import crc32c

from .files import PooledRegion, SegmentFile
from .index import (
    AbortedTxn,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
    TransactionIndex,
    TxnSearchResult,
    _pwrite_all,
)

log = logging.getLogger("snakka.storage")

# baseOffset, batchLength, (skip 11: epoch, magic, crc, attributes), lastOffsetDelta,
# baseTimestamp, maxTimestamp: the 43 bytes the fetch path needs to step over batches.
_STEP = struct.Struct(">qi11xiqq")
_STEP_SIZE = _STEP.size  # 43
_STEP_CHUNK = 16 * 1024  # header walks: covers an index interval of small batches


def log_filename(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def index_filename(base_offset: int) -> str:
    return f"{base_offset:020d}.index"


def timeindex_filename(base_offset: int) -> str:
    return f"{base_offset:020d}.timeindex"


def txnindex_filename(base_offset: int) -> str:
    return f"{base_offset:020d}.txnindex"


class ScanStop:
    """Where and why a header scan stopped early (``reason`` None: clean end)."""

    __slots__ = ("position", "reason")

    def __init__(self) -> None:
        self.position = -1
        self.reason: str | None = None

    def stop(self, position: int, reason: str) -> None:
        self.position = position
        self.reason = reason


def pread_exact(fd: int, n: int, position: int) -> bytes:
    """``os.pread`` until ``n`` bytes or end of file."""
    data = os.pread(fd, n, position)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = os.pread(fd, n - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class LogSegment:
    """A segment of a partition log. ``next_offset`` is the offset after its last batch
    (``base_offset`` when empty)."""

    def __init__(
        self,
        dir_path: str,
        base_offset: int,
        file: SegmentFile,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        created_ms: int,
    ) -> None:
        self.dir_path = dir_path
        self.base_offset = base_offset
        self.path = os.path.join(dir_path, log_filename(base_offset))
        self.file = file
        self.size = 0
        self.flushed_size = 0
        self.next_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.offset_index = OffsetIndex(
            os.path.join(dir_path, index_filename(base_offset)), base_offset, max_index_size
        )
        self.time_index = TimeIndex(
            os.path.join(dir_path, timeindex_filename(base_offset)), base_offset, max_index_size
        )
        self.txn_index = TransactionIndex(
            os.path.join(dir_path, txnindex_filename(base_offset)), base_offset
        )
        # True after recover() emptied the txn index: the producer-state replay refills it.
        self.txn_index_stale = False
        self._has_control = False  # set by _rebuild_from_log: a control batch was seen
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index_entry = 0
        self.created_ms = created_ms
        self._rolling_ts: int | None = None  # first batch's maxTimestamp (Kafka's roll base)
        self._rolling_ts_known = False
        self.closed = False
        self.deleted = False
        self.load_problem = ""  # why load() refused the segment (for the recovery log line)

    # ------------------------------------------------------------ create / open

    @classmethod
    def create(
        cls,
        dir_path: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        now_ms: int,
        stale_indexes: bool = True,
    ) -> LogSegment:
        """A new empty segment (an existing file of that name is truncated). ``stale_indexes``
        False: the caller knows no index file of this base offset exists (the loader, which
        has swept the orphan indexes of its directory's listing), so the three unlinks that
        would remove them are skipped (they cost 3 of a new partition's ~16 file calls)."""
        path = os.path.join(dir_path, log_filename(base_offset))
        seg = cls(
            dir_path,
            base_offset,
            SegmentFile.create(path),
            index_interval_bytes=index_interval_bytes,
            max_index_size=max_index_size,
            created_ms=now_ms,
        )
        if stale_indexes:
            for stale in (seg.offset_index, seg.time_index, seg.txn_index):
                stale.delete_file()
        return seg

    @classmethod
    def open(
        cls,
        dir_path: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        now_ms: int,
    ) -> LogSegment:
        """An existing segment, neither opened nor read (see :meth:`load` /
        :meth:`recover`): its file is opened on first use."""
        path = os.path.join(dir_path, log_filename(base_offset))
        seg = cls(
            dir_path,
            base_offset,
            SegmentFile(path),
            index_interval_bytes=index_interval_bytes,
            max_index_size=max_index_size,
            created_ms=now_ms,
        )
        seg.size = os.stat(path).st_size
        seg.flushed_size = seg.size
        return seg

    def adopt_empty_index_files(self, present: Container[str]) -> None:
        """After :meth:`load` of an EMPTY segment: its index files named in ``present`` (the
        directory listing) are the empty files a clean close left, so the next flush has
        nothing to write for them (see ``_IndexFile.adopt_empty_file``); missing ones are
        still written by it."""
        for idx in (self.offset_index, self.time_index, self.txn_index):
            if os.path.basename(idx.path) in present:
                idx.adopt_empty_file()

    def load(self, min_next_offset: int) -> bool:
        """Trust-but-verify open after a clean shutdown (or below the recovery point):
        load the index files, check them, walk the batch headers after the last
        offset-index entry to find the end. Returns False if anything is off (missing or
        corrupt index, torn tail): the caller then runs :meth:`recover`."""
        oi = self.offset_index
        if self.size == 0:
            # An empty segment (e.g. rolled just before the shutdown) has nothing to
            # index; missing index files are normal here and get written at the next flush.
            self.next_offset = max(min_next_offset, self.base_offset)
            return True
        try:
            loaded = OffsetIndex.load(oi.path, self.base_offset, oi.max_entries * 8, self.size)
        except (CorruptIndexError, OSError) as exc:
            self.load_problem = f"offset index unusable: {exc}"
            return False
        self.offset_index = loaded
        last_off, last_pos = loaded.last_entry()
        stop = ScanStop()
        next_offset = max(min_next_offset, self.base_offset)
        max_ts = -1
        max_ts_off = -1
        first = True
        for _pos, h in self.scan(last_pos, verify_crc=False, min_next_offset=next_offset, stop=stop):
            if first and loaded.entries and not h.base_offset <= last_off:
                stop.stop(_pos, f"index entry for offset {last_off} points at batch {h.base_offset}")
                break
            first = False
            next_offset = h.base_offset + h.last_offset_delta + 1
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
                max_ts_off = next_offset - 1
        if stop.reason is not None:
            self.load_problem = f"batch at position {stop.position}: {stop.reason}"
            self.offset_index = oi
            return False
        ti = self.time_index
        try:
            tloaded = TimeIndex.load(ti.path, self.base_offset, ti.max_entries * 12, next_offset)
        except (CorruptIndexError, OSError) as exc:
            self.load_problem = f"time index unusable: {exc}"
            self.offset_index = oi
            return False
        try:
            xloaded = TransactionIndex.load(self.txn_index.path, self.base_offset, next_offset)
        except (CorruptIndexError, OSError, struct.error) as exc:
            self.load_problem = f"transaction index unusable: {exc}"
            self.offset_index = oi
            return False
        self.time_index = tloaded
        self.txn_index = xloaded
        self.next_offset = next_offset
        ts, ts_off = tloaded.last_entry()
        if ts >= max_ts:
            self.max_timestamp, self.offset_of_max_timestamp = ts, ts_off
        else:
            self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_off
        # Sparse-index bookkeeping continues from the last indexed batch.
        self.bytes_since_last_index_entry = self.size - last_pos if loaded.entries else self.size
        return True

    def recover(self, min_next_offset: int) -> tuple[int, str | None]:
        """Rebuild everything from the ``.log``: scan every batch (header sanity +
        CRC32C), rebuild both indexes, truncate the file at the first torn or corrupt
        batch. Returns (bytes truncated, reason or None)."""
        end, stop = self._rebuild_from_log(min_next_offset, verify_crc=True)
        self._recover_txn_index()
        truncated = self.size - end
        if truncated > 0:
            with self.file.borrow() as fd:
                os.ftruncate(fd, end)
            self.size = end
            self.flushed_size = min(self.flushed_size, end)
        return truncated, stop.reason

    def _recover_txn_index(self) -> None:
        """After a rebuild from the log: keep the sound prefix of the ``.txnindex`` (its
        entries below the new end; a corrupt file keeps nothing) and, if the segment holds
        control batches, mark it stale so the loader's producer-state replay appends the
        entries the file lacks. The file is written in entry order, so after a crash it
        is a prefix of the truth, or missing, or torn (corrupt)."""
        path = self.txn_index.path
        try:
            idx = TransactionIndex.load(path, self.base_offset, 1 << 62)
        except (CorruptIndexError, OSError, struct.error) as exc:
            log.warning("segment %s: rebuilding transaction index: %s", self.path, exc)
            idx = TransactionIndex(path, self.base_offset)
            idx.delete_file()  # the replay refills it; the next flush writes it anew
        idx.truncate_to_offset(self.next_offset)
        self.txn_index = idx
        self.txn_index_stale = self._has_control

    def _rebuild_from_log(self, min_next_offset: int, *, verify_crc: bool) -> tuple[int, ScanStop]:
        """Reset and rebuild the indexes, next offset and max timestamp by scanning the
        batches (indexing exactly as :meth:`append` does). Returns the end of the last
        good batch and why the scan stopped."""
        oi = self.offset_index
        ti = self.time_index
        oi.reset()
        ti.reset()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index_entry = 0
        self.next_offset = self.base_offset
        self._rolling_ts_known = False
        self._has_control = False
        stop = ScanStop()
        end = 0
        interval = self.index_interval_bytes
        for pos, h in self.scan(
            0, verify_crc=verify_crc, min_next_offset=min_next_offset, stop=stop, chunk=RECOVERY_CHUNK
        ):
            last = h.base_offset + h.last_offset_delta
            if h.attributes & CONTROL_MASK:
                self._has_control = True
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = last
            if self.bytes_since_last_index_entry > interval:
                oi.append(last, pos)
                ti.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            size = h.batch_length + LOG_OVERHEAD
            self.bytes_since_last_index_entry += size
            self.next_offset = last + 1
            end = pos + size
        return end, stop

    # ------------------------------------------------------------ append

    def append(
        self,
        buf: bytes | bytearray | memoryview,
        infos: Sequence[BatchInfo],
        first_offset: int,
        log_append_time_ms: int | None,
    ) -> None:
        """Write ``buf`` (batches already carrying their offsets) at the end of the
        segment and index them. One pwrite; per batch a few integer updates."""
        start = self.size
        f = self.file
        fd = f.pool.acquire(f)
        try:
            n = os.pwrite(fd, buf, start)
            if n != len(buf):  # short write: rare (disk full raises instead); finish it
                _pwrite_all(fd, memoryview(buf)[n:], start + n)
        finally:
            f.pool.release(f)
        interval = self.index_interval_bytes
        offset = first_offset
        max_ts = self.max_timestamp
        for info in infos:
            h = info.header
            last = offset + h.last_offset_delta
            ts = h.max_timestamp if log_append_time_ms is None else log_append_time_ms
            if ts > max_ts:
                max_ts = self.max_timestamp = ts
                self.offset_of_max_timestamp = last
            if self.bytes_since_last_index_entry > interval:
                self.offset_index.append(last, start + info.position)
                self.time_index.maybe_append(max_ts, self.offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += h.batch_length + LOG_OVERHEAD
            offset = last + 1
        if start == 0:  # first batch of the segment: what segment.ms is measured from
            self._rolling_ts_known = True
            first_ts = infos[0].header.max_timestamp
            self._rolling_ts = first_ts if log_append_time_ms is None else log_append_time_ms
        self.size = start + len(buf)
        self.next_offset = offset

    def rolling_base_timestamp(self) -> int | None:
        """The first batch's maxTimestamp (what Kafka measures ``segment.ms`` from), or
        None for an empty segment."""
        if not self._rolling_ts_known:
            self._rolling_ts_known = True
            self._rolling_ts = None
            if self.size >= HEADER_SIZE:
                head = self.read(0, HEADER_SIZE)
                if len(head) == HEADER_SIZE:
                    self._rolling_ts = parse_header(head).max_timestamp
        return self._rolling_ts

    def on_become_inactive(self) -> None:
        """Called at roll: make the time index end with the segment's max timestamp
        (Kafka's onBecomeInactiveSegment)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def index_full(self) -> bool:
        oi = self.offset_index
        ti = self.time_index
        return len(oi._buf) >= oi.max_entries * 8 or len(ti._buf) >= ti.max_entries * 12

    # ------------------------------------------------------------ transactions

    def update_txn_index(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction whose ABORT marker was appended here (Kafka's
        LogSegment.updateTxnIndex; commits are not indexed)."""
        self.txn_index.append(txn)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnSearchResult:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    # ------------------------------------------------------------ reads

    def find_batch(self, offset: int, start_position: int | None = None) -> tuple[int, int, int]:
        """Locate the first batch whose last offset is >= ``offset``.

        Returns (position, base offset, size) of that batch, or (self.size, -1, 0) when
        no batch of this segment reaches ``offset``. Starts from the offset index (or
        from ``start_position``, a known batch boundary) and walks headers, reading
        16 KiB at a time."""
        if start_position is None:
            _, pos = self.offset_index.lookup(offset)
        else:
            pos = start_position
        end = self.size
        unpack = _STEP.unpack_from
        while pos < end:
            chunk = self.read(pos, min(_STEP_CHUNK, end - pos))
            clen = len(chunk)
            rel = 0
            while rel + _STEP_SIZE <= clen:
                base, length, lod, _bts, _mts = unpack(chunk, rel)
                size = length + LOG_OVERHEAD
                if base + lod >= offset:
                    return pos + rel, base, size
                rel += size
            if rel == 0:  # cannot even parse one header: file ends mid-header
                break
            pos += rel
        return end, -1, 0

    def batch_boundary_at_or_before(self, data: bytes, data_start: int, limit: int) -> int:
        """Largest batch boundary <= ``limit`` within ``data`` (file bytes starting at
        ``data_start``, itself a boundary). Uses the offset index to skip ahead, then
        walks headers in memory."""
        b = self.offset_index.floor_position(limit)
        if b < data_start:
            b = data_start
        unpack = _STEP.unpack_from
        while b + _STEP_SIZE <= limit:
            size = unpack(data, b - data_start)[1] + LOG_OVERHEAD
            if b + size > limit:
                break
            b += size
        return b

    def read(self, position: int, n: int) -> bytes:
        f = self.file
        fd = f.pool.acquire(f)
        try:
            return pread_exact(fd, n, position)
        finally:
            f.pool.release(f)

    def region(self, position: int, n: int, next_offset: int) -> FileRegion | bytes:
        """``n`` bytes from ``position`` as a :class:`FileRegion` (sent with sendfile, never
        read into memory). The region holds its own duplicate of the descriptor, so it stays
        valid if retention deletes this segment or the file pool closes it before the bytes
        are sent. Those duplicates count in ``log.max.open.files`` (storage/files.py): when
        regions hold their share of it, or the process is out of descriptors, the bytes are
        read into memory and returned instead (the Fetch reserved that memory already)."""
        f = self.file
        pool = f.pool
        fd = pool.acquire(f)
        try:
            dup = pool.dup_for_region(fd)
            if dup is None:
                return pread_exact(fd, n, position)
        finally:
            pool.release(f)
        return PooledRegion(pool, dup, position, n, next_offset)

    def boundary_in_file(self, start: int, limit: int) -> tuple[int, int]:
        """Largest batch boundary ``b`` with ``start <= b <= limit`` (``start`` itself a
        boundary) and the base offset of the batch at ``b`` (-1 at the end of the segment),
        reading only batch headers from the file: the offset index gives a boundary at most
        ``index.interval.bytes`` before ``limit`` and the walk goes on from there (the
        zero-copy read's counterpart of :meth:`batch_boundary_at_or_before`)."""
        b = max(self.offset_index.floor_position(limit), start)
        end = self.size
        unpack = _STEP.unpack_from
        while b + _STEP_SIZE <= end:
            chunk = self.read(b, min(end - b, limit + _STEP_SIZE - b, _STEP_CHUNK))
            clen = len(chunk)
            if clen < _STEP_SIZE:
                break  # the file ends mid-header (cannot happen below self.size)
            rel = 0
            while rel + _STEP_SIZE <= clen:
                base, length, _lod, _bts, _mts = unpack(chunk, rel)
                if b + rel + length + LOG_OVERHEAD > limit:
                    return b + rel, base
                rel += length + LOG_OVERHEAD
            b += rel
        return min(b, end), -1

    def scan(
        self,
        start: int,
        *,
        verify_crc: bool,
        min_next_offset: int,
        stop: ScanStop,
        end: int | None = None,
        chunk: int = 64 * 1024,
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of each batch from ``start`` (a batch boundary) to
        ``end`` (default: file end), checking header sanity (length, magic, offsets
        increasing from ``min_next_offset``, relative offset fits an int32, the batch
        fits in the file) and, if ``verify_crc``, the CRC32C. On the first problem,
        records it in ``stop`` and ends."""
        if end is None:
            end = self.size
        pos = start
        data = b""
        data_start = start
        expected = min_next_offset
        base = self.base_offset
        while pos < end:
            rel = pos - data_start
            if rel + HEADER_SIZE > len(data):
                data = self.read(pos, min(chunk, end - pos))
                data_start = pos
                rel = 0
                if len(data) < HEADER_SIZE:
                    stop.stop(pos, f"torn tail: {end - pos} bytes too short for a batch header")
                    return
            h = parse_header(data, rel)
            size = h.batch_length + LOG_OVERHEAD
            if h.batch_length < MIN_BATCH_LENGTH:
                stop.stop(pos, f"invalid batch length {h.batch_length}")
                return
            if h.magic != MAGIC_V2:
                stop.stop(pos, f"invalid magic {h.magic}")
                return
            if pos + size > end:
                stop.stop(
                    pos,
                    f"torn tail: batch of {size} bytes at position {pos} but only "
                    f"{end - pos} bytes left",
                )
                return
            if h.base_offset < expected or h.last_offset_delta < 0:
                stop.stop(
                    pos,
                    f"batch offsets [{h.base_offset}, {h.base_offset + h.last_offset_delta}] "
                    f"do not follow offset {expected - 1}",
                )
                return
            if h.base_offset + h.last_offset_delta - base > INT32_MAX:
                stop.stop(pos, f"offset {h.base_offset} does not fit segment {base}")
                return
            if verify_crc:
                if rel + size <= len(data):
                    with memoryview(data) as mv:
                        crc = crc32c(mv[rel + ATTRIBUTES_OFFSET : rel + size])
                else:
                    whole = self.read(pos, size)
                    crc = crc32c(memoryview(whole)[ATTRIBUTES_OFFSET:]) if len(whole) == size else -1
                if crc != h.crc:
                    stop.stop(pos, f"CRC mismatch in batch at offset {h.base_offset}")
                    return
            yield pos, h
            expected = h.base_offset + h.last_offset_delta + 1
            pos += size

    # ------------------------------------------------------------ truncate

    def truncate_to_offset(self, offset: int) -> int:
        """Remove the batch containing ``offset`` and everything after it. Returns the
        number of bytes removed. Caller holds the partition's flush lock."""
        pos, _base, _size = self.find_batch(offset)
        return self.truncate_to_position(pos)

    def truncate_to_position(self, pos: int) -> int:
        removed = self.size - pos
        if removed <= 0:
            return 0
        with self.file.borrow() as fd:
            os.ftruncate(fd, pos)
        self.size = pos
        self.flushed_size = min(self.flushed_size, pos)
        # Truncation is rare: rescan the shorter segment (no CRC, the data was valid).
        self._rebuild_from_log(self.base_offset, verify_crc=False)
        self.txn_index.truncate_to_offset(self.next_offset)
        return removed

    # ------------------------------------------------------------ durability / lifecycle

    def flush(self) -> None:
        """fdatasync the .log if it grew since the last flush and write the index files
        (entries not yet written, then fsync). Caller holds the partition's flush lock."""
        if self.closed:
            return
        size = self.size
        if size != self.flushed_size:
            # A re-opened descriptor flushes the inode's dirty pages like the first one would.
            with self.file.borrow() as fd:
                os.fdatasync(fd)
            self.flushed_size = size
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.file.close()

    def delete_files(self) -> None:
        self.deleted = True
        for path in (self.path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return (
            f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset}, "
            f"max_ts={self.max_timestamp})"
        )
