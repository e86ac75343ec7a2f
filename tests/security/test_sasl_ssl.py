"""SASL_SSL end to end (issue 14's acceptance): SASL over TLS with real clients, our own
client and CLI, and the failures that must touch nothing else.

One broker serves two SASL_SSL listeners at once, with the certificates of the session's
``tls`` fixture (tests/security/certs.py):

- ``SASL_SSL``: server certificate only; SCRAM-SHA-512 (users made with
  AlterUserScramCredentials by a PLAIN admin over the same listener) and PLAIN;
- ``SASLMTLS`` (protocol SASL_SSL): the same, plus ``ssl.client.auth=required`` through
  ``listener.name.saslmtls.*``, so a client needs a CA-signed certificate *and* a password.

confluent-kafka, kafka-python, aiokafka and kcat produce and consume with SCRAM-SHA-512 over
TLS; snakka's ShareConsumer reads a topic; the ``snakka`` CLI creates a topic, produces and
consumes through a ``--command-config`` file. An untrusted server certificate, a wrong
password or unknown user, and (on SASLMTLS) an expired or untrusted client certificate with a
right password fail that client with its own error; the broker logs the failed
authentication at INFO, and a bystander keeps producing.
"""

from __future__ import annotations

import logging
import ssl
import subprocess
import time
import uuid

import pytest

from snakka.client.admin import Admin
from snakka.testing import EmbeddedBroker
from tests.integration.helpers import KCAT, SNAKKA, run_async, wait_until
from tests.security.test_sasl_clients import (
    aiokafka_roundtrip,
    confluent_add_user,
    confluent_roundtrip,
    kafka_python_kwargs,
    kafka_python_roundtrip,
)

pytestmark = pytest.mark.usefixtures("no_broker_errors")

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret" user_alice="alice-secret";')
N = 20
EXPECTED = [f"v{i}".encode() for i in range(N)]
CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka", "kcat"]


@pytest.fixture(scope="module")
def broker(tls):
    cfg = {
        "listeners": "SASL_SSL://localhost:0,SASLMTLS://localhost:0",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SASLMTLS:SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "20",
        "snakka.ssl.handshake.timeout.ms": "3000",
        **tls.broker_config(),
        **tls.broker_config(client_auth="required", prefix="listener.name.saslmtls."),
    }
    with EmbeddedBroker(config=cfg, log_level="INFO") as eb:
        yield eb


def bootstrap(eb: EmbeddedBroker, name: str = "SASL_SSL") -> str:
    port = next(s.port for s in eb.broker.listener_servers if s.listener.name == name)
    return f"localhost:{port}"


def topic() -> str:
    return f"sasl-ssl-{uuid.uuid4().hex[:8]}"


def sec(tls, mechanism: str, user: str, password: str, client: str | None = None
        ) -> dict[str, str]:
    """librdkafka's names (also what snakka.client reads)."""
    cfg = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(tls.ca),
           "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    if client:
        c = tls.clients[client]
        cfg |= {"ssl.certificate.location": str(c.cert), "ssl.key.location": str(c.key)}
    return cfg


def admin_sec(tls) -> dict[str, str]:
    return sec(tls, "PLAIN", "admin", "admin-secret")


def create_topic(bs: str, name: str, cfg: dict[str, str]) -> None:
    async def go():
        async with Admin(bs, config=cfg) as admin:
            await admin.create_topic(name, 1)
    run_async(go())


@pytest.fixture(scope="module")
def scram_user(broker, tls) -> tuple[str, str]:
    """A SCRAM-SHA-512 user made with AlterUserScramCredentials over SASL_SSL."""
    confluent_add_user(bootstrap(broker), "sslalice", "sslalice-pw", admin_sec(tls))
    return "sslalice", "sslalice-pw"


# -- one round trip per client ----------------------------------------------------------------
def kcat_x(cfg: dict[str, str]) -> list[str]:
    x = []
    for k, v in cfg.items():
        x += ["-X", f"{'sasl.mechanisms' if k == 'sasl.mechanism' else k}={v}"]
    return x


def kcat_roundtrip(bs: str, t: str, cfg: dict[str, str]) -> list[bytes]:
    data = "".join(f"v{i}\n" for i in range(N)).encode()
    prod = subprocess.run([KCAT, "-b", bs, "-P", "-t", t, *kcat_x(cfg)], input=data,
                          timeout=60, capture_output=True)
    assert prod.returncode == 0, prod.stderr.decode()
    out = subprocess.run([KCAT, "-b", bs, "-C", "-t", t, "-o", "beginning", "-e", "-q",
                          *kcat_x(cfg)], timeout=60, capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.splitlines()


ROUNDTRIP = {"confluent-kafka": confluent_roundtrip, "kafka-python": kafka_python_roundtrip,
             "aiokafka": aiokafka_roundtrip, "kcat": kcat_roundtrip}


@pytest.mark.parametrize("client", CLIENTS)
def test_scram_sha_512_over_tls(broker, tls, scram_user, client):
    bs = bootstrap(broker)
    cfg = sec(tls, "SCRAM-SHA-512", *scram_user)
    t = topic()
    create_topic(bs, t, cfg)
    assert ROUNDTRIP[client](bs, t, cfg) == EXPECTED


def principals(eb: EmbeddedBroker, listener: str) -> set[str]:
    return {c.principal.name for c in list(eb.broker.connections)
            if c.listener.name == listener and c.principal is not None}


@pytest.mark.parametrize("listener,client", [("SASL_SSL", None), ("SASLMTLS", "bob")])
def test_the_principal_is_sasls(broker, tls, scram_user, listener, client):
    """TLS is only the transport: with or without a client certificate the connection acts as
    the SASL user."""
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": bootstrap(broker, listener),
                     **sec(tls, "SCRAM-SHA-512", *scram_user, client=client)})
    assert a.list_topics(timeout=20) is not None
    assert "sslalice" in wait_until(lambda: principals(broker, listener), 10, "a connection")
    assert not any("bob" in p for p in principals(broker, listener))
    del a


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "kcat"])
def test_scram_over_tls_with_client_certificate_required(broker, tls, scram_user, client):
    """ssl.client.auth=required on a SASL_SSL listener: certificate and password both needed;
    the principal comes from SASL, not from the certificate."""
    bs = bootstrap(broker, "SASLMTLS")
    cfg = sec(tls, "SCRAM-SHA-512", *scram_user, client="bob")
    t = topic()
    create_topic(bs, t, cfg)
    assert ROUNDTRIP[client](bs, t, cfg) == EXPECTED


def test_sasl_mtls_listener_refuses_a_client_without_certificate(broker, tls, scram_user,
                                                                 caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    caplog.set_level(logging.INFO, logger="snakka.server")
    kw = kafka_python_kwargs(sec(tls, "SCRAM-SHA-512", *scram_user))
    with pytest.raises(KafkaError):
        p = KafkaProducer(bootstrap_servers=bootstrap(broker, "SASLMTLS"), max_block_ms=3000,
                          request_timeout_ms=3000, api_version=(3, 0), **kw)
        p.send(topic(), b"never").get(5)
    wait_until(lambda: any("Failed authentication" in r.getMessage()
                           and "SASLMTLS" in r.getMessage() for r in caplog.records), 10,
               "the broker's log line")


# -- our ShareConsumer and CLI -----------------------------------------------------------------
@pytest.mark.parametrize("trust", ["ssl.ca.location", "ssl.truststore"])
def test_share_consumer_over_sasl_ssl(broker, tls, scram_user, trust):
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    from snakka.client.share_consumer import ShareConsumer

    bs = bootstrap(broker)
    cfg = sec(tls, "SCRAM-SHA-512", *scram_user)
    t, group = topic(), f"share-{uuid.uuid4().hex[:6]}"
    create_topic(bs, t, cfg)
    admin = AdminClient({"bootstrap.servers": bs, **admin_sec(tls)})
    fs = admin.incremental_alter_configs([ConfigResource(
        ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest",
            incremental_operation=AlterConfigOpType.SET)])])
    for f in fs.values():
        f.result(timeout=30)
    p = Producer({"bootstrap.servers": bs, **cfg})
    for i in range(5):
        p.produce(t, f"job{i}".encode())
    assert p.flush(30) == 0

    ours = dict(cfg)
    if trust == "ssl.truststore":  # Java's names
        del ours["ssl.ca.location"]
        ours |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls.ca)}
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "fetch.max.wait.ms": 200,
                       **ours})
    try:
        c.subscribe([t])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            got += c.poll(0.5)
        assert sorted(r.value for r in got) == [f"job{i}".encode() for i in range(5)]
    finally:
        c.close()


def test_cli_over_sasl_ssl(broker, tls, scram_user, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={tls.ca}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{scram_user[0]}" password="{scram_user[1]}";\n')
    common = ["-b", bootstrap(broker), "--command-config", str(props)]
    t = topic()

    def cli(*args: str, input_: str | None = None) -> subprocess.CompletedProcess:
        r = subprocess.run([SNAKKA, *args, *common], input=input_, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, f"snakka {' '.join(args)}: {r.stderr}"
        return r

    cli("topics", "create", t, "--partitions", "1")
    assert t in cli("topics", "list").stdout.split()
    cli("produce", t, input_="".join(f"line-{i}\n" for i in range(N)))
    out = cli("consume", t, "--from-beginning", "-n", str(N)).stdout
    assert out.splitlines() == [f"line-{i}" for i in range(N)]

    # A wrong password: one clean line naming the failure, exit 1, no traceback.
    bad = tmp_path / "bad.properties"
    bad.write_text(props.read_text().replace(scram_user[1], "Wrong-pw-1"))
    r = subprocess.run([SNAKKA, "topics", "list", "-b", bootstrap(broker), "--command-config",
                        str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "uthentication" in r.stderr, r.stderr


# -- failures touch only the failing client -----------------------------------------------------
@pytest.fixture
def bystander(broker, tls, scram_user):
    from confluent_kafka import Producer

    good = Producer({"bootstrap.servers": bootstrap(broker),
                     **sec(tls, "SCRAM-SHA-512", *scram_user)})
    good.produce("sasl-ssl-bystander", b"before")
    assert good.flush(30) == 0
    yield good
    good.produce("sasl-ssl-bystander", b"after")  # the authenticated client is unaffected
    assert good.flush(30) == 0


@pytest.mark.parametrize("mechanism,user,password", [
    ("SCRAM-SHA-512", "sslalice", "Xyzzy-42"),   # wrong password
    ("SCRAM-SHA-512", "nobody", "Plugh-17"),      # unknown user
    ("PLAIN", "alice", "Frotz-99"),
])
def test_wrong_password_over_tls_fails_that_client_only(broker, tls, bystander, caplog,
                                                        mechanism, user, password):
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    bad = Producer({"bootstrap.servers": bootstrap(broker), "error_cb": errors.append,
                    **sec(tls, mechanism, user, password)})
    with caplog.at_level(logging.INFO, logger="snakka.security"):
        wait_until(lambda: bad.poll(0.1) is not None and errors or errors, 30,
                   "an authentication error")
        wait_until(lambda: any("Failed authentication" in r.getMessage()
                               for r in caplog.records), 10, "the broker's log line")
    assert errors[0].code() == KafkaError._AUTHENTICATION, errors[0]
    line = next(r for r in caplog.records if "Failed authentication" in r.getMessage())
    assert line.levelno == logging.INFO and mechanism in line.getMessage()
    assert "SASL_SSL" in line.getMessage() and password not in line.getMessage()


def test_untrusted_server_certificate_fails_the_client(broker, tls, bystander, scram_user,
                                                       caplog):
    """Clients that trust another CA refuse the broker's certificate: librdkafka says
    _SSL / certificate verify failed; our client raises SSLCertVerificationError; the broker
    logs the handshake the client aborted."""
    from confluent_kafka import KafkaError, Producer

    from snakka.client.connection import KafkaConnection

    caplog.set_level(logging.INFO, logger="snakka.server")

    wrong_ca = str(tls.clients["rogue"].cert)  # the rogue CA's chain, not the broker's CA
    cfg = {**sec(tls, "SCRAM-SHA-512", *scram_user), "ssl.ca.location": wrong_ca}
    errors: list = []
    bad = Producer({"bootstrap.servers": bootstrap(broker), "error_cb": errors.append, **cfg})
    wait_until(lambda: bad.poll(0.1) is not None and errors or errors, 30, "an SSL error")
    assert errors[0].code() in (KafkaError._SSL, KafkaError._TRANSPORT,
                                KafkaError._ALL_BROKERS_DOWN), errors[0]
    assert any("certificate verify failed" in e.str() for e in errors), errors

    async def ours():
        conn = KafkaConnection("localhost", int(bootstrap(broker).rsplit(":", 1)[1]),
                               config=cfg)
        try:
            await conn.connect(timeout=10)
        finally:
            await conn.close()
    with pytest.raises(ssl.SSLCertVerificationError):
        run_async(ours())

    r = subprocess.run([KCAT, "-b", bootstrap(broker), "-L", "-m", "5", *kcat_x(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "certificate verify failed" in r.stderr, r.stderr
    lines = wait_until(lambda: [r for r in caplog.records if "Failed authentication"
                                in r.getMessage() and "SASL_SSL" in r.getMessage()], 10,
                       "the broker's log line")
    assert all(r.levelno == logging.INFO for r in lines)
    assert any("UNKNOWN_CA" in r.getMessage() or "alert" in r.getMessage().lower()
               for r in lines), [r.getMessage() for r in lines]


@pytest.mark.parametrize("cert", ["expired", "rogue"])
def test_bad_client_certificate_with_good_password_fails_alone(broker, tls, bystander,
                                                               scram_user, caplog, cert):
    """On the SASLMTLS listener (ssl.client.auth=required) a right password does not make up
    for an expired or untrusted client certificate: the handshake fails before SASL."""
    from confluent_kafka import KafkaError, Producer

    caplog.set_level(logging.INFO, logger="snakka.server")
    errors: list = []
    bad = Producer({"bootstrap.servers": bootstrap(broker, "SASLMTLS"),
                    "error_cb": errors.append,
                    **sec(tls, "SCRAM-SHA-512", *scram_user, client=cert)})
    wait_until(lambda: bad.poll(0.1) is not None and errors or errors, 30, "an SSL error")
    assert errors[0].code() in (KafkaError._SSL, KafkaError._TRANSPORT,
                                KafkaError._ALL_BROKERS_DOWN), errors[0]
    lines = wait_until(lambda: [r for r in caplog.records if "Failed authentication"
                                in r.getMessage() and "SASLMTLS" in r.getMessage()], 10,
                       "the broker's log line")
    assert any("CERTIFICATE" in r.getMessage().upper() for r in lines), \
        [r.getMessage() for r in lines]
    assert not principals(broker, "SASLMTLS") & {cert}
