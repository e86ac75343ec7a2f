"""A connection's authentication state (Kafka's ``SaslServerAuthenticator`` states), sans I/O.

What it owns: which requests a connection may send before it is authenticated, and the
transitions of the SASL exchange. It does not implement a SASL mechanism (issue 14 adds PLAIN,
SCRAM and OAUTHBEARER and the SaslHandshake / SaslAuthenticate handlers); it is the state those
handlers drive and dispatch checks (server/dispatch.py).

States and transitions (Kafka's rules, KIP-43 and KIP-152)::

    PLAINTEXT / SSL listener:  AUTHENTICATED(User:ANONYMOUS) from the start.

    SASL listener:
      UNAUTHENTICATED --ApiVersions (valid)--> VERSIONS_RECEIVED
      UNAUTHENTICATED | VERSIONS_RECEIVED --SaslHandshake(enabled mechanism)--> AUTHENTICATING
      UNAUTHENTICATED | VERSIONS_RECEIVED --SaslHandshake(other mechanism)--> FAILED
      AUTHENTICATING --SaslAuthenticate (exchange complete)--> AUTHENTICATED(principal)
      AUTHENTICATING --SaslAuthenticate (bad credentials)--> FAILED

Before authentication only ApiVersions (once, in UNAUTHENTICATED), SaslHandshake and, after the
handshake, SaslAuthenticate are accepted; any other request closes the connection (Kafka:
"Unexpected Kafka request of type X during SASL handshake", IllegalSaslStateException). A FAILED
connection accepts nothing: the failure response is sent, then the connection is closed.
Re-authentication (KIP-368) is not modelled. A transition that the rules do not allow raises
:class:`IllegalSaslState` (a bug in the caller, or a client to disconnect).
"""

from __future__ import annotations

from collections.abc import Collection
from enum import Enum

from snakka.protocol.api_keys import ApiKey
from snakka.protocol.errors import ErrorCode
from snakka.security.principal import ANONYMOUS, KafkaPrincipal, SecurityProtocol

__all__ = ["AuthState", "ChannelAuthentication", "IllegalSaslState"]


class AuthState(Enum):
    UNAUTHENTICATED = "UNAUTHENTICATED"      # nothing yet: ApiVersions or SaslHandshake
    VERSIONS_RECEIVED = "VERSIONS_RECEIVED"  # after ApiVersions: SaslHandshake only
    AUTHENTICATING = "AUTHENTICATING"        # mechanism chosen: SaslAuthenticate only
    AUTHENTICATED = "AUTHENTICATED"
    FAILED = "FAILED"


class IllegalSaslState(Exception):
    """A request or transition the authentication state does not allow (ILLEGAL_SASL_STATE)."""

    error_code = ErrorCode.ILLEGAL_SASL_STATE


_ALLOWED_BEFORE_AUTH: dict[AuthState, frozenset[int]] = {
    AuthState.UNAUTHENTICATED: frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}),
    AuthState.VERSIONS_RECEIVED: frozenset({ApiKey.SASL_HANDSHAKE}),
    AuthState.AUTHENTICATING: frozenset({ApiKey.SASL_AUTHENTICATE}),
    AuthState.FAILED: frozenset(),
}


class ChannelAuthentication:
    """The authentication state of one connection."""

    __slots__ = ("state", "principal", "mechanism", "authenticate_headers", "failure")

    def __init__(self, security_protocol: SecurityProtocol) -> None:
        self.mechanism: str | None = None
        # SaslHandshake v1+: tokens travel in SaslAuthenticate requests (Kafka headers); v0
        # sent raw tokens, which only issue 14's mechanisms may choose to support.
        self.authenticate_headers = False
        self.failure: str | None = None
        if security_protocol.uses_sasl:
            self.state = AuthState.UNAUTHENTICATED
            self.principal: KafkaPrincipal | None = None
        else:
            self.state = AuthState.AUTHENTICATED
            self.principal = ANONYMOUS

    @property
    def authenticated(self) -> bool:
        return self.state is AuthState.AUTHENTICATED

    def check_request(self, api_key: int) -> str | None:
        """None if a request with this API key may be processed now, else why the connection
        must be closed (Kafka closes on any other request during the SASL exchange)."""
        if self.state is AuthState.AUTHENTICATED:
            return None
        if api_key in _ALLOWED_BEFORE_AUTH[self.state]:
            return None
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = f"API key {api_key}"
        if self.state is AuthState.FAILED:
            return f"request of type {name} after failed authentication ({self.failure})"
        return f"Unexpected Kafka request of type {name} during SASL handshake"

    # -- transitions ---------------------------------------------------------------------
    def api_versions_received(self, valid: bool) -> None:
        """An ApiVersions request was answered. A valid one before the handshake moves on to
        "SaslHandshake next" (Kafka allows one ApiVersions per SASL exchange); an invalid one
        (bad client software name) was answered with INVALID_REQUEST and changes nothing."""
        if self.state is AuthState.AUTHENTICATED or not valid:
            return
        self._expect(AuthState.UNAUTHENTICATED, "ApiVersions")
        self.state = AuthState.VERSIONS_RECEIVED

    def handshake(self, mechanism: str, enabled_mechanisms: Collection[str],
                  version: int) -> ErrorCode:
        """SaslHandshake: choose ``mechanism``. Returns the response's error code: NONE, or
        UNSUPPORTED_SASL_MECHANISM (the connection then fails: the response is sent and the
        connection closed, as Kafka does)."""
        self._expect((AuthState.UNAUTHENTICATED, AuthState.VERSIONS_RECEIVED), "SaslHandshake")
        if mechanism not in enabled_mechanisms:
            self._fail(f"unsupported SASL mechanism {mechanism!r}")
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self.authenticate_headers = version >= 1
        self.state = AuthState.AUTHENTICATING
        return ErrorCode.NONE

    def authentication_succeeded(self, principal: KafkaPrincipal) -> None:
        """The mechanism's exchange completed: the connection acts as ``principal``."""
        self._expect(AuthState.AUTHENTICATING, "SaslAuthenticate")
        self.principal = principal
        self.state = AuthState.AUTHENTICATED

    def authentication_failed(self, reason: str) -> None:
        """The exchange failed (SASL_AUTHENTICATION_FAILED is answered, then the close)."""
        self._expect(AuthState.AUTHENTICATING, "SaslAuthenticate")
        self._fail(reason)

    @property
    def must_close(self) -> bool:
        """Authentication failed: close once the failure response is written."""
        return self.state is AuthState.FAILED

    def _fail(self, reason: str) -> None:
        self.state = AuthState.FAILED
        self.failure = reason
        self.principal = None

    def _expect(self, states: AuthState | tuple[AuthState, ...], what: str) -> None:
        allowed = states if isinstance(states, tuple) else (states,)
        if self.state not in allowed:
            raise IllegalSaslState(f"{what} not expected in authentication state "
                                   f"{self.state.name}")
