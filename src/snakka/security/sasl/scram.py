"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512, server side (RFC 5802, RFC 7677; Kafka's
``ScramSaslServer``).

States: RECEIVE_CLIENT_FIRST -> RECEIVE_CLIENT_FINAL -> COMPLETE (or FAILED). The math is
snakka.util.scram's. What Kafka accepts is accepted here:

- the GS2 header is ``n,,`` or ``n,a=<user>,`` (no channel binding: ``p=`` and ``y`` are
  refused; an authorization id must be the user name);
- extensions after the nonce are ``key=value`` pairs; ``tokenauth`` (delegation tokens) is
  refused because snakka has no delegation tokens;
- the credential is looked up by (user, mechanism) in the metadata log's SCRAM credentials;
  an unknown user fails like a wrong password would, after the client's final message, so the
  exchange does not reveal which users exist.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Callable

from snakka.security.sasl import SaslAuthenticationFailed
from snakka.util import scram
from snakka.util.scram import ScramCredential, ScramMechanism

__all__ = ["CredentialLookup", "ScramServer"]

CredentialLookup = Callable[[str, ScramMechanism], ScramCredential | None]

def invalid_credentials(mechanism: str) -> str:
    """Kafka's message for a failed SCRAM exchange (SaslServerAuthenticator's, for a
    SaslException)."""
    return ("Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}")


class ScramServer:
    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup) -> None:
        assert mechanism is not ScramMechanism.UNKNOWN
        self.mechanism = mechanism.mechanism_name
        self._mech = mechanism
        self._lookup = lookup
        self._state = "first"
        self._user: str | None = None
        self._cred: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""
        self._nonce_suffix: str | None = None  # tests: a fixed server nonce (RFC vectors)

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def authorization_id(self) -> str:
        assert self.complete and self._user is not None
        return self._user

    @property
    def attempted_user(self) -> str | None:
        return self._user

    @property
    def credential_expiry_ms(self) -> int | None:
        return None

    def evaluate(self, response: bytes, now_ms: int) -> bytes:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            self._state = "failed"
            raise SaslAuthenticationFailed(invalid_credentials(self.mechanism),
                                           "SCRAM message is not UTF-8") from None
        try:
            if self._state == "first":
                return self._client_first(text)
            if self._state == "final":
                return self._client_final(text)
        except ValueError as e:
            self._state = "failed"
            raise SaslAuthenticationFailed(invalid_credentials(self.mechanism),
                                           f"malformed SCRAM message: {e}") from None
        except SaslAuthenticationFailed:
            self._state = "failed"
            raise
        self._state = "failed"
        raise SaslAuthenticationFailed(invalid_credentials(self.mechanism),
                                       "SCRAM message after the exchange ended")

    def _client_first(self, text: str) -> bytes:
        # gs2-header = gs2-cbind-flag "," [ authzid ] "," ; then client-first-message-bare
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep1 or not sep2:
            raise ValueError("no GS2 header")
        if flag != "n":
            raise SaslAuthenticationFailed(invalid_credentials(self.mechanism),
                                           f"channel binding {flag!r} is not supported")
        if authzid and not authzid.startswith("a="):
            raise ValueError(f"invalid authzid {authzid!r}")
        items = bare.split(",")
        attrs = scram.parse_attributes(",".join(items[:2]))
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise ValueError("client-first-message must start with n=...,r=...")
        user = scram.decode_saslname(attrs[0][1])
        nonce = attrs[1][1]
        if not user or not nonce:
            raise ValueError("empty user name or nonce")
        self._user = user
        # Kafka's SCRAM extensions: key=value pairs after the nonce.
        extensions = dict(item.partition("=")[::2] for item in items[2:])
        if "tokenauth" in extensions:
            raise SaslAuthenticationFailed(invalid_credentials(self.mechanism),
                                           "delegation tokens (tokenauth) are not supported")
        if authzid and scram.decode_saslname(authzid[2:]) != user:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        self._gs2 = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._cred = self._lookup(user, self._mech)
        # An unknown user gets a made-up salt and fails at the proof, as a wrong password.
        salt = self._cred.salt if self._cred else secrets.token_bytes(32)
        iterations = self._cred.iterations if self._cred else scram.MIN_ITERATIONS
        self._nonce = nonce + (self._nonce_suffix or scram.new_nonce())
        self._server_first = (f"r={self._nonce},s={base64.b64encode(salt).decode()},"
                              f"i={iterations}")
        self._state = "final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        without_proof, sep, proof_attr = text.rpartition(",p=")
        if not sep:
            raise ValueError("client-final-message has no proof")
        attrs = dict(scram.parse_attributes(without_proof))
        try:
            binding = base64.b64decode(attrs.get("c", ""), validate=True)
            proof = base64.b64decode(proof_attr, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("invalid base64 in client-final-message") from None
        if binding != self._gs2.encode():
            raise ValueError("channel binding does not match the GS2 header")
        # endswith, as Kafka 3.8.1's fix for CVE-2024-56128: librdkafka before 2.6.1 sends its
        # own nonce again in front of the server's (which already starts with it).
        if not (attrs.get("r") or "").endswith(self._nonce):
            raise ValueError("nonce mismatch")
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 without_proof)).encode()
        cred = self._cred
        if cred is None:
            raise SaslAuthenticationFailed(invalid_credentials(self.mechanism),
                                           "unknown user")
        if not scram.verify_client_proof(self._mech, cred, auth_message, proof):
            raise SaslAuthenticationFailed(invalid_credentials(self.mechanism),
                                           "wrong password (invalid client proof)")
        self._state = "complete"
        sig = scram.server_signature(self._mech, cred.server_key, auth_message)
        return b"v=" + base64.b64encode(sig)
