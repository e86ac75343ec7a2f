"""Storage-layer throughput: append N records in batches, then read them back.

    .venv/bin/python bench/bench_storage.py                  # 1M x 100 B records, ~1 MB batches
    .venv/bin/python bench/bench_storage.py --batch-bytes 16384 --records 1000000
    .venv/bin/python bench/bench_storage.py --profile append  # cProfile of the append loop

What is measured (one process, no network, page cache warm):
  append: bytearray copy of a pre-built batch (what the network layer hands over),
          UnifiedLog.validate (header checks + CRC32C), UnifiedLog.append
          (offset assignment, pwrite, sparse index updates), segment rolls at 1 GiB;
  flush:  one fsync of everything appended (reported separately);
  read:   a sequential consumer: UnifiedLog.read(offset, max_bytes) and a walk of the
          returned batch headers to find the next offset (what a client does; per batch,
          not per record).

Prints one JSON object per phase (machine-readable) and a human summary.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from snakka.records import Record, build_batch  # noqa: E402
from snakka.storage import LogConfig, UnifiedLog  # noqa: E402

_PREFIX = struct.Struct(">qi11xi")


def make_template(record_bytes: int, batch_bytes: int) -> tuple[bytes, int]:
    """One uncompressed batch of ~batch_bytes made of ~record_bytes-sized records."""
    # A record with a V-byte value and no key/headers encodes to V + ~8 bytes.
    value = b"x" * max(1, record_bytes - 8)
    n = max(1, batch_bytes // record_bytes)
    now = int(time.time() * 1000)
    records = [Record(timestamp=now + i % 7, value=value) for i in range(n)]
    return build_batch(records), n


def bench_append(plog: UnifiedLog, template: bytes, n_batches: int) -> float:
    validate = plog.validate
    append = plog.append
    t0 = time.perf_counter()
    for _ in range(n_batches):
        buf = bytearray(template)
        append(buf, validate(buf))
    return time.perf_counter() - t0


def bench_read(plog: UnifiedLog, max_bytes: int) -> tuple[float, int, int]:
    offset = plog.log_start_offset
    end = plog.log_end_offset
    read = plog.read
    unpack = _PREFIX.unpack_from
    total_bytes = 0
    fetches = 0
    t0 = time.perf_counter()
    while offset < end:
        data = read(offset, max_bytes)
        fetches += 1
        n = len(data)
        total_bytes += n
        pos = 0
        while pos + 27 <= n:  # walk batch headers (per batch, as a client does)
            base, length, lod = unpack(data, pos)
            offset = base + lod + 1
            pos += length + 12
    return time.perf_counter() - t0, total_bytes, fetches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--batch-bytes", type=int, default=1_000_000)
    ap.add_argument("--fetch-bytes", type=int, default=1_048_576, help="max bytes per read")
    ap.add_argument("--dir", default=None, help="where to put the log (default: a temp dir)")
    ap.add_argument("--profile", choices=["append", "read"], default=None)
    args = ap.parse_args()

    template, per_batch = make_template(args.record_bytes, args.batch_bytes)
    n_batches = max(1, args.records // per_batch)
    n_records = n_batches * per_batch
    base = tempfile.mkdtemp(prefix="snakka-bench-", dir=args.dir)
    try:
        plog = UnifiedLog(os.path.join(base, "bench-0"), LogConfig(), recover=False)
        if args.profile == "append":
            prof = cProfile.Profile()
            prof.enable()
        t_append = bench_append(plog, template, n_batches)
        if args.profile == "append":
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
        t0 = time.perf_counter()
        plog.flush()
        t_flush = time.perf_counter() - t0
        total = plog.size_bytes

        if args.profile == "read":
            prof = cProfile.Profile()
            prof.enable()
        t_read, read_bytes, fetches = bench_read(plog, args.fetch_bytes)
        if args.profile == "read":
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
        assert read_bytes == total, (read_bytes, total)
        plog.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)

    mb = total / 1e6
    results = [
        {
            "bench": "storage.append",
            "records": n_records,
            "batches": n_batches,
            "batch_bytes": len(template),
            "seconds": round(t_append, 4),
            "records_per_s": round(n_records / t_append),
            "mb_per_s": round(mb / t_append, 1),
            "us_per_batch": round(t_append / n_batches * 1e6, 2),
        },
        {"bench": "storage.flush", "bytes": total, "seconds": round(t_flush, 4)},
        {
            "bench": "storage.read",
            "records": n_records,
            "fetches": fetches,
            "fetch_bytes": args.fetch_bytes,
            "seconds": round(t_read, 4),
            "records_per_s": round(n_records / t_read),
            "mb_per_s": round(mb / t_read, 1),
            "us_per_fetch": round(t_read / fetches * 1e6, 2),
        },
    ]
    for r in results:
        print(json.dumps(r))
    a, _f, r = results
    print(
        f"# append {a['records_per_s']:,} rec/s {a['mb_per_s']} MB/s "
        f"({a['us_per_batch']} us/batch of {a['batch_bytes']} B); "
        f"read {r['records_per_s']:,} rec/s {r['mb_per_s']} MB/s ({r['us_per_fetch']} us/fetch)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
