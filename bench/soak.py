"""Soak: does the broker's memory or descriptor count grow under a long mixed workload?

One ``snakka serve`` subprocess (common.BrokerProcess) and a loop of cycles, each doing what a
busy application cluster does, with real clients, on fresh names every cycle:

* create a 4-partition topic (small segments and a short retention, so segments roll and are
  deleted while the soak runs), produce 20,000 records with confluent-kafka (keys, headers);
* a classic consumer group of two confluent-kafka consumers reads them all and commits; a
  KIP-848 member (``group.protocol=consumer``) joins and leaves;
* a transactional producer commits one transaction and aborts another;
* snakka's ShareConsumer acknowledges records of a share group;
* kafka-python lists the groups and describes them; 200 raw connections open and close;
* the cycle's groups and topic are deleted (every third topic is kept, to grow the metadata a
  little as a real cluster does).

After every cycle the broker's RSS, open descriptors and CPU seconds are printed as one JSON
line. The verdict compares the RSS after the warm-up cycles with the end: a broker that keeps
something per topic, group, connection or transaction it no longer needs grows by it every
cycle. Memory is not a timed measure, so the soak can run on a loaded machine.

    .venv/bin/python bench/soak.py --minutes 10
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))

from common import BrokerProcess, machine_info  # noqa: E402

RECORDS = 20_000
PARTITIONS = 4


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _produce(bs: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "acks": "all"})
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"k%d" % (i % 97), value=b"v" * 100,
                          headers=[("h", b"%d" % i)])
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def _group_consume(bs: str, topic: str, group: str, n: int) -> None:
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    members = [Consumer(conf), Consumer(conf)]
    for c in members:
        c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        for c in members:
            msgs = c.consume(num_messages=5000, timeout=0.2)
            got += sum(1 for m in msgs if not m.error())
            if msgs:
                c.commit(asynchronous=False)
    for c in members:
        c.close()
    if got < n:
        raise RuntimeError(f"group read {got} of {n}")


def _kip848_member(bs: str, topic: str, group: str) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(not m.error() for m in c.consume(num_messages=100, timeout=0.2)):
            break
    c.close()


def _transactions(bs: str, topic: str, txn_id: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
    p.init_transactions(30)
    for commit in (True, False):
        p.begin_transaction()
        for i in range(100):
            p.produce(topic, value=b"t%d" % i)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)


def _share(bs: str, topic: str, group: str) -> None:
    import asyncio

    from snakka.client.share_admin import ShareAdmin
    from snakka.client.share_consumer import ShareConsumer

    async def configure() -> None:
        async with ShareAdmin(bs) as admin:
            await admin.alter_group_configs(group, {"share.auto.offset.reset": "earliest"})

    asyncio.run(configure())
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < 1000 and time.monotonic() < deadline:
        got += len(c.poll(0.5))
    c.close()


def _kafka_python_admin(bs: str) -> None:
    from kafka.admin import KafkaAdminClient

    a = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=30000)
    try:
        groups = [g["group_id"] if isinstance(g, dict) else g[0] for g in a.list_groups()]
        if groups:
            a.describe_groups(groups[:20])
    finally:
        a.close()


def _raw_connections(port: int, n: int = 200) -> None:
    socks = []
    for _ in range(n):
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
    for s in socks:
        s.close()


def _delete(bs: str, topic: str | None, groups: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": bs})
    if groups:
        for fut in a.delete_consumer_groups(groups, request_timeout=30).values():
            try:
                fut.result()
            except Exception:  # noqa: BLE001 - a share group is not a consumer group
                pass
    if topic is not None:
        for fut in a.delete_topics([topic], operation_timeout=30).values():
            fut.result()


def cycle(bs: str, port: int, i: int, reuse_names: bool = False) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    # --reuse-names: the same topic, group, transactional id and share group every cycle,
    # everything deleted at the end of it: what the broker keeps may not grow at all.
    tag = "same" if reuse_names else f"{i}-{uuid.uuid4().hex[:6]}"
    topic = f"soak-{tag}"
    a = AdminClient({"bootstrap.servers": bs})
    for fut in a.create_topics([NewTopic(topic, PARTITIONS, 1, config={
            "segment.bytes": str(256 * 1024), "retention.ms": "20000"})]).values():
        fut.result()
    _produce(bs, topic, RECORDS)
    groups = [f"g-{tag}", f"k848-{tag}"]
    _group_consume(bs, topic, groups[0], RECORDS)
    _kip848_member(bs, topic, groups[1])
    _transactions(bs, topic, f"txn-{tag}")
    _share(bs, topic, f"share-{tag}")
    _kafka_python_admin(bs)
    _raw_connections(port)
    if reuse_names:
        groups.append(f"share-{tag}")  # deleted as a share group below
    _delete(bs, topic if reuse_names or i % 3 else None, groups)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--warmup", type=int, default=3, help="cycles before the baseline")
    ap.add_argument("--reuse-names", action="store_true",
                    help="the same names every cycle, all deleted (no state may accumulate)")
    args = ap.parse_args()
    print(json.dumps({"type": "soak-header", **machine_info()}), flush=True)
    rows = []
    with BrokerProcess({"log.retention.check.interval.ms": "2000",
                        "group.initial.rebalance.delay.ms": "0"}) as b:
        end = time.monotonic() + args.minutes * 60
        i = 0
        while time.monotonic() < end:
            t0 = time.monotonic()
            cycle(b.bootstrap, b.port, i, args.reuse_names)
            row = {"type": "soak-cycle", "cycle": i, "s": round(time.monotonic() - t0, 1),
                   "rss_kb": b.rss_kb(), "peak_rss_kb": b.peak_rss_kb(), "fds": _fds(b.pid),
                   "cpu_s": round(b.cpu_seconds(), 1),
                   "load": round(os.getloadavg()[0], 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            i += 1
        errors = [line for line in b.output if "ERROR" in line or "Traceback" in line]
    if len(rows) <= args.warmup + 1:
        print(json.dumps({"type": "soak-verdict", "error": "too few cycles"}))
        return
    after = rows[args.warmup:]
    base = statistics.median(r["rss_kb"] for r in after[:2])
    last = statistics.median(r["rss_kb"] for r in after[-2:])
    per_cycle = (last - base) / max(1, len(after) - 2)
    print(json.dumps({"type": "soak-verdict", "cycles": len(rows),
                      "rss_after_warmup_kb": base, "rss_end_kb": last,
                      "growth_kb_per_cycle": round(per_cycle, 1),
                      "fds_after_warmup": after[0]["fds"], "fds_end": rows[-1]["fds"],
                      "broker_error_lines": errors[:10]}), flush=True)


if __name__ == "__main__":
    main()
