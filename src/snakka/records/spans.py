"""The log cleaner's record walk: where each record of a batch lies, and its key.

What this module owns
    :func:`record_spans`: for each record of one (decompressed) v2 records section,
    ``(record_start, record_end, timestamp_delta, after_timestamp, offset_delta, key,
    has_value)``. The cleaner (:mod:`snakka.storage.cleaner.filter`) looks keys up in its
    offset map, copies kept records as byte slices and re-encodes only a timestamp delta
    (``after_timestamp`` is where the bytes after it start), so values and headers are
    skipped by position and never decoded.

Why C
    Compaction is per-record work by nature (every key is looked up); the walk is the part
    that need not be Python. ``record_spans`` in ``_recordwalk.c`` does it without a Python
    call per varint; :func:`record_spans_py` is the specification and the fallback when the
    extension could not be built (tests compare the two on random and hostile input).

Checks
    What the cleaner relies on, nothing more (the batch was validated when produced): every
    record's length fits the section and is at least 6 bytes, the key and value lengths fit
    the record, offset deltas lie in ``[0, last_offset_delta]``, exactly ``count`` records
    fill the section. Anything else raises ValueError naming the record.

Threading
    Pure functions over buffers; callable from any thread.
"""

from __future__ import annotations

from collections.abc import Callable

from .walk import _varint

Buffer = bytes | bytearray | memoryview

Span = tuple[int, int, int, int, int, bytes | None, bool]

MIN_RECORD_SIZE = 6  # attributes, timestamp delta, offset delta, key len, value len, headers

try:  # the C walker, built by setup.py; optional
    from ._recordwalk import record_spans as _spans_c_ext

    _spans_c: Callable[[Buffer, int, int, int, int], list[Span]] | None = _spans_c_ext
except ImportError:  # pragma: no cover - only where the build failed
    _spans_c = None

__all__ = ["HAVE_C_SPANS", "Span", "record_spans", "record_spans_py"]

HAVE_C_SPANS = _spans_c is not None


def _field(data: memoryview, pos: int, end: int, i: int, what: str, max_bytes: int,
           bits: int) -> tuple[int, int]:
    try:
        return _varint(data, pos, end, max_bytes, bits)
    except ValueError:
        raise ValueError(f"record {i}: malformed or truncated {what}") from None


def record_spans_py(buf: Buffer, start: int, end: int, count: int,
                    last_offset_delta: int) -> list[Span]:
    """Pure-Python twin of the C ``record_spans`` (see the module docstring)."""
    data = memoryview(buf).cast("B")
    if start < 0 or end > len(data) or start > end:
        raise ValueError("records section out of the buffer's bounds")
    if count < 0 or count > (end - start) // MIN_RECORD_SIZE:
        raise ValueError(f"batch claims {count} records but its records section holds only "
                         f"{end - start} bytes")
    out: list[Span] = []
    pos = start
    for i in range(count):
        rec_start = pos
        length, pos = _field(data, pos, end, i, "length varint", 5, 32)
        if length < MIN_RECORD_SIZE or length > end - pos:
            raise ValueError(f"record {i}: invalid record size {length} with {end - pos} "
                             "bytes left in the batch")
        rec_end = pos + length
        pos += 1  # attributes: unused in v2
        ts_delta, pos = _field(data, pos, rec_end, i, "timestamp delta varlong", 10, 64)
        after_ts = pos
        offset_delta, pos = _field(data, pos, rec_end, i, "offset delta varint", 5, 32)
        if not 0 <= offset_delta <= last_offset_delta:
            raise ValueError(f"record {i}: offset delta {offset_delta} outside the batch's "
                             f"[0, {last_offset_delta}]")
        key_len, pos = _field(data, pos, rec_end, i, "key length varint", 5, 32)
        if key_len < -1 or key_len > rec_end - pos:
            raise ValueError(f"record {i}: invalid key length {key_len}")
        key = None if key_len < 0 else bytes(data[pos : pos + key_len])
        pos += max(key_len, 0)
        value_len, pos = _field(data, pos, rec_end, i, "value length varint", 5, 32)
        if value_len < -1 or value_len > rec_end - pos:
            raise ValueError(f"record {i}: invalid value length {value_len}")
        out.append((rec_start, rec_end, ts_delta, after_ts, offset_delta, key, value_len >= 0))
        pos = rec_end
    if pos != end:
        raise ValueError(f"incorrect declared batch size: {end - pos} bytes remain after "
                         f"{count} records")
    return out


def record_spans(buf: Buffer, start: int, end: int, count: int,
                 last_offset_delta: int) -> list[Span]:
    """Where each record of ``buf[start:end]`` lies, and its key (C when built)."""
    if _spans_c is not None:
        return _spans_c(buf, start, end, count, last_offset_delta)
    return record_spans_py(buf, start, end, count, last_offset_delta)
