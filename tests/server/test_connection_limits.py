"""Connection-level behaviour: limits close connections cleanly, pipelined requests are answered
in order, KIP-511 ApiVersions fallback, and the broker keeps serving others throughout."""

from __future__ import annotations

import socket
import struct

import pytest

from snakka.protocol import encode_request
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.api_versions_response import ApiVersionsResponse
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.fetch_response import FetchResponse
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.testing import EmbeddedBroker

from .rawsock import recv_frame

RECV_TIMEOUT = 10.0


def connect(broker: EmbeddedBroker) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=RECV_TIMEOUT)
    return s


def is_closed_by_peer(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def healthy(broker: EmbeddedBroker) -> bool:
    with connect(broker) as s:
        s.sendall(encode_request(1, "probe", 3, ApiVersionsRequest(
            client_software_name="probe", client_software_version="1")))
        frame = recv_frame(s)
        return ApiVersionsResponse.decode(frame[4:], 3).error_code == 0


@pytest.fixture
def broker():
    with EmbeddedBroker(config={"socket.request.max.bytes": "1000", "max.connections": "3",
                                "connections.max.idle.ms": "300"}) as b:
        yield b


def test_oversized_and_negative_frames_close_only_that_connection(broker):
    for size in (1001, 0x7FFFFFFF, -1, 3):
        with connect(broker) as s:
            s.sendall(struct.pack(">i", size) + b"\x00" * 16)
            assert is_closed_by_peer(s), size
    assert healthy(broker)


def test_max_connections_bound(broker):
    held = [connect(broker) for _ in range(3)]
    try:
        for s in held:  # make sure all three are registered before the fourth arrives
            s.sendall(encode_request(1, "c", 0, ApiVersionsRequest()))
            recv_frame(s)
        with connect(broker) as extra:
            assert is_closed_by_peer(extra)
    finally:
        for s in held:
            s.close()
    assert healthy(broker)


def test_idle_connections_are_closed(broker):
    with connect(broker) as s:
        s.settimeout(RECV_TIMEOUT)
        assert is_closed_by_peer(s)  # connections.max.idle.ms=300: closed by the sweeper


def test_unknown_api_key_and_version_close_the_connection(broker):
    with connect(broker) as s:
        frame = struct.pack(">hhi", 999, 0, 7) + b"\x00\x00"
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert is_closed_by_peer(s)
    with connect(broker) as s:
        frame = struct.pack(">hhi", 3, 999, 7) + b"\x00\x00"
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert is_closed_by_peer(s)
    assert healthy(broker)


def test_kip511_unknown_api_versions_version_gets_v0_response(broker):
    with connect(broker) as s:
        frame = struct.pack(">hhi", 18, 99, 42) + b"\x00\x00" + b"\x00" * 8
        s.sendall(struct.pack(">i", len(frame)) + frame)
        resp = recv_frame(s)
    assert struct.unpack_from(">i", resp, 0)[0] == 42
    body = ApiVersionsResponse.decode(resp[4:], 0)  # v0 body, response header v0
    assert body.error_code == 35
    keys = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert keys[18] == (0, 5) and 0 in keys and 1 in keys


def test_pipelined_requests_answered_in_request_order():
    with EmbeddedBroker() as b:
        with connect(b) as s:
            # A long-poll fetch first: the quick requests behind it must wait for it.
            fetch = FetchRequest(replica_id=-1, max_wait_ms=300, min_bytes=1, max_bytes=1 << 20,
                                 isolation_level=0, session_id=0, session_epoch=-1,
                                 topics=[FetchTopic(topic="pipe", partitions=[
                                     FetchPartition(partition=0, fetch_offset=0,
                                                    partition_max_bytes=1 << 20)])],
                                 forgotten_topics_data=[], rack_id="")
            # Auto-creates the (empty) topic, so the fetch behind it really long-polls.
            payload = encode_request(1, "c", 5, MetadataRequest(
                topics=[MetadataRequestTopic(name="pipe")], allow_auto_topic_creation=True))
            payload += encode_request(2, "c", 12, fetch)
            for corr in range(3, 40):
                if corr % 2:
                    payload += encode_request(corr, "c", 3, ApiVersionsRequest(
                        client_software_name="c", client_software_version="1"))
                else:
                    payload += encode_request(corr, "c", 9, MetadataRequest(topics=None))
            s.sendall(payload)
            frames = [recv_frame(s) for _ in range(39)]
    got = [struct.unpack_from(">i", f, 0)[0] for f in frames]
    assert got == list(range(1, 40))
    fetch_resp = FetchResponse.decode(frames[1][5:], 12)  # flexible: 1 byte of header tags
    part = fetch_resp.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 0  # waited, then answered empty


def _ask(port: int) -> socket.socket:
    """A connection to ``port`` that has been answered (so it is registered)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=RECV_TIMEOUT)
    s.sendall(encode_request(1, "c", 0, ApiVersionsRequest()))
    recv_frame(s)
    return s


def test_listener_max_connections_bounds_that_listener_only():
    """listener.name.<l>.max.connections (Kafka's per-listener bound): the listener's extra
    connection is closed at once, the other listener is not affected, and a freed slot is
    usable again; the key is not among those serve warns it does not apply."""
    from integration.helpers import wait_until

    from snakka.config import BrokerConfig

    cfg = {"listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
           "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
           "listener.name.other.max.connections": "2",
           "listener.name.other.log.retention.ms": "5"}
    assert BrokerConfig(dict(cfg)).unapplied_listener_keys() == [
        "listener.name.other.log.retention.ms"]
    with EmbeddedBroker(config=cfg) as b:
        ports = {srv.listener.name: srv.port for srv in b.broker.listener_servers}
        held = [_ask(ports["OTHER"]) for _ in range(2)]
        try:
            with socket.create_connection(("127.0.0.1", ports["OTHER"]),
                                          timeout=RECV_TIMEOUT) as extra:
                assert is_closed_by_peer(extra)
            others = [_ask(ports["PLAINTEXT"]) for _ in range(4)]  # not limited
            for s in others:
                s.close()
            held.pop().close()
            quotas = b.broker.connection_quotas
            wait_until(lambda: quotas.listener_counts.get("OTHER") == 1, 30,
                       "the closed connection is no longer counted")
            held.append(_ask(ports["OTHER"]))
        finally:
            for s in held:
                s.close()
