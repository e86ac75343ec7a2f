"""The reference Kafka's Java clients authenticate to snakka with SCRAM over TLS (issue 14's
acceptance): ``kafka-topics.sh --command-config``, ``kafka-console-producer.sh
--producer.config`` and ``kafka-console-consumer.sh --consumer.config`` against a SASL_SSL
listener, with Java's own config names (``sasl.jaas.config`` with ``ScramLoginModule``, a PEM
trust store, host name verification on), and the records come back exactly. A wrong password
gets Java's authentication error.

Certificates come from tests/security/certs.py; the SCRAM user is made over the protocol
(AlterUserScramCredentials from confluent-kafka; kafka-configs.sh has its own test in
tests/security/test_sasl_reference_tools.py). Skipped where the reference distribution or
`java` is absent (tests/reference_kafka.py says why).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from reference_kafka import run_tool, skip_reason

from snakka.testing import EmbeddedBroker
from tests.security.certs import TlsMaterial, make_material
from tests.security.test_sasl_clients import confluent_add_user

if skip_reason():
    pytest.skip(skip_reason(), allow_module_level=True)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')
USER, PASSWORD = "javauser", "java-secret-1"
N = 25


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> TlsMaterial:
    return make_material(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def broker(tls) -> EmbeddedBroker:
    cfg = {"listeners": "SASL_SSL://localhost:0",
           "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN", "sasl.jaas.config": PLAIN_JAAS,
           "num.partitions": "1", **tls.broker_config()}
    with EmbeddedBroker(config=cfg, log_level="INFO") as b:
        confluent_add_user(b.bootstrap_servers, USER, PASSWORD, {
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(tls.ca),
            "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})
        yield b


def java_config(path: Path, tls: TlsMaterial, password: str = PASSWORD) -> str:
    """A Java client's properties file: SCRAM-SHA-512 over TLS, the CA as a PEM trust store."""
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={tls.ca}\n")
    return str(path)


def tool(name: str, *args: str, input: str | None = None) -> str:
    r = run_tool(name, *args, input=input, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{name} {' '.join(args)} exited {r.returncode}:\n{out[-3000:]}"
    assert "Exception" not in out, f"{name} {' '.join(args)}:\n{out[-3000:]}"
    return r.stdout


@pytest.mark.timeout(300)
def test_java_console_producer_and_consumer_over_sasl_ssl(broker, tls, tmp_path):
    bs = broker.bootstrap_servers
    props = java_config(tmp_path / "client.properties", tls)
    t = f"java-sasl-ssl-{uuid.uuid4().hex[:8]}"

    out = tool("kafka-topics.sh", "--bootstrap-server", bs, "--command-config", props,
               "--create", "--topic", t, "--partitions", "1", "--replication-factor", "1")
    assert f"Created topic {t}." in out
    assert t in tool("kafka-topics.sh", "--bootstrap-server", bs, "--command-config", props,
                     "--list").split()

    lines = [f"record-{i}-{'x' * i}" for i in range(N)]
    tool("kafka-console-producer.sh", "--bootstrap-server", bs, "--topic", t,
         "--producer.config", props, input="\n".join(lines) + "\n")
    out = tool("kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", t,
               "--from-beginning", "--max-messages", str(N), "--timeout-ms", "60000",
               "--consumer.config", props)
    assert out.splitlines() == lines

    # What the Java producer wrote, read back by another client: exactly the same records.
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "check", "enable.auto.commit": False,
                  "security.protocol": "SASL_SSL", "ssl.ca.location": str(tls.ca),
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                  "sasl.password": PASSWORD})
    try:
        c.assign([TopicPartition(t, 0, 0)])
        got = []
        while len(got) < N:
            msgs = c.consume(N, timeout=10)
            assert msgs, f"only {len(got)} of {N} records"
            got += [m for m in msgs if not m.error()]
        assert [m.value().decode() for m in got] == lines
        assert [m.offset() for m in got] == list(range(N))
        assert all(m.key() is None for m in got)
    finally:
        c.close()


@pytest.mark.timeout(300)
def test_java_wrong_password_is_an_authentication_failure(broker, tls, tmp_path):
    props = java_config(tmp_path / "bad.properties", tls, password="Wrong-pw-7")
    r = run_tool("kafka-topics.sh", "--bootstrap-server", broker.bootstrap_servers,
                 "--command-config", props, "--list", timeout=120)
    assert r.returncode != 0
    assert "SaslAuthenticationException" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
