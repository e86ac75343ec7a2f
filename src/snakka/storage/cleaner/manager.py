"""The log cleaner: which compacted log to clean next, the cleaner thread, its checkpoint.

What this module owns (Kafka's LogCleaner + LogCleanerManager)
    * **Choosing.** For every log whose ``cleanup.policy`` contains ``compact``: the dirty
      range starts at the cleaner checkpoint (clamped to the log start) and ends at the
      first uncleanable offset = the lowest of the active segment's base, the base of the
      segment holding the last stable offset (an open transaction's data is never cleaned)
      and the base of the first segment with records newer than ``min.compaction.lag.ms``.
      A log is due when its dirty ratio (dirty bytes / total bytes) reaches
      ``min.cleanable.dirty.ratio``, or its oldest dirty record is older than
      ``max.compaction.lag.ms``, or tombstones it kept may now be past their delete horizon
      (one pass ``delete.retention.ms`` after a pass; Kafka's cleaner gets there through
      later passes too). The dirtiest due log is cleaned first.
    * **The thread.** One cleaner thread (``log.cleaner.threads`` above 1 is accepted and
      logged: more Python threads would contend for the interpreter lock with the request
      threads) that cleans while logs are due and sleeps ``log.cleaner.backoff.ms`` when
      none is. ``log.cleaner.backoff.ms``, ``dedupe.buffer.size``, ``io.buffer.size``,
      ``io.buffer.load.factor`` and ``io.max.bytes.per.second`` are dynamic broker configs:
      :meth:`LogCleaner.reconfigure` hands them to the thread, which wakes and uses them from
      its next pass (``log.cleaner.threads`` stays static: there is one thread).
    * **The checkpoint** ``cleaner-offset-checkpoint`` in the log dir (Kafka's file and
      format): per partition, the offset below which the log is clean. Lost or stale, the
      next pass simply cleans more.
    * **Visibility**, as Kafka (no API carries cleaner state; Kafka has it in JMX metrics):
      a log line per pass (what was cleaned, MB/s, records kept), the checkpoint file, and
      :attr:`LogCleaner.uncleanable` (partitions whose pass failed).

Threading
    The cleaner thread runs :class:`~.cleaner.Cleaner`; it reads the segment list and
    producer state, and swaps segments, only through ``run_on_owner`` (the broker passes
    a function that runs a callable on the event loop and waits for it). ``clean_once``
    runs a pass synchronously on the caller's thread (tests, benchmarks).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from snakka.config import BROKER_CONFIGS

from ..checkpoint import read_offset_checkpoint, write_offset_checkpoint
from .cleaner import Cleaner, CleaningAborted, CleanResult, LogToClean, RunOnOwner, Throttler

if TYPE_CHECKING:
    from snakka.config import BrokerConfig

    from ..segment import LogSegment
    from ..unified_log import UnifiedLog

log = logging.getLogger("snakka.cleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
T = TypeVar("T")


def _wall_ms() -> int:
    return int(time.time() * 1000)


# CleanerConfig's fields and the broker configs they come from (names, types, defaults and
# ranges live in snakka.config only).
_CLEANER_CONFIGS = {
    "enable": "log.cleaner.enable",
    "threads": "log.cleaner.threads",
    "dedupe_buffer_size": "log.cleaner.dedupe.buffer.size",
    "io_buffer_load_factor": "log.cleaner.io.buffer.load.factor",
    "io_buffer_size": "log.cleaner.io.buffer.size",
    "max_io_bytes_per_second": "log.cleaner.io.max.bytes.per.second",
    "backoff_ms": "log.cleaner.backoff.ms",
}


def _default(field: str) -> Any:
    d = BROKER_CONFIGS[_CLEANER_CONFIGS[field]]
    return d.value(d.default)


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (Kafka's CleanerConfig)."""

    enable: bool = _default("enable")
    threads: int = _default("threads")
    dedupe_buffer_size: int = _default("dedupe_buffer_size")
    io_buffer_load_factor: float = _default("io_buffer_load_factor")
    io_buffer_size: int = _default("io_buffer_size")
    max_io_bytes_per_second: float = _default("max_io_bytes_per_second")
    backoff_ms: int = _default("backoff_ms")

    @classmethod
    def from_broker(cls, cfg: BrokerConfig) -> CleanerConfig:
        return cls.from_values(cfg.get)

    @classmethod
    def from_values(cls, get: Callable[[str], object]) -> CleanerConfig:
        """From ``get(broker config name)`` -> parsed value (static config, or the values in
        force after a dynamic change)."""
        values: dict[str, Any] = {f: get(name) for f, name in _CLEANER_CONFIGS.items()}
        return cls(**values)


def is_compacted(plog: UnifiedLog) -> bool:
    return "compact" in plog.config.cleanup_policy


def _direct(fn: Callable[[], T]) -> T:
    return fn()


class LogCleaner:
    """Kafka's LogCleaner for one log dir; see the module docstring."""

    def __init__(
        self,
        config: CleanerConfig,
        logs: Callable[[], Iterable[UnifiedLog]],
        time_ms: Callable[[], int] = _wall_ms,
        *,
        log_dir: str | None = None,
        run_on_owner: RunOnOwner = _direct,
    ) -> None:
        self.config = config
        self._logs = logs
        self._time_ms = time_ms
        self._checkpoint_path = (os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT)
                                 if log_dir else None)
        self._checkpoints: dict[tuple[str, int], int] = (
            read_offset_checkpoint(self._checkpoint_path) if self._checkpoint_path else {})
        self._recheck_at: dict[tuple[str, int], int] = {}  # tombstone-horizon passes
        self._stop = threading.Event()
        # Ends the thread's log.cleaner.backoff.ms sleep early: shutdown, or a reconfiguration.
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one pass at a time (thread vs clean_once)
        # A dynamic change waiting for the next pass (the thread applies it between passes,
        # never under a pass that is waiting on the event loop).
        self._pending: CleanerConfig | None = None
        self.run_on_owner = run_on_owner
        self.cleaner = self._new_cleaner(config)
        self.uncleanable: set[tuple[str, int]] = set()  # failed passes (Kafka's metric name)

    def _new_cleaner(self, config: CleanerConfig) -> Cleaner:
        return Cleaner(
            dedupe_buffer_size=config.dedupe_buffer_size,
            load_factor=config.io_buffer_load_factor,
            io_buffer_size=config.io_buffer_size,
            throttler=Throttler(config.max_io_bytes_per_second, self._stop),
            stop=self._stop,
            run_on_owner=self.run_on_owner,
            time_ms=self._time_ms,
        )

    def reconfigure(self, config: CleanerConfig) -> None:
        """Dynamic ``log.cleaner.*`` values (Kafka's LogCleaner.reconfigure): the next pass
        uses them, and a sleeping thread wakes to start it. Any thread."""
        if config == self.config:
            return
        self._pending = config
        self._wake.set()

    def _apply_pending(self) -> None:
        config, self._pending = self._pending, None
        if config is not None:
            log.info("log cleaner reconfigured: %s", ", ".join(
                f"{name}={getattr(config, f)}" for f, name in _CLEANER_CONFIGS.items()
                if getattr(config, f) != getattr(self.config, f)))
            self.config = config
            self.cleaner = self._new_cleaner(config)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self.config.threads > 1:
            log.info("log.cleaner.threads=%d: snakka runs one cleaner thread",
                     self.config.threads)
        log.info("Starting the log cleaner")
        self._thread = threading.Thread(target=self._run, name="snakka-log-cleaner",
                                        daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the thread; a pass in progress is abandoned (its ``.cleaned`` files are
        removed, nothing in the log changed)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_once()
            except Exception:  # noqa: BLE001 - the cleaner must outlive a bad log
                log.exception("the log cleaner failed a pass; it retries after "
                              "log.cleaner.backoff.ms")
                cleaned = []
            if not any(not r.aborted for r in cleaned):
                self._wake.wait(self.config.backoff_ms / 1000)
                self._wake.clear()

    # ------------------------------------------------------------ choosing

    def _key(self, plog: UnifiedLog) -> tuple[str, int]:
        return (plog.topic, plog.partition)

    def cleanable(self, plog: UnifiedLog, now_ms: int | None = None) -> LogToClean:
        """The dirty range of ``plog`` now (Kafka's cleanableOffsets). Owner thread."""
        now = self._time_ms() if now_ms is None else now_ms
        segs = plog.segments
        start = plog.log_start_offset
        checkpoint = self._checkpoints.get(self._key(plog), -1)
        first_dirty = checkpoint if start <= checkpoint <= plog.log_end_offset else start
        first_uncleanable = plog.active_segment.base_offset
        lso = plog.last_stable_offset
        for seg in segs:
            if seg.base_offset <= lso < seg.next_offset or seg.base_offset >= lso:
                first_uncleanable = min(first_uncleanable, seg.base_offset)
                break
        lag = plog.config.min_compaction_lag_ms
        if lag > 0:
            for seg in segs:
                if seg.base_offset >= first_uncleanable:
                    break
                if seg.max_timestamp > now - lag:
                    first_uncleanable = min(first_uncleanable, seg.base_offset)
                    break
        first_dirty = min(first_dirty, first_uncleanable)
        clean_bytes = cleanable_bytes = 0
        for seg in segs:
            if seg.base_offset >= first_uncleanable:
                break
            if seg.next_offset <= first_dirty:
                clean_bytes += seg.size
            else:
                cleanable_bytes += seg.size
        return LogToClean(plog, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes)

    def _due(self, todo: LogToClean, now: int) -> bool:
        plog = todo.log
        if todo.cleanable_bytes <= 0:
            at = self._recheck_at.get(self._key(plog))
            return at is not None and now >= at and todo.total_bytes > 0
        if todo.cleanable_ratio >= plog.config.min_cleanable_dirty_ratio:
            return True
        max_lag = plog.config.max_compaction_lag_ms
        if max_lag < 2**62:
            first = _first_dirty_segment(plog.segments, todo.first_dirty_offset)
            ts = first.rolling_base_timestamp() if first is not None else None
            if ts is not None and ts < now - max_lag:
                return True
        at = self._recheck_at.get(self._key(plog))
        return at is not None and now >= at

    def _choose(self) -> list[LogToClean]:
        now = self._time_ms()

        def scan() -> list[LogToClean]:
            out = []
            for plog in list(self._logs()):
                if plog.closed or not is_compacted(plog) or self._key(plog) in self.uncleanable:
                    continue
                todo = self.cleanable(plog, now)
                if self._due(todo, now):
                    out.append(todo)
            return out

        due: list[LogToClean] = self.run_on_owner(scan)
        due.sort(key=lambda t: -t.cleanable_ratio)
        return due

    # ------------------------------------------------------------ passes

    def clean_once(self) -> list[CleanResult]:
        """One pass over every log that is due now, dirtiest first; returns what each did.
        The checkpoint file is rewritten after the passes."""
        with self._lock:
            self._apply_pending()
            results = []
            for todo in self._choose():
                if self._stop.is_set():
                    break
                results.append(self._clean(todo))
            if results:
                self._write_checkpoint()
            return results

    def _clean(self, todo: LogToClean) -> CleanResult:
        plog = todo.log
        key = self._key(plog)
        log.info("Cleaning log %s (cleaning prior to offset %d, dirty ratio %.2f, %d of %d "
                 "bytes dirty)", plog.name, todo.first_uncleanable_offset,
                 todo.cleanable_ratio, todo.cleanable_bytes, todo.total_bytes)
        try:
            result = self.cleaner.clean(todo)
        except CleaningAborted as e:
            result = CleanResult(plog.topic, plog.partition, todo.first_dirty_offset,
                                 aborted=True)
            log.info("Cleaning of log %s aborted: %s", plog.name, e)
        except OSError as e:
            # The disk (full, an I/O error) or the partition going away under the pass: the
            # .cleaned files are gone, the log is as it was, the next pass tries again. Not
            # "uncleanable": compaction is what frees the space a full disk needs.
            result = CleanResult(plog.topic, plog.partition, todo.first_dirty_offset,
                                 aborted=True)
            log.warning("Cleaning of log %s aborted, retried after log.cleaner.backoff.ms: %s",
                        plog.name, e)
        except Exception as e:  # noqa: BLE001 - corrupt data, I/O errors: this log only
            # Kafka's "uncleanable partition": skipped until the broker restarts (or the
            # partition is recreated), so one bad segment does not stop all compaction.
            self.uncleanable.add(key)
            log.error("Cleaning of log %s failed and the partition is marked uncleanable "
                      "until restart: %s", plog.name, e, exc_info=True)
            return CleanResult(plog.topic, plog.partition, todo.first_dirty_offset,
                               aborted=True)
        now = self._time_ms()
        if result.aborted:
            return result
        self._checkpoints[key] = result.end_offset
        # A pass that kept records may have kept tombstones with a fresh delete horizon:
        # look again once it has passed, even if nothing new is written meanwhile.
        self._recheck_at[key] = now + plog.config.delete_retention_ms + 1
        secs = max(result.elapsed_s, 1e-9)
        log.info(
            "Cleaned log %s up to offset %d: %d segments into %d, %.1f MB read and %.1f MB "
            "written in %.2f s (%.1f MB/s), %d of %d records kept (%.0f%% smaller)",
            plog.name, result.end_offset, result.segments_before, result.segments_after,
            result.bytes_read / 1e6, result.bytes_written / 1e6, result.elapsed_s,
            result.bytes_read / 1e6 / secs, result.records_kept, result.records_read,
            100.0 * (1 - result.bytes_written / result.bytes_read) if result.bytes_read else 0.0)
        return result

    def _write_checkpoint(self) -> None:
        if self._checkpoint_path is None:
            return
        live = {self._key(p) for p in list(self._logs()) if not p.closed}
        for k in [k for k in self._checkpoints if k not in live]:
            del self._checkpoints[k]  # deleted partitions leave the file
        for k in [k for k in self._recheck_at if k not in live]:
            del self._recheck_at[k]
        write_offset_checkpoint(self._checkpoint_path, dict(self._checkpoints))


def _first_dirty_segment(segments: Iterable[LogSegment], first_dirty: int) -> LogSegment | None:
    for seg in segments:
        if seg.next_offset > first_dirty and seg.size > 0:
            return seg
    return None
