"""Dispatch: from a request frame to its handler's result (Kafka's ``KafkaApis.handle`` entry and
the request-parsing half of ``SocketServer``'s processor).

What it owns, in the order applied to each request (server/channel.py has already framed it and
read its fixed header):

1. the authentication gate: before a SASL connection is authenticated only the SASL exchange's
   APIs pass (server/authentication.py); anything else closes the connection;
2. handler lookup: an API key nobody declares closes the connection;
3. the version check against the handler's declaration, with KIP-511's exception: an
   ApiVersions request at a version above ours is answered at v0 with UNSUPPORTED_VERSION and
   our ranges; any other unsupported version closes the connection;
4. decoding the rest of the header and the body (undecodable: close);
5. the typed :class:`~snakka.handlers.context.RequestContext`, and the client software an
   ApiVersions v3+ request names (recorded on the connection, as Kafka's network layer does);
6. ONE call to the authorizer for the API-level actions the handler declares
   (``ApiDeclaration.actions``); a denial is answered with the request's error response carrying
   the resource type's *_AUTHORIZATION_FAILED code; handlers check per-resource actions
   themselves through ``ctx.authorize``;
7. the handler call; a handler that raises (at once or in its coroutine, :meth:`failed`) is
   answered with Kafka's error response for that request (protocol/error_response.py) and one
   log line. Only what Kafka closes on is closed: undecodable frames, unknown APIs/versions,
   and a failed acks=0 produce (it has no response).

Nothing here knows about sockets or asyncio: the result is the handler's (a response, None, or a
coroutine the connection runs), or a decision to close.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from snakka.config import Listener
from snakka.handlers import Handler, HandlerRegistry
from snakka.handlers.api_versions import valid_client_software
from snakka.handlers.context import ConnectionHandle, RequestContext
from snakka.protocol import decode_request_header
from snakka.protocol.api_keys import ApiKey
from snakka.protocol.error_response import error_code_for, error_response
from snakka.protocol.errors import DecodeError, ErrorCode
from snakka.security.authorizer import (
    Action,
    AllowAllAuthorizer,
    AuthorizationResult,
    Authorizer,
    denied_error_code,
)
from snakka.security.principal import ANONYMOUS
from snakka.server.authentication import AuthState
from snakka.server.channel import (
    CLOSE,
    ClientInformation,
    CloseConnection,
    KafkaChannel,
    RequestReceived,
)

if TYPE_CHECKING:
    from snakka.handlers.services import Services
    from snakka.metadata.client_quotas import QuotaManagers
    from snakka.server.metrics import BrokerMetrics

log = logging.getLogger("snakka.server")

# Plain ints for the per-request comparisons (an IntEnum member lookup costs more).
_API_VERSIONS = int(ApiKey.API_VERSIONS)
_PRODUCE = int(ApiKey.PRODUCE)

__all__ = ["Call", "DispatchedConnection", "RequestDispatcher"]

_AUTHENTICATED = AuthState.AUTHENTICATED


class DispatchedConnection(ConnectionHandle, Protocol):
    """What dispatch reads of the connection a request arrived on (the handle handlers get,
    plus its channel state and where it is from)."""

    channel: KafkaChannel
    listener: Listener

    @property
    def peer_host(self) -> str: ...


class Call:
    """One dispatched request: what answering it (or its failure) needs."""

    __slots__ = ("event", "api_key", "api_version", "ctx", "request", "handler", "started")

    def __init__(self, event: RequestReceived, api_key: int, api_version: int,
                 ctx: RequestContext | None, request: Any, handler: Handler | None) -> None:
        self.event = event  # the channel's event: its place in the response order
        self.api_key = api_key
        self.api_version = api_version  # the version the response is encoded at
        self.ctx = ctx
        self.request = request
        self.handler = handler
        self.started = 0.0  # monotonic time its processing began (the connection sets it)

    @property
    def reserved(self) -> int:
        """Response-memory bytes the handler reserved (Fetch)."""
        return self.ctx.response_bytes if self.ctx is not None else 0


class RequestDispatcher:
    """Routes requests to the handlers of ``handlers`` (api key -> Handler; the registry is
    read at every request, so swapping a handler in it takes effect at once)."""

    def __init__(self, handlers: HandlerRegistry, services: Services, *,
                 authorizer: Authorizer | None = None) -> None:
        self.handlers = handlers
        self.services = services
        self.authorizer: Authorizer = authorizer if authorizer is not None else \
            AllowAllAuthorizer()
        # Request metrics (server/metrics.py), counted by the connection as each request is
        # answered; None: the metrics endpoint is off and nothing is counted.
        self.metrics: BrokerMetrics | None = None

    @property
    def quotas(self) -> QuotaManagers | None:
        """The client quotas connections throttle by (metadata/client_quotas.py); None when
        the broker has none."""
        return self.services.quotas

    def dispatch(self, conn: DispatchedConnection,
                 ev: RequestReceived) -> tuple[Call | None, Any]:
        """Returns ``(call, result)``: result is the handler's (response object, None for no
        response, or a coroutine), ``CLOSE`` (close once earlier responses are written), or a
        :class:`CloseConnection` (close now; ``call`` is None)."""
        api_key, api_version = ev.api_key, ev.api_version
        channel = conn.channel
        auth = channel.auth
        if auth.state is not _AUTHENTICATED or auth.session_expires_ms is not None:
            # The SASL exchange, or a session with a lifetime (KIP-368 re-authentication).
            expires = auth.session_expires_ms
            refused = auth.check_request(
                api_key, None if expires is None else self.services.time_ms())
            if refused is not None:
                return None, CloseConnection(refused)
        handler = self.handlers.get(api_key)
        if handler is None:
            return None, CloseConnection(f"unsupported API key {api_key} (version {api_version})")
        if not handler.min_version <= api_version <= handler.max_version:
            if api_key == _API_VERSIONS:
                # KIP-511: answer an unknown ApiVersions version with a v0-shaped response.
                call = Call(ev, api_key, 0, None, None, handler)
                return call, handler.unsupported_version_response(self.handlers)
            return None, CloseConnection(
                f"unsupported version {api_version} of API key {api_key} "
                f"(supported {handler.min_version}-{handler.max_version})")
        frame = ev.frame
        try:
            header, pos, spec = decode_request_header(frame)
            assert spec is not None  # a handler is declared for it: the schemas know it
            request = spec.request_class.read(frame, pos, api_version)[0]
        except DecodeError as e:
            return None, CloseConnection(
                f"undecodable request (API key {api_key} v{api_version}): {e}")
        if api_key == _API_VERSIONS:
            valid = valid_client_software(request, api_version)
            if valid and api_version >= 3:
                name, version = request.client_software_name, request.client_software_version
                info = channel.client_information
                if info is None or info.software_name != name or \
                        info.software_version != version:
                    channel.client_information = ClientInformation(name, version)
            auth.api_versions_received(valid)
        # Before authentication completes only the SASL exchange gets here; Kafka's
        # authenticator gives those requests the ANONYMOUS principal too.
        principal = auth.principal if auth.principal is not None else ANONYMOUS
        # Positional: keyword arguments cost a microsecond per request here.
        ctx = RequestContext(api_key, api_version, ev.correlation_id, header.client_id,
                             conn.peer_host, conn.listener, principal, conn, self.services,
                             self.handlers, header, self.authorizer)
        call = Call(ev, api_key, api_version, ctx, request, handler)
        if handler.actions:
            denied = self._denied(ctx, handler.actions)
            if denied is not None:
                return call, self._error_answer(call, denied_error_code(
                    denied.resource_pattern.resource_type), conn.peer)
        try:
            return call, handler.handle(ctx, request)
        except Exception as exc:
            return call, self.failed(call, exc, conn.peer)

    def _denied(self, ctx: RequestContext, actions: Sequence[Action]) -> Action | None:
        # The authorizer writes the audit line of a denial (Kafka's kafka.authorizer.logger;
        # security/acl_authorizer.py): dispatch adds none of its own.
        for action, result in zip(actions, ctx.authorize(actions), strict=True):
            if result is not AuthorizationResult.ALLOWED:
                return action
        return None

    # -- handler failures ----------------------------------------------------------------
    def failed(self, call: Call, exc: BaseException, peer: str) -> Any:
        """A handler raised (synchronously or in its coroutine): answer with Kafka's error
        response for that request, the exception mapped to an error code, and one log line.
        Returns the response, or ``CLOSE`` (only where Kafka closes too)."""
        handler = call.handler
        assert handler is not None
        code = error_code_for(exc, call.api_key)
        log.error("%s v%d from %s failed, answering %s (%d): %s: %s", handler.name,
                  call.api_version, peer, code.name, int(code), type(exc).__name__, exc)
        log.debug("traceback of the failed %s request", handler.name, exc_info=exc)
        if call.api_key == _PRODUCE and getattr(call.request, "acks", -1) == 0:
            # acks=0: the client reads no response; Kafka closes the connection so that it
            # notices the failure (KafkaApis.handleProduceRequest).
            return CLOSE
        return self._error_answer(call, code, peer)

    def _error_answer(self, call: Call, code: ErrorCode, peer: str) -> Any:
        handler = call.handler
        assert handler is not None
        message = None if code == ErrorCode.UNKNOWN_SERVER_ERROR else code.message
        try:
            return error_response(call.api_key, call.api_version, call.request, code, message,
                                  handler.module)
        except Exception:  # a bug in the error path itself: nothing sensible to answer
            log.exception("cannot build an error response to %s v%d; closing connection "
                          "from %s", handler.name, call.api_version, peer)
            return CLOSE

