"""The web console (issue 16): a small server-rendered UI served by the broker itself
(``console.port``), on the broker's event loop, with its stylesheet and script shipped in this
package (no CDN, no build step). docs/console.md is the user's guide.

Modules:

- ``http``: the HTTP/1.1 server (keep-alive, bounded requests, security headers);
- ``auth``: HTTP Basic against the broker's SASL users, form tokens;
- ``kafka``: Kafka API requests answered in-process by the broker's handlers, as the console
  user's principal (authorization and validation as for any client);
- ``data``: what each page shows and what each action does, as JSON-ready data;
- ``admin``: ACLs, SCRAM users, topic creation/deletion/configs/partitions, client quotas,
  broker configs (this broker's and the cluster-wide dynamic defaults);
- ``pages``, ``admin_pages``: the HTML (every user-controlled value escaped);
- ``throughput``: the live charts' samples;
- ``server``: routing, read-only mode, post/redirect/get.

:func:`create_console` is what the broker calls: it wires those from the broker's parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from snakka.config import BrokerConfig
    from snakka.console.server import ConsoleServer
    from snakka.handlers import HandlerRegistry
    from snakka.handlers.services import Services
    from snakka.security.authorizer import Authorizer
    from snakka.server.metrics import BrokerMetrics

__all__ = ["create_console"]


def create_console(config: BrokerConfig, services: Services, handlers: HandlerRegistry,
                   authorizer: Authorizer, metrics: BrokerMetrics | None,
                   connections: Callable[[], int], listeners: list[dict[str, Any]],
                   *, port: int | None = None) -> ConsoleServer:
    """The console of one broker (not started). ``listeners``: name, address and security
    protocol of each listener, as the overview shows them. ``port`` overrides console.port
    (the fallback to an ephemeral port when ``snakka serve``'s default is taken)."""
    from snakka.console.admin import ConsoleAdmin
    from snakka.console.auth import ConsoleAuthenticator
    from snakka.console.data import ConsoleData
    from snakka.console.kafka import LocalKafka
    from snakka.console.server import ConsoleServer
    from snakka.console.throughput import ThroughputHistory, totals_of
    from snakka.util.scram import ScramMechanism

    read_only = config.bool("console.read.only")
    sasl = services.sasl
    plain: dict[str, str] = {}
    mechanisms: set[str] = set()
    if sasl is not None:
        for ls in sasl.listeners.values():
            mechanisms.update(ls.enabled)
            plain.update(ls.plain_users)
    scram = [m for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
             if m.mechanism_name in mechanisms]
    auth = ConsoleAuthenticator(sasl is not None, plain, scram,
                                services.metadata.scram.get if scram else None)
    kafka = LocalKafka(handlers, services, authorizer, config.listeners[0])
    history = ThroughputHistory() if metrics is not None else None
    data = ConsoleData(services, kafka, connections=connections, listeners=listeners,
                       throughput=history, read_only=read_only, started_ms=services.time_ms())
    return ConsoleServer(
        data, auth, str(config.get("console.host")),
        config.int("console.port") if port is None else port, read_only=read_only,
        throughput=history, totals=(lambda: totals_of(metrics)) if metrics is not None else None,
        admin=ConsoleAdmin(data, list(plain)))
