"""What a handler is given and what it declares: the typed request context and the API
declaration.

What it owns:

- :class:`RequestContext`: everything a handler may know about a request beyond its body (Kafka's
  ``RequestContext``): API key and version, correlation id, client id and address, the listener
  it arrived on, the authenticated principal, the connection handle, the services it may use,
  and the authorization hook. Built by dispatch (server/dispatch.py) once per request; read-only
  except ``response_bytes`` (what a Fetch reserved in the response-memory budget, which the
  connection converts into its response's charge).
- :class:`ConnectionHandle`: exactly what a handler may do with its connection.
- :class:`ApiDeclaration`: the line at the top of each handler module saying which API and
  versions it serves (``API = ApiDeclaration(ApiKey.FETCH, min_version=4)``) and the API-level
  authorization dispatch checks before calling it. ``handlers/__init__.py`` collects them and
  ApiVersions advertises exactly them.

Layering: handlers/ sits below server/; nothing here imports server/ or the broker. ``services``
is the bundle of broker services a handler may use (handlers/services.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from snakka.protocol.api_keys import ApiKey
from snakka.security.authorizer import (
    SUPPORTED_OPERATIONS,
    AclOperation,
    Action,
    AllowAllAuthorizer,
    AuthorizationResult,
    Authorizer,
    ResourcePattern,
    ResourceType,
    operations_bit_field,
)
from snakka.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from snakka.config import Listener
    from snakka.handlers.services import Services

__all__ = ["ApiDeclaration", "ApiKey", "ConnectionHandle", "RequestContext"]


@dataclass(frozen=True, slots=True)
class ApiDeclaration:
    """The API a handler module serves. ``min_version`` / ``max_version`` narrow the range the
    schemas define (None: the schema's oldest version / newest stable version). ``actions``:
    what dispatch authorizes before the handler runs (e.g. CLUSTER_ACTION on the cluster for an
    inter-broker API); most client APIs declare none and authorize per resource themselves."""

    api_key: ApiKey
    min_version: int | None = None
    max_version: int | None = None
    actions: tuple[Action, ...] = ()

    def __post_init__(self) -> None:
        assert isinstance(self.api_key, ApiKey), self.api_key
        if self.min_version is not None and self.max_version is not None:
            assert self.min_version <= self.max_version, self


class SaslExchange(Protocol):
    """The connection's authentication state as the SASL handlers drive it
    (server/authentication.py's ChannelAuthentication)."""

    mechanism: str | None
    reauthenticating: bool

    def handshake(self, mechanism: str, enabled_mechanisms: Collection[str], version: int,
                  create: Callable[[str], Any] | None = None) -> Any: ...

    def authenticate(self, auth_bytes: bytes, now_ms: int, version: int,
                     reauth_ms: int = 0) -> Any: ...


class ConnectionHandle(Protocol):
    """What a handler may do with the connection its request arrived on. The handle is also a
    hashable identity (share sessions remember the connection that opened them)."""

    def __hash__(self) -> int:
        """Share sessions key on the connection that opened them."""
        ...

    @property
    def peer(self) -> str:
        """``host:port`` of the client (for logs; ``RequestContext.client_address`` is the
        host)."""
        ...

    @property
    def client_software(self) -> tuple[str, str] | None:
        """(name, version) the client's ApiVersions v3+ named (Kafka's ClientInformation);
        None before one (client-metrics subscriptions match on it)."""
        ...

    @property
    def authentication(self) -> SaslExchange:
        """The connection's authentication state (SaslHandshake / SaslAuthenticate)."""
        ...

    def close_with_error(self, reason: str) -> None:
        """Close the connection with a log line (acks=0 produce failures)."""
        ...

    def reserve_response_bytes(self, wanted: int) -> int | None:
        """Reserve response memory before reading from disk (server/memory.py)."""
        ...

    def settle_response_bytes(self, reserved: int, actual: int) -> None:
        """Turn a reservation into the bytes really read."""
        ...

    async def wait_for_response_memory(self, timeout_s: float) -> bool:
        """Wait until response memory is released (True) or the timeout (False)."""
        ...


_ALLOW_ALL = AllowAllAuthorizer()
_NOTHING_DENIED: frozenset[str] = frozenset()
_ALLOWED = AuthorizationResult.ALLOWED


class RequestContext:
    """What a handler may know about the request beyond its body.

    Read-only except ``response_bytes``: the fields are ``Final`` for the type checker (a
    runtime guard would cost a Python-level ``__setattr__`` call per field and request)."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "client_address",
                 "listener", "principal", "connection", "services", "apis", "header",
                 "response_bytes", "_authorizer")

    def __init__(self, api_key: int, api_version: int, correlation_id: int,
                 client_id: str | None, client_address: str, listener: Listener,
                 principal: KafkaPrincipal, connection: ConnectionHandle, services: Services,
                 apis: Mapping[int, Any], header: Any = None,
                 authorizer: Authorizer = _ALLOW_ALL) -> None:
        self.api_key: Final[int] = api_key
        self.api_version: Final[int] = api_version
        self.correlation_id: Final[int] = correlation_id
        self.client_id: Final[str | None] = client_id
        self.client_address: Final[str] = client_address  # the client's host (IP)
        self.listener: Final[Listener] = listener
        self.principal: Final[KafkaPrincipal] = principal
        self.connection: Final[ConnectionHandle] = connection
        self.services: Final[Services] = services
        # The APIs the dispatcher serves (api key -> handlers.Handler): what ApiVersions
        # advertises, so it can never advertise what dispatch would refuse.
        self.apis: Final[Mapping[int, Any]] = apis
        self.header: Final[Any] = header  # the decoded RequestHeader
        # Bytes reserved in the response-memory budget for this request's response (Fetch).
        self.response_bytes = 0
        self._authorizer: Final[Authorizer] = authorizer

    @property
    def listener_name(self) -> str:
        return self.listener.name

    def authorize(self, actions: Sequence[Action]) -> list[AuthorizationResult]:
        """Ask the authorizer about ``actions`` for this request (one result per action)."""
        results = self._authorizer.authorize(self, actions)
        assert len(results) == len(actions), (actions, results)
        return results

    def allowed(self, operation: AclOperation, resource_type: ResourceType,
                names: Sequence[str], *, log_if_denied: bool = True) -> list[bool]:
        """Whether ``operation`` is allowed on each named resource (one authorizer call);
        ``log_if_denied=False`` for resources a request merely filters (Kafka's audit rule)."""
        if not names:
            return []
        actions = [Action(operation, ResourcePattern(resource_type, n),
                          log_if_denied=log_if_denied) for n in names]
        return [r is AuthorizationResult.ALLOWED for r in self.authorize(actions)]

    @property
    def allows_everything(self) -> bool:
        """True when the authorizer is the :class:`AllowAllAuthorizer` (no
        ``authorizer.class.name``): handlers skip building per-resource actions altogether."""
        return type(self._authorizer) is AllowAllAuthorizer

    def denied(self, operation: AclOperation, resource_type: ResourceType,
               names: Iterable[str], *, log_if_denied: bool = True) -> frozenset[str]:
        """The names among ``names`` on which ``operation`` is denied, in ONE authorizer call
        (Kafka's ``AuthHelper.filterByAuthorized``: each distinct name once, with its reference
        count). With the allow-all authorizer this is one type check and nothing else (the hot
        paths, Produce and Fetch, pay nothing per topic). ``log_if_denied=False`` for resources
        a request merely filters (Kafka's audit rule)."""
        if type(self._authorizer) is AllowAllAuthorizer:
            return _NOTHING_DENIED
        counts: dict[str, int] = {}
        for n in names:
            counts[n] = counts.get(n, 0) + 1
        if not counts:
            return _NOTHING_DENIED
        actions = [Action(operation, ResourcePattern(resource_type, n), c,
                          log_if_denied=log_if_denied) for n, c in counts.items()]
        return frozenset(n for n, r in zip(counts, self.authorize(actions), strict=True)
                         if r is not _ALLOWED)

    def is_allowed(self, operation: AclOperation, resource_type: ResourceType, name: str, *,
                   log_if_denied: bool = True) -> bool:
        """One action on one resource (Kafka's ``AuthHelper.authorize``)."""
        if type(self._authorizer) is AllowAllAuthorizer:
            return True
        action = Action(operation, ResourcePattern(resource_type, name),
                        log_if_denied=log_if_denied)
        return self.authorize([action])[0] is _ALLOWED

    def allowed_by_resource_type(self, operation: AclOperation,
                                 resource_type: ResourceType) -> bool:
        """Kafka's ``Authorizer.authorizeByResourceType``: whether ``operation`` is allowed on
        at least one resource of ``resource_type`` (InitProducerId without a transactional id:
        WRITE on any topic stands in for IDEMPOTENT_WRITE on the cluster)."""
        authorizer = self._authorizer
        if type(authorizer) is AllowAllAuthorizer:
            return True
        return authorizer.authorize_by_resource_type(self, operation, resource_type) is _ALLOWED

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """The ``authorized_operations`` bit field of one resource (Kafka's
        ``AuthHelper.authorizedOperations``: every operation the resource type supports, asked
        without audit logging)."""
        ops = SUPPORTED_OPERATIONS[resource_type]
        if type(self._authorizer) is AllowAllAuthorizer:
            return operations_bit_field(ops)
        pattern = ResourcePattern(resource_type, name)
        actions = [Action(op, pattern, log_if_allowed=False, log_if_denied=False) for op in ops]
        return operations_bit_field([op for op, r in zip(ops, self.authorize(actions),
                                                         strict=True) if r is _ALLOWED])

    def __repr__(self) -> str:
        return (f"RequestContext(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r}, "
                f"client_address={self.client_address!r}, listener={self.listener_name}, "
                f"principal={self.principal})")
