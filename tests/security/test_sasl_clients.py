"""SASL_PLAINTEXT with real clients (confluent-kafka, kafka-python, aiokafka, kcat): PLAIN from
the JAAS line, SCRAM-SHA-512 with users made by confluent-kafka's AdminClient and by
``snakka users``, failures (wrong password, unknown user) that touch nothing else, OAUTHBEARER
(unsecured tokens, and JWTs checked against a JWKS file), credentials surviving a restart, and
librdkafka re-authenticating under ``connections.max.reauth.ms``."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

import pytest

from snakka.client.admin import Admin
from snakka.client.sasl import SaslClientConfig
from snakka.testing import EmbeddedBroker
from tests.integration.helpers import run_async, wait_until

pytestmark = pytest.mark.usefixtures("no_broker_errors")

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_admin="admin-secret";')
CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka", "kcat"]
N = 20


def sasl_broker(tmp_path=None, **config: str) -> EmbeddedBroker:
    cfg = {"listeners": "SASL_PLAINTEXT://localhost:0", **config}
    return EmbeddedBroker(None if tmp_path is None else str(tmp_path), config=cfg,
                          log_level="INFO")


def client_config(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def create_topic(bs: str, topic: str, sec: dict[str, str]) -> None:
    async def go():
        async with Admin(bs, sasl=SaslClientConfig.from_config(sec)) as admin:
            await admin.create_topic(topic, 1)
    run_async(go())


# -- one produce/consume round trip per client ----------------------------------------------
def confluent_roundtrip(bs: str, topic: str, sec: dict[str, str]) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": bs, **sec})
    for i in range(N):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bs, "group.id": "g", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", **sec})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < N and time.monotonic() < deadline:
            for m in c.consume(N, timeout=0.5):
                assert not m.error(), m.error()
                out.append(m.value())
        return out
    finally:
        c.close()


def kafka_python_kwargs(sec: dict[str, str]) -> dict:
    """kafka-python's arguments for librdkafka-style client configs (SASL, and the CA and
    client certificate files of SASL_SSL; test_sasl_ssl.py uses the same round trips)."""
    kw = {"security_protocol": sec["security.protocol"],
          "sasl_mechanism": sec["sasl.mechanism"],
          "sasl_plain_username": sec["sasl.username"],
          "sasl_plain_password": sec["sasl.password"]}
    if "ssl.ca.location" in sec:
        kw["ssl_cafile"] = sec["ssl.ca.location"]
    if "ssl.certificate.location" in sec:
        kw |= {"ssl_certfile": sec["ssl.certificate.location"],
               "ssl_keyfile": sec["ssl.key.location"]}
    return kw


def aiokafka_kwargs(sec: dict[str, str]) -> dict:
    """aiokafka takes TLS as an SSLContext rather than file names."""
    kw = {k: v for k, v in kafka_python_kwargs(sec).items() if not k.startswith("ssl_")}
    if sec["security.protocol"].endswith("SSL"):
        from aiokafka.helpers import create_ssl_context

        kw["ssl_context"] = create_ssl_context(cafile=sec.get("ssl.ca.location"),
                                               certfile=sec.get("ssl.certificate.location"),
                                               keyfile=sec.get("ssl.key.location"))
    return kw


def kafka_python_roundtrip(bs: str, topic: str, sec: dict[str, str]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    kw = kafka_python_kwargs(sec)
    p = KafkaProducer(bootstrap_servers=bs, **kw)
    for i in range(N):
        p.send(topic, f"v{i}".encode())
    p.flush(30)
    p.close()
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=10000, **kw)
    try:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_beginning()
        out = []
        for m in c:
            out.append(m.value)
            if len(out) == N:
                break
        return out
    finally:
        c.close()


def aiokafka_roundtrip(bs: str, topic: str, sec: dict[str, str]) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    kw = aiokafka_kwargs(sec)

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=bs, **kw)
        await p.start()
        try:
            for i in range(N):
                await p.send_and_wait(topic, f"v{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False,
                             auto_offset_reset="earliest", **kw)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            out: list[bytes] = []
            while len(out) < N:
                batch = await c.getmany(timeout_ms=1000)
                out += [m.value for msgs in batch.values() for m in msgs]
            return out
        finally:
            await c.stop()

    return run_async(go())


def kcat_roundtrip(bs: str, topic: str, sec: dict[str, str]) -> list[bytes]:
    x = ["-X", f"security.protocol={sec['security.protocol']}",
         "-X", f"sasl.mechanisms={sec['sasl.mechanism']}",
         "-X", f"sasl.username={sec['sasl.username']}",
         "-X", f"sasl.password={sec['sasl.password']}"]
    data = "".join(f"v{i}\n" for i in range(N)).encode()
    prod = subprocess.run(["kcat", "-b", bs, "-P", "-t", topic, *x], input=data, timeout=60,
                          capture_output=True)
    assert prod.returncode == 0, prod.stderr.decode()
    out = subprocess.run(["kcat", "-b", bs, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                          *x], timeout=60, capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.splitlines()


ROUNDTRIP = {"confluent-kafka": confluent_roundtrip, "kafka-python": kafka_python_roundtrip,
             "aiokafka": aiokafka_roundtrip, "kcat": kcat_roundtrip}
EXPECTED = [f"v{i}".encode() for i in range(N)]


@pytest.fixture(scope="module")
def plain_broker():
    with sasl_broker(**{"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS,
                        "connection.failed.authentication.delay.ms": "20"}) as b:
        yield b


@pytest.mark.parametrize("client", CLIENTS)
def test_plain_roundtrip(plain_broker, client):
    sec = client_config("PLAIN", "alice", "alice-secret")
    topic = f"plain-{client}"
    create_topic(plain_broker.bootstrap_servers, topic, sec)
    assert ROUNDTRIP[client](plain_broker.bootstrap_servers, topic, sec) == EXPECTED


@pytest.fixture(scope="module")
def scram_broker(tmp_path_factory):
    with sasl_broker(tmp_path_factory.mktemp("scram"), **{
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
            "sasl.jaas.config": PLAIN_JAAS,
            "connection.failed.authentication.delay.ms": "20"}) as b:
        yield b


def confluent_add_user(bs: str, user: str, password: str, admin_sec: dict[str, str]) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bs, **admin_sec})
    fs = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode())])
    for f in fs.values():
        f.result(timeout=30)
    described = admin.describe_user_scram_credentials([user])
    infos = described[user].result(timeout=30).scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]


@pytest.mark.parametrize("client", CLIENTS)
def test_scram_sha_512_roundtrip(scram_broker, client):
    bs = scram_broker.bootstrap_servers
    admin_sec = client_config("PLAIN", "admin", "admin-secret")
    user = f"user-{client}"
    confluent_add_user(bs, user, f"{user}-pw", admin_sec)
    sec = client_config("SCRAM-SHA-512", user, f"{user}-pw")
    topic = f"scram-{client}"
    create_topic(bs, topic, sec)
    assert ROUNDTRIP[client](bs, topic, sec) == EXPECTED


def test_snakka_users_cli_and_restart(scram_broker, tmp_path):
    bs = scram_broker.bootstrap_servers
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                     'required username="admin" password="admin-secret";\n')
    cli = [sys.executable, "-m", "snakka"]
    common = ["-b", bs, "--command-config", str(props)]
    subprocess.run([*cli, "users", "add", "carol", "--mechanism", "SCRAM-SHA-256",
                    "--iterations", "4096", "--password", "carol-pw", *common], check=True,
                   timeout=60, capture_output=True)
    out = subprocess.run([*cli, "users", "describe", "carol", *common], check=True,
                         timeout=60, capture_output=True, text=True).stdout
    assert out.split() == ["carol", "SCRAM-SHA-256", "iterations=4096"]
    bad = subprocess.run([*cli, "users", "add", "dave", "--iterations", "100", "--password",
                          "x", *common], timeout=60, capture_output=True, text=True)
    assert bad.returncode != 0 and "UNACCEPTABLE_CREDENTIAL" in bad.stderr
    missing = subprocess.run([*cli, "users", "delete", "nobody", *common], timeout=60,
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "RESOURCE_NOT_FOUND" in missing.stderr

    scram_broker.restart()  # credentials are in the metadata log
    bs = scram_broker.bootstrap_servers
    sec = client_config("SCRAM-SHA-256", "carol", "carol-pw")
    create_topic(bs, "after-restart", sec)
    assert confluent_roundtrip(bs, "after-restart", sec) == EXPECTED
    subprocess.run([*cli, "users", "delete", "carol", "--mechanism", "SCRAM-SHA-256",
                    *common], check=True, timeout=60, capture_output=True)
    listed = subprocess.run([*cli, "users", "list", *common], check=True, timeout=60,
                            capture_output=True, text=True).stdout
    assert "carol" not in listed


@pytest.mark.parametrize("mechanism,user,password", [
    ("PLAIN", "alice", "Xyzzy-42"), ("PLAIN", "mallory", "Plugh-17"),
    ("SCRAM-SHA-512", "admin", "admin-secret"),  # no SCRAM credential: unknown user
    ("SCRAM-SHA-512", "user-confluent-kafka", "Frotz-99"),
])
def test_bad_credentials_fail_that_client_only(scram_broker, caplog, mechanism, user, password):
    from confluent_kafka import KafkaError, Producer

    bs = scram_broker.bootstrap_servers
    good = Producer({"bootstrap.servers": bs, **client_config("PLAIN", "alice", "alice-secret")})
    good.produce("bystander", b"before")
    assert good.flush(30) == 0
    errors: list = []
    bad = Producer({"bootstrap.servers": bs, "error_cb": errors.append,
                    **client_config(mechanism, user, password)})
    with caplog.at_level(logging.INFO, logger="snakka.security"):
        wait_until(lambda: bad.poll(0.1) is not None and errors or errors, 30,
                   "an authentication error")
        wait_until(lambda: any("Failed authentication" in r.getMessage()
                               for r in caplog.records), 10, "the broker's log line")
    assert errors[0].code() == KafkaError._AUTHENTICATION, errors[0]
    line = next(r for r in caplog.records if "Failed authentication" in r.getMessage())
    assert line.levelno == logging.INFO and mechanism in line.getMessage()
    assert repr(user) in line.getMessage() and password not in line.getMessage()
    good.produce("bystander", b"after")  # the authenticated client is unaffected
    assert good.flush(30) == 0


def test_kafka_python_and_aiokafka_fail_to_bootstrap(plain_broker, caplog):
    """Both wrap the broker's SASL_AUTHENTICATION_FAILED in "unable to bootstrap"; their own
    log says why (aiokafka) and the broker logs the failure."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    bs = plain_broker.bootstrap_servers
    kw = kafka_python_kwargs(client_config("PLAIN", "alice", "Xyzzy-42"))
    with caplog.at_level(logging.INFO):
        with pytest.raises(KafkaTimeoutError):
            KafkaProducer(bootstrap_servers=bs, max_block_ms=3000, **kw)

        async def aio():
            p = AIOKafkaProducer(bootstrap_servers=bs, **kw)
            try:
                await p.start()
            finally:
                await p.stop()
        with pytest.raises(KafkaConnectionError):
            run_async(aio())
    failures = [r for r in caplog.records if r.name == "snakka.security"
                and "Failed authentication" in r.getMessage()]
    assert len(failures) >= 2 and all("Xyzzy" not in r.getMessage() for r in failures)
    assert any("SaslAuthenticationFailed" in r.getMessage() or "Invalid username or password"
               in r.getMessage() for r in caplog.records if r.name.startswith("aiokafka"))


# -- OAUTHBEARER -----------------------------------------------------------------------------
def test_oauthbearer_unsecured_with_confluent_kafka():
    with sasl_broker(**{"sasl.enabled.mechanisms": "OAUTHBEARER"}) as b:
        sec = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
               "sasl.oauthbearer.method": "default",
               "enable.sasl.oauthbearer.unsecure.jwt": True,
               "sasl.oauthbearer.config": "principal=alice"}
        ours = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.config": "principal=alice"}
        create_topic(b.bootstrap_servers, "oauth", ours)
        assert confluent_roundtrip(b.bootstrap_servers, "oauth", sec) == EXPECTED

        # kafka-python: a token provider handing out Kafka's unsecured token.
        from kafka import KafkaProducer
        from kafka.net.sasl.oauth import AbstractTokenProvider

        from snakka.client.sasl import unsecured_token

        class Unsecured(AbstractTokenProvider):
            def token(self):
                return unsecured_token("bob", time.time())

        kp = KafkaProducer(bootstrap_servers=b.bootstrap_servers,
                           security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                           sasl_oauth_token_provider=Unsecured())
        kp.send("oauth", b"from-kafka-python").get(timeout=30)
        kp.close()


def test_oauthbearer_jwks_with_confluent_kafka(tmp_path):
    import jwt
    from confluent_kafka import KafkaError, Producer
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="test", use="sig", alg="RS256")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk]}))
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def token(signer=key, aud="kafka", exp_in=300):
        now = int(time.time())
        return jwt.encode({"sub": "svc", "aud": aud, "iss": "https://idp.test", "iat": now,
                           "exp": now + exp_in}, signer, algorithm="RS256",
                          headers={"kid": "test"})

    with sasl_broker(**{"sasl.enabled.mechanisms": "OAUTHBEARER",
                        "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
                        "sasl.oauthbearer.expected.audience": "kafka",
                        "sasl.oauthbearer.expected.issuer": "https://idp.test",
                        "sasl.oauthbearer.clock.skew.seconds": "5",
                        "connection.failed.authentication.delay.ms": "10"}) as b:
        bs = b.bootstrap_servers

        def producer(tok: str, errors: list):
            return Producer({"bootstrap.servers": bs, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "OAUTHBEARER", "error_cb": errors.append,
                             "oauth_cb": lambda _cfg: (tok, time.time() + 300, "svc")})

        ok = producer(token(), [])
        ok.produce("jwt-topic", b"signed")
        assert ok.flush(30) == 0
        for bad in (token(aud="other"), token(exp_in=-120), token(signer=other)):
            errors: list = []
            p = producer(bad, errors)
            wait_until(lambda p=p, errors=errors: p.poll(0.1) is not None and errors or errors,
                       30, "an authentication error")
            assert errors[0].code() == KafkaError._AUTHENTICATION, errors[0]
            assert "invalid_token" in errors[0].str()


# -- KIP-368: re-authentication ---------------------------------------------------------------
def test_librdkafka_reauthenticates_and_keeps_consuming(caplog):
    from confluent_kafka import Consumer, Producer, TopicPartition

    with sasl_broker(**{"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS,
                        "connections.max.reauth.ms": "1500"}) as b:
        bs = b.bootstrap_servers
        sec = client_config("PLAIN", "alice", "alice-secret")
        create_topic(bs, "reauth", sec)
        p = Producer({"bootstrap.servers": bs, **sec})
        c = Consumer({"bootstrap.servers": bs, "group.id": "reauth", "auto.offset.reset":
                      "earliest", "enable.auto.commit": False, **sec})
        c.assign([TopicPartition("reauth", 0, 0)])
        got: list[bytes] = []
        with caplog.at_level(logging.DEBUG, logger="snakka.security"):
            deadline = time.monotonic() + 8  # several session lifetimes
            i = 0
            while time.monotonic() < deadline:
                p.produce("reauth", f"m{i}".encode())
                p.poll(0)
                i += 1
                for m in c.consume(100, timeout=0.2):
                    assert not m.error(), m.error()
                    got.append(m.value())
            assert p.flush(30) == 0
            deadline = time.monotonic() + 20
            while len(got) < i and time.monotonic() < deadline:
                got += [m.value() for m in c.consume(100, timeout=0.2) if not m.error()]
        c.close()
        assert got == [f"m{k}".encode() for k in range(i)]
        reauths = [r for r in caplog.records if "re-authenticated" in r.getMessage()]
        assert len(reauths) >= 4, f"only {len(reauths)} re-authentications"


# -- our ShareConsumer over SASL --------------------------------------------------------------
def test_share_consumer_over_sasl_scram(scram_broker):
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    from snakka.client.share_consumer import ShareConsumer

    bs = scram_broker.bootstrap_servers
    admin_sec = client_config("PLAIN", "admin", "admin-secret")
    confluent_add_user(bs, "sharer", "sharer-pw", admin_sec)
    sec = client_config("SCRAM-SHA-512", "sharer", "sharer-pw")
    create_topic(bs, "shared-jobs", sec)
    admin = AdminClient({"bootstrap.servers": bs, **admin_sec})
    fs = admin.incremental_alter_configs([ConfigResource(
        ResourceType.GROUP, "sasl-workers", incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest",
            incremental_operation=AlterConfigOpType.SET)])])
    for f in fs.values():
        f.result(timeout=30)
    p = Producer({"bootstrap.servers": bs, **sec})
    for i in range(5):
        p.produce("shared-jobs", f"job{i}".encode())
    assert p.flush(30) == 0
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "sasl-workers",
                       "fetch.max.wait.ms": 200, **sec})
    try:
        c.subscribe(["shared-jobs"])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            got += c.poll(0.5)
        assert sorted(r.value for r in got) == [f"job{i}".encode() for i in range(5)]
    finally:
        c.close()
    with pytest.raises(ValueError, match="SASL_TLS"):  # never a silent plaintext connection
        ShareConsumer({"bootstrap.servers": bs, "group.id": "g", **sec,
                       "security.protocol": "SASL_TLS"})
