"""The cleaner's swap protocol: ``.cleaned`` -> ``.swap`` -> live, and its crash recovery.

What this module owns
    The files of a segment being cleaned (:class:`CleanedSegment`: ``<base>.log.cleaned``
    and its ``.index`` / ``.timeindex`` / ``.txnindex``, Kafka's formats), the swap that puts
    it in place of the segments it replaces (:func:`replace_segments`, on the log's owner
    thread under its flush lock), and the start-up repair of a swap a crash interrupted
    (:func:`complete_interrupted_swaps`, called by the loader before segments are opened).

The protocol (Kafka's replaceSegments and LogLoader swap recovery)
    1. The cleaner thread writes and fsyncs the ``.cleaned`` files.
    2. On the owner thread, if every segment of the group is still in the log: rename the
       ``.cleaned`` files to ``.swap``, the ``.log`` last (its rename is the commit point),
       fsync the directory; rename the old segments' files ``.deleted``; rename the ``.swap``
       files to their final names; open the new segment in the group's place; unlink the
       ``.deleted`` files.
    3. At start-up: a ``<base>.log.swap`` is a complete cleaned segment; every segment whose
       base offset lies in its offset range is an old one it replaces and goes; the
       ``.log.swap`` takes its final name and its indexes are rebuilt from it. Leftover
       ``.cleaned``, ``.deleted`` and index ``.swap`` files are removed by the loader's sweep
       (the old segments they belong to are intact).
    The group's last batch is always kept by the cleaner (empty if need be), so a cleaned
    segment ends exactly where its group ended and step 3 never touches the next group.

Threading
    :class:`CleanedSegment` belongs to the cleaner thread; :func:`replace_segments` runs on
    the owner thread; :func:`complete_interrupted_swaps` before the log exists.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Sequence

from snakka.records.batch import (
    CORRUPT_MESSAGE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    RecordValidationError,
    batch_crc,
    parse_header,
)

from ..files import SegmentFile
from ..index import OffsetIndex, TimeIndex, TransactionIndex, _pwrite_all
from ..local_log import LocalLog, fsync_dir, unlink_if_present
from ..segment import (
    LogSegment,
    index_filename,
    log_filename,
    timeindex_filename,
    txnindex_filename,
)

log = logging.getLogger("snakka.cleaner")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"


def segment_batches(fd: int, size: int, chunk: int, *, verify_crc: bool = True
                    ) -> Iterator[tuple[bytes, int, BatchHeader]]:
    """(buffer, position in buffer, header) of every complete batch of a segment file read
    through ``fd`` up to ``size`` bytes, ``chunk`` bytes at a time (bigger for a bigger
    batch). A torn or invalid header ends the walk (the loader would have truncated it).

    With ``verify_crc`` a batch whose CRC32C does not match raises RecordValidationError
    (CORRUPT_MESSAGE): the cleaner must not rebuild a damaged batch with a fresh, valid CRC
    (segments below the recovery point are opened without checking every CRC)."""
    pos = 0  # file position of buf[0]
    buf = b""
    rel = 0
    while pos + rel < size:
        if rel + HEADER_SIZE > len(buf):
            buf = os.pread(fd, max(chunk, HEADER_SIZE), pos + rel)
            pos, rel = pos + rel, 0
            if len(buf) < HEADER_SIZE:
                return
        h = parse_header(buf, rel)
        n = h.batch_length + LOG_OVERHEAD
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + rel + n > size:
            return
        if rel + n > len(buf):
            buf = os.pread(fd, max(chunk, n), pos + rel)
            pos, rel = pos + rel, 0
            if len(buf) < n:
                return
        if verify_crc and batch_crc(buf, rel, n) != h.crc:
            raise RecordValidationError(
                CORRUPT_MESSAGE, f"batch at offset {h.base_offset} (file position {pos + rel}) "
                "fails its CRC")
        yield buf, rel, h
        rel += n


class CleanedSegment:
    """The ``.cleaned`` files of one group being written (Kafka's cleaned LogSegment)."""

    def __init__(self, dir_path: str, base_offset: int, index_interval_bytes: int,
                 max_index_size: int) -> None:
        self.dir_path = dir_path
        self.base_offset = base_offset
        self.paths = [os.path.join(dir_path, name(base_offset) + CLEANED_SUFFIX)
                      for name in (index_filename, timeindex_filename, txnindex_filename,
                                   log_filename)]
        for p in self.paths:
            unlink_if_present(p)
        self.fd = os.open(self.paths[3], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.offset_index = OffsetIndex(self.paths[0], base_offset, max_index_size)
        self.time_index = TimeIndex(self.paths[1], base_offset, max_index_size)
        self.txn_index = TransactionIndex(self.paths[2], base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._since_index = 0
        self._pending: list[bytes | memoryview] = []
        self._pending_bytes = 0

    def append(self, data: bytes | memoryview, h: BatchHeader, max_ts: int,
               offset_of_max_ts: int) -> None:
        """One kept batch (its own offsets: gaps allowed), indexed as LogSegment does."""
        last = h.base_offset + h.last_offset_delta
        if max_ts > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_ts, offset_of_max_ts
        if self._since_index > self.index_interval_bytes:
            self.offset_index.append(last, self.size)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._since_index = 0
        n = len(data)
        self._since_index += n
        self._pending.append(data)
        self._pending_bytes += n
        self.size += n
        self.next_offset = last + 1
        if self._pending_bytes >= 1 << 20:
            self.write_pending()

    def write_pending(self) -> None:
        if self._pending:
            # All of it (a short write is possible), at the end of what is written so far.
            _pwrite_all(self.fd, b"".join(self._pending), self.size - self._pending_bytes)
            self._pending.clear()
            self._pending_bytes = 0

    def finish(self) -> None:
        """Everything on disk (fsynced): the log, then the indexes ending with the max
        timestamp (as at a roll)."""
        self.write_pending()
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.flush(sync=True)

    def as_segment(self, created_ms: int) -> LogSegment:
        """The live segment these files are once renamed to their final names, built from
        what was written (the indexes are already in memory, sizes and max timestamp known):
        the swap on the event loop reads nothing back and never rebuilds an index there."""
        d, base = self.dir_path, self.base_offset
        seg = LogSegment(d, base, SegmentFile(os.path.join(d, log_filename(base))),
                         index_interval_bytes=self.index_interval_bytes,
                         max_index_size=self.max_index_size, created_ms=created_ms)
        for index, name in ((self.offset_index, index_filename),
                            (self.time_index, timeindex_filename),
                            (self.txn_index, txnindex_filename)):
            index.path = os.path.join(d, name(base))
        seg.offset_index, seg.time_index = self.offset_index, self.time_index
        seg.txn_index = self.txn_index
        seg.size = seg.flushed_size = self.size
        seg.next_offset = self.next_offset
        seg.max_timestamp = self.max_timestamp
        seg.offset_of_max_timestamp = self.offset_of_max_timestamp
        seg.bytes_since_last_index_entry = self._since_index
        return seg

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for p in self.paths:
            unlink_if_present(p)



def _final_names(base: int) -> list[str]:
    """The group's new files, indexes first and the .log last (its rename commits)."""
    return [index_filename(base), timeindex_filename(base), txnindex_filename(base),
            log_filename(base)]


def replace_segments(local: LocalLog, group: Sequence[LogSegment],
                     cleaned: CleanedSegment) -> bool:
    """Put the cleaned segment in the place of ``group`` (Kafka's replaceSegments). Runs on
    the owner thread. False (cleaned files dropped) when the log no longer holds the group."""
    with local.flush_lock:
        current = local._segments
        ids = {id(s) for s in current}
        if local.closed or any(id(s) not in ids for s in group):
            cleaned.discard()
            return False
        d = local.dir_path
        base = cleaned.base_offset
        names = _final_names(base)
        # .cleaned -> .swap, the .log last: from its rename on, recovery completes the swap.
        for path, name in zip(cleaned.paths, names, strict=True):
            if os.path.exists(path):
                os.replace(path, os.path.join(d, name + SWAP_SUFFIX))
        fsync_dir(d)
        # The old segments' files step aside (.deleted), then the .swap files take their names.
        for seg in group:
            seg.close()
            _rename_segment_files(seg, DELETED_SUFFIX)
        for name in names:
            swap = os.path.join(d, name + SWAP_SUFFIX)
            if os.path.exists(swap):
                os.replace(swap, os.path.join(d, name))
        # No directory fsync here (the event loop waits for this function): until the final
        # names are durable a crash leaves the .log.swap, which recovery completes. The
        # cleaner thread fsyncs the directory after the swap (see Cleaner._clean_group).
        new = cleaned.as_segment(group[-1].created_ms)
        first = current.index(group[0])
        local._segments = current[:first] + [new] + current[first + len(group):]
        local._bases = [s.base_offset for s in local._segments]
        local._read_cache.clear()
        for seg in group:
            seg.delete_files()
    return True


def _rename_segment_files(seg: LogSegment, suffix: str) -> None:
    """Rename a closed segment's files (those that exist) by appending ``suffix``; the
    segment's paths follow, so its delete_files() removes the renamed files."""
    for obj, attr in ((seg, "path"), (seg.offset_index, "path"), (seg.time_index, "path"),
                      (seg.txn_index, "path")):
        old = getattr(obj, attr)
        new = old + suffix
        try:
            os.replace(old, new)
        except FileNotFoundError:
            pass
        setattr(obj, attr, new)


# ---------------------------------------------------------------- recovery (loader)

_SWAP_LOG_RE = re.compile(r"^(\d{20})\.log\.swap$")


def complete_interrupted_swaps(dir_path: str, name: str) -> int:
    """At start-up, before segments are opened: finish every swap a crash interrupted
    (Kafka's LogLoader swap recovery). A ``<base>.log.swap`` is a complete cleaned
    segment: every segment whose base offset lies in its offset range is an old one it
    replaces and is deleted; the ``.swap`` files take their final names (indexes are
    rebuilt from the log if they are missing). ``.cleaned`` and ``.deleted`` files are
    removed by the loader's leftover sweep. Returns the number of swaps completed."""
    done = 0
    for entry in sorted(os.listdir(dir_path)):
        m = _SWAP_LOG_RE.match(entry)
        if not m:
            continue
        base = int(m.group(1))
        swap_log = os.path.join(dir_path, entry)
        size = os.path.getsize(swap_log)
        end = base
        fd = os.open(swap_log, os.O_RDONLY)
        try:
            for _buf, _pos, h in segment_batches(fd, size, 1 << 20, verify_crc=False):
                end = h.base_offset + h.last_offset_delta + 1
        finally:
            os.close(fd)
        for other in os.listdir(dir_path):
            stem, dot, ext = other.partition(".")
            if (dot and stem.isdigit() and len(stem) == 20 and base <= int(stem) < max(end, base + 1)
                    and ext in ("log", "index", "timeindex", "txnindex")):
                unlink_if_present(os.path.join(dir_path, other))
        for fname in _final_names(base):
            swap = os.path.join(dir_path, fname + SWAP_SUFFIX)
            if fname.endswith(".log"):
                os.replace(swap, os.path.join(dir_path, fname))
            else:
                # The index .swap files may predate a crash mid-rename: rebuild them instead.
                unlink_if_present(swap)
        fsync_dir(dir_path)
        log.warning("partition %s: completed an interrupted cleaner swap of segment %d "
                    "(offsets %d..%d); its indexes are rebuilt from the log", name, base, base,
                    end - 1)
        done += 1
    return done
