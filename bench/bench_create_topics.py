"""Creating one topic of many partitions (docs/benchmarks.md "Creating 10,000 partitions"):
snakka, an older snakka source tree, and the reference Kafka 4.0, alternated in one run.

    .venv/bin/python bench/bench_create_topics.py                         # 1,000 and 9,999
    .venv/bin/python bench/bench_create_topics.py --partitions 1000 --runs 3
    .venv/bin/python bench/bench_create_topics.py --before /tmp/main-src  # A/B: A B B A ...
    .venv/bin/python bench/bench_create_topics.py --kafka                 # + the reference Kafka
    .venv/bin/python bench/bench_create_topics.py --strace --partitions 1000 --runs 1

Each measurement starts a fresh broker (a subprocess on a fresh data directory), then one
confluent-kafka AdminClient ``create_topics`` of one topic and waits for its result, for
Metadata to show a leader for every partition and for every partition directory to hold its
partition.metadata (Kafka answers before its broker has made the logs). Both brokers refuse one
topic of 10,000 partitions (10,001 records: POLICY_VIOLATION "Unable to perform excessively
large batch operation", Kafka's controller cap of 10,000 records per operation, which snakka
follows): 9,999 is the largest. Reported: wall seconds (sensitive to the machine's load), the
broker's CPU seconds
for the creation (/proc, all threads: far less sensitive), and what one partition directory
holds afterwards (file names and sizes). ``--strace`` attaches ``strace -f -c`` to the broker
for the creation and reports the calls per partition of the file-system syscalls (strace
slows the broker several-fold: its wall and CPU numbers are then not the creation's).
``--before DIR`` runs a second snakka from DIR (a tree with ``src/snakka``, e.g.
``git archive main src | tar -x -C DIR``) through PYTHONPATH, alternating with this one.
Prints one JSON line per measurement and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import BrokerProcess, proc_cpu_seconds  # noqa: E402
from compare_kafka import SNAKKA_CONFIG  # noqa: E402

TOPIC = "wide"
# The data directories of the measurements so far, removed at the end, not between
# measurements: ext4 skips inodes freed in the last few seconds when it allocates one, so
# removing a broker's 10,000 directories right before the next creation makes that creation's
# inode allocation (nearly all of its CPU) several times slower (docs/benchmarks.md).
_DATA_DIRS: list[str] = []
# The file-system syscalls counted per partition under --strace.
FS_CALLS = ("openat", "open", "mkdir", "mkdirat", "rename", "renameat", "renameat2", "fsync",
            "fdatasync", "unlink", "unlinkat", "stat", "newfstatat", "statx", "fstat", "lstat",
            "write", "pwrite64", "close", "getdents64", "ftruncate", "fallocate", "mmap",
            "munmap")


class _Strace:
    """``strace -f -c`` attached to ``pid`` while the ``with`` block runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.out = tempfile.mktemp(prefix="strace-", suffix=".txt")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> _Strace:
        # Every thread: -f alone follows only threads started after attaching.
        tids = [a for t in os.listdir(f"/proc/{self.pid}/task") for a in ("-p", t)]
        self.proc = subprocess.Popen(["strace", "-f", "-c", "-o", self.out, *tids],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        self.proc.stderr.readline()  # "strace: Process N attached": it is tracing
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(120)

    def counts(self) -> dict[str, int]:
        calls: dict[str, int] = {}
        with open(self.out) as f:
            for line in f:
                parts = line.split()
                # "% time  seconds  usecs/call  calls  [errors]  syscall"
                if len(parts) >= 5 and parts[-1] in FS_CALLS and parts[3].isdigit():
                    calls[parts[-1]] = int(parts[3])
        os.unlink(self.out)
        return calls


def _partition_files(log_dir: str) -> dict[str, int]:
    d = Path(log_dir) / f"{TOPIC}-0"
    return {p.name: p.stat().st_size for p in sorted(d.iterdir())} if d.is_dir() else {}


def _wait_for_dirs(log_dir: str, partitions: int, timeout: float = 1800) -> None:
    """Until every partition directory holds its partition.metadata: Kafka's broker creates
    the logs after its controller has answered (and after Metadata shows the leaders)."""
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(os.path.join(log_dir, f"{TOPIC}-{p}", "partition.metadata"))
                  for p in range(partitions)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"partition directories incomplete after {timeout} s")
        time.sleep(0.05)


def _create(bootstrap: str, log_dir: str, partitions: int, timeout: float = 1800) -> None:
    """One CreateTopics, its answer awaited however long it takes (librdkafka's
    socket.timeout.ms, 60 s by default, would cut a slow answer on a loaded machine short;
    raised to its maximum, 300 s),
    then a leader for every partition in Metadata and every directory made."""
    from confluent_kafka.admin import AdminClient, NewTopic

    # librdkafka's upper bound for socket.timeout.ms: 300 s.
    admin = AdminClient({"bootstrap.servers": bootstrap,
                         "socket.timeout.ms": min(int(timeout * 1000), 300_000)})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)], operation_timeout=timeout,
                        request_timeout=timeout)[TOPIC].result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        t = admin.list_topics(TOPIC, timeout=timeout).topics.get(TOPIC)
        if (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values())):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"partitions without a leader after {timeout} s")
        time.sleep(0.05)
    _wait_for_dirs(log_dir, partitions)


def _user_sys(pid: int) -> tuple[float, float]:
    """utime, stime of a process (all its threads), in seconds: file creation is kernel
    time, which the machine's other I/O makes vary far more than user time."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck


def _measure(pid: int, bootstrap: str, log_dir: str, partitions: int,
             strace: bool) -> dict:
    cpu0 = proc_cpu_seconds(pid)
    user0, sys0 = _user_sys(pid)
    t0 = time.perf_counter()
    calls: dict[str, int] = {}
    if strace:
        with _Strace(pid) as st:
            _create(bootstrap, log_dir, partitions)
        calls = st.counts()
    else:
        _create(bootstrap, log_dir, partitions)
    wall = time.perf_counter() - t0
    cpu = proc_cpu_seconds(pid) - cpu0
    user1, sys1 = _user_sys(pid)
    out = {"partitions": partitions, "wall_s": round(wall, 2), "broker_cpu_s": round(cpu, 2),
           "user_s": round(user1 - user0, 2), "sys_s": round(sys1 - sys0, 2),
           "cpu_ms_per_partition": round(cpu * 1000 / partitions, 3),
           "partition_dir": _partition_files(log_dir)}
    if calls:
        out["syscalls_per_partition"] = {k: round(v / partitions, 2)
                                         for k, v in sorted(calls.items())}
    return out


def run_snakka(partitions: int, strace: bool, src: str | None) -> dict:
    old = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = str(Path(src) / "src")
    try:
        data_dir = tempfile.mkdtemp(prefix="snakka-bench-create-")
        _DATA_DIRS.append(data_dir)
        bp = BrokerProcess(dict(SNAKKA_CONFIG), data_dir=data_dir).start()
    finally:
        if src is not None:
            if old is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = old
    try:
        r = _measure(bp.pid, bp.bootstrap, bp.data_dir, partitions, strace)
    finally:
        bp.close()
    return {"broker": "snakka" if src is None else f"snakka@{src}", **r}


def run_kafka(partitions: int, strace: bool) -> dict:
    from reference_kafka import KAFKA_REF_SH, ReferenceKafka, skip_reason

    why = skip_reason()
    if why:
        return {"broker": "kafka", "skipped": why}
    class _KeptKafka(ReferenceKafka):
        def stop(self) -> None:  # as ReferenceKafka's, but the directory is removed at the end
            subprocess.run(["bash", str(KAFKA_REF_SH), "stop"], env=self._env(),
                           capture_output=True, text=True, timeout=120)
            _DATA_DIRS.append(self.dir)

    k = _KeptKafka().start()
    try:
        pid = int((Path(k.dir) / "kafka.pid").read_text())
        r = _measure(pid, k.bootstrap_servers, str(Path(k.dir) / "kraft-logs"), partitions,
                     strace)
    finally:
        k.stop()
    return {"broker": "kafka", **r}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # 9,999: the largest topic one CreateTopics may make (Kafka's 10,000 records per operation)
    ap.add_argument("--partitions", default="1000,9999",
                    help="comma-separated partition counts (default 1000,9999)")
    ap.add_argument("--runs", type=int, default=1, help="rounds per partition count")
    ap.add_argument("--before", metavar="DIR", help="also run snakka from DIR/src (A B B A)")
    ap.add_argument("--kafka", action="store_true", help="also run the reference Kafka 4.0")
    ap.add_argument("--kafka-only", action="store_true", help="only the reference Kafka 4.0")
    ap.add_argument("--strace", action="store_true", help="count syscalls (slows the broker)")
    args = ap.parse_args()
    print(json.dumps({"loadavg": os.getloadavg(), "cpus": os.cpu_count()}), flush=True)
    try:
        _run(args)
    finally:
        for d in _DATA_DIRS:
            shutil.rmtree(d, ignore_errors=True)


def _run(args: argparse.Namespace) -> None:
    for n in (int(x) for x in args.partitions.split(",")):
        for i in range(args.runs):
            order: list[str | None] = [] if args.kafka_only else [None]
            if args.before and not args.kafka_only:
                order = [None, args.before] if i % 2 == 0 else [args.before, None]
            for src in order:
                r = run_snakka(n, args.strace, src)
                print(json.dumps({**r, "loadavg_1m": round(os.getloadavg()[0], 1)}),
                      flush=True)
            if args.kafka or args.kafka_only:
                r = run_kafka(n, args.strace)
                print(json.dumps({**r, "loadavg_1m": round(os.getloadavg()[0], 1)}),
                      flush=True)


if __name__ == "__main__":
    main()
