"""SASL/PLAIN, server side (RFC 4616; Kafka's ``PlainSaslServer``).

The client's single message is ``[authzid] NUL authcid NUL passwd``. Users and passwords come
from the JAAS options ``user_<name>="<password>"`` (Kafka's ``PlainServerCallbackHandler``); a
password is compared in constant time and never logged. An authorization id other than the user
name is refused, as Kafka does.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from snakka.security.sasl import SaslAuthenticationFailed

__all__ = ["PlainServer"]


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._user: str | None = None
        self._complete = False

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        assert self._complete and self._user is not None
        return self._user

    @property
    def attempted_user(self) -> str | None:
        return self._user

    @property
    def credential_expiry_ms(self) -> int | None:
        return None

    def evaluate(self, response: bytes, now_ms: int) -> bytes:
        if self._complete:
            raise SaslAuthenticationFailed("Authentication failed: PLAIN exchange already "
                                           "complete")
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("Authentication failed: Invalid SASL/PLAIN response: "
                                           "not UTF-8") from None
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens, "
                                           f"got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        self._user = user
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationFailed(
                "Authentication failed: Invalid username or password",
                "unknown user" if expected is None else "wrong password")
        if authzid and authzid != user:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an "
                                           "authorization id that is different from username")
        self._complete = True
        return b""
