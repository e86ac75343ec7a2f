"""What a cap on the Fetch response's size does to the consumer (issue 15, large consume).

    .venv/bin/python bench/bench_fetch_cap.py --rounds 3
    .venv/bin/python bench/bench_fetch_cap.py --caps 8,16,0 --clients ck,raw-fresh --rounds 5

One snakka broker (subprocess) gets ck-large's data once: 10k x 100 KiB records, one partition,
produced by confluent-kafka with acks=all. Then, per round and per cap (the order alternates
round by round, A B ... B A), the broker is restarted on the same data with
``snakka.fetch.response.target.bytes`` set to the cap (0: 57671680, Kafka's fetch.max.bytes
default, i.e. uncapped for a 50 MiB fetch) and each client consumes everything once, in a
process of its own. (The first measurement, before that config existed, set the broker's
fetch.max.bytes instead: the same bound on the response.)

Reported per (client, cap), load-insensitively: the consumer's CPU seconds per GB (user, system)
and minor page faults per GB from ``getrusage`` around the consume loop only (imports and
connecting excluded), the broker's CPU seconds per GB from /proc, and the MB/s (wall, load-
sensitive). Clients:

- ``ck``: bench_produce_consume.consume (confluent-kafka, 50 MiB fetch.max.bytes and
  max.partition.fetch.bytes);
- ``raw-fresh``: bench/raw_fetch.py with a new buffer per response (librdkafka's pattern);
- ``kp50``: kafka-python, fetch_max_bytes 50 MiB (its default) and max_partition_fetch_bytes
  50 MiB (its default of 1 MiB makes every response 1 MiB whatever the cap);
- ``aio50``: aiokafka, the same;
- ``ptool``: kafka-consumer-perf-test.sh --fetch-size 50 MiB (the Java consumer; its CPU
  includes the JVM's start, the rate is fetch.MB.sec).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from common import BrokerProcess, round_order  # noqa: E402

MiB = 1024 * 1024
GB = 1e9
TOPIC = "bench"
RECORDS = 10_000
SIZE = 100 * 1024
KAFKA_DEFAULT_FETCH_MAX = 57_671_680
CLIENT_TIMEOUT_S = 600.0


def _usage() -> tuple[float, float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt


def _kp_consume(bootstrap: str, n: int) -> int:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      fetch_max_bytes=50 * MiB, max_partition_fetch_bytes=50 * MiB,
                      auto_offset_reset="earliest")
    tp = TopicPartition(TOPIC, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = nbytes = 0
    while got < n:
        for recs in c.poll(timeout_ms=500, max_records=100_000).values():
            got += len(recs)
            nbytes += sum(len(r.value) for r in recs)
    c.close()
    return nbytes


def _aio_consume(bootstrap: str, n: int) -> int:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> int:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             fetch_max_bytes=50 * MiB, max_partition_fetch_bytes=50 * MiB,
                             auto_offset_reset="earliest")
        await c.start()
        tp = TopicPartition(TOPIC, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        got = nbytes = 0
        try:
            while got < n:
                for recs in (await c.getmany(timeout_ms=500, max_records=100_000)).values():
                    got += len(recs)
                    nbytes += sum(len(r.value) for r in recs)
        finally:
            await c.stop()
        return nbytes

    return asyncio.run(run())


def client_main(name: str, bootstrap: str, n: int) -> None:
    """One consume in this process: print JSON with its wall time, rusage and bytes."""
    if name == "ck":
        import bench_produce_consume as pc

        u0 = _usage()
        t0 = time.perf_counter()
        pc.consume(bootstrap, n, 1)
        nbytes = n * SIZE
    elif name == "raw-fresh":
        from raw_fetch import raw_consume

        u0 = _usage()
        t0 = time.perf_counter()
        raw_consume(bootstrap, TOPIC, 0, n, fresh_buffer=True)
        nbytes = n * SIZE
    elif name == "kp50":
        u0 = _usage()
        t0 = time.perf_counter()
        nbytes = _kp_consume(bootstrap, n)
    elif name == "aio50":
        u0 = _usage()
        t0 = time.perf_counter()
        nbytes = _aio_consume(bootstrap, n)
    else:
        raise SystemExit(f"unknown client {name}")
    wall = time.perf_counter() - t0
    u1 = _usage()
    print(json.dumps({"wall": wall, "utime": u1[0] - u0[0], "stime": u1[1] - u0[1],
                      "minflt": u1[2] - u0[2], "bytes": nbytes}))


def run_client(name: str, bootstrap: str, n: int) -> dict:
    if name == "ptool":
        from compare_kafka import parse_consumer_perf, run_tool

        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        text, _ = run_tool("kafka-consumer-perf-test.sh", "--bootstrap-server", bootstrap,
                           "--topic", TOPIC, "--messages", str(n), "--timeout", "60000",
                           "--fetch-size", str(50 * MiB))
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c = parse_consumer_perf(text)
        if c.get("data.consumed.in.nMsg", 0) < n:
            raise RuntimeError(f"kafka-consumer-perf-test consumed {c} of {n}")
        return {"mb_s": c["fetch.MB.sec"], "utime": r1.ru_utime - r0.ru_utime,
                "stime": r1.ru_stime - r0.ru_stime, "minflt": r1.ru_minflt - r0.ru_minflt,
                "bytes": n * SIZE}
    out = subprocess.run([sys.executable, __file__, "--client", name, "--bootstrap", bootstrap,
                          "--records", str(n)], capture_output=True, text=True,
                         timeout=CLIENT_TIMEOUT_S)
    if out.returncode != 0:
        raise RuntimeError(f"client {name} failed:\n{out.stderr[-3000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["mb_s"] = r["bytes"] / MiB / r["wall"]
    return r


def summary_row(name: str, cap: int, rs: list[dict]) -> str:
    """One markdown row: medians of the rounds (MB/s with its range) per GB consumed."""
    gb = rs[0]["bytes"] / GB

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rs)

    def per_gb(*keys: str) -> float:
        return statistics.median(sum(r[k] for k in keys) / gb for r in rs)

    mbs = [r["mb_s"] for r in rs]
    loads = [r["load"] for r in rs]
    return (f"| {name} | {cap or 'none'} | {med('mb_s'):,.0f} ({min(mbs):,.0f}–{max(mbs):,.0f}) "
            f"| {per_gb('utime', 'stime'):.2f} | {per_gb('stime'):.2f} "
            f"| {per_gb('minflt'):,.0f} | {per_gb('broker_cpu'):.2f} "
            f"| {min(loads):.1f}–{max(loads):.1f} |")


def print_table(results: dict[tuple[str, int], list[dict]], clients: list[str],
                caps: list[int]) -> None:
    print("\n| client | cap MiB | MB/s median (range) | consumer user+sys CPU-s/GB | "
          "sys CPU-s/GB | faults/GB | broker CPU-s/GB | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in clients:
        for cap in caps:
            if results.get((name, cap)):
                print(summary_row(name, cap, results[(name, cap)]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--records", type=int, default=RECORDS)
    ap.add_argument("--caps", default="4,8,16,24,30,0", help="MiB; 0 = uncapped (57671680)")
    ap.add_argument("--clients", default="ck,raw-fresh,kp50,aio50,ptool")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--broker-config", action="append", default=[],
                    help="extra KEY=VALUE for the broker")
    args = ap.parse_args()
    if args.client:
        client_main(args.client, args.bootstrap, args.records)
        return 0
    import bench_produce_consume as pc

    caps = [int(c) for c in args.caps.split(",")]
    clients = args.clients.split(",")
    extra = dict(kv.split("=", 1) for kv in args.broker_config)
    data = tempfile.mkdtemp(prefix="snakka-fetchcap-")
    results: dict[tuple[str, int], list[dict]] = {}
    try:
        b = BrokerProcess(extra, data_dir=data).start()
        try:
            pc.create_topic(b.bootstrap, 1)
            pc.produce(b.bootstrap, args.records, SIZE, "all")
        finally:
            b.close()
        for rnd in range(1, args.rounds + 1):
            for cap in round_order(caps, rnd):
                conf = dict(extra)
                conf["snakka.fetch.response.target.bytes"] = \
                    str(cap * MiB if cap else KAFKA_DEFAULT_FETCH_MAX)
                b = BrokerProcess(conf, data_dir=data).start()
                try:
                    for name in round_order(clients, rnd):
                        c0 = b.cpu_seconds()
                        r = run_client(name, b.bootstrap, args.records)
                        r["broker_cpu"] = b.cpu_seconds() - c0
                        r.update(client=name, cap=cap, round=rnd,
                                 load=os.getloadavg()[0])
                        results.setdefault((name, cap), []).append(r)
                        print(json.dumps(r), flush=True)
                        if args.json_out:
                            with args.json_out.open("a") as f:
                                f.write(json.dumps(r) + "\n")
                finally:
                    b.close()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    print_table(results, clients, caps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
