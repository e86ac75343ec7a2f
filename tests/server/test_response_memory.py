"""The response-memory accounting of one connection (server/memory.py, server/channel.py through
its asyncio shell server/connection.py) against a fake transport: reserve, shrink, first-batch
floor, refusal, release on drain and close."""

from __future__ import annotations

import asyncio

from snakka.config import BrokerConfig, Listener
from snakka.protocol import encode_request
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.api_versions_response import ApiVersionsResponse
from snakka.server.channel import ChannelLimits
from snakka.server.connection import ServerConnection
from snakka.server.dispatch import Call
from snakka.server.memory import ResponseMemoryPool
from snakka.server.quotas import ConnectionQuotas
from snakka.server.registry import ConnectionRegistry


class FakeTransport:
    def __init__(self) -> None:
        self.buffered = 0
        self.reading = True
        self.protocol: ServerConnection | None = None

    def get_extra_info(self, name: str):
        return ("10.0.0.1", 5555) if name == "peername" else None

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        assert high == 0 and low == 0

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def write(self, data) -> None:
        self.buffered += len(data)
        assert self.protocol is not None
        self.protocol.pause_writing()

    def writelines(self, pieces) -> None:
        self.write(b"".join(bytes(p) for p in pieces))

    def drain(self) -> None:
        self.buffered = 0
        assert self.protocol is not None
        self.protocol.resume_writing()

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.abort()

    def abort(self) -> None:
        assert self.protocol is not None
        self.protocol.connection_lost(None)


class FakeDispatcher:
    """Answers every request with an empty ApiVersions v0 response (no handler reserved)."""

    quotas = None   # no client quotas to throttle by
    metrics = None  # the metrics endpoint is off

    def dispatch(self, conn, ev):
        return Call(ev, 18, 0, None, None, None), ApiVersionsResponse(
            error_code=0, api_keys=[])


class FakeBroker:
    def __init__(self, limit: int) -> None:
        self.config = BrokerConfig({"queued.max.response.bytes.per.connection": "1000000"})
        self.response_memory = ResponseMemoryPool(limit)
        self.registry = ConnectionRegistry(ConnectionQuotas(self.config))
        self.connections = self.registry.connections


def make_conn(broker: FakeBroker) -> tuple[ServerConnection, FakeTransport]:
    conn = ServerConnection(Listener("PLAINTEXT", "localhost", 0), registry=broker.registry,
                            memory=broker.response_memory,
                            limits=ChannelLimits.from_config(broker.config),
                            dispatcher=FakeDispatcher())  # type: ignore[arg-type]
    t = FakeTransport()
    t.protocol = conn
    conn.connection_made(t)  # type: ignore[arg-type]
    return conn, t


def written(conn: ServerConnection, reserved: int) -> None:
    """Write a response whose handler reserved ``reserved`` bytes (an ApiVersions-sized body
    stands in for it: the charge becomes the frame size). The request goes through the
    connection (framing, dispatch, in-order release) like any other."""
    assert reserved == 0  # FakeDispatcher's handler reserves nothing
    conn.data_received(encode_request(1, "t", 0, ApiVersionsRequest()))


def test_reserve_shrinks_then_floors_then_refuses():
    broker = FakeBroker(limit=1000)
    pool = broker.response_memory
    a, _ = make_conn(broker)
    b, _ = make_conn(broker)
    assert a.reserve_response_bytes(600) == 600
    assert b.reserve_response_bytes(600) == 400  # what is left
    b.settle_response_bytes(400, 700)  # the first batch was bigger (KIP-74)
    assert pool.used == 1300 and pool.exhausted
    c, _ = make_conn(broker)
    assert c.reserve_response_bytes(600) == 0  # holds nothing: the first batch only
    assert a.reserve_response_bytes(600) is None  # holds bytes: wait
    c.settle_response_bytes(0, 0)
    a.settle_response_bytes(600, 0)
    assert pool.used == 700


def test_charge_released_when_drained_and_on_close():
    broker = FakeBroker(limit=1000)
    pool = broker.response_memory
    a, ta = make_conn(broker)
    grant = a.reserve_response_bytes(10)
    a.settle_response_bytes(grant, 0)
    written(a, 0)
    assert pool.used == ta.buffered > 0  # whole frame counted until the socket takes it
    ta.drain()
    assert pool.used == 0
    written(a, 0)
    assert pool.used > 0
    ta.abort()
    assert pool.used == 0


def test_reading_pauses_while_budget_spent_and_resumes_on_release():
    broker = FakeBroker(limit=100)
    pool = broker.response_memory
    a, ta = make_conn(broker)
    b, tb = make_conn(broker)
    written(a, 0)
    pool.charge(200)  # someone else spent the budget
    a._update_reading()
    assert not ta.reading  # holds unsent bytes while the budget is spent
    b._update_reading()
    assert tb.reading  # holds nothing: still read
    pool.release(200)
    assert ta.reading  # woken by the release


def test_wait_for_release():
    async def go() -> None:
        pool = ResponseMemoryPool(10)
        pool.charge(10)
        assert not await pool.wait_for_release(0.01)
        waiter = asyncio.ensure_future(pool.wait_for_release(5))
        await asyncio.sleep(0)
        pool.release(5)
        assert await waiter
        assert not pool._waiters

    asyncio.run(go())
