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
      AUTHENTICATED --SaslHandshake v1+ (same mechanism)--> AUTHENTICATING (re-authentication)

Before authentication only ApiVersions (once, in UNAUTHENTICATED), SaslHandshake and, after the
handshake, SaslAuthenticate are accepted; any other request closes the connection (Kafka:
"Unexpected Kafka request of type X during SASL handshake", IllegalSaslStateException). A FAILED
connection accepts nothing: the failure response is sent, then the connection is closed.

The exchange itself: :meth:`ChannelAuthentication.handshake` creates the mechanism's server
(snakka.security.sasl, sans-I/O) and :meth:`ChannelAuthentication.authenticate` feeds it each
SaslAuthenticate's bytes; the principal is ``User:<authorization id>``.

Re-authentication (KIP-368, ``connections.max.reauth.ms``): a successful SaslAuthenticate v1+
gives the session a lifetime (the smaller of ``connections.max.reauth.ms`` and, for
OAUTHBEARER, the token's remaining life; 0 = none). Once it has passed, any request but a
SaslHandshake closes the connection (Kafka's rule: "expired session"). A client re-authenticates
with SaslHandshake + SaslAuthenticate on the authenticated connection: same mechanism, same
principal (else the connection fails); the previous principal serves requests until then.

A transition that the rules do not allow raises :class:`IllegalSaslState` (a bug in the caller,
or a client to disconnect).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import Enum

from snakka.protocol.api_keys import ApiKey
from snakka.protocol.errors import ErrorCode
from snakka.security.principal import ANONYMOUS, KafkaPrincipal, SecurityProtocol
from snakka.security.sasl import IllegalSaslState, SaslAuthenticationFailed, SaslServer

__all__ = ["AuthState", "AuthenticateResult", "ChannelAuthentication", "IllegalSaslState"]


class AuthState(Enum):
    UNAUTHENTICATED = "UNAUTHENTICATED"      # nothing yet: ApiVersions or SaslHandshake
    VERSIONS_RECEIVED = "VERSIONS_RECEIVED"  # after ApiVersions: SaslHandshake only
    AUTHENTICATING = "AUTHENTICATING"        # mechanism chosen: SaslAuthenticate only
    AUTHENTICATED = "AUTHENTICATED"
    FAILED = "FAILED"


_ALLOWED_BEFORE_AUTH: dict[AuthState, frozenset[int]] = {
    AuthState.UNAUTHENTICATED: frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}),
    AuthState.VERSIONS_RECEIVED: frozenset({ApiKey.SASL_HANDSHAKE}),
    AuthState.AUTHENTICATING: frozenset({ApiKey.SASL_AUTHENTICATE}),
    AuthState.FAILED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class AuthenticateResult:
    """What a SaslAuthenticate is answered with (``failed``: then the connection closes)."""

    error_code: ErrorCode
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0
    user: str | None = None  # who tried (for the failure's log line)
    reason: str | None = None  # why it failed (logged, never sent)

    @property
    def failed(self) -> bool:
        return self.error_code != ErrorCode.NONE


class ChannelAuthentication:
    """The authentication state of one connection."""

    __slots__ = ("state", "principal", "mechanism", "authenticate_headers", "failure", "server",
                 "session_expires_ms", "reauthenticating", "_sasl")

    def __init__(self, security_protocol: SecurityProtocol) -> None:
        self._sasl = security_protocol.uses_sasl
        self.server: SaslServer | None = None  # the mechanism of the exchange in progress
        # When the session expires (ms, the clock authenticate() was given); None: never.
        self.session_expires_ms: int | None = None
        self.reauthenticating = False
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

    def check_request(self, api_key: int, now_ms: int | None = None) -> str | None:
        """None if a request with this API key may be processed now, else why the connection
        must be closed (Kafka closes on any other request during the SASL exchange, and on any
        request but a SaslHandshake once the session expired)."""
        if self.state is AuthState.AUTHENTICATED:
            expires = self.session_expires_ms
            if expires is None or now_ms is None or now_ms < expires \
                    or api_key == ApiKey.SASL_HANDSHAKE:
                return None
            return (f"SASL session of {self.principal} expired (connections.max.reauth.ms) and "
                    f"a request other than re-authentication ({_api_name(api_key)}) arrived")
        if api_key in _ALLOWED_BEFORE_AUTH[self.state]:
            return None
        name = _api_name(api_key)
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
                  version: int,
                  create: Callable[[str], SaslServer] | None = None) -> ErrorCode:
        """SaslHandshake: choose ``mechanism`` (``create`` makes its server). Returns the
        response's error code: NONE, or UNSUPPORTED_SASL_MECHANISM (the connection then fails:
        the response is sent and the connection closed, as Kafka does). On an authenticated
        SASL connection this starts a re-authentication (KIP-368: v1+, same mechanism)."""
        if self.state is AuthState.AUTHENTICATED and self._sasl and version >= 1:
            if mechanism != self.mechanism:
                self._fail(f"re-authentication with mechanism {mechanism!r} after "
                           f"{self.mechanism!r} (it must not change)")
                return ErrorCode.UNSUPPORTED_SASL_MECHANISM
            self.reauthenticating = True
        else:
            self._expect((AuthState.UNAUTHENTICATED, AuthState.VERSIONS_RECEIVED),
                         "SaslHandshake")
        if mechanism not in enabled_mechanisms:
            self._fail(f"unsupported SASL mechanism {mechanism!r}")
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self.authenticate_headers = version >= 1
        self.server = create(mechanism) if create is not None else None
        self.state = AuthState.AUTHENTICATING
        return ErrorCode.NONE

    def authenticate(self, auth_bytes: bytes, now_ms: int, version: int,
                     reauth_ms: int = 0) -> AuthenticateResult:
        """SaslAuthenticate: one step of the mechanism's exchange. A failure moves to FAILED
        (answer, then close); success to AUTHENTICATED with the session's lifetime (v1+)."""
        self._expect(AuthState.AUTHENTICATING, "SaslAuthenticate")
        server = self.server
        if server is None:
            raise IllegalSaslState("SaslAuthenticate without a mechanism server")
        try:
            challenge = server.evaluate(auth_bytes, now_ms)
        except SaslAuthenticationFailed as e:
            self._fail(e.reason)
            return AuthenticateResult(ErrorCode.SASL_AUTHENTICATION_FAILED, str(e), b"",
                                      user=server.attempted_user, reason=e.reason)
        except Exception as e:  # noqa: BLE001 - a mechanism bug must not leave the state open
            self._fail(f"{server.mechanism} failed: {type(e).__name__}: {e}")
            return AuthenticateResult(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                f"Authentication failed during authentication with SASL mechanism "
                f"{server.mechanism}", b"", user=server.attempted_user, reason=self.failure)
        if not server.complete:
            return AuthenticateResult(ErrorCode.NONE, None, challenge)
        principal = KafkaPrincipal("User", server.authorization_id)
        if self.reauthenticating and principal != self.principal:
            reason = (f"Cannot change principals during re-authentication from "
                      f"{self.principal}: {principal}")
            self._fail(reason)
            return AuthenticateResult(ErrorCode.SASL_AUTHENTICATION_FAILED, reason, b"",
                                      user=server.attempted_user, reason=reason)
        lifetime = 0
        if reauth_ms > 0 and version >= 1:
            lifetime = reauth_ms
            expiry = server.credential_expiry_ms
            if expiry is not None:
                lifetime = max(0, min(lifetime, expiry - now_ms))
        self.session_expires_ms = now_ms + lifetime if lifetime > 0 else None
        self.server = None
        self.reauthenticating = False
        self.principal = principal
        self.state = AuthState.AUTHENTICATED
        return AuthenticateResult(ErrorCode.NONE, None, challenge, lifetime)

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
        self.server = None

    def _expect(self, states: AuthState | tuple[AuthState, ...], what: str) -> None:
        allowed = states if isinstance(states, tuple) else (states,)
        if self.state not in allowed:
            raise IllegalSaslState(f"{what} not expected in authentication state "
                                   f"{self.state.name}")


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"
