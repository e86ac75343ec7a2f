"""The transaction coordinator's state machine (Kafka's TransactionCoordinator,
TransactionStateManager and TransactionMetadata), sans-I/O.

What this module owns
    Every transactional id's :class:`TransactionMetadata` (producer id and epoch, the last
    epoch for KIP-360 retries, the next producer id for KIP-890 epoch overflow, state, the
    partitions in the transaction, timeout and timestamps) for the ``__transaction_state``
    partitions this broker has loaded, and the operations on it: InitProducerId,
    AddPartitionsToTxn (the client's add, and the v4+ broker's verify-only question),
    AddOffsetsToTxn, EndTxn, the completion of the markers, the abort of timed-out transactions
    and the expiry of idle transactional ids.

What it does not own
    Sockets, files, the log and the clock. Each state change is returned as a
    :class:`TxnLogRecord` (key: the transactional id; value: Kafka's TransactionLogValue fields,
    ``None`` for a tombstone; :func:`value_to_dict` gives it under Kafka's schema field names)
    that the shell encodes and appends to ``__transaction_state``
    before it answers; :meth:`TransactionCoordinator.load` rebuilds the state from those records.
    The transaction markers a PrepareCommit / PrepareAbort calls for are returned as
    :class:`TxnMarker` lists (also from :meth:`TransactionCoordinator.pending_markers` after a
    load, since a coordinator that dies between Prepare and Complete must finish the job); the
    shell writes them and then calls :meth:`TransactionCoordinator.complete_markers`.

Decisions
    * The core applies a transition as soon as it returns its record: the shell appends before it
      answers and a failed append unloads the partition (Kafka keeps a ``pendingState`` instead,
      which answers CONCURRENT_TRANSACTIONS while the write is in flight; with a single writer
      per partition that window does not exist here).
    * A fence (InitProducerId on an Ongoing transaction, a timed-out transaction) bumps the
      epoch, passes through PrepareEpochFence (in memory only, as in Kafka) and lands in
      PrepareAbort within the same call; the fenced client's InitProducerId gets
      CONCURRENT_TRANSACTIONS and retries once the abort is complete.
    * Transaction version 2 (KIP-890, EndTxn v5+): every EndTxn from the client bumps the epoch
      and the markers carry the bumped epoch; when the current epoch is exhausted
      (>= Short.MaxValue - 1) the next producer id is allocated at Prepare time and takes over,
      at epoch 0, at Complete. A retry is recognised by the client's epoch being one below the
      stored one (or by the previous producer id after an overflow). An abort not from the
      client (fence, timeout) bumps once, in the fence, not a second time in the Prepare.
    * A TV2 abort with no transaction in progress (Empty, CompleteCommit, CompleteAbort) is a
      Prepare with no partitions: it has no markers to write and completes in the same call.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from snakka.protocol.errors import ErrorCode
from snakka.util.java import java_string_hash

Clock = Callable[[], int]
ProducerIdAllocator = Callable[[], int]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767
TRANSACTION_STATE_TOPIC = "__transaction_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

TopicPartition = tuple[str, int]


class TxnState(enum.IntEnum):
    """Kafka's TransactionState; the value is the id stored in TransactionLogValue."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


# Kafka's TransactionState.validPreviousStates (as in the 4.0 broker: a TV2 abort may follow
# Empty, CompleteCommit or CompleteAbort, fencing with no partition in the transaction).
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE,
                                       TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                       TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

# States in which a transactional id has no transaction in progress (expirable, re-initable).
_COMPLETED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


class IllegalTransitionError(AssertionError):
    """A transition Kafka's state machine forbids: a bug in the coordinator, never client input."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's TransactionMetadata.isEpochExhausted: the last epochs are kept for fencing."""
    return epoch >= SHORT_MAX - 1


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's Utils.abs(transactionalId.hashCode()) % transaction.state.log.num.partitions."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# Request versions below these predate PRODUCER_FENCED (KIP-588); Kafka's KafkaApis answers
# INVALID_PRODUCER_EPOCH to them instead (api key -> first version that knows PRODUCER_FENCED).
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}   # InitProducerId, AddPartitionsToTxn,
#                                                AddOffsetsToTxn, EndTxn


def error_for_version(error: ErrorCode, api_key: int, version: int) -> ErrorCode:
    """The coordinator's answer as a client of ``version`` of ``api_key`` understands it."""
    if error == ErrorCode.PRODUCER_FENCED and version < _FENCED_SINCE.get(api_key, 0):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def leader_verification_error(error: ErrorCode, abortable_supported: bool) -> ErrorCode:
    """A partition leader's answer for the coordinator's verdict on a partition (Kafka's
    AddPartitionsToTxnManager, for Produce and TxnOffsetCommit alike): producers expect
    INVALID_PRODUCER_EPOCH rather than PRODUCER_FENCED there, and a client whose request version
    predates TRANSACTION_ABORTABLE (KIP-890) gets INVALID_TXN_STATE."""
    if error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error == ErrorCode.TRANSACTION_ABORTABLE and not abortable_supported:
        return ErrorCode.INVALID_TXN_STATE
    return error


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The broker configs of the transaction coordinator (Kafka's
    TransactionStateManagerConfig), each field named after its config; defaults as Kafka's. The
    two cleanup intervals are for the shell, which schedules the two timer calls."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_state_log_num_partitions: int = 50
    offsets_topic_num_partitions: int = 50
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """Kafka's TransactionLogValue (v1) as plain data; partitions sorted, grouped by topic."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: tuple[tuple[str, tuple[int, ...]], ...]
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    next_producer_epoch: int = NO_PRODUCER_EPOCH
    client_transaction_version: int = 0


# TransactionLogValue's schema field names (Kafka's JSON), for the shell's encoding.
_VALUE_FIELDS = (
    ("ProducerId", "producer_id"), ("PreviousProducerId", "previous_producer_id"),
    ("NextProducerId", "next_producer_id"), ("ProducerEpoch", "producer_epoch"),
    ("NextProducerEpoch", "next_producer_epoch"),
    ("TransactionTimeoutMs", "transaction_timeout_ms"),
    ("TransactionStatus", "transaction_status"),
    ("TransactionLastUpdateTimestampMs", "transaction_last_update_timestamp_ms"),
    ("TransactionStartTimestampMs", "transaction_start_timestamp_ms"),
    ("ClientTransactionVersion", "client_transaction_version"),
)


def value_to_dict(v: TransactionLogValue) -> dict[str, object]:
    """The value under Kafka's schema field names (JSON-ready)."""
    d: dict[str, object] = {k: getattr(v, a) for k, a in _VALUE_FIELDS}
    d["TransactionPartitions"] = [{"Topic": t, "PartitionIds": list(ps)}
                                  for t, ps in v.transaction_partitions]
    return d


def value_from_dict(d: dict[str, object]) -> TransactionLogValue:
    """Inverse of :func:`value_to_dict`; a tagged field absent (a v0 value) takes its default."""
    defaults = {"PreviousProducerId": NO_PRODUCER_ID, "NextProducerId": NO_PRODUCER_ID,
                "NextProducerEpoch": NO_PRODUCER_EPOCH, "ClientTransactionVersion": 0}
    kw: dict[str, int] = {}
    for k, a in _VALUE_FIELDS:
        x = d.get(k, defaults.get(k))
        if not isinstance(x, int):
            raise ValueError(f"TransactionLogValue field {k} missing or not an integer")
        kw[a] = x
    parts = d.get("TransactionPartitions") or []
    if not isinstance(parts, list):
        raise ValueError("TransactionLogValue TransactionPartitions is not a list")
    try:
        tps = tuple((str(e["Topic"]), tuple(int(p) for p in e["PartitionIds"])) for e in parts)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"TransactionLogValue TransactionPartitions malformed: {exc}") from None
    return TransactionLogValue(transaction_partitions=tps, **kw)


@dataclass(frozen=True, slots=True)
class TxnLogRecord:
    """One record for ``__transaction_state``: key TransactionLogKey, value None = tombstone."""

    partition: int
    transactional_id: str
    value: TransactionLogValue | None


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One WriteTxnMarkers entry: a control record for ``topic_partition``."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id's state (Kafka's TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    txn_last_update_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp_ms: int = -1
    client_transaction_version: int = 0

    def transition(self, new_state: TxnState) -> None:
        if self.state not in VALID_PREVIOUS_STATES[new_state]:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id!r}: illegal transition "
                f"{self.state.name} -> {new_state.name}")
        self.state = new_state

    def to_log_value(self) -> TransactionLogValue:
        by_topic: dict[str, list[int]] = {}
        for topic, p in self.partitions:
            by_topic.setdefault(topic, []).append(p)
        parts = tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))
        return TransactionLogValue(
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.txn_timeout_ms, transaction_status=int(self.state),
            transaction_partitions=parts,
            transaction_last_update_timestamp_ms=self.txn_last_update_timestamp_ms,
            transaction_start_timestamp_ms=self.txn_start_timestamp_ms,
            previous_producer_id=self.previous_producer_id,
            next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version)

    @classmethod
    def from_log_value(cls, transactional_id: str, v: TransactionLogValue) -> TransactionMetadata:
        # Kafka does not store the last epoch; a reloaded transaction forgets it (a KIP-360 retry
        # after a coordinator move is answered PRODUCER_FENCED, as on Kafka).
        return cls(transactional_id=transactional_id, producer_id=v.producer_id,
                   producer_epoch=v.producer_epoch, txn_timeout_ms=v.transaction_timeout_ms,
                   state=TxnState(v.transaction_status),
                   txn_last_update_timestamp_ms=v.transaction_last_update_timestamp_ms,
                   previous_producer_id=v.previous_producer_id,
                   next_producer_id=v.next_producer_id,
                   partitions={(t, p) for t, ps in v.transaction_partitions for p in ps},
                   txn_start_timestamp_ms=v.transaction_start_timestamp_ms,
                   client_transaction_version=v.client_transaction_version)


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    records: tuple[TxnLogRecord, ...] = ()
    markers: tuple[TxnMarker, ...] = ()


@dataclass(frozen=True, slots=True)
class TxnResult:
    """The answer to AddPartitionsToTxn / AddOffsetsToTxn / EndTxn and what to write for it."""

    error: ErrorCode
    records: tuple[TxnLogRecord, ...] = ()
    markers: tuple[TxnMarker, ...] = ()
    # EndTxn v5+ (TV2): the producer id and epoch the client continues with.
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TimerResult:
    records: tuple[TxnLogRecord, ...] = ()
    markers: tuple[TxnMarker, ...] = ()
    aborted: tuple[str, ...] = ()
    expired: tuple[str, ...] = ()


class TransactionCoordinator:
    """All transactional ids of the loaded ``__transaction_state`` partitions."""

    def __init__(self, config: TxnConfig, clock: Clock,
                 producer_id_allocator: ProducerIdAllocator) -> None:
        self.config = config
        self._clock = clock
        self._allocate = producer_id_allocator
        # partition -> coordinator epoch (the partition's leader epoch), for loaded partitions.
        self._coordinator_epochs: dict[int, int] = {}
        self._txns: dict[str, TransactionMetadata] = {}

    # -- loading -------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.transaction_state_log_num_partitions)

    def load(self, partition: int, coordinator_epoch: int,
             records: Iterable[TxnLogRecord]) -> None:
        """Become coordinator of ``partition`` at ``coordinator_epoch``, replaying its records
        (the last value of a key wins; a tombstone removes it)."""
        self.unload(partition)
        for r in records:
            if r.value is None:
                self._txns.pop(r.transactional_id, None)
            else:
                self._txns[r.transactional_id] = TransactionMetadata.from_log_value(
                    r.transactional_id, r.value)
        self._coordinator_epochs[partition] = coordinator_epoch

    def unload(self, partition: int) -> None:
        self._coordinator_epochs.pop(partition, None)
        for tid in [t for t in self._txns if self.partition_for(t) == partition]:
            del self._txns[tid]

    def is_coordinator(self, transactional_id: str) -> bool:
        return self.partition_for(transactional_id) in self._coordinator_epochs

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self._txns.get(transactional_id)

    def transactional_ids(self) -> list[str]:
        return sorted(self._txns)

    def pending_markers(self) -> list[TxnMarker]:
        """Markers of every transaction in PrepareCommit / PrepareAbort (to (re)send after a
        load; markers are idempotent for the partitions)."""
        out: list[TxnMarker] = []
        for tid in sorted(self._txns):
            m = self._txns[tid]
            if m.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                out.extend(self._markers(m))
        return out

    # -- InitProducerId ------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                         expected_producer_id: int = NO_PRODUCER_ID,
                         expected_producer_epoch: int = NO_PRODUCER_EPOCH) -> InitProducerIdResult:
        """InitProducerId for a transactional id (KIP-360: the expected id/epoch of a producer
        that is recovering, -1/-1 for a fresh one)."""
        if transactional_id == "":
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        if not self.is_coordinator(transactional_id):
            return InitProducerIdResult(ErrorCode.NOT_COORDINATOR)
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        now = self._clock()
        m = self._txns.get(transactional_id)
        if m is None:
            m = TransactionMetadata(transactional_id, self._allocate(), NO_PRODUCER_EPOCH,
                                    transaction_timeout_ms, TxnState.EMPTY, now)
            self._txns[transactional_id] = m
        has_expected = expected_producer_id != NO_PRODUCER_ID
        if has_expected and not (
                m.producer_epoch == NO_PRODUCER_EPOCH
                or expected_producer_id == m.producer_id
                or (expected_producer_id == m.previous_producer_id
                    and is_epoch_exhausted(expected_producer_epoch))):
            return InitProducerIdResult(ErrorCode.PRODUCER_FENCED)
        if m.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if m.state == TxnState.ONGOING:
            # Fence the current producer: abort its transaction at a bumped epoch; the new one
            # retries (CONCURRENT_TRANSACTIONS) until the abort is complete.
            records, markers = self._fence_and_abort(m, now)
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS, records=records,
                                        markers=markers)
        if m.state not in _COMPLETED:
            raise IllegalTransitionError(f"InitProducerId in state {m.state.name}")
        if is_epoch_exhausted(m.producer_epoch) and (
                not has_expected or expected_producer_epoch == m.producer_epoch):
            # Rotate to a new producer id at epoch 0 (Kafka's prepareProducerIdRotation); the
            # last epoch lets a KIP-360 retry from the old id find the new one.
            m.previous_producer_id = m.producer_id
            m.producer_id = self._allocate()
            m.last_producer_epoch = m.producer_epoch if has_expected else NO_PRODUCER_EPOCH
            m.producer_epoch = 0
        elif not has_expected:
            m.last_producer_epoch = NO_PRODUCER_EPOCH
            m.producer_epoch += 1
        elif m.producer_epoch == NO_PRODUCER_EPOCH or expected_producer_epoch == m.producer_epoch:
            m.last_producer_epoch = m.producer_epoch
            m.producer_epoch += 1
        elif expected_producer_epoch == m.last_producer_epoch:
            # A retry of the bump that already happened: answer the same epoch again, no write.
            return InitProducerIdResult(ErrorCode.NONE, m.producer_id, m.producer_epoch)
        else:
            return InitProducerIdResult(ErrorCode.PRODUCER_FENCED)
        m.txn_timeout_ms = transaction_timeout_ms
        m.partitions.clear()
        m.txn_start_timestamp_ms = -1
        m.next_producer_id = NO_PRODUCER_ID
        m.txn_last_update_timestamp_ms = now
        m.transition(TxnState.EMPTY)
        return InitProducerIdResult(ErrorCode.NONE, m.producer_id, m.producer_epoch,
                                    records=(self._record(m),))

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------
    def _check_producer(self, transactional_id: str, producer_id: int,
                        producer_epoch: int) -> tuple[ErrorCode, TransactionMetadata | None]:
        if transactional_id == "":
            return ErrorCode.INVALID_REQUEST, None
        if not self.is_coordinator(transactional_id):
            return ErrorCode.NOT_COORDINATOR, None
        m = self._txns.get(transactional_id)
        if m is None or m.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if m.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED, None
        if m.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS, None
        return ErrorCode.NONE, m

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition],
                       client_transaction_version: int = 0) -> TxnResult:
        """AddPartitionsToTxn (v3- from the client; v4+ non-verify from a partition leader for a
        TV2 producer): the partitions join the transaction, which becomes Ongoing."""
        err, m = self._check_producer(transactional_id, producer_id, producer_epoch)
        if m is None:
            return TxnResult(err)
        new = set(partitions)
        if not new or (m.state == TxnState.ONGOING and new <= m.partitions):
            # Nothing to add (an empty request does not start a transaction): no write.
            return TxnResult(ErrorCode.NONE)
        now = self._clock()
        if m.state in _COMPLETED:
            m.txn_start_timestamp_ms = now
            m.client_transaction_version = client_transaction_version
        m.transition(TxnState.ONGOING)
        m.partitions |= new
        m.txn_last_update_timestamp_ms = now
        return TxnResult(ErrorCode.NONE, records=(self._record(m),))

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]
                          ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """AddPartitionsToTxn v4+ with VerifyOnly: are these partitions in the transaction?
        Changes nothing. The top-level error, else TRANSACTION_ABORTABLE per missing partition."""
        err, m = self._check_producer(transactional_id, producer_id, producer_epoch)
        if m is None:
            return err, {}
        # TRANSACTION_ABORTABLE: the producer wrote to a partition it never added (KIP-890).
        return ErrorCode.NONE, {
            tp: ErrorCode.NONE if tp in m.partitions else ErrorCode.TRANSACTION_ABORTABLE
            for tp in partitions}

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    group_id: str, client_transaction_version: int = 0) -> TxnResult:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        tp = (CONSUMER_OFFSETS_TOPIC,
              partition_for(group_id, self.config.offsets_topic_num_partitions))
        return self.add_partitions(transactional_id, producer_id, producer_epoch, [tp],
                                   client_transaction_version)

    # -- EndTxn --------------------------------------------------------------------------
    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, client_transaction_version: int = 0) -> TxnResult:
        """EndTxn. ``client_transaction_version`` >= 2 (EndTxn v5+, KIP-890) takes Kafka's TV2
        path: every EndTxn bumps the epoch, retries are recognised by the bumped epoch, and an
        abort with no transaction in progress is allowed (it fences, writing no marker)."""
        if transactional_id == "":
            return TxnResult(ErrorCode.INVALID_REQUEST)
        if not self.is_coordinator(transactional_id):
            return TxnResult(ErrorCode.NOT_COORDINATOR)
        m = self._txns.get(transactional_id)
        if m is None:
            return TxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if client_transaction_version >= 2:
            return self._end_txn_tv2(m, producer_id, producer_epoch, commit,
                                     client_transaction_version)
        complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if producer_id != m.producer_id:
            return TxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != m.producer_epoch:
            return TxnResult(ErrorCode.PRODUCER_FENCED)
        if m.state == TxnState.ONGOING:
            records, markers = self._prepare(m, prepare, False, client_transaction_version)
            return TxnResult(ErrorCode.NONE, records, markers, m.producer_id, m.producer_epoch)
        if m.state == complete:      # a retry of the EndTxn that completed
            return TxnResult(ErrorCode.NONE, producer_id=m.producer_id,
                             producer_epoch=m.producer_epoch)
        if m.state == prepare:       # a retry while the markers are being written
            return TxnResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        return TxnResult(ErrorCode.INVALID_TXN_STATE)

    def _end_txn_tv2(self, m: TransactionMetadata, producer_id: int, producer_epoch: int,
                     commit: bool, client_transaction_version: int) -> TxnResult:
        complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        bumped = m.client_transaction_version >= 2
        # A retry of an EndTxn whose answer was lost: the epoch it bumped is one above the
        # client's, or (epoch overflow) the producer id moved on to the next one at epoch 0.
        retry_on_bump = bumped and producer_id == m.producer_id \
            and m.producer_epoch == producer_epoch + 1
        retry_on_overflow = bumped and producer_id == m.previous_producer_id \
            and producer_epoch == SHORT_MAX - 1 and m.producer_epoch == 0
        is_retry = retry_on_bump or retry_on_overflow
        if m.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid_epoch = retry_on_bump
        elif m.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid_epoch = is_retry or producer_epoch == m.producer_epoch
        else:
            valid_epoch = producer_epoch == m.producer_epoch
        if producer_id != m.producer_id and not retry_on_overflow:
            return TxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not valid_epoch:
            return TxnResult(ErrorCode.PRODUCER_FENCED)
        if m.state == prepare:
            return TxnResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if is_retry and m.state == complete:
            pid, epoch = self._client_view(m)
            return TxnResult(ErrorCode.NONE, producer_id=pid, producer_epoch=epoch)
        if m.state == TxnState.ONGOING or (not commit and not is_retry and m.state in _COMPLETED):
            records, markers = self._prepare(m, prepare, True, client_transaction_version)
            pid, epoch = self._client_view(m)
            return TxnResult(ErrorCode.NONE, records, markers, pid, epoch)
        return TxnResult(ErrorCode.INVALID_TXN_STATE)

    def complete_markers(self, transactional_id: str) -> tuple[TxnLogRecord, ...]:
        """Every marker of the PrepareCommit/PrepareAbort is written: move to Complete."""
        m = self._txns.get(transactional_id)
        if m is None or m.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ()
        return (self._complete(m),)

    # -- timers --------------------------------------------------------------------------
    def on_timer(self, now: int | None = None) -> TimerResult:
        """Both timers at once: :meth:`abort_timed_out_transactions` then
        :meth:`expire_transactional_ids`."""
        if now is None:
            now = self._clock()
        a = self.abort_timed_out_transactions(now)
        e = self.expire_transactional_ids(now)
        return TimerResult(a.records + e.records, a.markers, a.aborted, e.expired)

    def abort_timed_out_transactions(self, now: int | None = None) -> TimerResult:
        """Kafka's abortTimedOutTransactions, which the shell runs every
        transaction.abort.timed.out.transaction.cleanup.interval.ms: every Ongoing transaction
        started more than its timeout ago is fenced (epoch bump) and aborted; the markers to
        write are returned."""
        if now is None:
            now = self._clock()
        records: list[TxnLogRecord] = []
        markers: list[TxnMarker] = []
        aborted: list[str] = []
        for tid in sorted(self._txns):
            m = self._txns[tid]
            if m.state == TxnState.ONGOING and m.txn_start_timestamp_ms + m.txn_timeout_ms < now:
                r, mk = self._fence_and_abort(m, now)
                records.extend(r)
                markers.extend(mk)
                aborted.append(tid)
        return TimerResult(tuple(records), tuple(markers), aborted=tuple(aborted))

    def expire_transactional_ids(self, now: int | None = None) -> TimerResult:
        """Kafka's removeExpiredTransactionalIds, which the shell runs every
        transaction.remove.expired.transaction.cleanup.interval.ms: an id with no transaction
        in progress, not updated for transactional.id.expiration.ms, goes Dead and is forgotten;
        its tombstone is returned (so a reload forgets it too, and compaction removes it)."""
        if now is None:
            now = self._clock()
        records: list[TxnLogRecord] = []
        expired: list[str] = []
        for tid in sorted(self._txns):
            m = self._txns[tid]
            if m.state in _COMPLETED and (m.txn_last_update_timestamp_ms
                                          + self.config.transactional_id_expiration_ms <= now):
                m.transition(TxnState.DEAD)
                records.append(TxnLogRecord(self.partition_for(tid), tid, None))
                del self._txns[tid]
                expired.append(tid)
        return TimerResult(tuple(records), expired=tuple(expired))

    # -- internals -----------------------------------------------------------------------
    def _record(self, m: TransactionMetadata) -> TxnLogRecord:
        return TxnLogRecord(self.partition_for(m.transactional_id), m.transactional_id,
                            m.to_log_value())

    def _markers(self, m: TransactionMetadata) -> list[TxnMarker]:
        cepoch = self._coordinator_epochs.get(self.partition_for(m.transactional_id), -1)
        commit = m.state == TxnState.PREPARE_COMMIT
        return [TxnMarker(tp, m.producer_id, m.producer_epoch, commit, cepoch)
                for tp in sorted(m.partitions)]

    def _client_view(self, m: TransactionMetadata) -> tuple[int, int]:
        if m.next_producer_id != NO_PRODUCER_ID:
            return m.next_producer_id, 0
        return m.producer_id, m.producer_epoch

    def _fence_and_abort(self, m: TransactionMetadata, now: int
                         ) -> tuple[tuple[TxnLogRecord, ...], tuple[TxnMarker, ...]]:
        m.transition(TxnState.PREPARE_EPOCH_FENCE)
        # Kafka's prepareFenceProducerEpoch: the last epoch is forgotten (the fenced producer
        # may not resume through a KIP-360 retry); at Short.MaxValue the epoch cannot move.
        m.last_producer_epoch = NO_PRODUCER_EPOCH
        if m.producer_epoch < SHORT_MAX:
            m.producer_epoch += 1
        m.txn_last_update_timestamp_ms = now
        records, markers = self._prepare(m, TxnState.PREPARE_ABORT, False,
                                         m.client_transaction_version, now)
        return records, markers

    def _prepare(self, m: TransactionMetadata, state: TxnState, bump: bool,
                 client_transaction_version: int, now: int | None = None
                 ) -> tuple[tuple[TxnLogRecord, ...], tuple[TxnMarker, ...]]:
        if now is None:
            now = self._clock()
        if bump:
            if is_epoch_exhausted(m.producer_epoch):
                # The bump reaches Short.MaxValue: the next producer id takes over at Complete.
                m.next_producer_id = self._allocate()
            m.last_producer_epoch = m.producer_epoch
            m.producer_epoch += 1
        if m.state in _COMPLETED:
            # A TV2 abort with no partition added: the transaction starts (and ends) now.
            m.txn_start_timestamp_ms = now
        m.client_transaction_version = client_transaction_version
        m.txn_last_update_timestamp_ms = now
        m.transition(state)
        records = [self._record(m)]
        markers = self._markers(m)
        if not markers:
            records.append(self._complete(m, now))
        return tuple(records), tuple(markers)

    def _complete(self, m: TransactionMetadata, now: int | None = None) -> TxnLogRecord:
        m.transition(TxnState.COMPLETE_COMMIT if m.state == TxnState.PREPARE_COMMIT
                     else TxnState.COMPLETE_ABORT)
        # Kafka's prepareComplete: the epoch the markers carried becomes the last epoch.
        m.last_producer_epoch = m.producer_epoch
        if m.next_producer_id != NO_PRODUCER_ID:
            m.previous_producer_id = m.producer_id
            m.producer_id = m.next_producer_id
            m.producer_epoch = 0
            m.next_producer_id = NO_PRODUCER_ID
        m.partitions.clear()
        m.txn_last_update_timestamp_ms = self._clock() if now is None else now
        return self._record(m)

    # -- admin queries -------------------------------------------------------------------
    # Read-only views for DescribeTransactions and ListTransactions (Kafka's
    # TransactionCoordinator.handleDescribeTransactions and
    # TransactionStateManager.listTransactionStates). Nothing here changes state or writes a
    # record; what they return are copies, so a handler can never mutate the core through them.

    @staticmethod
    def state_name(state: TxnState) -> str:
        """Kafka's TransactionState.name ("Empty", "Ongoing", "PrepareCommit", ...), what
        DescribeTransactions and ListTransactions put on the wire and take as filters."""
        return "".join(word.capitalize() for word in state.name.split("_"))

    @classmethod
    def state_from_name(cls, name: str) -> TxnState | None:
        """Kafka's TransactionState.fromName: the exact (case-sensitive) name, else None."""
        for s in TxnState:
            if cls.state_name(s) == name:
                return s
        return None

    def describe_transaction(self, transactional_id: str
                             ) -> tuple[ErrorCode, TransactionMetadata | None]:
        """DescribeTransactions for one id: (NONE, a snapshot of its metadata), or
        INVALID_REQUEST for the empty id, NOT_COORDINATOR when its ``__transaction_state``
        partition is not loaded here, TRANSACTIONAL_ID_NOT_FOUND when it is unknown or Dead
        (being expired)."""
        if transactional_id == "":
            return ErrorCode.INVALID_REQUEST, None
        if not self.is_coordinator(transactional_id):
            return ErrorCode.NOT_COORDINATOR, None
        m = self._txns.get(transactional_id)
        if m is None or m.state == TxnState.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, replace(m, partitions=set(m.partitions))

    def list_transactions(self, producer_ids: Iterable[int] = (),
                          state_names: Iterable[str] = (), duration_ms: int = -1,
                          now: int | None = None
                          ) -> tuple[list[tuple[str, int, TxnState]], list[str]]:
        """ListTransactions: ((transactional id, producer id, state) of every loaded id that
        passes the filters, sorted by id; the state names that are not Kafka's).

        As Kafka: an empty filter does not filter; a state filter naming only unknown states
        matches nothing; ``duration_ms`` >= 0 (v1, KIP-994) keeps the ids whose transaction
        started more than ``duration_ms`` ago (an id with no transaction has start time -1,
        so it passes); Dead ids (being expired) are never listed."""
        if now is None:
            now = self._clock()
        pids = set(producer_ids)
        names = list(dict.fromkeys(state_names))
        states = {s for s in (self.state_from_name(n) for n in names) if s is not None}
        unknown = [n for n in names if self.state_from_name(n) is None]
        out: list[tuple[str, int, TxnState]] = []
        for tid in sorted(self._txns):
            m = self._txns[tid]
            if m.state == TxnState.DEAD:
                continue
            if pids and m.producer_id not in pids:
                continue
            if names and m.state not in states:
                continue
            if duration_ms >= 0 and now - m.txn_start_timestamp_ms <= duration_ms:
                continue
            out.append((tid, m.producer_id, m.state))
        return out, unknown
