"""SASL for our clients (the CLI, admin helpers, ShareConsumer, the Spark source): Kafka's
client configs and the client half of each mechanism.

Configs (librdkafka's and Java's names): ``security.protocol`` (SASL_PLAINTEXT / SASL_SSL:
the exchange runs over whatever transport the connection has), ``sasl.mechanism`` (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER), ``sasl.username`` / ``sasl.password``, or
``sasl.jaas.config`` (``... PlainLoginModule required username="u" password="p";``, the
ScramLoginModule alike; OAuthBearerLoginModule with ``unsecuredLoginStringClaim_sub="alice"``
builds Kafka's unsecured token). A ready token is given with ``sasl.oauthbearer.token``
(snakka's name; librdkafka sets tokens through a callback instead).

The exchange (:func:`authenticate`) is SaslHandshake v1 then SaslAuthenticate until the
mechanism is done; a failure raises :class:`SaslAuthenticationError` with the broker's message.
The SCRAM math is snakka.util.scram's (shared with the broker).

Re-authentication (KIP-368) runs the same exchange again on the authenticated connection; when
and how the connection holds its other requests meanwhile is client/connection.py's. Each
exchange takes :meth:`SaslClientConfig.bearer_token`: an unsecured token (from
``unsecuredLoginStringClaim_sub`` or librdkafka's ``principal=``) is made anew every time, with
Kafka's ``unsecuredLoginLifetimeSeconds`` (default 3600), so a broker that ends the session
with the token gets a fresh one; a fixed ``sasl.oauthbearer.token`` is sent as it is.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from snakka.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from snakka.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from snakka.util import scram
from snakka.util.jaas import JaasConfigError, single_entry
from snakka.util.scram import ScramMechanism

__all__ = ["SaslAuthenticationError", "SaslClientConfig", "authenticate", "unsecured_token"]

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Lifetime of an unsecured token this client makes (Kafka's unsecuredLoginLifetimeSeconds).
DEFAULT_UNSECURED_LIFETIME_S = 3600


class SaslAuthenticationError(ConnectionError):
    """The broker refused the credentials (its error message), or the exchange broke."""


@dataclass(frozen=True)
class SaslClientConfig:
    mechanism: str
    username: str | None = None
    password: str | None = None
    token: str | None = None  # OAUTHBEARER: the bearer token to send
    # OAUTHBEARER without a fixed token: the subject (and lifetime) of the unsecured token
    # made for each exchange.
    unsecured_subject: str | None = None
    unsecured_lifetime_s: int = DEFAULT_UNSECURED_LIFETIME_S

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> SaslClientConfig | None:
        """None unless ``security.protocol`` is SASL_*; ValueError on a bad config."""
        protocol = (config.get("security.protocol") or "PLAINTEXT").strip().upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"security.protocol {protocol!r} is not one of PLAINTEXT, SSL, "
                             "SASL_PLAINTEXT, SASL_SSL")
        if not protocol.startswith("SASL_"):
            return None
        mechanism = (config.get("sasl.mechanism") or config.get("sasl.mechanisms")
                     or "GSSAPI").strip().upper()
        if mechanism not in MECHANISMS:
            raise ValueError(f"sasl.mechanism {mechanism!r} is not supported (one of "
                             f"{', '.join(MECHANISMS)})")
        options: dict[str, str] = {}
        if config.get("sasl.jaas.config"):
            try:
                options = single_entry(config["sasl.jaas.config"]).options
            except JaasConfigError as e:
                raise ValueError(f"sasl.jaas.config: {e}") from None
        username = config.get("sasl.username") or options.get("username")
        password = config.get("sasl.password") or options.get("password")
        if mechanism == "OAUTHBEARER":
            token = config.get("sasl.oauthbearer.token")
            if not token:
                # Java: unsecuredLoginStringClaim_sub; librdkafka: sasl.oauthbearer.config
                # "principal=<sub>" (with enable.sasl.oauthbearer.unsecure.jwt).
                sub = options.get("unsecuredLoginStringClaim_sub") or _librdkafka_principal(
                    config.get("sasl.oauthbearer.config") or "")
                if not sub:
                    raise ValueError("OAUTHBEARER needs sasl.oauthbearer.token or an unsecured "
                                     "token's subject (sasl.jaas.config "
                                     "unsecuredLoginStringClaim_sub=\"...\")")
                raw = options.get("unsecuredLoginLifetimeSeconds")
                lifetime = DEFAULT_UNSECURED_LIFETIME_S
                if raw is not None:
                    try:
                        lifetime = int(raw)
                    except ValueError:
                        lifetime = 0
                    if lifetime <= 0:
                        raise ValueError(f"sasl.jaas.config: unsecuredLoginLifetimeSeconds "
                                         f"{raw!r} is not a positive integer")
                return cls(mechanism, token=unsecured_token(sub, time.time(), lifetime),
                           unsecured_subject=sub, unsecured_lifetime_s=lifetime)
            return cls(mechanism, token=token)
        if not username or password is None:
            raise ValueError(f"{mechanism} needs sasl.username and sasl.password (or "
                             "sasl.jaas.config with username and password)")
        return cls(mechanism, username, password)

    def bearer_token(self, now_s: float) -> str | None:
        """The OAUTHBEARER token for an exchange starting now: a fresh unsecured token, or the
        fixed one."""
        if self.unsecured_subject is not None:
            return unsecured_token(self.unsecured_subject, now_s, self.unsecured_lifetime_s)
        return self.token


def _librdkafka_principal(text: str) -> str | None:
    for item in text.split():
        key, _, value = item.partition("=")
        if key == "principal" and value:
            return value
    return None


def unsecured_token(sub: str, now_s: float,
                    lifetime_s: int = DEFAULT_UNSECURED_LIFETIME_S) -> str:
    """Kafka's unsecured JWS (``alg: none``, empty signature) for development brokers."""
    def b64(obj: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()) \
            .decode().rstrip("=")
    return (f"{b64({'alg': 'none'})}."
            f"{b64({'sub': sub, 'iat': int(now_s), 'exp': int(now_s) + lifetime_s})}.")


class _Sender(Protocol):
    async def send(self, request: Any, version: int | None = None) -> Any: ...

    def version_for(self, api_key: int) -> int: ...


class _ScramClient:
    def __init__(self, mechanism: ScramMechanism, username: str, password: str) -> None:
        self.mech = mechanism
        self.password = password
        self.nonce = scram.new_nonce()
        self.first_bare = f"n={scram.encode_saslname(username)},r={self.nonce}"
        self.server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self.first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(scram.parse_attributes(text))
        nonce, salt_b64, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i")
        if not nonce.startswith(self.nonce) or salt_b64 is None or iterations is None:
            raise SaslAuthenticationError(f"invalid SCRAM server-first-message {text!r}")
        iters = int(iterations)
        if iters < scram.MIN_ITERATIONS:
            raise SaslAuthenticationError(f"the broker asks for {iters} SCRAM iterations, "
                                          f"fewer than {scram.MIN_ITERATIONS}")
        salted = scram.salted_password(self.mech, self.password.encode(),
                                       base64.b64decode(salt_b64), iters)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self.first_bare},{text},{without_proof}".encode()
        proof = scram.client_proof(self.mech, salted, auth_message)
        self.server_signature = scram.server_signature(
            self.mech, scram.server_key(self.mech, salted), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode()
        if not text.startswith("v=") or base64.b64decode(text[2:]) != self.server_signature:
            raise SaslAuthenticationError("the broker's SCRAM signature is wrong: it does not "
                                          "know this user's credential")


async def authenticate(conn: _Sender, config: SaslClientConfig) -> int:
    """Run the SASL exchange: on a fresh connection (after ApiVersions), or again on an
    authenticated one (KIP-368 re-authentication: the caller holds its other requests).
    Returns the session lifetime the broker gave (ms, 0 = none)."""
    handshake = await conn.send(SaslHandshakeRequest(mechanism=config.mechanism), version=1)
    if handshake.error_code != 0:
        raise SaslAuthenticationError(
            f"the broker does not enable SASL mechanism {config.mechanism} (it enables "
            f"{', '.join(handshake.mechanisms or [])}; error {handshake.error_code})")

    async def step(data: bytes) -> tuple[bytes, int]:
        resp = await conn.send(SaslAuthenticateRequest(auth_bytes=data),
                               version=conn.version_for(SaslAuthenticateRequest.API_KEY))
        if resp.error_code != 0:
            raise SaslAuthenticationError(resp.error_message or
                                          f"SASL authentication failed ({resp.error_code})")
        return bytes(resp.auth_bytes or b""), int(resp.session_lifetime_ms or 0)

    if config.mechanism == "PLAIN":
        assert config.username is not None and config.password is not None
        _, lifetime = await step(f"\x00{config.username}\x00{config.password}".encode())
        return lifetime
    if config.mechanism == "OAUTHBEARER":
        token = config.bearer_token(time.time())
        assert token is not None
        challenge, lifetime = await step(f"n,,\x01auth=Bearer {token}\x01\x01".encode())
        if challenge:  # RFC 7628 error JSON: acknowledge it; the broker then fails
            await step(b"\x01")
            raise SaslAuthenticationError(f"OAUTHBEARER token refused: {challenge.decode()}")
        return lifetime
    assert config.username is not None and config.password is not None
    client = _ScramClient(ScramMechanism.from_mechanism_name(config.mechanism),
                          config.username, config.password)
    server_first, _ = await step(client.first())
    server_final, lifetime = await step(client.final(server_first))
    client.verify(server_final)
    return lifetime
