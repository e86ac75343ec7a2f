"""Log compaction (issue 13): how fast the cleaner cleans, and what it costs produce latency.

    .venv/bin/python bench/bench_compaction.py            # 200 MB logs, 30 s latency windows
    .venv/bin/python bench/bench_compaction.py --quick    # 20 MB logs, 8 s windows (~1-2 min)
    .venv/bin/python bench/bench_compaction.py --only throughput --log-mb 50

Two measurements, one JSON line each (machine-readable), then a human summary:

throughput  In process, no network: a compacted UnifiedLog of ``--log-mb`` MB of keyed records
            (10 % of the keys live: every key written ~10 times, keys in random order, batches
            of ~16 KB, segments of 16 MiB), for 100 B and 1 KB values, uncompressed and lz4.
            The log is rolled so all of it is cleanable, then one ``LogCleaner.clean_once()``
            (Kafka's defaults: 128 MiB dedupe buffer, no throttle) is timed with the wall
            clock. MB/s = log bytes before the pass / seconds of the pass (Kafka's cleaner
            reports the same: bytes read / elapsed). Also: bytes after, records kept.
latency     A ``snakka serve`` subprocess with a compacted topic (1 MiB segments), preloaded
            with ``--preload-mb`` MB of keyed 100 B records so the cleaner has work; then one
            confluent-kafka producer (acks=all, linger.ms=0, idempotent) sends keyed records at
            a fixed rate for the window and times each acknowledgement (send -> delivery
            callback; the callback is polled every millisecond). The same run with
            ``log.cleaner.enable=false``. Reported: p50/p99/max, and whether the cleaner really
            ran during the window (its log lines, the partition's bytes before and after).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from common import BrokerProcess, emit, machine_info, percentile  # noqa: E402

from snakka.config import BrokerConfig  # noqa: E402
from snakka.records import Record, build_batch  # noqa: E402
from snakka.storage import LogConfig, UnifiedLog  # noqa: E402

MB = 1_000_000
LZ4 = 3
BATCH_BYTES = 16 * 1024
LIVE_FRACTION = 0.10


# -- throughput ------------------------------------------------------------------------------
def build_log(path: str, log_mb: int, value_bytes: int, codec: int, seed: int) -> UnifiedLog:
    """A compacted log of about ``log_mb`` MB of records (key ~12 B, value ``value_bytes``),
    every key written ~1/LIVE_FRACTION times in random order, rolled: all of it cleanable."""
    cfg = LogConfig(segment_bytes=16 * 1024 * 1024, cleanup_policy=("compact",),
                    min_cleanable_dirty_ratio=0.01)
    log = UnifiedLog(path, cfg, recover=False)
    rnd = random.Random(seed)
    record_bytes = value_bytes + 20  # key, varints, attributes
    n_records = log_mb * MB // record_bytes
    n_keys = max(1, int(n_records * LIVE_FRACTION))
    per_batch = max(1, BATCH_BYTES // record_bytes)
    # Values are random-ish text, so lz4 compresses them somewhat, as real payloads.
    words = [bytes(rnd.choices(b"abcdefghij0123456789", k=32)) for _ in range(64)]
    now = int(time.time() * 1000)
    written = 0
    while written < n_records:
        recs = []
        for _ in range(min(per_batch, n_records - written)):
            key = b"key-%08d" % rnd.randrange(n_keys)
            value = b"".join(rnd.choices(words, k=value_bytes // 32 + 1))[:value_bytes]
            recs.append(Record(timestamp=now, key=key, value=value))
            written += 1
        buf = bytearray(build_batch(recs, compression=codec))
        log.append(buf, log.validate(buf))
    log.roll()
    return log


def measure_throughput(log_mb: int, value_bytes: int, codec: int, workdir: str) -> dict:
    from snakka.storage.cleaner.manager import CleanerConfig, LogCleaner

    path = os.path.join(workdir, f"bench-{value_bytes}-{codec}-0")
    t0 = time.perf_counter()
    log = build_log(path, log_mb, value_bytes, codec, seed=value_bytes + codec)
    build_s = time.perf_counter() - t0
    try:
        before = log.size_bytes
        records = sum(h.records_count for h, _, _ in log.read_batch_headers())
        cleaner = LogCleaner(CleanerConfig.from_broker(BrokerConfig({"log.dirs": workdir})),
                             lambda: [log])
        t0 = time.perf_counter()
        cleaner.clean_once()
        secs = time.perf_counter() - t0
        after = log.size_bytes
        kept = sum(h.records_count for h, _, _ in log.read_batch_headers())
        return {"type": "throughput", "value_bytes": value_bytes,
                "codec": "lz4" if codec == LZ4 else "none", "log_bytes": before,
                "after_bytes": after, "records_kept": kept, "seconds": round(secs, 3),
                "mb_per_s": round(before / MB / secs, 1),
                "records_per_s": round(records / secs), "build_s": round(build_s, 1)}
    finally:
        log.close()
        shutil.rmtree(path, ignore_errors=True)


# -- produce latency while cleaning ------------------------------------------------------------
def _create_topic(bs: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bs})
    fs = admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": str(1024 * 1024),
        "min.cleanable.dirty.ratio": "0.01"})])
    fs[topic].result(30)


def _partition_bytes(data_dir: str, topic: str) -> int:
    d = Path(data_dir) / f"{topic}-0"
    return sum(p.stat().st_size for p in d.glob("*.log"))


def measure_latency(cleaner: bool, preload_mb: int, seconds: float, rate: int) -> dict:
    from confluent_kafka import Producer

    topic = "bench-compacted"
    cfg = {"log.cleaner.enable": str(cleaner).lower(), "log.cleaner.backoff.ms": "50"}
    with BrokerProcess(cfg, log_level="INFO") as b:
        bs = b.bootstrap
        _create_topic(bs, topic)
        rnd = random.Random(1)
        n_keys = max(1, int(preload_mb * MB / 120 * LIVE_FRACTION))
        pre = Producer({"bootstrap.servers": bs, "linger.ms": 20, "acks": 1,
                        "batch.size": 256 * 1024})
        value = b"v" * 100
        for _ in range(preload_mb * MB // 120):
            while True:
                try:
                    pre.produce(topic, key=b"key-%08d" % rnd.randrange(n_keys), value=value)
                    break
                except BufferError:
                    pre.poll(0.01)
        assert pre.flush(120) == 0
        lines_before = len(b.output)
        bytes_before = _partition_bytes(b.data_dir, topic)
        cpu_before = b.cpu_seconds()

        p = Producer({"bootstrap.servers": bs, "linger.ms": 0, "acks": "all",
                      "enable.idempotence": True})
        p.produce(topic, key=b"warm-up", value=value)  # producer id, metadata, connection
        assert p.flush(30) == 0
        lat: list[float] = []
        n = int(seconds * rate)
        t0 = time.perf_counter()
        for i in range(n):
            due = t0 + i / rate
            while time.perf_counter() < due:
                p.poll(0.001)
            sent = time.perf_counter()
            p.produce(topic, key=b"key-%08d" % rnd.randrange(n_keys), value=value,
                      on_delivery=lambda err, _msg, s=sent: err is None and lat.append(
                          time.perf_counter() - s))
            p.poll(0)
        assert p.flush(60) == 0
        window_s = time.perf_counter() - t0
        cleaner_lines = [line for line in b.output[lines_before:] if "clean" in line.lower()]
        lat.sort()
        return {"type": "latency", "cleaner": cleaner, "preload_mb": preload_mb,
                "rate_per_s": rate, "window_s": round(window_s, 1), "acked": len(lat),
                "p50_ms": round(percentile(lat, 0.5) * 1000, 2),
                "p99_ms": round(percentile(lat, 0.99) * 1000, 2),
                "max_ms": round(lat[-1] * 1000, 2) if lat else None,
                "broker_cpu_s": round(b.cpu_seconds() - cpu_before, 1),
                "partition_bytes_before": bytes_before,
                "partition_bytes_after": _partition_bytes(b.data_dir, topic),
                "cleaner_log_lines": len(cleaner_lines)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 MB logs, 8 s latency windows")
    ap.add_argument("--only", choices=["throughput", "latency"])
    ap.add_argument("--log-mb", type=int, help="size of each log cleaned (default 200; 20 quick)")
    ap.add_argument("--preload-mb", type=int, help="data preloaded for the latency runs "
                    "(default 100; 20 quick)")
    ap.add_argument("--seconds", type=float, help="latency window (default 30; 8 quick)")
    ap.add_argument("--rate", type=int, default=500, help="produce rate of the latency runs")
    ap.add_argument("--rounds", type=int, default=2,
                    help="latency runs per setting, alternating off/on (the machine is shared)")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    log_mb = args.log_mb or (20 if args.quick else 200)
    preload = args.preload_mb or (20 if args.quick else 100)
    seconds = args.seconds or (8.0 if args.quick else 30.0)
    out = args.json_out.open("a") if args.json_out else None
    emit({"type": "machine", **machine_info()}, out)
    rows: list[dict] = []
    if args.only in (None, "throughput"):
        workdir = tempfile.mkdtemp(prefix="snakka-bench-clean-")
        try:
            for value_bytes in (100, 1000):
                for codec in (0, LZ4):
                    r = measure_throughput(log_mb, value_bytes, codec, workdir)
                    emit(r, out)
                    rows.append(r)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.only in (None, "latency"):
        for _ in range(args.rounds):
            for on in (False, True):
                r = measure_latency(on, preload, seconds, args.rate)
                emit(r, out)
                rows.append(r)
    print()
    for r in rows:
        if r["type"] == "throughput":
            print(f"clean {r['log_bytes'] / MB:7.1f} MB, {r['value_bytes']:>4} B values, "
                  f"{r['codec']:<4}: {r['mb_per_s']:6.1f} MB/s, {r['records_per_s']:>8} records/s "
                  f"({r['seconds']} s, "
                  f"{r['after_bytes'] / MB:.1f} MB left, {r['records_kept']} records)")
        else:
            print(f"produce at {r['rate_per_s']}/s, cleaner {'on ' if r['cleaner'] else 'off'}: "
                  f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, max {r['max_ms']} ms "
                  f"(partition {r['partition_bytes_before'] / MB:.1f} -> "
                  f"{r['partition_bytes_after'] / MB:.1f} MB, {r['cleaner_log_lines']} cleaner "
                  f"log lines, broker CPU {r['broker_cpu_s']} s)")


if __name__ == "__main__":
    main()
