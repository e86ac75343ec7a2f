"""The durable metadata log: ``<log.dir>/__cluster_metadata-0``, in KRaft's format.

The directory is what Kafka 4.0's KRaft controller keeps for a single combined node, so Kafka
can start on a directory snakka wrote and snakka on one Kafka wrote (docs/data-directory.md):

- segments of v2 batches whose data records are Kafka's metadata records (metadata.kraft:
  framing and the mapping from the core's logical records); every batch carries the leader
  epoch it was written in (``partitionLeaderEpoch``);
- each start of the broker is a new leader epoch: ``quorum-state`` is rewritten first (this node
  leads epoch N), then a LEADER_CHANGE control batch opens the epoch in the log, then the
  node's controller and broker registrations; ``leader-epoch-checkpoint`` lists where each
  epoch starts; ``partition.metadata`` names the metadata topic id; ``bootstrap.checkpoint``
  in the log dir holds the bootstrap feature levels, as ``kafka-storage.sh format`` writes;
- snapshots (``<end offset>-<epoch>.checkpoint``, written by Kafka) are read: replay starts from
  the latest complete one and continues with the log after it.

Metadata changes are rare (topic creation, config changes, producer-id blocks), so every change
is fsynced before the client hears of it; the fsync runs off the event loop (see
controller.metadata_log), and so does the encoding of a large creation's records
(:meth:`MetadataStore.prepare` in a worker thread, :meth:`MetadataStore.append_prepared` on the
loop, in the order the records were applied). A request that changes many things appends all its records as one
batch (more than MAX_RECORDS_PER_BATCH: one metadata transaction over several batches).

**Migration.** A log written by earlier snakka versions holds JSON records. It is replayed as
before, and the controller then calls :meth:`MetadataStore.migrate` once: the state is written
as KRaft records into ``__cluster_metadata-0.kraft-new`` (fsynced), the old directory is renamed
to ``__cluster_metadata-0.json-old``, the new one into place, the parent directory fsynced, and
the old one deleted. Opening the store first finishes or undoes an interrupted migration: with
``__cluster_metadata-0`` present any ``.kraft-new`` is incomplete and removed; without it the
``.kraft-new`` (complete: the renames start only after it is fsynced) is moved into place. A
crash at any point thus leaves either the old log or the new one.

A record that cannot be decoded at replay fails start-up with one line naming the segment file and
offset (:class:`MetadataLogError`). Skipping it instead was considered and rejected: every record
is a change the broker acknowledged (a topic, a config, a producer-id block), so skipping one
would silently lose metadata, or worse, hand out producer ids twice.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from snakka.metadata import kraft
from snakka.records import validate_batches
from snakka.records.record import batch_records, iter_batches
from snakka.storage import LogConfig, UnifiedLog
from snakka.storage.checkpoint import write_partition_metadata

log = logging.getLogger("snakka.metadata")


class MetadataLogError(RuntimeError):
    """The metadata log holds a record that cannot be replayed: start-up must stop."""


METADATA_DIR = "__cluster_metadata-0"
MIGRATION_NEW = METADATA_DIR + ".kraft-new"
MIGRATION_OLD = METADATA_DIR + ".json-old"
QUORUM_STATE_FILE = "quorum-state"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
BOOTSTRAP_FILE = "bootstrap.checkpoint"
# Read chunk when replaying; a single metadata batch is small.
_REPLAY_CHUNK = 1 << 20


def _step(name: str) -> None:
    """A point between two migration steps (tests inject crashes here)."""


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: str, data: bytes) -> None:
    """Atomically (temp file, fsync, rename, fsync of the directory)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _open_log(path: str) -> UnifiedLog:
    os.makedirs(path, exist_ok=True)
    # Retention off: the metadata log is the source of truth and is never trimmed.
    cfg = LogConfig.from_dict({"retention.ms": "-1", "retention.bytes": "-1"})
    return UnifiedLog(path, cfg, recover=True)


class MetadataStore:
    def __init__(self, log_dir: str, *, node_id: int = 1,
                 directory_id: uuid.UUID | None = None,
                 time_ms: Callable[[], int] | None = None) -> None:
        self.log_dir = log_dir
        self.path = os.path.join(log_dir, METADATA_DIR)
        self._time_ms = time_ms or (lambda: time.time_ns() // 1_000_000)
        self._finish_interrupted_migration()
        self.log = _open_log(self.path)
        self.codec = kraft.KraftCodec(node_id, directory_id or uuid.UUID(int=0))
        self.epoch = 0  # the leader epoch this node writes in (begin_epoch)
        self.epochs: list[tuple[int, int]] = []  # (epoch, start offset) seen at replay
        self.legacy = False  # replay found snakka's former JSON records
        self.empty = True  # replay found no metadata record at all
        self.replayer = kraft.Replayer()

    # -- migration --------------------------------------------------------------------------
    def _finish_interrupted_migration(self) -> None:
        new = os.path.join(self.log_dir, MIGRATION_NEW)
        old = os.path.join(self.log_dir, MIGRATION_OLD)
        if os.path.isdir(self.path):
            if os.path.isdir(new):
                log.warning("metadata log: removing %s left by an interrupted migration", new)
                shutil.rmtree(new)
            if os.path.isdir(old):
                log.info("metadata log: removing the migrated JSON log %s", old)
                shutil.rmtree(old)
        elif os.path.isdir(new):
            log.warning("metadata log: finishing an interrupted migration to the KRaft format")
            os.rename(new, self.path)
            _fsync_dir(self.log_dir)
            if os.path.isdir(old):
                shutil.rmtree(old)

    def migrate(self, records: list[dict[str, Any]]) -> None:
        """Replace a legacy JSON log with ``records`` (the replayed state) in KRaft's format,
        crash-safely (see the module docstring); the store then continues on the new log."""
        new = os.path.join(self.log_dir, MIGRATION_NEW)
        old = os.path.join(self.log_dir, MIGRATION_OLD)
        if os.path.isdir(new):
            shutil.rmtree(new)
        self.log.close()
        new_log = _open_log(new)
        try:
            self.log = new_log
            self.epochs, self.epoch, self.empty = [], 0, True
            self.begin_epoch(records)
        finally:
            new_log.close()
        _fsync_dir(self.log_dir)
        _step("written")
        os.rename(self.path, old)
        _step("old-moved")
        os.rename(new, self.path)
        _fsync_dir(self.log_dir)
        _step("new-moved")
        shutil.rmtree(old)
        self.log = _open_log(self.path)
        self.legacy = False

    # -- replay -----------------------------------------------------------------------------
    def _latest_snapshot(self) -> tuple[int, int, list[bytes]] | None:
        """(end offset, epoch, record values) of the latest complete snapshot the log reaches."""
        found = []
        for name in os.listdir(self.path):
            parsed = kraft.parse_snapshot_file_name(name)
            if parsed is not None and parsed[0] <= self.log.log_end_offset:
                found.append((parsed, name))
        for (end, epoch), name in sorted(found, reverse=True):
            with open(os.path.join(self.path, name), "rb") as f:
                data = f.read()
            try:
                return end, epoch, kraft.snapshot_values(data)
            except kraft.KraftFormatError as e:
                log.warning("metadata log: ignoring snapshot %s: %s", name, e)
        return None

    def replay(self) -> Iterator[tuple[int, dict]]:
        """Every logical record as (offset, record), in log order: the latest snapshot's first,
        then the log's after it; MetadataLogError if a record cannot be decoded."""
        start = self.log.log_start_offset
        snap = self._latest_snapshot()
        if snap is not None and snap[0] >= start:
            end, epoch, values = snap
            self.epochs.append((epoch, end))
            for value in values:
                try:
                    recs = self.replayer.feed(value)
                except kraft.KraftFormatError as e:
                    raise self.error(end, f"snapshot record: {e}") from None
                for r in recs:
                    self.empty = False
                    yield end, r
            self.replayer.finish()
            start = end
        offset = start
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, _REPLAY_CHUNK)
            before = offset
            for h, pos in iter_batches(data):
                next_offset = h.base_offset + h.last_offset_delta + 1
                if next_offset <= offset:
                    continue
                epoch = h.partition_leader_epoch
                if not self.epochs or epoch > self.epochs[-1][0]:
                    self.epochs.append((epoch, h.base_offset))
                if not h.is_control:
                    for rec in batch_records(data, pos, h):
                        if rec.offset >= offset and rec.value is not None:
                            yield from self._decode(rec.offset, rec.value)
                offset = next_offset
            if offset == before:  # no complete batch here (recovery trims torn tails)
                break
        dropped = self.replayer.finish()
        if dropped:
            log.warning("metadata log: dropped %d record(s) of an unfinished metadata "
                        "transaction at the end of the log", dropped)

    def _decode(self, offset: int, value: bytes | memoryview) -> Iterator[tuple[int, dict]]:
        if self.legacy or (self.empty and kraft.is_json_value(value)):
            self.legacy = True
            self.empty = False
            try:
                rec = json.loads(bytes(value))
            except ValueError as e:
                raise self.error(offset, f"record is not valid JSON ({e})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
                raise self.error(offset, "record has no metadata record type")
            yield offset, rec
            return
        try:
            recs = self.replayer.feed(value)
        except kraft.KraftFormatError as e:
            raise self.error(offset, f"not a KRaft metadata record: {e}") from None
        self.empty = False
        for r in recs:
            yield offset, r

    def error(self, offset: int, problem: str) -> MetadataLogError:
        """A MetadataLogError naming the segment file that holds ``offset``."""
        path = self.log.dir_path
        for seg in self.log.segments:
            if seg.base_offset <= offset:
                path = seg.path
        return MetadataLogError(
            f"cannot start: metadata log {path} offset {offset}: {problem}; the broker's "
            "metadata cannot be replayed (restore the metadata log or move the log dir aside)")

    # -- writing ----------------------------------------------------------------------------
    def begin_epoch(self, bootstrap: list[dict[str, Any]],
                    registration: Callable[[int], list[tuple[Any, int]]] | None = None) -> int:
        """Start this node's next leader epoch (after replay): quorum-state first, then a
        LEADER_CHANGE control batch, ``bootstrap`` records if the log holds no metadata yet
        (a fresh log, or the state of a migrated one), then ``registration(broker epoch)``
        (Kafka records: the broker epoch is the offset of the last one, the
        RegisterBrokerRecord, as in Kafka); durable when this returns. Returns the epoch."""
        qs_path = os.path.join(self.log.dir_path, QUORUM_STATE_FILE)
        q_epoch, q_version = 0, kraft.KRAFT_VERSION
        if os.path.exists(qs_path):
            try:
                with open(qs_path, "rb") as f:
                    q_epoch, q_version = kraft.parse_quorum_state(f.read())
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.warning("metadata log: unreadable %s (%s); starting a new epoch anyway",
                            qs_path, e)
        last = self.epochs[-1][0] if self.epochs else 0
        self.epoch = max(q_epoch, last) + 1
        _write_file(qs_path, kraft.quorum_state_json(self.codec.node_id, self.epoch,
                                                     data_version=q_version))
        now = self._time_ms()
        start = self.log.log_end_offset
        self.epochs.append((self.epoch, start))
        self.log.leader_epoch = self.epoch  # stamped on every batch appended from now on
        buf = bytearray(kraft.control_batch(kraft.LEADER_CHANGE,
                                            kraft.leader_change_value(self.codec.node_id),
                                            epoch=self.epoch, timestamp_ms=now))
        values = self.codec.transaction(self.codec.encode(bootstrap) if self.empty else [],
                                        "Bootstrap records")
        if registration is not None:
            regs = registration(start + len(values) + len(registration(0)))
            self.codec.broker_epoch = start + len(values) + len(regs)
            values += [kraft.encode_message(m, v) for m, v in regs]
        buf += self._batches(values, now)
        self._append(buf)
        self.log.flush()
        self.empty = self.empty and not bootstrap
        self._write_dir_files()
        return self.epoch

    def _write_dir_files(self) -> None:
        path = self.log.dir_path
        _write_file(os.path.join(path, LEADER_EPOCH_FILE),
                    kraft.leader_epoch_checkpoint(self.epochs))
        write_partition_metadata(path, kraft.METADATA_TOPIC_ID)

    def write_bootstrap_checkpoint(self, bootstrap: list[dict[str, Any]]) -> None:
        """``<log.dir>/bootstrap.checkpoint`` (as ``kafka-storage.sh format`` writes), if
        absent: the feature levels a fresh log would start with."""
        path = os.path.join(self.log_dir, BOOTSTRAP_FILE)
        if not os.path.exists(path):
            _write_file(path, kraft.snapshot_bytes(self.codec.encode(bootstrap),
                                                   timestamp_ms=0))

    def _append(self, buf: bytearray) -> None:
        """Append whole batches (several at once: not a client's Produce)."""
        self.log.append(buf, validate_batches(buf, max_message_bytes=1 << 30,
                                              from_client=False), log_append_time_ms=None)

    def _batches(self, values: list[bytes], now: int) -> bytes:
        out = bytearray()
        for i in range(0, len(values), kraft.MAX_RECORDS_PER_BATCH):
            out += kraft.data_batch(values[i:i + kraft.MAX_RECORDS_PER_BATCH],
                                    epoch=self.epoch, timestamp_ms=now)
        return bytes(out)

    def append(self, records: list[dict], *, sync: bool = True) -> None:
        self.append_prepared(self.prepare(records), sync=sync)

    def prepare(self, records: list[dict]) -> bytes:
        """The batches :meth:`append_prepared` appends for ``records`` (one metadata
        transaction if they need several batches). Reads only the codec and the epoch, which
        change only at start-up: a worker thread may prepare a large change (encoding 10,000
        partition records and their batches takes ~80 ms) while the loop serves."""
        values = self.codec.transaction(self.codec.encode(records), "snakka")
        return self._batches(values, self._time_ms()) if values else b""

    def append_prepared(self, batches: bytes, *, sync: bool = True) -> None:
        """Append what :meth:`prepare` made, in the order the records were applied."""
        if not batches:
            return
        self._append(bytearray(batches))
        self.empty = False
        if sync:
            self.sync()

    def sync(self) -> None:
        self.log.flush()

    def close(self) -> None:
        self.log.flush()
        self.log.close()
