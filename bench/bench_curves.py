"""Cost curves (issue 15): how snakka's costs grow with partitions, connections, group members
and share consumers. Quick by design (a few minutes); snakka alone; plots with matplotlib.

    .venv/bin/pip install -e '.[bench]'                       # matplotlib
    .venv/bin/python bench/bench_curves.py                    # every curve, then the PNGs
    .venv/bin/python bench/bench_curves.py --curves partitions,connections --json-out c.jsonl
    .venv/bin/python bench/bench_curves.py --plot-only c.jsonl   # redraw from saved results

Curves (``--curves``):

* ``partitions`` (``--partitions`` 10,100,1000,10000 in one topic), a fresh broker each: idle
  RSS 2 s after creating the topic; produce ``--records`` x 100 B with one confluent-kafka
  producer (acks=1, linger.ms=5, no key: librdkafka's sticky partitioner walks the
  partitions) -> rec/s and the p99 of the produce -> delivery-report time (Message.latency(),
  so at saturation: queueing included); consume them all with one consumer assigned every
  partition -> rec/s; then stop and start on the same data: spawn -> first Metadata answer
  (``BrokerProcess.metadata_s``) and the RSS after it.
* ``connections`` (``--connections`` 10,100,1000,5000, cumulative, one broker): open the
  connections one after another (``connect_s``), then each sends one ApiVersions and all
  answers are awaited together (``answer_s``; accept time ``accept_s`` = the whole batch),
  with the broker's CPU seconds for the batch and how many connection attempts the kernel
  dropped because a listen backlog was full meanwhile (``listen_overflows``: TcpExt
  ListenOverflows of /proc/net/netstat, machine-wide; each such attempt costs its client a 1 s
  SYN retransmission); then the broker's RSS, and the p99 of 100 Metadata round trips (each on
  a new connection, as common.metadata_roundtrip does) while all of them stay open and idle.
  The broker's ``max.connections`` is 10,000 by default; this process's fd limit (``ulimit
  -n``) must exceed the largest count.
* ``members``: bench/bench_groups.py's classic rebalance (``cold_s``: N librdkafka consumers in
  one process, range, heartbeat 100 ms) for ``--members`` 1,10,100,500.
* ``share``: bench/bench_share.py with confluent-kafka ShareConsumers, ``--share-consumers``
  1,4,16,64 processes (``--quick``: 20,000 records).

The machine is shared: every result line carries the 1-minute load average when it was taken.
Output: JSON lines (``--json-out``), then PNGs in ``--png-dir`` (docs/benchmarks/).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from common import (  # noqa: E402
    BrokerProcess,
    consume_assigned,
    emit,
    machine_info,
    metadata_roundtrip,
    percentile,
    recv_exactly,
)

MiB = 1024 * 1024
TOPIC = "curve"
VALUE = b"x" * 100


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def create_topic(bootstrap: str, partitions: int) -> None:
    # bench_fetch_partitions' version: librdkafka's socket.timeout.ms raised to its 300 s
    # maximum (creating 10,000 partitions took 84-90 s at load 13-15, past the 60 s default).
    from bench_fetch_partitions import create_topic as create

    create(bootstrap, partitions, TOPIC)


# -- partitions -----------------------------------------------------------------------------
def curve_partitions(counts: list[int], records: int, out: Any) -> None:
    from confluent_kafka import Producer

    for n in counts:
        data = tempfile.mkdtemp(prefix="snakka-curve-")
        b = BrokerProcess(data_dir=data).start()
        try:
            t0 = time.perf_counter()
            create_topic(b.bootstrap, n)
            create_s = time.perf_counter() - t0
            time.sleep(2)
            idle_rss = b.rss_kb()
            lat: list[float] = []

            def dr(err: Any, msg: Any, lat: list[float] = lat) -> None:
                if err is None:
                    lat.append(msg.latency())

            p = Producer({"bootstrap.servers": b.bootstrap, "acks": 1, "linger.ms": 5,
                          "queue.buffering.max.messages": 1_000_000})
            t0 = time.perf_counter()
            for _ in range(records):
                while True:
                    try:
                        p.produce(TOPIC, VALUE, on_delivery=dr)
                        break
                    except BufferError:
                        p.poll(0.01)
                p.poll(0)
            p.flush(300)
            produce_s = time.perf_counter() - t0
            del p
            got, consume_s = consume_assigned(b.bootstrap, TOPIC, n, records)
            lat.sort()
            peak = b.peak_rss_kb()
            b.close()
            b = BrokerProcess(data_dir=data).start()
            time.sleep(1)
            emit({"type": "curve", "curve": "partitions", "x": n, "create_s": round(create_s, 3),
                  "idle_rss_mib": round(idle_rss / 1024, 1), "peak_rss_mib": round(peak / 1024, 1),
                  "produce_rec_s": round(records / produce_s),
                  "produce_p99_ms": round(percentile(lat, 0.99) * 1000, 1),
                  "consume_rec_s": round(got / consume_s), "consumed": got,
                  "start_s": round(b.metadata_s, 3),
                  "restart_rss_mib": round(b.rss_kb() / 1024, 1), "load1": load1()}, out)
        finally:
            b.close()
            import shutil

            shutil.rmtree(data, ignore_errors=True)


# -- connections ----------------------------------------------------------------------------
def _api_versions() -> bytes:
    client_id = b"curve"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def _recv_frame(s: socket.socket) -> None:
    recv_exactly(s, struct.unpack(">i", recv_exactly(s, 4))[0])


def listen_overflows() -> int | None:
    """Connection attempts dropped by full listen backlogs so far, machine-wide (Linux)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            if "ListenOverflows" in row:
                return int(row["ListenOverflows"])
    return None


def curve_connections(counts: list[int], out: Any) -> None:
    import selectors

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(counts) + 200
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    socks: list[socket.socket] = []
    with BrokerProcess() as b:
        base_rss = b.rss_kb()
        for n in counts:
            overflows0, cpu0 = listen_overflows(), b.cpu_seconds()
            t0 = time.perf_counter()
            new: list[socket.socket] = []
            while len(socks) + len(new) < n:
                s = socket.create_connection(("127.0.0.1", b.port), timeout=30)
                new.append(s)
            connect_s = time.perf_counter() - t0
            req = _api_versions()
            for s in new:
                s.sendall(req)
            sel = selectors.DefaultSelector()
            for s in new:
                sel.register(s, selectors.EVENT_READ)
            waiting = len(new)
            while waiting:
                for key, _ in sel.select(30):
                    sel.unregister(key.fileobj)
                    _recv_frame(key.fileobj)  # type: ignore[arg-type]
                    waiting -= 1
            sel.close()
            accept_s = time.perf_counter() - t0
            cpu_s = b.cpu_seconds() - cpu0
            overflows1 = listen_overflows()
            socks += new
            time.sleep(1)
            md = sorted(metadata_roundtrip("127.0.0.1", b.port) for _ in range(100))
            emit({"type": "curve", "curve": "connections", "x": n,
                  "accept_s": round(accept_s, 3), "connect_s": round(connect_s, 3),
                  "answer_s": round(accept_s - connect_s, 3),
                  "broker_cpu_s": round(cpu_s, 3),
                  "listen_overflows": None if overflows0 is None or overflows1 is None
                  else overflows1 - overflows0,
                  "rss_mib": round(b.rss_kb() / 1024, 1),
                  "base_rss_mib": round(base_rss / 1024, 1),
                  "metadata_p50_ms": round(percentile(md, 0.5) * 1000, 2),
                  "metadata_p99_ms": round(percentile(md, 0.99) * 1000, 2),
                  "load1": load1()}, out)
        for s in socks:
            s.close()


# -- members and share consumers: the existing benchmarks ------------------------------------
def run_child(script: str, args: list[str], out: Any, curve: str,
              convert: Any) -> None:
    """Run another bench script and turn its JSON result lines (stdout) into curve points."""
    cmd = [sys.executable, str(HERE / script), *args]
    print("#", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=1800)
    for line in r.stdout.splitlines():
        if not line.startswith("{"):
            continue
        row = convert(json.loads(line))
        if row is not None:
            emit({"type": "curve", "curve": curve, **row, "load1": load1()}, out)


def curve_members(counts: list[int], out: Any) -> None:
    def convert(d: dict[str, Any]) -> dict[str, Any] | None:
        if d.get("type") != "rebalance":
            return None
        return {"x": d["members"], "cold_s": d.get("cold_s"),
                "cold_from_first_s": d.get("cold_from_first_s"), "join_s": d.get("join_s"),
                "peak_rss_mib": d.get("broker_peak_rss_mb")}

    run_child("bench_groups.py", ["--members", ",".join(map(str, counts)), "--protocols",
                                  "classic", "--repeat", "1", "--skip-commit"], out, "members",
              convert)


def curve_share(counts: list[int], records: int, out: Any) -> None:
    def convert(d: dict[str, Any]) -> dict[str, Any] | None:
        if d.get("type") != "run":
            return None
        return {"x": d["consumers"], "rec_s": d["records_per_s"],
                "steady_rec_s": d["steady_records_per_s"], "elapsed_s": d["elapsed_s"],
                "broker_cpu_s": d["broker_cpu_s"]}

    run_child("bench_share.py", ["--clients", "confluent", "--consumers",
                                 ",".join(map(str, counts)), "--records", str(records)],
              out, "share", convert)


# -- plots ----------------------------------------------------------------------------------
PLOTS: dict[str, list[tuple[str, str]]] = {
    "partitions": [("produce_rec_s", "produce rec/s"), ("consume_rec_s", "consume rec/s"),
                   ("produce_p99_ms", "produce p99 ms"), ("idle_rss_mib", "idle RSS MiB"),
                   ("start_s", "start -> Metadata s")],
    "connections": [("accept_s", "accept + ApiVersions, whole batch s"),
                    ("rss_mib", "RSS MiB"), ("metadata_p99_ms", "Metadata p99 ms")],
    "members": [("cold_s", "all N joined s"), ("join_s", "one more joins s"),
                ("peak_rss_mib", "peak RSS MiB")],
    "share": [("rec_s", "records/s acknowledged"), ("steady_rec_s", "steady records/s")],
}


def plot(rows: list[dict[str, Any]], png_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    png_dir.mkdir(parents=True, exist_ok=True)
    made = []
    for curve, metrics in PLOTS.items():
        pts = sorted((r for r in rows if r.get("curve") == curve and r.get("x")),
                     key=lambda r: r["x"])
        metrics = [(k, lbl) for k, lbl in metrics if any(r.get(k) is not None for r in pts)]
        if not pts or not metrics:
            continue
        fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 3.0),
                                 squeeze=False)
        for ax, (key, label) in zip(axes[0], metrics, strict=True):
            xs = [r["x"] for r in pts if r.get(key) is not None]
            ys = [r[key] for r in pts if r.get(key) is not None]
            ax.plot(xs, ys, marker="o")
            ax.set_xscale("log")
            ax.set_ylim(bottom=0)
            ax.set_title(label, fontsize=9)
            ax.set_xlabel(curve, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, alpha=0.3)
        loads = [r["load1"] for r in pts if "load1" in r]
        fig.suptitle(f"snakka: cost vs {curve} (load avg {min(loads):.1f}-{max(loads):.1f} "
                     f"on {os.cpu_count()} cores)", fontsize=10)
        fig.tight_layout()
        path = png_dir / f"curve-{curve}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(path)
    return made


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--curves", default="partitions,connections,members,share")
    ap.add_argument("--partitions", type=ints, default=[10, 100, 1000, 10000])
    ap.add_argument("--records", type=int, default=200_000, help="partitions curve")
    ap.add_argument("--connections", type=ints, default=[10, 100, 1000, 5000])
    ap.add_argument("--members", type=ints, default=[1, 10, 100, 500])
    ap.add_argument("--share-consumers", type=ints, default=[1, 4, 16, 64])
    ap.add_argument("--share-records", type=int, default=20_000)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--png-dir", type=Path, default=ROOT / "docs" / "benchmarks")
    ap.add_argument("--plot-only", type=Path, metavar="JSONL")
    args = ap.parse_args()
    if args.plot_only:
        rows = [json.loads(line) for line in args.plot_only.read_text().splitlines() if line]
        print("\n".join(map(str, plot([r for r in rows if r.get("type") == "curve"],
                                      args.png_dir))))
        return
    out = open(args.json_out, "a") if args.json_out else None
    rows: list[dict[str, Any]] = []

    class Tee:
        def write(self, line: str) -> None:
            rows.append(json.loads(line))
            if out:
                out.write(line)

        def flush(self) -> None:
            if out:
                out.flush()

    tee = Tee()
    emit({"type": "curves-header", **machine_info(), "load": os.getloadavg(),
          "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)}, tee)
    curves = args.curves.split(",")
    if "partitions" in curves:
        curve_partitions(args.partitions, args.records, tee)
    if "connections" in curves:
        curve_connections(args.connections, tee)
    if "members" in curves:
        curve_members(args.members, tee)
    if "share" in curves:
        curve_share(args.share_consumers, args.share_records, tee)
    for p in plot([r for r in rows if r.get("type") == "curve"], args.png_dir):
        print("#", p)
    if out:
        out.close()


if __name__ == "__main__":
    main()
