"""Validation of produced batches against one topic's configs (Kafka's LogValidator).

What this module owns
    The topic-config half of append validation: which limits apply to a partition's
    batches (``max.message.bytes``, ``message.timestamp.type`` and
    ``message.timestamp.before.max.ms`` / ``after.max.ms``, the broker's bound on a batch's
    decompressed size, keys required when ``cleanup.policy`` includes ``compact``), and broker-side recompression for topics whose
    ``compression.type`` is not ``producer``.

    The mechanism lives below, in :mod:`snakka.records`: :func:`validate_batches` checks the
    batch header, the CRC32C, every record (the C walk of :mod:`snakka.records.walk`) and
    the timestamps it is given bounds for. This module decides the bounds; the records
    package does not know topics. Rules about the request (one batch per partition, no
    control batches from clients) stay with the caller, the Produce handler.

Recompression
    Kafka recompresses a produced batch when the topic's codec differs from the producer's;
    snakka does the same. It costs a decode and an encode of the batch, so it happens only
    for such topics; the default (``producer``) keeps batches as produced, with no
    per-record work.

Threading
    Pure functions over buffers plus an injected clock; callable from any thread.
"""

from __future__ import annotations

from collections.abc import Callable

from snakka.records import build_batch, iter_records, parse_header, validate_batches
from snakka.records.batch import DEFAULT_MAX_UNCOMPRESSED_BYTES, BatchInfo

from .config import LogConfig

CODEC_IDS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_ATTR_TRANSACTIONAL = 0x10
_ATTR_LOG_APPEND_TIME = 0x08
_ATTR_CODEC_MASK = 0x07


class LogValidator:
    """Validates produced batches with one topic's configs (one per
    :class:`~snakka.storage.unified_log.UnifiedLog`, rebuilt when its configs change)."""

    __slots__ = ("config", "_time_ms", "_compacted_tp")

    def __init__(self, config: LogConfig, time_ms: Callable[[], int],
                 topic_partition: str = "") -> None:
        """``topic_partition`` ("topic-partition") names the partition in the error a
        keyless record gets on a compacted topic."""
        self.config = config
        self._time_ms = time_ms
        self._compacted_tp = topic_partition if "compact" in config.cleanup_policy else None

    def validate(
        self,
        buf: bytes | bytearray | memoryview,
        *,
        max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    ) -> list[BatchInfo]:
        """:func:`snakka.records.validate_batches` with this topic's limits: record
        timestamps are checked only for ``CreateTime`` topics (a ``LogAppendTime`` topic
        overwrites them); keys only on compacted topics. Raises
        :class:`snakka.records.RecordValidationError`."""
        cfg = self.config
        create_time = not cfg.log_append_time
        return validate_batches(
            buf,
            max_message_bytes=cfg.max_message_bytes,
            now_ms=self._time_ms() if create_time else None,
            timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
            timestamp_after_max_ms=cfg.message_timestamp_after_max_ms,
            max_uncompressed_bytes=max_uncompressed_bytes,
            compacted_topic_partition=self._compacted_tp,
        )

    def maybe_recompress(
        self, buf: bytearray | memoryview, infos: list[BatchInfo]
    ) -> tuple[bytearray | memoryview, list[BatchInfo]]:
        """(buf, infos), recompressed with the topic's ``compression.type`` when it names
        a codec other than the batch's."""
        cfg = self.config
        return maybe_recompress(
            cfg.compression_type, buf, infos, max_message_bytes=cfg.max_message_bytes
        )


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


def maybe_recompress(compression_type: str, buf: bytearray | memoryview,
                     infos: list[BatchInfo], *, max_message_bytes: int
                     ) -> tuple[bytearray | memoryview, list[BatchInfo]]:
    """Return (buf, infos), recompressed if the topic's codec differs from the batch's
    (``producer`` or an unknown name: unchanged)."""
    target = CODEC_IDS.get(compression_type)
    if target is None or infos[0].header.attributes & _ATTR_CODEC_MASK == target:
        return buf, infos
    out = bytearray(rebuild_batch(buf, compression=target))
    return out, validate_batches(out, max_message_bytes=max_message_bytes)


__all__ = ["CODEC_IDS", "LogValidator", "maybe_recompress", "rebuild_batch"]
