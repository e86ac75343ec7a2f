"""The test helper FaultProxy (faultproxy.py) shuts down cleanly while clients keep connecting
(as librdkafka does when a test's finally closes the proxy under a live producer): no handler
task left pending when its loop closes, so no "coroutine ... was never awaited" / "Event loop
is closed" for the garbage collector to raise later inside another test (CI saw it in
test_internal_topics_compacted.py), and no "Exception in callback" from asyncio's streams."""

from __future__ import annotations

import gc
import logging
import socket
import sys
import threading
import warnings

from .faultproxy import FaultProxy
from .helpers import wait_until

ROUNDS = 8
CLIENT_THREADS = 4


def _close_while_clients_connect(upstream_port: int) -> FaultProxy:
    proxy = FaultProxy(("127.0.0.1", upstream_port)).start()
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            try:
                socket.create_connection(("127.0.0.1", proxy.port), timeout=2).close()
            except OSError:  # refused once the proxy has closed its listener
                pass

    threads = [threading.Thread(target=hammer) for _ in range(CLIENT_THREADS)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: proxy.connections >= 20, 30, "clients connecting through the proxy")
        proxy.close()  # while they keep connecting
    finally:
        stop.set()
        for t in threads:
            t.join()
    return proxy


def test_closing_under_connecting_clients_leaves_nothing_behind(caplog):
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(4096)  # completes handshakes without accepting: connects succeed at once
    unraisable: list[str] = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: unraisable.append(f"{u.exc_value!r} in {u.object!r}")
    try:
        with warnings.catch_warnings(record=True) as caught, \
                caplog.at_level(logging.ERROR, logger="asyncio"):
            warnings.simplefilter("always", RuntimeWarning)
            for _ in range(ROUNDS):
                proxy = _close_while_clients_connect(upstream.getsockname()[1])
                assert proxy._loop.is_closed()
                del proxy
                gc.collect()
    finally:
        sys.unraisablehook = old_hook
        upstream.close()
    assert not unraisable, unraisable[:3]
    never_awaited = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not never_awaited, never_awaited[:3]
    asyncio_errors = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert not asyncio_errors, asyncio_errors[:3]
    assert not [t for t in threading.enumerate() if t.name == "fault-proxy"]
