"""The server-side mechanisms (security/sasl/): PLAIN, OAUTHBEARER with the unsecured JWS and
the JWKS validators, Kafka's JAAS syntax, and the connection's exchange with KIP-368 session
lifetimes (server/authentication.py)."""

from __future__ import annotations

import json
import os
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from snakka.client.sasl import SaslClientConfig, unsecured_token
from snakka.config import BrokerConfig, ConfigError
from snakka.protocol.api_keys import ApiKey
from snakka.protocol.errors import ErrorCode
from snakka.security.principal import KafkaPrincipal, SecurityProtocol
from snakka.security.sasl import SaslAuthenticationFailed
from snakka.security.sasl.config import SaslServerFactory
from snakka.security.sasl.oauthbearer import (
    JwksValidator,
    OAuthBearerServer,
    TokenInvalid,
    UnsecuredJwsValidator,
    parse_client_initial_response,
)
from snakka.security.sasl.plain import PlainServer
from snakka.server.authentication import AuthState, ChannelAuthentication
from snakka.util.jaas import JaasConfigError, parse_jaas_config, plain_users, single_entry

NOW_MS = 1_800_000_000_000
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_admin="admin secret \\"quoted\\"";')


# -- JAAS ------------------------------------------------------------------------------------
def test_jaas_syntax():
    entry = single_entry(PLAIN_JAAS)
    assert entry.login_module.endswith("PlainLoginModule") and entry.flag == "required"
    assert plain_users(entry) == {"alice": "alice-secret", "admin": 'admin secret "quoted"'}
    two = parse_jaas_config("a.B required x=1; c.D optional y=\"2\";")
    assert [(e.login_module, e.options) for e in two] == [("a.B", {"x": "1"}),
                                                          ("c.D", {"y": "2"})]
    for bad in ("", "a.B required x=1", "a.B mandatory;", "a.B required x=\"1;", "a.B; c.D;"):
        with pytest.raises(JaasConfigError):
            single_entry(bad)


# -- PLAIN -----------------------------------------------------------------------------------
@pytest.mark.parametrize("message,error", [
    (b"\0alice\0alice-secret", None),
    (b"alice\0alice\0alice-secret", None),
    (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
    (b"\0bob\0alice-secret", "Authentication failed: Invalid username or password"),
    (b"\0\0x", "Authentication failed: username not specified"),
    (b"\0alice\0", "Authentication failed: password not specified"),
    (b"admin\0alice\0alice-secret", "Authentication failed: Client requested an authorization "
                                    "id that is different from username"),
    (b"alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    (b"\xff\0\0", "Authentication failed: Invalid SASL/PLAIN response: not UTF-8"),
])
def test_plain(message, error):
    server = PlainServer({"alice": "alice-secret"})
    if error is None:
        assert server.evaluate(message, NOW_MS) == b""
        assert server.complete and server.authorization_id == "alice"
        return
    with pytest.raises(SaslAuthenticationFailed) as e:
        server.evaluate(message, NOW_MS)
    assert str(e.value) == error and "alice-secret" not in e.value.reason


# -- OAUTHBEARER -----------------------------------------------------------------------------
def initial(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def test_client_initial_response_parsing():
    assert parse_client_initial_response(b"n,,\x01auth=Bearer abc\x01\x01") == (None, "abc", {})
    assert parse_client_initial_response(
        b"n,a=bob,\x01auth=Bearer t\x01ext=1\x01\x01") == ("bob", "t", {"ext": "1"})
    for bad in (b"n,,", b"n,,\x01auth=Bearer t\x01", b"n,,\x01x=1\x01\x01", b"p,,\x01\x01",
                b"n,,\x01auth=Basic t\x01\x01"):
        with pytest.raises(ValueError):
            parse_client_initial_response(bad)


def test_unsecured_jws():
    v = UnsecuredJwsValidator({"unsecuredValidatorAllowableClockSkewMs": "1000"})
    good = unsecured_token("alice", NOW_MS / 1000)
    assert v.validate(good, NOW_MS).principal_name == "alice"
    with pytest.raises(TokenInvalid, match="expired"):
        v.validate(unsecured_token("alice", NOW_MS / 1000 - 7200), NOW_MS)
    with pytest.raises(TokenInvalid, match="signature"):
        v.validate(good + "sig", NOW_MS)
    with pytest.raises(TokenInvalid):
        v.validate("not-a-token", NOW_MS)
    scoped = UnsecuredJwsValidator({"unsecuredValidatorRequiredScope": "kafka"})
    with pytest.raises(TokenInvalid) as e:
        scoped.validate(good, NOW_MS)
    assert e.value.status == "insufficient_scope"


def test_oauthbearer_failure_answers_rfc7628_json_then_fails():
    server = OAuthBearerServer(UnsecuredJwsValidator())
    expired = unsecured_token("alice", NOW_MS / 1000 - 7200)
    challenge = server.evaluate(initial(expired), NOW_MS)
    assert json.loads(challenge) == {"status": "invalid_token"}
    with pytest.raises(SaslAuthenticationFailed) as e:
        server.evaluate(b"\x01", NOW_MS)
    assert json.loads(str(e.value)) == {"status": "invalid_token"}
    ok = OAuthBearerServer(UnsecuredJwsValidator())
    assert ok.evaluate(initial(unsecured_token("alice", NOW_MS / 1000)), NOW_MS) == b""
    assert ok.authorization_id == "alice" and ok.credential_expiry_ms == NOW_MS + 3600_000
    other = OAuthBearerServer(UnsecuredJwsValidator())
    with pytest.raises(SaslAuthenticationFailed, match="authorization id"):
        other.evaluate(initial(unsecured_token("alice", NOW_MS / 1000), "bob"), NOW_MS)


@pytest.fixture
def jwks(tmp_path):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="k1", use="sig", alg="RS256")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return key, path


def signed(key, now_s: float, **claims) -> str:
    body = {"sub": "alice", "iat": int(now_s), "exp": int(now_s) + 600, "aud": "kafka",
            "iss": "https://idp.test", **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key,
                      algorithm="RS256", headers={"kid": "k1"})


def test_jwks_validation(jwks):
    key, path = jwks
    now_s = time.time()
    now_ms = int(now_s * 1000)
    v = JwksValidator(path.as_uri(), expected_audience=["kafka"],
                      expected_issuer="https://idp.test", clock_skew_s=5)
    assert v.validate(signed(key, now_s), now_ms).principal_name == "alice"
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rejected = {
        "audience": signed(key, now_s, aud="other"),
        "issuer": signed(key, now_s, iss="https://evil.test"),
        "expired": signed(key, now_s - 3600),
        "signature": signed(other_key, now_s),
        "no exp": signed(key, now_s, exp=None),
        "no sub": signed(key, now_s, sub=None),
        "alg none": unsecured_token("alice", now_s),
        "hmac": jwt.encode({"sub": "a", "exp": int(now_s) + 60}, "s" * 32, algorithm="HS256"),
    }
    for why, token in rejected.items():
        with pytest.raises(TokenInvalid):
            v.validate(token, now_ms)
            pytest.fail(f"accepted a token with a bad {why}")
    # The JWKS file is re-read when it changes (key rotation).
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(other_key.public_key()))
    jwk.update(kid="k1")
    path.write_text(json.dumps({"keys": [jwk]}))
    os.utime(path, (now_s + 10, now_s + 10))
    assert v.validate(signed(other_key, now_s), now_ms).principal_name == "alice"


# -- broker configuration ---------------------------------------------------------------------
def sasl_config(**extra: str) -> BrokerConfig:
    cfg = BrokerConfig({"listeners": "SASL_PLAINTEXT://localhost:0,PLAINTEXT://localhost:0",
                        **extra})
    SaslServerFactory(cfg, lambda u, m: None)  # what the broker builds first at start
    return cfg


def test_config_rules(jwks):
    with pytest.raises(ConfigError, match="GSSAPI"):
        sasl_config()  # Kafka's default mechanism
    with pytest.raises(ConfigError, match="JAAS"):
        sasl_config(**{"sasl.enabled.mechanisms": "PLAIN"})
    with pytest.raises(ConfigError, match="unsupported SASL mechanism"):
        sasl_config(**{"sasl.enabled.mechanisms": "DIGEST-MD5"})
    cfg = sasl_config(**{
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    assert cfg.unknown_keys() == []
    factory = SaslServerFactory(cfg, lambda u, m: None)
    assert factory.enabled_mechanisms("SASL_PLAINTEXT") == ["PLAIN", "SCRAM-SHA-256"]
    assert factory.enabled_mechanisms("PLAINTEXT") == []
    assert factory.create("SASL_PLAINTEXT", "PLAIN").evaluate(b"\0alice\0alice-secret", 0) == b""
    _, path = jwks
    cfg = sasl_config(**{"sasl.enabled.mechanisms": "OAUTHBEARER",
                         "sasl.oauthbearer.jwks.endpoint.url": path.as_uri()})
    assert SaslServerFactory(cfg, lambda u, m: None).listeners["SASL_PLAINTEXT"].oauth_validator
    with pytest.raises(ConfigError, match="JWKS"):
        sasl_config(**{"sasl.enabled.mechanisms": "OAUTHBEARER",
                       "sasl.oauthbearer.jwks.endpoint.url": "file:///nonexistent/jwks.json"})


def test_client_config():
    assert SaslClientConfig.from_config({}) is None
    c = SaslClientConfig.from_config({"security.protocol": "SASL_PLAINTEXT",
                                      "sasl.mechanism": "SCRAM-SHA-512",
                                      "sasl.username": "u", "sasl.password": "p"})
    assert (c.mechanism, c.username, c.password) == ("SCRAM-SHA-512", "u", "p")
    c = SaslClientConfig.from_config({
        "security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="pw";'})
    assert (c.username, c.password) == ("alice", "pw")
    c = SaslClientConfig.from_config({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule'
                            ' required unsecuredLoginStringClaim_sub="alice";'})
    assert UnsecuredJwsValidator().validate(c.token, int(time.time() * 1000)).principal_name \
        == "alice"
    for bad in ({"security.protocol": "SASL_PLAINTEXT"},  # GSSAPI
                {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
                {"security.protocol": "KERBEROS"},
                {"security.protocol": "SASL_SSL"}):  # no TLS in our client yet: never plaintext
        with pytest.raises(ValueError):
            SaslClientConfig.from_config(bad)


# -- the connection's exchange and KIP-368 -----------------------------------------------------
def plain_auth() -> ChannelAuthentication:
    auth = ChannelAuthentication(SecurityProtocol.SASL_PLAINTEXT)
    users = {"alice": "a", "bob": "b"}
    assert auth.handshake("PLAIN", ["PLAIN"], 1, lambda m: PlainServer(users)) == ErrorCode.NONE
    return auth


def test_exchange_sets_the_principal_and_session_lifetime():
    auth = plain_auth()
    result = auth.authenticate(b"\0alice\0a", NOW_MS, version=1, reauth_ms=10_000)
    assert not result.failed and result.session_lifetime_ms == 10_000
    assert auth.principal == KafkaPrincipal("User", "alice")
    assert auth.check_request(ApiKey.PRODUCE, NOW_MS + 9_999) is None
    assert "expired" in auth.check_request(ApiKey.PRODUCE, NOW_MS + 10_000)
    assert auth.check_request(ApiKey.SASL_HANDSHAKE, NOW_MS + 10_000) is None
    # Re-authentication: same mechanism, same principal; the session gets a new lifetime.
    assert auth.handshake("PLAIN", ["PLAIN"], 1,
                          lambda m: PlainServer({"alice": "a"})) == ErrorCode.NONE
    assert auth.reauthenticating and auth.principal == KafkaPrincipal("User", "alice")
    assert auth.check_request(ApiKey.PRODUCE, NOW_MS) is not None  # mid-exchange
    result = auth.authenticate(b"\0alice\0a", NOW_MS + 10_000, version=2, reauth_ms=10_000)
    assert not result.failed and auth.check_request(ApiKey.PRODUCE, NOW_MS + 19_999) is None


def test_reauthentication_cannot_change_principal_or_mechanism():
    auth = plain_auth()
    auth.authenticate(b"\0alice\0a", NOW_MS, version=1, reauth_ms=1000)
    auth.handshake("PLAIN", ["PLAIN"], 1, lambda m: PlainServer({"bob": "b"}))
    result = auth.authenticate(b"\0bob\0b", NOW_MS, version=1, reauth_ms=1000)
    assert result.failed and "Cannot change principals" in result.error_message
    assert auth.must_close
    auth = plain_auth()
    auth.authenticate(b"\0alice\0a", NOW_MS, version=1)
    assert auth.session_expires_ms is None  # connections.max.reauth.ms=0: no expiry
    code = auth.handshake("SCRAM-SHA-256", ["PLAIN", "SCRAM-SHA-256"], 1)
    assert code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and auth.must_close


def test_oauthbearer_session_ends_with_the_token():
    auth = ChannelAuthentication(SecurityProtocol.SASL_PLAINTEXT)
    auth.handshake("OAUTHBEARER", ["OAUTHBEARER"], 1,
                   lambda m: OAuthBearerServer(UnsecuredJwsValidator()))
    token = unsecured_token("alice", NOW_MS / 1000, lifetime_s=60)
    result = auth.authenticate(initial(token), NOW_MS, version=1, reauth_ms=3_600_000)
    assert result.session_lifetime_ms == 60_000


def test_a_failed_exchange_fails_the_connection():
    auth = plain_auth()
    result = auth.authenticate(b"\0alice\0wrong", NOW_MS, version=1)
    assert result.failed and result.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert result.user == "alice" and auth.state is AuthState.FAILED and auth.must_close
