# Type stub of the C extension _recordwalk.c (built by setup.py; see snakka.records.walk).
from typing_extensions import Buffer

def walk_records(
    buf: Buffer, start: int, end: int, count: int, base_timestamp: int, check_timestamps: bool,
    ts_lo: int, ts_hi: int, require_keys: bool = ..., /,
) -> tuple[int, list[int] | None, list[int] | None]: ...

def record_spans(
    buf: Buffer, start: int, end: int, count: int, last_offset_delta: int, /,
) -> list[tuple[int, int, int, int, int, bytes | None, bool]]: ...
