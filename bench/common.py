"""Shared pieces for the end-to-end benchmarks: a broker subprocess, /proc readings, py-spy.

* :class:`BrokerProcess` runs ``python -m snakka serve`` with a temporary data directory and an
  ephemeral port, and times start-up: process spawn -> ``SNAKKA_READY`` line, and spawn -> first
  Metadata answer on a fresh TCP connection.
* :func:`proc_status_kb` / :func:`proc_cpu_seconds` read a process's memory (VmRSS, VmHWM) and
  CPU time (user+system) from /proc, so broker and client costs are reported separately.
* :class:`PySpy` records a process with ``py-spy record --format raw`` (collapsed stacks) for the
  duration of a ``with`` block; :func:`summarize_collapsed` turns that file into the top
  functions by self and by inclusive samples.

Every wait here has a deadline; every process started here is stopped in ``close``/``__exit__``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

READY_PREFIX = "SNAKKA_READY "
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")


def proc_status_kb(pid: int, field: str) -> int:
    """A ``kB`` field of /proc/<pid>/status (VmRSS, VmHWM, ...), or -1 if unavailable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def self_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def machine_info() -> dict:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_kb = -1
    try:
        with open("/proc/meminfo") as f:
            mem_kb = int(f.readline().split()[1])
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "mem_gb": round(mem_kb / 1024 / 1024, 1),
            "python": sys.version.split()[0]}


def metadata_roundtrip(host: str, port: int, timeout: float = 5.0) -> float:
    """Connect, send Metadata v1 (all topics), wait for the answer; returns seconds taken."""
    t0 = time.perf_counter()
    client_id = b"bench"
    body = struct.pack(">hhih", 3, 1, 1, len(client_id)) + client_id + struct.pack(">i", -1)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = recv_exactly(s, 4)
        recv_exactly(s, struct.unpack(">i", head)[0])
    return time.perf_counter() - t0


def recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


class ProcReadings:
    """/proc readings of a process whose id is ``self.pid``: resident memory now and at its
    peak, CPU seconds used."""

    pid: int

    def rss_kb(self) -> int:
        return proc_status_kb(self.pid, "VmRSS")

    def peak_rss_kb(self) -> int:
        return proc_status_kb(self.pid, "VmHWM")

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.pid)


class BrokerProcess(ProcReadings):
    """``python -m snakka serve`` in its own session, data in a temporary directory."""

    def __init__(self, config: dict[str, str] | None = None, *, log_level: str = "WARNING",
                 data_parent: str | None = None, data_dir: str | None = None) -> None:
        # ``data_dir``: an existing directory (a restart on the data of an earlier broker);
        # it is the caller's and is left in place by close(). Otherwise a fresh one, ours.
        self._owns_data = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="snakka-bench-", dir=data_parent)
        self.config = {"listeners": "PLAINTEXT://localhost:0", **(config or {})}
        self.log_level = log_level
        self.proc: subprocess.Popen | None = None
        self.port = -1
        self.output: list[str] = []
        self.ready_s = -1.0      # spawn -> SNAKKA_READY line
        self.metadata_s = -1.0   # spawn -> first Metadata answer (connection made after READY)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def bootstrap(self) -> str:
        return f"localhost:{self.port}"

    def start(self) -> BrokerProcess:
        cmd = [sys.executable, "-m", "snakka", "serve", "--ready-line", "--log-level",
               self.log_level, "--data-dir", self.data_dir]
        for k, v in self.config.items():
            cmd += ["-o", f"{k}={v}"]
        ready = threading.Event()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1, start_new_session=True)
        proc = self.proc

        def drain() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(READY_PREFIX) and not ready.is_set():
                    self.ready_s = time.perf_counter() - t0
                    self.port = int(dict(kv.split("=", 1) for kv in
                                         line[len(READY_PREFIX):].split())["port"])
                    ready.set()
                else:
                    self.output.append(line.rstrip("\n"))
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(START_TIMEOUT_S) or self.port < 0:
            self.close()
            raise RuntimeError("broker did not start:\n" + "\n".join(self.output[-30:]))
        metadata_roundtrip("127.0.0.1", self.port)
        self.metadata_s = time.perf_counter() - t0
        return self

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(STOP_TIMEOUT_S)
        if self._owns_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class PySpy:
    """``py-spy record`` of ``pid`` while the ``with`` block runs (SIGINT ends the recording).

    ``--format raw`` writes collapsed stacks ("frame;frame;frame count" lines), the input of
    :func:`summarize_collapsed` and of flamegraph tools.
    """

    def __init__(self, pid: int, out: Path, rate: int = 250, native: bool = False) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.cmd = [exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                    "--output", str(out), "--nonblocking"]
        if native:
            self.cmd.append("--native")
        self.out = out
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> PySpy:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        # py-spy prints a line once it is sampling; wait for it (bounded) so nothing is missed.
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 10
        done = threading.Event()

        def first_line() -> None:
            self.proc.stdout.readline()  # type: ignore[union-attr]
            done.set()

        threading.Thread(target=first_line, daemon=True).start()
        done.wait(max(0.0, deadline - time.monotonic()))
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def consume_assigned(bootstrap: str, topic: str, partitions: int, records: int,
                     timeout_s: float = 600) -> tuple[int, float]:
    """Read ``records`` from partitions 0..``partitions``-1 of ``topic`` from offset 0 with one
    confluent-kafka consumer (assign(), no group join): (records read, seconds from assign)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-assigned",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
        got = 0
        t0 = time.perf_counter()
        deadline = t0 + timeout_s
        while got < records and time.perf_counter() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error() is None:
                    got += 1
        return got, time.perf_counter() - t0
    finally:
        c.close()


def summarize_collapsed(path: Path, top: int = 25) -> dict:
    """Top functions of a collapsed-stack file: by self samples and by inclusive samples.

    A frame looks like ``function (path/to/file.py:line)``; self time is charged to the leaf
    frame, inclusive time once per stack to every distinct function on it. Idle samples (the
    event loop waiting in select/epoll) are reported apart.
    """
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ")
                  and not f.startswith("thread ")]
        if not frames:
            continue
        total += count
        self_c[frames[-1]] += count
        for f in set(_func(fr) for fr in frames):
            incl[f] += count

    def pct(c: int) -> float:
        return round(100.0 * c / total, 1) if total else 0.0

    return {"samples": total,
            "self": [(f, c, pct(c)) for f, c in self_c.most_common(top)],
            "inclusive": [(f, c, pct(c)) for f, c in incl.most_common(top)]}


def _func(frame: str) -> str:
    """``fn (file.py:123)`` -> ``fn (file.py)``: inclusive time per function, not per line."""
    name, _, loc = frame.partition(" (")
    file = loc.rsplit(":", 1)[0] if ":" in loc else loc.rstrip(")")
    return f"{name} ({file.rstrip(')')})"


# -- output shared by the benchmark scripts ----------------------------------------------------
def emit(obj: dict, out=None) -> None:
    """Print one JSON result line (and append it to ``out``, a --json-out file, if given)."""
    line = json.dumps(obj)
    print(line, flush=True)
    if out is not None:
        out.write(line + "\n")
        out.flush()


def round_order(sides: Sequence[T], round_no: int) -> list[T]:
    """The order of the sides in 1-based round ``round_no``: A B, B A, A B, ... so a load that
    drifts during a run favours neither side (bench/compare.py, bench/compare_kafka.py)."""
    return list(sides) if round_no % 2 else list(reversed(sides))


def percentile(sorted_vals: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted values, nearest rank; NaN when empty."""
    if not sorted_vals:
        return float("nan")
    return sorted_vals[min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))]
