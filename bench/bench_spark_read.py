"""Batch-read benchmark of the ``snakka`` Spark data source (issue 5).

    .venv/bin/python bench/bench_spark_read.py                  # 5,000,000 records of 100 bytes
    .venv/bin/python bench/bench_spark_read.py --records 500000 # quicker
    .venv/bin/python bench/bench_spark_read.py --compression lz4 --runs 3
    .venv/bin/python bench/bench_spark_read.py --py-spy prof/   # profile one executor worker

Setup: a fresh ``python -m snakka serve`` SUBPROCESS (temporary data dir, ephemeral port), a
topic with ``--partitions`` partitions (default 4), filled with ``--records`` records whose
values are 100 random bytes (no key, no headers) in batches of 5,000 records built with
snakka's own batch builder and produced over the Kafka protocol (the broker assigns offsets;
one batch is reused, so filling is fast). Then a local SparkSession (``--master``, default
``local[2]``: this is a 2-core machine) reads the whole topic with

    spark.read.format("snakka").option("subscribe", topic).load()
         .selectExpr("count(*)", "sum(length(value))", "max(offset)")

which makes Spark materialise every row (the value bytes included) in the JVM. The reported
time is the wall time of that action (planning, fetching, decoding to Arrow, Arrow -> JVM
rows, aggregation), after one untimed warm-up read of a tiny topic that starts the Python
workers. rows/s = records / time; every run checks the count and byte sum.

Output: one JSON object per line (``{"type": "run", ...}``), then a summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (  # noqa: E402
    BrokerProcess,
    PySpy,
    machine_info,
    proc_cpu_seconds,
    summarize_collapsed,
)

BATCH_RECORDS = 5_000


def fill_topic(bootstrap: str, topic: str, partitions: int, records: int, value_size: int,
               codec: int) -> float:
    from snakka.records import Record, build_batch
    from snakka.spark.client import SparkKafkaClient
    from snakka.spark.options import ClientSettings, parse_bootstrap_servers

    rnd = os.urandom(value_size * BATCH_RECORDS)
    now = time.time_ns() // 1_000_000
    t0 = time.perf_counter()
    settings = ClientSettings(bootstrap_servers=parse_bootstrap_servers(bootstrap))
    with SparkKafkaClient(settings) as c:
        c.metadata([topic])
        sent = 0
        part = 0
        while sent < records:
            n = min(BATCH_RECORDS, records - sent)
            batch = build_batch(
                [Record(timestamp=now, value=rnd[i * value_size:(i + 1) * value_size])
                 for i in range(n)], compression=codec)
            code, _ = c.produce((topic, part), batch, acks=1, timeout_ms=30_000)
            if code:
                raise RuntimeError(f"produce failed with error {code}")
            sent += n
            part = (part + 1) % partitions
    return time.perf_counter() - t0


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--py-spy", type=Path, default=None, help="profile the first run's executors")
    args = ap.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import snakka.spark
    from snakka.spark import arrow_decode
    from snakka.spark.options import COMPRESSION_CODECS

    print(json.dumps({"type": "machine", **machine_info(),
                      "c_decoder": arrow_decode.USING_C_DECODER}), flush=True)
    with BrokerProcess() as broker:
        bs = broker.bootstrap
        create_topic(bs, "bench", args.partitions)
        create_topic(bs, "warmup", 1)
        fill_s = fill_topic(bs, "bench", args.partitions, args.records, args.value_size,
                            COMPRESSION_CODECS[args.compression])
        fill_topic(bs, "warmup", 1, 10, 10, 0)
        print(json.dumps({"type": "fill", "records": args.records, "seconds": round(fill_s, 2)}),
              flush=True)

        spark = (SparkSession.builder.master(args.master).appName("bench-spark-read")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "2g")
                 .config("spark.sql.shuffle.partitions", "2")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        snakka.spark.register(spark)

        def read(topic: str):
            return (spark.read.format("snakka").option("kafka.bootstrap.servers", bs)
                    .option("subscribe", topic).load()
                    .selectExpr("count(*) as n", "sum(length(value)) as bytes",
                                "max(offset) as max_offset").collect()[0])

        read("warmup")
        jvm_pid = spark.sparkContext._gateway.proc.pid
        times = []
        for run in range(args.runs):
            prof = nullcontext()
            if args.py_spy is not None and run == 0:
                args.py_spy.mkdir(parents=True, exist_ok=True)
                prof = _SpyWorkers(args.py_spy)
            with prof:
                cpu0 = (broker.cpu_seconds(), proc_cpu_seconds(jvm_pid), _workers_cpu(jvm_pid))
                t0 = time.perf_counter()
                row = read("bench")
                dt = time.perf_counter() - t0
                cpu1 = (broker.cpu_seconds(), proc_cpu_seconds(jvm_pid), _workers_cpu(jvm_pid))
            assert row.n == args.records, row
            assert row.bytes == args.records * args.value_size, row
            times.append(dt)
            print(json.dumps({"type": "run", "run": run, "records": args.records,
                              "seconds": round(dt, 3), "rows_per_s": round(args.records / dt),
                              "master": args.master, "partitions": args.partitions,
                              "compression": args.compression,
                              "cpu_s": {"broker": round(cpu1[0] - cpu0[0], 2),
                                        "spark_jvm": round(cpu1[1] - cpu0[1], 2),
                                        "python_workers": round(cpu1[2] - cpu0[2], 2)},
                              "profiled": run == 0 and args.py_spy is not None}), flush=True)
        spark.stop()
    best = min(times)
    print(json.dumps({"type": "summary", "records": args.records,
                      "best_rows_per_s": round(args.records / best),
                      "median_rows_per_s": round(args.records / statistics.median(times)),
                      "runs": len(times)}), flush=True)


class _SpyWorkers:
    """py-spy every pyspark worker process that appears while the block runs."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.spies: list[PySpy] = []
        self._stop = False

    def __enter__(self) -> _SpyWorkers:
        import threading

        def watch() -> None:
            seen: set[int] = set()
            while not self._stop:
                for pid in _worker_pids():
                    if pid not in seen:
                        seen.add(pid)
                        spy = PySpy(pid, self.out / f"worker-{pid}.txt")
                        try:
                            spy.__enter__()
                            self.spies.append(spy)
                        except Exception:  # noqa: BLE001 - a worker that already ended
                            pass
                time.sleep(0.05)

        self._t = threading.Thread(target=watch, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._t.join()
        for spy in self.spies:
            spy.__exit__(None, None, None)
            print(json.dumps({"type": "profile", "file": str(spy.out),
                              **summarize_collapsed(spy.out, top=15)}), flush=True)


def _workers_cpu(jvm_pid: int) -> float:
    """CPU seconds of every process below the Spark JVM (pyspark daemons and workers,
    including finished workers their daemon has reaped)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(d))
    total = 0.0
    todo = list(children.get(jvm_pid, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def _worker_pids() -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"pyspark.daemon" in b" ".join(cmd) and int(d) != os.getpid():
            out.append(int(d))
    return out


if __name__ == "__main__":
    main()
