"""A Fetch whose read fails gives its response-memory reservation back (handlers/fetch.py
``_read_reserved``), against a real broker."""

from __future__ import annotations

import asyncio

from integration.helpers import run_async  # tests/ is on sys.path


def test_a_fetch_whose_read_fails_gives_its_reservation_back(monkeypatch):
    """A Fetch reserves response memory before it reads; a read that raises (a segment file
    that cannot be opened, EMFILE) answers the request with an error and must give the
    reservation back, or the connection keeps it charged to the broker-wide budget for as
    long as it stays open."""
    import errno

    from confluent_kafka import Producer

    import snakka.handlers.fetch as fetch_handler
    from snakka.client.connection import KafkaConnection, parse_bootstrap
    from snakka.protocol.messages.fetch_request import (
        FetchPartition,
        FetchRequest,
        FetchTopic,
    )
    from snakka.testing import EmbeddedBroker

    with EmbeddedBroker() as broker:
        p = Producer({"bootstrap.servers": broker.bootstrap_servers})
        p.produce("t", b"x" * 1000)
        assert p.flush(30) == 0
        real = fetch_handler._read_partitions
        failing = [True]

        def read_once_failing(*args, **kwargs):
            if failing[0]:
                failing[0] = False
                raise OSError(errno.EMFILE, "Too many open files")
            return real(*args, **kwargs)

        monkeypatch.setattr(fetch_handler, "_read_partitions", read_once_failing)

        async def fetch_twice():
            host, port = parse_bootstrap(broker.bootstrap_servers)
            req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                               isolation_level=0, topics=[FetchTopic(topic="t", partitions=[
                                   FetchPartition(partition=0, fetch_offset=0,
                                                  partition_max_bytes=1 << 20)])])
            pool = broker.broker.response_memory
            async with KafkaConnection(host, port) as c:
                first = await c.send(req, 11)
                second = await c.send(req, 11)
                # While the connection stays open (closing it releases everything it holds):
                # the second response's bytes are released once written; the failed read's
                # reservation must be gone too.
                for _ in range(1000):
                    if pool.used == 0:
                        break
                    await asyncio.sleep(0.01)
                return first, second, pool.used

        first, second, used = run_async(fetch_twice())
        assert first.error_code != 0 or first.responses[0].partitions[0].error_code != 0
        assert second.responses[0].partitions[0].error_code == 0
        assert second.responses[0].partitions[0].records  # the connection still works
        assert used == 0, f"{used} bytes of response budget still charged"
