"""The console's Kafka client: Kafka API requests answered in-process by the broker's handlers.

What it owns: calling a request handler (handlers/<api>.py) the way dispatch does
(server/dispatch.py), as the console user's principal: the API-level actions the handler
declares are authorized first, then ``handle(ctx, request)`` runs and its coroutine, if it
returns one, is awaited. So everything the console changes (produce a test message, reset a
group's offsets, delete records, topics, ACLs, SCRAM credentials, client quotas) and most of
what it shows about groups, configs, ACLs, users and quotas goes through exactly the code (validation, authorization, the coordinators' rules) a Kafka client's
request does: the console can do nothing a client with the same credentials could not.

Skipped on purpose: encoding and decoding (the request and response objects are passed as
they are), client quotas and request metrics (a person clicking is not a client), the
response-memory budget (a console read is bounded by the console's own limits).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any

from snakka import __version__
from snakka.handlers import HandlerRegistry
from snakka.handlers.context import RequestContext
from snakka.protocol.error_response import error_response
from snakka.security.authorizer import AuthorizationResult, Authorizer, denied_error_code
from snakka.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from snakka.config import Listener
    from snakka.handlers.services import Services

__all__ = ["ConsoleConnection", "KafkaApiError", "LocalKafka"]

CONSOLE_CLIENT_ID = "snakka-console"


class KafkaApiError(Exception):
    """The broker refused a console request (an API this broker does not serve)."""


class ConsoleConnection:
    """The connection handle handlers get for a console request: one per HTTP request."""

    def __init__(self, peer: str) -> None:
        self._peer = peer

    def __hash__(self) -> int:
        return id(self)

    @property
    def peer(self) -> str:
        return f"console:{self._peer}"

    @property
    def client_software(self) -> tuple[str, str] | None:
        return ("snakka-console", __version__)

    @property
    def authentication(self) -> Any:  # only the SASL handlers use it; never called here
        raise KafkaApiError("the console does not authenticate through SASL requests")

    def close_with_error(self, reason: str) -> None:  # acks=0 only: the console uses acks=-1
        pass

    def reserve_response_bytes(self, wanted: int) -> int | None:
        return wanted

    def settle_response_bytes(self, reserved: int, actual: int) -> None:
        pass

    async def wait_for_response_memory(self, timeout_s: float) -> bool:
        return True


class LocalKafka:
    """Calls the broker's handlers as ``principal`` from ``peer_host``."""

    def __init__(self, handlers: HandlerRegistry, services: Services, authorizer: Authorizer,
                 listener: Listener) -> None:
        self.handlers = handlers
        self.services = services
        self.authorizer = authorizer
        self.listener = listener
        self._correlation = 0

    def context(self, api_key: int, version: int, principal: KafkaPrincipal,
                peer_host: str) -> RequestContext:
        self._correlation += 1
        return RequestContext(api_key, version, self._correlation, CONSOLE_CLIENT_ID,
                              peer_host, self.listener, principal, ConsoleConnection(peer_host),
                              self.services, self.handlers, None, self.authorizer)

    def version(self, api_key: int, wanted: int) -> int:
        """``wanted``, or the nearest version the handler serves."""
        h = self.handlers.get(api_key)
        if h is None:
            raise KafkaApiError(f"API key {api_key} is not served by this broker")
        return max(h.min_version, min(wanted, h.max_version))

    async def call(self, api_key: int, version: int, request: Any, principal: KafkaPrincipal,
                   peer_host: str) -> Any:
        handler = self.handlers.get(api_key)
        if handler is None:
            raise KafkaApiError(f"API key {api_key} is not served by this broker")
        ctx = self.context(api_key, version, principal, peer_host)
        if handler.actions:
            for action, result in zip(handler.actions, ctx.authorize(handler.actions),
                                      strict=True):
                if result is not AuthorizationResult.ALLOWED:
                    code = denied_error_code(action.resource_pattern.resource_type)
                    return error_response(api_key, version, request, code, code.message,
                                          handler.module)
        result = handler.handle(ctx, request)
        if inspect.isawaitable(result):
            result = await asyncio.ensure_future(result)
        return result
