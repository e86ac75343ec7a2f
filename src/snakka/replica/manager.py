"""The replica manager: the one layer between requests/coordinators and the partition logs.

Kafka's ReplicaManager, for one broker. Everything that reads or writes a partition's records
goes through here, so the rules are decided in one place:

- **Leadership.** Whether this broker leads a partition and with which leader epoch, and the
  KIP-320 epoch check (UNKNOWN_LEADER_EPOCH / FENCED_LEADER_EPOCH) every API that names an
  epoch applies. snakka is one broker: it leads every partition with epoch 0 forever. When
  replication arrives, this module (and only this module) learns leaders from metadata and
  answers NOT_LEADER_OR_FOLLOWER.
- **Append** (:meth:`append_records`): which topics clients may write (reserved internal topics
  are INVALID_TOPIC_EXCEPTION), ``min.insync.replicas`` against ``acks``, batch validation
  (storage's LogValidator: header, CRC, the C record walk, timestamps, recompression), the
  producer-state checks and offset assignment (the log), long-poll wake-ups, and **durability**:
  whether the write must be fsynced before it is answered (``log.flush.strict`` with acks=all,
  or the topic's ``flush.messages`` reached). Coordinators append to their internal topics
  through :meth:`append_internal`; their durability waits are decided here too
  (:meth:`durable`), so produce, share acknowledgements and every coordinator follow one policy.
- **Read** (:meth:`read`): the high watermark, the last stable offset and the isolation level
  (read_committed reads stop at the LSO and carry the aborted transactions overlapping what
  they return), offsets out of range, a log deleted under a reader.
  Reads below a partition's local log start offset fall through to its remote part (tiered
  storage, KIP-405: ``UnifiedLog.remote_log_reader``, :mod:`snakka.remote.reader`). Remote
  data not in memory yet never blocks: the read answers without records and its
  ``ReadResult.pending`` carries the awaitable that completes once the data is fetched (the
  caller may wait for it, bounded by ``remote.fetch.max.wait.ms``, and read again: Kafka's
  DelayedRemoteFetch); a failed remote read is KAFKA_STORAGE_ERROR for that partition.
- **Wake-ups**: appends resolve the futures of long polls parked on a partition
  (:meth:`wait_for_append`).
- **Partition lifecycle**: the controller creates, adds, detaches and reconfigures partition logs
  through here; retention and checkpoints run here.

Arrows point down: this module knows storage, records and the metadata core; handlers,
coordinators and the controller know it; it knows none of them. It tells its listeners when
retention moved log start offsets (:class:`ReplicaListener`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from snakka.metadata.core import RESERVED_TOPICS, ClusterMetadata
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.primitives import FileRegion
from snakka.records import RecordValidationError, validate_batches
from snakka.remote.reader import RemoteReadError
from snakka.storage import (
    LogClosedError,
    LogConfig,
    LogManager,
    OffsetOutOfRangeError,
    ProducerStateError,
    RemoteFetchPending,
    RemoteLogUnavailableError,
    UnifiedLog,
)
from snakka.storage.flush import FlushScheduler
from snakka.storage.validator import maybe_recompress
from snakka.txn.producer_state import ProducerStateEntry
from snakka.util.waiters import WaitList, wait_any, wake

log = logging.getLogger("snakka.replica")

# A single broker leads every partition with this epoch, forever (KIP-320 epochs start at 0).
LEADER_EPOCH = 0

_ATTR_CONTROL = 0x20
_EMPTY = b""

# A topic as a request names it: by name, or by topic id (Fetch v13+, the share APIs).
TopicKey = str | uuid.UUID
# (partition log, offset after the appended records): what a durability wait waits for.
AppendMark = tuple[UnifiedLog, int]


class ReplicaListener(Protocol):
    def on_log_start_moved(self) -> None:
        """Retention (or DeleteRecords) moved some partitions' log start offsets."""


@dataclasses.dataclass(slots=True)
class AppendResult:
    """One partition's append, as Produce answers it."""

    error_code: int = 0
    error_message: str | None = None
    record_errors: list[tuple[int, str | None]] = dataclasses.field(default_factory=list)
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    # Set when the answer must wait for fsync (see ReplicaManager.durable).
    mark: AppendMark | None = None


@dataclasses.dataclass(slots=True)
class ReadResult:
    """One partition's read, as Fetch answers it (offsets -1 when ``error_code`` is set)."""

    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | FileRegion = _EMPTY
    # The partition exists here (an error came from reading it, not from looking it up).
    found: bool = False
    # read_committed only: (producer id, first offset) of the aborted transactions that
    # overlap the returned records (Fetch's AbortedTransactions); empty otherwise.
    aborted_transactions: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    # Tiered storage: the records lie in remote segments being fetched off the event loop;
    # no records now, and this completes when a second read would find them in memory.
    pending: Awaitable[object] | None = None

    def in_memory(self) -> bytes | memoryview:
        """The records of a read made without ``zero_copy`` (share fetch, coordinators): always
        bytes in memory, never a file region."""
        records = self.records
        if isinstance(records, FileRegion):
            raise TypeError("a zero-copy read's records are a file region, not bytes")
        return records


def _next_offset_after(records: bytes | memoryview | FileRegion) -> int:
    """The offset after the last batch of whole batches read from a log (the upper bound
    of the aborted transactions a read_committed reader needs, as Kafka's
    fetchUpperBoundOffset). Walks the batch headers: baseOffset at 0, batchLength at 8,
    lastOffsetDelta at 23. A FileRegion knows it (the log read found it)."""
    if type(records) is FileRegion:
        return records.next_offset
    pos = 0
    end = len(records)
    nxt = -1
    while pos + 27 <= end:
        base = int.from_bytes(records[pos : pos + 8], "big", signed=True)
        length = int.from_bytes(records[pos + 8 : pos + 12], "big", signed=True)
        delta = int.from_bytes(records[pos + 23 : pos + 27], "big", signed=True)
        nxt = base + delta + 1
        pos += 12 + length
    return nxt


def _error(code: int, message: str | None = None,
           record_errors: list[tuple[int, str | None]] | None = None) -> AppendResult:
    return AppendResult(error_code=code, error_message=message,
                        record_errors=list(record_errors or ()))


# Kafka (ReplicaManager.appendToLocalLog): a batch the partition refuses is answered with the
# partition's log start offset, except a corrupt or too large one (those exceptions are
# answered with -1). Checked against Kafka 4.0 in tests/reference/test_differential.py.
_REFUSED_WITHOUT_LOG_START = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE})


def _refused(pl: UnifiedLog, code: int, message: str | None = None,
             record_errors: list[tuple[int, str | None]] | None = None) -> AppendResult:
    r = _error(code, message, record_errors)
    if code not in _REFUSED_WITHOUT_LOG_START:
        r.log_start_offset = pl.log_start_offset
    return r


class ReplicaManager:
    def __init__(self, metadata: ClusterMetadata, logs: LogManager, flusher: FlushScheduler, *,
                 node_id: int, time_ms: Callable[[], int], log_dir: str,
                 max_uncompressed_bytes: int) -> None:
        self.metadata = metadata
        self.logs = logs
        self.flusher = flusher
        self.node_id = node_id
        self.time_ms = time_ms
        self.log_dir = log_dir
        self.max_uncompressed_bytes = max_uncompressed_bytes
        self._waiters: WaitList = {}
        self._listeners: list[ReplicaListener] = []

    def add_listener(self, listener: ReplicaListener) -> None:
        self._listeners.append(listener)

    # -- leadership ----------------------------------------------------------------------
    def leader_epoch(self, topic: TopicKey, partition: int) -> int:
        """This broker's leader epoch of the partition (it leads every partition)."""
        return LEADER_EPOCH

    def leader_id(self, topic: TopicKey, partition: int) -> int:
        return self.node_id

    @staticmethod
    def check_leader_epoch(current_leader_epoch: int) -> ErrorCode:
        """KIP-320 fencing: -1 means 'no check'; a newer epoch than ours is UNKNOWN_LEADER_EPOCH,
        an older one FENCED_LEADER_EPOCH."""
        if current_leader_epoch < 0 or current_leader_epoch == LEADER_EPOCH:
            return ErrorCode.NONE
        if current_leader_epoch > LEADER_EPOCH:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.FENCED_LEADER_EPOCH

    # -- lookup --------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        """The partition's log, or None (no metadata check: internal callers)."""
        return self.logs.get_log(topic, partition)

    def lookup(self, topic: str, partition: int) -> tuple[UnifiedLog | None, ErrorCode]:
        """(log, error) for a partition a client named: UNKNOWN_TOPIC_OR_PARTITION for an
        unknown topic or partition index; NOT_LEADER_OR_FOLLOWER is decided here once there
        are other brokers."""
        ti = self.metadata.topics.get(topic)
        if ti is None or not 0 <= partition < ti.partitions:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        pl = self.logs.get_log(topic, partition)
        if pl is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return pl, ErrorCode.NONE

    def lookup_by_id(self, topic_id: uuid.UUID, partition: int
                     ) -> tuple[UnifiedLog | None, ErrorCode]:
        ti = self.metadata.topics_by_id.get(topic_id)
        if ti is None:
            return None, ErrorCode.UNKNOWN_TOPIC_ID
        return self.lookup(ti.name, partition)

    def producers(self, topic: str, partition: int
                  ) -> tuple[ErrorCode, list[ProducerStateEntry]]:
        """The partition's active producers (Kafka's ``UnifiedLog.activeProducers``, what
        DescribeProducers reports): copies of its producer-state entries, by producer id, or
        the lookup error (UNKNOWN_TOPIC_OR_PARTITION)."""
        pl, err = self.lookup(topic, partition)
        if pl is None:
            return err, []
        entries = pl.producer_state.producers
        return ErrorCode.NONE, [entries[pid].copy() for pid in sorted(entries)]

    # -- append --------------------------------------------------------------------------
    def append_records(self, topic: str, partition: int, records: bytes | memoryview | None,
                       acks: int) -> AppendResult:
        """Append a client's batch (Produce v3+: exactly one batch per partition).

        The answer's ``mark`` is set when it may be sent only once the batch is fsynced: pass
        the marks of a request to :meth:`durable`."""
        if topic in RESERVED_TOPICS:
            # Before the lookup, as Kafka: only a coordinator writes these, and a missing one
            # is no different to a client.
            return _error(ErrorCode.INVALID_TOPIC_EXCEPTION,
                          f"Cannot append to internal topic {topic}")
        pl, err = self.lookup(topic, partition)
        if pl is None:
            return _error(err)
        if records is None or len(records) == 0:
            return _error(ErrorCode.INVALID_RECORD,
                          "Produce request must carry exactly one record batch per partition")
        cfg = pl.config
        if acks == -1 and cfg.min_insync_replicas > 1:
            return _refused(pl, ErrorCode.NOT_ENOUGH_REPLICAS,
                          f"min.insync.replicas={cfg.min_insync_replicas} but only 1 replica "
                          "exists")
        try:
            # The decoded records are a writable view into the request's own frame buffer: the
            # log patches offsets into it and writes it as is, so the batch is never copied.
            # (A read-only buffer, e.g. from a test, is copied once.)
            buf = records if isinstance(records, memoryview) and not records.readonly \
                else bytearray(records)
            # Header, CRC32C, size, every record (C walk) and the topic's timestamp limits.
            infos = pl.validate(buf, max_uncompressed_bytes=self.max_uncompressed_bytes)
            if len(infos) != 1:
                return _error(ErrorCode.INVALID_RECORD,
                              "Produce requests with version 3 and above must have exactly one "
                              "record batch per partition")
            if infos[0].header.attributes & _ATTR_CONTROL:
                return _refused(pl, ErrorCode.INVALID_RECORD,
                              "Clients are not allowed to write control records")
            if cfg.compression_type != "producer":
                buf, infos = maybe_recompress(cfg.compression_type, buf, infos,
                                              max_message_bytes=cfg.max_message_bytes)
            result = pl.append(buf, infos)
        except RecordValidationError as e:
            return _refused(pl, e.error_code, e.message, e.record_errors)
        except ProducerStateError as e:  # with the log start offset, as Kafka (KIP-360)
            return _refused(pl, e.error_code, str(e))
        except OSError as e:  # the disk failed under this partition: Kafka's storage error
            log.error("append to %s-%d failed: %s", topic, partition, e)
            return _error(ErrorCode.KAFKA_STORAGE_ERROR, "Disk error when appending")
        out = AppendResult(base_offset=result.base_offset,
                           log_append_time_ms=result.log_append_time_ms,
                           log_start_offset=result.log_start_offset)
        if not result.duplicate:
            self.notify_append(topic, partition)
            if acks != 0 and self._must_flush_before_answer(pl, acks):
                out.mark = (pl, result.last_offset + 1)
            else:
                self.flusher.on_append(pl)
        return out

    def append_internal(self, topic: str, partition: int, buf: bytearray) -> AppendMark | None:
        """A coordinator's append to its internal topic (batches it built itself). Returns the
        mark :meth:`durable` takes, or None if the partition is missing (logged)."""
        pl = self.logs.get_log(topic, partition)
        if pl is None:
            log.error("%s-%d is missing; a coordinator's records were not stored", topic,
                      partition)
            return None
        # Built by the coordinator, not a client: the framing is checked, not the topic limits.
        pl.append(buf, validate_batches(buf, max_message_bytes=1 << 30, from_client=False))
        self.flusher.on_append(pl)
        return pl, pl.log_end_offset

    def has_ongoing_transaction(self, topic: str, partition: int, producer_id: int,
                                producer_epoch: int) -> bool:
        """True if the partition holds an open transaction of this producer at this epoch
        (Kafka's UnifiedLog.hasOngoingTransaction: such a partition needs no verification)."""
        pl = self.logs.get_log(topic, partition)
        if pl is None:
            return False
        entry = pl.producer_state.last_entry(producer_id)
        return entry is not None and entry.producer_epoch == producer_epoch \
            and entry.current_txn_first_offset is not None

    def write_txn_marker(self, topic: str, partition: int, producer_id: int,
                         producer_epoch: int, commit: bool, coordinator_epoch: int
                         ) -> tuple[ErrorCode, AppendMark | None]:
        """Write a COMMIT / ABORT control marker for ``producer_id`` (Kafka's WriteTxnMarkers
        on the partition leader; the transaction coordinator, and the WriteTxnMarkers API of
        ``kafka-transactions.sh abort``, both come here).

        Returns (error, mark): UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist
        (the topic was deleted: nothing to complete there), INVALID_PRODUCER_EPOCH /
        TRANSACTION_COORDINATOR_FENCED from the producer state (a stale marker: nothing is
        written), KAFKA_STORAGE_ERROR when the disk failed (the caller retries); the mark is
        what :meth:`durable` waits for under strict durability."""
        pl, err = self.lookup(topic, partition)
        if pl is None:
            return err, None
        try:
            pl.append_control_marker(producer_id, producer_epoch, commit, coordinator_epoch)
        except ProducerStateError as e:
            log.warning("%s marker for producer %d epoch %d on %s-%d refused: %s",
                        "COMMIT" if commit else "ABORT", producer_id, producer_epoch, topic,
                        partition, e)
            return ErrorCode(e.error_code), None
        except LogClosedError:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        except OSError as e:
            log.error("marker write to %s-%d failed: %s", topic, partition, e)
            return ErrorCode.KAFKA_STORAGE_ERROR, None
        # The LSO may have moved: read_committed long polls parked here wake up.
        self.notify_append(topic, partition)
        if self.flusher.strict:
            return ErrorCode.NONE, (pl, pl.log_end_offset)
        self.flusher.on_append(pl)
        return ErrorCode.NONE, None

    def _must_flush_before_answer(self, pl: UnifiedLog, acks: int) -> bool:
        """The durability rule: with ``log.flush.strict=true`` an acks=all write is answered
        only once fsynced; with the topic's ``flush.messages`` reached, any acknowledged write."""
        return (acks == -1 and self.flusher.strict) \
            or pl.unflushed_messages >= pl.config.flush_messages

    @property
    def strict_durability(self) -> bool:
        """True if acknowledged coordinator writes wait for fsync (``log.flush.strict``)."""
        return self.flusher.strict

    async def durable(self, marks: Iterable[AppendMark | None]) -> None:
        """Return once every marked append is fsynced (group commit: concurrent waiters share
        fsyncs). Produce passes only the marks :meth:`append_records` set; coordinators pass
        theirs and wait only under ``log.flush.strict``."""
        for mark in marks:
            if mark is not None:
                await self.flusher.flush_through(mark[0], mark[1])

    async def coordinator_durable(self, marks: Iterable[AppendMark | None]) -> None:
        """A coordinator's acknowledged write: fsynced before the answer in strict mode."""
        if self.flusher.strict:
            await self.durable(marks)

    # -- read ----------------------------------------------------------------------------
    def read(self, topic: str | None, partition: int, fetch_offset: int, max_bytes: int, *,
             current_leader_epoch: int = -1, read_committed: bool = False,
             min_one_message: bool = True, unknown: ErrorCode = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
             zero_copy: bool = False) -> ReadResult:
        """Read whole stored batches from ``fetch_offset``, at most ``max_bytes`` (the first
        batch whole if ``min_one_message``). ``topic`` None is a topic the caller could not
        resolve (answered ``unknown``). A negative ``max_bytes`` reads one batch only to learn
        whether there is data: Kafka's segment read refuses a negative size when there is
        (UNKNOWN_SERVER_ERROR), and answers empty otherwise."""
        if topic is None:
            return ReadResult(unknown)
        pl, err = self.lookup(topic, partition)
        if pl is None:
            return ReadResult(err)
        err = self.check_leader_epoch(current_leader_epoch)
        if err != ErrorCode.NONE:
            return ReadResult(err, pl.high_watermark, pl.last_stable_offset, pl.log_start_offset,
                              found=True)
        if max_bytes == 0 and not min_one_message:
            return ReadResult(ErrorCode.NONE, pl.high_watermark, pl.last_stable_offset,
                              pl.log_start_offset, found=True)
        return self.read_log(pl, fetch_offset, max_bytes, read_committed=read_committed,
                             min_one_message=min_one_message, zero_copy=zero_copy)

    def read_log(self, pl: UnifiedLog, fetch_offset: int, max_bytes: int, *,
                 read_committed: bool, min_one_message: bool,
                 zero_copy: bool = False) -> ReadResult:
        """:meth:`read` of a partition already looked up (share fetches hold their logs):
        read_committed stops at the last stable offset, read_uncommitted at the high
        watermark. ``zero_copy``: large local record sets come as a ``FileRegion`` (see
        ``UnifiedLog.read``; Fetch on a plaintext listener)."""
        out = ReadResult(ErrorCode.NONE, pl.high_watermark, pl.last_stable_offset,
                         pl.log_start_offset, found=True)
        try:
            records = pl.read(fetch_offset, max(max_bytes, 0),
                              max_offset=(out.last_stable_offset if read_committed
                                          else out.high_watermark),
                              min_one_message=min_one_message or max_bytes < 0,
                              zero_copy=zero_copy and max_bytes >= 0)
            if records and max_bytes < 0:
                out.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
                return out
            found = None
            if read_committed and records:
                # librdkafka consumers read_committed by default, so this runs on most
                # fetches: first the cheap superset up to the LSO (usually empty: no header
                # walk), then the exact bound (the offset after the last returned batch, as
                # Kafka's fetchUpperBoundOffset) only when there is something to filter.
                upper = out.last_stable_offset
                if fetch_offset < pl.local_log_start_offset:
                    # Remote data: the exact bound lets the search of remote txn indexes
                    # (fetched from object storage) stop as early as Kafka's does.
                    upper = _next_offset_after(records)
                found = pl.collect_aborted_transactions(fetch_offset, upper)
        except OffsetOutOfRangeError:
            out.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            return out
        except LogClosedError:  # deleted while the reader waited
            out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return out
        except RemoteFetchPending as e:
            # Remote data on its way (or the remote reader's queue is full): no records
            # now, never a half answer (records without their aborted transactions).
            out.pending = e.ready
            return out
        except RemoteLogUnavailableError:  # tiered, its remote part not attached yet
            out.error_code = ErrorCode.REPLICA_NOT_AVAILABLE
            return out
        except RemoteReadError as e:  # the reader logged the failure when it happened
            log.debug("partition %s: remote read at offset %d failed: %s", pl.name,
                      fetch_offset, e)
            out.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            return out
        out.records = records
        if found:
            upper = _next_offset_after(records)
            out.aborted_transactions = [
                (t.producer_id, t.first_offset) for t in found if t.first_offset < upper
            ]
        return out

    # -- long-poll wake-ups --------------------------------------------------------------
    def notify_append(self, topic: str, partition: int) -> None:
        wake(self._waiters, (topic, partition))

    @property
    def append_waiters(self) -> WaitList:
        """The wait list appends wake: (topic, partition) -> parked futures (util.waiters)."""
        return self._waiters

    async def wait_for_append(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> bool:
        """Wait until any of the partitions gets an append, or the timeout. True if woken."""
        return await wait_any([(self._waiters, keys)], timeout_s)

    # -- partition lifecycle (the controller's side) -------------------------------------
    def make_logs(self, name: str, partitions: range, cfg: LogConfig | None,
                  topic_id: uuid.UUID) -> list[UnifiedLog]:
        """Create these partitions' logs, unregistered (any thread). If one fails (EMFILE,
        ENOSPC, EACCES, ...) those made are removed and KAFKA_STORAGE_ERROR is raised."""
        made: list[UnifiedLog] = []
        try:
            for p in partitions:
                made.append(self.logs.open_new_log(name, p, cfg, topic_id))
        except OSError as e:
            for pl in made:
                pl.delete()
            failed = partitions[len(made)]
            # The partition that failed may have left a directory behind.
            shutil.rmtree(os.path.join(self.log_dir, f"{name}-{failed}"), ignore_errors=True)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"Cannot create the log of partition {name}-{failed}: {e}") from None
        return made

    def add_log(self, pl: UnifiedLog) -> None:
        self.logs.add_log(pl)

    def detach_log(self, topic: str, partition: int) -> UnifiedLog | None:
        """Stop serving a partition (its topic was deleted); readers parked on it wake up."""
        pl = self.logs.detach_log(topic, partition)
        self.notify_append(topic, partition)
        return pl

    def set_config(self, topic: str, partitions: int, cfg: LogConfig) -> None:
        for p in range(partitions):
            pl = self.logs.get_log(topic, p)
            if pl is not None:
                pl.set_config(cfg)

    def delete_records_before(self, pl: UnifiedLog, offset: int, *,
                              checkpoint: bool = True) -> None:
        """DeleteRecords: move the log start offset (and checkpoint it, so the new start survives
        an unclean restart; a coordinator trimming its own topic restates what it removed and
        skips that)."""
        pl.delete_records_before(offset)
        if checkpoint:
            self.logs.checkpoint()

    def advance_log_start_offset(self, pl: UnifiedLog, offset: int) -> None:
        """Tiered storage moved the log start offset (remote retention, or a remote part that
        begins later than the checkpoint said): as DeleteRecords, checkpointed, and the
        listeners that follow log starts (share partitions) are told."""
        if offset <= pl.log_start_offset:
            return
        pl.delete_records_before(offset)
        self.logs.checkpoint()
        for listener in self._listeners:
            listener.on_log_start_moved()

    # -- retention and checkpoints -------------------------------------------------------
    def enforce_retention(self) -> int:
        deleted = self.logs.enforce_retention_all(self.time_ms())
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)
            for listener in self._listeners:
                listener.on_log_start_moved()
        return deleted

    async def checkpoint(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.logs.checkpoint)
