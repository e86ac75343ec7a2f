"""Per-topic log configuration as the storage layer uses it (Kafka's ``LogConfig``).

What this module owns
    :class:`LogConfig`, an immutable value with one snake_case attribute per Kafka topic
    config (``segment.bytes`` -> ``segment_bytes``). Names, types, ranges, defaults and
    documentation live in one place, :data:`snakka.config.TOPIC_CONFIGS`; this class only
    turns resolved strings into typed attributes (:meth:`LogConfig.from_dict`, errors are
    ``ValueError`` naming the config) and back (:meth:`LogConfig.to_dict`). Which value is in
    force (topic override, broker synonym, default) is resolved by
    :mod:`snakka.metadata.configs`, not here.

Honoured by storage: segment.bytes, segment.ms, retention.ms, retention.bytes,
max.message.bytes, message.timestamp.type, message.timestamp.before/after.max.ms,
index.interval.bytes, segment.index.bytes, flush.messages, flush.ms (through
:mod:`snakka.storage.flush`); compression.type is applied by the produce handler. Deleted
segments are unlinked at once (file.delete.delay.ms is not needed: nothing reads a deleted
segment asynchronously).

Deliberate difference: Kafka 4 requires segment.bytes >= 1 MiB; we accept >= 14 bytes (Kafka
< 4's bound) so embedded brokers and tests can use tiny segments.

Threading: immutable values; share freely.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from snakka.config import INT_MAX, LONG_MAX, TOPIC_CONFIGS

__all__ = ["CREATE_TIME", "INT_MAX", "LOG_APPEND_TIME", "LONG_MAX", "TOPIC_CONFIG_NAMES",
           "LogConfig"]

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TOPIC_CONFIG_NAMES: frozenset[str] = frozenset(TOPIC_CONFIGS)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Topic-level log settings; attribute = Kafka name with '.' -> '_'."""

    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10_485_760
    retention_ms: int = 604_800_000  # -1 = infinite
    retention_bytes: int = -1  # -1 = infinite
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = CREATE_TIME
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    preallocate: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()
    # Broker-level, carried here for the partition's producer state (not a topic config).
    producer_id_expiration_ms: int = 86_400_000

    # ------------------------------------------------------------ derived

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    # ------------------------------------------------------------ parsing

    @classmethod
    def from_dict(cls, configs: Mapping[str, str], *, base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka topic config names (values as strings, as on the wire), starting
        from ``base`` or Kafka's defaults. Raises ``ValueError`` naming the config for a bad
        value or an unknown name (Kafka answers INVALID_CONFIG for both)."""
        changes: dict[str, Any] = {}  # field name -> parsed value of that field's type
        for name, raw in configs.items():
            d = TOPIC_CONFIGS.get(name)
            if d is None:
                raise ValueError(f"Unknown topic config name: {name}")
            if raw is None:
                raise ValueError(f"Invalid value null for configuration {name}: value must not be null")
            value = d.value(raw)
            changes[name.replace(".", "_")] = tuple(value) if isinstance(value, list) else value
        start = base if base is not None else cls()
        return dataclasses.replace(start, **changes) if changes else start

    def with_overrides(self, configs: Mapping[str, str]) -> LogConfig:
        """Topic overrides on top of this config."""
        return LogConfig.from_dict(configs, base=self)

    def to_dict(self) -> dict[str, str]:
        """Every topic config as Kafka-style strings."""
        out = {}
        for name in TOPIC_CONFIGS:
            v = getattr(self, name.replace(".", "_"))
            if isinstance(v, bool):
                out[name] = "true" if v else "false"
            elif isinstance(v, tuple):
                out[name] = ",".join(v)
            else:
                out[name] = str(v)
        return out
