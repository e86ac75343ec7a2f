"""Property: random keyed batches -> build the offset map -> filter every batch == a simple model.

The model is written from Kafka's guarantee, not from the filter's code: a reader from offset 0
sees, for every key the map covered, only its latest record (a tombstone too, until its delete
horizon passes), nothing keyless, and everything the map did not reach; every record it sees is
the record that was written at that offset (timestamp, key, value, headers unchanged); offsets
increase and batches keep their offset ranges. A second pass at the same time changes nothing
(the cleaner's common case returns the input's own bytes).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.records import Record, iter_batches, iter_records, parse_header
from snakka.storage.cleaner import ENTRY_BYTES

from .helpers import batch, clean

KEYS = [b"a", b"b", b"c", b"d", b"e", None]
entry = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=12)))
batch_spec = st.tuples(st.lists(entry, min_size=1, max_size=6), st.sampled_from([0, 1, 2, 3, 4]),
                       st.booleans())


def build(specs: list) -> list[bytes]:
    log, base = [], 0
    for i, (kvs, codec, lat) in enumerate(specs):
        log.append(batch(kvs, base, codec=codec, lat=lat, ts0=1000 + 100 * i))
        base += len(kvs)
    return log


def model(log: list[bytes], capacity: int | None) -> tuple[list[Record], int]:
    """What a reader must see after one pass, and the last offset the map covered."""
    recs = [r for b in log for r in iter_records(b)]
    covered = -1
    seen: set[bytes] = set()
    full = False
    for b in log:  # Kafka's map: stop at the first key put into a full map
        h = parse_header(b)
        for r in iter_records(b):
            if r.key is None:
                continue
            if capacity is not None and len(seen) >= capacity:
                full = True
                break
            seen.add(r.key)
            covered = r.offset
        if full:
            break
        covered = h.last_offset
    latest = {r.key: r.offset for r in recs if r.key is not None and r.offset <= covered}
    keep = [r for r in recs
            if r.offset > covered or (r.key is not None and latest[r.key] == r.offset)]
    return keep, covered


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(batch_spec, min_size=1, max_size=8),
       capacity=st.one_of(st.none(), st.integers(1, 4)))
def test_clean_equals_model(specs: list, capacity: int | None) -> None:
    log = build(specs)
    kw = {} if capacity is None else {"memory": ENTRY_BYTES * capacity, "load_factor": 1.0}
    want, covered = model(log, capacity)

    _res, out1, _ = clean(log, now=5000, retention=100, **kw)
    got = list(iter_records(b"".join(out1)))  # CRCs checked
    assert got == want
    assert [r.offset for r in got] == sorted({r.offset for r in got})
    ranges = {(parse_header(b).base_offset, parse_header(b).last_offset) for b in log}
    out_ranges = [(h.base_offset, h.last_offset) for h, _ in iter_batches(b"".join(out1))]
    assert set(out_ranges) <= ranges and out_ranges == sorted(out_ranges)
    # The round's last batch survives (maybe empty), so the log's end offset is kept.
    assert out_ranges[-1] == (parse_header(log[-1]).base_offset, parse_header(log[-1]).last_offset)

    # Same time again: nothing changes, and every batch comes back as the input's bytes.
    res2, out2, _ = clean(out1, now=5000, retention=100, **kw)
    if capacity is None:
        assert out2 == out1 and not any(r.rewritten for r in res2)

    # Past the horizon: the covered tombstones go, nothing else does.
    _res, out3, _ = clean(out1, now=5100, retention=100, **kw)
    got3 = list(iter_records(b"".join(out3)))
    want3, _ = model(out1, capacity)
    want3 = [r for r in want3 if r.value is not None or r.offset > _covered(out1, capacity)]
    assert got3 == want3


def _covered(log: list[bytes], capacity: int | None) -> int:
    return model(log, capacity)[1]
