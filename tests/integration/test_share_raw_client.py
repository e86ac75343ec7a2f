"""bench/share_raw.py, the share-group load client of ``bench_share.py --clients raw``, against
an in-process broker: its members join with ShareGroupHeartbeat, fetch with ShareFetch and
acknowledge each response's AcquiredRecords as ACCEPT batches on the next request, so every
record is delivered to exactly one member, once, and acknowledged (the share-partition start
offset reaches the log end); at the end they close their share sessions and leave the group.
A benchmark that counted records this client never acknowledged, or acknowledged twice, would
measure nothing."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

from snakka.client.share_admin import ShareAdmin

from .helpers import raw_connect, run_async
from .share_protocol import create_topic, produce, set_group_configs

_PATH = Path(__file__).resolve().parents[2] / "bench" / "share_raw.py"
_spec = importlib.util.spec_from_file_location("snakka_bench_share_raw", _PATH)
assert _spec and _spec.loader
share_raw = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = share_raw
_spec.loader.exec_module(share_raw)

TOPIC, GROUP = "raw-share", "raw-share-group"
PARTITIONS, BATCHES, PER_BATCH = 3, 12, 40  # 1,440 records, 12 log batches a partition


def _broker(factory):
    return factory(config={"group.share.min.heartbeat.interval.ms": "100",
                           "group.share.heartbeat.interval.ms": "100"})


async def _setup(bs: str) -> dict[int, int]:
    """The topic, filled; returns each partition's log end offset."""
    conn = await raw_connect(bs)
    try:
        await create_topic(conn, TOPIC, PARTITIONS)
        await set_group_configs(conn, GROUP, {"share.auto.offset.reset": "earliest"})
        for p in range(PARTITIONS):
            for b in range(BATCHES):
                await produce(conn, TOPIC, p, [b"v%d-%d-%d" % (p, b, i) for i in range(PER_BATCH)])
    finally:
        await conn.close()
    return dict.fromkeys(range(PARTITIONS), BATCHES * PER_BATCH)


def test_raw_members_acknowledge_every_record_exactly_once(snakka_broker_factory):
    bs = _broker(snakka_broker_factory).bootstrap_servers
    ends = run_async(_setup(bs))
    total = sum(ends.values())

    async def go():
        stop, progress = asyncio.Event(), asyncio.Event()
        members: list = []
        task = asyncio.ensure_future(share_raw.run_members(
            bs, GROUP, [TOPIC], 3, stop, keep_ranges=True, progress=progress, out=members))
        # Until the members' acknowledgements of all records were answered (each response
        # sets ``progress``); a failing member ends ``task`` with its error.
        while not task.done() and \
                sum(m.stats.acknowledged for m in members) + \
                sum(m.stats.ack_refused + m.stats.ack_unanswered for m in members) < total:
            progress.clear()
            await asyncio.wait([task, asyncio.ensure_future(progress.wait())],
                               return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        stats = await task
        async with ShareAdmin(bs) as admin:
            offsets = await admin.describe_share_group_offsets(
                GROUP, {TOPIC: list(range(PARTITIONS))})
            group = (await admin.describe_share_groups([GROUP]))[GROUP]
        return stats, offsets, group

    stats, offsets, group = run_async(go(), timeout=120)
    assert sum(s.acknowledged for s in stats) == total
    assert sum(s.ack_refused + s.ack_unanswered for s in stats) == 0
    assert sum(s.delivered for s in stats) == total
    assert sum(s.redelivered for s in stats) == 0
    # Every offset of every partition was acquired by exactly one member, once.
    for p, end in ends.items():
        covered = sorted((f, la) for s in stats for (q, f, la) in s.ranges if q == p)
        offsets_seen = [o for f, la in covered for o in range(f, la + 1)]
        assert offsets_seen == list(range(end)), p
    # The broker's view: the share-partition start offset is at the log end everywhere.
    assert {p: offsets[(TOPIC, p)].start_offset for p in ends} == ends
    assert all(offsets[(TOPIC, p)].lag == 0 for p in ends)
    # More than one member got records (the assignment spread the partitions), and all left.
    assert sum(1 for s in stats if s.delivered) >= 2
    assert group.members == []
