"""The client metrics received by PushTelemetry, kept for the Prometheus endpoint (KIP-714).

What it owns (an injected clock in milliseconds; single event loop): per client instance, its
series (metric name, labels) -> value, built from decoded points (telemetry/otlp.py): a GAUGE
point sets the value, a delta COUNTER point adds to it, a cumulative one sets it. Every series
is labelled with the pushing client's ``client_instance_id`` and ``client_id`` (from the
broker's side of the connection, not from the payload).

Bounds, both named configs (docs/metrics.md):

- ``snakka.client.metrics.retention.ms``: a client that has not pushed for this long is
  dropped with all its series (clients that stopped pushing do not stay on the page forever);
  checked on every push and every scrape;
- ``snakka.client.metrics.max.series``: the series kept over all clients; a push's new series
  beyond it are dropped and counted (``dropped_series``), existing ones keep updating.

A metric name reported with different kinds (a gauge by one client, a counter by another)
keeps the kind it was first seen with; the other points are dropped and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from snakka.telemetry.otlp import Kind, Point

__all__ = ["ClientMetricsStore", "ClientSeries"]

Labels = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class ClientSeries:
    instance_id: str
    client_id: str
    last_push_ms: int
    values: dict[tuple[str, Labels], float] = field(default_factory=dict)


class ClientMetricsStore:
    def __init__(self, *, retention_ms: int, max_series: int,
                 clock_ms: Callable[[], int]) -> None:
        self.retention_ms = retention_ms
        self.max_series = max_series
        self.clock_ms = clock_ms
        self.clients: dict[str, ClientSeries] = {}
        self.kinds: dict[str, Kind] = {}
        self.series = 0
        self.dropped_series = 0
        self.dropped_points = 0

    def record(self, instance_id: str, client_id: str, points: Iterable[Point]) -> None:
        now = self.clock_ms()
        self.expire(now)
        client = self.clients.get(instance_id)
        if client is None:
            client = self.clients[instance_id] = ClientSeries(instance_id, client_id, now)
        client.last_push_ms = now
        client.client_id = client_id
        values = client.values
        kinds = self.kinds
        for p in points:
            kind = kinds.setdefault(p.name, p.kind)
            if kind is not p.kind:
                self.dropped_points += 1
                continue
            key = (p.name, p.labels)
            old = values.get(key)
            if old is None:
                if self.series >= self.max_series:
                    self.dropped_series += 1
                    continue
                self.series += 1
                values[key] = p.value
            else:
                values[key] = old + p.value if p.delta else p.value

    def expire(self, now: int | None = None) -> None:
        """Drop the clients that have not pushed within the retention."""
        now = self.clock_ms() if now is None else now
        stale = [i for i, c in self.clients.items() if now - c.last_push_ms >= self.retention_ms]
        for i in stale:
            self.series -= len(self.clients.pop(i).values)
        if not self.clients:
            self.kinds.clear()

    def samples(self) -> Iterator[tuple[str, Kind, Labels, float]]:
        """(name, kind, labels including client_instance_id and client_id, value), sorted by
        name then client (after expiring stale clients)."""
        self.expire()
        rows = []
        for c in self.clients.values():
            base = (("client_id", c.client_id), ("client_instance_id", c.instance_id))
            for (name, labels), value in c.values.items():
                extra = tuple(kv for kv in labels if kv[0] not in ("client_id",
                                                                   "client_instance_id"))
                rows.append((name, self.kinds[name], base + extra, value))
        rows.sort(key=lambda r: (r[0], r[2]))
        yield from rows
