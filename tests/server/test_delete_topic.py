"""DeleteTopics removes the partition directories (off the event loop) and the name can be
reused at once with a new topic id and empty partitions."""

from __future__ import annotations

import asyncio
import os

from confluent_kafka import Producer

from snakka.client.admin import Admin
from snakka.testing import EmbeddedBroker


def test_delete_topic_removes_data_and_name_is_reusable():
    with EmbeddedBroker() as b:
        async def create():
            async with Admin(b.bootstrap_servers) as admin:
                return await admin.create_topic("doomed", 2)

        first_id = asyncio.run(create())
        p = Producer({"bootstrap.servers": b.bootstrap_servers})
        for i in range(100):
            p.produce("doomed", b"x%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        dirs = [os.path.join(b.data_dir, f"doomed-{i}") for i in range(2)]
        assert all(os.path.isdir(d) for d in dirs)

        async def delete_and_recreate():
            async with Admin(b.bootstrap_servers) as admin:
                await admin.delete_topics(["doomed"])
                gone = [os.path.exists(d) for d in dirs]
                new_id = await admin.create_topic("doomed", 2)
                offsets = await admin.partition_offsets("doomed", 2)
                return gone, new_id, offsets

        gone, new_id, offsets = asyncio.run(delete_and_recreate())
    assert gone == [False, False], "DeleteTopics must remove the partition directories"
    assert new_id != first_id
    assert offsets == {0: (0, 0), 1: (0, 0)}
