"""TLS listeners against real clients: confluent-kafka, kafka-python, aiokafka and kcat.

One broker serves three listeners at once: ``PLAINTEXT``, ``SSL`` (server certificate only,
PEM key store through ``listener.name.ssl.*``) and ``MTLS`` (an SSL listener with
``ssl.client.auth=required``, a PKCS12 key store and trust store, and a principal mapping rule,
all through ``listener.name.mtls.*``). Certificates come from tests/security/certs.py.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import subprocess
import time
import uuid

import pytest
from integration.helpers import KCAT, run_async, wait_until

from snakka.security.principal import ANONYMOUS, KafkaPrincipal
from snakka.testing import EmbeddedBroker

N = 20


@pytest.fixture(scope="module")
def broker(tls):
    cfg = {
        "listeners": "PLAINTEXT://localhost:0,SSL://localhost:0,MTLS://localhost:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "snakka.ssl.handshake.timeout.ms": "3000",
        **tls.broker_config(prefix="listener.name.ssl."),
        "listener.name.mtls.ssl.keystore.type": "PKCS12",
        "listener.name.mtls.ssl.keystore.location": str(tls.server_p12),
        "listener.name.mtls.ssl.keystore.password": tls.password,
        "listener.name.mtls.ssl.truststore.type": "PKCS12",
        "listener.name.mtls.ssl.truststore.location": str(tls.truststore_p12),
        "listener.name.mtls.ssl.truststore.password": tls.password,
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
    }
    with EmbeddedBroker(config=cfg) as eb:
        yield eb


def port(eb: EmbeddedBroker, name: str) -> int:
    return next(s.port for s in eb.broker.listener_servers if s.listener.name == name)


def bootstrap(eb: EmbeddedBroker, name: str) -> str:
    return f"localhost:{port(eb, name)}"


def topic() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def ck_ssl(tls, client: str | None = None, ca=None) -> dict[str, str]:
    cfg = {"security.protocol": "SSL", "ssl.ca.location": str(ca or tls.ca)}
    if client:
        c = tls.clients[client]
        cfg |= {"ssl.certificate.location": str(c.cert), "ssl.key.location": str(c.key)}
    return cfg


def ck_roundtrip(bootstrap_servers: str, extra: dict[str, str]) -> list[bytes]:
    import confluent_kafka as ck

    t = topic()
    p = ck.Producer({"bootstrap.servers": bootstrap_servers, **extra})
    for i in range(N):
        p.produce(t, value=b"v%d" % i)
    assert p.flush(20) == 0
    c = ck.Consumer({"bootstrap.servers": bootstrap_servers, "group.id": t,
                     "auto.offset.reset": "earliest", **extra})
    try:
        c.subscribe([t])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        return got
    finally:
        c.close()


def connections(eb: EmbeddedBroker, listener: str) -> list:
    return [c for c in list(eb.broker.connections) if c.listener.name == listener]


# -- real clients over SSL -------------------------------------------------------------------
def test_confluent_kafka_over_ssl(broker, tls):
    assert ck_roundtrip(bootstrap(broker, "SSL"), ck_ssl(tls)) == [b"v%d" % i for i in range(N)]
    # a server-auth-only connection acts as User:ANONYMOUS
    for conn in connections(broker, "SSL"):
        assert conn.principal == ANONYMOUS and conn.tls_principal is None


def test_kafka_python_over_ssl(broker, tls):
    from kafka import KafkaConsumer, KafkaProducer

    t = topic()
    common = {"bootstrap_servers": bootstrap(broker, "SSL"), "security_protocol": "SSL",
              "ssl_cafile": str(tls.ca)}
    p = KafkaProducer(**common)
    for i in range(N):
        p.send(t, b"k%d" % i)
    p.flush(20)
    p.close()
    c = KafkaConsumer(t, auto_offset_reset="earliest", consumer_timeout_ms=10000, **common)
    try:
        got = [m.value for _, m in zip(range(N), c, strict=False)]
    finally:
        c.close()
    assert got == [b"k%d" % i for i in range(N)]


def test_aiokafka_over_mtls(broker, tls):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    alice = tls.clients["alice"]
    ctx = create_ssl_context(cafile=str(tls.ca), certfile=str(alice.cert),
                             keyfile=str(alice.key))
    t = topic()

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap(broker, "MTLS"),
                             security_protocol="SSL", ssl_context=ctx)
        await p.start()
        try:
            for i in range(N):
                await p.send_and_wait(t, b"a%d" % i)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(t, bootstrap_servers=bootstrap(broker, "MTLS"),
                             security_protocol="SSL", ssl_context=ctx,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            got = []
            while len(got) < N:
                batch = await c.getmany(timeout_ms=1000)
                got += [m.value for ms in batch.values() for m in ms]
            return got
        finally:
            await c.stop()

    assert run_async(go()) == [b"a%d" % i for i in range(N)]


def kcat(args: list[str], tls, input_: bytes | None = None, client: str | None = None
         ) -> subprocess.CompletedProcess:
    x = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={tls.ca}"]
    if client:
        c = tls.clients[client]
        x += ["-X", f"ssl.certificate.location={c.cert}", "-X", f"ssl.key.location={c.key}"]
    return subprocess.run([KCAT, *x, *args], input=input_, capture_output=True, timeout=60)


def test_kcat_over_ssl_and_mtls(broker, tls):
    for listener, client in (("SSL", None), ("MTLS", "bob")):
        t = topic()
        lines = b"".join(b"line-%d\n" % i for i in range(N))
        r = kcat(["-b", bootstrap(broker, listener), "-P", "-t", t], tls, lines, client)
        assert r.returncode == 0, r.stderr
        r = kcat(["-b", bootstrap(broker, listener), "-C", "-t", t, "-o", "beginning", "-e",
                  "-c", str(N)], tls, None, client)
        assert r.returncode == 0, r.stderr
        assert r.stdout == lines


# -- mTLS principals -------------------------------------------------------------------------
def test_mtls_principal_is_the_mapped_subject(broker, tls):
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": bootstrap(broker, "MTLS"), **ck_ssl(tls, "alice")})
    assert a.list_topics(timeout=20) is not None
    conns = wait_until(lambda: [c for c in connections(broker, "MTLS")
                                if c.tls_principal is not None], 10, "an mTLS connection")
    # RULE:^CN=([^,]*),.*$/$1/ maps CN=alice,OU=eng,O=Example,C=NO to alice
    assert {c.principal for c in conns} >= {KafkaPrincipal("User", "alice")}
    assert all(c.principal == c.tls_principal for c in conns)
    del a
    assert ck is not None


# -- what must fail, and only for that connection ----------------------------------------------
@pytest.mark.parametrize("case", ["wrong_ca", "no_cert", "expired_cert", "untrusted_cert"])
def test_bad_tls_clients_fail_alone(broker, tls, case, caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    # A healthy mTLS client, connected before and used after the bad one.
    good = KafkaProducer(bootstrap_servers=bootstrap(broker, "MTLS"), security_protocol="SSL",
                         ssl_cafile=str(tls.ca), ssl_certfile=str(tls.clients["alice"].cert),
                         ssl_keyfile=str(tls.clients["alice"].key))
    t = topic()
    good.send(t, b"before").get(20)
    cfg = {
        "wrong_ca": {"security_protocol": "SSL", "ssl_cafile": str(tls.clients["rogue"].cert)},
        "no_cert": {"security_protocol": "SSL", "ssl_cafile": str(tls.ca)},
        "expired_cert": {"security_protocol": "SSL", "ssl_cafile": str(tls.ca),
                         "ssl_certfile": str(tls.clients["expired"].cert),
                         "ssl_keyfile": str(tls.clients["expired"].key)},
        "untrusted_cert": {"security_protocol": "SSL", "ssl_cafile": str(tls.ca),
                           "ssl_certfile": str(tls.clients["rogue"].cert),
                           "ssl_keyfile": str(tls.clients["rogue"].key)},
    }[case]
    caplog.set_level(logging.INFO, logger="snakka.server")
    with pytest.raises(KafkaError):
        bad = KafkaProducer(bootstrap_servers=bootstrap(broker, "MTLS"), request_timeout_ms=3000,
                            max_block_ms=3000, api_version=(3, 0), **cfg)
        bad.send(t, b"never").get(5)
    if case != "wrong_ca":  # the client gives up before the broker sees a failed handshake
        wait_until(lambda: any("Failed authentication" in r.getMessage()
                               for r in caplog.records), 10, "the broker's log line")
    good.send(t, b"after").get(20)
    good.close()


def test_plaintext_and_garbage_on_the_ssl_port_close_that_connection(broker, tls, caplog):
    caplog.set_level(logging.INFO, logger="snakka.server")
    api_versions = struct.pack(">ihhi", 4 + 2 + 2 + 2 + 4 - 4, 18, 0, 1) + struct.pack(">h", -1)
    garbage = bytes(range(256)) * 4
    for payload in (struct.pack(">i", len(api_versions)) + api_versions, garbage):
        with socket.create_connection(("127.0.0.1", port(broker, "SSL")), timeout=10) as s:
            s.sendall(payload)
            data = b""
            while True:  # the broker answers with a TLS alert at most, then closes
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            assert not data.startswith(b"\x00")  # no Kafka response
    wait_until(lambda: sum("Failed authentication" in r.getMessage()
                           for r in caplog.records) >= 2, 10, "two log lines")
    assert all(r.levelno < logging.ERROR for r in caplog.records)
    # The listener still serves TLS clients.
    assert ck_roundtrip(bootstrap(broker, "SSL"), ck_ssl(tls))[:1] == [b"v0"]


def test_a_silent_client_is_closed_after_the_handshake_timeout(broker, caplog):
    caplog.set_level(logging.INFO, logger="snakka.server")
    with socket.create_connection(("127.0.0.1", port(broker, "SSL")), timeout=20) as s:
        t0 = time.monotonic()
        assert s.recv(10) == b""  # closed by the broker, not by our timeout
        assert time.monotonic() - t0 < 15
    wait_until(lambda: any("snakka.ssl.handshake.timeout.ms" in r.getMessage()
                           for r in caplog.records), 10, "the timeout's log line")


# -- listeners and their endpoints -------------------------------------------------------------
def test_each_client_sees_its_own_listener_in_metadata(broker, tls):
    from confluent_kafka.admin import AdminClient

    for name, extra in (("PLAINTEXT", {}), ("SSL", ck_ssl(tls)), ("MTLS", ck_ssl(tls, "bob"))):
        md = AdminClient({"bootstrap.servers": bootstrap(broker, name), **extra}) \
            .list_topics(timeout=20)
        (b,) = md.brokers.values()
        assert (b.host, b.port) == ("localhost", port(broker, name)), name


def test_plaintext_listener_beside_ssl_still_plain(broker):
    import confluent_kafka as ck

    assert ck_roundtrip(bootstrap(broker, "PLAINTEXT"), {})[:1] == [b"v0"]
    assert ck is not None


# -- configuration ------------------------------------------------------------------------------
def _start_fails(cfg: dict[str, str]) -> str:
    with pytest.raises(ValueError) as e:
        EmbeddedBroker(config=cfg).start()
    return str(e.value)


def test_bad_tls_config_refuses_to_start(tls, tmp_path):
    msg = _start_fails({"listeners": "SSL://localhost:0",
                        "ssl.keystore.type": "PEM",
                        "ssl.keystore.location": str(tmp_path / "missing.pem")})
    assert "ssl.keystore.location" in msg and "missing.pem" in msg
    msg = _start_fails({"listeners": "PLAINTEXT://localhost:0,SSL://localhost:0",
                        **tls.broker_config(),
                        "listener.name.ssl.ssl.keystore.location": str(tls.ca)})
    assert "listener.name.ssl.ssl.keystore.location" in msg
    msg = _start_fails({"listeners": "SSL://localhost:0", **tls.broker_config(),
                        "ssl.keystore.password": "x"})
    assert "ssl.keystore.password" in msg
    msg = _start_fails({"listeners": "SSL://localhost:0", "ssl.keystore.type": "PKCS12",
                        "ssl.keystore.location": str(tls.server_p12),
                        "ssl.keystore.password": "wrong"})
    assert "ssl.keystore" in msg
    msg = _start_fails({"listeners": "SSL://localhost:0"})
    assert "ssl.keystore.location" in msg


def test_inline_pem_keystore(tls):
    key_pem = tls.server_key.read_text()
    chain = tls.server_cert.read_text() + tls.ca.read_text()
    cfg = {"listeners": "SSL://localhost:0", "ssl.keystore.type": "PEM",
           "ssl.keystore.key": key_pem, "ssl.keystore.certificate.chain": chain}
    with EmbeddedBroker(config=cfg) as eb:
        ctx = ssl.create_default_context(cafile=str(tls.ca))
        with socket.create_connection(("localhost", eb.port), timeout=10) as s, \
                ctx.wrap_socket(s, server_hostname="localhost") as ss:
            assert ss.version() in ("TLSv1.2", "TLSv1.3")


def test_enabled_protocols_tls12_only(tls):
    cfg = {"listeners": "SSL://localhost:0", **tls.broker_config(),
           "ssl.enabled.protocols": "TLSv1.2",
           "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}
    with EmbeddedBroker(config=cfg) as eb:
        ctx = ssl.create_default_context(cafile=str(tls.ca))
        with socket.create_connection(("localhost", eb.port), timeout=10) as s, \
                ctx.wrap_socket(s, server_hostname="localhost") as ss:
            assert ss.version() == "TLSv1.2"
            assert ss.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"


def test_serve_subprocess_with_kcat(tls):
    cfg = {"listeners": "SSL://localhost:0", **tls.broker_config()}
    eb = EmbeddedBroker(config=cfg, mode="subprocess", log_level="INFO")
    with eb:
        t = topic()
        lines = b"".join(b"s-%d\n" % i for i in range(N))
        r = kcat(["-b", eb.bootstrap_servers, "-P", "-t", t], tls, lines)
        assert r.returncode == 0, r.stderr
        r = kcat(["-b", eb.bootstrap_servers, "-C", "-t", t, "-o", "beginning", "-e",
                  "-c", str(N)], tls)
        assert r.returncode == 0 and r.stdout == lines, r.stderr
    assert not [line for line in eb.output if " ERROR " in line]


# -- our own client and the CLI ----------------------------------------------------------------
def test_cli_with_command_config_and_x_options(broker, tls, tmp_path):
    from integration.helpers import SNAKKA

    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\n"
                     f"ssl.truststore.location={tls.ca}\n")
    t = topic()
    r = subprocess.run([SNAKKA, "topics", "create", t, "-b", bootstrap(broker, "SSL"),
                        "--command-config", str(props)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    alice = tls.clients["alice"]
    r = subprocess.run([SNAKKA, "topics", "list", "-b", bootstrap(broker, "MTLS"),
                        "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={tls.ca}",
                        "-X", f"ssl.certificate.location={alice.cert}",
                        "-X", f"ssl.key.location={alice.key}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and t in r.stdout, r.stderr
    # without the client certificate the mTLS listener refuses: one clean line, exit 1
    r = subprocess.run([SNAKKA, "topics", "list", "-b", bootstrap(broker, "MTLS"),
                        "--command-config", str(props)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    r = subprocess.run([SNAKKA, "topics", "list", "-b", bootstrap(broker, "SSL"),
                        "-X", "security.protocol=SSL", "-X", "ssl.truststore.type=PEM",
                        "-X", "ssl.truststore.location=/nonexistent.pem"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "ssl.truststore.location" in r.stderr, r.stderr


def test_snakka_client_connection_checks_the_server(broker, tls):
    from snakka.client.connection import KafkaConnection

    async def go(cfg):
        conn = KafkaConnection("localhost", port(broker, "SSL"), config=cfg)
        try:
            await conn.connect(timeout=10)
            return sorted(conn.versions)[:1]
        finally:
            await conn.close()

    ok = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
          "ssl.truststore.location": str(tls.ca)}
    assert run_async(go(ok)) == [0]
    # PKCS12 trust store, Kafka's names
    assert run_async(go({"security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
                         "ssl.truststore.location": str(tls.truststore_p12),
                         "ssl.truststore.password": tls.password})) == [0]
    with pytest.raises(ssl.SSLCertVerificationError):
        run_async(go({**ok, "ssl.truststore.location": str(tls.clients["rogue"].cert)}))


def test_handshakes_in_progress_count_against_max_connections(tls, caplog):
    """Sockets that never start their TLS handshake count as connections from their accept
    (Kafka's Acceptor counts them too): with max.connections=3, a fourth is closed at once
    instead of holding a descriptor until the handshake timeout (60 s here)."""
    cfg = {"listeners": "SSL://localhost:0", "max.connections": "3",
           "snakka.ssl.handshake.timeout.ms": "60000", **tls.broker_config()}
    with EmbeddedBroker(config=cfg, log_level="INFO") as b:
        p = next(s.port for s in b.broker.listener_servers)
        silent = [socket.create_connection(("127.0.0.1", p), timeout=10) for _ in range(3)]
        try:
            wait_until(lambda: b.broker.listener_servers[0]._handshakes == 3, 10,
                       "three handshakes in progress")
            with socket.create_connection(("127.0.0.1", p), timeout=10) as extra:
                extra.settimeout(10)
                assert extra.recv(1) == b""  # closed by the broker, long before 60 s
            wait_until(lambda: any("max.connections=3 reached" in r.getMessage()
                                   for r in caplog.records), 10, "the refusal's warning")
        finally:
            for s in silent:
                s.close()
        # Once the silent ones are gone, a real client gets in.
        wait_until(lambda: b.broker.listener_servers[0]._handshakes == 0, 10,
                   "the silent handshakes to end")
        ctx = ssl.create_default_context(cafile=str(tls.ca))
        with socket.create_connection(("127.0.0.1", p), timeout=10) as raw_sock, \
                ctx.wrap_socket(raw_sock, server_hostname="localhost") as s:
            assert s.version() is not None


def test_large_fetches_over_tls_hold_at_most_the_memory_cap(tls, monkeypatch):
    """sendfile cannot encrypt: on an SSL listener record sets are read into memory, and a
    Fetch response holds at most ``snakka.fetch.memory.max.bytes`` of them whatever the
    client's fetch.max.bytes (50 MB here); confluent-kafka still reads every record intact."""
    import os

    import confluent_kafka as ck

    cap = 256 * 1024
    cfg = {"listeners": "SSL://localhost:0", "listener.security.protocol.map": "SSL:SSL",
           "snakka.fetch.memory.max.bytes": str(cap),
           **tls.broker_config(prefix="listener.name.ssl.")}
    reads: list[int] = []
    sends: list[int] = []
    real_pread, real_sendfile = os.pread, os.sendfile
    monkeypatch.setattr(os, "pread", lambda fd, n, off: (reads.append(n), real_pread(fd, n, off))[1])
    monkeypatch.setattr(os, "sendfile", lambda *a: (sends.append(a[3]), real_sendfile(*a))[1])
    values = [bytes([i]) * (40 * 1024) for i in range(60)]
    with EmbeddedBroker(config=cfg) as eb:
        bs = bootstrap(eb, "SSL")
        t = topic()
        p = ck.Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.size": 100_000,
                         **ck_ssl(tls)})
        for v in values:
            p.produce(t, value=v, partition=0)
        assert p.flush(20) == 0
        reads.clear()
        c = ck.Consumer({"bootstrap.servers": bs, "group.id": "tls-big", "enable.auto.commit": False,
                         "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 50 << 20,
                         **ck_ssl(tls)})
        got: list[bytes] = []
        try:
            c.assign([ck.TopicPartition(t, 0, ck.OFFSET_BEGINNING)])
            deadline = time.monotonic() + 30
            while len(got) < len(values) and time.monotonic() < deadline:
                for m in c.consume(100, 0.5):
                    assert not m.error(), m.error()
                    got.append(m.value())
        finally:
            c.close()
    assert got == values
    assert not sends  # nothing went by sendfile on TLS
    assert reads and max(reads) <= cap, max(reads)  # no response read more than the cap
