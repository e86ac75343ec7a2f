"""Shared helpers for storage tests: a fake clock and batch builders."""

from __future__ import annotations

import os

from snakka.records import Record, build_batch
from snakka.storage import LogConfig, LogManager, UnifiedLog


class Clock:
    """Injected time: advances only when told to."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now = now_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def batch(
    n: int = 1,
    *,
    ts: int = 1_700_000_000_000,
    value_size: int = 10,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    tag: str = "",
) -> bytearray:
    """An uncompressed (by default) client batch of ``n`` records with timestamps
    ts, ts+1, ..."""
    records = [
        Record(timestamp=ts + i, key=f"k{i}".encode(), value=(tag + f"v{i}").encode().ljust(value_size, b"."))
        for i in range(n)
    ]
    return bytearray(
        build_batch(
            records,
            compression=compression,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=is_transactional,
        )
    )


def append(plog: UnifiedLog, buf: bytearray, **kw):
    return plog.append(buf, plog.validate(buf), **kw)


def open_log(path, config: LogConfig | None = None, *, clock: Clock | None = None, recover=False, **kw):
    return UnifiedLog(
        os.fspath(path), config or LogConfig(), recover=recover, time_ms=clock or Clock(), **kw
    )


def manager(tmp_path, **kw) -> LogManager:
    """A LogManager on ``<tmp_path>/data`` with small segments and a fake clock."""
    return LogManager([str(tmp_path / "data")], LogConfig(segment_bytes=500), time_ms=Clock(), **kw)


def crash(lm: LogManager) -> None:
    """Stop without the clean shutdown (no marker: the next load recovers and reads the topic
    ids): segment files closed, the manager abandoned."""
    for plog in lm.all_logs():
        for seg in plog.segments:
            seg.file.close()
            seg.closed = True
        plog.local_log.closed = True
    lm.abandon()
