"""Produce-time record validation: a batch's header is a claim, checked against its records.

Each hostile batch below is CRC-valid (the CRC is recomputed after the lie is written), so only
the record walk (snakka.records.walk, C with a Python twin) can catch it. Kafka's LogValidator
answers all of these with INVALID_RECORD (87), timestamps with INVALID_TIMESTAMP (32) and one
RecordError per record. The C walker and the Python fallback are compared on random input, and
a byte-flip fuzz checks that whatever is accepted decodes to exactly what the header claims.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.limits import MAX_RECORD_ERROR_MESSAGES
from snakka.records import (
    HEADER_SIZE,
    Record,
    RecordValidationError,
    assign_offsets,
    build_batch,
    encode_varint,
    iter_records,
    parse_header,
    validate_batches,
)
from snakka.records import walk as walk_mod
from snakka.records.batch import MAX_TIMESTAMP_OFFSET
from snakka.records.compression import compress
from snakka.records.record import encode_record

from .test_batch import recrc

MAX = 1_048_588
INVALID_RECORD = 87
INVALID_TIMESTAMP = 32
NOW = 1_700_000_000_000


def recs(n: int, ts: int = NOW) -> list[Record]:
    return [Record(timestamp=ts + i, key=b"k%d" % i, value=b"v" * i,
                   headers=[("h", b"x")] if i % 2 else []) for i in range(n)]


def raw_batch(body: bytes, count: int, *, last_offset_delta: int | None = None,
              compression: int = 0, base_ts: int = NOW, max_ts: int | None = None) -> bytearray:
    """A batch whose header claims ``count`` records around an arbitrary records section
    (compressed with ``compression``), CRC made valid."""
    if compression:
        body = compress(compression, body)
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", compression, lod, base_ts,
                            base_ts if max_ts is None else max_ts, -1, -1, -1, count) + body
    buf = bytearray(struct.pack(">qiibI", 0, HEADER_SIZE - 12 + len(body), 0, 2, 0) + after_crc)
    return recrc(buf)


def body_of(records: list[Record], *, offset_deltas=None, base_ts: int = NOW) -> bytes:
    deltas = offset_deltas or range(len(records))
    return b"".join(encode_record(d, r.timestamp - base_ts, r.key, r.value, r.headers)
                    for d, r in zip(deltas, records, strict=True))


def error_of(buf, **kw) -> RecordValidationError:
    with pytest.raises(RecordValidationError) as ei:
        validate_batches(buf, max_message_bytes=kw.pop("max_message_bytes", MAX), **kw)
    return ei.value


# -- the case and its neighbours -------------------------------------------------------
@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_a_billion_claimed_records_with_five_real_ones_is_invalid_record(codec):
    """Issue 9 item 9: count and lastOffsetDelta agree with each other (1e9), not with the
    records. Before the walk this was accepted and the log's offsets jumped by a billion."""
    n = 1_000_000_000
    e = error_of(raw_batch(body_of(recs(5)), n, compression=codec))
    assert e.error_code == INVALID_RECORD, e
    assert "claims" in e.message or "record" in e.message


@pytest.mark.parametrize("codec", [0, 4])
def test_fewer_claimed_records_than_present_is_invalid_record(codec):
    e = error_of(raw_batch(body_of(recs(5)), 3, compression=codec))
    assert e.error_code == INVALID_RECORD and "remain" in e.message, e


@pytest.mark.parametrize("codec", [0, 3])
def test_non_consecutive_inner_offsets_are_invalid_record(codec):
    body = body_of(recs(3), offset_deltas=[0, 1, 5])
    e = error_of(raw_batch(body, 3, compression=codec))
    assert e.error_code == INVALID_RECORD and "offset delta 5" in e.message, e


def _record_with(length_delta: int = 0, key_len: int | None = None, headers: int | None = None,
                 hkey_len: int | None = None) -> bytes:
    """One record with one field lying about its size."""
    body = bytearray(b"\x00")  # attributes
    body += encode_varint(0) + encode_varint(0)  # timestamp delta, offset delta
    body += encode_varint(1 if key_len is None else key_len) + b"k"
    body += encode_varint(1) + b"v"
    if hkey_len is not None:
        body += encode_varint(1) + encode_varint(hkey_len) + b"h" + encode_varint(-1)
    else:
        body += encode_varint(0 if headers is None else headers)
    return encode_varint(len(body) + length_delta) + bytes(body)


@pytest.mark.parametrize("record, what", [
    (_record_with(length_delta=1), "record size"),
    (_record_with(length_delta=-1), "record"),
    (_record_with(length_delta=50), "invalid record size"),
    (_record_with(key_len=40), "key length"),
    (_record_with(key_len=-2), "key length"),
    (_record_with(headers=-1), "headers"),
    (_record_with(headers=30), "headers"),
    (_record_with(hkey_len=-1), "header key length"),
    (_record_with(hkey_len=9), "header key length"),
])
def test_record_fields_that_lie_about_their_size_are_invalid_record(record, what):
    e = error_of(raw_batch(record, 1))
    assert e.error_code == INVALID_RECORD and what in e.message, e


def test_overlong_varints_are_invalid_record():
    # An offset delta written in 6 bytes (Kafka's readVarint allows 5).
    rec = b"\x00" + encode_varint(0) + b"\x80\x80\x80\x80\x80\x00" + encode_varint(-1) * 2 + b"\x00"
    e = error_of(raw_batch(encode_varint(len(rec)) + rec, 1))
    assert e.error_code == INVALID_RECORD and "offset delta" in e.message, e


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_garbage_with_a_valid_crc_is_invalid_record(codec):
    buf = bytearray(build_batch(recs(20), compression=codec))
    h = parse_header(buf)
    mid = HEADER_SIZE + (h.size - HEADER_SIZE) // 2
    buf[mid:h.size] = bytes(h.size - mid)  # zero the second half of the compressed data
    e = error_of(recrc(buf))
    assert e.error_code == INVALID_RECORD, e


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_bomb_is_refused_within_the_bound(codec):
    """A small batch whose records expand beyond snakka.message.max.uncompressed.bytes."""
    big = Record(timestamp=NOW, key=None, value=bytes(4 * 1024 * 1024))
    buf = bytearray(build_batch([big], compression=codec))
    assert len(buf) < 300_000
    e = error_of(buf, max_uncompressed_bytes=1024 * 1024)
    assert e.error_code == INVALID_RECORD and "more than 1048576" in e.message, e
    # The same batch within a larger bound is fine.
    validate_batches(buf, max_message_bytes=MAX, max_uncompressed_bytes=8 * 1024 * 1024)


# -- timestamps ---------------------------------------------------------------------------------
def test_a_middle_record_out_of_range_gets_invalid_timestamp_with_its_record_error():
    """Kafka checks every record; the header (base and max timestamp) hides a middle record
    that is too old."""
    rs = recs(5)
    rs[2] = rs[2]._replace(timestamp=NOW - 10_000_000)
    buf = bytearray(build_batch(rs))
    h = parse_header(buf)
    assert h.base_timestamp == NOW and h.max_timestamp == NOW + 4
    e = error_of(buf, now_ms=NOW, timestamp_before_max_ms=1_000_000,
                 timestamp_after_max_ms=1_000_000)
    assert e.error_code == INVALID_TIMESTAMP, e
    assert [i for i, _ in e.record_errors] == [2]
    assert "should be within" in e.record_errors[0][1]


def test_a_lying_max_timestamp_is_replaced_by_the_records_maximum():
    """Kafka's LogValidator overwrites maxTimestamp with the true maximum: the time index and
    time-based retention must not trust the producer's claim."""
    buf = raw_batch(body_of(recs(4)), 4, max_ts=NOW + 10**9)
    infos = validate_batches(buf, max_message_bytes=MAX)
    assert infos[0].header.max_timestamp == NOW + 3
    assign_offsets(buf, infos, 100, None)
    assert struct.unpack_from(">q", buf, MAX_TIMESTAMP_OFFSET)[0] == NOW + 3
    validate_batches(bytes(buf), max_message_bytes=MAX, from_client=False)  # CRC rewritten
    assert [r.offset for r in iter_records(buf)] == [100, 101, 102, 103]


# -- keys on compacted topics (Kafka's LogValidator.validateKey) -------------------------------
TP = "compacted-3"
KEY_MSG = "Compacted topic cannot accept message without key in topic partition compacted-3"


@pytest.mark.parametrize("walker", ["c", "py"])
@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_a_keyless_record_on_a_compacted_topic_is_invalid_record_with_its_record_error(
        codec, walker, monkeypatch):
    """Every codec (the walk runs on the decompressed records) and both walkers: the keyless
    records, and only they, get a RecordError with Kafka's message; the summary message is
    Kafka's processRecordErrors'."""
    import snakka.records.batch as batch_mod

    if walker == "py":
        monkeypatch.setattr(batch_mod, "walk_records", walk_mod.walk_records_py)
    elif not walk_mod.HAVE_C_WALKER:
        pytest.skip("C walker not built (pure-Python fallback)")
    rs = recs(5)
    rs[1] = rs[1]._replace(key=None)
    rs[4] = rs[4]._replace(key=None)
    buf = build_batch(rs, compression=codec)
    e = error_of(buf, compacted_topic_partition=TP)
    assert e.error_code == INVALID_RECORD, e
    assert e.record_errors == [(1, KEY_MSG), (4, KEY_MSG)]
    assert e.message == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{KEY_MSG}'),"
        f" RecordError(batchIndex=4, message='{KEY_MSG}')]")
    # The same batch on a delete topic, and a keyed one on a compacted topic, are fine; an
    # empty key is a key (Kafka's hasKey: key != null).
    validate_batches(buf, max_message_bytes=MAX)
    validate_batches(build_batch(recs(5), compression=codec), max_message_bytes=MAX,
                     compacted_topic_partition=TP)
    validate_batches(build_batch([Record(key=b"", value=b"v", timestamp=NOW)],
                                 compression=codec),
                     max_message_bytes=MAX, compacted_topic_partition=TP)


def test_a_keyless_record_is_not_also_a_timestamp_error_but_others_are():
    """Kafka's validateRecord: the key error of a record wins over its timestamp error; a batch
    with any timestamp error is INVALID_TIMESTAMP, listing every bad record in index order."""
    rs = recs(4)
    rs[0] = rs[0]._replace(key=None, timestamp=NOW - 10_000_000)  # keyless and too old
    rs[2] = rs[2]._replace(timestamp=NOW - 10_000_000)  # too old only
    e = error_of(build_batch(rs), compacted_topic_partition=TP, now_ms=NOW,
                 timestamp_before_max_ms=1_000_000, timestamp_after_max_ms=1_000_000)
    assert e.error_code == INVALID_TIMESTAMP, e
    assert [i for i, _ in e.record_errors] == [0, 2]
    assert e.record_errors[0][1] == KEY_MSG and "should be within" in e.record_errors[1][1]


def test_many_keyless_records_get_an_index_each_and_a_bounded_number_of_messages():
    n = 3 * MAX_RECORD_ERROR_MESSAGES
    buf = build_batch([Record(key=None, value=b"v", timestamp=NOW) for _ in range(n)])
    e = error_of(buf, compacted_topic_partition=TP)
    assert [i for i, _ in e.record_errors] == list(range(n))
    assert sum(m is not None for _, m in e.record_errors) == MAX_RECORD_ERROR_MESSAGES
    assert f"due to {n} record errors" in e.message


# -- the C walker and its Python twin agree ----------------------------------------------------
def _walk_both(data: bytes, count: int, base: int, check: bool, lo: int, hi: int,
               keys: bool = False):
    out = []
    for fn in (walk_mod.walk_records, walk_mod.walk_records_py):
        try:
            out.append(("ok", fn(data, 0, len(data), count, base, check, lo, hi, keys)))
        except ValueError as exc:
            out.append(("error", str(exc)))
    return out


@pytest.mark.skipif(not walk_mod.HAVE_C_WALKER, reason="C walker not built (pure-Python fallback)")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.integers(0, 40), st.integers(-(2**63), 2**63 - 1),
       st.booleans(), st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1),
       st.booleans())
def test_c_and_python_walkers_agree_on_random_bytes(data, count, base, check, lo, hi, keys):
    c, py = _walk_both(data, count, base, check, lo, hi, keys)
    assert c == py


@pytest.mark.skipif(not walk_mod.HAVE_C_WALKER, reason="C walker not built (pure-Python fallback)")
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.data())
def test_c_and_python_walkers_agree_on_mutated_records(n, data):
    rs = [r._replace(key=None) if data.draw(st.booleans()) else r for r in recs(n)]
    body = bytearray(body_of(rs))
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.integers(0, 255))
    lo, hi = NOW + 1, NOW + n - 2
    c, py = _walk_both(bytes(body), n, NOW, True, lo, hi, data.draw(st.booleans()))
    assert c == py


# -- byte-flip fuzz: accepted means exactly what the header claims -----------------------------
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([0, 0, 1, 2, 3, 4]), st.integers(1, 8), st.data())
def test_any_byte_flip_is_rejected_with_an_error_code_or_decodes_as_claimed(codec, n, data):
    """Flip bytes of a valid batch anywhere in the CRC-covered part and fix the CRC (so the
    CRC is not what catches it): validation either refuses with a Kafka error code or the
    batch decodes to exactly ``recordsCount`` records at consecutive offsets."""
    buf = bytearray(build_batch(recs(n), compression=codec))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(21, len(buf) - 1))
        buf[i] ^= data.draw(st.integers(1, 255))
    recrc(buf)
    try:
        infos = validate_batches(buf, max_message_bytes=MAX, max_uncompressed_bytes=1 << 20)
    except RecordValidationError as e:
        assert e.error_code in (2, 76, 87), e
        return
    h = infos[0].header
    assign_offsets(buf, infos, 7, None)
    got = list(iter_records(buf))
    assert len(got) == h.records_count == h.last_offset_delta + 1
    assert [r.offset for r in got] == list(range(7, 7 + h.records_count))
    # Kafka's max starts at NO_TIMESTAMP (-1), so records all older than that give -1.
    assert max([-1] + [r.timestamp for r in got]) == h.max_timestamp or h.attributes & 0x08


def test_the_pure_python_fallback_validates_the_same(monkeypatch):
    """Where the C extension could not be built, validate_batches uses the Python twin."""
    import snakka.records.batch as batch_mod

    monkeypatch.setattr(batch_mod, "walk_records", walk_mod.walk_records_py)
    assert error_of(raw_batch(body_of(recs(5)), 10**9)).error_code == INVALID_RECORD
    assert error_of(raw_batch(body_of(recs(3), offset_deltas=[0, 2, 1]), 3)).error_code \
        == INVALID_RECORD
    infos = validate_batches(build_batch(recs(6), compression=4), max_message_bytes=MAX)
    assert infos[0].header.max_timestamp == NOW + 5
