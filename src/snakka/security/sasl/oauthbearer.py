"""SASL/OAUTHBEARER, server side (RFC 7628; Kafka's ``OAuthBearerSaslServer``) and its two token
validators.

The client's initial response is ``n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[k=v\\x01]*\\x01``.
The token is validated by:

- :class:`UnsecuredJwsValidator` (Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``, the
  default when no JWKS is configured; for development): a JWS with ``{"alg":"none"}`` and an
  empty signature, claims ``sub`` (or ``unsecuredValidatorPrincipalClaimName``), ``exp``
  (required), ``iat`` (optional), an optional required scope, a clock skew in ms;
- :class:`JwksValidator` (Kafka's ``BrokerJwtValidator``): a signed JWT checked against the keys
  of ``sasl.oauthbearer.jwks.endpoint.url`` (``file://`` re-read when the file changes;
  ``http(s)://`` fetched at start, then kept fresh by :class:`JwksRefresher`),
  ``sasl.oauthbearer.expected.audience`` / ``expected.issuer`` / ``sub.claim.name`` /
  ``scope.claim.name`` / ``clock.skew.seconds``. Unsigned (``alg: none``) and HMAC tokens are
  refused.

An http(s) JWKS is refreshed as Kafka's ``RefreshingHttpsJwks`` does: every
``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and at once when a token names a key id the
keys lack (at most once a minute per key id, :data:`MISSING_KEY_ID_RECHECK_MS`, for at most
:data:`MISSING_KEY_ID_CACHE_MAX_ENTRIES` ids; ids longer than :data:`MISSING_KEY_ID_MAX_LENGTH`
never start one). A failed fetch is retried after ``...retry.backoff.ms``, doubling, for at
most ``...retry.backoff.max.ms`` in all; the keys already known stay in use. The fetches run in
one background thread (:class:`JwksRefresher`), never in the event loop: validation only reads
the current keys, so the token whose unknown key id started a fetch is refused (as Kafka's
VerificationKeyResolver refuses it), and one sent after the fetch is checked against the new
keys. Expedited fetches are spaced by at least ``...retry.backoff.ms``, so a flood of tokens
with made-up key ids cannot make the broker hammer the identity provider.

A token that fails validation is answered, as RFC 7628 and Kafka do, with the error JSON
(``{"status":"invalid_token"}``) as a challenge; the client answers ``\\x01`` and the exchange
then fails with that JSON as the error message. Extensions are accepted and ignored (Kafka
ignores extensions no callback validates).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from snakka.security.sasl import SaslAuthenticationFailed

__all__ = ["JwksRefresher", "JwksValidator", "OAuthBearerServer", "TokenInvalid", "TokenValidator",
           "UnsecuredJwsValidator", "ValidatedToken", "parse_client_initial_response"]

# Bound on a JWKS document read from a file or URL.
MAX_JWKS_BYTES = 1024 * 1024
# How long one JWKS fetch over http(s) may take.
JWKS_FETCH_TIMEOUT_S = 10.0
# Unknown key ids that start an immediate refresh (Kafka's RefreshingHttpsJwks constants): an
# id starts one at most once per MISSING_KEY_ID_RECHECK_MS; the ids remembered are bounded
# (the oldest forgotten first); longer ids are ignored.
MISSING_KEY_ID_RECHECK_MS = 60_000
MISSING_KEY_ID_CACHE_MAX_ENTRIES = 16
MISSING_KEY_ID_MAX_LENGTH = 1000

log = logging.getLogger("snakka.security")


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    principal_name: str
    lifetime_ms: int  # the token's exp, in ms since the epoch


class TokenInvalid(Exception):
    """Why a token is refused (logged); ``status``/``scope`` go into the RFC 7628 error JSON."""

    def __init__(self, reason: str, status: str = "invalid_token",
                 scope: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.scope = scope


class TokenValidator(Protocol):
    def validate(self, token: str, now_ms: int) -> ValidatedToken: ...


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _json_part(part: str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(_b64url(part))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise TokenInvalid(f"the token's {what} is not base64url JSON") from None
    if not isinstance(obj, dict):
        raise TokenInvalid(f"the token's {what} is not a JSON object")
    return obj


def _number(claims: Mapping[str, Any], name: str, required: bool) -> float | None:
    v = claims.get(name)
    if v is None:
        if required:
            raise TokenInvalid(f"required claim {name!r} is missing")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TokenInvalid(f"claim {name!r} is not a number")
    return float(v)


def _scopes(claims: Mapping[str, Any], name: str) -> set[str]:
    v = claims.get(name)
    if v is None:
        return set()
    if isinstance(v, str):
        return set(v.split())
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return set(v)
    raise TokenInvalid(f"claim {name!r} is neither a string nor a list of strings")


class UnsecuredJwsValidator:
    """Kafka's unsecured JWS validator (options from the OAuthBearerLoginModule's JAAS line)."""

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        options = options or {}
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName") or "sub"
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName") or "scope"
        self.required_scope = set((options.get("unsecuredValidatorRequiredScope") or "").split())
        try:
            self.clock_skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs")
                                     or 0)
        except ValueError:
            raise ValueError("unsecuredValidatorAllowableClockSkewMs is not an integer") \
                from None

    def validate(self, token: str, now_ms: int) -> ValidatedToken:
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenInvalid("an unsecured JWS has three parts separated by '.'")
        if parts[2]:
            raise TokenInvalid("an unsecured JWS must have an empty signature")
        header = _json_part(parts[0], "header")
        if header.get("alg") != "none":
            raise TokenInvalid("an unsecured JWS must have alg none")
        claims = _json_part(parts[1], "claims")
        sub = claims.get(self.principal_claim)
        if not isinstance(sub, str) or not sub.strip():
            raise TokenInvalid(f"required claim {self.principal_claim!r} is missing or empty")
        exp = _number(claims, "exp", True)
        assert exp is not None
        iat = _number(claims, "iat", False)
        if now_ms - self.clock_skew_ms >= exp * 1000:
            raise TokenInvalid(f"the token expired at {exp}")
        if iat is not None and iat * 1000 > now_ms + self.clock_skew_ms:
            raise TokenInvalid(f"the token is issued in the future (iat {iat})")
        missing = self.required_scope - _scopes(claims, self.scope_claim)
        if missing:
            raise TokenInvalid(f"the token lacks the required scope {sorted(missing)}",
                               status="insufficient_scope",
                               scope=" ".join(sorted(self.required_scope)))
        return ValidatedToken(sub, int(exp * 1000))


def _read_jwks(url: str) -> dict[str, Any]:
    # urllib.request (http.client, email.parser, ...) only where a JWKS is read: importing it
    # with this module cost every broker start ~10 ms, OAUTHBEARER configured or not.
    import urllib.parse
    import urllib.request

    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = urllib.request.url2pathname(parsed.path)
        with open(path, "rb") as f:
            data = f.read(MAX_JWKS_BYTES + 1)
    elif parsed.scheme in ("http", "https"):
        with urllib.request.urlopen(url, timeout=JWKS_FETCH_TIMEOUT_S) as resp:  # noqa: S310
            data = resp.read(MAX_JWKS_BYTES + 1)
    else:
        raise ValueError(f"sasl.oauthbearer.jwks.endpoint.url {url!r}: only file://, http:// "
                         "and https:// URLs are supported")
    if len(data) > MAX_JWKS_BYTES:
        raise ValueError(f"the JWKS at {url} is larger than {MAX_JWKS_BYTES} bytes")
    doc = json.loads(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise ValueError(f"the JWKS at {url} has no 'keys' list")
    return doc


def _signing_keys(doc: Mapping[str, Any]) -> dict[str | None, Any]:
    """kid -> PyJWK of a JWKS document's signing keys (keys PyJWT cannot use are skipped)."""
    import jwt  # PyJWT

    keys: dict[str | None, Any] = {}
    for jwk in doc["keys"]:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK.from_dict(jwk)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, KeyError):
            continue  # a key type PyJWT cannot use: not a signing key for us
        keys[jwk.get("kid")] = key
    return keys


class JwksRefresher:
    """Keeps an http(s) JWKS fresh from one daemon thread (see the module docstring).

    The thread replaces ``keys`` (one attribute assignment: readers in the event loop see the
    old or the new dict, never a mix). :meth:`expedite` is called from the event loop and only
    sets a flag and wakes the thread. :meth:`close` stops the thread (the broker's stop)."""

    def __init__(self, url: str, keys: dict[str | None, Any], *, refresh_ms: int,
                 retry_backoff_ms: int, retry_backoff_max_ms: int,
                 fetch: Callable[[str], dict[str, Any]] = _read_jwks,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self.keys = keys
        self.refresh_ms = refresh_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.refreshes = 0  # completed fetches (tests, metrics)
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()  # guards _missing and _expedite
        self._missing: OrderedDict[str, float] = OrderedDict()  # kid -> next allowed check
        self._expedite = False
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._last_fetch_end = clock()
        self._thread = threading.Thread(target=self._run, name=f"jwks-refresh {url}",
                                        daemon=True)
        self._thread.start()

    def expedite(self, kid: str | None) -> bool:
        """A token named a key id the keys lack: fetch at once, unless that id asked within
        the last MISSING_KEY_ID_RECHECK_MS. True if a fetch was asked for."""
        if kid is None or len(kid) > MISSING_KEY_ID_MAX_LENGTH:
            return False
        now_ms = self._clock() * 1000
        with self._lock:
            next_check = self._missing.get(kid)
            if next_check is not None and next_check > now_ms:
                return False
            self._missing[kid] = now_ms + MISSING_KEY_ID_RECHECK_MS
            self._missing.move_to_end(kid)
            while len(self._missing) > MISSING_KEY_ID_CACHE_MAX_ENTRIES:
                self._missing.popitem(last=False)
            self._expedite = True
        self._wake.set()
        return True

    def close(self) -> None:
        self._stopped.set()
        self._wake.set()

    def _run(self) -> None:
        next_periodic = self._clock() + self.refresh_ms / 1000
        while not self._stopped.is_set():
            self._wake.wait(max(0.0, next_periodic - self._clock()))
            if self._stopped.is_set():
                return
            self._wake.clear()
            now = self._clock()
            with self._lock:
                expedited, self._expedite = self._expedite, False
            if not expedited and now < next_periodic:
                continue
            if expedited:
                # Spaced by retry.backoff.ms after the previous fetch (hostile key ids).
                gap = self._last_fetch_end + self.retry_backoff_ms / 1000 - now
                if gap > 0 and self._stopped.wait(gap):
                    return
            if now >= next_periodic:
                # Fixed rate, as Kafka's scheduleAtFixedRate (missed periods are not repeated).
                while next_periodic <= now:
                    next_periodic += self.refresh_ms / 1000
            self._refresh()

    def _refresh(self) -> None:
        """One fetch, retried with exponential backoff within retry.backoff.max.ms."""
        deadline = self._clock() + self.retry_backoff_max_ms / 1000
        wait = self.retry_backoff_ms / 1000
        while True:
            try:
                keys = _signing_keys(self._fetch(self.url))
            except Exception as e:  # noqa: BLE001 - any failure: keep the keys, retry
                remaining = deadline - self._clock()
                if remaining <= 0:
                    log.warning("JWKS refresh from %s failed, keeping the %d keys known: %s",
                                self.url, len(self.keys), e)
                    break
                if self._stopped.wait(min(wait, remaining)):
                    return
                wait *= 2
                continue
            if set(keys) != set(self.keys):
                log.info("JWKS from %s refreshed: key ids %s", self.url,
                         sorted(str(k) for k in keys))
            self.keys = keys
            self.refreshes += 1
            break
        self._last_fetch_end = self._clock()


class JwksValidator:
    """Signed JWTs against a JWKS (Kafka's ``sasl.oauthbearer.*`` broker configs)."""

    def __init__(self, jwks_url: str, *, expected_audience: list[str] | None = None,
                 expected_issuer: str | None = None, sub_claim: str = "sub",
                 scope_claim: str = "scope", clock_skew_s: int = 30,
                 refresh_ms: int = 3_600_000, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 10_000,
                 fetch: Callable[[str], dict[str, Any]] = _read_jwks) -> None:
        self.url = jwks_url
        self.expected_audience = expected_audience or None
        self.expected_issuer = expected_issuer or None
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self.clock_skew_s = clock_skew_s
        import urllib.parse
        import urllib.request  # see _read_jwks

        parsed = urllib.parse.urlparse(jwks_url)
        self._file = (urllib.request.url2pathname(parsed.path)
                      if parsed.scheme == "file" else None)
        self._fetch = fetch
        self._mtime: float | None = None
        self._keys: dict[str | None, Any] = {}
        self._load()  # at start: a missing or bad JWKS stops the broker with its reason
        self.refresher: JwksRefresher | None = None
        if self._file is None:
            self.refresher = JwksRefresher(
                jwks_url, self._keys, refresh_ms=refresh_ms, retry_backoff_ms=retry_backoff_ms,
                retry_backoff_max_ms=retry_backoff_max_ms, fetch=fetch)

    def close(self) -> None:
        """Stop refreshing (the broker stops)."""
        if self.refresher is not None:
            self.refresher.close()

    def _load(self) -> None:
        self._keys = _signing_keys(self._fetch(self.url))
        if self._file is not None:
            self._mtime = os.stat(self._file).st_mtime

    def _maybe_reload(self) -> None:
        if self._file is None:
            return
        try:
            mtime = os.stat(self._file).st_mtime
            if mtime != self._mtime:
                self._load()
        except (OSError, ValueError):
            pass  # keep the keys we have; the next change is tried again

    def _current_keys(self) -> dict[str | None, Any]:
        if self.refresher is not None:
            return self.refresher.keys
        self._maybe_reload()
        return self._keys

    def validate(self, token: str, now_ms: int) -> ValidatedToken:
        import jwt  # PyJWT

        keys = self._current_keys()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise TokenInvalid(f"malformed JWT: {e}") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg == "none" or alg.startswith("HS"):
            raise TokenInvalid(f"JWT algorithm {alg!r} is not accepted")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenInvalid("the JWT's kid is not a string")
        key = keys.get(kid)
        if key is None and kid is None and len(keys) == 1:
            key = next(iter(keys.values()))
        if key is None:
            if self.refresher is not None and self.refresher.expedite(kid):
                raise TokenInvalid(f"no key with kid {kid!r} in the JWKS (refreshing it now)")
            raise TokenInvalid(f"no key with kid {kid!r} in the JWKS")
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[alg], audience=self.expected_audience,
                issuer=self.expected_issuer, leeway=self.clock_skew_s,
                options={"require": ["exp"], "verify_aud": self.expected_audience is not None,
                         "verify_iss": self.expected_issuer is not None,
                         "verify_iat": True, "verify_nbf": True, "verify_exp": False})
        except jwt.PyJWTError as e:
            raise TokenInvalid(f"JWT rejected: {e}") from None
        # exp against the broker's clock (injected): PyJWT would read the wall clock itself.
        exp = _number(claims, "exp", True)
        assert exp is not None
        if now_ms >= (exp + self.clock_skew_s) * 1000:
            raise TokenInvalid(f"the token expired at {exp}")
        sub = claims.get(self.sub_claim)
        if not isinstance(sub, str) or not sub.strip():
            raise TokenInvalid(f"required claim {self.sub_claim!r} is missing or empty")
        return ValidatedToken(sub, int(exp * 1000))


def parse_client_initial_response(response: bytes) -> tuple[str | None, str, dict[str, str]]:
    """RFC 7628's client initial response -> (authzid or None, token, extensions).
    ValueError if malformed."""
    text = response.decode("utf-8")
    gs2, sep, rest = text.partition("\x01")
    if not sep:
        raise ValueError("no \\x01 after the GS2 header")
    flag, _, tail = gs2.partition(",")
    authzid_part, sep2, empty = tail.partition(",")
    if flag not in ("n", "y") or not sep2 or empty:
        raise ValueError(f"invalid GS2 header {gs2!r}")
    authzid = None
    if authzid_part:
        if not authzid_part.startswith("a="):
            raise ValueError(f"invalid authzid {authzid_part!r}")
        authzid = authzid_part[2:]
    if not rest.endswith("\x01\x01") and rest != "\x01":
        raise ValueError("the key/value list does not end with \\x01\\x01")
    items: dict[str, str] = {}
    for kv in rest[:-2].split("\x01") if rest != "\x01" else []:
        key, eq, value = kv.partition("=")
        if not eq or not key:
            raise ValueError(f"invalid key/value {kv!r}")
        items[key] = value
    auth = items.pop("auth", None)
    if auth is None:
        raise ValueError("no auth= key")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ValueError("auth is not 'Bearer <token>'")
    return authzid, token.strip(), items


def error_json(status: str, scope: str | None) -> bytes:
    body: dict[str, str] = {"status": status}
    if scope:
        body["scope"] = scope
    return json.dumps(body, separators=(",", ":")).encode()


class OAuthBearerServer:
    mechanism = "OAUTHBEARER"

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self._state = "first"
        self._principal: str | None = None
        self._expiry: int | None = None
        self._error: str | None = None
        self._reason = ""

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def authorization_id(self) -> str:
        assert self.complete and self._principal is not None
        return self._principal

    @property
    def attempted_user(self) -> str | None:
        return self._principal

    @property
    def credential_expiry_ms(self) -> int | None:
        return self._expiry

    def evaluate(self, response: bytes, now_ms: int) -> bytes:
        if self._state == "error_sent":
            self._state = "failed"
            assert self._error is not None
            # Whatever the client answers (RFC 7628 wants \x01), the exchange has failed.
            raise SaslAuthenticationFailed(self._error, self._reason)
        if self._state != "first":
            self._state = "failed"
            raise SaslAuthenticationFailed("Authentication failed: unexpected OAUTHBEARER "
                                           "message")
        try:
            authzid, token, _extensions = parse_client_initial_response(response)
        except (ValueError, UnicodeDecodeError) as e:
            self._state = "failed"
            raise SaslAuthenticationFailed(
                "Authentication failed: Invalid OAUTHBEARER client first message",
                f"malformed OAUTHBEARER initial response: {e}") from None
        try:
            validated = self._validator.validate(token, now_ms)
        except TokenInvalid as e:
            self._error = error_json(e.status, e.scope).decode()
            self._reason = f"invalid token: {e}"
            self._state = "error_sent"
            return self._error.encode()
        self._principal = validated.principal_name
        if authzid is not None and authzid != validated.principal_name:
            self._state = "failed"
            raise SaslAuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) that "
                f"is different from the token's principal name ({validated.principal_name})")
        self._expiry = validated.lifetime_ms
        self._state = "complete"
        return b""
