"""Micro-benchmark of the share-partition core alone (``snakka.share.partition``), no broker.

    .venv/bin/python bench/bench_share_core.py                 # default cases, 3 repetitions
    .venv/bin/python bench/bench_share_core.py --seconds 1 --repeat 1

Cases (each prints one JSON line; ``records_per_s`` counts records acquired *and* acknowledged):

* ``accept``: one member, a loop of ``acquire`` (max 500 records from 16-record log batches,
  BATCH_OPTIMIZED) + ``acknowledge`` (one ACCEPT range for everything acquired). The core's
  hot path when a consumer keeps up.
* ``accept_4members``: four members take turns, each acknowledging the *previous* member's
  acquisition one round later, so the window holds several owners' runs at once.
* ``per_offset``: like ``accept`` but every acknowledgement carries one type per record,
  alternating runs of 50 ACCEPT and 1 RELEASE (released records are re-acquired later): the
  fragmented-window worst case a client with per-record acks produces.
* ``shell_calls``: ``accept`` plus what the I/O shell does after every call into the core:
  ``drain_delta()`` (persisted), ``take_wakeup()`` and ``next_deadline()`` (timer re-arm).

A fake clock that advances 1 ms per call stands in for time; locks never expire (30 s).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import uuid

from snakka.protocol.share import AckBatch, AcquireMode
from snakka.share.partition import SharePartition
from snakka.share.types import FetchedBatch, SharePartitionConfig, SharePartitionState

BATCH = 16
MAX_RECORDS = 500


def _log_batches(start: int, n_records: int) -> list[FetchedBatch]:
    base = start - start % BATCH
    out = []
    while base < start + n_records:
        out.append(FetchedBatch(base, base + BATCH - 1))
        base += BATCH
    return out


def _partition() -> tuple[SharePartition, list[int]]:
    now = [0]

    def clock() -> int:
        now[0] += 1
        return now[0]

    sp = SharePartition("bench", uuid.uuid4(), 0, SharePartitionConfig(), clock, SharePartitionState(0))
    return sp, now


def run_accept(seconds: float, shell: bool = False) -> dict:
    sp, _ = _partition()
    done = 0
    ops = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for _ in range(50):
            nfo = sp.next_fetch_offset()
            got = sp.acquire("m1", _log_batches(nfo, MAX_RECORDS + BATCH), max_records=MAX_RECORDS,
                             batch_size=MAX_RECORDS, mode=AcquireMode.BATCH_OPTIMIZED)
            if shell:
                sp.drain_delta()
                sp.take_wakeup()
                sp.next_deadline()
            acks = [AckBatch(r.first_offset, r.last_offset, (1,)) for r in got]
            assert sp.acknowledge("m1", acks) == 0
            if shell:
                sp.drain_delta()
                sp.take_wakeup()
                sp.next_deadline()
            done += sum(r.last_offset - r.first_offset + 1 for r in got)
            ops += 1
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t0
    assert len(sp._heap) <= 2 * len(sp._locks) + 65  # stale lock entries do not pile up
    return {"records": done, "rounds": ops, "seconds": round(elapsed, 3),
            "records_per_s": round(done / elapsed)}


def run_members(seconds: float, members: int = 4) -> dict:
    sp, _ = _partition()
    names = [f"m{i}" for i in range(members)]
    pending: list[tuple[str, list]] = []
    done = 0
    ops = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for k in range(50):
            m = names[(ops + k) % members]
            nfo = sp.next_fetch_offset()
            got = sp.acquire(m, _log_batches(nfo, MAX_RECORDS + BATCH), max_records=MAX_RECORDS,
                             batch_size=MAX_RECORDS, mode=AcquireMode.BATCH_OPTIMIZED)
            pending.append((m, got))
            if len(pending) > members - 1:
                owner, prev = pending.pop(0)
                acks = [AckBatch(r.first_offset, r.last_offset, (1,)) for r in prev]
                assert sp.acknowledge(owner, acks) == 0
                done += sum(r.last_offset - r.first_offset + 1 for r in prev)
        ops += 50
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t0
    return {"records": done, "rounds": ops, "seconds": round(elapsed, 3),
            "records_per_s": round(done / elapsed)}


def run_per_offset(seconds: float) -> dict:
    sp, _ = _partition()
    done = 0
    ops = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for _ in range(20):
            nfo = sp.next_fetch_offset()
            got = sp.acquire("m1", _log_batches(nfo, MAX_RECORDS + BATCH), max_records=MAX_RECORDS,
                             batch_size=MAX_RECORDS, mode=AcquireMode.BATCH_OPTIMIZED)
            acks = []
            for r in got:
                n = r.last_offset - r.first_offset + 1
                types = tuple(2 if (r.first_offset + i) % 51 == 50 else 1 for i in range(n))
                acks.append(AckBatch(r.first_offset, r.last_offset, types))
                done += n - types.count(2)
            assert sp.acknowledge("m1", acks) == 0
            ops += 1
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t0
    return {"records": done, "rounds": ops, "seconds": round(elapsed, 3),
            "records_per_s": round(done / elapsed)}


CASES = {
    "accept": lambda s: run_accept(s),
    "accept_4members": lambda s: run_members(s, 4),
    "per_offset": run_per_offset,
    "shell_calls": lambda s: run_accept(s, shell=True),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    for name in args.cases.split(","):
        runs = [CASES[name](args.seconds) for _ in range(args.repeat)]
        best = max(runs, key=lambda r: r["records_per_s"])
        print(json.dumps({"bench": "share_core", "case": name, "python": platform.python_version(),
                          "best_records_per_s": best["records_per_s"],
                          "all_records_per_s": [r["records_per_s"] for r in runs]}), flush=True)


if __name__ == "__main__":
    main()
