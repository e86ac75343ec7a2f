"""The record decoder of the Spark source: the C extension and the pure-Python fallback
produce identical Arrow batches, filter offsets, and reject malformed records (no Spark
session needed)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snakka.records import Record, build_batch
from snakka.records.batch import HEADER_SIZE
from snakka.spark import arrow_decode
from snakka.spark.arrow_decode import ArrowBatchBuilder, CorruptRecordError, decode_records_py

needs_c = pytest.mark.skipif(not arrow_decode.USING_C_DECODER,
                             reason="the C decoder was not built (no compiler)")

header = st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5)))
record = st.builds(
    Record,
    timestamp=st.integers(0, 2**41),
    key=st.one_of(st.none(), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=40)),
    headers=st.lists(header, max_size=3),
)


def build(batches: list[list[Record]], codec: int = 0) -> bytes:
    out = b""
    base = 0
    for recs in batches:
        out += build_batch(recs, base_offset=base, compression=codec)
        base += len(recs)
    return out


def decode(data: bytes, lo: int, hi: int, headers: bool, fn) -> tuple:
    b = ArrowBatchBuilder("t", 3, headers)
    b._decode = fn
    nxt, n = b.add_fetched(memoryview(data), lo, hi)
    rb = b.flush()
    return nxt, n, (rb.to_pylist() if rb is not None else [])


@needs_c
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(record, min_size=1, max_size=8), min_size=1, max_size=4),
       st.integers(0, 12), st.integers(0, 40), st.booleans(), st.sampled_from([0, 1, 4]))
def test_c_and_python_decoders_agree(batches, lo, span, headers, codec):
    data = build(batches, codec)
    hi = lo + span
    c = decode(data, lo, hi, headers, arrow_decode._decode_records_c)
    py = decode(data, lo, hi, headers, decode_records_py)
    assert c == py
    flat = [r for recs in batches for r in recs]
    expected = [(i, r.key, r.value) for i, r in enumerate(flat) if lo <= i < hi]
    assert [(row["offset"], row["key"], row["value"]) for row in c[2]] == expected
    if headers:
        assert [row["headers"] for row in c[2]] == [
            [{"key": k, "value": v} for k, v in r.headers]
            for i, r in enumerate(flat) if lo <= i < hi]


def test_batch_schema_and_values():
    recs = [Record(timestamp=1_700_000_000_123, key=b"k", value=b"v", headers=[("a", b"1")]),
            Record(timestamp=1_700_000_000_124, key=None, value=None, headers=[])]
    for fn in filter(None, [arrow_decode._decode_records_c, decode_records_py]):
        b = ArrowBatchBuilder("topic", 7, True)
        b._decode = fn
        assert b.add_fetched(build([recs]), 0, 100) == (2, 2)
        rb = b.flush()
        assert rb.schema == arrow_decode.arrow_schema(True)
        assert str(rb.schema.field("timestamp").type) == "timestamp[us, tz=UTC]"
        rows = rb.to_pylist()
        assert [r["partition"] for r in rows] == [7, 7]
        assert [r["topic"] for r in rows] == ["topic", "topic"]
        assert rows[0]["timestamp"].timestamp() == 1_700_000_000.123
        assert rows[1]["key"] is None and rows[1]["value"] is None
        assert rows[0]["headers"] == [{"key": "a", "value": b"1"}]


def test_partial_trailing_batch_is_left_for_the_next_fetch():
    data = build([[Record(key=b"a", value=b"1")] * 3, [Record(key=b"b", value=b"2")] * 2])
    b = ArrowBatchBuilder("t", 0, False)
    assert b.add_fetched(data[:-5], 0, 100) == (3, 3)  # second batch cut: fetch again at 3


@pytest.mark.parametrize("fn", ["c", "py"])
def test_corrupt_records_are_reported(fn):
    impl = arrow_decode._decode_records_c if fn == "c" else decode_records_py
    if impl is None:
        pytest.skip("the C decoder was not built")
    rng = random.Random(1)
    good = build([[Record(key=b"key", value=b"value" * 3, headers=[("h", b"x")])] * 5])
    for _ in range(200):
        bad = bytearray(good)
        i = rng.randrange(HEADER_SIZE, len(bad))
        bad[i] = rng.randrange(256)
        b = ArrowBatchBuilder("t", 0, True, check_crcs=False)
        b._decode = impl
        try:
            b.add_fetched(bytes(bad), 0, 100)
        except CorruptRecordError:
            continue  # reported cleanly
        b.flush()  # or still well-formed Arrow data
    b = ArrowBatchBuilder("t", 0, True)  # with CRCs checked, any flip is caught
    bad = bytearray(good)
    bad[-2] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        b.add_fetched(bytes(bad), 0, 100)


def test_read_committed_skips_aborted_transactions():
    """Batch-level filtering with the Fetch response's aborted-transaction list (snakka has
    no transactions yet, so this is checked on hand-built batches)."""
    from types import SimpleNamespace

    abort = Record(key=b"\x00\x00\x00\x00", value=b"\x00\x00\x00\x00\x00\x00")
    commit = Record(key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x00")
    data = b"".join([
        build_batch([Record(value=b"a0"), Record(value=b"a1")], base_offset=0, producer_id=7,
                    producer_epoch=0, base_sequence=0, is_transactional=True),
        build_batch([Record(value=b"plain")], base_offset=2),
        build_batch([abort], base_offset=3, producer_id=7, producer_epoch=0,
                    is_transactional=True, is_control=True),
        build_batch([Record(value=b"c0")], base_offset=4, producer_id=7, producer_epoch=0,
                    base_sequence=2, is_transactional=True),
        build_batch([commit], base_offset=5, producer_id=7, producer_epoch=0,
                    is_transactional=True, is_control=True),
    ])
    aborted = [SimpleNamespace(producer_id=7, first_offset=0)]
    for committed, want in [(True, [b"plain", b"c0"]),
                            (False, [b"a0", b"a1", b"plain", b"c0"])]:
        b = ArrowBatchBuilder("t", 0, False, read_committed=committed)
        assert b.add_fetched(data, 0, 100, aborted)[0] == 6
        assert [r["value"] for r in b.flush().to_pylist()] == want
    # Starting after the abort marker: the producer's next transaction is committed data.
    b = ArrowBatchBuilder("t", 0, False, read_committed=True)
    b.add_fetched(data, 4, 100, aborted)
    assert [r["value"] for r in b.flush().to_pylist()] == [b"c0"]
