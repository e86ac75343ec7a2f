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
from snakka.storage.index import AbortedTxn

from .helpers import batch, clean, marker

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


# ---------------------------------------------------------------- with transactions

step = st.one_of(
    st.tuples(st.just("data"), st.lists(entry, min_size=1, max_size=3)),
    st.tuples(st.just("txn"), st.sampled_from([1, 2]), st.lists(entry, min_size=1, max_size=3)),
    st.tuples(st.just("end"), st.sampled_from([1, 2]), st.booleans()),
)


def build_txn_log(steps: list, close_with: bool) -> tuple[list[bytes], list[AbortedTxn], set[int]]:
    """A log from the steps (every transaction ended at the end: the cleaner never cleans past
    the last stable offset), its aborted transactions and the offsets of aborted records."""
    log: list[bytes] = []
    aborted: list[AbortedTxn] = []
    aborted_offsets: set[int] = set()
    open_txns: dict[int, list[int]] = {}  # pid -> offsets of its data
    base = 0

    def end(pid: int, commit: bool) -> None:
        nonlocal base
        offs = open_txns.pop(pid)
        log.append(marker(base, pid, commit=commit))
        if not commit:
            aborted.append(AbortedTxn(pid, offs[0], base, 0))
            aborted_offsets.update(offs)
        base += 1

    for s in steps:
        if s[0] == "data":
            log.append(batch(s[1], base))
            base += len(s[1])
        elif s[0] == "txn":
            pid, kvs = s[1], s[2]
            log.append(batch(kvs, base, pid=pid, epoch=0, seq=0, txn=True))
            open_txns.setdefault(pid, []).extend(range(base, base + len(kvs)))
            base += len(kvs)
        elif s[1] in open_txns:
            end(s[1], s[2])
    for pid in sorted(open_txns):
        end(pid, close_with)
    return log, aborted, aborted_offsets


def control_batches_justified(log: list[bytes]) -> None:
    """Kafka's rule for markers: a non-empty marker stays only while its transaction still has
    data in the log (after the horizon); data batches of a producer before its marker."""
    has_data: dict[int, bool] = {}
    for b in log:
        h = parse_header(b)
        if h.is_control:
            if h.records_count:
                assert has_data.get(h.producer_id), f"marker at {h.base_offset} has no data left"
            has_data[h.producer_id] = False
        elif h.is_transactional and h.records_count:
            has_data[h.producer_id] = True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=12), close_with=st.booleans())
def test_clean_with_transactions(steps: list, close_with: bool) -> None:
    log, aborted, aborted_offsets = build_txn_log(steps, close_with)
    committed = [r for r in iter_records(b"".join(log)) if r.offset not in aborted_offsets]
    latest = {r.key: r.offset for r in committed if r.key is not None}
    want = [r for r in committed if r.key is not None and latest[r.key] == r.offset]

    if not log:
        return
    _res, out1, txns = clean(log, now=5000, retention=100, aborted=aborted)
    # No aborted record survives; every committed key reads its latest value.
    assert list(iter_records(b"".join(out1))) == want
    # The cleaned .txnindex keeps the aborted transactions whose markers this pass kept
    # (their data was in this pass); later passes learn them from there, as Kafka's do.
    index = txns.drain_retained_aborted()
    assert {t.last_offset for t in index} <= {t.last_offset for t in aborted}

    # Later passes: tombstones go at their horizon; markers left without data get one, then
    # go once it has passed. Once nothing changes any more, every marker still standing has
    # data of its transaction before it, and only the round's last batch may stand empty.
    out = out1
    for now in (5000, 5100, 5100, 5200, 5200):
        _res, out, txns = clean(out, now=now, retention=100, aborted=index)
        index = txns.drain_retained_aborted()
    assert list(iter_records(b"".join(out))) == [r for r in want if r.value is not None]
    control_batches_justified(out)
    for b in out[:-1]:
        h = parse_header(b)
        assert not (h.is_control and h.records_count == 0)
    assert parse_header(out[-1]).last_offset == parse_header(log[-1]).last_offset
