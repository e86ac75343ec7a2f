"""Per-topic produce policy: the topic configs that act on the produce path beyond storage.

Resolved once per topic (when it is created, loaded or reconfigured) so the produce hot path reads
a few attributes instead of resolving configs per request:
- ``compression.type``: a codec other than ``producer`` makes the broker recompress batches that
  arrive with another codec (Kafka does the same; it costs a decode and encode of the batch).
- ``message.timestamp.type=LogAppendTime``: the log stamps batches with the append time.
- ``message.timestamp.before.max.ms`` / ``after.max.ms``: CreateTime timestamps too far from the
  broker's clock are rejected with INVALID_TIMESTAMP (checked per record only when configured).
- ``min.insync.replicas``: above 1, acks=all cannot be satisfied on a single broker.
- ``flush.messages=1``: strict durability, acknowledgements wait for fsync.
"""

from __future__ import annotations

from dataclasses import dataclass

from snakka.config import LONG_MAX
from snakka.records import (
    RecordValidationError,
    build_batch,
    iter_records,
    parse_header,
    validate_batches,
)

_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_ATTR_LOG_APPEND_TIME = 0x08


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    compression: int | None  # target codec id, or None for 'producer'
    log_append_time: bool
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    min_insync_replicas: int
    flush_every_message: bool

    @classmethod
    def from_configs(cls, cfg: dict[str, str]) -> TopicPolicy:
        ct = cfg.get("compression.type", "producer")
        return cls(
            compression=None if ct == "producer" else _CODECS[ct],
            log_append_time=cfg.get("message.timestamp.type") == "LogAppendTime",
            timestamp_before_max_ms=int(cfg.get("message.timestamp.before.max.ms", LONG_MAX)),
            timestamp_after_max_ms=int(cfg.get("message.timestamp.after.max.ms", LONG_MAX)),
            min_insync_replicas=int(cfg.get("min.insync.replicas", "1")),
            flush_every_message=int(cfg.get("flush.messages", LONG_MAX)) <= 1,
        )


def rebuild_batch(batch: bytes | bytearray, *, compression: int) -> bytes:
    """Re-encode one producer batch with another codec, keeping its producer id, epoch,
    sequence, flags and record timestamps (Kafka's recompression on compression.type)."""
    h = parse_header(batch, 0)
    return build_batch(
        list(iter_records(batch)), base_offset=h.base_offset, compression=compression,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence, is_transactional=bool(h.attributes & 0x10),
        timestamp_type=1 if h.attributes & _ATTR_LOG_APPEND_TIME else 0,
        partition_leader_epoch=h.partition_leader_epoch, xerial_snappy=False)


def apply_topic_policy(policy: TopicPolicy, buf: bytearray, infos: list, now_ms: int):
    """Check timestamps and recompress if the topic asks for it. Returns (buf, infos)."""
    if not policy.log_append_time and (policy.timestamp_before_max_ms < LONG_MAX
                                       or policy.timestamp_after_max_ms < LONG_MAX):
        lo = now_ms - policy.timestamp_before_max_ms
        hi = now_ms + policy.timestamp_after_max_ms
        for rec in iter_records(buf):
            if not lo <= rec.timestamp <= hi:
                raise RecordValidationError(
                    32, f"Timestamp {rec.timestamp} of message with offset delta "
                        f"{rec.offset} is out of range [{lo}, {hi}] "
                        "(message.timestamp.before/after.max.ms)")
    if policy.compression is not None:
        info = infos[0]
        codec = info.header.attributes & 0x07
        if codec != policy.compression:
            buf = bytearray(rebuild_batch(buf, compression=policy.compression))
            infos = validate_batches(buf, max_message_bytes=1 << 31)
    return buf, infos
