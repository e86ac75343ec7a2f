"""The log cleaner's record walk (records.spans): C and its Python specification agree, on
real batches of every codec and on random and hostile bytes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.records import (
    Record,
    build_batch,
    decompress,
    encode_varint,
    iter_records,
    parse_header,
)
from snakka.records import spans as spans_mod
from snakka.records.record import encode_record

both = pytest.mark.skipif(not spans_mod.HAVE_C_SPANS, reason="C walker not built (pure-Python fallback)")


def _both(data: bytes, start: int, end: int, count: int, lod: int):
    out = []
    for fn in (spans_mod.record_spans, spans_mod.record_spans_py):
        try:
            out.append(("ok", fn(data, start, end, count, lod)))
        except ValueError as exc:
            out.append(("error", str(exc)))
    return out


record = st.builds(Record, timestamp=st.integers(-1, 2**45), key=st.one_of(st.none(), st.binary(max_size=80)),
                   value=st.one_of(st.none(), st.binary(max_size=300)),
                   headers=st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
                                    max_size=2))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=12), st.sampled_from([0, 1, 2, 3, 4]))
def test_spans_of_real_batches(records, codec):
    buf = build_batch(records, base_offset=500, compression=codec)
    h = parse_header(buf)
    data = buf[61:] if codec == 0 else decompress(codec, buf[61:])
    c, py = _both(data, 0, len(data), h.records_count, h.last_offset_delta)
    assert c == py and c[0] == "ok"
    spans = c[1]
    decoded = list(iter_records(buf))
    assert [(500 + s[4], s[5], s[6]) for s in spans] == [
        (r.offset, r.key, r.value is not None) for r in decoded]
    assert [h.base_timestamp + s[2] for s in spans] == [r.timestamp for r in decoded]
    # Spans tile the section; the bytes after the timestamp delta are the record's tail.
    assert spans[0][0] == 0 and spans[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    for s, r in zip(spans, records, strict=True):
        enc = encode_record(s[4], s[2], r.key, r.value, r.headers)
        assert data[s[0]:s[1]] == enc
        assert enc.endswith(bytes(data[s[3]:s[1]]))


@both
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.integers(0, 40), st.integers(0, 50))
def test_c_and_python_agree_on_random_bytes(data, count, lod):
    c, py = _both(data, 0, len(data), count, lod)
    assert c == py


@both
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=5), st.data())
def test_c_and_python_agree_on_flipped_bytes(records, draw):
    data = bytearray(b"".join(encode_record(i, 3, r.key, r.value, r.headers)
                              for i, r in enumerate(records)))
    for _ in range(draw.draw(st.integers(1, 3))):
        i = draw.draw(st.integers(0, len(data) - 1))
        data[i] = draw.draw(st.integers(0, 255))
    c, py = _both(bytes(data), 0, len(data), len(records), len(records) - 1)
    assert c == py


@pytest.mark.parametrize("fn", [spans_mod.record_spans, spans_mod.record_spans_py])
def test_what_the_walk_refuses(fn):
    ok = encode_record(0, 0, b"k", b"v") + encode_record(3, 0, b"k", None)
    assert [s[4] for s in fn(ok, 0, len(ok), 2, 3)] == [0, 3]
    with pytest.raises(ValueError, match="offset delta 3 outside"):
        fn(ok, 0, len(ok), 2, 2)
    with pytest.raises(ValueError, match="remain after 1 records"):
        fn(ok, 0, len(ok), 1, 3)
    with pytest.raises(ValueError, match="claims 1000000000 records"):
        fn(ok, 0, len(ok), 10**9, 10**9)
    with pytest.raises(ValueError, match="out of the buffer"):
        fn(ok, 0, len(ok) + 1, 2, 3)
    short = encode_varint(5) + b"\x00" * 5
    with pytest.raises(ValueError, match="invalid record size 5"):
        fn(short, 0, len(short), 1, 0)
    bad_key = encode_varint(7) + b"\x00\x00\x00" + encode_varint(9) + b"\x00\x00\x00"
    with pytest.raises(ValueError, match="invalid key length 9"):
        fn(bad_key, 0, len(bad_key), 1, 0)
