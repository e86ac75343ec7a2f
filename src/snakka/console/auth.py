"""Who is using the console: HTTP Basic credentials checked against the broker's SASL users,
and the request-forgery guard of the console's forms.

Authentication (docs/console.md): when the broker has a SASL listener, every console request
needs ``Authorization: Basic`` credentials of a user a Kafka client could log in as on one of
them: a PLAIN user of a listener's JAAS line (``user_<name>="<password>"``) when PLAIN is
enabled there, or a SCRAM user (credentials in the metadata log, AlterUserScramCredentials)
when SCRAM-SHA-256/512 is. The principal is then ``User:<name>``, as after the SASL exchange,
and the broker's authorizer decides what that principal may see and do. Without a SASL
listener the console user is ``User:ANONYMOUS``, as a PLAINTEXT client is (and ACLs, when an
authorizer is configured, apply to it).

SCRAM passwords are checked by deriving the stored key (PBKDF2, thousands of iterations) in a
worker thread; a success is remembered for :data:`CONSOLE_AUTH_CACHE_S` (keyed by user, a
digest of the password and the credential itself, so a changed or deleted credential stops
matching at once) so a page's polling does not pay it per request.

Forms (every action: produce, reset offsets, the administration) carry a token derived from a
per-process secret and the principal: another site cannot make a logged-in browser post them
(CSRF). Cross-site requests (``Sec-Fetch-Site: cross-site``, or an ``Origin`` that is not the
console's) are refused for every POST as well.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping

from snakka.security.principal import ANONYMOUS, KafkaPrincipal
from snakka.util.scram import (
    ScramCredential,
    ScramMechanism,
    client_key,
    salted_password,
    stored_key,
)

__all__ = ["CONSOLE_AUTH_CACHE_S", "ConsoleAuthenticator", "CsrfTokens"]

# How long a verified SCRAM password is remembered (per user, password digest and credential).
CONSOLE_AUTH_CACHE_S = 300.0
# At most this many remembered successes (oldest dropped first).
CONSOLE_AUTH_CACHE_ENTRIES = 1024

ScramLookup = Callable[[str, ScramMechanism], ScramCredential | None]


class ConsoleAuthenticator:
    """``enabled`` is False without SASL listeners: every request is ``User:ANONYMOUS``."""

    def __init__(self, enabled: bool, plain_users: Mapping[str, str],
                 scram_mechanisms: list[ScramMechanism], scram_lookup: ScramLookup | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.plain_users = dict(plain_users)
        self.scram_mechanisms = scram_mechanisms
        self.scram_lookup = scram_lookup
        self._clock = clock
        self._verified: dict[tuple[str, bytes, ScramCredential], float] = {}

    async def authenticate(self, authorization: str | None) -> KafkaPrincipal | None:
        """The principal of an ``Authorization`` header value; None: refused (answer 401)."""
        if not self.enabled:
            return ANONYMOUS
        creds = _basic(authorization)
        if creds is None:
            return None
        user, password = creds
        if not user or not password:
            return None
        expected = self.plain_users.get(user)
        if expected is not None and hmac.compare_digest(expected.encode(), password.encode()):
            return KafkaPrincipal("User", user)
        if self.scram_lookup is not None:
            for mech in self.scram_mechanisms:
                cred = self.scram_lookup(user, mech)
                if cred is not None and await self._scram_ok(mech, cred, user, password):
                    return KafkaPrincipal("User", user)
        return None

    async def _scram_ok(self, mech: ScramMechanism, cred: ScramCredential, user: str,
                        password: str) -> bool:
        digest = hashlib.sha256(password.encode()).digest()
        key = (user, digest, cred)
        now = self._clock()
        until = self._verified.get(key)
        if until is not None and until > now:
            return True

        def derive() -> bytes:
            salted = salted_password(mech, password.encode(), cred.salt, cred.iterations)
            return stored_key(mech, client_key(mech, salted))

        derived = await asyncio.get_running_loop().run_in_executor(None, derive)
        if not hmac.compare_digest(derived, cred.stored_key):
            return False
        if len(self._verified) >= CONSOLE_AUTH_CACHE_ENTRIES:
            self._verified.pop(next(iter(self._verified)))
        self._verified[key] = now + CONSOLE_AUTH_CACHE_S
        return True


def _basic(authorization: str | None) -> tuple[str, str] | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        text = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = text.partition(":")
    return (user, password) if sep else None


class CsrfTokens:
    """Form tokens: HMAC(per-process secret, principal). Valid until the broker restarts."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def token(self, principal: KafkaPrincipal) -> str:
        return hmac.new(self._secret, str(principal).encode(), "sha256").hexdigest()[:32]

    def valid(self, principal: KafkaPrincipal, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.token(principal), token or "")
