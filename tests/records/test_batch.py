"""Batch header parsing, produce-time validation and in-place offset assignment."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.records import (
    HEADER_SIZE,
    Record,
    RecordValidationError,
    assign_offsets,
    build_batch,
    iter_records,
    parse_header,
    validate_batches,
)
from snakka.records.batch import increment_sequence

MAX = 1_048_588


def make(n=3, **kw) -> bytearray:
    recs = [Record(timestamp=1000 + i, key=b"k%d" % i, value=b"value-%d" % i) for i in range(n)]
    return bytearray(build_batch(recs, **kw))


def recrc(buf: bytearray, pos: int = 0) -> bytearray:
    """Recompute a batch's CRC after a test patched a covered field."""
    length = struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21 : pos + 12 + length])))
    return buf


def code_of(buf, **kw) -> int:
    with pytest.raises(RecordValidationError) as ei:
        validate_batches(buf, max_message_bytes=kw.pop("max_message_bytes", MAX), **kw)
    return ei.value.error_code


def test_parse_header_fields():
    buf = make(4, producer_id=77, producer_epoch=3, base_sequence=10, partition_leader_epoch=9)
    h = parse_header(buf, 0)
    assert (h.base_offset, h.magic, h.partition_leader_epoch) == (0, 2, 9)
    assert h.batch_length + 12 == len(buf) == h.size
    assert (h.last_offset_delta, h.records_count) == (3, 4)
    assert (h.base_timestamp, h.max_timestamp) == (1000, 1003)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, 10)
    assert h.last_sequence == 13
    assert h.compression == 0 and not h.is_transactional and not h.is_control
    assert h.crc == crc32c(bytes(buf[21:]))


def test_parse_header_flags():
    h = parse_header(make(1, compression=4, is_transactional=True, timestamp_type=1))
    assert h.compression == 4 and h.is_transactional and h.is_log_append_time


def test_sequence_wraps_at_int32_max():
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 3) == 1
    assert increment_sequence(5, 0) == 5
    assert increment_sequence(-1, 4) == -1


def test_valid_batch_gives_one_info():
    buf = make(3)
    [info] = validate_batches(buf, max_message_bytes=MAX)
    assert info.position == 0 and info.header.records_count == 3


def test_corrupt_byte_is_corrupt_message():
    buf = make(3)
    buf[-3] ^= 0xFF
    assert code_of(buf) == 2


def test_corrupt_crc_field_is_corrupt_message():
    buf = make(3)
    buf[17] ^= 0x01
    assert code_of(buf) == 2


def test_too_large_is_message_too_large():
    buf = make(3)
    assert code_of(buf, max_message_bytes=len(buf) - 1) == 10
    validate_batches(buf, max_message_bytes=len(buf))


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_invalid_record(magic):
    buf = make(3)
    buf[16] = magic
    assert code_of(buf) == 87


def test_unknown_magic_is_corrupt():
    buf = make(3)
    buf[16] = 3
    assert code_of(buf) == 2


def test_empty_and_truncated_buffers():
    assert code_of(b"") == 87
    buf = make(3)
    assert code_of(buf[:30]) == 87  # no complete batch: Kafka's "at least one batch"
    assert code_of(buf[:-1]) == 87
    assert code_of(buf[:5]) == 87


def test_trailing_garbage_is_corrupt():
    buf = make(3)
    assert code_of(buf + b"\x00" * 5, from_client=False) == 2
    assert code_of(bytes(buf) + bytes(buf[:20]), from_client=False) == 2


def test_length_below_header_is_corrupt():
    buf = make(1)
    struct.pack_into(">i", buf, 8, 40)
    assert code_of(buf[:52]) == 2
    struct.pack_into(">i", buf, 8, 10)
    assert code_of(buf) == 2


def test_client_may_send_only_one_batch():
    two = make(2) + make(3)
    assert code_of(two) == 87
    infos = validate_batches(two, max_message_bytes=MAX, from_client=False)
    assert [i.position for i in infos] == [0, len(make(2))]


def test_nonzero_base_offset_rejected_for_clients():
    buf = make(2)
    struct.pack_into(">q", buf, 0, 5)  # not covered by the CRC
    assert code_of(buf) == 87
    assert validate_batches(buf, max_message_bytes=MAX, from_client=False)


def test_count_inconsistent_with_last_offset_delta():
    buf = make(3)
    struct.pack_into(">i", buf, 57, 2)
    assert code_of(recrc(buf)) == 87
    struct.pack_into(">i", buf, 57, 0)
    assert code_of(recrc(buf)) == 87


def test_control_batch_from_client_rejected():
    buf = make(1, is_control=True, producer_id=1, producer_epoch=0, base_sequence=0)
    assert code_of(buf) == 87
    validate_batches(buf, max_message_bytes=MAX, from_client=False)


def test_idempotent_batch_needs_a_sequence():
    assert code_of(make(1, producer_id=5, producer_epoch=0, base_sequence=-1)) == 87


def test_unknown_compression_id():
    buf = make(1)
    struct.pack_into(">h", buf, 21, 6)
    assert code_of(recrc(buf)) == 76


def test_timestamp_bounds():
    buf = make(2)  # timestamps 1000, 1001
    validate_batches(buf, max_message_bytes=MAX, now_ms=1001, timestamp_after_max_ms=0)
    assert code_of(buf, now_ms=1000, timestamp_after_max_ms=0) == 32
    assert code_of(buf, now_ms=5000, timestamp_before_max_ms=100) == 32
    validate_batches(buf, max_message_bytes=MAX, now_ms=5000, timestamp_before_max_ms=4000)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_garbage_never_raises_anything_else(data):
    try:
        validate_batches(data, max_message_bytes=MAX)
    except RecordValidationError as exc:
        assert exc.error_code in (2, 10, 32, 76, 87)


@settings(max_examples=300)
@given(st.data())
def test_mutated_batches_never_raise_anything_else(data):
    buf = make(3)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    for from_client in (True, False):
        try:
            validate_batches(buf[:cut], max_message_bytes=MAX, from_client=from_client)
        except RecordValidationError:
            pass


def test_assign_offsets_patches_offsets_and_epoch_without_crc_change():
    buf = make(3)
    crc_before = parse_header(buf).crc
    infos = validate_batches(buf, max_message_bytes=MAX)
    last = assign_offsets(buf, infos, 100, None, partition_leader_epoch=7)
    assert last == 102
    h = parse_header(buf)
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (100, 7, crc_before)
    validate_batches(buf, max_message_bytes=MAX, from_client=False)  # CRC still valid
    assert [r.offset for r in iter_records(buf)] == [100, 101, 102]


def test_assign_offsets_several_batches():
    buf = make(2) + make(3) + make(1)
    infos = validate_batches(buf, max_message_bytes=MAX, from_client=False)
    assert assign_offsets(buf, infos, 10, None) == 15
    assert [r.offset for r in iter_records(buf)] == [10, 11, 12, 13, 14, 15]


def test_assign_offsets_log_append_time():
    buf = make(3)
    infos = validate_batches(buf, max_message_bytes=MAX)
    assign_offsets(buf, infos, 0, 999_999)
    h = parse_header(buf)
    assert h.is_log_append_time and h.max_timestamp == 999_999 and h.base_timestamp == 1000
    validate_batches(buf, max_message_bytes=MAX)  # CRC recomputed
    assert {r.timestamp for r in iter_records(buf)} == {999_999}


def test_assign_offsets_create_time_clears_log_append_time_flag():
    buf = make(2, timestamp_type=1)
    infos = validate_batches(buf, max_message_bytes=MAX)
    assign_offsets(buf, infos, 0, None)
    h = parse_header(buf)
    assert not h.is_log_append_time
    validate_batches(buf, max_message_bytes=MAX)


def test_header_size_constant():
    assert HEADER_SIZE == 61
    assert len(make(1)) > HEADER_SIZE
