"""Idempotent-producer state of one partition (Kafka's ProducerStateManager), sans-I/O.

What this module owns
    Per producerId: the current epoch, the metadata of the last
    :data:`NUM_BATCHES_TO_RETAIN` appended batches (first/last sequence, first/last
    offset, time), the first offset of an ongoing transaction; the sequence/epoch checks
    made before an append (:meth:`ProducerStateManager.check`), the bookkeeping after it
    (:meth:`ProducerStateManager.update`), expiry, and a byte encoding for snapshots.

    File I/O (``NNNNNNNNNNNNNNNNNNNN.snapshot`` files, replay of the log) belongs to
    :mod:`snakka.storage.unified_log`, which owns the partition directory. This module never
    touches a file, a socket or a clock: times are passed in.

Semantics (Kafka 2.5+ / 4.x ``ProducerAppendInfo`` and ``UnifiedLog``)
    * producerId -1: no checks at all.
    * Duplicate: same epoch and the batch's (baseSequence, lastSequence) equals one of
      the retained batches: the broker answers success with the ORIGINAL offsets and
      does not append (``Verdict.duplicate``).
    * Lower epoch than known: INVALID_PRODUCER_EPOCH (47) (Kafka >= 2.7 answers this
      instead of the fatal PRODUCER_FENCED on produce).
    * Higher epoch: the first sequence must be 0, else OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    * Same epoch: sequence must be lastSequence + 1 (0 after Int32.MAX), else 45.
    * Unknown producer (no state: never seen, or expired, or its data was deleted): any
      sequence is accepted. This is Kafka's behaviour since 2.5 (KIP-360): the broker no
      longer answers UNKNOWN_PRODUCER_ID (59); the producer's state simply restarts from
      what it sends. (Kafka's TV2-verification special case "unknown producer must start
      at 0" needs transaction verification state and is left to the transactions work.)
    * A non-transactional batch from a producer with an ongoing transaction:
      INVALID_TXN_STATE (48).
    * A COMMIT/ABORT marker (:meth:`ProducerStateManager.check_marker`, written only by the
      transaction coordinator): an older producer epoch is INVALID_PRODUCER_EPOCH (47), an
      older coordinator epoch than the producer's last marker TRANSACTION_COORDINATOR_FENCED
      (52); a newer epoch is adopted. The marker ends the ongoing transaction
      (:meth:`ProducerStateManager.completed_txn` says which offsets it spanned, and
      :meth:`ProducerStateManager.last_stable_offset_after` the LSO it leaves, both for
      the aborted-transaction index), so the first unstable offset moves on.

Deliberate differences from Kafka
    * Snapshots are Kafka's ``.snapshot`` files (ProducerSnapshot version 1, see
      :func:`encode_snapshot`), so Kafka 4.0 loads a snakka data directory's producer state
      as its own. Kafka keeps only each producer's last batch; snakka writes one entry per
      retained batch of a producer, oldest first, so its restart still detects duplicates
      of every in-flight retry. Kafka's loader keeps the last entry it reads for a producer
      id, which is the newest batch: the state Kafka would have written itself.
    * Expiry uses the broker's time of the last append (passed in as ``now_ms``) rather
      than the batch's producer-supplied maxTimestamp, so a producer replaying old data
      does not lose its deduplication state early.

Threading
    Owned by the partition's event-loop thread; not thread-safe.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

from snakka.config import broker_default_int
from snakka.limits import INT32_MAX, NUM_BATCHES_TO_RETAIN
from snakka.protocol.errors import DecodeError
from snakka.protocol.internal.storage.producer_snapshot import (
    ProducerEntry,
    ProducerSnapshot,
)
from snakka.records.batch import BatchHeader, increment_sequence
from snakka.util.crc32c import crc32c

# Kafka error codes (mirror snakka.protocol.errors.ErrorCode; plain ints compare equal).
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52
UNKNOWN_PRODUCER_ID = 59

DEFAULT_PRODUCER_ID_EXPIRATION_MS = broker_default_int("producer.id.expiration.ms")
NO_PRODUCER_EPOCH = -1


class ProducerStateError(Exception):
    """An append was refused by the idempotence/transaction checks."""

    def __init__(self, error_code: int, message: str = "") -> None:
        super().__init__(message or f"producer state error {error_code}")
        self.error_code = int(error_code)
        self.message = message


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class Verdict(NamedTuple):
    """Outcome of :meth:`ProducerStateManager.check`.

    ``error_code`` 0 and ``duplicate`` None: append. ``duplicate`` set: do not append,
    answer with its offsets. ``error_code`` != 0: refuse with that code."""

    error_code: int = 0
    message: str = ""
    duplicate: BatchMetadata | None = None

    @property
    def ok(self) -> bool:
        return self.error_code == 0 and self.duplicate is None


ACCEPT = Verdict()


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker at ``last_offset`` (Kafka's CompletedTxn):
    ``first_offset`` is its first batch."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerStateEntry:
    """State of one producer id in one partition."""

    __slots__ = (
        "producer_id",
        "producer_epoch",
        "batches",
        "last_timestamp",
        "current_txn_first_offset",
        "coordinator_epoch",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        last_timestamp: int = -1,
        current_txn_first_offset: int | None = None,
        coordinator_epoch: int = -1,
        batches: Iterable[BatchMetadata] = (),
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(batches, NUM_BATCHES_TO_RETAIN)
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.coordinator_epoch = coordinator_epoch

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            self.coordinator_epoch,
            self.batches,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(pid={self.producer_id}, epoch={self.producer_epoch}, "
            f"batches={list(self.batches)}, txn_first={self.current_txn_first_offset})"
        )


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """Producer state of one partition. ``map_end_offset`` is the log offset up to which
    (exclusive) appends have been applied; snapshots are named after it."""

    def __init__(
        self, *, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> None:
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0

    # ------------------------------------------------------------ checks

    def check(self, header: BatchHeader) -> Verdict:
        """Validate a batch's producer id/epoch/sequence against the state (no change)."""
        pid = header.producer_id
        if pid < 0:
            return ACCEPT
        entry = self.producers.get(pid)
        if entry is None:
            return ACCEPT  # unknown producer: accepted whatever its sequence (see module doc)
        return self._check_entry(entry, header)

    def _check_entry(self, entry: ProducerStateEntry, h: BatchHeader) -> Verdict:
        epoch = h.producer_epoch
        first_seq = h.base_sequence
        if h.is_control:
            if epoch < entry.producer_epoch:
                return Verdict(
                    INVALID_PRODUCER_EPOCH,
                    f"marker epoch {epoch} of producer {entry.producer_id} is older than "
                    f"the last seen epoch {entry.producer_epoch}",
                )
            return ACCEPT
        dup = entry.find_duplicate(epoch, first_seq, increment_sequence(first_seq, h.last_offset_delta))
        if dup is not None:
            return Verdict(duplicate=dup)
        if epoch < entry.producer_epoch:
            return Verdict(
                INVALID_PRODUCER_EPOCH,
                f"epoch of producer {entry.producer_id} is {epoch}, which is older than the "
                f"last seen epoch {entry.producer_epoch}",
            )
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                return Verdict(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"invalid sequence number for new epoch {epoch} of producer "
                    f"{entry.producer_id}: {first_seq} (expected 0)",
                )
        elif entry.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(
            entry.last_seq, first_seq
        ):
            return Verdict(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"out of order sequence number for producer {entry.producer_id}: "
                f"{first_seq} (incoming), {entry.last_seq} (current end sequence number)",
            )
        if entry.current_txn_first_offset is not None and not h.is_transactional:
            return Verdict(
                INVALID_TXN_STATE,
                f"expected transactional write from producer {entry.producer_id}",
            )
        return ACCEPT

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> Verdict:
        """Checks before writing a COMMIT/ABORT marker (Kafka's
        ProducerAppendInfo.appendEndTxnMarker): an epoch older than the producer's is
        INVALID_PRODUCER_EPOCH; a coordinator epoch older than the one that wrote the
        producer's last marker is TRANSACTION_COORDINATOR_FENCED (a zombie coordinator)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return ACCEPT
        if producer_epoch < entry.producer_epoch:
            return Verdict(
                INVALID_PRODUCER_EPOCH,
                f"marker epoch {producer_epoch} of producer {producer_id} is older than the "
                f"last seen epoch {entry.producer_epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            return Verdict(
                TRANSACTION_COORDINATOR_FENCED,
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than the last coordinator epoch {entry.coordinator_epoch}",
            )
        return ACCEPT

    def completed_txn(
        self, producer_id: int, marker_offset: int, is_aborted: bool
    ) -> CompletedTxn | None:
        """The transaction a marker at ``marker_offset`` completes (call before
        :meth:`update` applies the marker); None when the producer has no ongoing
        transaction: as Kafka, an empty transaction moves no LSO and is not indexed."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.current_txn_first_offset is None:
            return None
        return CompletedTxn(producer_id, entry.current_txn_first_offset, marker_offset, is_aborted)

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is done (Kafka's lastStableOffset(completedTxn)): the
        first offset of the oldest OTHER ongoing transaction, else the offset after the
        marker. Stored in the aborted-transaction index entry."""
        others = [
            e.current_txn_first_offset
            for pid, e in self.producers.items()
            if pid != completed.producer_id and e.current_txn_first_offset is not None
        ]
        return min(others) if others else completed.last_offset + 1

    # ------------------------------------------------------------ updates

    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        last_offset: int,
        timestamp_ms: int = -1,
        coordinator_epoch: int | None = None,
    ) -> None:
        """Record an appended batch (after a successful ``check`` and write).

        ``timestamp_ms`` is the broker time of the append (used for expiry);
        ``coordinator_epoch`` that of a marker's coordinator (kept for the fencing check)."""
        if last_offset + 1 > self.map_end_offset:
            self.map_end_offset = last_offset + 1
        pid = header.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid, header.producer_epoch)
        epoch = header.producer_epoch
        entry.last_timestamp = timestamp_ms
        if header.is_control:
            # A transaction marker ends the producer's transaction (commit or abort alike).
            if epoch > entry.producer_epoch:
                entry.producer_epoch = epoch
                entry.batches.clear()
            entry.current_txn_first_offset = None
            if coordinator_epoch is not None:
                entry.coordinator_epoch = coordinator_epoch
            return
        if epoch != entry.producer_epoch:
            entry.producer_epoch = epoch
            entry.batches.clear()
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                increment_sequence(header.base_sequence, header.last_offset_delta),
                first_offset,
                last_offset,
                timestamp_ms,
            )
        )
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an ongoing transaction (for the LSO), or None.

        Runs for every partition of every Fetch (the LSO of each): a plain loop, no list."""
        first = None
        for e in self.producers.values():
            offset = e.current_txn_first_offset
            if offset is not None and (first is None or offset < first):
                first = offset
        return first

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Forget producers idle for ``producer.id.expiration.ms`` with no open
        transaction (Kafka's removeExpiredProducers). Returns the removed ids."""
        limit = self.producer_id_expiration_ms
        expired = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= limit
        ]
        for pid in expired:
            del self.producers[pid]
        return expired

    def truncate(self) -> None:
        """Forget everything (before a reload from a snapshot + replay)."""
        self.producers.clear()
        self.map_end_offset = 0

    # ------------------------------------------------------------ snapshots

    def snapshot_bytes(self) -> bytes:
        return encode_snapshot(self.producers.values())

    def load_snapshot_bytes(self, data: bytes, offset: int) -> None:
        """Replace the state with a decoded snapshot taken at ``offset``; raises
        ``ValueError`` on a corrupt snapshot (state unchanged then)."""
        entries = decode_snapshot(data)
        self.producers = {e.producer_id: e for e in entries}
        self.map_end_offset = offset


# Snapshot files: Kafka's format (ProducerStateManager.writeSnapshot/readSnapshot), big-endian:
#   version int16 (1) | crc uint32: CRC32C of everything after it |
#   count int32 | count x ProducerEntry (producerId int64 | epoch int16 | lastSequence int32 |
#   lastOffset int64 | offsetDelta int32 | timestamp int64 | coordinatorEpoch int32 |
#   currentTxnFirstOffset int64)
# the schema generated as snakka.protocol.internal.storage.ProducerSnapshot. A producer with no
# batch (its epoch bumped by a marker) has lastSequence -1, lastOffset -1, offsetDelta 0, as
# Kafka writes it. Older snakka releases wrote a format of their own, version
# LEGACY_SNAPSHOT_VERSION: still read (an upgrade keeps its deduplication state); the next
# snapshot is written in Kafka's format.
SNAPSHOT_VERSION = ProducerSnapshot.VALID_VERSIONS[1]
LEGACY_SNAPSHOT_VERSION = 1001
_SNAP_VERSION = struct.Struct(">h")
_SNAP_CRC = struct.Struct(">I")
_SNAP_ENTRIES_OFFSET = _SNAP_VERSION.size + _SNAP_CRC.size  # Kafka's PRODUCER_ENTRIES_OFFSET
NO_SEQUENCE = -1
NO_OFFSET = -1

_LEGACY_HEAD = struct.Struct(">hI")
_LEGACY_COUNT = struct.Struct(">i")
_LEGACY_ENTRY = struct.Struct(">qhqqib")
_LEGACY_BATCH = struct.Struct(">iiqqq")


def _decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence (sequences wrap after Int32.MAX)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def snapshot_entries(entries: Iterable[ProducerStateEntry]) -> list[ProducerEntry]:
    """The ProducerSnapshot entries for ``entries``: one per retained batch, oldest first,
    the newest carrying the producer's last timestamp (see the module docstring)."""
    out = []
    for e in entries:
        txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        batches = list(e.batches)
        if not batches:
            out.append(ProducerEntry(e.producer_id, e.producer_epoch, NO_SEQUENCE, NO_OFFSET, 0,
                                     e.last_timestamp, e.coordinator_epoch, txn))
            continue
        for i, b in enumerate(batches):
            last = i == len(batches) - 1
            out.append(ProducerEntry(e.producer_id, e.producer_epoch, b.last_seq, b.last_offset,
                                     b.last_offset - b.first_offset,
                                     e.last_timestamp if last else b.timestamp,
                                     e.coordinator_epoch, txn))
    return out


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """A ``.snapshot`` file's bytes, byte for byte as Kafka 4.0 writes them."""
    out = bytearray(_SNAP_VERSION.pack(SNAPSHOT_VERSION))
    ProducerSnapshot(crc=0, producer_entries=snapshot_entries(entries)).write(out,
                                                                              SNAPSHOT_VERSION)
    _SNAP_CRC.pack_into(out, _SNAP_VERSION.size, crc32c(memoryview(out)[_SNAP_ENTRIES_OFFSET:]))
    return bytes(out)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """The producer states of a ``.snapshot`` file (Kafka's format, or snakka's legacy one);
    ``ValueError`` if it is corrupt (Kafka's CorruptSnapshotException: the caller deletes it
    and rebuilds from the log)."""
    try:
        (version,) = _SNAP_VERSION.unpack_from(data, 0)
    except struct.error as exc:
        raise ValueError(f"truncated producer snapshot: {exc}") from exc
    if version == LEGACY_SNAPSHOT_VERSION:
        return _decode_legacy_snapshot(data)
    if version != SNAPSHOT_VERSION:
        raise ValueError(f"snapshot contained an unknown file version {version}")
    try:
        snap = ProducerSnapshot.read(data, _SNAP_VERSION.size, version)[0]
    except DecodeError as exc:
        raise ValueError(f"snapshot failed schema validation: {exc}") from exc
    computed = crc32c(memoryview(data)[_SNAP_ENTRIES_OFFSET:])
    if snap.crc != computed:
        raise ValueError(f"snapshot is corrupt (stored crc {snap.crc}, computed {computed})")
    out: list[ProducerStateEntry] = []
    for pe in snap.producer_entries:
        # Consecutive entries of one producer id are its retained batches, oldest first.
        if out and out[-1].producer_id == pe.producer_id:
            entry = out[-1]
        else:
            entry = ProducerStateEntry(pe.producer_id)
            out.append(entry)
        entry.producer_epoch = pe.epoch
        entry.last_timestamp = pe.timestamp
        entry.coordinator_epoch = pe.coordinator_epoch
        txn = pe.current_txn_first_offset
        entry.current_txn_first_offset = txn if txn >= 0 else None
        if pe.last_offset >= 0:
            delta = pe.offset_delta
            entry.batches.append(BatchMetadata(_decrement_sequence(pe.last_sequence, delta),
                                               pe.last_sequence, pe.last_offset - delta,
                                               pe.last_offset, pe.timestamp))
    return out


def _decode_legacy_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """snakka's own format before Kafka's (version 1001): producerId int64 | epoch int16 |
    lastTimestamp int64 | currentTxnFirstOffset int64 | coordinatorEpoch int32 | nbatches
    int8 | nbatches x (firstSeq int32 | lastSeq int32 | firstOffset int64 | lastOffset int64
    | timestamp int64), after version int16 | crc32c uint32 | count int32."""
    try:
        _version, crc = _LEGACY_HEAD.unpack_from(data, 0)
        body = memoryview(data)[_LEGACY_HEAD.size :]
        if crc32c(body) != crc:
            raise ValueError("producer snapshot CRC mismatch")
        (count,) = _LEGACY_COUNT.unpack_from(body, 0)
        pos = _LEGACY_COUNT.size
        out = []
        for _ in range(count):
            pid, epoch, ts, txn_first, coord_epoch, nb = _LEGACY_ENTRY.unpack_from(body, pos)
            pos += _LEGACY_ENTRY.size
            batches = []
            for _b in range(nb):
                batches.append(BatchMetadata(*_LEGACY_BATCH.unpack_from(body, pos)))
                pos += _LEGACY_BATCH.size
            out.append(
                ProducerStateEntry(
                    pid, epoch, ts, None if txn_first < 0 else txn_first, coord_epoch, batches
                )
            )
        if pos != len(body):
            raise ValueError("producer snapshot has trailing bytes")
        return out
    except struct.error as exc:
        raise ValueError(f"truncated producer snapshot: {exc}") from exc
