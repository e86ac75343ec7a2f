"""End-to-end produce/consume benchmark driven by confluent-kafka (librdkafka).

    .venv/bin/python bench/bench_produce_consume.py                 # full sizes, acks=1 and all
    .venv/bin/python bench/bench_produce_consume.py --quick         # 10x fewer records
    .venv/bin/python bench/bench_produce_consume.py --strict        # log.flush.strict=true, acks=all
    .venv/bin/python bench/bench_produce_consume.py --py-spy prof/  # also profile the broker
    .venv/bin/python bench/bench_produce_consume.py --keyed --topic-config cleanup.policy=compact

Scenarios (the issue's numbers; ``--quick`` divides the record counts by 10):

  small: 1,000,000 records of 100 bytes   large: 10,000 records of 100 KiB (102,400 bytes)

each with acks=1 and acks=all (``--acks``), against a topic with ``--partitions`` partitions
(default 1). Every run gets a fresh broker: ``python -m snakka serve`` as a SUBPROCESS with a
temporary data directory (on disk, not tmpfs) and an ephemeral port, so the client's CPU is
separate from the broker's and the broker's peak resident memory (VmHWM) can be read per run.

Producer: linger.ms=5, batch.size=1000000, compression none, idempotence off (librdkafka's
default), queue large enough for the whole run; values are one random buffer reused, no keys.
Produce time is wall time from the first produce() to flush() returning; latency is librdkafka's
per-message produce()->delivery-report time (``Message.latency()``), reported as p50/p99/max.
Consumer: assign() at OFFSET_BEGINNING (group.id set, nothing committed), fetch.queue.backoff.ms=1,
50 MB fetches; consume time is wall time from assign() to the last record, on a consumer that
has already connected (a get_watermark_offsets() warm-up, which also checks the record count).
``consume_first_batch_s`` is assign() -> first consume() call that returned records.

MB/s is MiB of record values per second (1 MB = 2**20 bytes, as Kafka's perf tools print).
Broker and client CPU seconds per phase are reported too (from /proc and os.times()), so a
client-bound run is recognisable.

Output: one JSON object per line (``{"type": "startup"|"run", ...}``, machine-readable; also
written to ``--json-out``) and a human table at the end. With ``--py-spy DIR`` each produce and
consume phase is recorded with py-spy (collapsed stacks in DIR) and the top functions are
printed; profiled runs are slower, so do not quote their throughput.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (  # noqa: E402
    BrokerProcess,
    PySpy,
    emit,
    machine_info,
    percentile,
    self_cpu_seconds,
    summarize_collapsed,
)

MiB = 1024 * 1024
SCENARIOS = {"small": (1_000_000, 100), "large": (10_000, 100 * 1024)}
PRODUCE_TIMEOUT_S = 600.0
CONSUME_TIMEOUT_S = 600.0
TOPIC = "bench"


def create_topic(bootstrap: str, partitions: int, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1,
                                       config=config or {})],
                             operation_timeout=30, request_timeout=30)
    fs[TOPIC].result(timeout=30)


def producer_config(bootstrap: str, acks: str, n: int,
                    timeout_s: float = PRODUCE_TIMEOUT_S) -> dict:
    """The confluent-kafka producer settings of every produce benchmark (ck-small/ck-large and
    the several-process rows of compare_kafka must measure the same client): large batches,
    5 ms linger, a local queue that holds ``n`` records."""
    return {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
            "batch.size": 1_000_000, "compression.type": "none",
            "queue.buffering.max.messages": max(100_000, min(n + 1000, 2_000_000)),
            "queue.buffering.max.kbytes": 2_097_151,
            "message.timeout.ms": int(timeout_s * 1000)}


def produce(bootstrap: str, n: int, size: int, acks: str, keyed: bool = False) -> dict:
    from confluent_kafka import Producer

    p = Producer(producer_config(bootstrap, acks, n))
    value = random.Random(1).randbytes(size)
    # --keyed: 1024 distinct 8-byte keys in turn (a compacted topic refuses keyless records).
    keys = [b"key%05d" % j for j in range(1024)] if keyed else [None] * 1024
    latencies: list[float] = []
    errors: list[str] = []
    lat_append = latencies.append

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            lat_append(msg.latency())

    produce_ = p.produce
    poll = p.poll
    deadline = time.monotonic() + PRODUCE_TIMEOUT_S
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                produce_(TOPIC, value, keys[i & 1023], on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                poll(0.01)
                if time.monotonic() > deadline:
                    raise TimeoutError("produce timed out") from None
        if i & 0x3FFF == 0:
            poll(0)
    remaining = p.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - t0
    if remaining or errors or len(latencies) != n:
        raise RuntimeError(f"produce incomplete: {remaining} unflushed, {len(errors)} errors "
                           f"(e.g. {errors[:3]}), {len(latencies)}/{n} delivered")
    latencies.sort()
    return {"produce_s": round(elapsed, 3),
            "produce_rec_s": round(n / elapsed),
            "produce_mb_s": round(n * size / MiB / elapsed, 1),
            "lat_p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
            "lat_p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
            "lat_max_ms": round(latencies[-1] * 1000, 2)}


def consume(bootstrap: str, n: int, partitions: int) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    fetch_max = 50 * MiB
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "bench-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": 1,
        "fetch.wait.max.ms": 100,
        "fetch.max.bytes": fetch_max,
        "max.partition.fetch.bytes": fetch_max,
        "receive.message.max.bytes": fetch_max + MiB,
        "queued.max.messages.kbytes": 1024 * 1024,
        "queued.min.messages": 1_000_000,
    })
    got = 0
    nbytes = 0
    first = -1.0
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        # Warm-up outside the clock: connect, learn the leader, and check the record count.
        # (librdkafka's first connection and metadata round trips otherwise add ~0.5 s.)
        high = sum(c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
                   for p in range(partitions))
        if high != n:
            raise RuntimeError(f"topic holds {high} records, {n} produced")
        t0 = time.perf_counter()
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        while got < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {got}/{n} records before the deadline")
            # consume() returns when it has num_messages or the timeout passed: ask for at most
            # what is left and wait briefly, so neither the last call nor a slow trickle of
            # large records waits out a long timeout on the clock.
            for m in c.consume(num_messages=min(n - got, 100_000), timeout=0.05):
                if m.error():
                    raise RuntimeError(f"consumer error: {m.error()}")
                nbytes += len(m)
                got += 1
            if got and first < 0:
                first = time.perf_counter() - t0
        elapsed = time.perf_counter() - t0
    finally:
        c.close()
    return {"consume_s": round(elapsed, 3), "consume_rec_s": round(got / elapsed),
            "consume_mb_s": round(nbytes / MiB / elapsed, 1),
            "consume_first_batch_s": round(first, 3)}


def kcat_metadata_s(bootstrap: str) -> float:
    kcat = shutil.which("kcat")
    if kcat is None:
        return -1.0
    t0 = time.perf_counter()
    subprocess.run([kcat, "-b", bootstrap, "-L", "-m", "10"], capture_output=True, check=True,
                   timeout=30)
    return time.perf_counter() - t0


def measure_startup(runs: int, out) -> dict:
    """Fresh data dir each time: spawn -> READY line, spawn -> Metadata answer, kcat -L."""
    ready, meta, kcat, rss = [], [], [], []
    for _ in range(runs):
        with BrokerProcess() as b:
            ready.append(b.ready_s)
            meta.append(b.metadata_s)
            kcat.append(kcat_metadata_s(b.bootstrap))
            rss.append(b.rss_kb() / 1024)
    res = {"type": "startup", "runs": runs,
           "ready_s_median": round(statistics.median(ready), 3), "ready_s_max": round(max(ready), 3),
           "metadata_s_median": round(statistics.median(meta), 3),
           "metadata_s_max": round(max(meta), 3),
           "kcat_L_s_median": round(statistics.median(kcat), 3),
           "idle_rss_mb": round(statistics.median(rss), 1)}
    emit(res, out)
    return res


def run_one(scenario: str, n: int, size: int, acks: str, strict: bool, partitions: int,
            pyspy_dir: Path | None, out, topic_config: dict[str, str] | None = None,
            keyed: bool = False) -> dict:
    config = {"log.flush.strict": "true"} if strict else {}
    tag = f"{scenario}-acks{acks}{'-strict' if strict else ''}"
    with BrokerProcess(config) as b:
        idle_rss = b.rss_kb()
        create_topic(b.bootstrap, partitions, topic_config)
        res: dict = {"type": "run", "scenario": scenario, "records": n, "record_bytes": size,
                     "acks": acks, "strict": strict, "partitions": partitions,
                     "topic_config": topic_config or {}, "keyed": keyed,
                     "profiled": pyspy_dir is not None}
        for phase, fn in (("produce", lambda: produce(b.bootstrap, n, size, acks, keyed)),
                          ("consume", lambda: consume(b.bootstrap, n, partitions))):
            prof = (PySpy(b.pid, pyspy_dir / f"{tag}-{phase}.txt") if pyspy_dir
                    else nullcontext())
            bcpu0, ccpu0 = b.cpu_seconds(), self_cpu_seconds()
            with prof:
                res.update(fn())
            res[f"{phase}_broker_cpu_s"] = round(b.cpu_seconds() - bcpu0, 2)
            res[f"{phase}_client_cpu_s"] = round(self_cpu_seconds() - ccpu0, 2)
            res[f"broker_peak_rss_after_{phase}_mb"] = round(b.peak_rss_kb() / 1024, 1)
        res["broker_idle_rss_mb"] = round(idle_rss / 1024, 1)
        res["broker_peak_rss_mb"] = round(b.peak_rss_kb() / 1024, 1)
        res["ready_s"] = round(b.ready_s, 3)
    emit(res, out)
    return res


def median_runs(runs: list[dict]) -> list[dict]:
    """One row per (scenario, acks, strict): the median of each number over the repetitions."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["scenario"], r["acks"], r["strict"]), []).append(r)
    out = []
    for rs in groups.values():
        row = dict(rs[0])
        for k, v in rs[0].items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                m = statistics.median(r[k] for r in rs)
                row[k] = type(v)(round(m, 3)) if isinstance(v, float) else round(m)
        row["repeats"] = len(rs)
        out.append(row)
    return out


def print_table(startup: dict | None, runs: list[dict]) -> None:
    if startup:
        print(f"\nstart-up ({startup['runs']} runs, median): spawn->READY "
              f"{startup['ready_s_median']:.3f}s, spawn->Metadata answer "
              f"{startup['metadata_s_median']:.3f}s, kcat -L {startup['kcat_L_s_median']:.3f}s; "
              f"idle RSS {startup['idle_rss_mb']} MB")
    if runs and runs[0].get("repeats", 1) > 1:
        print(f"median of {runs[0]['repeats']} runs, each on a fresh broker:")
    hdr = (f"{'scenario':<8} {'acks':<9} {'records':>9} {'prod rec/s':>11} {'prod MB/s':>9} "
           f"{'p50 ms':>8} {'p99 ms':>8} {'cons rec/s':>11} {'cons MB/s':>9} {'peak RSS':>9}")
    print(hdr)
    print("-" * len(hdr))
    for r in runs:
        acks = r["acks"] + ("+strict" if r["strict"] else "")
        print(f"{r['scenario']:<8} {acks:<9} {r['records']:>9,} {r['produce_rec_s']:>11,} "
              f"{r['produce_mb_s']:>9} {r['lat_p50_ms']:>8} {r['lat_p99_ms']:>8} "
              f"{r['consume_rec_s']:>11,} {r['consume_mb_s']:>9} "
              f"{r['broker_peak_rss_mb']:>6} MB")


def print_profiles(pyspy_dir: Path, top: int) -> None:
    for f in sorted(pyspy_dir.glob("*.txt")):
        if f.name == "summary.txt":
            continue
        s = summarize_collapsed(f, top)
        lines = [f"\n== {f.stem}: {s['samples']} samples", "-- self (leaf frame) --"]
        lines += [f"{pct:5.1f}%  {fn}" for fn, _c, pct in s["self"]]
        lines.append("-- inclusive (function anywhere on the stack) --")
        lines += [f"{pct:5.1f}%  {fn}" for fn, _c, pct in s["inclusive"]]
        text = "\n".join(lines)
        print(text)
        with open(pyspy_dir / "summary.txt", "a") as out:
            out.write(text + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10x fewer records (smoke run)")
    ap.add_argument("--scenarios", default="small,large", help="comma list: small,large")
    ap.add_argument("--acks", help="comma list of acks values (default 1,all; all with --strict)")
    ap.add_argument("--strict", action="store_true",
                    help="broker with log.flush.strict=true (acks=all waits for fsync)")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every case N times (fresh broker each); the table shows medians")
    ap.add_argument("--small-records", type=int, help="override the small scenario's count")
    ap.add_argument("--large-records", type=int, help="override the large scenario's count")
    ap.add_argument("--startup-runs", type=int, default=5, help="0 skips the start-up timing")
    ap.add_argument("--py-spy", type=Path, metavar="DIR", help="record the broker with py-spy")
    ap.add_argument("--top", type=int, default=20, help="profile summary length")
    ap.add_argument("--json-out", type=Path, help="also append the JSON lines to this file")
    ap.add_argument("--topic-config", action="append", default=[], metavar="K=V",
                    help="topic config of the bench topic (repeatable), e.g. cleanup.policy=compact")
    ap.add_argument("--keyed", action="store_true",
                    help="produce with keys (1024 distinct; a compacted topic needs them)")
    args = ap.parse_args(argv)
    topic_config = dict(kv.split("=", 1) for kv in args.topic_config)

    if args.acks is None:
        args.acks = "all" if args.strict else "1,all"
    sizes = dict(SCENARIOS)
    if args.quick:
        sizes = {k: (n // 10, s) for k, (n, s) in sizes.items()}
    if args.small_records:
        sizes["small"] = (args.small_records, sizes["small"][1])
    if args.large_records:
        sizes["large"] = (args.large_records, sizes["large"][1])
    if args.py_spy:
        args.py_spy.mkdir(parents=True, exist_ok=True)
        (args.py_spy / "summary.txt").unlink(missing_ok=True)
    out = open(args.json_out, "a") if args.json_out else None
    try:
        emit({"type": "machine", **machine_info(), "argv": sys.argv[1:]}, out)
        startup = measure_startup(args.startup_runs, out) if args.startup_runs > 0 else None
        runs = []
        for _ in range(args.repeat):
            for scenario in args.scenarios.split(","):
                n, size = sizes[scenario]
                for acks in args.acks.split(","):
                    runs.append(run_one(scenario, n, size, acks, args.strict, args.partitions,
                                        args.py_spy, out, topic_config, args.keyed))
        print_table(startup, median_runs(runs))
        if args.py_spy:
            print_profiles(args.py_spy, args.top)
    finally:
        if out is not None:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
