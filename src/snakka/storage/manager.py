"""All partition logs of the broker (Kafka's LogManager).

What this module owns
    The log directory: discovering ``<topic>-<partition>`` dirs at start-up, deciding
    whether they need recovery (``.kafka_cleanshutdown`` present = clean), the
    checkpoint files (``recovery-point-offset-checkpoint``,
    ``log-start-offset-checkpoint``; at a clean shutdown also
    ``replication-offset-checkpoint`` and an empty ``cleaner-offset-checkpoint`` when the
    cleaner wrote none), ``partition.metadata`` and ``leader-epoch-checkpoint`` per
    partition, ``meta.properties``, the ``.lock`` that keeps two brokers off one directory, and
    fan-out of flush/retention over all logs. Each partition is opened as a
    :class:`~snakka.storage.unified_log.UnifiedLog`, whose construction runs
    :class:`~snakka.storage.loader.LogLoader` (recovery) over the directory; the manager
    sums what the loaders did into one start-up log line.

    Every file is the one Kafka 4.0 writes, in its format (issue 17: Kafka can start on a
    stopped snakka's data directory): Kafka reads the high watermarks from
    ``replication-offset-checkpoint`` and each partition's leader epochs from
    ``leader-epoch-checkpoint``. snakka leads every partition at one epoch
    (:attr:`UnifiedLog.leader_epoch`, stamped in every batch), so that file has one entry:
    the epoch from the log start offset, as Kafka's cache keeps it after truncating from the
    start. ``log-start-offset-checkpoint`` lists, as Kafka's, only partitions whose log start
    is above their first segment (or that are tiered).

    ``log_dirs`` is a list like Kafka's ``log.dirs``; only the first is used today (the
    list is kept for JBOD later).

Stray partition directories
    Given the topics of the replayed metadata, :meth:`LogManager.load_all` adopts only the
    partition dirs the metadata knows; the others are *stray*, as Kafka 4.0's
    ``LogManager.isStrayKraftReplica`` says: their topic is not in the metadata, their
    partition index is at or past the topic's partition count, or their ``partition.metadata``
    names another topic id (a deleted incarnation). Adopting one would show its old records in
    a new topic of the same name. A stray is never loaded: its directory is renamed to Kafka's
    ``<topic>-<partition>.<32 hex>-stray`` (``LocalLog.logStrayDirName``). Kafka 4.0 then keeps
    it (it never deletes a ``-stray`` directory: the data may be all that is left of a topic
    deleted by mistake); snakka keeps it too when it holds records, and deletes it (in a
    thread, while the broker starts) when it holds none, which is what a creation killed
    before its metadata commit leaves (snakka makes the directories first, the commit is the
    durability point; Kafka's brokers make them only after the controller committed):
    thousands of empty directories that Kafka would never have. A ``-stray`` directory found
    at start-up is treated alike (kept with records, else removed: an earlier removal cut
    short).

    Unlike Kafka, a partition dir WITHOUT ``partition.metadata`` is not stray when its topic
    and index are in the metadata: snakka writes that file without fsync at creation (the
    metadata commit is the durability point), so a crash may leave a committed partition
    without it; start-up writes it back. After a clean shutdown the topic ids are not read
    (the marker vouches that the broker left every directory matching the metadata, and
    reading 8,000 files would cost start-up time); a directory swapped by hand for one with
    another topic id while the broker was stopped cleanly is therefore adopted.

Threading
    Runs on the event-loop thread, except :meth:`flush_all` (and therefore the
    checkpoint writes), meant for the flush worker thread (see
    :mod:`snakka.storage.flush`), and the removal of empty stray dirs (its own thread, which
    touches only those renamed dirs; :meth:`close` stops it before the lock is released).
    Checkpoint files are written under
    ``_checkpoint_lock``. ``log-start-offset-checkpoint`` changes (DeleteRecords,
    retention) are written by the next :meth:`flush_all` or at :meth:`close`, never
    from the loop (it fsyncs).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import resource
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from .checkpoint import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    PARTITION_METADATA_FILE,
    _atomic_write,
    ensure_meta_properties,
    fsync_file,
    read_offset_checkpoint,
    read_partition_metadata,
    topic_id_to_str,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
    write_partition_metadata,
)
from .cleaner.manager import CLEANER_OFFSET_CHECKPOINT
from .config import LogConfig
from .local_log import parse_partition_dir_name
from .unified_log import UnifiedLog

log = logging.getLogger("snakka.storage")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
CLUSTER_METADATA_TOPIC = "__cluster_metadata"  # KRaft metadata log: never loaded here

# How much older than the start the clean-shutdown marker must be for directory mtimes to
# tell changes apart (file times come from a coarse clock, up to a jiffy behind; 50 ms is
# several jiffies at any HZ).
_MTIME_GRANULARITY_NS = 50_000_000
# A wall clock that ran this much slower than the monotonic clock since the load stepped
# back: directory mtimes are then no evidence, and the clean close fsyncs every directory.
_CLOCK_STEP_TOLERANCE_NS = 1_000_000_000
# Threads for the clean shutdown's per-partition work (flushes and fsyncs, which release
# the GIL): thousands of partitions must not wait for one fsync after another.
CLOSE_THREADS = 8

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def _wall_ms() -> int:
    return int(time.time() * 1000)


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (one fd per segment plus
    connections add up); returns the new soft limit."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY:
            hard = max(soft, 1 << 20)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
        return soft
    except (ValueError, OSError):
        return -1


# Directories in the log dir that look like partitions but are not topic data: the broker's
# metadata log (see snakka.metadata.store) lives in __cluster_metadata-0, as in KRaft.
RESERVED_DIRS = frozenset({"__cluster_metadata-0"})

# Suffixes of partition dirs being removed: ``<topic>-<partition>.<32 hex><suffix>``, Kafka's
# names (LocalLog.DeleteDirSuffix, StrayDirSuffix).
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
# Kafka caps a renamed partition dir's name at 255 bytes (the usual file-name limit) by
# cutting the topic name (LocalLog.logDirNameWithSuffixCappedLength).
MAX_DIR_NAME_LENGTH = 255
# Per-directory log lines for strays deleted at one start-up (each kept one always gets its
# line): a creation of 10,000 partitions killed before its commit must not print 10,000.
MAX_STRAY_LINES = 20


class KnownTopic(Protocol):
    """What the stray check needs of a topic of the metadata (metadata.core.TopicInfo)."""

    topic_id: uuid.UUID
    partitions: int


def stray_dir_name(topic: str, partition: int) -> str:
    """Kafka's ``LocalLog.logStrayDirName``: ``<topic>-<partition>.<uuid hex>-stray``, the
    topic cut short if the name would exceed :data:`MAX_DIR_NAME_LENGTH`."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{STRAY_DIR_SUFFIX}"
    return topic[:max(0, MAX_DIR_NAME_LENGTH - len(suffix))] + suffix


def stray_reason(topic: str, partition: int, disk_topic_id: str | None,
                 known: KnownTopic | None) -> str | None:
    """Why the partition dir ``<topic>-<partition>`` is stray, or None if the metadata owns
    it. ``disk_topic_id``: its ``partition.metadata`` topic id, None if absent or not read (a
    missing id is NOT stray, unlike Kafka: see the module docstring)."""
    if known is None:
        return f"topic {topic} is not in the metadata"
    if partition >= known.partitions:
        return (f"topic {topic} has {known.partitions} partition(s), so no partition "
                f"{partition}")
    if disk_topic_id is not None:
        want = topic_id_to_str(known.topic_id)
        if disk_topic_id != want:
            return (f"its topic id {disk_topic_id} is not topic {topic}'s id {want} (an "
                    "earlier topic of that name)")
    return None


def holds_records(path: str, names: Iterable[str]) -> bool:
    """Whether the partition dir has a non-empty segment file (``.log``, or a ``.log.swap``
    a compaction left): then deleting it could lose data."""
    for name in names:
        if name.endswith((".log", ".log.swap")):
            try:
                if os.stat(os.path.join(path, name)).st_size > 0:
                    return True
            except FileNotFoundError:
                continue
            except OSError:
                return True  # cannot tell: keep it
    return False

def _log_start_offsets(logs: Iterable[tuple[tuple[str, int], UnifiedLog]]
                       ) -> dict[tuple[str, int], int]:
    """``log-start-offset-checkpoint``'s entries, as Kafka's checkpointLogStartOffsetsInDir:
    only logs whose start is above their first segment, or tiered ones (whose start may lie
    below it); for the others the loader's answer, the first segment's base, is right."""
    return {k: p.log_start_offset for k, p in logs
            if p.config.remote_storage_enable or p.log_start_offset > p.local_log.base_offset}


def _epoch_entries(plog: UnifiedLog) -> list[tuple[int, int]]:
    """``leader-epoch-checkpoint``'s entries: the one epoch snakka leads at, from the log start."""
    return [(plog.leader_epoch, plog.log_start_offset)]


class LogDirError(RuntimeError):
    """The log dir cannot be used (a file, not writable, locked by another broker): a
    start-up error whose message is meant for the operator as it is."""


class LogManager:
    """Owner of every :class:`UnifiedLog` in the log dir."""

    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig | None = None,
        time_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        if not log_dirs:
            raise ValueError("log.dirs must name at least one directory")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.log_dir = self.log_dirs[0]
        self.default_config = default_config or LogConfig()
        self.time_ms = time_ms
        self._logs: dict[tuple[str, int], UnifiedLog] = {}
        self._checkpoint_lock = threading.Lock()
        self._closed = False
        self._stray_deleter: threading.Thread | None = None
        self._stop_stray_deletion = threading.Event()
        self._wall_at_load_ns = time.time_ns()
        self._mono_at_load_ns = time.monotonic_ns()
        if os.path.exists(self.log_dir) and not os.path.isdir(self.log_dir):
            raise LogDirError(f"log dir {self.log_dir} is a file, not a directory "
                              "(log.dirs / --data-dir must name a directory)")
        try:
            os.makedirs(self.log_dir, exist_ok=True)
            # A brand-new dir (nothing in it but possibly our lock file) has nothing to
            # recover: it must not be reported as "not shut down cleanly".
            self._fresh = not (set(os.listdir(self.log_dir)) - {LOCK_FILE})
            self._lock_fd = os.open(os.path.join(self.log_dir, LOCK_FILE),
                                    os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise LogDirError(f"log dir {self.log_dir} cannot be used: "
                              f"{e.strerror or e}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise LogDirError(
                f"log dir {self.log_dir} is locked by another process (is a broker already "
                "running on it?)"
            ) from None
        raise_open_file_limit()

    # ------------------------------------------------------------ start-up

    def ensure_meta_properties(self, *, cluster_id: str, node_id: int) -> dict[str, str]:
        """Create or check ``meta.properties`` (ValueError if the dir belongs to another
        cluster/node)."""
        return ensure_meta_properties(self.log_dir, cluster_id=cluster_id, node_id=node_id)

    def load_all(
        self,
        topic_configs: Mapping[str, LogConfig] | Callable[[str], LogConfig | None] | None = None,
        topics: Mapping[str, KnownTopic] | None = None,
    ) -> list[UnifiedLog]:
        """Open every partition dir. Without ``.kafka_cleanshutdown`` every log is
        recovered from its checkpointed recovery point. ``topic_configs`` gives a
        topic's config (default: the manager's default config). ``topics`` (the metadata's
        topics by name): partition dirs it does not own are stray (module docstring), never
        loaded; None adopts every partition dir (tools and tests without metadata)."""
        clean_path = os.path.join(self.log_dir, CLEAN_SHUTDOWN_FILE)
        try:
            clean_ns: int | None = os.stat(clean_path).st_mtime_ns
        except FileNotFoundError:
            clean_ns = None
        clean = clean_ns is not None
        # The clean shutdown fsynced every partition directory before writing its marker,
        # so a directory whose mtime is not past the marker's has not changed since: its
        # clean close may skip the directory fsync (LocalLog.close). Trusted only if the
        # marker is older than now by more than the file-time granularity (a coarse clock,
        # one jiffy), so every change made from now on gets a later mtime; close() drops
        # the trust if the wall clock stepped back meanwhile.
        self._wall_at_load_ns = time.time_ns()
        self._mono_at_load_ns = time.monotonic_ns()
        durable_before = (clean_ns if clean_ns is not None
                          and clean_ns + _MTIME_GRANULARITY_NS < self._wall_at_load_ns else None)
        recovery_points = read_offset_checkpoint(os.path.join(self.log_dir, RECOVERY_POINT_CHECKPOINT))
        start_offsets = read_offset_checkpoint(os.path.join(self.log_dir, LOG_START_OFFSET_CHECKPOINT))
        if not clean and not self._fresh:
            log.info("log dir %s was not shut down cleanly: recovering logs", self.log_dir)
        loaded = []
        scanned = repaired = truncated = deleted = rebuilt = 0
        strays_deleted: list[str] = []
        strays_kept = 0
        # One scandir of the log dir (entry types without a stat each) and one listdir per
        # partition directory, handed to the loader for all its checks.
        with os.scandir(self.log_dir) as it:
            dirs = sorted(e.name for e in it if e.is_dir())
        for name in dirs:
            path = os.path.join(self.log_dir, name)
            if name in RESERVED_DIRS:
                continue  # owned by someone else (the metadata log)
            if name.endswith(DELETE_DIR_SUFFIX):
                log.info("removing partition dir %s left over from a deletion", name)
                shutil.rmtree(path, ignore_errors=True)
                continue
            if name.endswith(STRAY_DIR_SUFFIX):
                # Marked stray at an earlier start: kept while it holds records (as Kafka,
                # which never deletes one), else an earlier removal cut short.
                try:
                    held = holds_records(path, os.listdir(path))
                except OSError:
                    continue
                if held:
                    strays_kept += 1
                    log.warning("stray partition dir %s (set aside at an earlier start) holds "
                                "records: kept, as Kafka 4.0 keeps stray logs; delete it once "
                                "its data is not needed", name)
                else:
                    strays_deleted.append(path)
                continue
            try:
                topic, partition = parse_partition_dir_name(name)
            except ValueError:
                log.warning("ignoring directory %s in log dir: not <topic>-<partition>", name)
                continue
            if topic == CLUSTER_METADATA_TOPIC:
                # Owned by the metadata store (its own UnifiedLog), as in Kafka, whose
                # LogManager never loads the KRaft metadata partition: two owners of one
                # directory would corrupt it, and retention must never touch it.
                continue
            key = (topic, partition)
            if key in self._logs:
                continue
            cfg = self._config_for(topic, topic_configs)
            try:
                names = os.listdir(path)
            except NotADirectoryError:
                continue
            has_id_file = PARTITION_METADATA_FILE in names
            # After a clean shutdown the id is read on first use (module docstring); after a
            # crash it is read now, and checked against the metadata's.
            disk_id = (read_partition_metadata(path) if has_id_file and not clean else None)
            if topics is not None:
                reason = stray_reason(topic, partition, disk_id, topics.get(topic))
                if reason is not None:
                    moved = self._set_aside_stray(path, name, topic, partition, names, reason,
                                                  quiet=len(strays_deleted) >= MAX_STRAY_LINES)
                    if moved is None or not moved[1]:
                        strays_kept += 1
                    else:
                        strays_deleted.append(moved[0])
                    continue
            plog = UnifiedLog(
                path,
                cfg,
                recover=not clean,
                time_ms=self.time_ms,
                recovery_point=recovery_points.get(key, 0),
                log_start_offset=start_offsets.get(key, 0),
                names=names,
                durable_before_ns=durable_before,
            )
            if not has_id_file:
                plog.topic_id = None
            elif clean:
                plog.topic_id_on_disk()  # durable and whole after a clean shutdown
            else:
                plog.topic_id = disk_id
            self._logs[key] = plog
            loaded.append(plog)
            done = plog.load_result
            scanned += done.segments_recovered
            truncated += done.bytes_truncated
            deleted += done.segments_deleted
            rebuilt += done.indexes_rebuilt
            repaired += done.did_recovery_work
        if strays_deleted or strays_kept:
            log.info("stray partition dirs in %s: %d being deleted (no records), %d kept "
                     "(holding records, renamed *-stray)", self.log_dir, len(strays_deleted),
                     strays_kept)
        if strays_deleted:
            # Renamed already (nothing can adopt them now); removing them waits for the disk
            # (8,000 directories: ~15 s of unlinks on a loaded ext4, docs/data-directory.md),
            # so a thread does it while the broker starts and serves. A stop cuts it short
            # between two directories; the next start removes what is left.
            self._stray_deleter = threading.Thread(
                target=self._delete_strays, args=(strays_deleted,), daemon=True,
                name="snakka-stray-delete")
            self._stray_deleter.start()
        if clean:
            # From now on a crash must be detected at the next start.
            os.unlink(clean_path)
        log.info("loaded %d partition logs from %s (clean=%s)", len(loaded), self.log_dir,
                 clean or self._fresh)
        if scanned or repaired:
            log.info(
                "recovery of %s: %d segments re-scanned; %d partitions repaired (%d bytes "
                "truncated, %d segments deleted, %d segment indexes rebuilt)",
                self.log_dir, scanned, repaired, truncated, deleted, rebuilt,
            )
        return loaded

    def _delete_strays(self, paths: list[str]) -> None:
        """The stray deletion thread: remove the renamed empty strays, one by one."""
        for path in paths:
            if self._stop_stray_deletion.is_set():
                return
            shutil.rmtree(path, ignore_errors=True)
        log.info("deleted %d stray partition dirs from %s", len(paths), self.log_dir)

    def join_stray_deletion(self, timeout: float | None = None) -> bool:
        """Wait for the stray deletion :meth:`load_all` started (tests); True once done."""
        t = self._stray_deleter
        if t is not None:
            t.join(timeout)
            return not t.is_alive()
        return True

    def _end_stray_deletion(self) -> None:
        # At most the directory being removed is finished: the lock must not be released
        # while this broker still removes files from the directory.
        self._stop_stray_deletion.set()
        self.join_stray_deletion()

    def _set_aside_stray(self, path: str, name: str, topic: str, partition: int,
                         names: list[str], reason: str, *, quiet: bool
                         ) -> tuple[str, bool] | None:
        """Rename a stray partition dir to Kafka's stray name. Returns its new path and
        whether it is to be deleted (it holds no records), or None if it cannot be renamed
        (then it stays where it is, not loaded)."""
        held = holds_records(path, names)
        target = os.path.join(self.log_dir, stray_dir_name(topic, partition))
        try:
            os.rename(path, target)
        except OSError as e:
            log.warning("partition dir %s is stray (%s) and cannot be renamed (%s): not "
                        "loaded", name, reason, e.strerror or e)
            return None
        if held:
            log.warning("partition dir %s is stray (%s): renamed to %s and kept, as Kafka 4.0 "
                        "keeps stray logs (it holds records; delete it once they are not "
                        "needed)", name, reason, os.path.basename(target))
        elif not quiet:
            log.info("partition dir %s is stray (%s) and holds no records: deleting it", name,
                     reason)
        return target, not held

    def _config_for(
        self,
        topic: str,
        topic_configs: Mapping[str, LogConfig] | Callable[[str], LogConfig | None] | None,
    ) -> LogConfig:
        if topic_configs is None:
            return self.default_config
        if callable(topic_configs):
            cfg = topic_configs(topic)
        else:
            cfg = topic_configs.get(topic)
        return cfg or self.default_config

    # ------------------------------------------------------------ logs

    def get_or_create_log(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        topic_id: uuid.UUID | bytes | str | None = None,
    ) -> UnifiedLog:
        key = (topic, partition)
        plog = self._logs.get(key)
        if plog is None:
            plog = self.open_new_log(topic, partition, config, topic_id)
            self._logs[key] = plog
        elif topic_id is not None and not plog.has_topic_id:
            self._write_topic_id(plog, topic_id)
        return plog

    def open_new_log(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        topic_id: uuid.UUID | bytes | str | None = None,
    ) -> UnifiedLog:
        """Create (or open) a partition's directory and files WITHOUT registering the log:
        it touches nothing but that directory, so it may run in a worker thread (creating
        thousands of partitions must not stall the event loop); :meth:`add_log` registers it
        on the loop. OSError (EMFILE, ENOSPC, ...) leaves it to the caller to clean up."""
        if not _LEGAL_TOPIC.match(topic) or topic in (".", ".."):
            raise ValueError(f"illegal topic name {topic!r}")
        if partition < 0:
            raise ValueError(f"illegal partition {partition}")
        path = os.path.join(self.log_dir, f"{topic}-{partition}")
        # The usual case (a topic's creation): the directory does not exist, so once mkdir
        # has made it, it is known to be empty: the loader is handed its (empty) listing and
        # the small files are written in place (checkpoint.write_new_file), with no stat,
        # listdir, temp file, rename or unlink (a new partition: 8 file calls instead of
        # 20; the kernel's time is mostly the allocation of its 4 inodes, which this does
        # not change: docs/benchmarks.md "Creating 10,000 partitions"). An existing directory
        # is opened, and its files replaced, as before; since start-up sets stray dirs aside
        # (a creation a crash cut short left empty ones) that is only one it could not
        # rename (it logged a warning).
        try:
            os.mkdir(path)
            new = True
        except FileExistsError:
            new = False
        plog = UnifiedLog(path, config or self.default_config, recover=False,
                            time_ms=self.time_ms, names=[] if new else None)
        plog.unsynced_files = True
        try:
            if topic_id is not None:
                self._write_topic_id(plog, topic_id, new=new)
            # As Kafka's leader at creation; no fsync, as partition.metadata (rewritten at
            # the clean shutdown).
            write_leader_epoch_checkpoint(plog.dir_path, _epoch_entries(plog), sync=False,
                                          new=new)
        except BaseException:
            plog.delete()
            raise
        return plog

    def add_log(self, plog: UnifiedLog) -> None:
        """Register a log made by :meth:`open_new_log` (event-loop thread)."""
        self._logs[(plog.topic, plog.partition)] = plog

    @staticmethod
    def _write_topic_id(plog: UnifiedLog, topic_id: uuid.UUID | bytes | str, *,
                        new: bool = False) -> None:
        # No fsync: creating a 50-partition internal topic on the event loop would otherwise
        # cost 100 fsyncs (~0.2 s of stalled loop); see write_partition_metadata.
        write_partition_metadata(plog.dir_path, topic_id, sync=False, new=new)
        plog.topic_id = topic_id_to_str(topic_id)

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[UnifiedLog]:
        return list(self._logs.values())

    def detach_log(self, topic: str, partition: int) -> UnifiedLog | None:
        """Forget a partition's log without touching its files; the caller then calls
        ``UnifiedLog.delete()`` (possibly on a worker thread, so a large directory's removal
        never blocks the event loop)."""
        return self._logs.pop((topic, partition), None)

    def delete_log(self, topic: str, partition: int) -> bool:
        """DeleteTopics: remove the partition's log and directory. Returns False if
        there was none."""
        plog = self._logs.pop((topic, partition), None)
        if plog is None:
            return False
        plog.delete()
        return True

    # ------------------------------------------------------------ flush / retention

    def flush_all(self, *, only_dirty: bool = True) -> int:
        """fsync every log with unflushed data, then write the checkpoints. Meant for a
        worker thread. Returns how many logs were flushed."""
        n = 0
        for plog in list(self._logs.values()):
            if plog.closed:
                continue
            if only_dirty and plog.unflushed_messages == 0 and not plog.log_start_dirty:
                continue
            plog.flush()
            n += 1
        self.checkpoint()
        return n

    def checkpoint(self) -> None:
        """Write the recovery-point and (if changed) log-start-offset checkpoints."""
        with self._checkpoint_lock:
            logs = [(k, p) for k, p in list(self._logs.items()) if not p.closed]
            write_offset_checkpoint(
                os.path.join(self.log_dir, RECOVERY_POINT_CHECKPOINT),
                {k: p.recovery_point for k, p in logs},
            )
            if any(p.log_start_dirty for _k, p in logs) or not os.path.exists(
                os.path.join(self.log_dir, LOG_START_OFFSET_CHECKPOINT)
            ):
                for _k, p in logs:
                    p.log_start_dirty = False
                write_offset_checkpoint(
                    os.path.join(self.log_dir, LOG_START_OFFSET_CHECKPOINT),
                    _log_start_offsets(logs),
                )

    def enforce_retention_all(self, now_ms: int | None = None) -> int:
        """Retention of every log plus producer-id expiry; returns segments deleted."""
        now = self.time_ms() if now_ms is None else now_ms
        deleted = 0
        for plog in list(self._logs.values()):
            if plog.closed:
                continue
            deleted += plog.enforce_retention(now)
            plog.expire_producers(now)
        return deleted

    # ------------------------------------------------------------ shutdown

    def close(self) -> None:
        """Clean shutdown: close (flush) every log, write checkpoints and
        ``.kafka_cleanshutdown``, release the dir lock."""
        if self._closed:
            return
        self._end_stray_deletion()
        logs = list(self._logs.values())
        wall = time.time_ns() - self._wall_at_load_ns
        mono = time.monotonic_ns() - self._mono_at_load_ns
        if wall < mono - _CLOCK_STEP_TOLERANCE_NS:
            log.info("the wall clock stepped back since start-up: fsyncing every partition "
                     "directory at shutdown")
            for plog in logs:
                plog.local_log.dir_durable_before_ns = None
        # Each log's close (producer snapshot, index and .log flushes, directory fsync, epoch
        # checkpoint) is independent of the others and mostly waits in fsync: a pool runs
        # them side by side. The checkpoints and the clean-shutdown marker follow, written
        # only once every log is closed (the marker vouches for all of them).
        if len(logs) > 1:
            with ThreadPoolExecutor(min(CLOSE_THREADS, len(logs)),
                                    thread_name_prefix="snakka-close") as pool:
                for _ in pool.map(self._close_log, logs):
                    pass
        else:
            for plog in logs:
                self._close_log(plog)
        with self._checkpoint_lock:
            write_offset_checkpoint(
                os.path.join(self.log_dir, RECOVERY_POINT_CHECKPOINT),
                {k: p.recovery_point for k, p in self._logs.items()},
            )
            write_offset_checkpoint(
                os.path.join(self.log_dir, LOG_START_OFFSET_CHECKPOINT),
                _log_start_offsets(self._logs.items()),
            )
            # The high watermarks, read by Kafka (a single broker's HW is its log end).
            write_offset_checkpoint(
                os.path.join(self.log_dir, REPLICATION_OFFSET_CHECKPOINT),
                {k: p.high_watermark for k, p in self._logs.items()},
            )
            cleaner = os.path.join(self.log_dir, CLEANER_OFFSET_CHECKPOINT)
            if not os.path.exists(cleaner):
                _atomic_write(cleaner, b"")  # as Kafka's cleaner creates it: no entries
            with open(os.path.join(self.log_dir, CLEAN_SHUTDOWN_FILE), "w") as f:
                f.write('{"version":0,"brokerEpoch":-1}')
                f.flush()
                os.fsync(f.fileno())
        self._closed = True
        self._release_lock()

    @staticmethod
    def _close_log(plog: UnifiedLog) -> None:
        """One log's share of the clean shutdown (a pool thread; touches only its dir)."""
        if plog.unsynced_files:
            # Written without fsync when the log was created (this run): made durable before
            # the directory fsync of the close, which makes their names durable.
            for fname in (PARTITION_METADATA_FILE, LEADER_EPOCH_CHECKPOINT_FILE):
                fsync_file(os.path.join(plog.dir_path, fname))
            plog.unsynced_files = False
        plog.close()
        # Rewritten (and fsynced) only if its entries changed.
        write_leader_epoch_checkpoint(plog.dir_path, _epoch_entries(plog))

    def abandon(self) -> None:
        """Release the dir lock without any shutdown work (tests simulating a crash)."""
        self._end_stray_deletion()
        self._closed = True
        self._release_lock()

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = -1
