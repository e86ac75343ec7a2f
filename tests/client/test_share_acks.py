"""InFlightRecords: decoding acquired ranges, GAPs, explicit/implicit acknowledgement rules,
draining acknowledgements per node and the connection-loss rules."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snakka.client import share_acks
from snakka.client.share_acks import (
    IllegalStateError,
    InFlightRecords,
    TopicPartition,
    ack_batches,
)
from snakka.protocol.share import AckBatch, AcknowledgeType
from snakka.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
    Record,
    RecordValidationError,
    batch_records,
    build_batch,
    parse_header,
)

TID = uuid.UUID(int=7)
KEY = (TID, 0, 1)  # topic id, partition, node


def batch(base: int, n: int, *, compression: int = 0, control: bool = False) -> bytes:
    return build_batch([Record(timestamp=1000 + i, key=b"k%d" % (base + i),
                               value=b"v%d" % (base + i), headers=[("h", b"x")])
                        for i in range(n)], base_offset=base, compression=compression,
                       is_control=control)


def test_ack_batches_coalesce_runs_and_types():
    assert ack_batches({}) == []
    assert ack_batches({5: 1, 6: 1, 7: 1}) == [AckBatch(5, 7, (1,))]
    assert ack_batches({5: 1, 6: 2, 7: 1, 9: 3}) == [AckBatch(5, 7, (1, 2, 1)),
                                                     AckBatch(9, 9, (3,))]


@pytest.mark.parametrize("compression", [0, COMPRESSION_GZIP, COMPRESSION_ZSTD])
def test_only_acquired_offsets_are_returned_and_missing_ones_are_gaps(compression):
    f = InFlightRecords()
    data = batch(0, 5, compression=compression) + batch(5, 1, control=True) + batch(8, 4)
    # acquired 2..6 (6 is beyond the first batch, 5 is a control record) and 9..10
    n = f.add_fetched(KEY, "t", [(2, 7, 1), (9, 10, 3)], data)
    assert n == 5
    recs = f.take(100)
    assert [(r.offset, r.delivery_count) for r in recs] == [(2, 1), (3, 1), (4, 1), (9, 3),
                                                             (10, 3)]
    assert recs[0].key == b"k2" and recs[0].value == b"v2" and recs[0].headers == [("h", b"x")]
    assert recs[0].topic == "t" and recs[0].partition == 0 and recs[0].timestamp == 1002
    # offsets 5 (control), 6 and 7 (no record) are GAPs, drained without any app action
    d = f.drain(1)
    assert d.batches == {(TID, 0): [AckBatch(5, 7, (AcknowledgeType.GAP,))]}
    assert f.unacked_count() == 5


def test_take_respects_max_records():
    f = InFlightRecords()
    f.add_fetched(KEY, "t", [(0, 9, 1)], batch(0, 10))
    assert [r.offset for r in f.take(4)] == [0, 1, 2, 3]
    assert [r.offset for r in f.take(4)] == [4, 5, 6, 7]
    assert f.buffered() == 2


def test_explicit_acknowledge_rules():
    f = InFlightRecords()
    f.add_fetched(KEY, "t", [(0, 3, 1)], batch(0, 4))
    recs = f.take(2)
    with pytest.raises(IllegalStateError):  # buffered, never returned by poll
        f.acknowledge_key(KEY, 3, AcknowledgeType.ACCEPT)
    f.acknowledge(recs[0], AcknowledgeType.ACCEPT)
    with pytest.raises(IllegalStateError):  # twice
        f.acknowledge(recs[0], AcknowledgeType.REJECT)
    with pytest.raises(ValueError):
        f.acknowledge(recs[1], AcknowledgeType.GAP)
    assert f.unacked_count() == 1
    f.acknowledge(recs[1], AcknowledgeType.RELEASE)
    assert f.unacked_count() == 0
    d = f.drain(1)
    assert d.batches == {(TID, 0): [AckBatch(0, 1, (1, 2))]}
    assert f.in_flight_count() == 2  # the two buffered records


def test_implicit_accept_of_previous_poll():
    f = InFlightRecords()
    f.add_fetched(KEY, "t", [(0, 3, 1)], batch(0, 4))
    f.take(3)
    assert f.accept_unacked() == 3
    assert f.drain(1).batches == {(TID, 0): [AckBatch(0, 2, (1,))]}
    # the fourth, still buffered, is released when the partition goes away
    assert f.release_buffered(keep=lambda k: False) == 1
    assert f.drain(1).batches == {(TID, 0): [AckBatch(3, 3, (2,))]}
    assert f.in_flight_count() == 0 and f.keys() == set()


def test_renew_keeps_the_record_in_flight_until_its_final_ack():
    f = InFlightRecords()
    f.add_fetched(KEY, "t", [(0, 0, 1)], batch(0, 1))
    (r,) = f.take(10)
    f.acknowledge(r, AcknowledgeType.RENEW)
    d = f.drain(1)
    assert d.has_renew and d.batches == {(TID, 0): [AckBatch(0, 0, (4,))]}
    assert f.in_flight_count() == 1
    f.acknowledge(r, AcknowledgeType.RENEW)
    f.acknowledge(r, AcknowledgeType.ACCEPT)  # the final acknowledgement replaces the RENEW
    with pytest.raises(IllegalStateError):
        f.acknowledge(r, AcknowledgeType.REJECT)
    assert f.drain(1).batches == {(TID, 0): [AckBatch(0, 0, (1,))]}
    assert f.in_flight_count() == 0


def test_drain_is_per_node_and_filtered():
    f = InFlightRecords()
    other = uuid.UUID(int=8)
    f.add_fetched(KEY, "t", [(0, 0, 1)], batch(0, 1))
    f.add_fetched((other, 3, 1), "u", [(0, 0, 1)], batch(0, 1))
    f.add_fetched((TID, 1, 2), "t", [(0, 0, 1)], batch(0, 1))
    f.take(10)
    f.accept_unacked()
    assert f.nodes_with_pending() == {1, 2}
    assert f.pending_partitions(1) == {(TID, 0), (other, 3)}
    d = f.drain(1, only=lambda tip: tip == (other, 3))
    assert set(d.batches) == {(other, 3)}
    res = f.completed(d, {(other, 3): 121})
    assert res[0].partition == TopicPartition("u", 3) and res[0].offsets == {0}
    assert res[0].error is not None and res[0].error.code == 121
    assert f.pending_partitions(1) == {(TID, 0)}
    d2 = f.drain(2)
    assert f.completed(d2, {})[0].error is None


def test_forget_node_drops_acquisitions_but_keeps_the_poll_check_satisfiable():
    f = InFlightRecords()
    f.add_fetched(KEY, "t", [(0, 4, 1)], batch(0, 5))
    recs = f.take(2)
    f.forget_node(1)
    assert f.buffered() == 0 and f.in_flight_count() == 0
    f.acknowledge(recs[0], AcknowledgeType.ACCEPT)  # moot, but allowed (explicit poll check)
    assert f.nodes_with_pending() == set()
    assert f.unacked_count() == 1


def test_find_key_and_corrupt_data_releases():
    f = InFlightRecords()
    f.add_fetched(KEY, "t", [(0, 1, 1)], batch(0, 2))
    f.take(1)
    assert f.find_key("t", 0, 0) == KEY
    with pytest.raises(IllegalStateError):
        f.find_key("t", 0, 1)  # buffered only
    bad = bytearray(batch(10, 2))
    bad[-1] ^= 0xFF  # CRC mismatch
    with pytest.raises(RecordValidationError):
        f.add_fetched((TID, 1, 1), "t", [(10, 11, 1)], bytes(bad))
    d = f.drain(1, only=lambda tip: tip == (TID, 1))
    assert d.batches == {(TID, 1): [AckBatch(10, 11, (AcknowledgeType.RELEASE,))]}


def test_release_flag_releases_without_decoding():
    f = InFlightRecords()
    assert f.add_fetched(KEY, "t", [(0, 2, 1)], b"garbage", release=True) == 0
    assert f.drain(1).batches == {(TID, 0): [AckBatch(0, 2, (AcknowledgeType.RELEASE,))]}


def test_buffered_records_whose_lock_ended_are_not_returned():
    f = InFlightRecords()
    f.add_fetched(KEY, "t", [(0, 3, 1)], batch(0, 4), lock_deadline=100.0)
    assert [r.offset for r in f.take(2, now=99.0)] == [0, 1]
    assert f.take(10, now=100.0) == []  # 2 and 3 waited too long: the broker took them back
    assert f.in_flight_count() == 2 and f.unacked_count() == 2  # only what poll returned
    assert f.drain(1).batches == {}  # nothing is acknowledged for the expired ones


# ------------------------------------------------------------ C record decoding


_needs_c = pytest.mark.skipif(share_acks.DECODER != "c",
                              reason="snakka.spark._fastdecode is not built (no C compiler)")
_bytes_or_none = st.one_of(st.none(), st.binary(max_size=40))
_record = st.builds(
    Record, timestamp=st.integers(0, 2**41), key=_bytes_or_none, value=_bytes_or_none,
    headers=st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=3))


@_needs_c
@settings(max_examples=200, deadline=None)
@given(records=st.lists(_record, min_size=1, max_size=20), base=st.integers(0, 2**40),
       codec=st.sampled_from([0, COMPRESSION_GZIP, COMPRESSION_LZ4]),
       ts_type=st.sampled_from([0, 1]))
def test_c_record_decoding_matches_batch_records(records, base, codec, ts_type):
    """The share consumer's C decoder (record_tuples) gives exactly what the pure-Python
    batch_records gives: offsets, timestamps (LogAppendTime included), null and empty keys,
    values and header values, header keys."""
    data = build_batch(records, base_offset=base, compression=codec, timestamp_type=ts_type)
    h = parse_header(data, 0)
    assert share_acks._batch_tuples(data, 0, h) == \
        [tuple(r) for r in batch_records(data, 0, h)]


@_needs_c
def test_c_record_decoding_replaces_invalid_utf8_header_keys_like_batch_records():
    data = bytearray(build_batch([Record(timestamp=5, key=None, value=b"v",
                                         headers=[("ab", b"x")])]))
    i = data.rindex(b"ab")
    data[i] = 0xFF  # the CRC is not checked here, as batch_records does not
    h = parse_header(data, 0)
    got = share_acks._batch_tuples(bytes(data), 0, h)
    assert got == [tuple(r) for r in batch_records(bytes(data), 0, h)]
    assert got[0][4] == [("\ufffdb", b"x")]


@_needs_c
@pytest.mark.parametrize("cut", [1, 5, 20])
def test_c_record_decoding_rejects_corrupt_records(cut):
    data = bytearray(batch(0, 3))
    h = parse_header(data, 0)
    del data[len(data) - cut:]  # the records section ends early; header unchanged
    data += b"\x00" * cut  # same length: the last record's fields no longer add up
    data[len(data) - cut - 1] = 0x7F
    with pytest.raises(RecordValidationError):
        list(batch_records(bytes(data), 0, h))
    with pytest.raises(RecordValidationError):
        share_acks._batch_tuples(bytes(data), 0, h)
