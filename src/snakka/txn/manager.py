"""The transaction coordinator's I/O shell: core ↔ event loop ↔ ``__transaction_state`` ↔ markers.

Kafka's TransactionCoordinator + TransactionStateManager + TransactionMarkerChannelManager, for
one broker. The state machine is the sans-I/O core (:mod:`snakka.txn.coordinator`); this module
owns what it must not:

- **Persistence.** Every record the core returns is appended to the ``__transaction_state``
  partition of its transactional id, in Kafka 4.0's record format (:mod:`snakka.txn.records`:
  TransactionLogKey / TransactionLogValue, a tombstone for an expired id) through
  :class:`snakka.coordinator_log.CoordinatorLog`, before the request is answered; under
  ``log.flush.strict=true`` the answer also waits for the fsync. At start-up every partition is
  replayed into the core before the broker accepts connections. The topic is created on the
  first write (as Kafka creates it on the first transactional FindCoordinator) and is a
  compacted topic, as Kafka's (``cleanup.policy=compact``, uncompressed, 100 MiB segments): the
  log cleaner keeps the latest record of each transactional id, and an expired id's tombstone
  (same key) removes it, so replay (which tolerates gaps in offsets and tombstones without an
  earlier record) gives exactly the live state.
- **Migration.** A data directory of an older snakka holds JSON records (key
  ``["transaction", id]``, the value under the schema's field names). Replay still reads them;
  every partition that had one is restated once at start-up, before the broker serves: its
  live records are appended in Kafka's format and its log start moves past the old segments
  (:meth:`snakka.coordinator_log.CoordinatorLog.restate`; a crash in between replays both and
  restates again).
- **A failed write** (ENOSPC, EIO, ...) never leaves memory ahead of the log: the partition is
  reloaded from what is durable and the request gets NOT_COORDINATOR (Kafka's mapping of a
  storage error in a coordinator), so the client looks the coordinator up again and retries.
- **Markers.** A PrepareCommit / PrepareAbort is followed at once by its markers: data
  partitions through ``ReplicaManager.write_txn_marker``, partitions of ``__consumer_offsets``
  through the group coordinator (``set_offsets_marker_writer``: the pending transactional
  offsets become committed or are dropped). Once every marker is written (and, under strict
  durability, fsynced: a Complete record must never be durable while a marker is not, or the
  partition's LSO would stay behind an open transaction forever), the Complete record is
  appended. EndTxn is answered after the markers, so a client that commits and then reads
  read_committed sees its records (Kafka answers after the Prepare record, and the markers
  follow within milliseconds). A marker that cannot be written (a disk error) is retried every
  ``TXN_MARKER_RETRY_BACKOFF_MS`` (limits.py) until it is; meanwhile the transactional id answers
  CONCURRENT_TRANSACTIONS, as Kafka's does while its markers are in flight. A marker refused as
  stale (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED) or for a deleted partition
  counts as written: there is nothing left to end there.
- **After a restart** the transactions found in PrepareCommit / PrepareAbort get their markers
  again (a marker written twice is harmless: the second ends nothing).
- **Timers.** ``transaction.abort.timed.out.transaction.cleanup.interval.ms``: open
  transactions older than their timeout are fenced and aborted.
  ``transaction.remove.expired.transaction.cleanup.interval.ms``: transactional ids idle for
  ``transactional.id.expiration.ms`` are removed.
- **Producer ids.** The core allocates synchronously; ids come from the controller's blocks
  (async: a new block is a metadata-log write), so one id is reserved before each core call that
  may allocate.

Ordering: everything runs on the event loop. The core changes state synchronously within a call;
the awaits (fsync waits) come after, and a second request for the same id meanwhile sees the
Prepare state (CONCURRENT_TRANSACTIONS).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from snakka.coordinator_log import JSON_SERDE, AppendMark, CoordinatorLog, KeyValue
from snakka.limits import TXN_MARKER_RETRY_BACKOFF_MS
from snakka.metadata.features import FINALIZED_FEATURES
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.txn.coordinator import (
    CONSUMER_OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    InitProducerIdResult,
    TopicPartition,
    TransactionCoordinator,
    TxnConfig,
    TxnLogRecord,
    TxnMarker,
    TxnResult,
    TxnState,
    value_from_dict,
    value_to_dict,
)
from snakka.txn.records import TXN_KEY, TransactionLogSerde

if TYPE_CHECKING:
    from snakka.config import BrokerConfig
    from snakka.controller import Controller
    from snakka.replica.manager import ReplicaManager

log = logging.getLogger("snakka.txn")

# A single broker leads __transaction_state's partitions at leader epoch 0 forever: that is the
# coordinator epoch markers carry (Kafka's is the partition's leader epoch).
COORDINATOR_EPOCH = 0
_KEY = TXN_KEY
# Kafka's TransactionStateManager topic configs: compacted, uncompressed, no unclean election;
# segment.bytes comes from transaction.state.log.segment.bytes.
TRANSACTION_STATE_TOPIC_CONFIGS = {
    "cleanup.policy": "compact", "compression.type": "uncompressed",
    "unclean.leader.election.enable": "false"}

# fn(offsets partition, producer id, producer epoch, commit): a marker for __consumer_offsets.
OffsetsMarkerWriter = Callable[[int, int, int, bool], None]
# Marker results that end the marker's work for its partition.
_DONE = frozenset({ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


def txn_config(config: BrokerConfig) -> TxnConfig:
    """The core's settings: each TxnConfig field is the broker config of the same name."""
    return TxnConfig(**{f.name: config.int(f.name.replace("_", "."))
                        for f in dataclasses.fields(TxnConfig)})


class _WriteFailed(Exception):
    """A ``__transaction_state`` append failed; the partition was reloaded."""


class TransactionManager:
    """The transaction coordinator of this broker: ``services.txns``."""

    def __init__(self, config: BrokerConfig, controller: Controller, replicas: ReplicaManager,
                 time_ms: Callable[[], int]) -> None:
        self.broker_config = config
        self.controller = controller
        self.replicas = replicas
        self.time_ms = time_ms
        self.config = txn_config(config)
        self.coordinator = TransactionCoordinator(self.config, time_ms, self._allocate)
        self.log = CoordinatorLog(
            controller, replicas, time_ms, TRANSACTION_STATE_TOPIC,
            self.config.transaction_state_log_num_partitions,
            topic_configs={**TRANSACTION_STATE_TOPIC_CONFIGS, "segment.bytes": str(
                config.int("transaction.state.log.segment.bytes"))},
            lazy=True,
            serde=TransactionLogSerde(FINALIZED_FEATURES["transaction.version"]),
            legacy_serde=JSON_SERDE)
        self._offsets_markers: OffsetsMarkerWriter | None = None
        self._spare_pid: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._retry: asyncio.Event | None = None  # created in start() (needs a loop)

    def set_offsets_marker_writer(self, fn: OffsetsMarkerWriter) -> None:
        """How markers reach ``__consumer_offsets`` partitions (the group coordinator)."""
        self._offsets_markers = fn

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        await self.log.open()
        if self.log.num_partitions != self.config.transaction_state_log_num_partitions:
            # The topic exists with another count: it wins (fixed once created, as Kafka).
            self.config = dataclasses.replace(
                self.config, transaction_state_log_num_partitions=self.log.num_partitions)
            self.coordinator.config = self.config
        by_partition: dict[int, list[TxnLogRecord]] = {
            p: [] for p in range(self.log.num_partitions)}
        n = 0
        for p, key, value in self.log.replay():
            rec = self._decode(p, key, value)
            if rec is not None:
                by_partition[p].append(rec)
                n += 1
        for p, records in by_partition.items():
            self._load(p, records)
        self._migrate()
        self._retry = asyncio.Event()
        cfg = self.config
        self._tasks = [
            asyncio.ensure_future(self._periodically(
                cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                self._abort_timed_out)),
            asyncio.ensure_future(self._periodically(
                cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
                self._expire_ids)),
            asyncio.ensure_future(self._retry_loop())]
        pending = self.coordinator.pending_markers()
        log.info("transaction coordinator loaded %d record(s): %d transactional id(s), %d "
                 "transaction(s) to complete", n, len(self.coordinator.transactional_ids()),
                 len({(m.producer_id, m.commit) for m in pending}))
        if pending:
            await self._finish(pending, self._preparing())

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def _decode(self, p: int, key: tuple[object, ...], value: dict[str, object] | None
                ) -> TxnLogRecord | None:
        if len(key) != 2 or key[0] != _KEY or not isinstance(key[1], str):
            log.warning("%s-%d: unknown record key %r skipped", TRANSACTION_STATE_TOPIC, p, key)
            return None
        try:
            v = None if value is None else value_from_dict(value)
        except ValueError as exc:
            log.warning("%s-%d: record of %r skipped: %s", TRANSACTION_STATE_TOPIC, p, key[1],
                        exc)
            return None
        return TxnLogRecord(p, key[1], v)

    def _load(self, p: int, records: list[TxnLogRecord]) -> None:
        self.coordinator.load(p, COORDINATOR_EPOCH, records)

    def _migrate(self) -> None:
        """Restate every partition that held JSON records in Kafka's format (module doc)."""
        legacy = sorted(self.log.legacy_partitions)
        if not legacy:
            return
        log.info("%s: %d partition(s) hold snakka's old JSON records; rewriting them in Kafka's "
                 "record format", TRANSACTION_STATE_TOPIC, len(legacy))
        for p in legacy:
            self.log.restate(p, self._live(p))

    def _live(self, p: int) -> list[KeyValue]:
        """Partition ``p``'s live state as records: one per transactional id."""
        out: list[KeyValue] = []
        for tid in self.coordinator.transactional_ids():
            m = self.coordinator.get(tid)
            if m is not None and self.coordinator.partition_for(tid) == p:
                out.append(((_KEY, tid), value_to_dict(m.to_log_value())))
        return out

    def _reload(self, p: int) -> None:
        """Back to what is durable in partition ``p`` (after a failed write)."""
        records = [rec for q, key, value in self.log.replay(partitions=[p])
                   if (rec := self._decode(q, key, value)) is not None]
        self._load(p, records)

    # -- producer ids --------------------------------------------------------------------
    def _allocate(self) -> int:
        pid, self._spare_pid = self._spare_pid, None
        if pid is None:  # every caller that may allocate reserves first (_reserve_pid)
            raise RuntimeError("no producer id reserved before a transaction coordinator call")
        return pid

    async def _reserve_pid(self) -> None:
        if self._spare_pid is None:
            self._spare_pid = await self.controller.next_producer_id()

    # -- requests ------------------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                               producer_id: int, producer_epoch: int) -> InitProducerIdResult:
        await self._reserve_pid()
        r = self.coordinator.init_producer_id(transactional_id, transaction_timeout_ms,
                                              producer_id, producer_epoch)
        if not await self._apply(r.records, r.markers, [transactional_id]):
            return InitProducerIdResult(ErrorCode.NOT_COORDINATOR)
        return r

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition],
                             client_transaction_version: int = 0) -> ErrorCode:
        r = self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch,
                                            partitions, client_transaction_version)
        return await self._answer(r)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> ErrorCode:
        r = self.coordinator.add_offsets(transactional_id, producer_id, producer_epoch, group_id)
        return await self._answer(r)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool, client_transaction_version: int = 0) -> TxnResult:
        await self._reserve_pid()  # TV2: an exhausted epoch moves to a new producer id
        r = self.coordinator.end_txn(transactional_id, producer_id, producer_epoch, commit,
                                     client_transaction_version)
        if not await self._apply(r.records, r.markers, [transactional_id]):
            return TxnResult(ErrorCode.NOT_COORDINATOR)
        return r

    async def verify_or_add(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            partitions: list[TopicPartition], *, add: bool,
                            client_transaction_version: int = 0
                            ) -> dict[TopicPartition, ErrorCode]:
        """For a partition leader (Produce, TxnOffsetCommit): ``add=False`` verifies that each
        partition is in the transaction (KIP-890 part 1, TV1 clients); ``add=True`` adds them
        (TV2: Produce v12, TxnOffsetCommit v5). The coordinator's raw error per partition."""
        if add:
            err = await self.add_partitions(transactional_id, producer_id, producer_epoch,
                                            partitions, client_transaction_version or 2)
            return dict.fromkeys(partitions, err)
        top, per = self.coordinator.verify_partitions(transactional_id, producer_id,
                                                      producer_epoch, partitions)
        if top != ErrorCode.NONE:
            return dict.fromkeys(partitions, top)
        return per

    async def _answer(self, r: TxnResult) -> ErrorCode:
        if not await self._apply(r.records, r.markers):
            return ErrorCode.NOT_COORDINATOR
        return r.error

    # -- writes --------------------------------------------------------------------------
    async def _apply(self, records: Iterable[TxnLogRecord], markers: Iterable[TxnMarker],
                     transactional_ids: Iterable[str] = ()) -> bool:
        """Persist ``records`` (durable before the answer under strict durability), then write
        ``markers`` and complete their transactions. False if the records could not be
        written (the partition was reloaded: the caller answers NOT_COORDINATOR)."""
        try:
            marks = self._append(records)
        except _WriteFailed:
            return False
        await self.log.durable(marks)
        markers = list(markers)
        if markers:
            await self._finish(markers, transactional_ids)
        return True

    def _append(self, records: Iterable[TxnLogRecord]) -> list[AppendMark | None]:
        by_partition: dict[int, list[TxnLogRecord]] = {}
        for r in records:
            by_partition.setdefault(r.partition, []).append(r)
        marks: list[AppendMark | None] = []
        failed: OSError | None = None
        for p, recs in by_partition.items():
            kvs: list[KeyValue] = [((_KEY, r.transactional_id),
                                    None if r.value is None else value_to_dict(r.value))
                                   for r in recs]
            try:
                marks.append(self.log.append(p, kvs))
            except OSError as exc:
                log.error("%s-%d: cannot write %d transaction record(s), reloading the durable "
                          "state: %s", TRANSACTION_STATE_TOPIC, p, len(recs), exc)
                self._reload(p)
                failed = exc
                continue
        if failed is not None:
            raise _WriteFailed(str(failed))
        return marks

    async def write_markers(self, markers: Iterable[TxnMarker]
                            ) -> dict[TopicPartition, ErrorCode]:
        """Write the markers of ONE producer (a WriteTxnMarkers entry): data partitions through
        the replica manager, ``__consumer_offsets`` partitions through the group coordinator.
        Returns each partition's result once what was written is durable (strict mode) or
        written (otherwise)."""
        markers = list(markers)
        return {m.topic_partition: e for m, e in zip(markers, await self._write(markers), strict=True)}

    async def _write(self, markers: list[TxnMarker]) -> list[ErrorCode]:
        out: list[ErrorCode] = []
        marks: list[AppendMark | None] = []
        for m in markers:
            topic, partition = m.topic_partition
            if topic == CONSUMER_OFFSETS_TOPIC:
                err = self._offsets_marker(m)
                if err == ErrorCode.NONE and self.replicas.strict_durability:
                    # The group coordinator's records for it must be on disk before the
                    # Complete record can be (see the module doc).
                    pl = self.replicas.get_log(topic, partition)
                    marks.append(None if pl is None else (pl, pl.log_end_offset))
            else:
                err, mark = self.replicas.write_txn_marker(topic, partition, m.producer_id,
                                                           m.producer_epoch, m.commit,
                                                           m.coordinator_epoch)
                marks.append(mark)
            out.append(err)
        await self.replicas.durable(marks)
        return out

    def _offsets_marker(self, m: TxnMarker) -> ErrorCode:
        if self._offsets_markers is None:
            return ErrorCode.NONE  # no group coordinator wired (unit tests): nothing pending
        try:
            self._offsets_markers(m.topic_partition[1], m.producer_id, m.producer_epoch,
                                  m.commit)
        except KafkaError as exc:
            return ErrorCode(exc.code)
        return ErrorCode.NONE

    def _preparing(self) -> list[str]:
        return [tid for tid in self.coordinator.transactional_ids()
                if (t := self.coordinator.get(tid)) is not None
                and t.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)]

    async def _finish(self, markers: list[TxnMarker], transactional_ids: Iterable[str]) -> None:
        """Write the markers of ``transactional_ids``' transactions, then complete every one
        whose markers are all written; the rest are left to the retry loop."""
        errors = await self._write(markers)
        failed = set()
        for m, e in zip(markers, errors, strict=True):
            if e not in _DONE:
                log.warning("%s marker of producer %d for %s-%d not written (%s); retrying",
                            "COMMIT" if m.commit else "ABORT", m.producer_id,
                            *m.topic_partition, ErrorCode(e).name)
                failed.add(m.producer_id)
        records: list[TxnLogRecord] = []
        for tid in sorted(set(transactional_ids)):
            t = self.coordinator.get(tid)
            if t is not None and t.producer_id not in failed:
                records.extend(self.coordinator.complete_markers(tid))
        try:
            self._append(records)
        except _WriteFailed:
            failed.add(-1)  # reloaded in Prepare: the retry loop writes and completes again
        if failed:
            self._schedule_retry()

    def _schedule_retry(self) -> None:
        if self._retry is not None:
            self._retry.set()

    # -- background loops ----------------------------------------------------------------
    async def _retry_loop(self) -> None:
        assert self._retry is not None
        while True:
            await self._retry.wait()
            self._retry.clear()
            await asyncio.sleep(TXN_MARKER_RETRY_BACKOFF_MS / 1000)
            pending = self.coordinator.pending_markers()
            if pending:
                try:
                    await self._finish(pending, self._preparing())
                except Exception:  # a bug must not end the retries: logged, tried again
                    log.exception("completing %d pending marker(s) failed", len(pending))
                    self._schedule_retry()

    async def _periodically(self, period_ms: int, step: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(period_ms / 1000)
            try:
                await step()
            except Exception:  # a bug must not stop the timer: logged, run again next period
                log.exception("transaction coordinator timer %s failed", step.__name__)

    async def _abort_timed_out(self) -> None:
        r = self.coordinator.abort_timed_out_transactions()
        if r.aborted:
            log.info("aborting %d transaction(s) open longer than their timeout: %s",
                     len(r.aborted), ", ".join(r.aborted))
        if r.records or r.markers:
            await self._apply(r.records, r.markers, r.aborted)

    async def _expire_ids(self) -> None:
        r = self.coordinator.expire_transactional_ids()
        if r.expired:
            log.info("removed %d transactional id(s) idle for transactional.id.expiration.ms",
                     len(r.expired))
            await self._apply(r.records, ())
