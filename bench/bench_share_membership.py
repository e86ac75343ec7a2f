"""Share-group membership benchmark: assignor cost, heartbeat throughput, join time.

    .venv/bin/python bench/bench_share_membership.py              # everything
    .venv/bin/python bench/bench_share_membership.py --skip-join  # no librdkafka consumers

Three measurements:

* **assignor** (in process, no I/O): ``simple_assign`` for a homogeneous group, from scratch and
  with one more member joining a balanced group (the common case), for members x partitions
  in ``--assign-sizes``. Median of 5 calls, milliseconds.
* **heartbeats** (broker subprocess, ``python -m snakka serve``): ``--members`` share members
  of one group on a 64-partition topic join with snakka's protocol client, then steady-state
  ShareGroupHeartbeat requests (each member its current epoch) are sent for ``--seconds``
  on one connection with ``--inflight`` requests pipelined. Reported: heartbeats/s and broker
  CPU milliseconds per 1000 heartbeats. With Kafka's default 5 s interval, N heartbeats/s
  sustain 5N members.
* **join** (broker subprocess): N confluent-kafka ``ShareConsumer`` (librdkafka 2.16) in this
  process subscribe to the 64-partition topic; time from the first ``subscribe()`` until
  ShareGroupDescribe shows all N members at the group's assignment epoch with every partition
  assigned. The broker's ``group.share.heartbeat.interval.ms`` is 500 ms (bounds lowered).

Output: one JSON object per line.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BrokerProcess, emit  # noqa: E402

from snakka.client.admin import Admin  # noqa: E402
from snakka.client.connection import KafkaConnection  # noqa: E402
from snakka.groups.share_group import simple_assign  # noqa: E402
from snakka.protocol.messages.share_group_describe_request import (  # noqa: E402
    ShareGroupDescribeRequest,
)
from snakka.protocol.messages.share_group_heartbeat_request import (  # noqa: E402
    ShareGroupHeartbeatRequest,
)

TOPIC, PARTITIONS = "bench-share", 64
BROKER_CONFIG = {
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.max.size": "1000",
    "group.share.max.share.sessions": "2000",
}


def bench_assignor(sizes: list[tuple[int, int]]) -> None:
    tid = uuid.uuid4()
    for members, parts in sizes:
        subs = {f"m{i:04d}": {tid} for i in range(members)}
        scratch, join = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            balanced = simple_assign(subs, {tid: parts}, {})
            scratch.append(time.perf_counter() - t0)
            more = dict(subs, new={tid})
            t0 = time.perf_counter()
            simple_assign(more, {tid: parts}, balanced)
            join.append(time.perf_counter() - t0)
        emit({"bench": "assignor", "members": members, "partitions": parts,
              "scratch_ms": round(statistics.median(scratch) * 1000, 3),
              "one_join_ms": round(statistics.median(join) * 1000, 3)})


async def _heartbeats(port: int, members: int, seconds: float, inflight: int) -> int:
    async with KafkaConnection("127.0.0.1", port) as conn:
        epochs: dict[str, int] = {}
        for _ in range(members):
            mid = str(uuid.uuid4())
            r = await conn.send(ShareGroupHeartbeatRequest(
                group_id="bench", member_id=mid, member_epoch=0, rack_id=None,
                subscribed_topic_names=[TOPIC]))
            assert r.error_code == 0, r
            epochs[mid] = r.member_epoch
        ids = list(epochs)
        # One round so that everyone reconciles to the final epoch.
        for mid in ids:
            r = await conn.send(ShareGroupHeartbeatRequest(
                group_id="bench", member_id=mid, member_epoch=epochs[mid], rack_id=None,
                subscribed_topic_names=None))
            epochs[mid] = r.member_epoch
        done = 0
        deadline = time.perf_counter() + seconds
        i = 0

        async def one(mid: str) -> None:
            r = await conn.send(ShareGroupHeartbeatRequest(
                group_id="bench", member_id=mid, member_epoch=epochs[mid], rack_id=None,
                subscribed_topic_names=None))
            assert r.error_code == 0, r

        while time.perf_counter() < deadline:
            batch = [one(ids[(i + k) % len(ids)]) for k in range(inflight)]
            i += inflight
            await asyncio.gather(*batch)
            done += inflight
        return done


def bench_heartbeats(members: int, seconds: float, inflight: int) -> None:
    with BrokerProcess(BROKER_CONFIG) as broker:
        asyncio.run(_create_topic(broker.bootstrap))
        cpu0 = broker.cpu_seconds()
        t0 = time.perf_counter()
        n = asyncio.run(_heartbeats(broker.port, members, seconds, inflight))
        elapsed = time.perf_counter() - t0
        cpu = broker.cpu_seconds() - cpu0
        emit({"bench": "heartbeats", "members": members, "inflight": inflight,
              "heartbeats": n, "per_s": round(n / elapsed),
              "broker_cpu_ms_per_1000": round(cpu * 1000 / n * 1000, 1)})


async def _create_topic(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(TOPIC, PARTITIONS)


async def _stable(port: int, n: int) -> bool:
    async with KafkaConnection("127.0.0.1", port) as conn:
        r = await conn.send(ShareGroupDescribeRequest(group_ids=["join-bench"],
                                                      include_authorized_operations=False))
    g = r.groups[0]
    if g.error_code or len(g.members) != n:
        return False
    covered = {(tp.topic_id, p) for m in g.members for tp in m.assignment.topic_partitions
               for p in tp.partitions}
    return (all(m.member_epoch == g.assignment_epoch for m in g.members)
            and len(covered) == PARTITIONS)


def bench_join(n: int) -> None:
    from confluent_kafka import ShareConsumer

    with BrokerProcess(BROKER_CONFIG) as broker:
        asyncio.run(_create_topic(broker.bootstrap))
        consumers = [ShareConsumer({"bootstrap.servers": broker.bootstrap,
                                    "group.id": "join-bench"}) for _ in range(n)]
        try:
            t0 = time.perf_counter()
            for c in consumers:
                c.subscribe([TOPIC])
            deadline = t0 + 120
            stable = False
            while time.perf_counter() < deadline:
                for c in consumers:
                    c.poll(0)
                if asyncio.run(_stable(broker.port, n)):
                    stable = True
                    break
                time.sleep(0.01)
            elapsed = time.perf_counter() - t0
        finally:
            for c in consumers:
                c.close()
        emit({"bench": "join", "consumers": n, "stable": stable,
              "seconds": round(elapsed, 3)})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--assign-sizes", default="16x64,200x1000,200x10000,1000x64")
    ap.add_argument("--members", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--join", default="1,4,16")
    ap.add_argument("--skip-join", action="store_true")
    args = ap.parse_args()
    bench_assignor([tuple(int(x) for x in s.split("x")) for s in args.assign_sizes.split(",")])
    bench_heartbeats(args.members, args.seconds, args.inflight)
    if not args.skip_join:
        for n in (int(x) for x in args.join.split(",")):
            bench_join(n)


if __name__ == "__main__":
    main()
