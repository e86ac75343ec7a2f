"""When data reaches the disk: background group commit and strict (acks=all) flushing.

What this module owns
    :class:`FlushScheduler`, the asyncio-side policy that decides when
    :meth:`UnifiedLog.flush` (fsync) runs. Appends never fsync; fsync runs on a
    single worker thread (``run_in_executor`` with a 1-thread pool), so the event loop
    never waits for the disk.

Modes (broker configs; names are snakka's unless marked Kafka)
    ``log.flush.interval.ms`` (Kafka; :data:`LOG_FLUSH_INTERVAL_MS_CONFIG`)
        Background mode: every interval the dirty logs are fsynced together and the
        checkpoints written. Kafka's default is "never" (rely on replication + page
        cache); a single broker has no replicas, so snakka defaults to
        :data:`DEFAULT_FLUSH_INTERVAL_MS` (1000 ms): a power loss can lose up to ~1 s
        of acknowledged writes; a process crash (kill -9) loses nothing that reached
        ``pwrite`` (the page cache survives), and recovery truncates any torn tail.
        Per-topic ``flush.ms`` / ``flush.messages`` (Kafka) make a log due earlier;
        they are checked at each tick and after appends (:meth:`FlushScheduler.on_append`).
    ``log.flush.strict`` (snakka; :data:`LOG_FLUSH_STRICT_CONFIG`, default false)
        Strict mode: a produce with acks=all (or -1) is answered only after
        :meth:`FlushScheduler.flush_through` returns, i.e. after an fsync covering its
        offsets. Waiters arriving while an fsync runs are served together by the next
        one (group commit), so N concurrent producers cost ~1 fsync per disk round trip,
        not N.

Threading
    Coroutines and :meth:`on_append` run on the event loop; ``UnifiedLog.flush`` and
    checkpoint writes run on the scheduler's worker thread. See
    :mod:`snakka.storage.local_log` for why that is safe.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor

from .manager import LogManager
from .unified_log import UnifiedLog

log = logging.getLogger("snakka.storage")

LOG_FLUSH_INTERVAL_MS_CONFIG = "log.flush.interval.ms"
LOG_FLUSH_STRICT_CONFIG = "log.flush.strict"
DEFAULT_FLUSH_INTERVAL_MS = 1000
DEFAULT_FLUSH_STRICT = False


class FlushScheduler:
    """Background group commit + strict-mode ``flush_through`` for a LogManager."""

    def __init__(
        self,
        log_manager: LogManager,
        *,
        interval_ms: int = DEFAULT_FLUSH_INTERVAL_MS,
        strict: bool = DEFAULT_FLUSH_STRICT,
        time_ms: Callable[[], int] | None = None,
        executor: Executor | None = None,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError(f"{LOG_FLUSH_INTERVAL_MS_CONFIG} must be > 0, got {interval_ms}")
        self.log_manager = log_manager
        self.interval_ms = interval_ms
        self.strict = strict
        self._time_ms = time_ms or log_manager.time_ms
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="snakka-flush"
        )
        self._background: asyncio.Task[None] | None = None
        self._waiters: list[tuple[UnifiedLog, int, asyncio.Future[None]]] = []
        self._committer: asyncio.Task[None] | None = None
        self._urgent: set[UnifiedLog] = set()
        self._urgent_task: asyncio.Task[None] | None = None
        self.fsync_rounds = 0  # number of worker flush rounds (for tests/metrics)
        # Called (on the flush thread) with each log flush's duration in seconds: the metrics'
        # flush-time histogram (server/metrics.py); None: not timed.
        self.on_flush: Callable[[float], None] | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the background ticker (call from the running loop)."""
        if self._background is None:
            self._background = asyncio.get_running_loop().create_task(
                self._run_background(), name="snakka-flush-scheduler"
            )

    async def close(self) -> None:
        """Stop the ticker, finish pending strict waiters, stop the worker. The final
        flush of every log is LogManager.close()'s job."""
        if self._background is not None:
            self._background.cancel()
            try:
                await self._background
            except asyncio.CancelledError:
                pass
            self._background = None
        for task in (self._committer, self._urgent_task):
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)
        if self._own_executor:
            self._executor.shutdown(wait=True)  # type: ignore[attr-defined]

    async def _run_background(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                await self.flush_due()
            except Exception:  # keep the scheduler alive; the failure is logged
                log.exception("background flush failed")

    # ------------------------------------------------------------ background mode

    def due_logs(self, now_ms: int | None = None) -> list[UnifiedLog]:
        """Logs whose unflushed data is due: older than min(interval, flush.ms) or more
        than flush.messages records."""
        now = self._time_ms() if now_ms is None else now_ms
        due = []
        for plog in self.log_manager.all_logs():
            if plog.closed or (plog.unflushed_messages == 0 and not plog.log_start_dirty):
                continue
            cfg = plog.config
            if (
                now - plog.last_flush_ms >= min(self.interval_ms, cfg.flush_ms)
                or plog.unflushed_messages >= cfg.flush_messages
                or plog.log_start_dirty
            ):
                due.append(plog)
        return due

    async def flush_due(self, now_ms: int | None = None) -> int:
        """One background round: fsync the due logs and write the checkpoints on the
        worker thread. Returns how many logs were flushed."""
        due = self.due_logs(now_ms)
        if not due:
            return 0
        await asyncio.get_running_loop().run_in_executor(self._executor, self._flush_logs, due, True)
        return len(due)

    async def flush_now(self) -> None:
        """Flush every dirty log and write the checkpoints (e.g. after DeleteRecords)."""
        await asyncio.get_running_loop().run_in_executor(
            self._executor, self.log_manager.flush_all
        )

    def on_append(self, plog: UnifiedLog) -> None:
        """Cheap hook after an append: schedules a flush when the topic's
        ``flush.messages`` is reached (Kafka's per-topic setting; off by default)."""
        if plog.unflushed_messages >= plog.config.flush_messages:
            self._urgent.add(plog)
            if self._urgent_task is None or self._urgent_task.done():
                self._urgent_task = asyncio.get_running_loop().create_task(self._flush_urgent())

    async def _flush_urgent(self) -> None:
        while self._urgent:
            logs = list(self._urgent)
            self._urgent.clear()
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self._flush_logs, logs, False
            )

    def _flush_logs(self, logs: list[UnifiedLog], checkpoint: bool) -> None:
        self.fsync_rounds += 1
        on_flush = self.on_flush
        for plog in logs:
            if not plog.closed:
                if on_flush is None:
                    plog.flush()
                else:
                    t0 = time.perf_counter()
                    plog.flush()
                    on_flush(time.perf_counter() - t0)
        if checkpoint:
            self.log_manager.checkpoint()

    # ------------------------------------------------------------ strict mode

    async def flush_through(self, plog: UnifiedLog, offset: int) -> None:
        """Return once every offset below ``offset`` of ``plog`` is fsynced.

        Concurrent callers share fsyncs: all waiters registered while one worker round
        runs are served by the next round (group commit)."""
        if plog.recovery_point >= offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((plog, offset, fut))
        if self._committer is None or self._committer.done():
            self._committer = asyncio.get_running_loop().create_task(self._group_commit())
        await fut

    async def _group_commit(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiters:
            batch, self._waiters = self._waiters, []
            logs = list({id(p): p for p, _o, _f in batch}.values())
            try:
                await loop.run_in_executor(self._executor, self._flush_logs, logs, False)
            except Exception as exc:  # fsync failed: every waiter learns it
                log.exception("strict flush failed")
                for _p, _o, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for plog, offset, fut in batch:
                if fut.done():
                    continue
                if plog.recovery_point >= offset or plog.closed:
                    fut.set_result(None)
                else:  # appended after the round snapshotted the log end: next round
                    self._waiters.append((plog, offset, fut))
