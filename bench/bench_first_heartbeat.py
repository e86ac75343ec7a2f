"""Time of the first ShareGroupHeartbeat on a fresh broker.

The first share-group heartbeat creates ``__consumer_offsets`` and ``__share_group_state``
(50 partitions each by default) on the event loop, so it measures what internal-topic creation
stalls the broker for; the second heartbeat (another group) shows the steady cost.

    .venv/bin/python bench/bench_first_heartbeat.py
"""

from __future__ import annotations

import asyncio
import time
import uuid

from snakka.client.admin import Admin
from snakka.client.connection import KafkaConnection
from snakka.protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from snakka.testing import EmbeddedBroker


async def _run(broker: EmbeddedBroker) -> None:
    async with Admin(broker.bootstrap_servers) as admin:
        await admin.create_topic("t", 2)
    async with KafkaConnection("127.0.0.1", broker.port) as conn:
        for group in ("first-group", "second-group"):
            t0 = time.perf_counter()
            resp = await conn.send(ShareGroupHeartbeatRequest(
                group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, rack_id=None,
                subscribed_topic_names=["t"]))
            assert resp.error_code == 0, resp
            print(f"{group}: ShareGroupHeartbeat answered in "
                  f"{(time.perf_counter() - t0) * 1000:.1f} ms")


def main() -> None:
    with EmbeddedBroker() as broker:
        asyncio.run(_run(broker))


if __name__ == "__main__":
    main()
