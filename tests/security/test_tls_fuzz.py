"""Garbage during the TLS handshake, and during SASL over TLS, closes that connection only
(issue 14's fuzzing acceptance, for the TLS side; tests/security/test_sasl_fuzz.py covers SASL
over TCP).

One broker with an ``SSL`` and a ``SASL_SSL`` listener. Hypothesis (bounded examples) sends:

- a real ClientHello (made by Python's ``ssl`` through memory BIOs) cut at a random point and
  followed by random bytes, or simply truncated (then the client half-closes);
- a TLS record header announcing a huge length (beyond TLS's 16 KiB + 2 KiB limit), which the
  broker must refuse at once, not buffer;
- after a completed handshake on the SASL_SSL listener: random SaslAuthenticate bytes, random
  frames before authentication, and raw garbage injected under the TLS layer (corrupt
  records).

Each example must end with the broker closing that socket (never a hang: every read has a
deadline well below the handshake timeout where the broker has to decide by itself), a
bystander SASL_SSL producer that keeps working, and no ERROR from snakka's or asyncio's
loggers.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.protocol import encode_request
from snakka.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from snakka.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from snakka.testing import EmbeddedBroker
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.usefixtures("no_broker_errors")

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')
HANDSHAKE_TIMEOUT_S = 20  # the broker's bound; our reads give up well before it
READ_DEADLINE_S = 8
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def broker(tls):
    cfg = {"listeners": "SSL://localhost:0,SASL_SSL://localhost:0",
           "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "sasl.jaas.config": PLAIN_JAAS,
           "connection.failed.authentication.delay.ms": "0",
           "snakka.ssl.handshake.timeout.ms": str(HANDSHAKE_TIMEOUT_S * 1000),
           **tls.broker_config()}
    with EmbeddedBroker(config=cfg, log_level="INFO") as eb:
        yield eb


def port(eb: EmbeddedBroker, name: str) -> int:
    return next(s.port for s in eb.broker.listener_servers if s.listener.name == name)


@pytest.fixture(scope="module")
def bystander(broker, tls):
    """A SASL_SSL producer connected before the fuzzing and used after every example."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": f"localhost:{port(broker, 'SASL_SSL')}",
                  "security.protocol": "SASL_SSL", "ssl.ca.location": str(tls.ca),
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                  "sasl.password": "alice-secret"})
    p.produce("tls-fuzz-bystander", b"first")
    assert p.flush(30) == 0
    return p


def still_serves(bystander) -> None:
    bystander.produce("tls-fuzz-bystander", b"x")
    assert bystander.flush(30) == 0


def no_errors(caplog) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR
           and (r.name.startswith("snakka") or r.name.startswith("asyncio"))]
    assert not bad, [f"{r.name}: {r.getMessage()}" for r in bad]


def client_hello(tls) -> bytes:
    """The bytes a real TLS client sends first."""
    ctx = ssl.create_default_context(cafile=str(tls.ca))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def closed_by_broker(s: socket.socket) -> bool:
    """Read (TLS alerts, Kafka answers) until the broker closes: True; False when it stays
    silent past READ_DEADLINE_S."""
    s.settimeout(READ_DEADLINE_S)
    try:
        while s.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def raw(broker, listener: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port(broker, listener)), timeout=10)


# -- the TLS handshake ----------------------------------------------------------------------
@SETTINGS
@given(cut=st.integers(min_value=0, max_value=10_000), garbage=st.binary(max_size=600),
       listener=st.sampled_from(["SSL", "SASL_SSL"]))
def test_garbage_after_a_partial_client_hello(broker, tls, bystander, caplog, cut, garbage,
                                              listener):
    caplog.set_level(logging.INFO)
    hello = client_hello(tls)
    with raw(broker, listener) as s:
        s.sendall(hello[:cut % len(hello)] + garbage)
        s.shutdown(socket.SHUT_WR)  # nothing more is coming
        assert closed_by_broker(s)
    still_serves(bystander)
    no_errors(caplog)


@SETTINGS
@given(cut=st.integers(min_value=1, max_value=10_000))
def test_a_truncated_client_hello(broker, tls, bystander, caplog, cut):
    caplog.set_level(logging.INFO)
    hello = client_hello(tls)
    with raw(broker, "SASL_SSL") as s:
        s.sendall(hello[:cut % len(hello)])
        s.shutdown(socket.SHUT_WR)
        assert closed_by_broker(s)
    still_serves(bystander)
    no_errors(caplog)


@SETTINGS
@given(content_type=st.sampled_from([0x14, 0x15, 0x16, 0x17]),
       version=st.sampled_from([b"\x03\x01", b"\x03\x03"]),
       length=st.integers(min_value=16384 + 2048 + 256 + 1, max_value=0xFFFF),
       body=st.binary(max_size=200))
def test_a_record_announcing_a_huge_length_is_refused_at_once(broker, bystander, caplog,
                                                              content_type, version, length,
                                                              body):
    """No half-close here: the broker must see the length is impossible and close by itself,
    without waiting for 64 KiB that never come (or for the handshake timeout)."""
    caplog.set_level(logging.INFO)
    with raw(broker, "SSL") as s:
        s.sendall(bytes([content_type]) + version + struct.pack(">H", length) + body)
        assert closed_by_broker(s)
    still_serves(bystander)
    no_errors(caplog)


def test_failed_handshakes_are_logged_at_info(broker, tls, caplog):
    caplog.set_level(logging.INFO, logger="snakka.server")
    with raw(broker, "SASL_SSL") as s:
        s.sendall(client_hello(tls)[:20] + b"\xff" * 100)
        s.shutdown(socket.SHUT_WR)
        assert closed_by_broker(s)

    def lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "Failed authentication" in r.getMessage()
                and "SASL_SSL" in r.getMessage()]

    # asyncio closes the socket before the failed handshake's exception reaches the listener,
    # which logs it then: the client can see the close first (a CI run looked too early).
    found = wait_until(lines, 10, "the failed handshake's log line")
    assert all(r.levelno == logging.INFO for r in found)


# -- SASL over an established TLS connection ---------------------------------------------------
def tls_connect(broker, tls) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(tls.ca))
    s = raw(broker, "SASL_SSL")
    return ctx.wrap_socket(s, server_hostname="localhost")


def read_frame(s: socket.socket) -> bytes | None:
    buf = b""
    while len(buf) < 4:
        chunk = s.recv(4 - len(buf))
        if not chunk:
            return None
        buf += chunk
    size = struct.unpack(">i", buf)[0]
    body = b""
    while len(body) < size:
        chunk = s.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


@SETTINGS
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-512"]), data=st.binary(max_size=300))
def test_random_sasl_authenticate_over_tls(broker, tls, bystander, caplog, mechanism, data):
    caplog.set_level(logging.INFO)
    with tls_connect(broker, tls) as s:
        s.sendall(encode_request(1, "fuzz", 1, SaslHandshakeRequest(mechanism=mechanism)))
        assert read_frame(s) is not None
        s.sendall(encode_request(2, "fuzz", 2, SaslAuthenticateRequest(auth_bytes=data)))
        if not (mechanism == "SCRAM-SHA-512" and data.startswith(b"n,,n=") and b",r=" in data):
            assert closed_by_broker(s)
        # (a well-formed SCRAM client-first message goes on; closing it is our side's job)
    still_serves(bystander)
    no_errors(caplog)


@SETTINGS
@given(frame=st.binary(min_size=8, max_size=300))
def test_random_frames_over_tls_before_authentication(broker, tls, bystander, caplog, frame):
    caplog.set_level(logging.INFO)
    with tls_connect(broker, tls) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        s.settimeout(2)
        try:  # closed, or answered (the frame happens to be an ApiVersions request)
            read_frame(s)
        except (TimeoutError, ConnectionResetError, ssl.SSLError):
            pass
    still_serves(bystander)
    no_errors(caplog)


@SETTINGS
@given(before=st.sampled_from(["handshake", "handshake+sasl"]),
       garbage=st.binary(min_size=1, max_size=400))
def test_garbage_under_the_tls_layer_after_the_handshake(broker, tls, bystander, caplog,
                                                         before, garbage):
    """A TLS session that then receives bytes that are not a valid TLS record (a corrupt or
    injected record) closes: the SASL exchange over it never gets a frame."""
    caplog.set_level(logging.INFO)
    ctx = ssl.create_default_context(cafile=str(tls.ca))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with raw(broker, "SASL_SSL") as s:
        while True:  # the handshake through memory BIOs, so raw bytes can be injected later
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                s.sendall(outgoing.read())
                chunk = s.recv(65536)
                assert chunk, "closed during the handshake"
                incoming.write(chunk)
        s.sendall(outgoing.read())
        if before == "handshake+sasl":
            obj.write(encode_request(1, "fuzz", 1, SaslHandshakeRequest(mechanism="PLAIN")))
            s.sendall(outgoing.read())
        # A record header that is valid-looking (application data, TLS 1.2) with a body that
        # cannot decrypt, or plain garbage.
        s.sendall(b"\x17\x03\x03" + struct.pack(">H", len(garbage)) + garbage
                  if garbage[0] & 1 else garbage)
        s.shutdown(socket.SHUT_WR)
        assert closed_by_broker(s)
    still_serves(bystander)
    no_errors(caplog)


def test_nothing_is_left_behind(broker, bystander):
    """After the fuzzing: no connection of the fuzzed sockets survives (the SSL listener only
    had fuzz traffic), and the bystander still produces."""
    from tests.integration.helpers import wait_until

    wait_until(lambda: not [c for c in list(broker.broker.connections)
                            if c.listener.name == "SSL"], 10, "the SSL listener idle")
    still_serves(bystander)
