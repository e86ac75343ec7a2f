"""SCRAM: the shared math against RFC 7677's test vector, the server state machine
(security/sasl/scram.py) against our client's half (client/sasl.py), and the metadata-log rules
of AlterUserScramCredentials (metadata/scram.py)."""

from __future__ import annotations

import base64

import pytest

from snakka.client.sasl import SaslAuthenticationError, _ScramClient
from snakka.metadata.core import ClusterMetadata
from snakka.metadata.scram import ScramAlteration
from snakka.protocol.errors import ErrorCode
from snakka.security.sasl import SaslAuthenticationFailed
from snakka.security.sasl.scram import ScramServer
from snakka.util import scram
from snakka.util.scram import ScramMechanism

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512

# RFC 7677, section 3: user "user", password "pencil".
CLIENT_FIRST_BARE = "n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = ("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                "s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
CLIENT_FINAL_WITHOUT_PROOF = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
PROOF = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_SIGNATURE = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_vector():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = scram.salted_password(SHA256, b"pencil", salt, 4096)
    auth = f"{CLIENT_FIRST_BARE},{SERVER_FIRST},{CLIENT_FINAL_WITHOUT_PROOF}".encode()
    assert base64.b64encode(scram.client_proof(SHA256, salted, auth)).decode() == PROOF
    cred = scram.credential_from_salted(SHA256, salt, salted, 4096)
    assert base64.b64encode(scram.server_signature(SHA256, cred.server_key, auth)).decode() \
        == SERVER_SIGNATURE
    assert scram.verify_client_proof(SHA256, cred, auth, base64.b64decode(PROOF))
    assert not scram.verify_client_proof(SHA256, cred, auth, b"\0" * 32)
    assert not scram.verify_client_proof(SHA256, cred, auth, b"short")


def test_rfc7677_vector_through_the_server():
    """The server, given the vector's nonce and credential, accepts the vector's proof and
    answers the vector's signature."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = scram.make_credential(SHA256, "pencil", 4096, salt)
    server = ScramServer(SHA256, lambda u, m: cred if (u, m) == ("user", SHA256) else None)
    server._nonce_suffix = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"  # the vector's server nonce
    first = server.evaluate(f"n,,{CLIENT_FIRST_BARE}".encode(), 0)
    assert first.decode() == SERVER_FIRST
    final = server.evaluate(f"{CLIENT_FINAL_WITHOUT_PROOF},p={PROOF}".encode(), 0)
    assert final.decode() == f"v={SERVER_SIGNATURE}"
    assert server.complete and server.authorization_id == "user"


def test_saslname_escaping():
    assert scram.encode_saslname("a,b=c") == "a=2Cb=3Dc"
    assert scram.decode_saslname("a=2Cb=3Dc") == "a,b=c"
    with pytest.raises(ValueError):
        scram.decode_saslname("a=4Fb")


def _exchange(mech: ScramMechanism, stored: scram.ScramCredential | None, user: str,
              password: str) -> ScramServer:
    server = ScramServer(mech, lambda u, m: stored if u == "al,ice" and m is mech else None)
    client = _ScramClient(mech, user, password)
    server_first = server.evaluate(client.first(), 0)
    server_final = server.evaluate(client.final(server_first), 0)
    client.verify(server_final)
    return server


@pytest.mark.parametrize("mech", [SHA256, SHA512])
def test_client_and_server_agree(mech):
    cred = scram.make_credential(mech, "s3cret", 4096)
    server = _exchange(mech, cred, "al,ice", "s3cret")
    assert server.complete and server.authorization_id == "al,ice"


@pytest.mark.parametrize("user,password", [("al,ice", "wrong"), ("bob", "s3cret")])
def test_wrong_password_and_unknown_user_fail_alike(user, password):
    cred = scram.make_credential(SHA512, "s3cret", 4096)
    with pytest.raises(SaslAuthenticationFailed) as e:
        _exchange(SHA512, cred, user, password)
    assert str(e.value) == ("Authentication failed during authentication due to invalid "
                            "credentials with SASL mechanism SCRAM-SHA-512")
    assert "s3cret" not in e.value.reason and "wrong" not in str(e.value)


@pytest.mark.parametrize("first", [
    b"p=tls-unique,,n=u,r=abc",      # channel binding
    b"y",                            # no GS2 header
    b"n,,n=u",                       # no nonce
    b"n,,r=abc,n=u",                 # wrong order
    b"n,,n=u,r=abc,tokenauth=true",  # delegation tokens
    b"n,a=other,n=u,r=abc",          # authzid other than the user
    b"\xff\xfe",                     # not UTF-8
])
def test_bad_client_first_messages_fail(first):
    server = ScramServer(SHA256, lambda u, m: None)
    with pytest.raises(SaslAuthenticationFailed):
        server.evaluate(first, 0)
    assert not server.complete


def test_bad_client_final_messages_fail():
    cred = scram.make_credential(SHA256, "pw", 4096)
    for final in (b"c=biws,r=WRONG,p=AAAA", b"c=eSws,r={n},p=AAAA", b"garbage", b"c=biws"):
        server = ScramServer(SHA256, lambda u, m: cred)
        client = _ScramClient(SHA256, "u", "pw")
        first = server.evaluate(client.first(), 0).decode()
        nonce = dict(scram.parse_attributes(first))["r"]
        with pytest.raises(SaslAuthenticationFailed):
            server.evaluate(final.replace(b"{n}", nonce.encode()), 0)
        with pytest.raises(SaslAuthenticationFailed):  # nothing after a failure
            server.evaluate(b"n,,n=u,r=x", 0)


def test_client_refuses_a_forged_server_signature():
    client = _ScramClient(SHA256, "u", "pw")
    client.final(b"r=" + client.nonce.encode() + b"xyz,s=" + base64.b64encode(b"salt")
                 + b",i=4096")
    with pytest.raises(SaslAuthenticationError):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


# -- the metadata log's SCRAM credentials (Kafka's ScramControlManager rules) -------------
def _up(name: str, mech: int = 2, iterations: int = 4096, salted: bytes = b"x" * 64):
    return ScramAlteration(name, mech, iterations, b"salt", salted)


def _del(name: str, mech: int = 2):
    return ScramAlteration(name, mech)


def test_alter_rules_and_replay():
    md = ClusterMetadata()
    results, records = md.scram.alter([], [_up("alice"), _up("bob", 1)])
    assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
    md.apply_all(records)
    assert md.scram.get("alice", SHA512).iterations == 4096
    assert "password" not in str(records) and all("salted" not in k for r in records for k in r)

    cases = {
        "": (_up(""), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "m": (_up("carol", 0), ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "few": (_up("carol", iterations=4095), ErrorCode.UNACCEPTABLE_CREDENTIAL,
                "Too few iterations"),
        "many": (_up("carol", iterations=16385), ErrorCode.UNACCEPTABLE_CREDENTIAL,
                 "Too many iterations"),
    }
    for alt, code, message in cases.values():
        (r,), recs = md.scram.alter([], [alt])
        assert (r.error_code, r.error_message, recs) == (code, message, [])
    (r,), recs = md.scram.alter([_del("carol")], [])
    assert r.error_code == ErrorCode.RESOURCE_NOT_FOUND and recs == []
    # The same user and mechanism twice: DUPLICATE_RESOURCE for that user only.
    results, recs = md.scram.alter([_del("alice")], [_up("alice"), _up("dave")])
    assert [(r.user, r.error_code) for r in results] == [
        ("alice", ErrorCode.DUPLICATE_RESOURCE), ("dave", ErrorCode.NONE)]
    assert [r["name"] for r in recs] == ["dave"]

    # Replaying the records rebuilds the same state (what a restart does).
    results, recs = md.scram.alter([_del("bob", 1)], [])
    md.apply_all(recs)
    assert md.scram.get("bob", SHA256) is None and "bob" not in md.scram.users
    replayed = ClusterMetadata()
    replayed.apply_all(records + recs)
    assert replayed.scram.users == md.scram.users
