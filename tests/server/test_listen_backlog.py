"""``socket.listen.backlog.size``: how many connections the kernel completes for a listener
before the broker accepts them.

The broker's event loop is held busy (a callback that blocks until the test lets it go: a long
handler, a GC pause, a busy machine), so it accepts nothing meanwhile; the kernel completes
handshakes into the listen backlog until it is full, and drops the SYNs of the connections
after that (their clients retry only after a SYN retransmission, 1 s later). Once the loop
runs again, every connection that got in is served.

The default (1024) used to be replaced by asyncio's own listen() default of 100 on plaintext
listeners: with 300 clients connecting while the loop was busy, the 102nd connect never
completed until the loop ran again.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from snakka.protocol import encode_request
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.api_versions_response import ApiVersionsResponse
from snakka.testing import EmbeddedBroker

from .rawsock import recv_exact

pytestmark = pytest.mark.timeout(120)

TIMEOUT_S = 10.0
# Listener kinds: a plain one (asyncio's server accepts) and one with a connection creation
# rate (the listener's own accept loop, as an SSL listener; the rate is high enough never to
# delay an accept).
PLAIN: dict[str, str] = {}
PACED = {"max.connection.creation.rate": "1000000"}


@contextlib.contextmanager
def loop_blocked(broker: EmbeddedBroker) -> Iterator[None]:
    """The broker's event loop runs nothing (accepts nothing) inside the block."""
    loop = broker._loop
    assert loop is not None
    entered, release = threading.Event(), threading.Event()

    def block() -> None:
        entered.set()
        release.wait(60)

    loop.call_soon_threadsafe(block)
    assert entered.wait(TIMEOUT_S)
    try:
        yield
    finally:
        release.set()


def api_versions_ok(s: socket.socket) -> bool:
    s.settimeout(TIMEOUT_S * 3)
    s.sendall(encode_request(18, "backlog", 3, ApiVersionsRequest(
        client_software_name="backlog-test", client_software_version="1")))
    frame = recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0])
    return ApiVersionsResponse.decode(frame[4:], 3).error_code == 0


@pytest.mark.parametrize("listener_config", [PLAIN, PACED], ids=["plain", "paced"])
def test_default_backlog_holds_a_burst_while_the_loop_is_busy(listener_config):
    n = 300  # three times asyncio's default backlog
    with EmbeddedBroker(config=listener_config) as broker:
        socks: list[socket.socket] = []
        try:
            with loop_blocked(broker):
                for _ in range(n):
                    # Completes in the kernel (the backlog has room) although nothing accepts.
                    socks.append(socket.create_connection(("127.0.0.1", broker.port),
                                                          timeout=TIMEOUT_S))
            assert all(api_versions_ok(s) for s in socks)
        finally:
            for s in socks:
                s.close()


@pytest.mark.parametrize("listener_config", [PLAIN, PACED], ids=["plain", "paced"])
def test_configured_backlog_bounds_connections_waiting_for_accept(listener_config):
    backlog = 4
    with EmbeddedBroker(config={"socket.listen.backlog.size": str(backlog),
                                **listener_config}) as broker:
        socks: list[socket.socket] = []
        late = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            with loop_blocked(broker):
                # Linux queues backlog + 1 completed connections.
                for _ in range(backlog + 1):
                    socks.append(socket.create_connection(("127.0.0.1", broker.port),
                                                          timeout=TIMEOUT_S))
                # The next one's SYN is dropped: its handshake cannot complete while the loop
                # accepts nothing (retransmitted SYNs are dropped too), however long we look.
                late.setblocking(False)
                assert late.connect_ex(("127.0.0.1", broker.port)) != 0
                _r, writable, _x = select.select([], [late], [], 1.0)
                assert writable == []
            assert all(api_versions_ok(s) for s in socks)
            # Once the broker accepts again, the late client gets in on a SYN retransmission.
            _r, writable, _x = select.select([], [late], [], TIMEOUT_S * 3)
            assert writable == [late]
            assert late.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
            assert api_versions_ok(late)
        finally:
            late.close()
            for s in socks:
                s.close()


def test_backlog_size_must_be_positive():
    from snakka.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError):
        BrokerConfig({"socket.listen.backlog.size": "0"})
    assert BrokerConfig({}).int("socket.listen.backlog.size") == 1024
