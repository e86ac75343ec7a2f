"""records.rebuild: the batches the log cleaner writes (rebuilt with fewer records, or empty)."""

from __future__ import annotations

import pytest
from kafka.record import MemoryRecords

from snakka.records import Record, build_batch, iter_batches, iter_records, parse_header
from snakka.records.batch import DELETE_HORIZON_MASK
from snakka.records.rebuild import empty_batch, rebuild_batch
from snakka.records.record import encode_record

CODECS = [0, 1, 2, 3, 4]


def original(codec: int = 0, **kw) -> bytes:
    recs = [Record(timestamp=1000 + i, key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)])
            for i in range(5)]
    return build_batch(recs, base_offset=100, compression=codec, producer_id=7, producer_epoch=3,
                       base_sequence=40, is_transactional=True, partition_leader_epoch=9, **kw)


@pytest.mark.parametrize("codec", CODECS)
def test_rebuild_keeps_header_and_offsets(codec: int) -> None:
    h = parse_header(original(codec))
    # Keep records at deltas 1 and 4, timestamps against a new base (1001).
    body = encode_record(1, 0, b"k1", b"v1", [("h", b"1")]) + encode_record(4, 3, b"k4", None)
    out = rebuild_batch(h, body, 2, base_timestamp=1001, max_timestamp=1004, delete_horizon=False)
    (nh, pos), = list(iter_batches(out))  # the CRC is checked here
    assert pos == 0
    assert nh._replace(crc=0, batch_length=0, base_timestamp=0, max_timestamp=0,
                       records_count=0) == h._replace(crc=0, batch_length=0, base_timestamp=0,
                                                      max_timestamp=0, records_count=0)
    assert (nh.base_timestamp, nh.max_timestamp, nh.records_count, nh.last_offset) == (1001, 1004, 2, 104)
    assert nh.compression == codec
    assert list(iter_records(out)) == [Record(101, 1001, b"k1", b"v1", [("h", b"1")]),
                                       Record(104, 1004, b"k4", None, [])]
    # An independent decoder (kafka-python) reads the same thing and agrees on the CRC.
    batch = MemoryRecords(out).next_batch()
    assert batch.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch] == [
        (101, 1001, b"k1", b"v1"), (104, 1004, b"k4", None)]


def test_rebuild_delete_horizon_bit() -> None:
    h = parse_header(original())
    body = encode_record(2, 1002 - 5000, b"k2", None)
    out = rebuild_batch(h, body, 1, base_timestamp=5000, max_timestamp=1002, delete_horizon=True)
    nh = parse_header(out)
    assert nh.attributes & DELETE_HORIZON_MASK and nh.base_timestamp == 5000
    assert list(iter_records(out)) == [Record(102, 1002, b"k2", None, [])]
    # ... and clearing it is explicit too.
    out2 = rebuild_batch(nh, body, 1, base_timestamp=5000, max_timestamp=1002, delete_horizon=False)
    assert not parse_header(out2).attributes & DELETE_HORIZON_MASK


def test_rebuild_refuses_what_cannot_be() -> None:
    h = parse_header(original())
    with pytest.raises(ValueError):
        rebuild_batch(h, b"", 0, base_timestamp=0, max_timestamp=0, delete_horizon=False)
    with pytest.raises(ValueError):
        rebuild_batch(h, b"x", 6, base_timestamp=0, max_timestamp=0, delete_horizon=False)


@pytest.mark.parametrize("codec", CODECS)
def test_empty_batch_as_kafka_writes_it(codec: int) -> None:
    src = original(codec, timestamp_type=1)
    h = parse_header(src)
    out = empty_batch(h)
    (nh, _), = list(iter_batches(out))
    assert len(out) == 61 and nh.records_count == 0
    assert (nh.base_offset, nh.last_offset, nh.producer_id, nh.producer_epoch, nh.base_sequence,
            nh.partition_leader_epoch) == (100, 104, 7, 3, 40, 9)
    assert nh.compression == 0 and nh.is_transactional and nh.is_log_append_time
    assert not nh.attributes & DELETE_HORIZON_MASK
    assert (nh.base_timestamp, nh.max_timestamp) == (-1, h.max_timestamp)
    assert list(iter_records(out)) == []
    batch = MemoryRecords(out).next_batch()
    assert batch.validate_crc() and list(batch) == []
