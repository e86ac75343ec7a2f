"""A Kafka-aware TCP proxy that injects network faults around Produce requests.

It sits between a client and a broker (the broker must *advertise* the proxy's address, so the
client's metadata keeps it on the proxy) and forwards length-prefixed Kafka frames both ways,
remembering the API key of each request by correlation id. For Produce requests it can:

- ``lose_response``: forward the request, wait for the broker's response, then drop BOTH
  connections instead of delivering it. The broker has appended the batch but the client never
  learns it, so the client must retry a batch the broker already has.
- ``duplicate``: send the request to the broker twice (back to back, same bytes) and deliver
  only the first response: a duplicate the client never even knows about.

Faults are chosen at random (seeded) with the given probabilities, up to ``max_faults``.
The proxy runs its own event loop in a daemon thread; ``close()`` stops it.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading

PRODUCE = 0


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], *, lose_response: float = 0.0,
                 duplicate: float = 0.0, max_faults: int = 1_000_000, seed: int = 0) -> None:
        self.upstream = upstream
        self.p_lose = lose_response
        self.p_dup = duplicate
        self.max_faults = max_faults
        self.rnd = random.Random(seed)
        self.produce_requests = 0
        self.lost_responses = 0
        self.duplicated = 0
        self.connections = 0
        # Listen socket bound first (127.0.0.1, ephemeral) so its port can be advertised.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread: threading.Thread | None = None

    @property
    def faults(self) -> int:
        return self.lost_responses + self.duplicated

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> FaultProxy:
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)

            async def go() -> None:
                self._server = await asyncio.start_server(self._handle, sock=self.sock)
                started.set()

            self._loop.run_until_complete(go())
            self._loop.run_forever()
            # Shutdown: close what is open.
            for w in list(self._writers):
                w.transport.abort()
            tasks = asyncio.all_tasks(self._loop)
            for t in tasks:
                t.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._server.close()
            self._loop.run_until_complete(self._server.wait_closed())
            self._loop.close()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one proxied connection ----------------------------------------------------------
    def _choose(self) -> str | None:
        if self.faults >= self.max_faults:
            return None
        x = self.rnd.random()
        if x < self.p_lose:
            return "lose"
        if x < self.p_lose + self.p_dup:
            return "dup"
        return None

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            ureader, uwriter = await asyncio.open_connection(*self.upstream)
        except OSError:
            cwriter.transport.abort()
            return
        self._writers.update((cwriter, uwriter))
        # correlation id -> action for that request's response(s)
        pending: dict[int, str] = {}
        swallow: dict[int, int] = {}  # corr -> responses still to swallow (duplicates)

        def kill() -> None:
            cwriter.transport.abort()
            uwriter.transport.abort()

        async def client_to_broker() -> None:
            try:
                while True:
                    head = await creader.readexactly(4)
                    (size,) = struct.unpack(">i", head)
                    frame = await creader.readexactly(size)
                    api_key, _ver, corr = struct.unpack_from(">hhi", frame, 0)
                    action = None
                    if api_key == PRODUCE:
                        self.produce_requests += 1
                        action = self._choose()
                    uwriter.write(head + frame)
                    if action == "lose":
                        self.lost_responses += 1
                        pending[corr] = "lose"
                    elif action == "dup":
                        self.duplicated += 1
                        swallow[corr] = 1
                        uwriter.write(head + frame)
                    await uwriter.drain()
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                pass
            finally:
                kill()

        async def broker_to_client() -> None:
            try:
                while True:
                    head = await ureader.readexactly(4)
                    (size,) = struct.unpack(">i", head)
                    frame = await ureader.readexactly(size)
                    (corr,) = struct.unpack_from(">i", frame, 0)
                    if pending.pop(corr, None) == "lose":
                        # The broker has answered (so it has appended); the client never hears.
                        break
                    if corr in swallow and swallow[corr] == 1:
                        swallow[corr] = 0  # deliver the first response, swallow the second
                    elif corr in swallow:
                        del swallow[corr]
                        continue
                    cwriter.write(head + frame)
                    await cwriter.drain()
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                pass
            finally:
                kill()

        try:
            await asyncio.gather(client_to_broker(), broker_to_client())
        except asyncio.CancelledError:
            kill()  # proxy shutdown; end normally (3.11 streams dislike cancelled handlers)
        finally:
            self._writers.discard(cwriter)
            self._writers.discard(uwriter)
