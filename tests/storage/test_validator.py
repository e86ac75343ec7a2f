"""LogValidator: the topic-config half of append validation and broker-side recompression
(moved here from snakka.topic_policy; issue 10)."""

from __future__ import annotations

import pytest

from snakka.records import RecordValidationError, iter_records, parse_header, validate_batches
from snakka.storage import LogConfig, LogValidator
from snakka.storage.validator import CODEC_IDS, maybe_recompress

from .helpers import Clock, batch


def codec(buf) -> int:
    return parse_header(bytes(buf), 0).attributes & 0x07


def test_limits_come_from_the_topic_config():
    clock = Clock()
    v = LogValidator(LogConfig(max_message_bytes=300), clock)
    assert v.validate(batch(1))
    with pytest.raises(RecordValidationError) as e:
        v.validate(batch(5, value_size=100))
    assert e.value.error_code == 10  # MESSAGE_TOO_LARGE
    future = batch(1, ts=clock() + 2 * 3_600_000)  # message.timestamp.after.max.ms = 1 h
    with pytest.raises(RecordValidationError) as e:
        LogValidator(LogConfig(), clock).validate(future)
    assert e.value.error_code == 32 and e.value.record_errors  # INVALID_TIMESTAMP, per record
    assert LogValidator(LogConfig(message_timestamp_type="LogAppendTime"), clock).validate(future)


def test_the_decompressed_size_bound_is_passed_down():
    buf = batch(50, value_size=1000, compression=CODEC_IDS["gzip"])
    v = LogValidator(LogConfig(), Clock())
    assert v.validate(buf)
    with pytest.raises(RecordValidationError) as e:
        v.validate(buf, max_uncompressed_bytes=10_000)
    assert e.value.error_code == 87  # INVALID_RECORD


@pytest.mark.parametrize("target", ["gzip", "lz4", "zstd", "snappy", "uncompressed"])
def test_recompression_to_the_topic_codec_keeps_records(target):
    buf = batch(4, compression=CODEC_IDS["gzip"] if target != "gzip" else 0,
                producer_id=9, producer_epoch=1, base_sequence=5)
    infos = validate_batches(buf, max_message_bytes=1 << 20)
    v = LogValidator(LogConfig(compression_type=target), Clock())
    out, out_infos = v.maybe_recompress(buf, infos)
    assert codec(out) == CODEC_IDS[target]
    h, h0 = out_infos[0].header, infos[0].header
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 1, 5)
    assert h.last_offset_delta == h0.last_offset_delta
    assert [(r.key, r.value, r.timestamp) for r in iter_records(bytes(out))] == \
        [(r.key, r.value, r.timestamp) for r in iter_records(bytes(buf))]


def test_no_recompression_for_producer_or_the_same_codec():
    buf = batch(2, compression=CODEC_IDS["lz4"])
    infos = validate_batches(buf, max_message_bytes=1 << 20)
    for name in ("producer", "lz4"):
        out, out_infos = maybe_recompress(name, buf, infos, max_message_bytes=1 << 20)
        assert out is buf and out_infos is infos
