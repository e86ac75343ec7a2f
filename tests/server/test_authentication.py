"""The authentication state machine (server/authentication.py): which requests a connection may
send before it is authenticated, and the SASL exchange's transitions (Kafka's
SaslServerAuthenticator rules). No mechanism exists yet (issue 14); the rules do."""

from __future__ import annotations

import pytest

from snakka.protocol.api_keys import ApiKey
from snakka.protocol.errors import ErrorCode
from snakka.security.principal import ANONYMOUS, KafkaPrincipal, SecurityProtocol
from snakka.server.authentication import AuthState, ChannelAuthentication, IllegalSaslState

ALICE = KafkaPrincipal("User", "alice")


def sasl() -> ChannelAuthentication:
    return ChannelAuthentication(SecurityProtocol.SASL_PLAINTEXT)


@pytest.mark.parametrize("protocol", [SecurityProtocol.PLAINTEXT, SecurityProtocol.SSL])
def test_non_sasl_listeners_start_authenticated_as_anonymous(protocol):
    auth = ChannelAuthentication(protocol)
    assert auth.authenticated and auth.principal == ANONYMOUS
    assert all(auth.check_request(k) is None for k in ApiKey)
    auth.api_versions_received(valid=True)  # no SASL exchange: nothing changes
    assert auth.state is AuthState.AUTHENTICATED
    with pytest.raises(IllegalSaslState):
        auth.handshake("PLAIN", {"PLAIN"}, version=1)


def test_before_authentication_only_the_exchange_is_allowed():
    auth = sasl()
    assert auth.state is AuthState.UNAUTHENTICATED and auth.principal is None
    allowed = {k for k in ApiKey if auth.check_request(k) is None}
    assert allowed == {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}
    assert auth.check_request(ApiKey.PRODUCE) == \
        "Unexpected Kafka request of type PRODUCE during SASL handshake"
    assert auth.check_request(12345) is not None  # unknown keys too

    auth.api_versions_received(valid=False)  # answered INVALID_REQUEST: may try again
    assert auth.state is AuthState.UNAUTHENTICATED
    auth.api_versions_received(valid=True)
    assert auth.state is AuthState.VERSIONS_RECEIVED
    assert {k for k in ApiKey if auth.check_request(k) is None} == {ApiKey.SASL_HANDSHAKE}

    assert auth.handshake("PLAIN", ["PLAIN", "SCRAM-SHA-256"], version=1) == ErrorCode.NONE
    assert auth.state is AuthState.AUTHENTICATING and auth.mechanism == "PLAIN"
    assert auth.authenticate_headers
    assert {k for k in ApiKey if auth.check_request(k) is None} == {ApiKey.SASL_AUTHENTICATE}

    auth.authentication_succeeded(ALICE)
    assert auth.authenticated and auth.principal == ALICE and not auth.must_close
    assert all(auth.check_request(k) is None for k in ApiKey)


def test_handshake_without_api_versions_and_v0():
    auth = sasl()
    assert auth.handshake("SCRAM-SHA-512", {"SCRAM-SHA-512"}, version=0) == ErrorCode.NONE
    assert not auth.authenticate_headers  # v0: raw tokens, no SaslAuthenticate framing


def test_unsupported_mechanism_fails_the_connection():
    auth = sasl()
    code = auth.handshake("GSSAPI", {"PLAIN"}, version=1)
    assert code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert auth.state is AuthState.FAILED and auth.must_close and auth.principal is None
    assert auth.check_request(ApiKey.API_VERSIONS) is not None  # nothing more is accepted
    assert "unsupported SASL mechanism 'GSSAPI'" in auth.check_request(ApiKey.METADATA)


def test_bad_credentials_fail_the_connection():
    auth = sasl()
    auth.handshake("PLAIN", {"PLAIN"}, version=1)
    auth.authentication_failed("Invalid username or password")
    assert auth.must_close and auth.failure == "Invalid username or password"
    assert {k for k in ApiKey if auth.check_request(k) is None} == set()


@pytest.mark.parametrize("steps", [
    ["succeed"],                        # no handshake yet
    ["versions", "versions"],           # one ApiVersions per exchange
    ["handshake", "handshake"],         # mechanism already chosen
    ["handshake", "succeed", "succeed"],
    ["handshake", "fail", "succeed"],
])
def test_transitions_out_of_order_are_illegal(steps):
    auth = sasl()
    actions = {
        "versions": lambda: auth.api_versions_received(valid=True),
        "handshake": lambda: auth.handshake("PLAIN", {"PLAIN"}, version=1),
        "succeed": lambda: auth.authentication_succeeded(ALICE),
        "fail": lambda: auth.authentication_failed("no"),
    }
    for step in steps[:-1]:
        actions[step]()
    with pytest.raises(IllegalSaslState) as e:
        actions[steps[-1]]()
    assert e.value.error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_principal_text_form():
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert KafkaPrincipal.parse("User:CN=a:b") == KafkaPrincipal("User", "CN=a:b")
    with pytest.raises(ValueError):
        KafkaPrincipal.parse("alice")
