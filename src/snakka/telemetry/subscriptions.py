"""Client-metrics subscriptions (KIP-714): the CLIENT_METRICS config resource, validated,
parsed and matched as Kafka's ``ClientMetricsConfigs`` and ``ClientMetricsInstanceMetadata``.

What it owns (pure functions and frozen values, no clock, no I/O):

- :func:`validate_subscription`: Kafka's ``ClientMetricsConfigs.validate``, applied by the
  metadata core to a subscription's configs as they will be after an IncrementalAlterConfigs:
  an empty name is INVALID_REQUEST, an unknown key INVALID_REQUEST ("Unknown client metrics
  configuration: ..."), ``interval.ms`` outside [100, 3600000] INVALID_REQUEST, a value that is
  not an int or a bad ``match`` pattern INVALID_CONFIG.
- :class:`Subscription`: one parsed subscription (``metrics`` prefixes, ``interval.ms``, the
  ``match`` patterns by attribute).
- :class:`ClientAttributes`: what a client instance is matched on (client_instance_id,
  client_id, client_software_name/version from its ApiVersions, client_source_address/port),
  and :meth:`ClientAttributes.matches` (every pattern must match its attribute in full; an
  absent attribute never matches; no pattern matches every client).

The configs are stored like any other dynamic config (metadata core, ``config`` records with
resource type 16), so they persist in the metadata log and replay at start-up.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from snakka.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "ALL_METRICS", "CLIENT_METRICS_CONFIG_NAMES", "CLIENT_METRICS_RESOURCE", "DEFAULT_INTERVAL_MS",
    "MATCH", "MATCH_PARAMS", "METRICS", "INTERVAL_MS", "ClientAttributes", "Subscription",
    "parse_list", "parse_match_patterns", "parse_subscription", "validate_subscription",
]

#: ConfigResource.Type.CLIENT_METRICS
CLIENT_METRICS_RESOURCE = 16

METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
CLIENT_METRICS_CONFIG_NAMES = (METRICS, INTERVAL_MS, MATCH)
#: ``metrics=*``: every metric the client has.
ALL_METRICS = "*"
DEFAULT_INTERVAL_MS = 5 * 60 * 1000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000

MATCH_PARAMS = frozenset({"client_instance_id", "client_id", "client_software_name",
                          "client_software_version", "client_source_address",
                          "client_source_port"})


def parse_list(value: str | None) -> list[str]:
    """A Kafka LIST config: comma separated, each item trimmed, empty string the empty list."""
    if value is None or not value.strip():
        return []
    return [item.strip() for item in value.split(",")]


def _parse_int(value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"Invalid value {value} for configuration {INTERVAL_MS}: Not a number "
                         "of type INT") from None
    if not -(2**31) <= n < 2**31:
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"Invalid value {value} for configuration {INTERVAL_MS}: Not a number "
                         "of type INT")
    return n


def parse_match_patterns(patterns: list[str]) -> dict[str, re.Pattern[str]]:
    """Kafka's ``parseMatchingPatterns``: ``name=regex`` items (exactly one '=', as Java's
    ``split("=")`` with trailing empties dropped), name one of :data:`MATCH_PARAMS`."""
    out: dict[str, re.Pattern[str]] = {}
    for pattern in patterns:
        parts = pattern.split("=")
        while parts and parts[-1] == "":
            parts.pop()
        if len(parts) != 2 or parts[0].strip() not in MATCH_PARAMS:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Illegal client matching pattern: {pattern}")
        try:
            out[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Illegal client matching pattern: {pattern}") from None
    return out


def validate_subscription(name: str, configs: Mapping[str, str]) -> None:
    """Kafka's ``ClientMetricsConfigs.validate`` of a subscription's (whole, new) configs;
    raises KafkaError. An empty ``configs`` deletes the subscription and is valid."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    for key in configs:
        if key not in CLIENT_METRICS_CONFIG_NAMES:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unknown client metrics configuration: {key}")
    if INTERVAL_MS in configs:
        interval = _parse_int(configs[INTERVAL_MS])
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Invalid value {interval} for {INTERVAL_MS}, interval must be "
                             "between 100 and 3600000 (1 hour)")
    if MATCH in configs:
        parse_match_patterns(parse_list(configs[MATCH]))


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    metrics: frozenset[str]
    interval_ms: int
    match: Mapping[str, re.Pattern[str]] = field(default_factory=dict)
    # The metrics in their configured order: Kafka adds them to its HashSet in this order,
    # which decides the order of prefixes that share a hash bucket (telemetry/manager.py).
    metric_list: tuple[str, ...] = ()


def parse_subscription(name: str, configs: Mapping[str, str]) -> Subscription:
    """A validated subscription's parsed form (defaults: no metrics, 5 minutes, every client)."""
    interval = configs.get(INTERVAL_MS)
    metrics = parse_list(configs.get(METRICS))
    return Subscription(
        name=name, metrics=frozenset(metrics), metric_list=tuple(metrics),
        interval_ms=DEFAULT_INTERVAL_MS if interval is None else _parse_int(interval),
        match=parse_match_patterns(parse_list(configs.get(MATCH))))


@dataclass(frozen=True, slots=True)
class ClientAttributes:
    """What a client instance is matched on (Kafka's ClientMetricsInstanceMetadata), fixed
    when the instance is first seen."""

    client_instance_id: str
    client_id: str | None
    client_software_name: str | None
    client_software_version: str | None
    client_source_address: str | None
    client_source_port: str | None

    def matches(self, patterns: Mapping[str, re.Pattern[str]]) -> bool:
        for attr, pattern in patterns.items():
            value = getattr(self, attr)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True
