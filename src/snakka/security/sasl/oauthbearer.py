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
  ``http(s)://`` fetched at start), ``sasl.oauthbearer.expected.audience`` /
  ``expected.issuer`` / ``sub.claim.name`` / ``scope.claim.name`` / ``clock.skew.seconds``.
  Unsigned (``alg: none``) and HMAC tokens are refused.

A token that fails validation is answered, as RFC 7628 and Kafka do, with the error JSON
(``{"status":"invalid_token"}``) as a challenge; the client answers ``\\x01`` and the exchange
then fails with that JSON as the error message. Extensions are accepted and ignored (Kafka
ignores extensions no callback validates).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from snakka.security.sasl import SaslAuthenticationFailed

__all__ = ["JwksValidator", "OAuthBearerServer", "TokenInvalid", "TokenValidator",
           "UnsecuredJwsValidator", "ValidatedToken", "parse_client_initial_response"]

# Bound on a JWKS document read from a file or URL.
MAX_JWKS_BYTES = 1024 * 1024


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
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = urllib.request.url2pathname(parsed.path)
        with open(path, "rb") as f:
            data = f.read(MAX_JWKS_BYTES + 1)
    elif parsed.scheme in ("http", "https"):
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - configured URL
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


class JwksValidator:
    """Signed JWTs against a JWKS (Kafka's ``sasl.oauthbearer.*`` broker configs)."""

    def __init__(self, jwks_url: str, *, expected_audience: list[str] | None = None,
                 expected_issuer: str | None = None, sub_claim: str = "sub",
                 scope_claim: str = "scope", clock_skew_s: int = 30) -> None:
        self.url = jwks_url
        self.expected_audience = expected_audience or None
        self.expected_issuer = expected_issuer or None
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self.clock_skew_s = clock_skew_s
        parsed = urllib.parse.urlparse(jwks_url)
        self._file = (urllib.request.url2pathname(parsed.path)
                      if parsed.scheme == "file" else None)
        self._mtime: float | None = None
        self._keys: dict[str | None, Any] = {}
        self._load()  # at start: a missing or bad JWKS stops the broker with its reason

    def _load(self) -> None:
        import jwt  # PyJWT

        doc = _read_jwks(self.url)
        keys: dict[str | None, Any] = {}
        for jwk in doc["keys"]:
            if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK.from_dict(jwk)
            except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, KeyError):
                continue  # a key type PyJWT cannot use: not a signing key for us
            keys[jwk.get("kid")] = key
        self._keys = keys
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

    def validate(self, token: str, now_ms: int) -> ValidatedToken:
        import jwt  # PyJWT

        self._maybe_reload()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise TokenInvalid(f"malformed JWT: {e}") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg == "none" or alg.startswith("HS"):
            raise TokenInvalid(f"JWT algorithm {alg!r} is not accepted")
        kid = header.get("kid")
        key = self._keys.get(kid)
        if key is None and kid is None and len(self._keys) == 1:
            key = next(iter(self._keys.values()))
        if key is None:
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
