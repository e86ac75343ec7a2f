"""Garbage during authentication closes that connection only (issue 14's fuzzing acceptance):
random SaslAuthenticate bytes for each mechanism, random frames before authentication, and a
SCRAM exchange whose final message is random. After every example an authenticated client
still produces, and the broker logs no ERROR."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.protocol import encode_request
from snakka.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from snakka.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from snakka.testing import EmbeddedBroker
from snakka.util.scram import ScramMechanism, make_credential
from tests.integration.helpers import host_port

pytestmark = pytest.mark.usefixtures("no_broker_errors")

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(config={
            "listeners": "SASL_PLAINTEXT://localhost:0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,OAUTHBEARER",
            "sasl.jaas.config": PLAIN_JAAS,
            "connection.failed.authentication.delay.ms": "0"}) as b:
        cred = make_credential(ScramMechanism.SCRAM_SHA_256, "pw", 4096)
        b.broker.metadata.scram.users["u"] = {ScramMechanism.SCRAM_SHA_256: cred}
        yield b


def connect(broker) -> socket.socket:
    s = socket.create_connection(host_port(broker.bootstrap_servers), timeout=10)
    return s


def send(s: socket.socket, corr: int, version: int, req) -> None:
    s.sendall(encode_request(corr, "fuzz", version, req))


def read_frame(s: socket.socket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    size = struct.unpack(">i", head)[0]
    body = b""
    while len(body) < size:
        chunk = s.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def closed_soon(s: socket.socket) -> bool:
    """Read answers until the broker closes (True) or stays silent (False: timeout)."""
    try:
        while read_frame(s) is not None:
            pass
        return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def still_serves(broker) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap_servers,
                  "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                  "sasl.username": "alice", "sasl.password": "alice-secret"})
    p.produce("fuzz-bystander", b"x")
    assert p.flush(30) == 0


@SETTINGS
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256"]), data=st.binary(max_size=300))
def test_random_authenticate_bytes_close_the_connection(broker, mechanism, data):
    with connect(broker) as s:
        send(s, 1, 1, SaslHandshakeRequest(mechanism=mechanism))
        assert read_frame(s) is not None
        send(s, 2, 2, SaslAuthenticateRequest(auth_bytes=data))
        if mechanism == "SCRAM-SHA-256" and data.startswith(b"n,,n=") and b",r=" in data:
            return  # a well-formed client-first message: the exchange goes on
        assert closed_soon(s)


@SETTINGS
@given(final=st.binary(max_size=200))
def test_random_scram_final_message_closes_the_connection(broker, final):
    with connect(broker) as s:
        send(s, 1, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        read_frame(s)
        send(s, 2, 2, SaslAuthenticateRequest(auth_bytes=b"n,,n=u,r=clientnonce"))
        assert read_frame(s) is not None
        send(s, 3, 2, SaslAuthenticateRequest(auth_bytes=final))
        assert closed_soon(s)


@SETTINGS
@given(token=st.binary(max_size=200))
def test_random_oauthbearer_messages_fail(broker, token):
    with connect(broker) as s:
        send(s, 1, 1, SaslHandshakeRequest(mechanism="OAUTHBEARER"))
        read_frame(s)
        send(s, 2, 2, SaslAuthenticateRequest(auth_bytes=b"n,,\x01auth=Bearer " + token
                                              + b"\x01\x01"))
        send(s, 3, 2, SaslAuthenticateRequest(auth_bytes=b"\x01"))
        assert closed_soon(s)


@SETTINGS
@given(frame=st.binary(min_size=8, max_size=200))
def test_random_frames_before_authentication(broker, frame):
    with connect(broker) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        s.settimeout(2)
        # Closed, or answered (a frame that happens to be an ApiVersions request); never a
        # hang of the broker.
        try:
            read_frame(s)
        except (TimeoutError, ConnectionResetError):
            pass


def test_the_broker_still_serves_after_fuzzing(broker):
    still_serves(broker)


def test_sasl_requests_after_authentication_are_illegal_not_fatal(broker):
    """Kafka's KafkaApis: SaslAuthenticate (and a v0 SaslHandshake) on an authenticated
    connection get ILLEGAL_SASL_STATE; the connection stays."""
    from snakka.protocol.messages.metadata_request import MetadataRequest

    with connect(broker) as s:
        send(s, 1, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        read_frame(s)
        send(s, 2, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
        read_frame(s)
        send(s, 3, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
        frame = read_frame(s)
        assert frame is not None and struct.unpack_from(">h", frame, 5)[0] == 34
        send(s, 4, 0, SaslHandshakeRequest(mechanism="PLAIN"))
        frame = read_frame(s)
        assert frame is not None and struct.unpack_from(">h", frame, 4)[0] == 34
        send(s, 5, 12, MetadataRequest(topics=[]))
        assert read_frame(s) is not None  # still authenticated and served
