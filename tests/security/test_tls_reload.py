"""Certificate reload without restart (Kafka's dynamic per-listener SSL configs, KIP-226).

A broker serves an SSL listener with certificate A (tests/security/certs.py
make_rotation_material); confluent-kafka's AdminClient alters
``listener.name.ssl.ssl.keystore.location`` on ``ConfigResource(BROKER, "<node id>")`` through
the PLAINTEXT listener. What the clients see: a new TLS connection gets B, a connection made
before keeps working; re-altering the same path after overwriting the file reloads it; a bad
key store is refused with Kafka's INVALID_REQUEST and A stays; the value survives a restart;
the reference ``kafka-configs.sh`` does the same.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import uuid

import pytest
from cryptography import x509

from snakka.testing import EmbeddedBroker

from .certs import RotationMaterial, make_rotation_material

KEY = "listener.name.ssl.ssl.keystore.location"


@pytest.fixture
def rot(tmp_path) -> RotationMaterial:
    return make_rotation_material(tmp_path / "rot")


@pytest.fixture
def served(rot, tmp_path):
    """A copy of key store A at a path the test may overwrite, and a broker serving it."""
    path = tmp_path / "served.keystore.pem"
    shutil.copy(rot.a, path)
    cfg = {"listeners": "PLAINTEXT://localhost:0,SSL://localhost:0",
           "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
           "listener.name.ssl.ssl.keystore.type": "PEM", KEY: str(path)}
    with EmbeddedBroker(config=cfg) as eb:
        yield eb, path


def ssl_port(eb: EmbeddedBroker) -> int:
    return next(s.port for s in eb.broker.listener_servers if s.listener.name == "SSL")


def plaintext(eb: EmbeddedBroker) -> str:
    port = next(s.port for s in eb.broker.listener_servers if s.listener.name == "PLAINTEXT")
    return f"localhost:{port}"


def served_serial(eb: EmbeddedBroker, ca) -> int:
    """A new TLS connection's server certificate serial (verified against the CA)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", ssl_port(eb)), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def alter(eb: EmbeddedBroker, configs: dict[str, str], resource: str | None = None) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": plaintext(eb)})
    res = ConfigResource(ResourceType.BROKER, str(eb.broker.node_id) if resource is None
                         else resource, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(timeout=30)


def refused(eb: EmbeddedBroker, configs: dict[str, str], resource: str | None = None) -> str:
    from confluent_kafka import KafkaError, KafkaException

    with pytest.raises(KafkaException) as ei:
        alter(eb, configs, resource)
    err = ei.value.args[0]
    assert err.code() == KafkaError.INVALID_REQUEST, err
    return err.str()


def produce_one(producer, topic: str) -> None:
    producer.produce(topic, b"x")
    assert producer.flush(30) == 0


@pytest.mark.timeout(120)
def test_alter_switches_new_connections_and_keeps_old_ones(served, rot):
    from confluent_kafka import Producer

    eb, _path = served
    assert served_serial(eb, rot.ca) == rot.serials["a"]
    old = Producer({"bootstrap.servers": f"localhost:{ssl_port(eb)}",
                    "security.protocol": "SSL", "ssl.ca.location": str(rot.ca)})
    topic = f"reload-{uuid.uuid4().hex[:8]}"
    produce_one(old, topic)

    alter(eb, {KEY: str(rot.b)})
    assert served_serial(eb, rot.ca) == rot.serials["b"]
    produce_one(old, topic)  # the connection made with A still works
    new = Producer({"bootstrap.servers": f"localhost:{ssl_port(eb)}",
                    "security.protocol": "SSL", "ssl.ca.location": str(rot.ca)})
    produce_one(new, topic)
    assert eb.broker.metadata.dynamic_configs[(4, str(eb.broker.node_id))][KEY] == str(rot.b)


@pytest.mark.timeout(120)
def test_same_path_again_reloads_a_changed_file(served, rot):
    eb, path = served
    alter(eb, {KEY: str(path)})  # unchanged file: nothing to reload
    assert served_serial(eb, rot.ca) == rot.serials["a"]
    shutil.copy(rot.b, path)
    alter(eb, {KEY: str(path)})
    assert served_serial(eb, rot.ca) == rot.serials["b"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("bad, words", [
    ("garbage", "not a PEM key store"),
    ("mismatched", "not a PEM key store"),
    ("other_dn", "Keystore DistinguishedName does not match"),
    ("fewer_sans", "Keystore SubjectAltNames do not match"),
])
def test_bad_key_store_is_refused_and_the_old_one_stays(served, rot, bad, words):
    eb, _path = served
    message = refused(eb, {KEY: str(getattr(rot, bad))})
    assert words in message
    assert served_serial(eb, rot.ca) == rot.serials["a"]
    assert KEY not in eb.broker.metadata.dynamic_configs.get((4, str(eb.broker.node_id)), {})


@pytest.mark.timeout(120)
def test_same_path_with_a_bad_new_file_is_refused(served, rot):
    eb, path = served
    shutil.copy(rot.garbage, path)
    refused(eb, {KEY: str(path)})
    assert served_serial(eb, rot.ca) == rot.serials["a"]


@pytest.mark.timeout(120)
def test_allow_dn_and_san_changes(rot, tmp_path):
    cfg = {"listeners": "PLAINTEXT://localhost:0,SSL://localhost:0",
           "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
           "listener.name.ssl.ssl.keystore.type": "PEM", KEY: str(rot.a),
           "listener.name.ssl.ssl.allow.dn.changes": "true", "ssl.allow.san.changes": "true"}
    with EmbeddedBroker(config=cfg) as eb:
        alter(eb, {KEY: str(rot.fewer_sans)})
        assert served_serial(eb, rot.ca) == rot.serials["fewer_sans"]
        alter(eb, {KEY: str(rot.other_dn)})
        ctx = ssl.create_default_context(cafile=str(rot.ca))
        ctx.check_hostname = False  # other_dn's SAN is still localhost, its CN is not
        with socket.create_connection(("127.0.0.1", ssl_port(eb)), timeout=10) as raw, \
                ctx.wrap_socket(raw) as s:
            der = s.getpeercert(binary_form=True)
        assert der is not None
        assert x509.load_der_x509_certificate(der).serial_number == rot.serials["other_dn"]


@pytest.mark.timeout(120)
def test_kafka_rules_for_where_ssl_configs_may_change(served, rot):
    eb, _path = served
    # The cluster default entity "" (no Python admin client can name it; the check is the
    # metadata core's, shared by both AlterConfigs APIs).
    from snakka.protocol.errors import ErrorCode, KafkaError

    with pytest.raises(KafkaError) as ei:
        eb.broker.metadata.check_config_change(4, "", {KEY: str(rot.b)})
    assert ei.value.code == ErrorCode.INVALID_REQUEST
    assert "broker id must be specified" in ei.value.message
    assert "only per-listener" in refused(eb, {"ssl.keystore.location": str(rot.b)})
    assert "no SSL or SASL_SSL listener" in refused(
        eb, {"listener.name.plaintext.ssl.keystore.location": str(rot.b)})
    assert served_serial(eb, rot.ca) == rot.serials["a"]


@pytest.mark.timeout(120)
def test_passwords_are_not_described(rot, tmp_path):
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    from .certs import PASSWORD

    cfg = {"listeners": "PLAINTEXT://localhost:0,SSL://localhost:0",
           "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
           "listener.name.ssl.ssl.keystore.type": "PEM", KEY: str(rot.a)}
    with EmbeddedBroker(config=cfg) as eb:
        # (OpenSSL ignores a key password for an unencrypted key: the store still loads.)
        alter(eb, {KEY: str(rot.b), "listener.name.ssl.ssl.key.password": PASSWORD})
        admin = AdminClient({"bootstrap.servers": plaintext(eb)})
        res = ConfigResource(ResourceType.BROKER, str(eb.broker.node_id))
        entries = admin.describe_configs([res])[res].result(timeout=30)
        pw = entries.get("listener.name.ssl.ssl.key.password")
        assert pw is not None and pw.is_sensitive and pw.value is None
        assert entries[KEY].value == str(rot.b)


@pytest.mark.timeout(120)
def test_altered_key_store_survives_a_restart(served, rot):
    eb, _path = served
    alter(eb, {KEY: str(rot.b)})
    eb.restart()
    assert served_serial(eb, rot.ca) == rot.serials["b"]


@pytest.mark.timeout(300)
def test_reference_kafka_configs_sh_reloads_the_key_store(served, rot):
    reference_kafka = pytest.importorskip("reference_kafka",
                                          reason="tests/reference_kafka.py is not present")
    if reference_kafka.skip_reason():
        pytest.skip(reference_kafka.skip_reason())
    eb, _path = served
    tool = reference_kafka.run_tool(
        "kafka-configs.sh", "--bootstrap-server", plaintext(eb), "--entity-type", "brokers",
        "--entity-name", str(eb.broker.node_id), "--alter", "--add-config", f"{KEY}={rot.b}")
    assert tool.returncode == 0, tool.stderr
    assert served_serial(eb, rot.ca) == rot.serials["b"]
