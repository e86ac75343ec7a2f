"""Broker-side recompression for topics whose ``compression.type`` is not ``producer``.

Kafka recompresses a produced batch when the topic's codec differs from the producer's; snakka
does the same. It costs a decode and an encode of the batch, so it happens only for such topics;
the default (``producer``) keeps batches as produced, with no per-record work.
"""

from __future__ import annotations

from snakka.records import build_batch, iter_records, parse_header, validate_batches

CODEC_IDS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_ATTR_TRANSACTIONAL = 0x10
_ATTR_LOG_APPEND_TIME = 0x08


def rebuild_batch(batch: bytes | bytearray | memoryview, *, compression: int) -> bytes:
    """Re-encode one producer batch with another codec, keeping its producer id, epoch,
    sequence, flags and record timestamps."""
    h = parse_header(batch, 0)
    return build_batch(
        list(iter_records(batch)), base_offset=h.base_offset, compression=compression,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence, is_transactional=bool(h.attributes & _ATTR_TRANSACTIONAL),
        timestamp_type=1 if h.attributes & _ATTR_LOG_APPEND_TIME else 0,
        partition_leader_epoch=h.partition_leader_epoch, xerial_snappy=False)


def maybe_recompress(compression_type: str, buf: bytearray, infos: list, *,
                     max_message_bytes: int):
    """Return (buf, infos), recompressed if the topic's codec differs from the batch's."""
    target = CODEC_IDS.get(compression_type)
    if target is None or infos[0].header.attributes & 0x07 == target:
        return buf, infos
    buf = bytearray(rebuild_batch(buf, compression=target))
    return buf, validate_batches(buf, max_message_bytes=max_message_bytes)
