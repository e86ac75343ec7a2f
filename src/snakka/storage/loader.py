"""Start-up recovery of one partition directory (Kafka's LogLoader).

What this module owns
    Turning a partition directory into the pieces a log is built from:

    * completing a log cleaner swap a crash interrupted (:mod:`.cleaner.swap`), then
      removing leftovers of interrupted operations (``.deleted``, ``.cleaned``, ``.swap``,
      ``.tmp`` files) and index files whose ``.log`` is gone;
    * opening every segment: segments at or after the checkpointed recovery point (after
      an unclean shutdown) are fully recovered (every batch's header and CRC32C checked,
      both indexes rebuilt, a torn or corrupt tail truncated, the segments after a
      truncation point deleted); older ones are opened trust-but-verify (indexes loaded and
      checked, rebuilt from the ``.log`` if anything is off);
    * the log start offset (the checkpoint, but never below the first segment, and an empty
      log at the checkpoint when the data that survived ends before it);
    * the producer-state snapshots ``NNNNNNNNNNNNNNNNNNNN.snapshot`` and rebuilding producer
      state from the latest good snapshot plus the batch headers after it
      (:func:`rebuild_producer_state`, also used by truncation).

    :meth:`LogLoader.load` returns a :class:`LoadedLog`: the segments, offsets and a count
    of what recovery did, for the log line and for tests. It never builds a
    :class:`~snakka.storage.unified_log.UnifiedLog` itself, so recovery can be tested on a
    directory alone.

Why a module of its own
    Recovery is the code that runs once per partition at start-up and must never be wrong;
    keeping it apart from the append/read paths keeps both readable, and it is where tiered
    storage changes the rules (with a remote part, the log start offset is the checkpoint
    even below the first local segment, as Kafka's ``isRemoteLogEnabled`` branch).

Threading
    Runs on whatever thread opens the log (the event loop at start-up, a worker thread for
    topic creation), before anything else can see the log.
"""

from __future__ import annotations

import logging
import os
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from snakka.limits import SNAPSHOTS_KEPT
from snakka.records.batch import LOG_OVERHEAD, BatchHeader, RecordValidationError
from snakka.records.control import EndTxnMarker, read_end_txn_marker
from snakka.txn.producer_state import ProducerStateManager

from .cleaner.swap import SWAP_SUFFIX, complete_interrupted_swaps
from .config import LogConfig
from .index import AbortedTxn
from .local_log import check_segment_order, create_segment, unlink_if_present
from .segment import LogSegment, ScanStop

log = logging.getLogger("snakka.storage")


_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")
_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")


def snapshot_filename(offset: int) -> str:
    return f"{offset:020d}.snapshot"


def snapshot_offsets(dir_path: str, names: Iterable[str] | None = None) -> list[int]:
    """Offsets of the producer-state snapshots in a partition directory, ascending.
    ``names``: the directory's listing when the caller already has it (start-up lists each
    partition directory once and hands the names to every check)."""
    out = []
    for name in os.listdir(dir_path) if names is None else names:
        m = _SNAPSHOT_RE.match(name)
        if m:
            out.append(int(m.group(1)))
    out.sort()
    return out


class LoadedLog(NamedTuple):
    """What :meth:`LogLoader.load` found and did."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    next_offset: int  # the log end offset
    segments_recovered: int  # fully re-scanned (CRC checked, indexes rebuilt)
    indexes_rebuilt: int  # below the recovery point, but their indexes were unusable
    bytes_truncated: int  # torn / corrupt tail removed
    segments_deleted: int  # after a truncation point, or before a checkpointed log start
    producer_batches_replayed: int  # batch headers read to rebuild producer state

    @property
    def did_recovery_work(self) -> bool:
        return bool(self.indexes_rebuilt or self.bytes_truncated or self.segments_deleted)


class LogLoader:
    """Loads one partition directory; see the module docstring.

    ``recover`` is False after a clean shutdown (and for a new log): then segments are
    only opened trust-but-verify and the recovery point is the log end.
    ``producer_state`` is filled from snapshots + log (it must be empty)."""

    def __init__(
        self,
        dir_path: str,
        config: LogConfig,
        *,
        recover: bool,
        recovery_point: int,
        log_start_offset: int,
        producer_state: ProducerStateManager,
        time_ms: Callable[[], int],
        names: list[str] | None = None,
    ) -> None:
        self.dir_path = os.path.abspath(dir_path)
        # The directory's listing if the caller has just made it (LogManager.load_all): one
        # listdir per partition feeds every check below instead of one each.
        self._names = names
        self.name = os.path.basename(self.dir_path)
        self.config = config
        self.recover = recover
        self.recovery_point_checkpoint = recovery_point
        self.log_start_offset_checkpoint = log_start_offset
        self.producer_state = producer_state
        self._time_ms = time_ms

    def _new_segment(self, base_offset: int) -> LogSegment:
        # Only ever called once the directory holds no segment: _segment_bases has removed
        # every index file without its .log, so none of this base offset is left to delete.
        return create_segment(self.dir_path, self.config, base_offset, self._time_ms(),
                              stale_indexes=False)

    def _segment_bases(self) -> list[int]:
        """Base offsets of the ``.log`` files, after removing leftovers and orphan
        indexes."""
        # A cleaner swap interrupted by a crash is completed first (its .log.swap replaces
        # the segments it covers); what is left of other interrupted operations is swept.
        names = self._names if self._names is not None else os.listdir(self.dir_path)
        if any(n.endswith(SWAP_SUFFIX) for n in names):
            complete_interrupted_swaps(self.dir_path, self.name)
            names = os.listdir(self.dir_path)
        bases = []
        removed = set()
        for name in names:
            m = _SEGMENT_RE.match(name)
            if m:
                bases.append(int(m.group(1)))
            elif name.endswith(_LEFTOVER_SUFFIXES):
                log.info("partition %s: removing leftover file %s", self.name, name)
                unlink_if_present(os.path.join(self.dir_path, name))
                removed.add(name)
        bases.sort()
        have = set(bases)
        for name in names:  # index files whose .log is gone (Kafka deletes them too)
            stem, _, ext = name.partition(".")
            if ext in ("index", "timeindex", "txnindex") and stem.isdigit() and int(stem) not in have:
                log.info("partition %s: removing orphan index file %s", self.name, name)
                unlink_if_present(os.path.join(self.dir_path, name))
                removed.add(name)
        self._names = [n for n in names if n not in removed] if removed else list(names)
        return bases

    def load(self) -> LoadedLog:
        """Open and recover the directory's segments and rebuild producer state."""
        bases = self._segment_bases()
        now = self._time_ms()
        cfg = self.config
        segments = [
            LogSegment.open(
                self.dir_path,
                b,
                index_interval_bytes=cfg.index_interval_bytes,
                max_index_size=cfg.segment_index_bytes,
                now_ms=now,
            )
            for b in bases
        ]
        recovered = rebuilt = truncated_total = deleted = 0
        first_recover = len(segments)
        if self.recover and segments:
            first_recover = max(0, bisect_right(bases, self.recovery_point_checkpoint) - 1)
        present = frozenset(self._names or ())
        i = 0
        while i < len(segments):
            seg = segments[i]
            min_next = seg.base_offset if i == 0 else max(seg.base_offset, segments[i - 1].next_offset)
            if i >= first_recover:
                truncated, reason = seg.recover(min_next)
                recovered += 1
                log.debug("partition %s: recovered segment %d", self.name, seg.base_offset)
            elif seg.load(min_next):
                truncated, reason = 0, None
                if seg.size == 0:
                    # Its index files, if listed, are the empty files a clean close left
                    # (trusted like any index below the recovery point): nothing to rewrite.
                    seg.adopt_empty_index_files(present)
            else:
                log.warning(
                    "partition %s: rebuilding indexes of segment %d from the log: %s",
                    self.name,
                    seg.base_offset,
                    seg.load_problem,
                )
                truncated, reason = seg.recover(min_next)
                rebuilt += 1
            if truncated:
                truncated_total += truncated
                log.warning(
                    "recovered partition %s: truncated %d bytes at offset %d (%s)",
                    self.name,
                    truncated,
                    seg.next_offset,
                    reason,
                )
                for later in segments[i + 1 :]:
                    log.warning(
                        "recovered partition %s: deleted segment %d (%d bytes) after the "
                        "truncation point",
                        self.name,
                        later.base_offset,
                        later.size,
                    )
                    later.close()
                    later.delete_files()
                    deleted += 1
                del segments[i + 1 :]
            i += 1

        for seg in segments[:-1]:
            seg.on_become_inactive()  # rebuilt time indexes end with the segment's max
        if not segments:
            segments = [self._new_segment(max(0, self.log_start_offset_checkpoint))]
        leo = segments[-1].next_offset
        log_start = max(self.log_start_offset_checkpoint, segments[0].base_offset)
        if self.config.remote_storage_enable and 0 <= self.log_start_offset_checkpoint < log_start:
            # Tiered (KIP-405): the offsets below the first local segment are in remote
            # storage, so the checkpointed start stands (Kafka's UnifiedLog keeps it when
            # remote storage is enabled); the remote log manager raises it if the remote
            # part turns out to begin later.
            log_start = self.log_start_offset_checkpoint
        if log_start > leo:
            # The checkpointed start is past the data that survived (e.g. an unflushed
            # tail was lost): like Kafka, start an empty log at the checkpointed offset.
            log.warning(
                "partition %s: log start offset %d is beyond the log end %d; starting an "
                "empty log at %d",
                self.name,
                log_start,
                leo,
                log_start,
            )
            for seg in segments:
                seg.close()
                seg.delete_files()
                deleted += 1
            segments = [self._new_segment(log_start)]
            leo = log_start
        check_segment_order(segments)
        recovery_point = min(self.recovery_point_checkpoint, leo) if self.recover else leo
        _start, replayed = rebuild_producer_state(
            self.producer_state, self.dir_path, self.name, segments, leo, self._time_ms(),
            names=self._names,
        )
        return LoadedLog(
            segments=segments,
            log_start_offset=log_start,
            recovery_point=recovery_point,
            next_offset=leo,
            segments_recovered=recovered,
            indexes_rebuilt=rebuilt,
            bytes_truncated=truncated_total,
            segments_deleted=deleted,
            producer_batches_replayed=replayed,
        )


def rebuild_producer_state(
    psm: ProducerStateManager,
    dir_path: str,
    name: str,
    segments: Sequence[LogSegment],
    log_end_offset: int,
    now_ms: int,
    *,
    names: Iterable[str] | None = None,
) -> tuple[int, int]:
    """Reset ``psm`` to the latest good snapshot at or below ``log_end_offset``, then
    replay the batch headers up to the end (snapshots past the end are deleted, unreadable
    ones skipped and deleted). Returns (offset the replay started at, batches replayed).
    Used at load and after truncation (Kafka's UnifiedLog.rebuildProducerState).

    The replay also refills the aborted-transaction index of every replayed segment from
    its ABORT markers (entries already present are kept). A segment whose txn index was
    emptied by recovery (``txn_index_stale``) must be replayed from a state that knows
    the transactions open at its base, so the replay then starts at a snapshot at or below
    that segment (or at the first segment)."""
    psm.truncate()
    leo = log_end_offset
    snaps = snapshot_offsets(dir_path, names)
    for off in snaps:
        if off > leo:
            unlink_if_present(os.path.join(dir_path, snapshot_filename(off)))
    limit = leo
    for seg in segments:
        if seg.txn_index_stale:
            limit = min(limit, seg.base_offset)
            break
    start = None
    for off in reversed([o for o in snaps if o <= limit]):
        path = os.path.join(dir_path, snapshot_filename(off))
        try:
            with open(path, "rb") as f:
                psm.load_snapshot_bytes(f.read(), off)
            start = off
            break
        except (OSError, ValueError) as exc:
            log.warning("partition %s: ignoring producer snapshot %s: %s", name, path, exc)
            unlink_if_present(path)
    first_base = segments[0].base_offset
    start = first_base if start is None else max(start, first_base)
    replayed = 0
    for seg in segments:
        if seg.next_offset <= start:
            continue
        pos = seg.find_batch(start)[0] if start > seg.base_offset else 0
        stop = ScanStop()
        for bpos, h in seg.scan(pos, verify_crc=False, min_next_offset=0, stop=stop):
            replayed += 1
            if h.producer_id < 0:
                continue
            last = h.base_offset + h.last_offset_delta
            if not h.is_control:
                psm.update(h, h.base_offset, last, now_ms)
                continue
            marker = _read_marker(seg, bpos, h, name)
            if marker is None:
                psm.update(h, h.base_offset, last, now_ms)
                continue
            done = psm.completed_txn(h.producer_id, last, not marker.commit)
            if done is not None and done.is_aborted and last > seg.txn_index.last_offset:
                seg.update_txn_index(
                    AbortedTxn(
                        done.producer_id,
                        done.first_offset,
                        done.last_offset,
                        psm.last_stable_offset_after(done),
                    )
                )
            psm.update(h, h.base_offset, last, now_ms, marker.coordinator_epoch)
    for seg in segments:
        seg.txn_index_stale = False
    psm.map_end_offset = leo
    if replayed:
        log.info(
            "partition %s: rebuilt producer state from offset %d (%d batches, %d producers)",
            name,
            start,
            replayed,
            len(psm.producers),
        )
    return start, replayed


def _read_marker(seg: LogSegment, pos: int, h: BatchHeader, name: str) -> EndTxnMarker | None:
    """The COMMIT/ABORT marker of the control batch at ``pos`` (None if unreadable or of
    another control type, logged: the batch passed recovery, so this is unexpected)."""
    data = seg.read(pos, h.batch_length + LOG_OVERHEAD)
    try:
        return read_end_txn_marker(data, 0, h)
    except RecordValidationError as exc:
        log.error("partition %s: unreadable control batch at offset %d: %s", name,
                  h.base_offset, exc)
        return None


def write_producer_snapshot(
    dir_path: str, offset: int, data: bytes, *, sync: bool = False
) -> str:
    """Write a producer-state snapshot for ``offset`` atomically (temp file + rename) and
    keep only the newest :data:`SNAPSHOTS_KEPT`. Returns its path."""
    path = os.path.join(dir_path, snapshot_filename(offset))
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    for off in snapshot_offsets(dir_path)[:-SNAPSHOTS_KEPT]:
        unlink_if_present(os.path.join(dir_path, snapshot_filename(off)))
    return path


__all__ = [
    "SNAPSHOTS_KEPT",
    "LoadedLog",
    "LogLoader",
    "rebuild_producer_state",
    "snapshot_filename",
    "snapshot_offsets",
    "write_producer_snapshot",
]
