"""The server's per-request cost without sockets or storage: framing, dispatch, response order,
encoding and memory accounting around a stub Metadata handler that returns a prebuilt response.

Drives one connection object with a fake transport (100 pipelined Metadata v12 requests per
``data_received``) and prints the best of 9 runs in CPU microseconds per request. Works on the
code before issue 10 (``KafkaConnection``) and after it (``ServerConnection``), so the same file
compares two checkouts::

    PYTHONPATH=<old>/src .venv/bin/python bench/bench_request_path.py
    PYTHONPATH=<new>/src .venv/bin/python bench/bench_request_path.py
"""

from __future__ import annotations

import dataclasses
import json
import time

from snakka.config import BrokerConfig, Listener
from snakka.handlers import load_handlers
from snakka.protocol import encode_request
from snakka.protocol.messages.metadata_request import MetadataRequest
from snakka.protocol.messages.metadata_response import MetadataResponse
from snakka.server.memory import ResponseMemoryPool

BATCH = 100
CALLS = 300
RUNS = 9


class _Transport:
    def __init__(self) -> None:
        self.writes = 0

    def get_extra_info(self, name: str):
        return ("10.0.0.1", 5555) if name == "peername" else None

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data) -> None:
        self.writes += 1

    def writelines(self, pieces) -> None:
        self.writes += 1

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _connection():
    config = BrokerConfig({})
    pool = ResponseMemoryPool(1 << 30)
    handlers = load_handlers()
    response = MetadataResponse(brokers=[], topics=[])
    handlers[3] = dataclasses.replace(handlers[3], handle=lambda ctx, req: response)
    listener = Listener("PLAINTEXT", "localhost", 0)
    try:
        from snakka.server.channel import ChannelLimits
        from snakka.server.connection import ServerConnection
        from snakka.server.dispatch import RequestDispatcher
        from snakka.server.quotas import ConnectionQuotas
        from snakka.server.registry import ConnectionRegistry
        return ServerConnection(listener, registry=ConnectionRegistry(ConnectionQuotas(config)),
                                memory=pool, limits=ChannelLimits.from_config(config),
                                dispatcher=RequestDispatcher(handlers, None))
    except ImportError:  # before issue 10
        from snakka.server.connection import KafkaConnection  # type: ignore[attr-defined]

        class _Broker:
            pass
        broker = _Broker()
        broker.config, broker.response_memory, broker.handlers = config, pool, handlers
        broker.register_connection = lambda conn: True
        return KafkaConnection(broker, listener)


def main() -> None:
    conn = _connection()
    transport = _Transport()
    conn.connection_made(transport)
    wire = b"".join(encode_request(i, "bench", 12, MetadataRequest(topics=None))
                    for i in range(BATCH))
    best = float("inf")
    for _ in range(RUNS):
        t0 = time.process_time()
        for _ in range(CALLS):
            conn.data_received(wire)
        best = min(best, (time.process_time() - t0) / (CALLS * BATCH))
    assert transport.writes == RUNS * CALLS * BATCH
    print(json.dumps({"type": "run", "bench": "request_path", "us_per_request":
                      round(best * 1e6, 2), "connection": type(conn).__name__}))


if __name__ == "__main__":
    main()
