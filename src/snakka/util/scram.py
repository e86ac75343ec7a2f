"""SCRAM's arithmetic (RFC 5802, RFC 7677): the one copy both sides of the wire use.

What it owns: Kafka's mechanisms and their ids (``ScramMechanism``: SCRAM-SHA-256 = 1,
SCRAM-SHA-512 = 2), ``Hi`` (PBKDF2-HMAC), the client/server keys, proofs and signatures, the
stored form of a credential (salt, iterations, StoredKey, ServerKey: never the password, as
Kafka's ``ScramCredential``), and the attribute syntax of SCRAM messages (``n=...,r=...``,
saslname escaping). The server's state machine lives in snakka.security.sasl.scram, the client's
exchange in snakka.client.sasl; neither repeats any of this.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from enum import IntEnum

__all__ = ["MAX_ITERATIONS", "MIN_ITERATIONS", "ScramCredential", "ScramMechanism",
           "client_proof", "client_signature", "decode_saslname", "encode_saslname",
           "make_credential", "new_nonce", "parse_attributes", "salted_password",
           "server_signature", "verify_client_proof"]

# Kafka's bounds on a credential's iteration count (ScramMechanism.minIterations; the
# controller refuses more than 16384: ScramControlManager).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramMechanism(IntEnum):
    """Kafka's ScramMechanism ids (the ``mechanism`` field of the SCRAM admin APIs)."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (the SASL mechanism name)."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def from_mechanism_name(cls, name: str) -> ScramMechanism:
        """``SCRAM-SHA-512`` -> SCRAM_SHA_512; anything else is UNKNOWN."""
        try:
            m = cls[name.strip().upper().replace("-", "_")]
        except KeyError:
            return cls.UNKNOWN
        return m


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker stores of a SCRAM password (Kafka's ScramCredential)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(mech: ScramMechanism, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, mech.hash_name).digest()


def _h(mech: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mech.hash_name, data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def salted_password(mech: ScramMechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """``Hi(Normalize(password), salt, i)`` (RFC 5802 2.2; Kafka skips SASLprep too)."""
    return hashlib.pbkdf2_hmac(mech.hash_name, password, salt, iterations)


def client_key(mech: ScramMechanism, salted: bytes) -> bytes:
    return _hmac(mech, salted, b"Client Key")


def server_key(mech: ScramMechanism, salted: bytes) -> bytes:
    return _hmac(mech, salted, b"Server Key")


def stored_key(mech: ScramMechanism, ckey: bytes) -> bytes:
    return _h(mech, ckey)


def credential_from_salted(mech: ScramMechanism, salt: bytes, salted: bytes,
                           iterations: int) -> ScramCredential:
    """The stored form of a salted password (what AlterUserScramCredentials sends)."""
    return ScramCredential(salt, stored_key(mech, client_key(mech, salted)),
                           server_key(mech, salted), iterations)


def make_credential(mech: ScramMechanism, password: str, iterations: int,
                    salt: bytes | None = None) -> ScramCredential:
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted(mech, salt, salted_password(mech, password.encode(), salt,
                                                              iterations), iterations)


def client_signature(mech: ScramMechanism, skey: bytes, auth_message: bytes) -> bytes:
    return _hmac(mech, skey, auth_message)


def client_proof(mech: ScramMechanism, salted: bytes, auth_message: bytes) -> bytes:
    """ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)."""
    ckey = client_key(mech, salted)
    return _xor(ckey, client_signature(mech, stored_key(mech, ckey), auth_message))


def server_signature(mech: ScramMechanism, skey: bytes, auth_message: bytes) -> bytes:
    return _hmac(mech, skey, auth_message)


def verify_client_proof(mech: ScramMechanism, cred: ScramCredential, auth_message: bytes,
                        proof: bytes) -> bool:
    """Recover ClientKey from the proof and compare its hash with StoredKey (constant time)."""
    sig = client_signature(mech, cred.stored_key, auth_message)
    if len(proof) != len(sig):
        return False
    return hmac.compare_digest(_h(mech, _xor(proof, sig)), cred.stored_key)


def new_nonce() -> str:
    """A random nonce of letters and digits (as Kafka's: base 36 of 130 random bits). Plain
    alphanumerics also keep clients with lax attribute parsers happy."""
    n = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(digits[r])
    return "".join(out) or "0"


def encode_saslname(name: str) -> str:
    """RFC 5802 saslname: ',' -> '=2C', '=' -> '=3D'."""
    return name.replace("=", "=3D").replace(",", "=2C")


def decode_saslname(name: str) -> str:
    """The inverse of :func:`encode_saslname`; ValueError on a bad escape."""
    out = []
    i = 0
    while i < len(name):
        c = name[i]
        if c == "=":
            esc = name[i:i + 3]
            if esc == "=2C":
                out.append(",")
            elif esc == "=3D":
                out.append("=")
            else:
                raise ValueError(f"invalid escape in saslname {name!r}")
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_attributes(message: str) -> list[tuple[str, str]]:
    """``a=1,b=2`` -> [("a", "1"), ("b", "2")]; ValueError if an item is not ``x=value``."""
    out = []
    for item in message.split(","):
        if len(item) < 2 or item[1] != "=":
            raise ValueError(f"invalid SCRAM attribute {item!r}")
        out.append((item[0], item[2:]))
    return out
