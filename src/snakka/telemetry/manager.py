"""The client-metrics manager (KIP-714): Kafka's ``ClientMetricsManager`` as a sans-I/O core.

What it owns (an injected clock in milliseconds; single event loop, no locks):

- the subscriptions (set from the CLIENT_METRICS config resources by the shell whenever the
  metadata changes; :meth:`ClientMetricsManager.set_subscriptions` bumps a version when they
  differ, so every client instance is re-evaluated on its next request, as Kafka's
  ``subscriptionUpdateVersion``);
- the client instances: id (a random UUID handed out by GetTelemetrySubscriptions when the
  client sends the zero id), the attributes it is matched on (fixed when first seen), its
  subscription (the union of the metrics of every matching subscription, ``*`` alone when one
  of them says ``*``; the smallest interval of them, 5 minutes when none matches), its
  subscription id, its last get/push times, its terminating flag. At most
  ``CLIENT_METRICS_INSTANCES_MAX`` are kept (least recently seen dropped first); an instance
  not heard from for max(``CLIENT_METRICS_CACHE_EXPIRY_MS``, 3 x its interval), or whose
  connection closed, is forgotten (Kafka's expiration timer and disconnect listener);
- the decisions of GetTelemetrySubscriptions and PushTelemetry with Kafka's error codes:

  * Get: a request within the push interval of the instance's last get or push:
    THROTTLING_QUOTA_EXCEEDED (the client backs off), unless its subscription changed since
    (a changed subscription is a new instance state with fresh times).
  * Push, in Kafka's order: after a terminating push, INVALID_REQUEST; within the push interval
    (and not terminating; the first push after a get is always in time, since clients add
    jitter): THROTTLING_QUOTA_EXCEEDED; a subscription id other than the instance's:
    UNKNOWN_SUBSCRIPTION_ID (the client gets its subscription again); a compression type
    Kafka does not know: UNSUPPORTED_COMPRESSION_TYPE; metrics above ``telemetry.max.bytes``:
    TELEMETRY_TOO_LARGE. The zero / reserved instance id: INVALID_REQUEST.

The subscription id is Kafka's: the CRC32C of ``str(metrics set) + interval`` XORed with the
instance id's Java ``hashCode``, the set rendered in java.util.HashSet's iteration order
(:func:`java_hash_set_order`), which is also the order of RequestedMetrics; so a client
instance id gets the same subscription id and metric list from snakka as from Kafka
(tests/reference/test_telemetry_differential.py). Prefixes in one hash bucket keep the order
they were added in: the subscriptions' configured order, the subscriptions taken in this
broker's order (Kafka: its ConcurrentHashMap's, which only matters when two subscriptions'
prefixes share a bucket).

Decoding and keeping the pushed metrics is snakka.telemetry.otlp and .store; the handler calls
them for an accepted push (a payload that does not decode: INVALID_RECORD, as Kafka answers a
receiver plugin's failure).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from snakka.limits import CLIENT_METRICS_CACHE_EXPIRY_MS, CLIENT_METRICS_INSTANCES_MAX
from snakka.protocol.errors import ErrorCode
from snakka.protocol.primitives import random_uuid, uuid_to_base64
from snakka.records.compression import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from snakka.telemetry.subscriptions import (
    ALL_METRICS,
    DEFAULT_INTERVAL_MS,
    ClientAttributes,
    Subscription,
    parse_subscription,
)
from snakka.util.crc32c import crc32c
from snakka.util.java import java_hash_set_order

__all__ = ["ACCEPTED_COMPRESSION_TYPES", "ClientInstance", "ClientMetricsManager", "GetResult",
           "PushResult", "java_hash_set_order", "subscription_id"]

#: What GetTelemetrySubscriptions offers, in Kafka's order of preference (the client takes the
#: first it supports).
ACCEPTED_COMPRESSION_TYPES = (COMPRESSION_ZSTD, COMPRESSION_LZ4, COMPRESSION_GZIP,
                              COMPRESSION_SNAPPY)
_KNOWN_COMPRESSION = frozenset({COMPRESSION_NONE, *ACCEPTED_COMPRESSION_TYPES})
_ZERO = uuid.UUID(int=0)
_RESERVED = frozenset({_ZERO, uuid.UUID(int=1)})  # Kafka's Uuid.RESERVED


def _java_uuid_hash(u: uuid.UUID) -> int:
    """Kafka's ``Uuid.hashCode``: the two longs XORed, then its halves XORed (an int32)."""
    n = u.int
    h = (n >> 64) ^ (n & 0xFFFF_FFFF_FFFF_FFFF)
    return ((h >> 32) ^ h) & 0xFFFF_FFFF


def subscription_id(metrics: Iterable[str], interval_ms: int, instance_id: uuid.UUID) -> int:
    """Kafka's ``computeSubscriptionId`` as a signed int32. ``metrics`` in the order they were
    added to the set (a set or frozenset: taken in sorted order), rendered in HashSet order."""
    if isinstance(metrics, set | frozenset):
        metrics = sorted(metrics)
    text = "[" + ", ".join(java_hash_set_order(metrics)) + "]" + str(interval_ms)
    v = (crc32c(text.encode()) ^ _java_uuid_hash(instance_id)) & 0xFFFF_FFFF
    return v - (1 << 32) if v >= 1 << 31 else v


@dataclass(slots=True)
class ClientInstance:
    instance_id: uuid.UUID
    attributes: ClientAttributes
    subscription_id: int
    subscription_version: int
    metrics: frozenset[str]
    interval_ms: int
    # The metrics in Kafka's (HashSet) order, as GetTelemetrySubscriptions lists them.
    requested: tuple[str, ...] = ()
    last_get_ms: int | None = None
    last_push_ms: int | None = None
    last_seen_ms: int = 0
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.NONE
    connections: set[Hashable] = field(default_factory=set)

    def may_get(self, now: int) -> bool:
        """Kafka's ``maybeUpdateGetRequestTimestamp``."""
        times = [t for t in (self.last_get_ms, self.last_push_ms) if t is not None]
        if times and now - max(times) < self.interval_ms:
            return False
        self.last_get_ms = now
        return True

    def may_push(self, now: int) -> bool:
        """Kafka's ``maybeUpdatePushRequestTimestamp``: the first push after a get is always
        accepted (clients push between 0.5 and 1.5 intervals after it, with jitter)."""
        ok = (self.last_get_ms is not None
              and (self.last_push_ms is None or self.last_get_ms > self.last_push_ms))
        if not ok:
            ok = self.last_push_ms is None or now - self.last_push_ms >= self.interval_ms
        if ok:
            self.last_push_ms = now
        return ok

    @property
    def expiry_ms(self) -> int:
        return max(CLIENT_METRICS_CACHE_EXPIRY_MS, 3 * self.interval_ms)


@dataclass(frozen=True, slots=True)
class GetResult:
    error_code: ErrorCode
    instance: ClientInstance | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class PushResult:
    error_code: ErrorCode
    instance: ClientInstance | None = None
    message: str | None = None


@dataclass(slots=True)
class ManagerStats:
    """Kafka's ClientMetricsStats (broker-wide counts)."""

    throttled: int = 0
    unknown_subscription: int = 0
    exported: int = 0
    export_errors: int = 0


class ClientMetricsManager:
    """See the module docstring."""

    def __init__(self, *, telemetry_max_bytes: int, clock_ms: Callable[[], int],
                 new_instance_id: Callable[[], uuid.UUID] = random_uuid,
                 max_instances: int = CLIENT_METRICS_INSTANCES_MAX) -> None:
        self.telemetry_max_bytes = telemetry_max_bytes
        self.clock_ms = clock_ms
        self._new_id = new_instance_id
        self.max_instances = max_instances
        self.subscriptions: dict[str, Subscription] = {}
        self._raw: dict[str, dict[str, str]] = {}
        self.version = 0
        self._source_version = -1
        self.instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        self._by_connection: dict[Hashable, uuid.UUID] = {}
        self.stats = ManagerStats()

    # -- subscriptions -------------------------------------------------------------------
    def sync(self, source_version: int,
             configs: Callable[[], Mapping[str, Mapping[str, str]]]) -> None:
        """Take the subscriptions from their source (the metadata) when its version moved
        since the last call: one int comparison per request otherwise."""
        if source_version != self._source_version:
            self._source_version = source_version
            self.set_subscriptions(configs())

    def set_subscriptions(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """The CLIENT_METRICS resources' configs (name -> {key: value}), all of them; a
        change bumps the version (every instance is re-evaluated on its next request)."""
        raw = {name: dict(c) for name, c in configs.items() if c}
        if raw == self._raw:
            return
        self._raw = raw
        self.subscriptions = {name: parse_subscription(name, c) for name, c in raw.items()}
        self.version += 1

    def _evaluate(self, instance_id: uuid.UUID, attrs: ClientAttributes) -> ClientInstance:
        interval = DEFAULT_INTERVAL_MS
        added: list[str] = []  # in the order Kafka adds them to its set
        every = False
        for sub in self.subscriptions.values():
            if attrs.matches(sub.match):
                every = every or ALL_METRICS in sub.metrics
                added.extend(sub.metric_list)
                interval = min(interval, sub.interval_ms)
        ordered = (ALL_METRICS,) if every else java_hash_set_order(added)
        return ClientInstance(instance_id, attrs, subscription_id(ordered, interval, instance_id),
                              self.version, frozenset(ordered), interval, requested=ordered)

    # -- instances -----------------------------------------------------------------------
    def _instance(self, instance_id: uuid.UUID, attrs: ClientAttributes, connection: Hashable,
                  now: int) -> ClientInstance:
        self.expire(now)
        inst = self.instances.get(instance_id)
        if inst is None:
            inst = self._evaluate(instance_id, attrs)
            while len(self.instances) >= self.max_instances:
                _old_id, old = self.instances.popitem(last=False)
                self._forget_connections(old)
        elif inst.subscription_version < self.version:
            # The subscriptions changed: a fresh state (fresh times) with the attributes
            # the instance was first seen with.
            fresh = self._evaluate(instance_id, inst.attributes)
            fresh.connections = inst.connections
            inst = fresh
        self.instances[instance_id] = inst
        self.instances.move_to_end(instance_id)
        inst.last_seen_ms = now
        if connection not in inst.connections:
            inst.connections.add(connection)
            self._by_connection[connection] = instance_id
        return inst

    def _forget_connections(self, inst: ClientInstance) -> None:
        for c in inst.connections:
            if self._by_connection.get(c) == inst.instance_id:
                del self._by_connection[c]

    def expire(self, now: int) -> None:
        """Forget the instances not heard from for their expiry time."""
        stale = [i for i, inst in self.instances.items() if now - inst.last_seen_ms >= inst.expiry_ms]
        for i in stale:
            self._forget_connections(self.instances.pop(i))

    def connection_closed(self, connection: Hashable) -> None:
        """Kafka's disconnect listener: the instance that used this connection is forgotten."""
        instance_id = self._by_connection.pop(connection, None)
        if instance_id is None:
            return
        inst = self.instances.pop(instance_id, None)
        if inst is not None:
            self._forget_connections(inst)

    # -- the two APIs --------------------------------------------------------------------
    def get_subscriptions(self, instance_id: uuid.UUID | None, attrs: ClientAttributes,
                          connection: Hashable) -> GetResult:
        now = self.clock_ms()
        if instance_id is None or instance_id == _ZERO:
            instance_id = self._new_id()
            while instance_id in self.instances:
                instance_id = self._new_id()
            attrs = _with_instance_id(attrs, instance_id)
        inst = self._instance(instance_id, attrs, connection, now)
        if not inst.may_get(now):
            self.stats.throttled += 1
            return GetResult(ErrorCode.THROTTLING_QUOTA_EXCEEDED, None,
                             f"Request from the client [{instance_id}] arrived before the next "
                             "push interval time")
        inst.last_error = ErrorCode.NONE
        return GetResult(ErrorCode.NONE, inst)

    def push(self, instance_id: uuid.UUID | None, attrs: ClientAttributes,
             connection: Hashable, *, subscription_id: int, terminating: bool,
             compression_type: int, metrics_size: int) -> PushResult:
        """Validate a push; an accepted one (NONE) is then decoded and kept by the caller,
        who reports a payload that does not decode with :meth:`export_failed`."""
        if instance_id is None or instance_id in _RESERVED:
            return PushResult(ErrorCode.INVALID_REQUEST, None,
                              f"Invalid request from the client [{instance_id}], invalid client "
                              "instance id")
        now = self.clock_ms()
        inst = self._instance(instance_id, attrs, connection, now)
        error, message = self._validate_push(inst, subscription_id, terminating,
                                             compression_type, metrics_size, now)
        inst.terminating = terminating  # Kafka: set whatever the outcome
        if error is not ErrorCode.NONE:
            inst.last_error = error
            return PushResult(error, inst, message)
        inst.last_error = ErrorCode.NONE
        return PushResult(ErrorCode.NONE, inst)

    def _validate_push(self, inst: ClientInstance, sub_id: int, terminating: bool,
                       compression_type: int, size: int, now: int
                       ) -> tuple[ErrorCode, str | None]:
        who = inst.instance_id
        if inst.terminating:
            return (ErrorCode.INVALID_REQUEST,
                    f"Client [{who}] sent the previous request with state terminating to TRUE, "
                    "can not accept any requests after that")
        if not inst.may_push(now) and not terminating:
            self.stats.throttled += 1
            return (ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                    f"Request from the client [{who}] arrived before the next push interval "
                    "time")
        if sub_id != inst.subscription_id:
            self.stats.unknown_subscription += 1
            return (ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                    f"Unknown client subscription id for the client [{who}]")
        if compression_type not in _KNOWN_COMPRESSION:
            return (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                    f"Unknown compression type [{compression_type}] is received in telemetry "
                    f"request from [{who}]")
        if size > self.telemetry_max_bytes:
            return (ErrorCode.TELEMETRY_TOO_LARGE,
                    f"Telemetry request from [{who}] is larger than the maximum allowed size "
                    f"[{self.telemetry_max_bytes}]")
        return ErrorCode.NONE, None

    def exported(self) -> None:
        self.stats.exported += 1

    def export_failed(self, inst: ClientInstance) -> None:
        """The accepted push's payload did not decode (Kafka: the receiver plugin failed)."""
        self.stats.export_errors += 1
        inst.last_error = ErrorCode.INVALID_RECORD


def _with_instance_id(attrs: ClientAttributes, instance_id: uuid.UUID) -> ClientAttributes:
    return ClientAttributes(uuid_to_base64(instance_id), attrs.client_id, attrs.client_software_name,
                            attrs.client_software_version, attrs.client_source_address,
                            attrs.client_source_port)
