"""Connection quotas: ``max.connections`` (also per listener) and ``max.connections.per.ip``
(+ overrides).

What it owns: the count of open connections, broker-wide and per client IP address, and the
decision to admit or refuse a new one. Kafka's ConnectionQuotas semantics:

- ``max.connections.per.ip`` (default unbounded) with ``max.connections.per.ip.overrides``
  (``host:count,...``, hostnames resolved once at start-up; here to every address they resolve
  to, Kafka takes the first): a connection from an address that already has its maximum is
  closed at once.
- ``max.connections``: Kafka's acceptor stops accepting (new clients wait in the listen backlog)
  until a slot frees, and only the inter-broker listener may go beyond it, closing the least
  recently used client connection to make room. A single snakka node has no inter-broker or
  controller listener to protect, and leaving clients in the backlog turns a clear refusal into
  their connection timeout, so at the bound a new connection is closed at once too (snakka's
  default bound is 10000, Kafka's is unbounded).
- ``listener.name.<l>.max.connections``: the same for the connections of one listener (set per
  listener only; the broker-wide bound applies as well), refused at once as above.

A refusal must cost nearly nothing, since a client may retry in a tight loop: no per-refusal log
line (the first refusal of an address is logged, then one summary per address and reason at most
every ``REJECTION_LOG_INTERVAL_S``), and the caller aborts the socket (RST, no TIME_WAIT here).

Connection creation rates (KIP-612), measured as client quotas are (``SampledRate`` over
``quota.window.num`` windows of ``quota.window.size.seconds``; Kafka's ConnectionQuotas):

- ``max.connection.creation.rate`` (broker-wide) and ``listener.name.<l>.max.connection.creation.
  rate`` (per listener, defaulting to the broker-wide value): every accepted connection is
  recorded; when that takes a rate above its limit the *acceptor waits* the throttle time
  (``(rate - limit) / limit x window``, at most one window) before it accepts the next
  connection (:meth:`ConnectionQuotas.record_accept`; the listener does the waiting).
- ``connection_creation_rate`` of the ``ip`` client-quota entities (``/config/ips/<ip>``, then
  ``/config/ips/<default>``): a connection that takes its address's rate above the quota is
  *not* admitted: it is un-recorded (from the address's, the listener's and the broker's
  rates), held unread for the throttle time, then closed (Kafka's ConnectionThrottledException
  and the acceptor's delayed close), so a reconnecting client is slowed down as well
  (:meth:`ConnectionQuotas.ip_throttle_ms`). No quota configured: one dict read per accept.

Single event loop: no locks.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import socket
import time
from collections.abc import Callable

from snakka.config import (
    INT_MAX,
    LISTENER_PREFIX,
    BrokerConfig,
    ConfigError,
    parse_connections_per_ip_overrides,
)
from snakka.limits import QUOTA_SENSORS_MAX
from snakka.metadata.client_quotas import CONNECTION_CREATION_RATE, ClientQuotaConfigs, SampledRate

log = logging.getLogger("snakka.server")

REJECTION_LOG_INTERVAL_S = 10.0
# The rate limits' "unlimited" value (Kafka: Int.MaxValue; QuotaConfig.IP_CONNECTION_RATE_DEFAULT).
UNLIMITED_RATE = INT_MAX


def normalize_ip(host: str) -> str:
    """One spelling per address (IPv4-mapped IPv6 as IPv4, no IPv6 zone), so counts and
    overrides compare equal."""
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return str(addr)


def _resolve(host: str) -> list[str]:
    try:
        return [normalize_ip(str(ipaddress.ip_address(host)))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as e:
        raise ConfigError("max.connections.per.ip.overrides", host,
                          f"cannot resolve host '{host}': {e}") from None
    return sorted({normalize_ip(str(info[4][0])) for info in infos})


def overrides_need_lookup(text: str) -> bool:
    """Whether max.connections.per.ip.overrides names a host (not only IP literals): resolving
    it may block on DNS, so a run-time change resolves it off the event loop."""
    for host in parse_connections_per_ip_overrides(text):
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return True
    return False


def resolve_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides as address -> limit. A host that does not resolve is
    skipped with a warning (at run time the change is already durable; the others apply).
    Blocking (DNS) when a host name is given."""
    overrides: dict[str, int] = {}
    for host, count in parse_connections_per_ip_overrides(text).items():
        try:
            addrs = _resolve(host)
        except ConfigError as e:
            log.warning("max.connections.per.ip.overrides: %s", e)
            continue
        for addr in addrs:
            overrides[addr] = count
    return overrides


class ConnectionQuotas:
    def __init__(self, config: BrokerConfig, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_connections = config.int("max.connections")
        self.default_max_per_ip = config.int("max.connections.per.ip")
        self.max_per_ip_overrides: dict[str, int] = {}
        for host, count in parse_connections_per_ip_overrides(
                config.raw("max.connections.per.ip.overrides") or "").items():
            for addr in _resolve(host):
                self.max_per_ip_overrides[addr] = count
        self.total = 0
        self.counts: dict[str, int] = {}
        # listener.name.<l>.max.connections (Kafka's per-listener limit; only where set: the
        # broker-wide max.connections applies to every listener besides) and the open
        # connections per listener.
        self.listener_max: dict[str, int] = {}
        for listener in config.listeners:
            raw = config.overrides.get(
                f"{LISTENER_PREFIX}{listener.name.lower()}.max.connections")
            if raw is not None:
                self.listener_max[listener.name] = int(raw)
        self.listener_counts: dict[str, int] = {}
        self._clock = clock
        # (address, reason) -> [refusals not yet logged, time of the last log line]
        self._refused: dict[tuple[str, str], list] = {}
        # -- connection creation rates --
        self.num_samples = config.int("quota.window.num")
        self.window_ms = config.int("quota.window.size.seconds") * 1000
        # Kafka bounds an acceptor's wait and an address's throttle by one quota window.
        self.max_throttle_ms = self.window_ms
        self.broker_rate_limit = config.int("max.connection.creation.rate")
        self.listener_rate_limits: dict[str, int] = {}
        for listener in config.listeners:
            raw = config.listener_raw(listener.name, "max.connection.creation.rate")
            self.listener_rate_limits[listener.name] = (
                UNLIMITED_RATE if raw is None else int(raw))
        self._broker_rate: SampledRate | None = None
        self._listener_rates: dict[str, SampledRate] = {}
        self._ip_rates: dict[str, SampledRate] = {}
        # The replayed client quotas (the broker sets it once the metadata is loaded): the
        # ``ip`` entities' connection_creation_rate.
        self.client_quotas: ClientQuotaConfigs | None = None
        # Accepts delayed by the broker/listener rates, and connections throttled per address
        # (what tests and operators can read; the log lines are rate-limited).
        self.accepts_delayed = 0
        self.accept_delay_ms_total = 0
        self.connections_throttled = 0
        self._delay_log: dict[str, list] = {}  # listener -> [delays not yet logged, last log]

    def reconfigure(self, *, max_connections: int, max_per_ip: int,
                    per_ip_overrides: dict[str, int] | None = None,
                    broker_rate_limit: int | None = None) -> None:
        """New broker-wide limits from a dynamic broker config change (Kafka's
        SocketServer.reconfigure): they apply to the next accept; connections already open stay,
        as in Kafka. ``per_ip_overrides`` (address -> limit, see :func:`resolve_overrides`):
        None keeps the current ones. ``broker_rate_limit`` (``max.connection.creation.rate``;
        None keeps it): a rate measured so far is kept and judged against the new limit, as
        Kafka's updateBrokerMaxConnectionRate changes the quota of the existing sensor (an
        unlimited broker records nothing, so a first limit starts from no history); a
        listener that did not pace its accepts starts to (:meth:`rate_limited`; the broker
        tells its listeners)."""
        self.max_connections = max_connections
        self.default_max_per_ip = max_per_ip
        if per_ip_overrides is not None:
            self.max_per_ip_overrides = per_ip_overrides
        if broker_rate_limit is not None:
            self.broker_rate_limit = broker_rate_limit

    def max_for(self, ip: str) -> int:
        return self.max_per_ip_overrides.get(ip, self.default_max_per_ip)

    def listener_full(self, listener: str, pending: int = 0) -> bool:
        """Whether ``listener`` has its listener.name.<l>.max.connections open (counting
        ``pending`` connections not yet admitted, e.g. TLS handshakes)."""
        limit = self.listener_max.get(listener)
        return limit is not None and self.listener_counts.get(listener, 0) + pending >= limit

    def inc(self, ip: str, listener: str | None = None) -> bool:
        """Admit a connection from ``ip`` on ``listener`` (counted) or refuse it (False, not
        counted)."""
        if self.total >= self.max_connections:
            self._refuse(ip, f"max.connections={self.max_connections} reached")
            return False
        if listener is not None and self.listener_full(listener):
            self._refuse(ip, f"listener {listener} has its maximum of "
                             f"{self.listener_max[listener]} connections "
                             f"(listener.name.{listener.lower()}.max.connections)")
            return False
        count = self.counts.get(ip, 0)
        limit = self.max_for(ip)
        if count >= limit:
            self._refuse(ip, f"address already has the configured maximum of {limit} "
                             "connections (max.connections.per.ip)")
            return False
        self.counts[ip] = count + 1
        self.total += 1
        if listener is not None:
            self.listener_counts[listener] = self.listener_counts.get(listener, 0) + 1
        return True

    def dec(self, ip: str, listener: str | None = None) -> None:
        count = self.counts.get(ip, 0)
        if count <= 1:
            self.counts.pop(ip, None)
        else:
            self.counts[ip] = count - 1
        self.total = max(0, self.total - 1)
        if listener is not None:
            n = self.listener_counts.get(listener, 0)
            if n <= 1:
                self.listener_counts.pop(listener, None)
            else:
                self.listener_counts[listener] = n - 1

    # -- connection creation rates (KIP-612) ----------------------------------------------
    def rate_limited(self, listener: str) -> bool:
        """Whether accepts on ``listener`` are paced (a broker-wide or listener limit is set):
        the listener then runs its own accept loop, which can wait."""
        return (self.broker_rate_limit < UNLIMITED_RATE
                or self.listener_rate_limits.get(listener, UNLIMITED_RATE) < UNLIMITED_RATE)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _record(self, rate: SampledRate, limit: float, now_ms: int) -> int:
        """Record one connection; the throttle time when that takes the rate above ``limit``
        (Kafka's Sensor.record + QuotaUtils.boundedThrottleTime), else 0."""
        rate.record(1.0, now_ms)
        measured = rate.measure(now_ms)
        if measured <= limit:
            return 0
        if limit <= 0:
            return self.max_throttle_ms
        throttle = math.floor((measured - limit) / limit * rate.window_size_ms(now_ms) + 0.5)
        return max(0, min(throttle, self.max_throttle_ms))

    def _rate(self, rates: dict[str, SampledRate], key: str, now_ms: int) -> SampledRate:
        rate = rates.get(key)
        if rate is None:
            if len(rates) >= QUOTA_SENSORS_MAX:  # many addresses: drop the idle ones first
                span = self.num_samples * self.window_ms
                idle = [k for k, r in rates.items() if now_ms - r.last_record_ms >= span]
                for k in idle or list(rates)[: len(rates) // 2]:
                    del rates[k]
            rate = rates[key] = SampledRate(self.num_samples, self.window_ms, now_ms)
        return rate

    def record_accept(self, listener: str, now_ms: int | None = None) -> int:
        """Record a connection accepted on ``listener`` against the broker-wide and the
        listener's creation rate; how long the acceptor must wait before handing it on (and
        before accepting the next one): the longer of the two throttle times, 0 within both
        limits (Kafka's recordConnectionAndGetThrottleTimeMs)."""
        now = self._now_ms() if now_ms is None else now_ms
        delay = 0
        if self.broker_rate_limit < UNLIMITED_RATE:
            if self._broker_rate is None:
                self._broker_rate = SampledRate(self.num_samples, self.window_ms, now)
            delay = self._record(self._broker_rate, self.broker_rate_limit, now)
        limit = self.listener_rate_limits.get(listener, UNLIMITED_RATE)
        if limit < UNLIMITED_RATE:
            delay = max(delay, self._record(self._rate(self._listener_rates, listener, now),
                                            limit, now))
        if delay > 0:
            self.accepts_delayed += 1
            self.accept_delay_ms_total += delay
            self._log_delay(listener, delay, now)
        return delay

    def ip_rate_quota(self, ip: str) -> float | None:
        """The ``connection_creation_rate`` quota of an address, None when none applies."""
        cq = self.client_quotas
        if cq is None or not cq.configured(CONNECTION_CREATION_RATE):
            return None
        return cq.ip_quota(ip, CONNECTION_CREATION_RATE)

    def ip_throttle_ms(self, listener: str, ip: str, now_ms: int | None = None) -> int:
        """Record a new connection from ``ip`` against its ``connection_creation_rate``; 0 to
        admit it, or the time to hold it unread before closing it (Kafka's
        recordIpConnectionMaybeThrottle: the refused connection is un-recorded from the
        address's, the broker's and the listener's rates, so the rates count admitted
        connections only)."""
        quota = self.ip_rate_quota(ip)
        if quota is None or quota >= UNLIMITED_RATE:
            return 0
        now = self._now_ms() if now_ms is None else now_ms
        rate = self._rate(self._ip_rates, ip, now)
        throttle = self._record(rate, quota, now)
        if throttle <= 0:
            return 0
        rate.record(-1.0, now)
        if self._broker_rate is not None:
            self._broker_rate.record(-1.0, now)
        listener_rate = self._listener_rates.get(listener)
        if listener_rate is not None:
            listener_rate.record(-1.0, now)
        self.connections_throttled += 1
        self._refuse(ip, f"connection creation rate above its quota connection_creation_rate="
                         f"{quota:g}; held unread for the throttle time (at most "
                         f"{self.max_throttle_ms} ms), then closed")
        return throttle

    def _log_delay(self, listener: str, delay_ms: int, now_ms: int) -> None:
        limit = min(self.broker_rate_limit, self.listener_rate_limits.get(listener, UNLIMITED_RATE))
        entry = self._delay_log.get(listener)
        if entry is None:
            self._delay_log[listener] = [0, now_ms]
            log.info("listener %s: connection creation rate above max.connection.creation.rate="
                     "%d; the acceptor waits %d ms before accepting more", listener, limit,
                     delay_ms)
            return
        entry[0] += 1
        if now_ms - entry[1] >= REJECTION_LOG_INTERVAL_S * 1000:
            log.info("listener %s: %d more accept(s) delayed by max.connection.creation.rate=%d "
                     "in the last %.0f s", listener, entry[0], limit, (now_ms - entry[1]) / 1000)
            entry[0] = 0
            entry[1] = now_ms

    def _refuse(self, ip: str, reason: str) -> None:
        now = self._clock()
        entry = self._refused.get((ip, reason))
        if entry is None:
            if len(self._refused) > 10_000:  # many addresses: forget the old summaries
                self._refused.clear()
            self._refused[(ip, reason)] = [0, now]
            log.warning("rejected connection from %s: %s", ip, reason)
            return
        entry[0] += 1
        if now - entry[1] >= REJECTION_LOG_INTERVAL_S:
            log.warning("rejected %d more connection(s) from %s in the last %.0f s: %s",
                        entry[0], ip, now - entry[1], reason)
            entry[0] = 0
            entry[1] = now
