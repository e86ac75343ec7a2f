"""Per-topic log configuration (Kafka's ``LogConfig``): names, defaults, validation.

What this module owns
    :class:`LogConfig`, an immutable value with one snake_case attribute per Kafka
    topic config (``segment.bytes`` -> ``segment_bytes``), Kafka's defaults, parsing
    and validation from ``dict[str, str]`` of Kafka names (:meth:`LogConfig.from_dict`,
    errors are ``ValueError`` naming the config), the broker-level synonyms
    (``log.segment.bytes``, ``log.retention.hours``, ...) via
    :meth:`LogConfig.from_broker_props`, and rendering back to Kafka names
    (:meth:`LogConfig.to_dict`) for DescribeConfigs.

Honoured by storage today: segment.bytes, segment.ms, segment.jitter.ms (not applied:
no jitter), retention.ms, retention.bytes, max.message.bytes, message.timestamp.type,
message.timestamp.before/after.max.ms, index.interval.bytes, segment.index.bytes,
flush.messages, flush.ms (through :mod:`snakka.storage.flush`). Kept and validated but
not acted on yet: cleanup.policy=compact (compaction is out of scope), compression.type
other than ``producer`` (batches are stored as produced), file.delete.delay.ms (deleted
segments are unlinked at once: nothing in snakka reads a deleted segment
asynchronously, so there is nothing to wait for), preallocate, the compaction and
remote-storage settings.

Deliberate difference: Kafka 4 requires segment.bytes >= 1 MiB; we accept >= 14 bytes
(Kafka < 4's bound) so embedded brokers and tests can use tiny segments.

Threading: immutable values; share freely.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LONG_MAX = 9_223_372_036_854_775_807
LONG_MIN = -9_223_372_036_854_775_808
INT_MAX = 2_147_483_647
INT_MIN = -2_147_483_648

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


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
        """Build from Kafka topic config names (values as strings, as on the wire),
        starting from ``base`` (the broker defaults) or Kafka's defaults.

        Raises ``ValueError("Invalid value ... for configuration <name>: ...")`` for a
        bad value and ``ValueError("Unknown topic config name: <name>")`` for an unknown
        name (Kafka answers INVALID_CONFIG for both)."""
        changes: dict[str, Any] = {}
        for name, raw in configs.items():
            spec = _TOPIC_CONFIGS.get(name)
            if spec is None:
                raise ValueError(f"Unknown topic config name: {name}")
            changes[spec.attr] = spec.parse(name, raw)
        start = base if base is not None else cls()
        return dataclasses.replace(start, **changes) if changes else start

    def with_overrides(self, configs: Mapping[str, str]) -> LogConfig:
        """Topic overrides on top of this (broker default) config."""
        return LogConfig.from_dict(configs, base=self)

    @classmethod
    def from_broker_props(cls, props: Mapping[str, str]) -> LogConfig:
        """Broker defaults from broker property names (``log.segment.bytes``,
        ``log.retention.hours``, ``message.max.bytes``, ...). Unrelated broker
        properties are ignored; a bad value of a known one raises ``ValueError``."""
        topic: dict[str, str] = {}
        for broker_name, (topic_name, factor) in _BROKER_SYNONYMS.items():
            if broker_name in props:
                raw = props[broker_name]
                if factor != 1:
                    v = _parse_long(broker_name, raw)
                    raw = str(v * factor if v >= 0 else v)
                topic.setdefault(topic_name, raw)
        # Kafka's precedence: log.retention.ms > .minutes > .hours; log.roll.ms > .hours.
        for precise in ("log.retention.ms", "log.roll.ms", "log.roll.jitter.ms"):
            if precise in props:
                topic[_BROKER_SYNONYMS[precise][0]] = props[precise]
        if "log.retention.ms" not in props and "log.retention.minutes" in props:
            v = _parse_long("log.retention.minutes", props["log.retention.minutes"])
            topic["retention.ms"] = str(v * 60_000 if v >= 0 else v)
        cfg = cls.from_dict(topic)
        if "producer.id.expiration.ms" in props:
            cfg = dataclasses.replace(
                cfg,
                producer_id_expiration_ms=_parse_int_range(
                    "producer.id.expiration.ms", props["producer.id.expiration.ms"], 1, INT_MAX
                ),
            )
        return cfg

    def to_dict(self) -> dict[str, str]:
        """All topic configs as Kafka names -> string values (DescribeConfigs)."""
        out = {}
        for name, spec in _TOPIC_CONFIGS.items():
            out[name] = spec.render(getattr(self, spec.attr))
        return out


# ---------------------------------------------------------------- parsing helpers


def _invalid(name: str, raw: str, why: str) -> ValueError:
    return ValueError(f"Invalid value {raw} for configuration {name}: {why}")


def _parse_long(name: str, raw: str) -> int:
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise _invalid(name, raw, "Not a number of type LONG") from None
    if not LONG_MIN <= v <= LONG_MAX:
        raise _invalid(name, raw, "Not a number of type LONG")
    return v


def _parse_long_range(name: str, raw: str, lo: int, hi: int = LONG_MAX) -> int:
    v = _parse_long(name, raw)
    if v < lo or v > hi:
        bound = f"Value must be at least {lo}" if hi == LONG_MAX else f"Value must be in [{lo}, {hi}]"
        raise _invalid(name, raw, bound)
    return v


def _parse_int_range(name: str, raw: str, lo: int, hi: int = INT_MAX) -> int:
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise _invalid(name, raw, "Not a number of type INT") from None
    if not INT_MIN <= v <= INT_MAX:
        raise _invalid(name, raw, "Not a number of type INT")
    if v < lo or v > hi:
        bound = f"Value must be at least {lo}" if hi == INT_MAX else f"Value must be in [{lo}, {hi}]"
        raise _invalid(name, raw, bound)
    return v


def _parse_bool(name: str, raw: str) -> bool:
    s = str(raw).strip().lower()
    if s == "true":
        return True
    if s == "false":
        return False
    raise _invalid(name, raw, "Expected value to be either true or false")


def _parse_list(name: str, raw: str, allowed: tuple[str, ...] | None) -> tuple[str, ...]:
    items = tuple(s.strip() for s in str(raw).split(",") if s.strip())
    if allowed is not None:
        for item in items:
            if item not in allowed:
                raise _invalid(name, raw, f"String must be one of: {', '.join(allowed)}")
    return items


@dataclass(frozen=True)
class _Spec:
    attr: str
    kind: str  # long, int, bool, str, list, double
    lo: float = LONG_MIN
    hi: float = LONG_MAX
    allowed: tuple[str, ...] | None = None

    def parse(self, name: str, raw: str) -> object:
        if raw is None:
            raise _invalid(name, "null", "value must not be null")
        if self.kind == "long":
            return _parse_long_range(name, raw, int(self.lo), int(self.hi))
        if self.kind == "int":
            return _parse_int_range(name, raw, int(self.lo), int(min(self.hi, INT_MAX)))
        if self.kind == "bool":
            return _parse_bool(name, raw)
        if self.kind == "list":
            return _parse_list(name, raw, self.allowed)
        if self.kind == "double":
            try:
                v = float(str(raw).strip())
            except ValueError:
                raise _invalid(name, raw, "Not a number of type DOUBLE") from None
            if not self.lo <= v <= self.hi:
                raise _invalid(name, raw, f"Value must be in [{self.lo}, {self.hi}]")
            return v
        s = str(raw).strip()
        if self.allowed is not None and s not in self.allowed:
            raise _invalid(name, raw, f"String must be one of: {', '.join(self.allowed)}")
        return s

    def render(self, value: object) -> str:
        if self.kind == "bool":
            return "true" if value else "false"
        if self.kind == "list":
            return ",".join(value)  # type: ignore[arg-type]
        return str(value)


_TOPIC_CONFIGS: dict[str, _Spec] = {
    "segment.bytes": _Spec("segment_bytes", "int", 14),
    "segment.ms": _Spec("segment_ms", "long", 1),
    "segment.jitter.ms": _Spec("segment_jitter_ms", "long", 0),
    "segment.index.bytes": _Spec("segment_index_bytes", "int", 4),
    "retention.ms": _Spec("retention_ms", "long", -1),
    "retention.bytes": _Spec("retention_bytes", "long"),
    "max.message.bytes": _Spec("max_message_bytes", "int", 0),
    "message.timestamp.type": _Spec(
        "message_timestamp_type", "str", allowed=(CREATE_TIME, LOG_APPEND_TIME)
    ),
    "message.timestamp.before.max.ms": _Spec("message_timestamp_before_max_ms", "long", 0),
    "message.timestamp.after.max.ms": _Spec("message_timestamp_after_max_ms", "long", 0),
    "index.interval.bytes": _Spec("index_interval_bytes", "int", 0),
    "flush.messages": _Spec("flush_messages", "long", 1),
    "flush.ms": _Spec("flush_ms", "long", 0),
    "file.delete.delay.ms": _Spec("file_delete_delay_ms", "long", 0),
    "cleanup.policy": _Spec("cleanup_policy", "list", allowed=("compact", "delete")),
    "compression.type": _Spec("compression_type", "str", allowed=_COMPRESSION_TYPES),
    "compression.gzip.level": _Spec("compression_gzip_level", "int", -1, 9),
    "compression.lz4.level": _Spec("compression_lz4_level", "int", 1, 17),
    "compression.zstd.level": _Spec("compression_zstd_level", "int", -131072, 22),
    "delete.retention.ms": _Spec("delete_retention_ms", "long", 0),
    "min.compaction.lag.ms": _Spec("min_compaction_lag_ms", "long", 0),
    "max.compaction.lag.ms": _Spec("max_compaction_lag_ms", "long", 1),
    "min.cleanable.dirty.ratio": _Spec("min_cleanable_dirty_ratio", "double", 0, 1),
    "min.insync.replicas": _Spec("min_insync_replicas", "int", 1),
    "unclean.leader.election.enable": _Spec("unclean_leader_election_enable", "bool"),
    "preallocate": _Spec("preallocate", "bool"),
    "local.retention.ms": _Spec("local_retention_ms", "long", -2),
    "local.retention.bytes": _Spec("local_retention_bytes", "long", -2),
    "remote.storage.enable": _Spec("remote_storage_enable", "bool"),
    "remote.log.copy.disable": _Spec("remote_log_copy_disable", "bool"),
    "remote.log.delete.on.disable": _Spec("remote_log_delete_on_disable", "bool"),
    "leader.replication.throttled.replicas": _Spec("leader_replication_throttled_replicas", "list"),
    "follower.replication.throttled.replicas": _Spec(
        "follower_replication_throttled_replicas", "list"
    ),
}

TOPIC_CONFIG_NAMES: frozenset[str] = frozenset(_TOPIC_CONFIGS)

# broker property -> (topic config, multiplier to milliseconds/bytes)
_BROKER_SYNONYMS: dict[str, tuple[str, int]] = {
    "log.segment.bytes": ("segment.bytes", 1),
    "log.roll.hours": ("segment.ms", 3_600_000),
    "log.roll.ms": ("segment.ms", 1),
    "log.roll.jitter.hours": ("segment.jitter.ms", 3_600_000),
    "log.roll.jitter.ms": ("segment.jitter.ms", 1),
    "log.index.size.max.bytes": ("segment.index.bytes", 1),
    "log.retention.hours": ("retention.ms", 3_600_000),
    "log.retention.ms": ("retention.ms", 1),
    "log.retention.bytes": ("retention.bytes", 1),
    "message.max.bytes": ("max.message.bytes", 1),
    "log.message.timestamp.type": ("message.timestamp.type", 1),
    "log.message.timestamp.before.max.ms": ("message.timestamp.before.max.ms", 1),
    "log.message.timestamp.after.max.ms": ("message.timestamp.after.max.ms", 1),
    "log.index.interval.bytes": ("index.interval.bytes", 1),
    "log.flush.interval.messages": ("flush.messages", 1),
    "log.flush.interval.ms": ("flush.ms", 1),
    "log.segment.delete.delay.ms": ("file.delete.delay.ms", 1),
    "log.cleanup.policy": ("cleanup.policy", 1),
    "compression.type": ("compression.type", 1),
    "log.cleaner.delete.retention.ms": ("delete.retention.ms", 1),
    "log.cleaner.min.compaction.lag.ms": ("min.compaction.lag.ms", 1),
    "log.cleaner.max.compaction.lag.ms": ("max.compaction.lag.ms", 1),
    "log.cleaner.min.cleanable.ratio": ("min.cleanable.dirty.ratio", 1),
    "min.insync.replicas": ("min.insync.replicas", 1),
    "unclean.leader.election.enable": ("unclean.leader.election.enable", 1),
    "log.preallocate": ("preallocate", 1),
    "log.local.retention.ms": ("local.retention.ms", 1),
    "log.local.retention.bytes": ("local.retention.bytes", 1),
}

BROKER_SYNONYMS: dict[str, str] = {b: t for b, (t, _f) in _BROKER_SYNONYMS.items()}
