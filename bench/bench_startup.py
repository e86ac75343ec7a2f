"""Start-up and stop of a broker with many partitions (issue 15): the numbers of
compare_kafka.py's ``partitions`` workload, snakka alone, repeated on ONE data directory.

    .venv/bin/python bench/bench_startup.py                      # 8,000 partitions, 5 restarts
    .venv/bin/python bench/bench_startup.py --partitions 2000 --runs 3
    .venv/bin/python bench/bench_startup.py --data-dir /tmp/d8k  # keep/reuse the data
    .venv/bin/python bench/bench_startup.py --data-dir /tmp/d8k --py-spy prof/ --runs 1

Creates the topics (100 partitions each) through the broker once, then stops and starts it
``--runs`` times: stop = SIGTERM -> process exit (a clean shutdown), start = spawn -> a
Metadata (v1, all topics) answer, idle RSS read 2 s after the answer; also the broker's CPU
seconds for each (less sensitive to a loaded machine than wall time). Prints one JSON line
per restart and a median line. ``--py-spy DIR`` records the start (until the READY line is
printed and the Metadata answer is received) and the stop into DIR as collapsed stacks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BrokerProcess, machine_info, proc_cpu_seconds  # noqa: E402
from compare_kafka import SNAKKA_CONFIG, create_topics  # noqa: E402

PER_TOPIC = 100


def _stop(bp: BrokerProcess) -> tuple[float, float]:
    """SIGTERM -> exit: (wall seconds, CPU seconds the broker used in all, from wait4)."""
    proc = bp.proc
    assert proc is not None
    t0 = time.perf_counter()
    os.killpg(proc.pid, signal.SIGTERM)
    _pid, status, usage = os.wait4(proc.pid, 0)
    stop_s = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    bp.proc = None
    if proc.returncode != 0:
        print(f"# broker exited {proc.returncode}:\n" + "\n".join(bp.output[-20:]),
              file=sys.stderr)
    return stop_s, usage.ru_utime + usage.ru_stime


def _spy(pid: int, out: Path) -> subprocess.Popen:
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    return subprocess.Popen([spy, "record", "--rate", "250", "--format", "raw", "--pid",
                             str(pid), "-o", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=8000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--data-dir", help="reuse/keep this directory (created when missing)")
    ap.add_argument("--py-spy", metavar="DIR", help="profile the stops into DIR")
    args = ap.parse_args()
    data = args.data_dir or tempfile.mkdtemp(prefix="snakka-startup-")
    fresh = not os.path.exists(os.path.join(data, "meta.properties"))
    os.makedirs(data, exist_ok=True)
    print(json.dumps({"type": "machine", **machine_info()}), flush=True)
    bp = BrokerProcess(SNAKKA_CONFIG, data_dir=data).start()
    try:
        if fresh:
            topics = args.partitions // PER_TOPIC
            for lo in range(0, topics, 20):
                create_topics(bp.bootstrap, {f"p-{i:03d}": PER_TOPIC
                                             for i in range(lo, min(topics, lo + 20))})
        rows = []
        for run in range(args.runs):
            spy = None
            if args.py_spy:
                os.makedirs(args.py_spy, exist_ok=True)
                spy = _spy(bp.pid, Path(args.py_spy) / f"stop-{run}.txt")
                time.sleep(1.0)  # py-spy attaches
            cpu_before = proc_cpu_seconds(bp.pid)
            stop_s, cpu_total = _stop(bp)
            if spy is not None:
                spy.wait(30)
            bp = BrokerProcess(SNAKKA_CONFIG, data_dir=data).start()
            start_cpu = proc_cpu_seconds(bp.pid)
            time.sleep(2.0)
            row = {"type": "run", "partitions": args.partitions, "stop_s": round(stop_s, 3),
                   "ready_line_s": round(bp.ready_s, 3), "start_s": round(bp.metadata_s, 3),
                   "start_cpu_s": round(start_cpu, 3),
                   "stop_cpu_s": round(cpu_total - cpu_before, 3),
                   "idle_rss_mb": round(bp.rss_kb() / 1024, 1),
                   "load1": round(os.getloadavg()[0], 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        if rows:
            med = {k: statistics.median(r[k] for r in rows)
                   for k in ("stop_s", "stop_cpu_s", "ready_line_s", "start_s", "start_cpu_s",
                             "idle_rss_mb")}
            print(json.dumps({"type": "median", "runs": len(rows), **med}), flush=True)
    finally:
        bp.close()
        if not args.data_dir:
            shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
