"""The asyncio shell (server/connection.py) over the channel, against a fake transport and a fake
dispatcher: the in-flight bound holds even for answers queued behind a slow request, responses
leave in request order, a closed connection cancels its handlers and gives its memory back."""

from __future__ import annotations

import asyncio

from snakka.config import BrokerConfig, Listener
from snakka.protocol import decode_response_header, encode_request
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.api_versions_response import ApiVersionsResponse
from snakka.server.channel import ChannelLimits
from snakka.server.connection import ServerConnection
from snakka.server.dispatch import Call
from snakka.server.memory import ResponseMemoryPool
from snakka.server.quotas import ConnectionQuotas
from snakka.server.registry import ConnectionRegistry

from .test_response_memory import FakeTransport

SLOW = 7  # requests with this correlation id wait for the test to release them


class Dispatcher:
    """Correlation id SLOW answers from a coroutine the test releases; others at once."""

    quotas = None   # no client quotas to throttle by
    metrics = None  # the metrics endpoint is off

    def __init__(self) -> None:
        self.release: asyncio.Future | None = None
        self.started: list[int] = []

    def dispatch(self, conn, ev):
        self.started.append(ev.correlation_id)
        call = Call(ev, 18, 0, None, None, None)
        response = ApiVersionsResponse(error_code=0, api_keys=[])
        if ev.correlation_id != SLOW:
            return call, response

        async def slow():
            await self.release
            return response
        return call, slow()


class WritingTransport(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[bytes] = []

    def write(self, data) -> None:
        self.frames.append(bytes(data))
        self.buffered = 0  # the socket takes everything at once


def make(max_inflight: int) -> tuple[ServerConnection, WritingTransport, Dispatcher, ResponseMemoryPool]:
    config = BrokerConfig({"queued.max.requests": str(max_inflight)})
    pool = ResponseMemoryPool(1 << 20)
    dispatcher = Dispatcher()
    conn = ServerConnection(Listener("PLAINTEXT", "localhost", 0),
                            registry=ConnectionRegistry(ConnectionQuotas(config)), memory=pool,
                            limits=ChannelLimits.from_config(config),
                            dispatcher=dispatcher)  # type: ignore[arg-type]
    t = WritingTransport()
    t.protocol = conn
    conn.connection_made(t)  # type: ignore[arg-type]
    return conn, t, dispatcher, pool


def request(corr: int) -> bytes:
    return encode_request(corr, "c", 0, ApiVersionsRequest())


def correlation_ids(frames: list[bytes]) -> list[int]:
    return [decode_response_header(f[4:], 18, 0)[0].correlation_id for f in frames]


def test_inflight_bound_counts_answers_queued_behind_a_slow_request():
    async def go() -> None:
        conn, t, d, pool = make(max_inflight=3)
        d.release = asyncio.get_running_loop().create_future()
        conn.data_received(b"".join(request(c) for c in (SLOW, 1, 2, 3, 4, 5)))
        # The slow request and two quick ones behind it: the bound, so reading stops there.
        assert d.started == [SLOW, 1, 2]
        assert conn.channel.inflight == 3 and not t.reading and t.frames == []
        d.release.set_result(None)
        for _ in range(3):
            await asyncio.sleep(0)  # the handler's task finishes
        assert correlation_ids(t.frames) == [SLOW, 1, 2, 3, 4, 5]
        assert t.reading and conn.channel.inflight == 0 and pool.used == 0

    asyncio.run(go())


def test_closing_cancels_running_handlers_and_returns_memory():
    async def go() -> None:
        conn, t, d, pool = make(max_inflight=10)
        d.release = asyncio.get_running_loop().create_future()
        conn.data_received(request(SLOW) + request(1))
        assert conn.reserve_response_bytes(100) == 100 and pool.used == 100
        (task,) = conn._tasks
        t.abort()  # the client went away
        await asyncio.sleep(0)
        assert task.cancelled() and pool.used == 0 and conn.closed
        assert t.frames == []  # the answer behind the cancelled request is never written

    asyncio.run(go())
