"""The record walk behind produce-time validation: a batch's header is a claim, its records the fact.

What this module owns
    :func:`walk_records`, which checks that the records section of one v2 batch holds exactly
    the records its header claims (count, consecutive offset deltas, every length inside its
    record, nothing left over) and computes the batch's true max timestamp, the records
    whose timestamps break the topic's bounds and, on a compacted topic, the records without a
    key (Kafka's LogValidator refuses them there: the cleaner keeps the latest record per key);
    and :func:`decompress_records`, which
    decompresses a compressed batch's records with a bound on the output, so a small
    "decompression bomb" costs at most that bound in memory and time.

Why here and why C
    Kafka's LogValidator reads every record of every produced batch. snakka's produce path is
    otherwise per batch, so the walk is a small C extension (``_recordwalk.c``, built by
    setup.py as an optional extension): a few nanoseconds per record, no Python object per
    record. :func:`walk_records_py` is the specification and the fallback used only when the
    extension could not be built (tests compare the two on random input).

Threading
    Pure functions over buffers; callable from any thread.
"""

from __future__ import annotations

from collections.abc import Callable

from snakka.limits import INT64_MAX, INT64_MIN

from .compression import CompressionError, decompress_bounded

try:  # the C walker, built by setup.py; optional (see module docstring)
    from ._recordwalk import walk_records as _walk_c_ext

    _walk_c: Callable[..., tuple[int, list[int] | None, list[int] | None]] | None = _walk_c_ext
except ImportError:  # pragma: no cover - exercised only where the build failed
    _walk_c = None

MIN_RECORD_SIZE = 7  # length, attributes, ts delta, offset delta, key len, value len, headers

__all__ = ["walk_records", "walk_records_py", "decompress_records", "HAVE_C_WALKER"]

HAVE_C_WALKER = _walk_c is not None


def _varint(buf, pos: int, end: int, max_bytes: int, bits: int) -> tuple[int, int]:
    """Kafka's ByteUtils.readVarint (max_bytes 5, 32 bits) / readVarlong (10, 64)."""
    value = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise ValueError("truncated")
        b = buf[pos]
        pos += 1
        if not b & 0x80:
            value = (value | (b << shift)) & ((1 << bits) - 1)
            return (value >> 1) ^ -(value & 1), pos
        value |= (b & 0x7F) << shift
        shift += 7
    raise ValueError("too long")


def _v32(buf, pos: int, end: int, i: int, what: str) -> tuple[int, int]:
    try:
        return _varint(buf, pos, end, 5, 32)
    except ValueError:
        raise ValueError(f"record {i}: malformed or truncated {what} varint") from None


def walk_records_py(
    buf, start: int, end: int, count: int, base_timestamp: int, check_timestamps: bool,
    ts_lo: int, ts_hi: int, require_keys: bool = False,
) -> tuple[int, list[int] | None, list[int] | None]:
    """Pure-Python twin of the C ``walk_records`` (see _recordwalk.c for the rules): returns
    (max timestamp, indices of records outside [ts_lo, ts_hi] or None, indices of keyless
    records when ``require_keys`` or None); a keyless record is not also a timestamp error."""
    if count < 0 or count > (end - start) // MIN_RECORD_SIZE:
        raise ValueError(f"batch claims {count} records but its records section holds only "
                         f"{end - start} bytes")
    max_ts = -1
    bad: list[int] | None = None
    keyless: list[int] | None = None
    pos = start
    mv = memoryview(buf).cast("B") if not isinstance(buf, (bytes, bytearray)) else buf
    for i in range(count):
        length, pos = _v32(mv, pos, end, i, "length")
        if length < 0 or length > end - pos:
            raise ValueError(f"record {i}: invalid record size {length} with {end - pos} bytes "
                             "left in the batch")
        rec_end = pos + length
        if pos >= rec_end:
            raise ValueError(f"record {i}: record of {length} bytes has no attributes")
        pos += 1
        try:
            ts_delta, pos = _varint(mv, pos, rec_end, 10, 64)
        except ValueError:
            raise ValueError(f"record {i}: malformed or truncated timestamp delta varlong") from None
        offset_delta, pos = _v32(mv, pos, rec_end, i, "offset delta")
        if offset_delta != i:
            raise ValueError(f"record {i}: offset delta {offset_delta}, expected {i} (inner "
                             "offsets must be consecutive)")
        klen, pos = _v32(mv, pos, rec_end, i, "key length")
        if klen < -1 or klen > rec_end - pos:
            raise ValueError(f"record {i}: invalid key length {klen}")
        pos += max(klen, 0)
        vlen, pos = _v32(mv, pos, rec_end, i, "value length")
        if vlen < -1 or vlen > rec_end - pos:
            raise ValueError(f"record {i}: invalid value length {vlen}")
        pos += max(vlen, 0)
        nheaders, pos = _v32(mv, pos, rec_end, i, "header count")
        if nheaders < 0 or nheaders > rec_end - pos:
            raise ValueError(f"record {i}: invalid number of record headers {nheaders}")
        for _ in range(nheaders):
            hk, pos = _v32(mv, pos, rec_end, i, "header key length")
            if hk < 0 or hk > rec_end - pos:
                raise ValueError(f"record {i}: invalid header key length {hk}")
            pos += hk
            hv, pos = _v32(mv, pos, rec_end, i, "header value length")
            if hv < -1 or hv > rec_end - pos:
                raise ValueError(f"record {i}: invalid header value length {hv}")
            pos += max(hv, 0)
        if pos != rec_end:
            raise ValueError(f"record {i}: record size {length} but its fields use "
                             f"{length - (rec_end - pos)} bytes")
        ts = ((base_timestamp + ts_delta + 2**63) % 2**64) - 2**63  # Java's wrapping add
        if ts > max_ts:
            max_ts = ts
        if require_keys and klen == -1:
            if keyless is None:
                keyless = []
            keyless.append(i)
        elif check_timestamps and ts != -1 and not ts_lo <= ts <= ts_hi:
            if bad is None:
                bad = []
            bad.append(i)
    if pos != end:
        raise ValueError(f"incorrect declared batch size: {end - pos} bytes remain after "
                         f"{count} records")
    return max_ts, bad, keyless


walk_records = _walk_c if _walk_c is not None else walk_records_py


def decompress_records(codec: int, data, max_bytes: int) -> memoryview:
    """Decompress a batch's records section, refusing output above ``max_bytes``; the view is
    valid until the next call in this thread (see ``compression.decompress_bounded``).

    Raises :class:`CompressionError` for data the codec rejects and for output beyond the
    bound (the message says which)."""
    return decompress_bounded(codec, data, max_bytes)


__all__ += ["CompressionError", "timestamp_bounds"]


def timestamp_bounds(now_ms: int, before_max_ms: int | None,
                     after_max_ms: int | None) -> tuple[int, int]:
    """[lo, hi] allowed for a record timestamp (Kafka: ts >= now - before and ts <= now +
    after), clamped to int64."""
    lo = INT64_MIN if before_max_ms is None else max(INT64_MIN, now_ms - before_max_ms)
    hi = INT64_MAX if after_max_ms is None else min(INT64_MAX, now_ms + after_max_ms)
    return lo, hi
