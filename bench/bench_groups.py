"""Consumer-group benchmark: rebalance time (classic and KIP-848) and OffsetCommit throughput.

    .venv/bin/python bench/bench_groups.py                    # everything, 3 repetitions
    .venv/bin/python bench/bench_groups.py --repeat 1 --members 1,10   # quicker
    .venv/bin/python bench/bench_groups.py --skip-rebalance   # only OffsetCommit

Every case gets a fresh broker SUBPROCESS (``python -m snakka serve``, temporary data directory,
ephemeral port, ``group.initial.rebalance.delay.ms=0``: Kafka's 3 s default would be most of
any measurement), so broker and client CPU are measured separately.

**Rebalance time** (``--members``, default 1,10,50; protocols ``classic`` and ``consumer``
(KIP-848)): N confluent-kafka (librdkafka) consumers, all in this process, subscribe one after
the other to a 64-partition topic; one thread serves every consumer's callbacks (``poll(0)``
round robin, 1 ms pause per sweep). Two numbers:

* ``cold_s``: last ``subscribe()`` -> every member holds its final assignment (the N members
  own the 64 partitions exactly once between them, seen through the assign/revoke callbacks).
  It includes connecting, FindCoordinator and every rebalance round the joins cause.
  ``cold_from_first_s`` counts from the first ``subscribe()`` instead (creating N consumers
  takes time too).
* ``join_s``: one more member subscribes to the stable group -> the N+1 members own the
  partitions exactly once again.

Classic: ``partition.assignment.strategy=range`` (eager), ``heartbeat.interval.ms=100``
(members learn of a rebalance from a heartbeat; librdkafka's 3 s default would dominate),
``session.timeout.ms=10000``. KIP-848: ``group.protocol=consumer``, the broker's
``group.consumer.heartbeat.interval.ms=100`` (its minimum lowered to allow it), the default
``uniform`` assignor. Both protocols therefore learn about changes on a 100 ms heartbeat.

**OffsetCommit throughput** (``--commit-seconds`` each, topic with 100 partitions):

* ``raw`` -- snakka's protocol client (``snakka.client.connection``) as the single member of a
  classic group (JoinGroup + SyncGroup), then OffsetCommit (the highest version both sides
  support, at most v9) with its generation and member id, 1 or 100 partitions per commit,
  ``inflight`` 1 (wait for each answer: a synchronous committer) or 16 (pipelined on one
  connection). Latency p50/p99 for inflight 1.
* ``confluent`` -- a librdkafka consumer in a classic group, ``commit(offsets, asynchronous=False)``
  in a loop: what an application doing synchronous commits gets.

Offsets increase with every commit (so nothing can be deduplicated). Reported: commits/s,
partitions/s, latency, and broker CPU milliseconds per 1000 commits.

Output: one JSON object per line (``--json-out FILE`` appends them to a file too), then a table
of medians over ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (  # noqa: E402
    BrokerProcess,
    emit,
    machine_info,
    percentile,
    self_cpu_seconds,
)

TOPIC = "bench-groups"
REBALANCE_PARTITIONS = 64
COMMIT_PARTITIONS = 100
REBALANCE_TIMEOUT_S = 180.0
BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "100",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "1000",
}


def create_topic(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)],
                             operation_timeout=30, request_timeout=30)
    fs[TOPIC].result(timeout=30)


# -- rebalance ---------------------------------------------------------------------------------
class Fleet:
    """N librdkafka consumers served by one polling thread; ownership from the callbacks."""

    def __init__(self, bootstrap: str, group: str, protocol: str) -> None:
        self.bootstrap, self.group, self.protocol = bootstrap, group, protocol
        self.consumers: list = []
        self.owned: list[set[int]] = []
        self.last_change = 0.0
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def add(self) -> None:
        from confluent_kafka import Consumer

        i = len(self.consumers)
        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group,
                "client.id": f"m{i}", "enable.auto.commit": False,
                "auto.offset.reset": "earliest"}
        if self.protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"partition.assignment.strategy": "range",
                         "heartbeat.interval.ms": 100, "session.timeout.ms": 10000})
        c = Consumer(conf)
        owned: set[int] = set()

        def on_assign(_c, parts):
            with self.lock:
                owned.update(p.partition for p in parts)
                self.last_change = time.perf_counter()

        def on_revoke(_c, parts):
            with self.lock:
                owned.difference_update(p.partition for p in parts)
                self.last_change = time.perf_counter()

        with self.lock:
            self.consumers.append(c)
            self.owned.append(owned)
        c.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)

    def _poll(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                consumers = list(self.consumers)
            for c in consumers:
                m = c.poll(0)
                if m is not None and m.error():
                    self.errors.append(str(m.error()))
            time.sleep(0.001)

    def settled(self) -> bool:
        """Every member owns something and the partitions are owned exactly once."""
        with self.lock:
            seen: list[int] = []
            for s in self.owned:
                if not s and len(self.owned) <= REBALANCE_PARTITIONS:
                    return False
                seen += s
            return sorted(seen) == list(range(REBALANCE_PARTITIONS))

    def wait_settled(self, t0: float) -> float:
        deadline = time.monotonic() + REBALANCE_TIMEOUT_S
        while not self.settled():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no settled assignment after {REBALANCE_TIMEOUT_S}s "
                                   f"({len(self.consumers)} members, errors {self.errors[-3:]})")
            time.sleep(0.002)
        with self.lock:
            return self.last_change - t0

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for c in self.consumers:
            c.close()


def run_rebalance(protocol: str, n: int, out) -> dict:
    res = {"type": "rebalance", "protocol": protocol, "members": n,
           "partitions": REBALANCE_PARTITIONS, "driver": "confluent-kafka"}
    with BrokerProcess(BROKER_CONFIG) as b:
        create_topic(b.bootstrap, REBALANCE_PARTITIONS)
        fleet = Fleet(b.bootstrap, f"bench-{protocol}-{n}", protocol)
        try:
            bcpu0, ccpu0 = b.cpu_seconds(), self_cpu_seconds()
            first = time.perf_counter()
            for _ in range(n):
                fleet.add()
            t0 = time.perf_counter()
            res["cold_s"] = round(fleet.wait_settled(t0), 3)
            res["cold_from_first_s"] = round(res["cold_s"] + t0 - first, 3)
            res["cold_broker_cpu_s"] = round(b.cpu_seconds() - bcpu0, 2)
            res["cold_client_cpu_s"] = round(self_cpu_seconds() - ccpu0, 2)
            bcpu0 = b.cpu_seconds()
            t0 = time.perf_counter()
            fleet.add()
            res["join_s"] = round(fleet.wait_settled(t0), 3)
            res["join_broker_cpu_s"] = round(b.cpu_seconds() - bcpu0, 2)
        finally:
            fleet.close()
        res["broker_peak_rss_mb"] = round(b.peak_rss_kb() / 1024, 1)
    emit(res, out)
    return res


# -- OffsetCommit --------------------------------------------------------------------------
async def _raw_member(conn, group: str) -> tuple[int, str]:
    from snakka.protocol.messages.consumer_protocol_subscription import (
        ConsumerProtocolSubscription,
    )
    from snakka.protocol.messages.join_group_request import (
        JoinGroupRequest,
        JoinGroupRequestProtocol,
    )
    from snakka.protocol.messages.sync_group_request import (
        SyncGroupRequest,
        SyncGroupRequestAssignment,
    )

    meta = struct.pack(">h", 0) + ConsumerProtocolSubscription(topics=[TOPIC]).encode(0)
    member = ""
    for _ in range(2):  # MEMBER_ID_REQUIRED round trip (JoinGroup v4+)
        r = await conn.send(JoinGroupRequest(
            group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
            member_id=member, protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="range", metadata=meta)]), version=5)
        member = r.member_id
        if r.error_code == 0:
            break
    if r.error_code != 0:
        raise RuntimeError(f"JoinGroup failed: {r.error_code}")
    s = await conn.send(SyncGroupRequest(group_id=group, generation_id=r.generation_id,
                                         member_id=member, assignments=[
                                             SyncGroupRequestAssignment(member_id=member,
                                                                        assignment=b"")]),
                        version=3)
    if s.error_code != 0:
        raise RuntimeError(f"SyncGroup failed: {s.error_code}")
    return r.generation_id, member


async def _raw_commits(bootstrap: str, group: str, per_commit: int, inflight: int,
                       seconds: float) -> tuple[int, list[float], float]:
    from snakka.client.connection import KafkaConnection, parse_bootstrap
    from snakka.protocol.messages.offset_commit_request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )

    host, port = parse_bootstrap(bootstrap)
    conn = await KafkaConnection(host, port, client_id="bench-groups").connect()
    try:
        gen, member = await _raw_member(conn, group)
        version = min(9, conn.version_for(8))
        counter = 0
        lat: list[float] = []
        deadline = 0.0

        async def one() -> None:
            nonlocal counter
            while time.perf_counter() < deadline:
                counter += 1
                req = OffsetCommitRequest(
                    group_id=group, generation_id_or_member_epoch=gen, member_id=member,
                    topics=[OffsetCommitRequestTopic(name=TOPIC, partitions=[
                        OffsetCommitRequestPartition(partition_index=p,
                                                     committed_offset=counter)
                        for p in range(per_commit)])])
                t = time.perf_counter()
                r = await conn.send(req, version=version)
                lat.append(time.perf_counter() - t)
                bad = [p.error_code for tp in r.topics for p in tp.partitions if p.error_code]
                if bad:
                    raise RuntimeError(f"OffsetCommit v{version} failed: {bad[:3]}")

        start = time.perf_counter()
        deadline = start + seconds
        await asyncio.gather(*(one() for _ in range(inflight)))
        return len(lat), lat, time.perf_counter() - start
    finally:
        await conn.close()


def _confluent_commits(bootstrap: str, group: str, per_commit: int, seconds: float
                       ) -> tuple[int, list[float], float]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "partition.assignment.strategy": "range"})
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while not c.assignment():
            if time.monotonic() > deadline:
                raise RuntimeError("confluent consumer got no assignment")
            c.poll(0.05)
        lat: list[float] = []
        counter = 0
        start = time.perf_counter()
        end = start + seconds
        while time.perf_counter() < end:
            counter += 1
            offsets = [TopicPartition(TOPIC, p, counter) for p in range(per_commit)]
            t = time.perf_counter()
            res = c.commit(offsets=offsets, asynchronous=False)
            lat.append(time.perf_counter() - t)
            bad = [tp.error for tp in res if tp.error is not None]
            if bad:
                raise RuntimeError(f"commit failed: {bad[:3]}")
        return len(lat), lat, time.perf_counter() - start
    finally:
        c.close()


def run_commits(driver: str, per_commit: int, inflight: int, seconds: float, out) -> dict:
    res = {"type": "commit", "driver": driver, "partitions_per_commit": per_commit,
           "inflight": inflight, "seconds": seconds}
    with BrokerProcess(BROKER_CONFIG) as b:
        create_topic(b.bootstrap, COMMIT_PARTITIONS)
        group = f"bench-commit-{driver}-{per_commit}-{inflight}"
        bcpu0, ccpu0 = b.cpu_seconds(), self_cpu_seconds()
        if driver == "raw":
            n, lat, elapsed = asyncio.run(_raw_commits(b.bootstrap, group, per_commit, inflight,
                                                       seconds))
        else:
            n, lat, elapsed = _confluent_commits(b.bootstrap, group, per_commit, seconds)
        bcpu = b.cpu_seconds() - bcpu0
        res["commits"] = n
        res["commits_s"] = round(n / elapsed)
        res["partitions_s"] = round(n * per_commit / elapsed)
        lat.sort()
        res["lat_p50_ms"] = round(percentile(lat, 0.5) * 1000, 3)
        res["lat_p99_ms"] = round(percentile(lat, 0.99) * 1000, 3)
        res["broker_cpu_s"] = round(bcpu, 2)
        res["client_cpu_s"] = round(self_cpu_seconds() - ccpu0, 2)
        res["broker_cpu_ms_per_1000_commits"] = round(bcpu / max(1, n) * 1e6, 1)
    emit(res, out)
    return res


# -- output ------------------------------------------------------------------------------------
def medians(rows: list[dict], key: tuple[str, ...]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in key), []).append(r)
    out = []
    for rs in groups.values():
        row = dict(rs[0])
        for k, v in rs[0].items():
            if isinstance(v, int | float) and not isinstance(v, bool) and k not in key:
                m = statistics.median(r[k] for r in rs)
                row[k] = round(m, 3) if isinstance(v, float) else round(m)
        row["repeats"] = len(rs)
        out.append(row)
    return out


def print_tables(rebalances: list[dict], commits: list[dict]) -> None:
    if rebalances:
        print("\nrebalance (median; seconds): cold = last subscribe -> all N assigned, "
              "join = one more member -> all N+1 assigned")
        hdr = (f"{'protocol':<9} {'members':>7} {'cold s':>8} {'from 1st':>8} {'join s':>8} "
               f"{'broker cpu cold':>15} {'client cpu cold':>15} {'runs':>4}")
        print(hdr)
        print("-" * len(hdr))
        for r in medians(rebalances, ("protocol", "members")):
            print(f"{r['protocol']:<9} {r['members']:>7} {r['cold_s']:>8} "
                  f"{r['cold_from_first_s']:>8} {r['join_s']:>8} "
                  f"{r['cold_broker_cpu_s']:>15} {r['cold_client_cpu_s']:>15} {r['repeats']:>4}")
    if commits:
        print("\nOffsetCommit, one committer (median)")
        hdr = (f"{'driver':<9} {'parts':>5} {'inflight':>8} {'commits/s':>10} "
               f"{'partitions/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'broker ms/1k':>12}")
        print(hdr)
        print("-" * len(hdr))
        for r in medians(commits, ("driver", "partitions_per_commit", "inflight")):
            print(f"{r['driver']:<9} {r['partitions_per_commit']:>5} {r['inflight']:>8} "
                  f"{r['commits_s']:>10,} {r['partitions_s']:>12,} {r['lat_p50_ms']:>8} "
                  f"{r['lat_p99_ms']:>8} {r['broker_cpu_ms_per_1000_commits']:>12}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", default="1,10,50", help="comma list of group sizes")
    ap.add_argument("--protocols", default="classic,consumer", help="classic,consumer")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (fresh broker each)")
    ap.add_argument("--commit-seconds", type=float, default=3.0)
    ap.add_argument("--skip-rebalance", action="store_true")
    ap.add_argument("--skip-commit", action="store_true")
    ap.add_argument("--json-out", type=Path, help="also append the JSON lines to this file")
    args = ap.parse_args(argv)

    out = open(args.json_out, "a") if args.json_out else None
    try:
        emit({"type": "machine", **machine_info(), "argv": sys.argv[1:]}, out)
        rebalances, commits = [], []
        for _ in range(args.repeat):
            if not args.skip_rebalance:
                for protocol in args.protocols.split(","):
                    for n in (int(x) for x in args.members.split(",")):
                        rebalances.append(run_rebalance(protocol, n, out))
            if not args.skip_commit:
                for driver, per_commit, inflight in (("raw", 1, 1), ("raw", 100, 1),
                                                     ("raw", 1, 16), ("raw", 100, 16),
                                                     ("confluent", 1, 1),
                                                     ("confluent", 100, 1)):
                    commits.append(run_commits(driver, per_commit, inflight,
                                               args.commit_seconds, out))
        print_tables(rebalances, commits)
    finally:
        if out is not None:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
