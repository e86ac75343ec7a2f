"""FindCoordinator: this node coordinates every group; unavailable coordinators say so."""

from __future__ import annotations

import asyncio

from snakka.client.connection import KafkaConnection
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.testing import EmbeddedBroker


def test_find_coordinator_single_and_batched():
    async def go(port: int):
        async with KafkaConnection("127.0.0.1", port) as conn:
            out = {}
            for v in (0, 1, 2, 3):
                out[v] = await conn.send(FindCoordinatorRequest(key="g1", key_type=0), version=v)
            out["txn"] = await conn.send(FindCoordinatorRequest(key="t", key_type=1), version=3)
            out["empty"] = await conn.send(FindCoordinatorRequest(key="", key_type=0), version=3)
            out[4] = await conn.send(FindCoordinatorRequest(key_type=0,
                                                            coordinator_keys=["a", "b"]), version=4)
            out["share"] = await conn.send(FindCoordinatorRequest(
                key_type=2, coordinator_keys=["s:t:0"]), version=6)
            return out

    with EmbeddedBroker() as b:
        r = asyncio.run(go(b.port))
        node = b.broker.node_id
    for v in (0, 1, 2, 3):
        assert (r[v].error_code, r[v].node_id, r[v].host, r[v].port) == (0, node, "localhost", b.port)
    # This broker is the transaction coordinator of every transactional id.
    assert (r["txn"].error_code, r["txn"].node_id, r["txn"].port) == (0, node, b.port)
    assert r["empty"].error_code == 42
    assert [(c.key, c.error_code, c.node_id, c.port) for c in r[4].coordinators] == [
        ("a", 0, node, b.port), ("b", 0, node, b.port)]
    assert r["share"].coordinators[0].error_code == 42
