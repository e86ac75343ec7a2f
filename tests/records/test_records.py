"""Record codec and compression: round trips and cross-checks with kafka-python."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snakka.records import (
    CompressionError,
    Record,
    RecordValidationError,
    build_batch,
    compress,
    decode_varint,
    decompress,
    encode_varint,
    iter_records,
    parse_header,
    validate_batches,
)
from snakka.records.compression import XERIAL_MAGIC

CODECS = [0, 1, 2, 3, 4]
INT64 = st.integers(-(2**63), 2**63 - 1)

records_strategy = st.lists(
    st.builds(
        Record,
        offset=st.just(0),
        timestamp=st.integers(0, 2**41),
        key=st.none() | st.binary(max_size=20),
        value=st.none() | st.binary(max_size=200),
        headers=st.lists(
            st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3
        ),
    ),
    min_size=1,
    max_size=20,
)


@given(INT64)
def test_varint_round_trip(v):
    enc = encode_varint(v)
    assert decode_varint(enc, 0) == (v, len(enc))


def test_varint_known_encodings():
    # Kafka's zigzag: 0->00, -1->01, 1->02, 63->7e, -64->7f, 64->8001
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(-64) == b"\x7f"
    assert encode_varint(64) == b"\x80\x01"


@settings(max_examples=60, deadline=None)
@given(records_strategy, st.sampled_from(CODECS), st.integers(0, 2**40))
def test_build_iter_round_trip(records, codec, base_offset):
    buf = build_batch(records, compression=codec, base_offset=base_offset)
    validate_batches(buf, max_message_bytes=10**7, from_client=False)
    out = list(iter_records(buf))
    assert [r.offset for r in out] == list(range(base_offset, base_offset + len(records)))
    for got, want in zip(out, records, strict=True):
        assert (got.timestamp, got.key, got.value) == (want.timestamp, want.key, want.value)
        assert list(got.headers) == list(want.headers)


@pytest.mark.parametrize("codec", CODECS)
def test_compress_decompress(codec):
    data = b"hello kafka " * 5000
    assert decompress(codec, compress(codec, data)) == data
    # Any buffer compresses (the log cleaner hands over a bytearray; lz4 once took bytes only).
    for buf in (bytearray(data), memoryview(data)):
        assert decompress(codec, compress(codec, buf)) == data


def test_snappy_both_framings():
    data = bytes(range(256)) * 500  # > one 32 KiB xerial block
    framed = compress(2, data)
    raw = compress(2, data, xerial=False)
    assert framed.startswith(XERIAL_MAGIC) and not raw.startswith(XERIAL_MAGIC)
    assert decompress(2, framed) == data
    assert decompress(2, raw) == data
    # some producers write version/compat little-endian: only the magic is checked
    odd = framed[:8] + b"\x01\x00\x00\x00\x01\x00\x00\x00" + framed[16:]
    assert decompress(2, odd) == data


def test_lz4_frame_uses_independent_blocks():
    frame = compress(3, b"x" * 100_000)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    assert frame[4] & 0x20  # block independence flag (Kafka's reader needs it)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompress_garbage_raises_compression_error(codec):
    with pytest.raises(CompressionError):
        decompress(codec, b"\x00\x01garbage" * 3)


def test_corrupt_compressed_batch_raises_validation_error_on_iteration():
    buf = bytearray(build_batch([Record(timestamp=1, value=b"v" * 100)], compression=1))
    buf[-6] ^= 0xFF  # inside the gzip trailer (CRC32 of the data)
    with pytest.raises(RecordValidationError):
        list(iter_records(buf, verify_crc=False))


def test_log_append_time_batch_reports_max_timestamp():
    buf = build_batch(
        [Record(timestamp=5, value=b"a"), Record(timestamp=9, value=b"b")], timestamp_type=1
    )
    assert [r.timestamp for r in iter_records(buf)] == [9, 9]


def test_control_batches_skipped_unless_asked():
    ctrl = build_batch(
        [Record(timestamp=1, key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x01")],
        is_control=True,
        producer_id=1,
        producer_epoch=0,
    )
    data = build_batch([Record(timestamp=1, value=b"x")]) + ctrl
    assert len(list(iter_records(data))) == 1
    assert len(list(iter_records(data, include_control=True))) == 2


def test_iter_records_stops_at_partial_trailing_batch():
    one = build_batch([Record(timestamp=1, value=b"x")])
    two = build_batch([Record(timestamp=2, value=b"y")])
    assert [r.value for r in iter_records(one + two[:-3])] == [b"x"]


def test_empty_batch_refused():
    with pytest.raises(ValueError):
        build_batch([])


# ---------------------------------------------------------------- kafka-python


kp = pytest.importorskip("kafka.record.default_records")
codec_libs = {
    2: "snappy",  # python-snappy: kafka-python's snappy codec
    3: "lz4.frame",
    4: "zstandard",
}


def _need_codec(codec):
    if codec in codec_libs:
        pytest.importorskip(
            codec_libs[codec], reason="kafka-python's codec library for this compression"
        )


def _kafka_python_batch(codec, rows, *, producer_id=-1, epoch=-1, seq=-1, txn=False):
    builder = kp.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=txn,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=10**7,
    )
    for i, (ts, key, value, headers) in enumerate(rows):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


ROWS = [
    (1_700_000_000_000, b"key-0", b"value-0" * 50, [("h1", b"a"), ("h2", None)]),
    (1_700_000_000_005, None, b"value-1", []),
    (1_700_000_000_002, b"key-2", None, [("only", b"")]),
]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_decode_here(codec):
    _need_codec(codec)
    raw = _kafka_python_batch(codec, ROWS, producer_id=42, epoch=1, seq=7, txn=True)
    [info] = validate_batches(raw, max_message_bytes=10**7)
    h = info.header
    assert h.compression == codec and h.is_transactional
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 1, 7)
    assert h.max_timestamp == 1_700_000_000_005
    got = list(iter_records(raw))
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in got] == [
        (ts, k, v, h) for ts, k, v, h in ROWS
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_decode_in_kafka_python(codec):
    _need_codec(codec)
    records = [Record(timestamp=ts, key=k, value=v, headers=h) for ts, k, v, h in ROWS]
    ours = build_batch(
        records, compression=codec, producer_id=42, producer_epoch=1, base_sequence=7,
        base_offset=1000,
    )
    batch = kp.DefaultRecordBatch(ours)
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 1, 7)
    assert batch.max_timestamp == 1_700_000_000_005
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(1000 + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(ROWS)]


@pytest.mark.parametrize("codec", CODECS)
def test_uncompressed_bytes_identical_to_kafka_python(codec):
    """Same records, same header fields: the record section before compression is
    byte-identical, so the whole batch is when uncompressed."""
    _need_codec(codec)
    raw = _kafka_python_batch(0, ROWS)
    ours = build_batch([Record(timestamp=ts, key=k, value=v, headers=h) for ts, k, v, h in ROWS])
    assert parse_header(raw)._replace(crc=0) == parse_header(ours)._replace(crc=0)
    if codec == 0:
        assert raw == ours
