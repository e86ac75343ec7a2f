"""One partition's log as the rest of the broker sees it (Kafka's UnifiedLog).

What this module owns
    The offsets a client can observe and the rules that move them, over a
    :class:`~snakka.storage.local_log.LocalLog` (the segments on this disk):

    * the log start offset (DeleteRecords, retention), the high watermark and the last
      stable offset (the first offset of the oldest open transaction, or the high
      watermark);
    * producer state (:class:`snakka.txn.producer_state.ProducerStateManager`): the
      idempotent-producer checks at append, snapshots at roll and close;
    * append: producer checks, offset assignment (patching the batch header), then the
      bytes to the LocalLog (which rolls a segment when due; this class snapshots
      producer state at each roll);
    * transaction markers (:meth:`UnifiedLog.append_control_marker`, Kafka's
      appendAsLeader with origin COORDINATOR): a COMMIT/ABORT control batch ends the
      producer's transaction, which moves the last stable offset; an ABORT adds an entry
      to the active segment's aborted-transaction index, which
      :meth:`UnifiedLog.collect_aborted_transactions` reads back for read_committed
      fetches;
    * reads for Fetch (bounded by ``max_offset``: the HW or LSO the caller chose), for
      ListOffsets (by time, max timestamp) and for replaying internal topics;
    * retention policy (``retention.ms``, ``retention.bytes``): which segments go (the
      LocalLog deletes them), truncation (the LocalLog cuts, this class moves the offsets
      and rebuilds producer state), close and delete;
    * validation of produced batches with the topic's configs, through its
      :class:`~snakka.storage.validator.LogValidator`.

    Opening a log runs :class:`~snakka.storage.loader.LogLoader` (recovery) and builds the
    LocalLog from what it returns; checkpoint files of the whole log dir belong to
    :mod:`snakka.storage.manager`.

Where tiered storage plugs in
    :class:`RemoteLogReader` is the seam: with a remote part (KIP-405), the log start offset
    may lie below the first local segment; reads of offsets in between fall through to it.
    The RemoteLogManager (:mod:`snakka.remote.manager`) sets it on tiered partitions.

Invariants (checked with ``assert`` at load, truncation and log-start moves; appends keep
them by construction and check only their own two integer compares in the LocalLog)
    ``log_start_offset <= high_watermark <= log_end_offset``, ``last_stable_offset <=
    high_watermark``, the first local segment starts at or below the log start offset
    unless a remote part holds the offsets in between.

Threading
    As :mod:`snakka.storage.local_log`: everything on the event-loop thread except
    :meth:`UnifiedLog.flush` (a flush worker thread), which only touches the LocalLog under
    its flush lock.
"""

from __future__ import annotations

import logging
import os
import time
from bisect import bisect_right
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Literal, NamedTuple, Protocol, overload

from snakka.protocol.primitives import FileRegion
from snakka.records.batch import (
    CONTROL_MASK,
    DEFAULT_MAX_UNCOMPRESSED_BYTES,
    BatchHeader,
    BatchInfo,
    assign_offsets,
    parse_header,
)
from snakka.records.control import build_control_batch
from snakka.records.record import Record, batch_records, iter_batches
from snakka.txn.producer_state import (
    DUPLICATE_SEQUENCE_NUMBER,
    ProducerStateError,
    ProducerStateManager,
)

from .checkpoint import read_partition_metadata
from .config import LogConfig
from .index import AbortedTxn
from .loader import (
    LoadedLog,
    LogLoader,
    rebuild_producer_state,
    snapshot_filename,
    snapshot_offsets,
    write_producer_snapshot,
)
from .local_log import LocalLog, largest_timestamp, parse_partition_dir_name
from .segment import LogSegment
from .validator import LogValidator

log = logging.getLogger("snakka.storage")

OFFSET_OUT_OF_RANGE = 1  # Kafka error code (mirrors ErrorCode.OFFSET_OUT_OF_RANGE)
REPLICA_NOT_AVAILABLE = 9
KAFKA_STORAGE_ERROR = 56


def _wall_ms() -> int:
    return int(time.time() * 1000)


class OffsetOutOfRangeError(Exception):
    """The requested offset is outside [log_start_offset, log_end_offset]."""

    error_code = OFFSET_OUT_OF_RANGE

    def __init__(self, message: str, *, log_start_offset: int = -1, log_end_offset: int = -1):
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogClosedError(Exception):
    """The log was closed or deleted (answer KAFKA_STORAGE_ERROR / NOT_LEADER)."""

    error_code = KAFKA_STORAGE_ERROR


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 for CreateTime topics
    log_start_offset: int
    duplicate: bool = False  # idempotent retry: nothing appended, original offsets


class RemoteLogUnavailableError(Exception):
    """Offsets below the first local segment, with no remote reader attached (the tiered
    partition's remote metadata is not replayed yet, or remote storage was just turned
    off): Kafka answers REPLICA_NOT_AVAILABLE (retriable) when its remote log metadata is
    not initialised. Never the local segments' data in place of the remote one."""

    error_code = REPLICA_NOT_AVAILABLE


class RemoteFetchPending(Exception):
    """A read reached remote data that is not in memory yet (KIP-405's delayed remote fetch).

    The remote reader has started fetching it off the event loop; ``ready`` (an asyncio
    future of the running loop) completes when it is cached, successfully or not. The
    caller answers what it has, or awaits ``ready`` (bounded by ``remote.fetch.max.wait.ms``)
    and reads again."""

    def __init__(self, ready: Awaitable[object], what: str = "") -> None:
        super().__init__(what or "remote data is being fetched")
        self.ready = ready


class RemoteLogReader(Protocol):
    """The remote (tiered, KIP-405) part of a partition's log: segments copied to object
    storage and deleted locally by ``local.retention.ms`` / ``local.retention.bytes``.

    The RemoteLogManager gives each tiered UnifiedLog one of these; :meth:`UnifiedLog.read`
    sends offsets in [log start offset, first local offset) here and everything else to the
    LocalLog, so handlers and the replica layer never know which part answered, except that
    a remote read may raise :class:`RemoteFetchPending` (the data is on its way: await and
    read again). Every method runs on the event loop and never blocks on I/O."""

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None,
        min_one_message: bool,
    ) -> bytes | memoryview:
        """Whole batches from remote segments, starting with the batch containing
        ``fetch_offset``, never past the end of one remote segment; the same contract as
        :meth:`UnifiedLog.read`. Raises :class:`RemoteFetchPending`, or
        :class:`OffsetOutOfRangeError` when no remote segment holds the offset."""
        ...

    def offset_for_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """Earliest (offset, timestamp) in the remote segments with timestamp >=
        ``timestamp`` and offset >= ``start_offset``; None if no remote record has one.
        May raise :class:`RemoteFetchPending`."""
        ...

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The remote segments' aborted transactions for a read_committed read of
        [start_offset, upper_bound_offset) (as :meth:`UnifiedLog.collect_aborted_transactions`)
        and whether the search is complete (False: the local segments must be searched
        too). May raise :class:`RemoteFetchPending`."""
        ...

    def highest_offset(self) -> int:
        """The last offset held in remote storage (ListOffsets -5), or -1."""
        ...


class UnifiedLog:
    """The log of one topic partition. See the module docstring for what it owns and
    :mod:`snakka.storage.local_log` for the threading discipline.

    Constructing one opens (and with ``recover``, recovers) the directory through
    :class:`~snakka.storage.loader.LogLoader`."""

    def __init__(
        self,
        dir_path: str,
        config: LogConfig,
        *,
        recover: bool,
        time_ms: Callable[[], int] = _wall_ms,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        partition_leader_epoch: int = 0,
        names: list[str] | None = None,
        durable_before_ns: int | None = None,
    ) -> None:
        """``names``: the directory's listing, when the caller (LogManager.load_all) has
        just made it: the directory exists and the loader checks those names instead of
        listing it again. ``durable_before_ns``: the directory's entries were all fsynced
        by a clean shutdown at this wall-clock time, so a clean close may skip the
        directory fsync while its mtime is not later (see :meth:`LocalLog.close`)."""
        self.dir_path = os.path.abspath(dir_path)
        self.name = os.path.basename(self.dir_path)
        try:
            self.topic, self.partition = parse_partition_dir_name(self.name)
        except ValueError:
            self.topic, self.partition = self.name, -1
        self.config = config
        self.leader_epoch = partition_leader_epoch
        self._time_ms = time_ms
        self.validator = LogValidator(config, time_ms, f"{self.topic}-{self.partition}")
        self.log_start_dirty = False  # LogManager rewrites the start-offset checkpoint
        # From partition.metadata (set by LogManager; read on first use when a clean
        # shutdown left the file: start-up does not open 8,000 files it only checks exist).
        self._topic_id: str | None = None
        self._topic_id_unread = False
        # Files LogManager created without fsync (partition.metadata, the epoch
        # checkpoint): the clean close fsyncs them.
        self.unsynced_files = False
        self.remote_log_reader: RemoteLogReader | None = None  # tiered storage (see class)
        # The last offset copied to remote storage (Kafka's highestOffsetInRemoteStorage),
        # -1 for none; the RemoteLogManager moves it after each confirmed copy. Local
        # segments above it are never deleted by retention (they are not remote yet).
        self.highest_offset_in_remote_storage = -1
        self.producer_state = ProducerStateManager(
            producer_id_expiration_ms=config.producer_id_expiration_ms
        )
        if names is None:
            os.makedirs(self.dir_path, exist_ok=True)
        self._load(recover, recovery_point, log_start_offset, names)
        self._local.dir_durable_before_ns = durable_before_ns

    def _load(self, recover: bool, recovery_point: int, log_start_offset: int,
              names: list[str] | None = None) -> None:
        loader = LogLoader(
            self.dir_path,
            self.config,
            recover=recover,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            producer_state=self.producer_state,
            time_ms=self._time_ms,
            names=names,
        )
        loaded = loader.load()
        self.load_result: LoadedLog = loaded
        self._local = LocalLog(
            self.dir_path,
            self.config,
            loaded.segments,
            recovery_point=loaded.recovery_point,
            time_ms=self._time_ms,
        )
        self._local.roll_listener = self._on_roll
        self._log_start_offset = loaded.log_start_offset
        # Single broker: a replica set of one has everything it wrote, so the high
        # watermark is the log end at load and after each append. A replicated leader
        # (later) advances it when followers catch up; it is stored, not derived, so
        # that change is local to this class.
        self._high_watermark = self._local.log_end_offset
        self._check_offsets()

    def _check_offsets(self) -> None:
        """The offset invariants (module docstring). Called where the offsets move in
        ways other than an append: load, truncation, log-start moves."""
        leo = self._local.log_end_offset
        hw = self._high_watermark
        start = self._log_start_offset
        assert start <= hw <= leo, (
            f"partition {self.name}: log start {start}, high watermark {hw}, log end {leo}"
        )
        assert (self.remote_log_reader is not None or self.config.remote_storage_enable
                or self._local.base_offset <= start), (
            f"partition {self.name}: log start {start} below the first local segment "
            f"{self._local.base_offset} with no remote part"
        )

    # ------------------------------------------------------------ properties

    @property
    def topic_id(self) -> str | None:
        """The topic id in ``partition.metadata`` (None: no file, or unreadable)."""
        if self._topic_id_unread:
            self._topic_id_unread = False
            self._topic_id = read_partition_metadata(self.dir_path)
        return self._topic_id

    @topic_id.setter
    def topic_id(self, value: str | None) -> None:
        self._topic_id_unread = False
        self._topic_id = value

    def topic_id_on_disk(self) -> None:
        """``partition.metadata`` exists as a clean shutdown left it: read it on first use."""
        self._topic_id_unread = True

    @property
    def has_topic_id(self) -> bool:
        """Whether the log has (or, unread, is known to have) a ``partition.metadata``."""
        return self._topic_id_unread or self._topic_id is not None

    @property
    def local_log(self) -> LocalLog:
        """The segments on this disk (tests and tools; the broker goes through this
        class)."""
        return self._local

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """The first offset held on this disk (Kafka's localLogStartOffset; ListOffsets
        -4, EARLIEST_LOCAL). Equal to the log start offset until a remote part holds the
        offsets below the first local segment."""
        return max(self._log_start_offset, self._local.base_offset)

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned."""
        return self._local.log_end_offset

    @property
    def high_watermark(self) -> int:
        """Offsets below it are committed (single broker: everything appended)."""
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """High watermark, or the first offset of the oldest open transaction."""
        hw = self._high_watermark
        fuo = self.producer_state.first_unstable_offset()
        return hw if fuo is None else min(fuo, hw)

    @property
    def recovery_point(self) -> int:
        """Offsets below this are known to be on disk (fsynced)."""
        return self._local.recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self._local.unflushed_messages

    @property
    def last_flush_ms(self) -> int:
        return self._local.last_flush_ms

    @property
    def size_bytes(self) -> int:
        return self._local.size_bytes

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def closed(self) -> bool:
        return self._local.closed

    # ------------------------------------------------------------ producer state

    def take_snapshot(self, *, sync: bool = False) -> str:
        """Write the producer state at the log end offset (done at roll and close)."""
        psm = self.producer_state
        leo = self._local.log_end_offset
        psm.map_end_offset = leo
        return write_producer_snapshot(self.dir_path, leo, psm.snapshot_bytes(), sync=sync)

    def expire_producers(self, now_ms: int) -> list[int]:
        """Drop producer state idle for ``producer.id.expiration.ms``."""
        return self.producer_state.remove_expired_producers(now_ms)

    # ------------------------------------------------------------ append

    def validate(
        self,
        buf: bytes | bytearray | memoryview,
        *,
        max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    ) -> list[BatchInfo]:
        """:meth:`LogValidator.validate` with this topic's configs."""
        return self.validator.validate(buf, max_uncompressed_bytes=max_uncompressed_bytes)

    def append(
        self,
        buf: bytearray | memoryview,
        infos: Sequence[BatchInfo],
        *,
        log_append_time_ms: int | None = None,
    ) -> AppendResult:
        """Append validated batches (``infos`` from :meth:`validate` /
        ``validate_batches`` on this ``buf``), patching ``buf`` in place.

        For a ``LogAppendTime`` topic pass the broker time (if None, the log's clock is
        used). Raises :class:`ProducerStateError` (OUT_OF_ORDER_SEQUENCE_NUMBER,
        INVALID_PRODUCER_EPOCH, ...) without appending; an idempotent retry returns the
        original offsets with ``duplicate=True``."""
        local = self._local
        if local.closed:
            raise LogClosedError(f"log {self.name} is closed")
        cfg = self.config
        if log_append_time_ms is None and cfg.log_append_time:
            log_append_time_ms = self._time_ms()
        leo = local.log_end_offset
        psm = self.producer_state
        idempotent = False
        if len(infos) == 1:
            h = infos[0].header
            count = h.last_offset_delta + 1
            if h.producer_id >= 0:
                idempotent = True
                verdict = psm.check(h)
                if not verdict.ok:
                    if verdict.duplicate is not None:
                        d = verdict.duplicate
                        return AppendResult(
                            d.first_offset,
                            d.last_offset,
                            d.timestamp if cfg.log_append_time else -1,
                            self._log_start_offset,
                            True,
                        )
                    raise ProducerStateError(verdict.error_code, verdict.message)
        else:
            count = 0
            for info in infos:
                count += info.header.last_offset_delta + 1
            idempotent = any(i.header.producer_id >= 0 for i in infos)
            if idempotent:
                self._check_multi(infos, leo)
        last = leo + count - 1

        assign_offsets(buf, infos, leo, log_append_time_ms, self.leader_epoch)
        local.append(buf, infos, leo, last, log_append_time_ms)  # rolls if due (_on_roll)
        self._high_watermark = last + 1  # single broker: committed once written
        if idempotent:
            now = self._time_ms()
            off = leo
            for info in infos:
                h = info.header
                end = off + h.last_offset_delta
                if h.producer_id >= 0:
                    psm.update(h, off, end, now)
                off = end + 1
        return AppendResult(
            leo,
            last,
            -1 if log_append_time_ms is None else log_append_time_ms,
            self._log_start_offset,
        )

    def append_control_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> AppendResult:
        """Write a COMMIT (``commit``) or ABORT marker for ``producer_id`` (Kafka's
        appendAsLeader with origin COORDINATOR; only the transaction coordinator's
        WriteTxnMarkers path calls this, never a client's Produce).

        Raises :class:`ProducerStateError` without appending: INVALID_PRODUCER_EPOCH for an
        epoch older than the producer's, TRANSACTION_COORDINATOR_FENCED for a coordinator
        epoch older than the one that wrote its last marker. Otherwise the producer's
        ongoing transaction (if any) ends, so the last stable offset moves past it, and an
        ABORT is recorded in the active segment's ``.txnindex`` with the LSO it leaves."""
        local = self._local
        if local.closed:
            raise LogClosedError(f"log {self.name} is closed")
        psm = self.producer_state
        verdict = psm.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if not verdict.ok:
            raise ProducerStateError(verdict.error_code, verdict.message)
        now = self._time_ms()
        buf = bytearray(
            build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now)
        )
        h = parse_header(buf)
        infos = [BatchInfo(0, h)]
        log_append_time_ms = now if self.config.log_append_time else None
        offset = local.log_end_offset
        assign_offsets(buf, infos, offset, log_append_time_ms, self.leader_epoch)
        local.append(buf, infos, offset, offset, log_append_time_ms)  # may roll first
        self._high_watermark = offset + 1
        done = psm.completed_txn(producer_id, offset, not commit)
        if done is not None and done.is_aborted:
            local.active_segment.update_txn_index(
                AbortedTxn(
                    producer_id, done.first_offset, offset, psm.last_stable_offset_after(done)
                )
            )
        psm.update(h, offset, offset, now, coordinator_epoch)
        return AppendResult(
            offset,
            offset,
            -1 if log_append_time_ms is None else log_append_time_ms,
            self._log_start_offset,
        )

    def _check_multi(self, infos: Sequence[BatchInfo], leo: int) -> None:
        """Producer checks for an append of several batches (internal writers only:
        clients send one batch). Later batches are checked against the state as if the
        earlier ones were appended; nothing changes if any fails."""
        psm = self.producer_state
        saved: dict[int, object] = {}
        off = leo
        try:
            for info in infos:
                h = info.header
                end = off + h.last_offset_delta
                if h.producer_id >= 0:
                    verdict = psm.check(h)
                    if verdict.duplicate is not None:
                        raise ProducerStateError(
                            DUPLICATE_SEQUENCE_NUMBER,
                            "duplicate batch inside a multi-batch append",
                        )
                    if verdict.error_code:
                        raise ProducerStateError(verdict.error_code, verdict.message)
                    pid = h.producer_id
                    if pid not in saved:
                        e = psm.producers.get(pid)
                        saved[pid] = e.copy() if e is not None else None
                    psm.update(h, off, end, -1)
                off = end + 1
        finally:
            for pid, entry in saved.items():  # append() re-applies the updates after writing
                if entry is None:
                    psm.producers.pop(pid, None)
                else:
                    psm.producers[pid] = entry  # type: ignore[assignment]

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active
        segment is empty)."""
        if self._local.active_segment.size == 0:
            return self._local.active_segment
        return self._roll()

    def _roll(self) -> LogSegment:
        return self._local.roll()  # calls _on_roll

    def _on_roll(self, _new: LogSegment) -> None:
        self.take_snapshot()  # as Kafka: producer state at each segment's base offset

    # ------------------------------------------------------------ reads

    @overload
    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True, zero_copy: Literal[False] = False
             ) -> bytes | memoryview: ...

    @overload
    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True, zero_copy: bool
             ) -> bytes | memoryview | FileRegion: ...

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
        zero_copy: bool = False,
    ) -> bytes | memoryview | FileRegion:
        """Whole batches as they lie on disk, starting with the batch containing
        ``fetch_offset``, at most ``max_bytes`` (but the first batch whole if
        ``min_one_message``), only batches below ``max_offset`` (exclusive, a batch
        boundary such as the LSO), never past the end of one segment.

        ``zero_copy``: local data of at least ``ZERO_COPY_MIN_BYTES`` comes as a
        :class:`FileRegion` of the segment file (the caller sends it with sendfile and closes
        it); remote (tiered) data is always bytes in memory.

        ``fetch_offset == log_end_offset`` gives ``b""``; outside
        [log_start_offset, log_end_offset] raises :class:`OffsetOutOfRangeError`."""
        local = self._local
        leo = local.log_end_offset
        if fetch_offset == leo:
            return b""
        if fetch_offset < self._log_start_offset or fetch_offset > leo:
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} is out of range for partition {self.name}: "
                f"[{self._log_start_offset}, {leo}]",
                log_start_offset=self._log_start_offset,
                log_end_offset=leo,
            )
        if max_offset is not None and fetch_offset >= max_offset:
            return b""
        if fetch_offset < local.base_offset:
            remote = self.remote_log_reader
            if remote is None:
                raise RemoteLogUnavailableError(
                    f"offset {fetch_offset} of {self.name} is in remote storage, which is not "
                    f"attached to this partition yet")
            return remote.read(
                fetch_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message
            )
        return local.read(fetch_offset, max_bytes, max_offset, min_one_message, zero_copy)

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions a read_committed reader of [start_offset,
        upper_bound_offset) must know (Kafka's collectAbortedTransactions): entries whose
        marker is at or after ``start_offset`` and whose first offset is below the bound,
        from the segment holding ``start_offset`` onwards, stopping at the first segment
        whose index says later ones cannot matter (an entry's LSO past the bound)."""
        out: list[AbortedTxn] = []
        remote = self.remote_log_reader
        if remote is not None and start_offset < self._local.base_offset:
            found_remote, complete = remote.collect_aborted_transactions(
                start_offset, upper_bound_offset)
            out.extend(found_remote)
            if complete:
                return out
        segs = self._local.segments
        # From the floor segment of start_offset (else the first); a later segment may
        # hold the ABORT of a transaction that started earlier, so all later ones count
        # until one says the search is complete. Segments without entries cost a check.
        i = max(0, bisect_right([s.base_offset for s in segs], start_offset) - 1)
        for seg in segs[i:]:
            if not seg.txn_index.txns:
                continue
            found = seg.collect_aborted_txns(start_offset, upper_bound_offset)
            out.extend(found.aborted)
            if found.complete:
                break
        return out

    def iter_records(self, chunk_bytes: int = 8 << 20) -> Iterator[Record]:
        """Every data record from the log start offset to the end, in order: how internal logs
        (the metadata log, ``__consumer_offsets``) are replayed at start-up. Not a hot path.

        The position moves past every whole batch read, by the batch's last offset, not by the
        records decoded: a compacted log has gaps between offsets, and batches with no record
        left (an emptied batch the cleaner keeps) or no data record (a control batch)."""
        offset = self._log_start_offset
        while offset < self._local.log_end_offset:
            data = self.read(offset, chunk_bytes)
            before = offset
            for h, pos in iter_batches(data):
                next_offset = h.base_offset + h.last_offset_delta + 1
                if next_offset <= offset:
                    continue
                if not h.attributes & CONTROL_MASK and h.records_count:
                    start = offset
                    for rec in batch_records(data, pos, h):
                        if rec.offset >= start:
                            yield rec
                offset = next_offset
            if offset == before:  # no complete batch here (recovery trims torn tails)
                log.error("partition %s: no decodable batch at offset %d; stopping", self.name,
                          offset)
                return

    def read_batch_headers(
        self, start_offset: int = 0, end_offset: int | None = None
    ) -> Iterator[tuple[BatchHeader, LogSegment, int]]:
        """Iterate (header, segment, position) of the batches overlapping
        [start_offset, end_offset): for tools, tests and coordinators loading internal
        topics. Not a hot path."""
        end_offset = self._local.log_end_offset if end_offset is None else end_offset
        start_offset = max(start_offset, self._log_start_offset)
        return self._local.read_batch_headers(start_offset, end_offset)

    # ------------------------------------------------------------ ListOffsets

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """Earliest (offset, timestamp) of a record with timestamp >= ``timestamp``, at
        or after the log start offset; None if there is none (ListOffsets answers -1)."""
        remote = self.remote_log_reader
        if self._log_start_offset < self._local.base_offset:
            if remote is None:  # the answer may be remote: never guess from the local part
                raise RemoteLogUnavailableError(
                    f"{self.name}: offsets below {self._local.base_offset} are in remote "
                    f"storage, which is not attached to this partition yet")
            # Kafka's fetchOffsetByTimestamp: the remote segments first, then the local ones.
            found = remote.offset_for_timestamp(timestamp, self._log_start_offset)
            if found is not None:
                return found
        return self._local.offset_for_timestamp(timestamp, self.local_log_start_offset)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets
        MAX_TIMESTAMP, -3; the first such record on ties), or None for an empty log."""
        return self._local.max_timestamp_offset(self._log_start_offset)

    # ------------------------------------------------------------ deletion / retention

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` (<= high watermark)
        and delete the segments wholly below it. Returns the new log start offset."""
        if offset > self._high_watermark or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.name} before {offset}: high watermark is "
                f"{self._high_watermark}",
                log_start_offset=self._log_start_offset,
                log_end_offset=self._local.log_end_offset,
            )
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        self.log_start_dirty = True
        doomed = self._local.segments_below(offset)
        if doomed:
            self._local.delete_segments(doomed, f"log start offset {offset}")
        self._check_offsets()
        return offset

    @property
    def tiered(self) -> bool:
        """Remote storage holds (or will hold) this log's closed segments: retention here is
        local retention, and total retention belongs to the RemoteLogManager."""
        return self.config.remote_storage_enable and self.remote_log_reader is not None

    def only_local_size_bytes(self) -> int:
        """Bytes of the local segments not yet in remote storage (Kafka's
        onlyLocalLogSegmentsSize): with the remote size, the log's total for retention.bytes."""
        hi = self.highest_offset_in_remote_storage
        return sum(seg.size for seg in self._local.segments if seg.next_offset - 1 > hi)

    def enforce_retention(self, now_ms: int) -> int:
        """Delete whole segments by ``retention.ms`` (segment's largest timestamp older
        than now - retention.ms) and ``retention.bytes``; returns how many. Like Kafka,
        an expired non-empty active segment is rolled first so it can go too.

        A tiered log applies ``local.retention.ms`` / ``local.retention.bytes`` (-2: the
        total settings) to the segments already in remote storage, and keeps every other
        segment whatever its age: it is deleted from remote storage once copied (Kafka's
        isSegmentEligibleForDeletion). The log start offset does not move: the offsets stay
        readable from remote storage."""
        cfg = self.config
        if not cfg.delete_enabled or self._local.closed:
            return 0
        if self.tiered:
            return self._enforce_local_retention(now_ms)
        deleted = 0
        if cfg.retention_ms >= 0:
            deleted += self._delete_oldest(
                lambda seg: now_ms - largest_timestamp(seg) > cfg.retention_ms,
                f"retention.ms {cfg.retention_ms}",
            )
        if cfg.retention_bytes >= 0:
            excess = [self._local.size_bytes - cfg.retention_bytes]

            def over_size(seg: LogSegment) -> bool:
                if excess[0] - seg.size >= 0:
                    excess[0] -= seg.size
                    return True
                return False

            deleted += self._delete_oldest(over_size, f"retention.bytes {cfg.retention_bytes}")
        return deleted

    def _enforce_local_retention(self, now_ms: int) -> int:
        cfg = self.config
        retention_ms = cfg.retention_ms if cfg.local_retention_ms == -2 else cfg.local_retention_ms
        retention_bytes = (cfg.retention_bytes if cfg.local_retention_bytes == -2
                           else cfg.local_retention_bytes)
        hi = self.highest_offset_in_remote_storage
        local = self._local
        doomed: list[LogSegment] = []
        excess = local.size_bytes - retention_bytes if retention_bytes >= 0 else -1
        for seg in local.segments:
            if seg is local.active_segment or seg.next_offset - 1 > hi:
                break  # the active segment, and everything not yet remote, stays
            by_time = retention_ms >= 0 and now_ms - largest_timestamp(seg) > retention_ms
            by_size = retention_bytes >= 0 and excess - seg.size >= 0
            if not (by_time or by_size):
                break
            excess -= seg.size
            doomed.append(seg)
        if not doomed:
            return 0
        local.delete_segments(
            doomed, f"local retention (local.retention.ms {retention_ms}, local.retention.bytes "
                    f"{retention_bytes}); offsets up to {doomed[-1].next_offset - 1} are remote")
        self._check_offsets()
        return len(doomed)

    def _delete_oldest(self, predicate: Callable[[LogSegment], bool], reason: str) -> int:
        local = self._local
        active = local.active_segment
        doomed = []
        for seg in local.segments:
            if seg.size == 0 and seg is active:
                break
            if not predicate(seg):
                break
            doomed.append(seg)
        if not doomed:
            return 0
        if doomed[-1] is active:
            self._roll()  # always keep one (new, empty) segment
        local.delete_segments(doomed, reason)
        new_start = local.base_offset
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self.log_start_dirty = True
        self._check_offsets()
        return len(doomed)

    # ------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (the whole batch containing it).
        Blocks on a running flush (rare operation)."""
        local = self._local
        if offset >= local.log_end_offset:
            return
        if offset <= local.base_offset:
            start = max(offset, 0)
            local.truncate_fully_and_start_at(start)
            self._log_start_offset = start
            self.log_start_dirty = True
        else:
            local.truncate_to(offset)
        leo = local.log_end_offset
        if self._log_start_offset > leo:
            self._log_start_offset = leo
            self.log_start_dirty = True
        self._high_watermark = min(self._high_watermark, leo)
        log.info("partition %s: truncated to offset %d (log end now %d)", self.name, offset, leo)
        rebuild_producer_state(
            self.producer_state, self.dir_path, self.name, local.segments, leo, self._time_ms()
        )
        self._check_offsets()

    # ------------------------------------------------------------ durability / lifecycle

    def flush(self, up_to_offset: int | None = None) -> int:
        """fsync every segment written since the last flush (data, then the index
        files), and the directory if segments were created. Safe to call from a worker
        thread while the loop appends. Returns the new recovery point (the log end
        offset as it was when the flush started, which covers ``up_to_offset``)."""
        return self._local.flush()

    def close(self) -> None:
        """Clean close: producer snapshot at the log end, final time-index entries, flush
        everything, close the files. Blocks on a running flush."""
        if self._local.closed:
            return
        # Before the LocalLog's close, whose directory fsync makes the snapshot durable. As
        # Kafka's takeSnapshot: only when the log moved past the newest snapshot (or, with
        # none, past the log start), so an idle or empty partition gets no file Kafka would
        # not have written either; the loader replays from that snapshot to the same state.
        # Snapshots past the log end never survive a load or truncation, so "the newest
        # snapshot is at the log end" is one stat, not a directory listing per partition;
        # an empty log at offset 0 can have none below it.
        leo = self._local.log_end_offset
        if leo == 0 or os.path.exists(os.path.join(self.dir_path, snapshot_filename(leo))):
            pass
        elif leo > self._log_start_offset:
            self.take_snapshot(sync=True)
        else:
            snaps = snapshot_offsets(self.dir_path)
            if snaps and leo > snaps[-1]:
                self.take_snapshot(sync=True)
        self._local.close()

    def delete(self) -> None:
        """Close without flushing and remove the partition directory (DeleteTopics); see
        :meth:`LocalLog.delete`."""
        self._local.delete()

    def set_config(self, config: LogConfig) -> None:
        """Apply changed topic configs (AlterConfigs). Index sizes apply to new
        segments; everything else at the next append/retention run."""
        self.config = config
        self.validator = LogValidator(config, self._time_ms, f"{self.topic}-{self.partition}")
        self.producer_state.producer_id_expiration_ms = config.producer_id_expiration_ms
        self._local.set_config(config)

    def __repr__(self) -> str:
        return (
            f"UnifiedLog({self.name}, start={self._log_start_offset}, "
            f"end={self._local.log_end_offset}, segments={len(self._local.segments)})"
        )


__all__ = [
    "AppendResult",
    "LogClosedError",
    "OffsetOutOfRangeError",
    "ProducerStateError",
    "RemoteFetchPending",
    "RemoteLogReader",
    "RemoteLogUnavailableError",
    "UnifiedLog",
]
