"""Client quotas: their configuration in the metadata log, and the sampled rates that throttle.

What it owns (sans-I/O, an injected clock in milliseconds; Kafka's ClientQuotaControlManager,
ClientQuotasImage, ClientQuotaManager's DefaultQuotaCallback, Rate/SampledStat and QuotaUtils):

- :class:`ClientQuotaConfigs`, the replayed state: quota entity -> {key: value}. An entity is a
  set of (entity type, name) pairs with the types ``user``, ``client-id`` (alone or together) or
  ``ip`` (alone); a name of None is the ``<default>`` entity of its type. Records, KRaft's
  ``ClientQuotaRecord`` as JSON::

      {"type": "client_quota", "entity": [[entity_type, entity_name | null], ...],
       "key": "producer_byte_rate", "value": 1048576.0, "remove": false}

  AlterClientQuotas is validated here with Kafka's checks, words and error codes (unknown key,
  bad entity combination, fractional or non-positive values: INVALID_REQUEST), and
  DescribeClientQuotas' filters are matched here (strict / non-strict, EXACT / DEFAULT /
  SPECIFIED components).
- **Precedence** (:meth:`ClientQuotaConfigs.resolve`): the quota of a (user, client-id) pair for
  one key is the first of, in order, /config/users/<user>/clients/<client-id>,
  /users/<user>/clients/<default>, /users/<user>, /users/<default>/clients/<client-id>,
  /users/<default>/clients/<default>, /users/<default>, /clients/<client-id>,
  /clients/<default> that sets the key. The level that matched also names the *quota entity
  whose clients share one rate* (Kafka's metric tags): a /users/<user> quota is shared by all
  clients of the user, a /clients/<client-id> quota by every user of that client id.
- :class:`SampledRate` (Kafka's ``Rate`` over a ``SampledStat``): ``quota.window.num`` samples
  of ``quota.window.size.seconds``; the rate is the sum of the live samples over the elapsed
  window, which is at least ``num - 1`` whole windows.
- :class:`ClientQuotaManager`: one per quota type (produce, fetch, request). ``record`` adds a
  value to the entity's rate and returns the throttle time (Kafka's ``QuotaUtils.throttleTime``:
  ``(rate - quota) / quota * window``), 0 while within the quota. With no quota of its type
  configured anywhere, :attr:`ClientQuotaManager.active` is False and callers skip it (the hot
  path pays one attribute read per request).
- :class:`ControllerMutationQuotaManager` (KIP-599): a token bucket per entity, and
  :class:`ControllerMutationQuota`, one request's view of it: strict for CreateTopics v6+,
  CreatePartitions v3+, DeleteTopics v5+ (a topic whose mutation finds the bucket in debt is
  THROTTLING_QUOTA_EXCEEDED), permissive for older versions (recorded and throttled only).

Bounds: at most ``QUOTA_SENSORS_MAX`` live rate entities per manager (idle ones are dropped
first, Kafka expires a client's sensors after an hour of inactivity); a request's alterations
are bounded by the request size. Single event loop: no locks.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from snakka.limits import INT32_MAX, INT64_MAX, QUOTA_SENSORS_MAX
from snakka.protocol.api_keys import ApiKey
from snakka.protocol.errors import ErrorCode

__all__ = [
    "CLIENT_ID", "CONNECTION_CREATION_RATE", "CONSUMER_BYTE_RATE", "CONTROLLER_MUTATION_RATE",
    "IP", "PRODUCER_BYTE_RATE", "RECORD", "REQUEST_PERCENTAGE", "USER", "ClientQuotaConfigs",
    "ClientQuotaManager", "ControllerMutationQuota", "ControllerMutationQuotaManager", "QuotaAlteration", "QuotaEntity",
    "QuotaManagers", "QuotaResult", "SampledRate",
]

RECORD = "client_quota"

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

_LONG, _INT, _DOUBLE = "LONG", "INT", "DOUBLE"
# The keys each entity type takes, with their types (Kafka's QuotaConfig).
CLIENT_QUOTA_KEYS: Mapping[str, str] = {
    PRODUCER_BYTE_RATE: _LONG, CONSUMER_BYTE_RATE: _LONG,
    REQUEST_PERCENTAGE: _DOUBLE, CONTROLLER_MUTATION_RATE: _DOUBLE,
}
IP_QUOTA_KEYS: Mapping[str, str] = {CONNECTION_CREATION_RATE: _INT}

# An entity: its (type, name) pairs sorted by type; name None is the <default> entity.
QuotaEntity = tuple[tuple[str, str | None], ...]

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    return tuple(sorted(pairs, key=lambda p: p[0]))


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One entry of an AlterClientQuotas request: the entity as sent, and its ops
    ``(key, value, remove)``."""

    entity: Sequence[tuple[str, str | None]]
    ops: Sequence[tuple[str, float, bool]]


@dataclass(frozen=True, slots=True)
class QuotaResult:
    error_code: ErrorCode
    error_message: str | None


_OK = QuotaResult(ErrorCode.NONE, None)


def _invalid(message: str) -> QuotaResult:
    return QuotaResult(ErrorCode.INVALID_REQUEST, message)


class ClientQuotaConfigs:
    """The replayed client quotas (see the module docstring)."""

    def __init__(self) -> None:
        self.quotas: dict[QuotaEntity, dict[str, float]] = {}
        # Bumps on every change: the managers' resolution caches compare it.
        self.version = 0
        # How many entities set each key (a manager with none of its key configured is idle).
        self.key_counts: dict[str, int] = {}
        # Some user/client-id quota is set (requests are recorded only then; an ip entity's
        # connection_creation_rate concerns accepts, not requests).
        self.any_client_quota = False

    # -- replay --------------------------------------------------------------------------
    def apply(self, rec: Mapping[str, Any]) -> None:
        entity = entity_of((str(t), None if n is None else str(n)) for t, n in rec["entity"])
        key = str(rec["key"])
        values = self.quotas.get(entity)
        if rec.get("remove"):
            if values is not None and values.pop(key, None) is not None:
                self.key_counts[key] -= 1
                if not values:
                    del self.quotas[entity]
        else:
            if values is None:
                values = self.quotas[entity] = {}
            if key not in values:
                self.key_counts[key] = self.key_counts.get(key, 0) + 1
            values[key] = float(rec["value"])
        self.version += 1
        self.any_client_quota = any(self.key_counts.get(k, 0) for k in CLIENT_QUOTA_KEYS)

    def configured(self, key: str) -> bool:
        return self.key_counts.get(key, 0) > 0

    # -- AlterClientQuotas (Kafka's ClientQuotaControlManager.alterClientQuotas) ---------
    def alter(self, alterations: Sequence[QuotaAlteration]
              ) -> tuple[list[QuotaResult], list[dict[str, Any]]]:
        """One result per entry, and the records of the valid entries (not applied)."""
        results: list[QuotaResult] = []
        records: list[dict[str, Any]] = []
        for alt in alterations:
            entity, err = _validate_entity(alt.entity)
            if err is None:
                assert entity is not None
                err, recs = _validate_ops(entity, alt.ops)
                if err is None:
                    records.extend(recs)
            results.append(err or _OK)
        return results, records

    # -- DescribeClientQuotas (Kafka's ClientQuotasImage.describe) -----------------------
    def describe(self, components: Sequence[tuple[str, int, str | None]], strict: bool
                 ) -> tuple[QuotaResult, list[tuple[QuotaEntity, dict[str, float]]]]:
        """The entities matching the filter ``(entity type, match type, match)``, or the
        filter's error."""
        wanted: dict[str, tuple[int, str | None]] = {}
        for etype, match_type, match in components:
            if not etype:
                return _invalid("Invalid empty entity type."), []
            if etype in wanted:
                return _invalid(f"Entity type {etype} cannot appear more than once in the "
                                "filter."), []
            if etype not in (USER, CLIENT_ID, IP):
                return _invalid(f"Unsupported entity type {etype}"), []
            if match_type == MATCH_EXACT:
                if match is None:
                    return _invalid("Request specified MATCH_TYPE_EXACT, but set match string "
                                    "to null."), []
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    return _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified "
                                    "a match string."), []
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    return _invalid("Request specified MATCH_TYPE_SPECIFIED, but also "
                                    "specified a match string."), []
            else:
                return _invalid(f"Unknown match type {match_type}"), []
            wanted[etype] = (match_type, match)
        if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
            return _invalid("Invalid entity filter component combination. IP filter component "
                            "should not be used with user or clientId filter component."), []
        out = []
        for entity, values in self.quotas.items():
            names = dict(entity)
            if strict and len(names) != len(wanted):
                continue
            if all(_component_matches(names, etype, mt, m) for etype, (mt, m) in wanted.items()):
                out.append((entity, dict(values)))
        return _OK, out

    # -- precedence (Kafka's DefaultQuotaCallback) ---------------------------------------
    def resolve(self, key: str, user: str, client_id: str
                ) -> tuple[float | None, tuple[str, str]]:
        """The quota for ``key`` of this (user, client-id), and the quota entity (user tag,
        client-id tag; "" where the entity does not include it) whose clients share one rate.
        (None, ("", client_id)) when no level sets the key."""
        q = self.quotas
        levels: tuple[tuple[QuotaEntity, tuple[str, str]], ...] = (
            (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
            (((CLIENT_ID, None), (USER, user)), (user, client_id)),
            (((USER, user),), (user, "")),
            (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
            (((CLIENT_ID, None), (USER, None)), (user, client_id)),
            (((USER, None),), (user, "")),
            (((CLIENT_ID, client_id),), ("", client_id)),
            (((CLIENT_ID, None),), ("", client_id)),
        )
        for entity, tags in levels:
            values = q.get(entity)
            if values is not None:
                v = values.get(key)
                if v is not None:
                    return v, tags
        return None, ("", client_id)

    def ip_quota(self, ip: str, key: str = CONNECTION_CREATION_RATE) -> float | None:
        """An IP's quota: /config/ips/<ip>, else /config/ips/<default>."""
        for name in (ip, None):
            values = self.quotas.get(((IP, name),))
            if values is not None and key in values:
                return values[key]
        return None


def _component_matches(names: Mapping[str, str | None], etype: str, match_type: int,
                       match: str | None) -> bool:
    if etype not in names:
        return False
    name = names[etype]
    if match_type == MATCH_EXACT:
        return name == match
    if match_type == MATCH_DEFAULT:
        return name is None
    return name is not None


def _validate_entity(pairs: Sequence[tuple[str, str | None]]
                     ) -> tuple[QuotaEntity | None, QuotaResult | None]:
    if not pairs:
        return None, _invalid("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for etype, name in pairs:
        if etype in seen:
            return None, _invalid(f"Invalid client quota entity, duplicate entity entry {etype}")
        if etype in (USER, CLIENT_ID):
            if name == "":
                return None, _invalid(f"Empty {etype} not supported")
        elif etype == IP:
            if name is not None and not _valid_ip(name):
                return None, _invalid(f"{name} is not a valid IP or resolvable host.")
        else:
            return None, _invalid(f"Unhandled client quota entity type: {etype}")
        seen[etype] = name
    if IP in seen and len(seen) > 1:
        return None, _invalid("Invalid quota entity combination, IP entity shouldnot be "
                              "combined with User or ClientId")
    return entity_of(seen.items()), None


def _valid_ip(name: str) -> bool:
    # Kafka resolves a hostname here; a single node resolving names on the loop could stall
    # it, so only IP literals are taken (a hostname is INVALID_REQUEST with Kafka's words).
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _validate_ops(entity: QuotaEntity, ops: Sequence[tuple[str, float, bool]]
                  ) -> tuple[QuotaResult | None, list[dict[str, Any]]]:
    keys = IP_QUOTA_KEYS if entity[0][0] == IP else CLIENT_QUOTA_KEYS
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    wire_entity = [[t, n] for t, n in entity]
    for key, value, remove in ops:
        if key in seen:
            return _invalid(f"Duplicate quota key {key} not updating quota for this entity "
                            f"{_describe_entity(entity)}"), []
        seen.add(key)
        ktype = keys.get(key)
        if ktype is None:
            return _invalid(f"Invalid configuration key {key}"), []
        if remove:
            records.append({"type": RECORD, "entity": wire_entity, "key": key, "value": 0.0,
                            "remove": True})
            continue
        err = _validate_value(key, ktype, value)
        if err is not None:
            return err, []
        records.append({"type": RECORD, "entity": wire_entity, "key": key,
                        "value": float(value), "remove": False})
    return None, records


def _validate_value(key: str, ktype: str, value: float) -> QuotaResult | None:
    if math.isnan(value) or value <= 0:
        return _invalid(f"Quota {key} must be greater than 0")
    if ktype == _DOUBLE:
        return None
    if math.isinf(value):
        return _invalid(f"Proposed value for {key} is too large for a {ktype}.")
    if abs(value - round(value)) > 1e-6:
        return _invalid(f"{key} cannot be a fractional value.")
    bound = INT32_MAX if ktype == _INT else INT64_MAX
    if value > bound:
        article = "an" if ktype == _INT else "a"
        return _invalid(f"Proposed value for {key} is too large for {article} {ktype}.")
    return None


def _describe_entity(entity: QuotaEntity) -> str:
    return "(" + ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity) + ")"


# ------------------------------------------------------------------------------ throttling
class SampledRate:
    """Kafka's ``Rate`` over a ``SampledStat`` of ``num_samples`` windows of ``window_ms``
    (as of Kafka 3.8, "Fix rate metric spikes"): a value per sample window, one extra slot so
    that a sample overlapping the start of the monitored span is kept, the oldest slot reused
    once all are in use, and a sample forgotten once its *last event* is older than the whole
    span."""

    __slots__ = ("_starts", "_lasts", "_values", "_current", "num_samples", "window_ms",
                 "last_record_ms", "simple")

    def __init__(self, num_samples: int, window_ms: int, now_ms: int, *,
                 simple: bool = False) -> None:
        self.num_samples = num_samples
        self.window_ms = window_ms
        # Kafka's SimpleRate (tiered storage's quotas): the span is at least one window, not
        # num_samples - 1 of them.
        self.simple = simple
        self._starts = [now_ms]
        self._lasts = [now_ms]
        self._values = [0.0]
        self._current = 0
        self.last_record_ms = now_ms

    def record(self, value: float, now_ms: int) -> None:
        i = self._current
        if now_ms - self._starts[i] >= self.window_ms:  # the current sample is complete
            i = (i + 1) % (self.num_samples + 1)
            if i >= len(self._starts):
                self._starts.append(now_ms)
                self._lasts.append(now_ms)
                self._values.append(0.0)
            else:
                self._starts[i] = now_ms
                self._values[i] = 0.0
            self._current = i
        self._values[i] += value
        self._lasts[i] = now_ms
        self.last_record_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire = self.num_samples * self.window_ms
        for i, last in enumerate(self._lasts):
            if now_ms - last >= expire:
                self._starts[i] = now_ms
                self._lasts[i] = now_ms
                self._values[i] = 0.0

    def window_size_ms(self, now_ms: int) -> int:
        """The span the rate is measured over: since the oldest sample began, and at least
        ``num_samples - 1`` whole windows (a new client is not judged by one instant)."""
        self._purge(now_ms)
        elapsed = now_ms - min(self._starts)
        if self.simple:
            return max(elapsed, self.window_ms, 1)
        full = elapsed // self.window_ms
        min_full = self.num_samples - 1
        if full < min_full:
            elapsed += (min_full - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Units per second."""
        window = self.window_size_ms(now_ms)
        return sum(self._values) / (window / 1000.0)


class ClientQuotaManager:
    """The sampled rates of one quota type (``producer_byte_rate``, ``consumer_byte_rate`` or
    ``request_percentage``) per quota entity, and the throttle time of a recording."""

    def __init__(self, key: str, configs: ClientQuotaConfigs, *, num_samples: int,
                 window_seconds: int, clock_ms: Callable[[], int],
                 max_throttle_ms: int | None = None) -> None:
        self.key = key
        self.configs = configs
        self.num_samples = num_samples
        self.window_ms = window_seconds * 1000
        self.clock_ms = clock_ms
        self.max_throttle_ms = max_throttle_ms
        self.rates: dict[tuple[str, str], SampledRate] = {}
        # (user, client-id) -> (configs version, quota, quota entity tags)
        self._resolved: dict[tuple[str, str], tuple[int, float | None, tuple[str, str]]] = {}

    @property
    def active(self) -> bool:
        """A quota of this type is configured for some entity."""
        return self.configs.configured(self.key)

    def quota(self, user: str, client_id: str) -> tuple[float | None, tuple[str, str]]:
        cache_key = (user, client_id)
        hit = self._resolved.get(cache_key)
        version = self.configs.version
        if hit is not None and hit[0] == version:
            return hit[1], hit[2]
        value, tags = self.configs.resolve(self.key, user, client_id)
        if len(self._resolved) >= QUOTA_SENSORS_MAX:
            self._resolved.clear()
        self._resolved[cache_key] = (version, value, tags)
        return value, tags

    def record(self, user: str, client_id: str, value: float,
               now_ms: int | None = None) -> int:
        """Add ``value`` to this client's quota entity; the throttle time in ms (0: within
        its quota, or no quota applies)."""
        quota, tags = self.quota(user, client_id)
        if quota is None:
            return 0
        now = self.clock_ms() if now_ms is None else now_ms
        rate = self.rates.get(tags)
        if rate is None:
            if len(self.rates) >= QUOTA_SENSORS_MAX:
                self._expire(now)
            rate = self.rates[tags] = SampledRate(self.num_samples, self.window_ms, now)
        rate.record(value, now)
        measured = rate.measure(now)
        if measured <= quota:
            return 0
        throttle = round((measured - quota) / quota * rate.window_size_ms(now))
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        return max(int(throttle), 0)

    def unrecord(self, user: str, client_id: str, value: float,
                 now_ms: int | None = None) -> None:
        """Take back a recorded value (a throttled Fetch answered without its data)."""
        _quota, tags = self.quota(user, client_id)
        rate = self.rates.get(tags)
        if rate is not None:
            rate.record(-value, self.clock_ms() if now_ms is None else now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """What a client may take in one quota span (Kafka's getMaxValueInQuotaWindow: a
        Fetch is never sized beyond it)."""
        quota, _tags = self.quota(user, client_id)
        if quota is None:
            return None
        return quota * (self.num_samples - 1) * (self.window_ms / 1000)

    def _expire(self, now_ms: int) -> None:
        span = self.num_samples * self.window_ms
        idle = [t for t, r in self.rates.items() if now_ms - r.last_record_ms >= span]
        for t in idle or list(self.rates)[: len(self.rates) // 2]:
            del self.rates[t]


class ControllerMutationQuotaManager:
    """KIP-599's ``controller_mutation_rate`` (partitions created or deleted per second): a
    token bucket per quota entity with a burst of ``rate * num_samples * window`` tokens;
    a mutation may take the bucket into debt, and the debt is the throttle time."""

    def __init__(self, configs: ClientQuotaConfigs, *, num_samples: int,
                 window_seconds: int, clock_ms: Callable[[], int]) -> None:
        self._quotas = ClientQuotaManager(CONTROLLER_MUTATION_RATE, configs,
                                          num_samples=num_samples,
                                          window_seconds=window_seconds, clock_ms=clock_ms)
        self.burst_seconds = num_samples * window_seconds
        self.clock_ms = clock_ms
        # quota entity -> (tokens, time of the last update in ms)
        self.buckets: dict[tuple[str, str], tuple[float, int]] = {}

    @property
    def active(self) -> bool:
        return self._quotas.active

    def _tokens(self, quota: float, tags: tuple[str, str], now: int) -> float:
        burst = quota * self.burst_seconds
        tokens, last = self.buckets.get(tags, (burst, now))
        return min(burst, tokens + quota * (now - last) / 1000.0)

    def is_exceeded(self, user: str, client_id: str) -> bool:
        """The bucket is in debt: a strict request's mutations are refused."""
        quota, tags = self._quotas.quota(user, client_id)
        if quota is None:
            return False
        return self._tokens(quota, tags, self.clock_ms()) < 0

    def record(self, user: str, client_id: str, mutations: int) -> int:
        """Take ``mutations`` tokens; the throttle time in ms (0 while the bucket has some)."""
        quota, tags = self._quotas.quota(user, client_id)
        if quota is None or mutations <= 0:
            return 0
        now = self.clock_ms()
        tokens = self._tokens(quota, tags, now) - mutations
        if len(self.buckets) >= QUOTA_SENSORS_MAX and tags not in self.buckets:
            self.buckets.clear()
        self.buckets[tags] = (tokens, now)
        return 0 if tokens >= 0 else round(-tokens / quota * 1000)

    def throttle_time_ms(self, user: str, client_id: str) -> int:
        quota, tags = self._quotas.quota(user, client_id)
        if quota is None:
            return 0
        tokens = self._tokens(quota, tags, self.clock_ms())
        return 0 if tokens >= 0 else round(-tokens / quota * 1000)

    def new_quota(self, user: str, client_id: str, *, strict: bool) -> ControllerMutationQuota:
        """One request's quota (Kafka's ``newQuotaFor``): strict for the versions that know
        THROTTLING_QUOTA_EXCEEDED (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+),
        permissive (recorded, throttled, never refused) for older ones."""
        return ControllerMutationQuota(self, user, client_id, strict)


class ControllerMutationQuota:
    """One request's view of its entity's mutation bucket (Kafka's Strict- and
    PermissiveControllerMutationQuota).

    Strict: :meth:`record` refuses (returns False) when the bucket is already in debt before
    this mutation; otherwise it takes the tokens, possibly into debt (one request may overdraw,
    the next one is refused). Permissive: always records. The throttle time is the debt at the
    last refusal (strict) or recording (permissive), less the time since
    (:meth:`throttle_time_ms`); 0 while nothing was refused / nothing overdrawn."""

    __slots__ = ("_manager", "_user", "_client_id", "strict", "_throttle_ms", "_at_ms")

    def __init__(self, manager: ControllerMutationQuotaManager, user: str, client_id: str,
                 strict: bool) -> None:
        self._manager = manager
        self._user = user
        self._client_id = client_id
        self.strict = strict
        self._throttle_ms = 0
        self._at_ms = 0

    @property
    def exceeded(self) -> bool:
        """A strict quota refused a mutation of this request (Kafka's ``isExceeded``)."""
        return self.strict and self._throttle_ms > 0

    def record(self, permits: int) -> bool:
        """Take ``permits`` mutations (partitions); False: refused (strict only)."""
        m = self._manager
        quota, tags = m._quotas.quota(self._user, self._client_id)
        if quota is None or permits <= 0:
            return True
        now = m.clock_ms()
        tokens = m._tokens(quota, tags, now)
        if self.strict and tokens < 0:
            self._throttle_ms, self._at_ms = round(-tokens / quota * 1000), now
            return False
        tokens -= permits
        if len(m.buckets) >= QUOTA_SENSORS_MAX and tags not in m.buckets:
            m.buckets.clear()
        m.buckets[tags] = (tokens, now)
        if not self.strict and tokens < 0:
            self._throttle_ms, self._at_ms = round(-tokens / quota * 1000), now
        return True

    def throttle_time_ms(self) -> int:
        if self._throttle_ms <= 0:
            return 0
        return max(0, self._throttle_ms - (self._manager.clock_ms() - self._at_ms))


# Requests the request quota never throttles (Kafka exempts the connection's own set-up).
_REQUEST_QUOTA_EXEMPT = frozenset({int(ApiKey.API_VERSIONS), int(ApiKey.SASL_HANDSHAKE),
                                   int(ApiKey.SASL_AUTHENTICATE)})
_PRODUCE = int(ApiKey.PRODUCE)
_FETCH = int(ApiKey.FETCH)


class QuotaManagers:
    """The broker's client quota managers (Kafka's QuotaFactory.QuotaManagers) over one
    :class:`ClientQuotaConfigs`; :meth:`throttle_time_ms` is the per-response decision."""

    def __init__(self, configs: ClientQuotaConfigs, *, num_samples: int = 11,
                 window_seconds: int = 1, controller_num_samples: int = 11,
                 controller_window_seconds: int = 1,
                 clock_ms: Callable[[], int]) -> None:
        self.configs = configs
        kw: dict[str, Any] = {"num_samples": num_samples, "window_seconds": window_seconds,
                              "clock_ms": clock_ms}
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, configs, **kw)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, configs, **kw)
        # Kafka's ClientRequestQuotaManager bounds its throttle time by one quota window.
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, configs,
                                          max_throttle_ms=window_seconds * 1000, **kw)
        self.controller_mutation = ControllerMutationQuotaManager(
            configs, num_samples=controller_num_samples,
            window_seconds=controller_window_seconds, clock_ms=clock_ms)

    def record_fetch(self, user: str, client_id: str, response_bytes: int, *,
                     unrecord: bool = False) -> int:
        """A consumer's Fetch response of ``response_bytes`` (Kafka's handleFetchRequest:
        the response's size, FetchResponse.sizeOf): recorded against its
        ``consumer_byte_rate``; when that throttles, or ``unrecord`` (the request quota
        throttles this fetch), the bytes are taken back (the response goes out without data).
        The throttle time, else 0."""
        if not self.fetch.active:
            return 0
        now = self.fetch.clock_ms()
        throttle = self.fetch.record(user, client_id, response_bytes, now)
        if throttle > 0 or unrecord:
            self.fetch.unrecord(user, client_id, response_bytes, now)
        return throttle

    def record_fetch_request(self, user: str, client_id: str, handler_seconds: float) -> int:
        """A consumer Fetch's handler time against ``request_percentage``, recorded by the
        Fetch handler before it makes the response (Kafka records it there, and a fetch
        throttled by it is answered empty); :meth:`throttle_time_ms` leaves Fetch out."""
        if not self.request.active:
            return 0
        return self.request.record(user, client_id, handler_seconds * 100.0)

    def fetch_max_bytes(self, user: str, client_id: str) -> int | None:
        """What one Fetch of this consumer may return: a quota span's worth of its
        ``consumer_byte_rate`` (Kafka caps a consumer's fetch max bytes there, as more would be
        throttled for sure), None without a quota."""
        if not self.fetch.active:
            return None
        cap = self.fetch.max_value_in_window(user, client_id)
        return None if cap is None else int(min(cap, INT32_MAX))

    @property
    def enabled(self) -> bool:
        """Some user/client-id quota is configured (the one check a request pays when none
        is)."""
        return self.configs.any_client_quota

    def throttle_time_ms(self, api_key: int, user: str, client_id: str, request_bytes: int,
                         response_bytes: int, handler_seconds: float) -> int:
        """Record one answered request and return how long to throttle its client: Produce
        counts the request's bytes against ``producer_byte_rate``, Fetch the response's
        against ``consumer_byte_rate``, every request but the exempt ones its handler time
        against ``request_percentage`` (seconds x 100 per second: percent of one thread).
        The larger throttle wins, as Kafka's KafkaApis. (``response_bytes`` is unused: a
        Fetch's bytes and handler time are recorded by the Fetch handler, :meth:`record_fetch`
        and :meth:`record_fetch_request`; a follower Fetch is exempt, as Kafka's.)"""
        throttle = 0
        if api_key == _PRODUCE:
            if self.produce.active:
                throttle = self.produce.record(user, client_id, request_bytes)
        # Fetch: consumer_byte_rate and request_percentage are recorded by the Fetch handler
        # (record_fetch, record_fetch_request), before the response is made, since a fetch
        # either throttles is answered without its data.
        if self.request.active and api_key not in _REQUEST_QUOTA_EXEMPT and api_key != _FETCH:
            throttle = max(throttle, self.request.record(user, client_id,
                                                         handler_seconds * 100.0))
        return throttle
