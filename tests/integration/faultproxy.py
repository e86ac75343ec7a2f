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
The proxy runs its own event loop in a daemon thread; ``close()`` stops it and returns once
every connection is closed and every task has ended (nothing left for the garbage collector to
find later, in another test: "coroutine ... was never awaited", unclosed transports).
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
        self._stop: asyncio.Event | None = None  # set by close() (created on the loop)
        self._closing = False

    @property
    def faults(self) -> int:
        return self.lost_responses + self.duplicated

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> FaultProxy:
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._serve(started))
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            finally:
                started.set()
                self._loop.close()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not started.wait(10) or self._server is None:
            raise RuntimeError("fault proxy did not start")
        return self

    async def _serve(self, started: threading.Event) -> None:
        """Serve until :meth:`close`, then shut down in order, so that nothing is left for
        the garbage collector: clients keep connecting while the proxy closes (librdkafka
        reconnects at once), and a connection accepted just before the listener closed still
        gets its handler task afterwards. Those handlers are never cancelled (a task cancelled
        before its first step leaves its coroutine never awaited, and one cancelled inside
        ``open_connection`` trips asyncio's streams callback): they see ``_closing`` or their
        aborted transports and end by themselves; the loop closes once no task is left."""
        self._stop = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, sock=self.sock)
        started.set()
        await self._stop.wait()
        self._closing = True
        self._server.close()  # no new connections from here on
        me = asyncio.current_task()
        idle_rounds = 0
        while idle_rounds < 3:
            for w in list(self._writers):
                w.transport.abort()
            others = [t for t in asyncio.all_tasks() if t is not me]
            if others:
                idle_rounds = 0
                # Handlers end within a loop iteration or two of their transports' abort;
                # one still connecting upstream ends when its connect does.
                await asyncio.wait(others, timeout=0.05)
            else:
                # An aborted transport closes its socket in a callback of the next iteration:
                # let those run (and any last accept) before the loop closes.
                idle_rounds += 1
                await asyncio.sleep(0)
        await self._server.wait_closed()

    def close(self) -> None:
        if self._thread is not None:
            if not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(30)
            assert not self._thread.is_alive(), "fault proxy did not shut down"
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
        if self._closing:  # accepted just before the listener closed
            cwriter.transport.abort()
            return
        self.connections += 1
        self._writers.add(cwriter)
        try:
            ureader, uwriter = await asyncio.open_connection(*self.upstream)
        except OSError:
            self._writers.discard(cwriter)
            cwriter.transport.abort()
            return
        if self._closing:  # the proxy began closing while this connected upstream
            self._writers.discard(cwriter)
            cwriter.transport.abort()
            uwriter.transport.abort()
            return
        self._writers.add(uwriter)
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
        finally:
            self._writers.discard(cwriter)
            self._writers.discard(uwriter)
