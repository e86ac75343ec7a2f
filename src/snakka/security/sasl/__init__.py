"""SASL mechanisms, server side: sans-I/O state machines (Kafka's ``SaslServer`` s).

What it owns: one module per mechanism (plain.py: RFC 4616; scram.py: RFC 5802/7677;
oauthbearer.py: RFC 7628 with Kafka's unsecured JWS validator and JWKS-based JWT validation)
and the broker's SASL configuration per
listener (config.py: which mechanisms a listener enables, PLAIN users, the OAUTHBEARER
validator). A mechanism takes the client's bytes and answers the next challenge, or raises
:class:`SaslAuthenticationFailed`; it knows nothing of connections, frames or time sources
beyond the ``now_ms`` it is given. The connection's state (handshake, re-authentication,
session lifetime) is server/authentication.py's; the SCRAM credentials are the metadata log's
(metadata/core.py), reached through a lookup function.
"""

from __future__ import annotations

from typing import Protocol

from snakka.protocol.errors import ErrorCode

__all__ = ["SUPPORTED_MECHANISMS", "IllegalSaslState", "SaslAuthenticationFailed",
           "SaslServer"]

# The mechanisms snakka serves (GSSAPI/Kerberos is refused at start).
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class IllegalSaslState(Exception):
    """A request or transition the authentication state does not allow (ILLEGAL_SASL_STATE)."""

    error_code = ErrorCode.ILLEGAL_SASL_STATE


class SaslAuthenticationFailed(Exception):
    """The exchange failed. ``str(exc)`` is the message the client gets (Kafka's words, never a
    secret); ``reason`` what the broker logs (may say more, never the password)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class SaslServer(Protocol):
    """One mechanism's server side for one exchange."""

    mechanism: str

    @property
    def complete(self) -> bool:
        """The exchange succeeded (``authorization_id`` is known)."""
        ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user name (``User:<name>`` is the principal)."""
        ...

    @property
    def attempted_user(self) -> str | None:
        """The user the client claimed (for the log line of a failure), if known yet."""
        ...

    @property
    def credential_expiry_ms(self) -> int | None:
        """When the credential stops being valid (OAUTHBEARER: the token's ``exp``), if ever."""
        ...

    def evaluate(self, response: bytes, now_ms: int) -> bytes:
        """The client's next message -> the server's challenge (b"" when none)."""
        ...
