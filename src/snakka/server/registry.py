"""The set of open connections: admission, and who to tell when one closes.

What it owns: the connections the broker serves now (the listener's reaper walks them, the
broker closes them on shutdown), their admission through ``ConnectionQuotas``
(``max.connections``, also per listener, ``max.connections.per.ip``: a refused connection is
never counted), and the
close notifications (the share-partition manager releases a member's records when the
connection of its share session goes, as Kafka does). Connections get this registry explicitly;
they never reach the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from snakka.server.quotas import ConnectionQuotas

log = logging.getLogger("snakka.server")

__all__ = ["ConnectionRegistry", "RegisteredConnection"]


class RegisteredConnection(Protocol):
    @property
    def peer_ip(self) -> str: ...


def _listener_name(conn: RegisteredConnection) -> str | None:
    """The listener a connection came in on (per-listener limits); None for stand-ins."""
    listener = getattr(conn, "listener", None)
    return getattr(listener, "name", None)


class ConnectionRegistry:
    def __init__(self, quotas: ConnectionQuotas) -> None:
        self.quotas = quotas
        self.connections: set[Any] = set()  # ServerConnection (server/connection.py)
        self._on_closed: list[Callable[[Any], None]] = []

    def on_closed(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(connection)`` whenever a registered connection closes."""
        self._on_closed.append(callback)

    def register(self, conn: RegisteredConnection) -> bool:
        """Admit a new connection (counted per IP) or refuse it (the caller aborts it; the
        quotas log it, rate-limited)."""
        if not self.quotas.inc(conn.peer_ip, _listener_name(conn)):
            return False
        self.connections.add(conn)
        return True

    def unregister(self, conn: RegisteredConnection) -> None:
        if conn not in self.connections:
            return  # refused at registration: never counted
        self.connections.discard(conn)
        self.quotas.dec(conn.peer_ip, _listener_name(conn))
        for callback in self._on_closed:
            try:
                callback(conn)
            except Exception:  # one listener's bug must not leak the others' clean-up
                log.exception("connection-closed listener failed for %s", conn)

    def __len__(self) -> int:
        return len(self.connections)
