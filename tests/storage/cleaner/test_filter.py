"""What one cleaning pass keeps of each batch: Kafka's Cleaner record filter (filter.py).

Every rule of the cleaner's contract has a test here: latest offset per key, keyless records,
the map's reach (latest_offset), tombstones and the KIP-534 delete horizon (set once, honoured
later), emptied batches kept for an active producer or as the round's last, aborted data and
markers, codecs, headers and timestamps. Results are read back with snakka's decoder and with
kafka-python's (an independent implementation of the v2 format, CRC included).
"""

from __future__ import annotations

import pytest
from kafka.record import MemoryRecords

from snakka.records import Record, iter_batches, iter_records, parse_header
from snakka.records.batch import DELETE_HORIZON_MASK, RecordValidationError
from snakka.storage.cleaner import (
    ENTRY_BYTES,
    CleanedTxns,
    OffsetMap,
    add_batch_to_offset_map,
    batch_keys,
)
from snakka.storage.index import AbortedTxn

from .helpers import batch, clean, marker

CODECS = [0, 1, 2, 3, 4]


def records(log: list[bytes]) -> list[Record]:
    return [r for b in log for r in iter_records(b)]


def kafka_python(log: list[bytes]) -> list[tuple]:
    """The same log read by kafka-python: (offset, timestamp, key, value, headers), CRCs checked."""
    out = []
    for b in log:
        mr = MemoryRecords(b)
        while mr.has_next():
            kb = mr.next_batch()
            assert kb.validate_crc()
            if kb.is_control_batch:
                continue
            out += [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
                    for r in kb]
    return out


def offsets(log: list[bytes]) -> list[int]:
    return [r.offset for r in records(log)]


def test_latest_offset_per_key_wins_offsets_never_move() -> None:
    log = [batch([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], 0),
           batch([(b"a", b"2"), (b"d", b"1")], 3),
           batch([(b"b", b"2"), (b"e", b"1")], 5)]
    before = {r.offset: r for r in records(log)}
    res, out, _ = clean(log, now=5000)
    assert offsets(out) == [2, 3, 4, 5, 6]
    assert records(out) == [before[o] for o in (2, 3, 4, 5, 6)]  # timestamps, headers kept
    assert kafka_python(out) == [(r.offset, r.timestamp, r.key, r.value, list(r.headers))
                                 for r in records(out)]
    # The first batch is rebuilt around its one survivor, keeping its offsets and header.
    h0, h = parse_header(log[0]), parse_header(out[0])
    assert res[0].rewritten and res[0].records_kept == 1
    assert (h.base_offset, h.last_offset, h.records_count) == (0, 2, 1)
    assert (h.partition_leader_epoch, h.producer_id, h.producer_epoch, h.base_sequence) == (
        h0.partition_leader_epoch, h0.producer_id, h0.producer_epoch, h0.base_sequence)
    assert h.base_timestamp == 1020 and h.max_timestamp == 1020  # the survivor's timestamp
    assert (res[0].max_timestamp, res[0].offset_of_max_timestamp) == (1020, 2)
    # Unchanged batches are the input's own bytes: no copy, no re-encoding.
    for i in (1, 2):
        assert not res[i].rewritten and isinstance(res[i].data, memoryview)
        assert bytes(res[i].data) == log[i]
        assert (res[i].max_timestamp, res[i].offset_of_max_timestamp) == (
            parse_header(log[i]).max_timestamp, parse_header(log[i]).last_offset)


def test_keyless_records_dropped_records_past_the_map_kept() -> None:
    # A map of 2 keys fills inside the second batch: what it did not reach stays as it is.
    log = [batch([(b"a", b"1"), (None, b"keyless"), (b"a", b"2")], 0),
           batch([(b"b", b"1"), (b"c", b"1"), (b"a", b"3"), (None, b"late")], 3)]
    res, out, _ = clean(log, now=5000, memory=ENTRY_BYTES * 3)  # capacity int(3 * 0.9) = 2
    assert [(r.offset, r.key, r.value) for r in records(out)] == [
        (2, b"a", b"2"), (3, b"b", b"1"), (4, b"c", b"1"), (5, b"a", b"3"), (6, None, b"late")]
    assert res[0].rewritten and not res[1].rewritten
    # With room for every key, keyless records go everywhere and only the latest "a" stays.
    _res, out, _ = clean(log, now=5000)
    assert [(r.offset, r.key) for r in records(out)] == [(3, b"b"), (4, b"c"), (5, b"a")]


def test_offset_map_building_follows_kafka() -> None:
    log = [batch([(b"a", b"1"), (b"b", b"1")], 0, pid=5, epoch=0, seq=0, txn=True),
           batch([(b"c", b"1"), (None, b"x")], 2),
           marker(4, 5, commit=False),
           batch([(b"a", b"2")], 5)]
    m = OffsetMap(1 << 20)
    txns = CleanedTxns([AbortedTxn(5, 0, 4, 0)])
    full = [add_batch_to_offset_map(m, b, 0, parse_header(b), txns, 0) for b in log]
    assert full == [False] * 4
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c"), m.latest_offset, len(m)) == (5, -1, 2, 5, 2)
    # start_offset: records below the first dirty offset put no key, but the batch moves
    # latest_offset; batches wholly below it do not.
    m = OffsetMap(1 << 20)
    txns = CleanedTxns()
    add_batch_to_offset_map(m, log[1], 0, parse_header(log[1]), txns, 3)
    assert (len(m), m.latest_offset) == (0, 3)
    add_batch_to_offset_map(m, log[0], 0, parse_header(log[0]), CleanedTxns(), 9)
    assert m.latest_offset == 3


def test_batch_keys() -> None:
    b = batch([(b"a", b"1"), (None, b"2"), (b"c", None)], 40, codec=3)
    assert list(batch_keys(b, 0, parse_header(b))) == [(40, b"a"), (41, None), (42, b"c")]
    m = marker(9, 1, commit=True)
    assert list(batch_keys(m, 0, parse_header(m))) == []


def test_tombstone_horizon_set_once_then_honoured() -> None:
    log = [batch([(b"a", b"1")], 0),
           batch([(b"a", None), (b"b", b"1")], 1),
           batch([(b"z", b"1")], 3)]
    # Pass 1: the tombstone is the latest for "a": kept, and its batch gets the horizon.
    res, out1, _ = clean(log, now=5000, retention=100)
    assert res[0].data is None
    h = parse_header(out1[0])
    assert res[1].rewritten and h.attributes & DELETE_HORIZON_MASK and h.base_timestamp == 5100
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records(out1)] == [
        (1, 1000, b"a", None), (2, 1010, b"b", b"1"), (3, 1000, b"z", b"1")]
    assert kafka_python(out1) == [(r.offset, r.timestamp, r.key, r.value, list(r.headers))
                                  for r in records(out1)]
    # Pass 2, before the horizon: nothing to change, the horizon is not moved.
    res, out2, _ = clean(out1, now=5099, retention=100)
    assert not any(r.rewritten for r in res) and out2 == out1
    # Pass 3, at the horizon: the tombstone goes; the batch keeps its first horizon.
    res, out3, _ = clean(out1, now=5100, retention=7777)
    h = parse_header(out3[0])
    assert res[0].rewritten and h.attributes & DELETE_HORIZON_MASK and h.base_timestamp == 5100
    assert [(r.offset, r.timestamp, r.key) for r in records(out3)] == [(2, 1010, b"b"), (3, 1000, b"z")]
    assert (h.base_offset, h.last_offset) == (1, 2)
    # Pass 4, much later: a batch with a horizon and no tombstone stays as it is.
    res, out4, _ = clean(out3, now=10**9)
    assert not any(r.rewritten for r in res) and out4 == out3


def test_tombstone_batch_that_also_loses_records_gets_the_horizon() -> None:
    log = [batch([(b"a", b"1"), (b"b", None), (b"a", b"2")], 0, codec=4),
           batch([(b"z", b"1")], 3)]
    res, out, _ = clean(log, now=50, retention=10)
    h = parse_header(out[0])
    assert (h.base_timestamp, h.records_count, h.last_offset, h.compression) == (60, 2, 2, 4)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records(out[:1])] == [
        (1, 1010, b"b", None), (2, 1020, b"a", b"2")]
    # Once past the horizon, a batch of nothing but dead tombstones vanishes (not the last).
    log = [batch([(b"b", None)], 0), batch([(b"z", b"1")], 1)]
    _res, out, _ = clean(log, now=50, retention=10)
    res, out, _ = clean(out, now=60)
    assert res[0].data is None and offsets(out) == [1]


def test_emptied_batch_dropped_unless_producer_last_or_round_last() -> None:
    log = [batch([(b"a", b"1"), (b"a", b"2")], 0, pid=7, epoch=2, seq=10, codec=1),
           batch([(b"a", b"3")], 2),
           batch([(None, b"keyless")], 3)]
    res, out, _ = clean(log, now=5000)
    assert res[0].data is None
    # The last batch of the round survives empty, so the round's last offset is not lost.
    assert res[2].rewritten and res[2].records_kept == 0
    h = parse_header(out[-1])
    assert (h.base_offset, h.last_offset, h.records_count, len(out[-1])) == (3, 3, 0, 61)
    # An active producer's last batch survives empty, keeping what producer state needs.
    res, out, _ = clean(log, now=5000, producer_last={7: 1})
    h = parse_header(out[0])
    assert res[0].rewritten and res[0].records_kept == 0
    assert (h.base_offset, h.last_offset, h.records_count) == (0, 1, 0)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 2, 10, 11)
    assert h.compression == 0 and h.base_timestamp == -1
    assert h.max_timestamp == parse_header(log[0]).max_timestamp
    assert (res[0].max_timestamp, res[0].offset_of_max_timestamp) == (h.max_timestamp, 1)
    assert list(iter_batches(out[0]))  # CRC checked
    # Next pass: the empty batch is still the producer's last: its own bytes, unchanged.
    res2, out2, _ = clean(out, now=6000, producer_last={7: 1})
    assert not res2[0].rewritten and out2[0] == out[0]
    # ... and once the producer has moved on (or expired), it goes.
    res3, _out3, _ = clean(out, now=6000, producer_last={7: 99})
    assert res3[0].data is None
    # A producer whose last batch is elsewhere does not keep this one.
    res4, _o, _ = clean(log, now=5000, producer_last={7: 0})
    assert res4[0].data is None


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("lat", [False, True])
def test_codec_timestamp_type_headers_preserved(codec: int, lat: bool) -> None:
    log = [batch([(b"k%d" % (i % 4), b"v%d" % i * 20) for i in range(12)], 100, codec=codec,
                 lat=lat, pid=3, epoch=1, seq=0),
           batch([(b"k0", b"new")], 112, codec=codec, lat=lat)]
    before = {r.offset: r for r in records(log)}
    res, out, _ = clean(log, now=5000)
    h, h0 = parse_header(out[0]), parse_header(log[0])
    assert res[0].rewritten and h.compression == codec and h.is_log_append_time == lat
    assert (h.base_offset, h.last_offset, h.base_sequence, h.producer_id) == (100, 111, 0, 3)
    assert offsets(out) == [109, 110, 111, 112]
    assert records(out) == [before[o] for o in (109, 110, 111, 112)]
    assert records(out)[0].headers == [("hk", b"h-109"), ("n", None)]
    if lat:  # every record reads as the batch's append time, before and after
        assert {r.timestamp for r in records(out[:1])} == {h0.max_timestamp}
        assert h.max_timestamp == h0.max_timestamp
    else:
        assert [r.timestamp for r in records(out[:1])] == [1090, 1100, 1110]
        assert h.max_timestamp == res[0].max_timestamp == 1110
    assert kafka_python(out) == [(r.offset, r.timestamp, r.key, r.value, list(r.headers))
                                 for r in records(out)]


def test_aborted_data_and_markers() -> None:
    # pid 5 aborts (offsets 0-1, marker 3); pid 6 commits (offset 4, marker 5), and its only
    # record is later superseded (offset 6).
    log = [batch([(b"a", b"aborted"), (b"b", b"aborted")], 0, pid=5, epoch=0, seq=0, txn=True),
           batch([(b"c", b"1")], 2),
           marker(3, 5, commit=False),
           batch([(b"a", b"committed")], 4, pid=6, epoch=0, seq=0, txn=True),
           marker(5, 6, commit=True),
           batch([(b"a", b"3")], 6),
           batch([(b"z", b"1")], 7)]
    aborted = [AbortedTxn(5, 0, 3, 0)]
    res, out1, txns = clean(log, now=5000, retention=100, aborted=aborted)
    assert res[0].data is None                       # aborted data: dropped
    assert not res[2].rewritten and res[2].data is not None   # its data was in this pass
    assert txns.drain_retained_aborted() == aborted  # the cleaned .txnindex keeps it
    assert res[3].data is None                       # superseded committed data
    assert not res[4].rewritten and res[4].data is not None   # its data was in this pass
    assert [(r.offset, r.value) for r in records(out1)] == [(2, b"1"), (6, b"3"), (7, b"1")]
    # Pass 2: both transactions have no data left: the markers get the horizon.
    res, out2, txns = clean(out1, now=5000, retention=100, aborted=aborted)
    assert txns.drain_retained_aborted() == []
    for r in (res[1], res[2]):
        h = parse_header(r.data)
        assert r.rewritten and h.is_control and h.attributes & DELETE_HORIZON_MASK
        assert h.base_timestamp == 5100 and h.records_count == 1
    assert [r.key for r in records([bytes(res[1].data)])] == []  # still a control batch
    assert len(list(iter_records(bytes(res[1].data), include_control=True))) == 1
    # Pass 3, before the horizon: kept as they are. At the horizon: gone.
    res, out3, _ = clean(out2, now=5099, aborted=[])
    assert not any(r.rewritten for r in res) and out3 == out2
    res, out4, _ = clean(out2, now=5100, aborted=[])
    assert res[1].data is None and res[2].data is None
    assert [parse_header(b).is_control for b in out4] == [False, False, False]
    # ... unless a marker is its producer's last word (epoch fencing): then it stays, empty.
    res, out5, _ = clean(out2, now=5100, aborted=[], producer_last={6: 5})
    h = parse_header(bytes(res[2].data))
    assert h.is_control and h.is_transactional and h.records_count == 0 and h.last_offset == 5
    res, _out6, _ = clean(out5, now=9999, aborted=[], producer_last={6: 5})
    assert not res[2].rewritten  # an empty control batch still needed stays as it is


def test_corrupt_record_is_an_error_not_a_guess() -> None:
    b = bytearray(batch([(b"a", b"1"), (b"b", b"2")], 0, headers=False))
    b[61] = 0x7E  # first record claims 63 bytes: beyond the batch
    with pytest.raises(RecordValidationError):
        clean([bytes(b)], now=0)
    b = bytearray(batch([(b"a", b"1")], 0, headers=False))
    with pytest.raises(RecordValidationError):
        clean([bytes(b[:-1])], now=0)  # truncated batch


def test_python_walk_fallback_gives_the_same_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the C extension could not be built the filter walks records in Python: same result."""
    from snakka.records import spans
    from snakka.storage.cleaner import filter as filter_mod

    base, renum = 0, []
    for c in CODECS:
        renum.append(batch([(b"k%d" % (i % 3), None if i == 7 else b"v%d" % i) for i in range(9)],
                           base, codec=c))
        base += 9
    _r, with_c, _ = clean(renum, now=5000)
    monkeypatch.setattr(filter_mod, "record_spans", spans.record_spans_py)
    _r, with_py, _ = clean(renum, now=5000)
    assert with_py == with_c and offsets(with_c) == [42, 43, 44]
