# Type stub of the C extension _fastdecode.c (built by setup.py; see snakka.spark.arrow_decode).
from typing_extensions import Buffer

def decode_records(
    bufs: list[bytearray], data: Buffer, count: int, base_offset: int, base_ts: int,
    ts_override: int, ts_type: int, lo: int, hi: int, with_headers: bool, /,
) -> int: ...

def record_tuples(
    data: Buffer, count: int, base_offset: int, base_ts: int, log_append: bool,
    log_append_ts: int, lo: int, hi: int, /,
) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]: ...
