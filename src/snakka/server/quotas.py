"""Connection quotas: ``max.connections`` and ``max.connections.per.ip`` (+ overrides).

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

A refusal must cost nearly nothing, since a client may retry in a tight loop: no per-refusal log
line (the first refusal of an address is logged, then one summary per address and reason at most
every ``REJECTION_LOG_INTERVAL_S``), and the caller aborts the socket (RST, no TIME_WAIT here).
Single event loop: no locks.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from collections.abc import Callable

from snakka.config import BrokerConfig, ConfigError, parse_connections_per_ip_overrides

log = logging.getLogger("snakka.server")

REJECTION_LOG_INTERVAL_S = 10.0


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
        self._clock = clock
        # (address, reason) -> [refusals not yet logged, time of the last log line]
        self._refused: dict[tuple[str, str], list] = {}

    def max_for(self, ip: str) -> int:
        return self.max_per_ip_overrides.get(ip, self.default_max_per_ip)

    def inc(self, ip: str) -> bool:
        """Admit a connection from ``ip`` (counted) or refuse it (False, not counted)."""
        if self.total >= self.max_connections:
            self._refuse(ip, f"max.connections={self.max_connections} reached")
            return False
        count = self.counts.get(ip, 0)
        limit = self.max_for(ip)
        if count >= limit:
            self._refuse(ip, f"address already has the configured maximum of {limit} "
                             "connections (max.connections.per.ip)")
            return False
        self.counts[ip] = count + 1
        self.total += 1
        return True

    def dec(self, ip: str) -> None:
        count = self.counts.get(ip, 0)
        if count <= 1:
            self.counts.pop(ip, None)
        else:
            self.counts[ip] = count - 1
        self.total = max(0, self.total - 1)

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
