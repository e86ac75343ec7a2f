"""snakka against the reference Apache Kafka 4.0, same machine, same run, same clients.

    .venv/bin/python bench/compare_kafka.py                              # every workload, 3 rounds
    .venv/bin/python bench/compare_kafka.py --quick                      # 10x fewer records, 1 round
    .venv/bin/python bench/compare_kafka.py --workloads ck-small,perf-tools --rounds 5
    .venv/bin/python bench/compare_kafka.py --json-out runs.jsonl --markdown-out table.md

Issue 15's goals are ratios snakka / Kafka; absolute numbers on a shared machine move by 2x from
run to run, so both brokers are measured in the same run, alternating: for every round and
workload each broker runs once on a FRESH broker (new data directory), in the order snakka
Kafka in odd rounds and Kafka snakka in even ones (``common.round_order``). The table gives
each broker's median and range over the rounds, the ratio of the medians, the p-value of the
rank-sum permutation test of bench/compare.py (3 rounds can never go below p = 0.1: it says how
separated the runs are, not more), the goal and pass/miss.

Brokers:

* snakka: ``python -m snakka serve`` (bench/common.py ``BrokerProcess``), data on the local disk,
  with ``group.initial.rebalance.delay.ms=0`` as the reference is configured;
* Kafka 4.0: ``../shared/kafka-reference/bin/kafka-ref.sh`` (tests/reference_kafka.py), single
  KRaft node (broker+controller in one JVM), heap ``--kafka-heap`` (default ``-Xmx1G -Xms1G``,
  kafka-server-start.sh's default), data in a fresh temporary directory on the same disk.
  Without the reference or ``java`` every Kafka run is skipped with the reason, and snakka runs
  alone (ratios "n/a").

Workloads (``--workloads``, comma list; the issue's table, row by row):

==============  ================================================================================
ck-small        confluent-kafka 1M x 100 B, acks=1: produce and consume rec/s (the producer and
                consumer of bench/bench_produce_consume.py, in this process), the broker's peak
                RSS (VmHWM) over the run, broker and client CPU per phase.
ck-large        confluent-kafka 10k x 100 KiB, acks=all: produce and consume MB/s.
raw-large       the same 10k x 100 KiB (confluent-kafka producer, acks=all), consumed by
                bench/raw_fetch.py: one connection, sequential Fetch v11 of 50 MiB, received
                with recv_into into one buffer, only headers parsed. A client that is not the
                bottleneck: it says what the broker serves when confluent-kafka's consume
                (ck-large) is not what limits (docs/benchmarks.md "Large consume").
large-procs     the same 10k x 100 KiB on 4 partitions (2,500 records each), consumed by
                --client-procs confluent-kafka consumer processes at once (the partitions
                spread over them; ck-large's consumer settings), aggregate MB/s = bytes / (go
                -> last record consumed): does more than one client process get more?
ptool-large     the same 10k x 100 KiB on one partition, consumed by kafka-consumer-perf-test.sh
                with --fetch-size 50 MiB (the Java consumer; rate = fetch.MB.sec, without the
                group join).
small-procs     ck-small's 1M x 100 B acks=1 on 4 partitions, produced by --client-procs
                confluent-kafka producer processes (ck-small's producer settings; each its
                partitions' share), then consumed by as many consumer processes (assign(),
                ck-small's consumer settings); aggregate rec/s = records / (go -> last process
                done), log end offsets checked; broker and client-process CPU per phase: does
                more than one client process get more (who limits ck-small)?
raw-small       1M x 100 B acks=1 on 4 partitions by bench/raw_produce.py: batches of
                librdkafka's size (batch.size 1,000,000 B: 9,082 records) encoded once with
                snakka's codecs and sent again and again (a non-idempotent producer: no sequence
                check), one connection per partition, 5 requests in flight; acknowledged rec/s,
                log end offsets checked; then read back by bench/raw_fetch.py, one connection
                and thread per partition (Fetch of 16 MiB): a client that is not the bottleneck.
perf-tools      kafka-producer-perf-test.sh 1M x 100 B unthrottled, acks=1 and acks=all (the
                tool's default producer settings), then kafka-consumer-perf-test.sh of the
                acks=1 topic (rate = fetch.nMsg.sec, i.e. without the group join).
ptool-procs     kafka-producer-perf-test.sh in --client-procs processes at once, each its share
                of 1M x 100 B to its own one-partition topic, acks=1 then acks=all; aggregate
                rec/s = records / (first tool's start of sending -> last tool's final line),
                each tool's start being (when its final line was read) - (its records / its
                own rec/s): the tools' own clocks, JVM start-up not counted.
latency         kafka-producer-perf-test.sh at a fixed --throughput 50000 (10 s, acks=all) and
                at half of Kafka's maximum (measured once, on Kafka, before the rounds: an
                unthrottled run of the same tool; ``--half-rate`` fixes it): p50/p99/p99.9.
e2e             produce -> consume latency: (a) a confluent-kafka producer process at a fixed
                10,000 rec/s (linger.ms=1, acks=1) stamping CLOCK_MONOTONIC into each value and
                a consumer process reading it (first second excluded); (b) Kafka's
                kafka-e2e-latency.sh (EndToEndLatency: one record at a time, produce then wait
                for it to be consumed; whole-millisecond percentiles).
fanout          100 producers + 100 consumers on a 100-partition topic: one librdkafka client
                per partition each, spread over --client-procs producer processes and as many
                consumer processes (so one Python loop is not the bottleneck); consumers assign()
                their partition (no group) and run while the producers write; aggregate rec/s
                = records / (go -> last record consumed).
share           snakka only (Kafka 4.0's share groups are early access, v0 APIs, which
                confluent-kafka 2.16's ShareConsumer does not speak): 16 confluent-kafka
                ShareConsumer processes, records/s acknowledged (bench/bench_share.py's case),
                against our own earlier number (docs/benchmarks.md "Share groups").
partitions      idle RSS with 2,000 partitions (20 topics x 100, 2 s after creating them); then
                8,000 partitions, stop, and start -> first Metadata answer (all topics) on the
                same data; RSS after that restart.
==============  ================================================================================

RSS is VmRSS / VmHWM of the broker process (the JVM for Kafka) from /proc; CPU is its
utime+stime. Client CPU is this process's (confluent-kafka runs) or the children's (Java
tools, client processes). Everything shares the machine's cores; see docs/benchmarks.md
"Against Apache Kafka 4.0, same run".

Output: one JSON object per line (``"type"``: ``kafka-compare-header``, ``-run``, ``-error``,
``-summary``; ``--json-out`` keeps them), then the markdown table (``--markdown-out`` writes it).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import resource
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

from common import (  # noqa: E402
    BrokerProcess,
    ProcReadings,
    emit,
    machine_info,
    percentile,
    round_order,
    self_cpu_seconds,
)
from compare import rank_sum_p  # noqa: E402

MiB = 1024 * 1024
SNAKKA, KAFKA = "snakka", "kafka"
DEFAULT_ROUNDS = 3
DEFAULT_KAFKA_HEAP = "-Xmx1G -Xms1G"  # kafka-server-start.sh's default KAFKA_HEAP_OPTS
# The reference's own settings that change what a benchmark sees (kafka-ref.sh): snakka gets
# the same, so a consumer group's first join is not 3 s on one side and 0 on the other.
SNAKKA_CONFIG = {"group.initial.rebalance.delay.ms": "0"}
TOOL_TIMEOUT_S = 900.0
RUN_TIMEOUT_S = 900.0
KAFKA_START_TIMEOUT_S = 300.0
KAFKA_PORT_WAIT_S = 90.0
READY_POLL_S = 0.02
# Our own earlier share-group number (docs/benchmarks.md "Share groups", quiet machine, load
# ~1.3: 16 confluent-kafka ShareConsumers, 400,000 records, 4 partitions); the goal is 2x it.
SHARE_BASELINE_REC_S = 868_600.0


# -- brokers -----------------------------------------------------------------------------------
class Broker(ProcReadings):
    """A running broker of either kind: its address, process, and /proc readings."""

    name = ""
    bootstrap = ""

    @property
    def pid(self) -> int:
        raise NotImplementedError

    def restart_timed(self) -> tuple[float, float]:
        """Stop, start again on the same data: (seconds to stop, seconds from spawn to a
        Metadata answer)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class SnakkaBroker(Broker):
    name = SNAKKA

    def __init__(self) -> None:
        self._data = tempfile.mkdtemp(prefix="snakka-vs-kafka-")
        self._proc = BrokerProcess(SNAKKA_CONFIG, data_dir=self._data).start()
        self.bootstrap = self._proc.bootstrap

    @property
    def pid(self) -> int:
        return self._proc.pid

    def restart_timed(self) -> tuple[float, float]:
        popen = self._proc.proc
        t0 = time.perf_counter()
        self._proc.close()   # SIGTERM; SIGKILL after common.STOP_TIMEOUT_S
        stop_s = time.perf_counter() - t0
        if popen is not None and popen.returncode == -9:
            print(f"# snakka did not stop within {stop_s:.0f} s of SIGTERM: killed",
                  file=sys.stderr, flush=True)
        # BrokerProcess times spawn -> READY line -> a Metadata (v1, all topics) answer on a
        # new connection; the same request as the Kafka side's readiness poll.
        self._proc = BrokerProcess(SNAKKA_CONFIG, data_dir=self._data).start()
        self.bootstrap = self._proc.bootstrap
        return stop_s, self._proc.metadata_s

    def close(self) -> None:
        self._proc.close()
        shutil.rmtree(self._data, ignore_errors=True)


def kafka_skip_reason() -> str | None:
    from reference_kafka import skip_reason

    return skip_reason()


class KafkaBroker(Broker):
    name = KAFKA

    def __init__(self, heap: str) -> None:
        from reference_kafka import KAFKA_REF_SH, ReferenceKafka

        class _Ref(ReferenceKafka):
            def _env(self) -> dict[str, str]:
                env = super()._env()
                env["KREF_HEAP"] = heap
                # the broker's JVM gets kafka-run-class.sh's own defaults (G1, ...)
                env.pop("KAFKA_JVM_PERFORMANCE_OPTS", None)
                env.pop("KAFKA_HEAP_OPTS", None)
                return env

        self._sh = KAFKA_REF_SH
        # Choosing the port pair fails while other processes' TIME-WAIT sockets fill the
        # ephemeral range (seen with 23,000 of them on the shared machine): they drain within
        # a minute, so try again for up to KAFKA_PORT_WAIT_S rather than lose the run.
        deadline = time.monotonic() + KAFKA_PORT_WAIT_S
        while True:
            try:
                self._ref = _Ref()
                break
            except RuntimeError as e:
                if "no free port pair" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        self._ref.start(timeout=KAFKA_START_TIMEOUT_S)
        self.bootstrap = self._ref.bootstrap_servers
        self._pid = self._read_pid()

    def _read_pid(self) -> int:
        pid = int((Path(self._ref.dir) / "kafka.pid").read_text().split()[0])
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        if not cmd.endswith(b"java"):  # kafka-ref.sh's setsid/nohup exec into the JVM
            raise RuntimeError(f"kafka.pid {pid} is {cmd!r}, not the JVM")
        return pid

    @property
    def pid(self) -> int:
        return self._pid

    def restart_timed(self) -> tuple[float, float]:
        env = self._ref._env()
        t0 = time.perf_counter()
        subprocess.run(["bash", str(self._sh), "stop"], env=env, capture_output=True,
                       timeout=KAFKA_START_TIMEOUT_S, check=True)
        stop_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        start = subprocess.Popen(["bash", str(self._sh), "start"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            ready = wait_metadata("127.0.0.1", self._ref.port, t0, KAFKA_START_TIMEOUT_S)
        finally:
            start.wait(KAFKA_START_TIMEOUT_S)
        self._pid = self._read_pid()
        return stop_s, ready

    def close(self) -> None:
        self._ref.stop()


def wait_metadata(host: str, port: int, t0: float, timeout: float) -> float:
    """Poll with Metadata (v1, all topics) until one is answered: seconds since ``t0``."""
    from common import metadata_roundtrip

    while True:
        try:
            metadata_roundtrip(host, port, timeout=10)
            return time.perf_counter() - t0
        except (OSError, ConnectionError):
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(f"no Metadata answer on {host}:{port} in {timeout} s") from None
            time.sleep(READY_POLL_S)


@contextmanager
def launch(kind: str, settings: Settings) -> Iterator[Broker]:
    b: Broker = SnakkaBroker() if kind == SNAKKA else KafkaBroker(settings.kafka_heap)
    try:
        yield b
    finally:
        b.close()


# -- clients -----------------------------------------------------------------------------------
def create_topics(bootstrap: str, topics: dict[str, int], timeout: float = 300) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1)
                              for t, n in topics.items()],
                             operation_timeout=timeout, request_timeout=timeout)
    for f in fs.values():
        f.result(timeout=timeout)
    # Kafka answers CreateTopics before its broker has applied the new partitions (a
    # ListOffsets right after gets NOT_LEADER_OR_FOLLOWER): wait until Metadata shows a leader
    # for every partition.
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=30).topics
        if all(t in md and md[t].error is None and len(md[t].partitions) == n
               and all(p.leader >= 0 and p.error is None for p in md[t].partitions.values())
               for t, n in topics.items()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics without leaders after {timeout} s")
        time.sleep(0.1)


def _watermarks(c: Any, topic: str, partition: int, timeout: float = 60) -> tuple[int, int]:
    """get_watermark_offsets, retried while the broker does not know the partition yet."""
    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + timeout
    while True:
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _run_procs(b: Broker, procs: list, ready: Any, go: Any, out: Any
               ) -> tuple[list, float, float]:
    """Start the client processes, wait until each says ready, release them together and
    collect one report each: (reports, monotonic time of the go, broker CPU seconds meanwhile).
    The processes are joined (killed after 60 s) whatever happens."""
    for p in procs:
        p.start()
    try:
        _gather(ready, len(procs), procs, 300)
        cpu0 = b.cpu_seconds()
        t_go = time.monotonic()
        go.set()
        reports = _gather(out, len(procs), procs, RUN_TIMEOUT_S)
        return reports, t_go, b.cpu_seconds() - cpu0
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()


def _gather(queue: Any, count: int, procs: Sequence[Any], timeout: float) -> list[Any]:
    """``count`` items from ``queue``; fails as soon as a client process died."""
    import queue as queue_mod

    items: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(items) < count:
        try:
            items.append(queue.get(timeout=0.5))
            continue
        except queue_mod.Empty:
            pass
        dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
        if dead:
            raise RuntimeError(f"a client process failed (exit codes {dead}); see stderr")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(items)} of {count} client reports after {timeout} s")
    return items


def _tool_cmd(name: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``bin/<name>`` with the tool's own JVM defaults."""
    from reference_kafka import reference_dir

    home = reference_dir()
    assert home is not None
    env = dict(os.environ)
    for k in ("KAFKA_HEAP_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS"):
        env.pop(k, None)
    env["LOG_DIR"] = tempfile.gettempdir()
    return ["bash", str(home / "bin" / name), *args], env


def run_tool(name: str, *args: str, timeout: float = TOOL_TIMEOUT_S) -> tuple[str, float]:
    """Run ``bin/<name>`` of the reference distribution with the tool's own JVM defaults (unlike
    tests/reference_kafka.run_tool, which trims them for short-lived test tools): returns its
    stdout and the CPU seconds it used."""
    cmd, env = _tool_cmd(name, *args)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-2000:]}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return proc.stdout, cpu


# -- parsing the Java tools' output (pure) -----------------------------------------------------
_PRODUCER_FINAL = re.compile(
    r"(?P<records>\d+) records sent, (?P<rec_s>[\d.]+) records/sec \((?P<mb_s>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th")


def parse_producer_perf(text: str) -> dict[str, float]:
    """The final line of kafka-producer-perf-test.sh (the one with percentiles; the periodic
    window lines before it have none)."""
    found = list(_PRODUCER_FINAL.finditer(text))
    if not found:
        raise ValueError(f"no final kafka-producer-perf-test line in: {text[-500:]!r}")
    m = found[-1]
    return {"records": int(m["records"]), "rec_s": float(m["rec_s"]),
            "mb_s": float(m["mb_s"]), "avg_ms": float(m["avg"]), "max_ms": float(m["max"]),
            "p50_ms": float(m["p50"]), "p95_ms": float(m["p95"]), "p99_ms": float(m["p99"]),
            "p999_ms": float(m["p999"])}


def parse_consumer_perf(text: str) -> dict[str, float]:
    """kafka-consumer-perf-test.sh: a header line of comma-separated names, then one line of
    values (the first two are timestamps)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for i, ln in enumerate(lines[:-1]):
        if ln.startswith("start.time"):
            names = [n.strip() for n in ln.split(",")]
            values = [v.strip() for v in lines[i + 1].split(",")]
            if len(values) != len(names):
                break
            out = {}
            for n, v in zip(names, values, strict=True):
                if n not in ("start.time", "end.time"):
                    out[n] = float(v)
            return out
    raise ValueError(f"no kafka-consumer-perf-test result in: {text[-500:]!r}")


_E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")
_E2E_PCT = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)")


def parse_e2e_latency(text: str) -> dict[str, float]:
    """kafka-e2e-latency.sh's two summary lines (percentiles are whole milliseconds)."""
    avg, pct = _E2E_AVG.search(text), _E2E_PCT.search(text)
    if not avg or not pct:
        raise ValueError(f"no EndToEndLatency summary in: {text[-500:]!r}")
    return {"avg_ms": float(avg[1]), "p50_ms": float(pct[1]), "p99_ms": float(pct[2]),
            "p999_ms": float(pct[3])}


# -- workloads ---------------------------------------------------------------------------------
@dataclass
class Settings:
    quick: bool = False
    kafka_heap: str = DEFAULT_KAFKA_HEAP
    half_rate: int = 0          # half of Kafka's max produce rate (latency workload)
    client_procs: int = 4

    def n(self, full: int) -> int:
        return max(1, full // 10) if self.quick else full


def _phase(b: Broker, res: dict, name: str, fn: Callable[[], dict],
           child_cpu: bool = False) -> dict:
    """Run one phase; add the broker's CPU seconds and the client's (this process, or the
    reaped children when the client is a subprocess)."""
    cpu0 = b.cpu_seconds()
    c0 = _children_cpu() if child_cpu else self_cpu_seconds()
    out = fn()
    res[f"{name}_broker_cpu_s"] = round(b.cpu_seconds() - cpu0, 2)
    res[f"{name}_client_cpu_s"] = round((_children_cpu() if child_cpu else self_cpu_seconds())
                                        - c0, 2)
    return out


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _ck_run(b: Broker, n: int, size: int, acks: str) -> dict:
    import bench_produce_consume as pc

    pc.create_topic(b.bootstrap, 1)
    res: dict = {"records": n, "record_bytes": size, "acks": acks,
                 "broker_idle_rss_mb": round(b.rss_kb() / 1024, 1)}
    res.update(_phase(b, res, "produce", lambda: pc.produce(b.bootstrap, n, size, acks)))
    res.update(_phase(b, res, "consume", lambda: pc.consume(b.bootstrap, n, 1)))
    res["broker_peak_rss_mb"] = round(b.peak_rss_kb() / 1024, 1)
    # per million records: comparable across --quick and full runs
    for ph in ("produce", "consume"):
        res[f"{ph}_broker_cpu_s_per_M"] = round(res[f"{ph}_broker_cpu_s"] * 1e6 / n, 3)
    return res


def wl_ck_small(b: Broker, s: Settings) -> dict:
    return _ck_run(b, s.n(1_000_000), 100, "1")


def wl_ck_large(b: Broker, s: Settings) -> dict:
    return _ck_run(b, s.n(10_000), 100 * 1024, "all")


def wl_raw_large(b: Broker, s: Settings) -> dict:
    import bench_produce_consume as pc
    import raw_fetch

    n = s.n(10_000)
    pc.create_topic(b.bootstrap, 1)
    res: dict = {"records": n, "record_bytes": 100 * 1024}
    res.update(_phase(b, res, "produce", lambda: pc.produce(b.bootstrap, n, 100 * 1024, "all")))
    r = _phase(b, res, "raw_consume", lambda: raw_fetch.raw_consume(b.bootstrap, pc.TOPIC, 0, n))
    if r["raw_records"] < n:
        raise RuntimeError(f"raw fetch consumed {r['raw_records']} of {n}")
    res.update(r)
    return res


LARGE_PARTITIONS = 4


def _large_consumer(bootstrap: str, parts: list[int], per_part: int, ready: Any, go: Any,
                    out: Any) -> None:
    """One consumer process of large-procs: bench_produce_consume.consume's settings, its
    partitions assigned (no group), from the beginning."""
    import bench_produce_consume as pc
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    fetch_max = 50 * MiB
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                  "enable.auto.commit": False, "enable.auto.offset.store": False,
                  "fetch.queue.backoff.ms": 1, "fetch.wait.max.ms": 100,
                  "fetch.max.bytes": fetch_max, "max.partition.fetch.bytes": fetch_max,
                  "receive.message.max.bytes": fetch_max + MiB,
                  "queued.max.messages.kbytes": 1024 * 1024, "queued.min.messages": 1_000_000})
    for part in parts:
        _watermarks(c, pc.TOPIC, part)
    ready.put(1)
    go.wait()
    c0 = self_cpu_seconds()
    c.assign([TopicPartition(pc.TOPIC, p, OFFSET_BEGINNING) for p in parts])
    want = per_part * len(parts)
    got = nbytes = 0
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while got < want and time.monotonic() < deadline:
        for m in c.consume(num_messages=min(want - got, 100_000), timeout=0.05):
            if m.error():
                raise RuntimeError(f"consumer error: {m.error()}")
            nbytes += len(m)
            got += 1
    end = time.monotonic()
    c.close()
    out.put((end, self_cpu_seconds() - c0, got, nbytes))


def wl_large_procs(b: Broker, s: Settings) -> dict:
    import bench_produce_consume as pc

    n = s.n(10_000)
    per_part = n // LARGE_PARTITIONS
    pc.create_topic(b.bootstrap, LARGE_PARTITIONS)
    res: dict = {"records": per_part * LARGE_PARTITIONS, "record_bytes": 100 * 1024}
    # confluent-kafka's partitioner spreads keyless records unevenly: produce each partition
    # its share explicitly, so every consumer has the same work.
    res.update(_phase(b, res, "produce", lambda: _produce_spread(b.bootstrap, per_part)))
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    k = max(1, min(s.client_procs, LARGE_PARTITIONS))
    groups = [list(range(LARGE_PARTITIONS))[i::k] for i in range(k)]
    procs = [ctx.Process(target=_large_consumer, args=(b.bootstrap, g, per_part, ready, go, out),
                         daemon=True) for g in groups]
    reports, t_go, cpu = _run_procs(b, procs, ready, go, out)
    got = sum(r[2] for r in reports)
    if got < per_part * LARGE_PARTITIONS:
        raise RuntimeError(f"large-procs: consumed {got} of {per_part * LARGE_PARTITIONS}")
    elapsed = max(r[0] for r in reports) - t_go
    res.update({"client_procs": k, "procs_consume_s": round(elapsed, 3),
                "procs_consume_mb_s": round(sum(r[3] for r in reports) / MiB / elapsed, 1),
                "procs_consume_broker_cpu_s": round(cpu, 2),
                "procs_consume_client_cpu_s": round(sum(r[1] for r in reports), 2)})
    return res


def _produce_spread(bootstrap: str, per_part: int) -> dict:
    """per_part records of 100 KiB to each of LARGE_PARTITIONS partitions, acks=all (the
    producer settings of bench_produce_consume.produce)."""
    import random

    import bench_produce_consume as pc
    from confluent_kafka import Producer

    p = Producer(pc.producer_config(bootstrap, "all", per_part * LARGE_PARTITIONS))
    value = random.Random(1).randbytes(100 * 1024)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    t0 = time.perf_counter()
    for i in range(per_part * LARGE_PARTITIONS):
        while True:
            try:
                p.produce(pc.TOPIC, value, partition=i % LARGE_PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    if p.flush(RUN_TIMEOUT_S) or errors:
        raise RuntimeError(f"large-procs produce: unflushed or failed ({errors[:3]})")
    elapsed = time.perf_counter() - t0
    return {"produce_mb_s": round(per_part * LARGE_PARTITIONS * 100 / 1024 / elapsed, 1)}


SMALL_PARTITIONS = 4


def _small_producer(bootstrap: str, parts: list[int], per_part: int, ready: Any, go: Any,
                    out: Any) -> None:
    """One producer process of small-procs: bench_produce_consume.produce's settings (those of
    ck-small), per_part records of 100 B to each of its partitions, in turn."""
    import random

    import bench_produce_consume as pc
    from confluent_kafka import Producer

    n = per_part * len(parts)
    p = Producer(pc.producer_config(bootstrap, "1", n, RUN_TIMEOUT_S))
    p.list_topics(pc.TOPIC, timeout=60)   # connected, leaders known, before the go
    value = random.Random(1).randbytes(100)
    delivered = [0]
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered[0] += 1

    ready.put(1)
    go.wait()
    c0 = self_cpu_seconds()
    k = len(parts)
    produce_, poll = p.produce, p.poll
    deadline = time.monotonic() + RUN_TIMEOUT_S
    for i in range(n):
        while True:
            try:
                produce_(pc.TOPIC, value, partition=parts[i % k], on_delivery=on_delivery)
                break
            except BufferError:   # local queue full: serve delivery reports, then retry
                poll(0.01)
                if time.monotonic() > deadline:
                    raise TimeoutError("small-procs produce timed out") from None
        if i & 0x3FFF == 0:
            poll(0)
    remaining = p.flush(max(1.0, deadline - time.monotonic()))
    end = time.monotonic()
    if remaining or errors or delivered[0] != n:
        raise RuntimeError(f"small-procs produce: {remaining} unflushed, errors {errors[:3]}, "
                           f"{delivered[0]}/{n} delivered")
    out.put((end, self_cpu_seconds() - c0, delivered[0], n * 100))


def _log_end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Every partition's high watermark (= log end offset on a one-replica topic)."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused"})
    try:
        return [_watermarks(c, topic, p)[1] for p in range(partitions)]
    finally:
        c.close()


def _per_m(res: dict, phase: str, records: int) -> None:
    """CPU seconds per million records of a phase's broker and clients."""
    for who in ("broker", "client"):
        res[f"{phase}_{who}_cpu_s_per_M"] = round(res[f"{phase}_{who}_cpu_s"] * 1e6 / records, 3)


def wl_small_procs(b: Broker, s: Settings) -> dict:
    """1M x 100 B acks=1 on SMALL_PARTITIONS partitions: --client-procs confluent-kafka
    producer processes, then as many consumer processes (assign()); aggregate rec/s from the
    go to the last process's end."""
    import bench_produce_consume as pc

    n = s.n(1_000_000)
    per_part = n // SMALL_PARTITIONS
    total = per_part * SMALL_PARTITIONS
    pc.create_topic(b.bootstrap, SMALL_PARTITIONS)
    k = max(1, min(s.client_procs, SMALL_PARTITIONS))
    groups = [list(range(SMALL_PARTITIONS))[i::k] for i in range(k)]
    res: dict = {"records": total, "record_bytes": 100, "acks": "1", "client_procs": k}
    ctx = mp.get_context("spawn")
    for phase, fn in (("procs_produce", _small_producer), ("procs_consume", _large_consumer)):
        ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=fn, args=(b.bootstrap, g, per_part, ready, go, out),
                             daemon=True) for g in groups]
        reports, t_go, cpu = _run_procs(b, procs, ready, go, out)
        got = sum(r[2] for r in reports)
        if got != total:
            raise RuntimeError(f"small-procs {phase}: {got} of {total} records")
        if phase == "procs_produce":
            leo = _log_end_offsets(b.bootstrap, pc.TOPIC, SMALL_PARTITIONS)
            if leo != [per_part] * SMALL_PARTITIONS:
                raise RuntimeError(f"small-procs: log end offsets {leo}, {per_part} each produced")
        elapsed = max(r[0] for r in reports) - t_go
        res.update({f"{phase}_s": round(elapsed, 3), f"{phase}_rec_s": round(total / elapsed),
                    f"{phase}_broker_cpu_s": round(cpu, 2),
                    f"{phase}_client_cpu_s": round(sum(r[1] for r in reports), 2)})
        _per_m(res, phase, total)
    res["broker_peak_rss_mb"] = round(b.peak_rss_kb() / 1024, 1)
    return res


RAW_SMALL_TOPIC = "raw-small"


def wl_raw_small(b: Broker, s: Settings) -> dict:
    """1M x 100 B acks=1 by bench/raw_produce.py (pre-encoded batches, one connection per
    partition, several requests in flight), the log end offsets checked, then read back by
    bench/raw_fetch.py (one connection and thread per partition)."""
    import threading

    import raw_fetch
    import raw_produce

    n = s.n(1_000_000)
    per_part = n // SMALL_PARTITIONS
    total = per_part * SMALL_PARTITIONS
    create_topics(b.bootstrap, {RAW_SMALL_TOPIC: SMALL_PARTITIONS})
    res: dict = {"records": total, "record_bytes": 100, "acks": "1"}
    # encoded before the clock (and the CPU readings) start
    plans = raw_produce.plan_topic(RAW_SMALL_TOPIC, SMALL_PARTITIONS, total, 100)
    r = _phase(b, res, "raw_produce",
               lambda: raw_produce.raw_produce(b.bootstrap, plans, 100, timeout_s=RUN_TIMEOUT_S))
    if r["raw_produce_records"] != total:
        raise RuntimeError(f"raw-small: {r['raw_produce_records']} of {total} acknowledged")
    leo = _log_end_offsets(b.bootstrap, RAW_SMALL_TOPIC, SMALL_PARTITIONS)
    if leo != [per_part] * SMALL_PARTITIONS:
        raise RuntimeError(f"raw-small: log end offsets {leo}, {per_part} each produced")
    res.update(r)
    res["raw_produce_leo_total"] = sum(leo)
    _per_m(res, "raw_produce", total)

    def fetch_all() -> dict:
        results: list[dict] = [{} for _ in range(SMALL_PARTITIONS)]

        def one(p: int) -> None:
            try:
                results[p] = raw_fetch.raw_consume(b.bootstrap, RAW_SMALL_TOPIC, p, per_part,
                                                   max_bytes=RAW_SMALL_FETCH_BYTES,
                                                   timeout_s=RUN_TIMEOUT_S)
            except Exception as e:  # raised below, in the caller's thread
                results[p] = {"error": f"{type(e).__name__}: {e}"}

        threads = [threading.Thread(target=one, args=(p,), daemon=True)
                   for p in range(SMALL_PARTITIONS)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(RUN_TIMEOUT_S)
        elapsed = time.monotonic() - t0
        if any(t.is_alive() for t in threads) or any("error" in x for x in results):
            raise RuntimeError(f"raw-small fetch: {[x.get('error') for x in results]}")
        got = sum(x["raw_records"] for x in results)
        return {"raw_fetch_records": got, "raw_fetch_s": round(elapsed, 3),
                "raw_fetch_rec_s": round(got / elapsed)}

    f = _phase(b, res, "raw_fetch", fetch_all)
    if f["raw_fetch_records"] < total:
        raise RuntimeError(f"raw-small: fetched {f['raw_fetch_records']} of {total}")
    res.update(f)
    _per_m(res, "raw_fetch", total)
    return res


# One partition's share of 1M x 100 B is ~27 MB of batches; 16 MiB per Fetch keeps the four
# readers' buffers (one each, raw_fetch's max_bytes + 1 MiB) small on a shared machine.
RAW_SMALL_FETCH_BYTES = 16 * MiB


def wl_ptool_large(b: Broker, s: Settings) -> dict:
    import bench_produce_consume as pc

    n = s.n(10_000)
    pc.create_topic(b.bootstrap, 1)
    res: dict = {"records": n, "record_bytes": 100 * 1024}
    res.update(_phase(b, res, "produce", lambda: pc.produce(b.bootstrap, n, 100 * 1024, "all")))

    def consume() -> dict:
        text, _ = run_tool("kafka-consumer-perf-test.sh", "--bootstrap-server", b.bootstrap,
                           "--topic", pc.TOPIC, "--messages", str(n), "--timeout", "60000",
                           "--fetch-size", str(50 * MiB))
        return parse_consumer_perf(text)

    c = _phase(b, res, "ptool_large_consume", consume, child_cpu=True)
    if c.get("data.consumed.in.nMsg", 0) < n:
        raise RuntimeError(f"kafka-consumer-perf-test consumed {c} of {n}")
    res.update({"ptool_large_mb_s": c["fetch.MB.sec"],
                "ptool_large_with_join_mb_s": c["MB.sec"]})
    return res


def _producer_perf(b: Broker, topic: str, n: int, acks: str, throughput: int = -1) -> dict:
    text, cpu = run_tool("kafka-producer-perf-test.sh", "--topic", topic, "--num-records", str(n),
                         "--record-size", "100", "--throughput", str(throughput),
                         "--producer-props", f"bootstrap.servers={b.bootstrap}", f"acks={acks}")
    return {**parse_producer_perf(text), "tool_cpu_s": round(cpu, 2)}


def wl_perf_tools(b: Broker, s: Settings) -> dict:
    n = s.n(1_000_000)
    create_topics(b.bootstrap, {"pt-acks1": 1, "pt-acksall": 1})
    res: dict = {"records": n}
    for acks, topic in (("1", "pt-acks1"), ("all", "pt-acksall")):
        tag = f"ptool_produce_acks{acks}"
        r = _phase(b, res, tag, partial(_producer_perf, b, topic, n, acks), child_cpu=True)
        res.update({f"{tag}_rec_s": r["rec_s"], f"{tag}_mb_s": r["mb_s"],
                    f"{tag}_p99_ms": r["p99_ms"], f"{tag}_avg_ms": r["avg_ms"]})

    def consume() -> dict:
        text, _ = run_tool("kafka-consumer-perf-test.sh", "--bootstrap-server", b.bootstrap,
                           "--topic", "pt-acks1", "--messages", str(n), "--timeout", "60000")
        return parse_consumer_perf(text)

    c = _phase(b, res, "ptool_consume", consume, child_cpu=True)
    if c.get("data.consumed.in.nMsg", 0) < n:
        raise RuntimeError(f"kafka-consumer-perf-test consumed {c} of {n}")
    res.update({"ptool_consume_rec_s": c["fetch.nMsg.sec"], "ptool_consume_mb_s": c["fetch.MB.sec"],
                "ptool_consume_with_join_rec_s": c["nMsg.sec"],
                "ptool_consume_rebalance_ms": c["rebalance.time.ms"]})
    res["broker_peak_rss_mb"] = round(b.peak_rss_kb() / 1024, 1)
    return res


def parallel_window(finals: Sequence[tuple[float, int, float]]) -> tuple[float, float]:
    """Aggregate of tools run side by side, from what each reports: ``finals`` holds per tool
    (monotonic instant its final line was read, records, its own rec/s). A tool's rate is over
    its own send loop (records / rate = its elapsed time, JVM start-up not included), so it
    started sending at ``final - records / rate``. Returns (seconds from the first tool's start
    to the last tool's final line, seconds between the first and the last start)."""
    starts = [t - n / rate for t, n, rate in finals]
    return max(t for t, _, _ in finals) - min(starts), max(starts) - min(starts)


def _parallel_producer_perf(b: Broker, topics: Sequence[str], per_tool: int, acks: str
                            ) -> dict:
    """kafka-producer-perf-test.sh once per topic, all at once (JVMs started together; each
    sends as soon as its JVM is up): aggregate rec/s over parallel_window."""
    import threading

    r0 = _children_cpu()
    procs: list[subprocess.Popen] = []
    finals: list[tuple[float, int, float] | None] = [None] * len(topics)
    texts: list[list[str]] = [[] for _ in topics]

    def read(i: int, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            texts[i].append(line)
            if _PRODUCER_FINAL.search(line):
                finals[i] = (time.monotonic(), 0, 0.0)   # numbers filled in below

    readers = []
    try:
        for i, topic in enumerate(topics):
            cmd, env = _tool_cmd("kafka-producer-perf-test.sh", "--topic", topic,
                                 "--num-records", str(per_tool), "--record-size", "100",
                                 "--throughput", "-1", "--producer-props",
                                 f"bootstrap.servers={b.bootstrap}", f"acks={acks}")
            # own session: a stuck tool's JVM is killed with its group below
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)
            procs.append(proc)
            t = threading.Thread(target=read, args=(i, proc), daemon=True)
            t.start()
            readers.append(t)
        deadline = time.monotonic() + TOOL_TIMEOUT_S
        for proc in procs:
            proc.wait(max(1.0, deadline - time.monotonic()))
        for t in readers:
            t.join(max(1.0, deadline - time.monotonic()))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(60)
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad:
        first = next(i for i, p in enumerate(procs) if p.returncode != 0)
        raise RuntimeError(f"kafka-producer-perf-test exited {bad}: "
                           f"{''.join(texts[first])[-1500:]}")
    stats = [parse_producer_perf("".join(t)) for t in texts]
    got = sum(int(st["records"]) for st in stats)
    if got != per_tool * len(topics) or any(f is None for f in finals):
        raise RuntimeError(f"parallel producer-perf-test: {got} of {per_tool * len(topics)}")
    window, stagger = parallel_window([(f[0], int(st["records"]), st["rec_s"])
                                       for f, st in zip(finals, stats, strict=True)
                                       if f is not None])
    return {"rec_s": round(got / window), "window_s": round(window, 3),
            "start_spread_s": round(stagger, 3),
            "sum_rec_s": round(sum(st["rec_s"] for st in stats)),
            "p99_ms_max": max(st["p99_ms"] for st in stats),
            "tool_cpu_s": round(_children_cpu() - r0, 2)}


def wl_ptool_procs(b: Broker, s: Settings) -> dict:
    """kafka-producer-perf-test.sh in --client-procs processes at once, each its share of
    1M x 100 B to its own one-partition topic, acks=1 then acks=all; log end offsets checked."""
    n = s.n(1_000_000)
    k = max(1, s.client_procs)
    per_tool = n // k
    topics = {acks: [f"ptp-acks{acks}-{i}" for i in range(k)] for acks in ("1", "all")}
    create_topics(b.bootstrap, {t: 1 for ts in topics.values() for t in ts})
    res: dict = {"records": per_tool * k, "client_procs": k}
    for acks, ts in topics.items():
        tag = f"ptool_procs_acks{acks}"
        r = _phase(b, res, tag, partial(_parallel_producer_perf, b, ts, per_tool, acks),
                   child_cpu=True)
        leo = [_log_end_offsets(b.bootstrap, t, 1)[0] for t in ts]
        if leo != [per_tool] * k:
            raise RuntimeError(f"ptool-procs acks={acks}: log end offsets {leo}, {per_tool} each")
        res.update({f"{tag}_rec_s": r["rec_s"], f"{tag}_window_s": r["window_s"],
                    f"{tag}_start_spread_s": r["start_spread_s"],
                    f"{tag}_sum_rec_s": r["sum_rec_s"], f"{tag}_p99_ms_max": r["p99_ms_max"]})
        _per_m(res, tag, per_tool * k)
    return res


def calibrate_half_rate(s: Settings, out: Any) -> int:
    """Half of Kafka's unthrottled kafka-producer-perf-test rate (acks=all, 100 B), once."""
    with launch(KAFKA, s) as b:
        create_topics(b.bootstrap, {"calibrate": 1})
        r = _producer_perf(b, "calibrate", s.n(1_000_000), "all")
    rate = max(1000, int(r["rec_s"] / 2))
    emit({"type": "kafka-compare-calibration", "kafka_max_rec_s": r["rec_s"],
          "half_rate": rate}, out)
    return rate


def wl_latency(b: Broker, s: Settings) -> dict:
    create_topics(b.bootstrap, {"lat-50k": 1, "lat-half": 1})
    res: dict = {}
    for tag, topic, rate in (("lat50k", "lat-50k", 50_000), ("lathalf", "lat-half", s.half_rate)):
        if rate <= 0:
            continue
        n = rate * (1 if s.quick else 10)   # 10 s at the rate (1 s with --quick)
        r = _phase(b, res, tag, partial(_producer_perf, b, topic, n, "all", rate),
                   child_cpu=True)
        res.update({f"{tag}_rate": rate, f"{tag}_achieved_rec_s": r["rec_s"],
                    f"{tag}_p50_ms": r["p50_ms"], f"{tag}_p99_ms": r["p99_ms"],
                    f"{tag}_p999_ms": r["p999_ms"], f"{tag}_avg_ms": r["avg_ms"]})
    return res


E2E_RATE = 10_000
E2E_WARMUP_S = 1.0


def _e2e_consumer(bootstrap: str, topic: str, n: int, ready: Any, out: Any) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-unused",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    _watermarks(c, topic, 0)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    c.consume(1, 0.2)   # the first fetch is under way before the producer starts
    ready.set()
    lats: list[tuple[int, int]] = []   # (send time ns, latency ns)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while len(lats) < n and time.monotonic() < deadline:
        # one record per poll (not consume(n, timeout), which waits for n records or the
        # timeout): the time taken is when this record reached the application
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            now = time.monotonic_ns()
            sent = struct.unpack_from(">q", m.value())[0]
            lats.append((sent, now - sent))
    c.close()
    out.put(lats)


def _e2e_producer(bootstrap: str, topic: str, n: int, rate: int, go: Any) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 1})
    p.list_topics(topic, timeout=30)
    pad = b"x" * 92
    go.wait()
    t0 = time.monotonic()
    i = 0
    while i < n:
        due = min(n, int((time.monotonic() - t0) * rate) + 1)
        while i < due:
            p.produce(topic, struct.pack(">q", time.monotonic_ns()) + pad, partition=0)
            i += 1
        p.poll(0)
        time.sleep(0.0005)
    p.flush(60)


def _e2e_pair(b: Broker, n: int) -> dict:
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    cons = ctx.Process(target=_e2e_consumer, args=(b.bootstrap, "e2e-ck", n, ready, out))
    prod = ctx.Process(target=_e2e_producer, args=(b.bootstrap, "e2e-ck", n, E2E_RATE, ready))
    cons.start()
    prod.start()
    try:
        lats = _gather(out, 1, (prod, cons), RUN_TIMEOUT_S)[0]
    finally:
        for p in (prod, cons):
            p.join(60)
            if p.is_alive():
                p.kill()
    if len(lats) < n:
        raise RuntimeError(f"e2e: {len(lats)} of {n} records consumed")
    first = min(t for t, _ in lats)
    # warm-up excluded: the first second (a fifth of a shorter --quick run)
    warmup_ns = min(E2E_WARMUP_S, n / E2E_RATE / 5) * 1e9
    kept = sorted(lat / 1e6 for t, lat in lats if t - first >= warmup_ns)
    return {"e2e_ck_rate": E2E_RATE, "e2e_ck_records": len(kept),
            "e2e_ck_p50_ms": round(percentile(kept, 0.5), 2),
            "e2e_ck_p99_ms": round(percentile(kept, 0.99), 2),
            "e2e_ck_max_ms": round(kept[-1], 2)}


def wl_e2e(b: Broker, s: Settings) -> dict:
    create_topics(b.bootstrap, {"e2e-ck": 1})
    res: dict = {}
    res.update(_phase(b, res, "e2e_ck", lambda: _e2e_pair(b, s.n(100_000)), child_cpu=True))

    def tool() -> dict:
        text, _ = run_tool("kafka-e2e-latency.sh", b.bootstrap, "e2e-tool", str(s.n(10_000)),
                           "1", "100")
        return parse_e2e_latency(text)

    r = _phase(b, res, "e2e_tool", tool, child_cpu=True)
    res.update({f"e2e_tool_{k}": v for k, v in r.items()})
    return res


FAN_PARTITIONS = 100


def _fan_producer(bootstrap: str, parts: list[int], per_part: int, ready: Any, go: Any,
                  out: Any) -> None:
    from confluent_kafka import Producer

    ps = [Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
          for _ in parts]
    for p in ps:
        p.list_topics("fan", timeout=60)
    value = b"v" * 100
    ready.put(1)
    go.wait()
    c0 = self_cpu_seconds()
    for i in range(per_part):
        for p, part in zip(ps, parts, strict=True):
            p.produce("fan", value, partition=part)
        if i % 256 == 0:
            for p in ps:
                p.poll(0)
    for p in ps:
        if p.flush(RUN_TIMEOUT_S):
            raise RuntimeError("fan producer: unflushed records")
    out.put(("producer", time.monotonic(), self_cpu_seconds() - c0, per_part * len(parts)))


def _fan_consumer(bootstrap: str, parts: list[int], per_part: int, ready: Any, go: Any,
                  out: Any) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    cs = []
    for part in parts:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fan-unused",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        _watermarks(c, "fan", part)
        c.assign([TopicPartition("fan", part, OFFSET_BEGINNING)])
        cs.append(c)
    ready.put(1)
    go.wait()
    c0 = self_cpu_seconds()
    got = [0] * len(cs)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while min(got) < per_part and time.monotonic() < deadline:
        idle = True
        for j, c in enumerate(cs):
            if got[j] < per_part:
                msgs = c.consume(10_000, 0)
                if msgs:
                    idle = False
                    got[j] += sum(1 for m in msgs if m.error() is None)
        if idle:
            time.sleep(0.001)
    end = time.monotonic()
    for c in cs:
        c.close()
    out.put(("consumer", end, self_cpu_seconds() - c0, sum(got)))


def wl_fanout(b: Broker, s: Settings) -> dict:
    total = s.n(1_000_000)
    per_part = total // FAN_PARTITIONS
    create_topics(b.bootstrap, {"fan": FAN_PARTITIONS})
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    k = max(1, min(s.client_procs, FAN_PARTITIONS))
    groups = [list(range(FAN_PARTITIONS))[i::k] for i in range(k)]
    procs = [ctx.Process(target=fn, args=(b.bootstrap, g, per_part, ready, go, out), daemon=True)
             for fn in (_fan_consumer, _fan_producer) for g in groups]
    reports, t_go, cpu = _run_procs(b, procs, ready, go, out)
    consumed = sum(r[3] for r in reports if r[0] == "consumer")
    produced = sum(r[3] for r in reports if r[0] == "producer")
    if consumed < per_part * FAN_PARTITIONS:
        raise RuntimeError(f"fanout: consumed {consumed} of {per_part * FAN_PARTITIONS}")
    end_c = max(r[1] for r in reports if r[0] == "consumer")
    end_p = max(r[1] for r in reports if r[0] == "producer")
    return {"records": produced, "client_procs": 2 * k,
            "fan_rec_s": round(consumed / (end_c - t_go)),
            "fan_produce_rec_s": round(produced / (end_p - t_go)),
            "fan_broker_cpu_s": round(cpu, 2),
            "fan_client_cpu_s": round(sum(r[2] for r in reports), 2),
            "broker_peak_rss_mb": round(b.peak_rss_kb() / 1024, 1)}


def wl_share(b: Broker | None, s: Settings) -> dict:
    """bench/bench_share.py's case (it starts its own snakka broker)."""
    import bench_share

    args = SimpleNamespace(partitions=4, records=s.n(400_000), value_size=100, timeout=300.0)
    r = bench_share.run_case("confluent", 16, args)
    return {"records": r["records"], "share_rec_s": r["records_per_s"],
            "share_steady_rec_s": r["steady_records_per_s"],
            "share_first_ack_s": r["first_ack_s"], "share_broker_cpu_s": r["broker_cpu_s"],
            "share_duplicates": r["duplicates"]}


def wl_partitions(b: Broker, s: Settings) -> dict:
    t0 = time.perf_counter()
    create_topics(b.bootstrap, {f"p2k-{i:02d}": 100 for i in range(20)})
    res: dict = {"create_2k_s": round(time.perf_counter() - t0, 2)}
    time.sleep(2.0)  # idle: let creation's transient work settle before reading RSS
    res["idle_2k_rss_mb"] = round(b.rss_kb() / 1024, 1)
    t0 = time.perf_counter()
    create_topics(b.bootstrap, {f"p8k-{i:02d}": 100 for i in range(60)})
    res["create_6k_more_s"] = round(time.perf_counter() - t0, 2)
    stop_s, start_s = b.restart_timed()
    res["stop_8k_s"], res["startup_8k_s"] = round(stop_s, 2), round(start_s, 3)
    res["metadata_8k_bytes"] = _metadata_bytes(b.bootstrap)
    time.sleep(2.0)
    res["idle_8k_rss_mb"] = round(b.rss_kb() / 1024, 1)
    return res


def _metadata_bytes(bootstrap: str) -> int:
    """Size of the Metadata (v1, all topics) answer: both brokers list the same partitions."""
    host, port = bootstrap.rsplit(":", 1)
    body = struct.pack(">hhih", 3, 1, 7, 5) + b"bench" + struct.pack(">i", -1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                raise ConnectionError("closed")
            head += chunk
        return struct.unpack(">i", head)[0]


# -- goals and the table (pure) ----------------------------------------------------------------
@dataclass(frozen=True)
class Goal:
    """One row of the table: ``kind`` says how the goal reads.

    * ``ratio_min``: snakka / Kafka (medians) >= threshold (higher is better: throughput);
    * ``ratio_max``: snakka / Kafka <= threshold (lower is better: latency);
    * ``abs_max``: snakka's median < threshold (memory, start-up), Kafka shown for comparison;
    * ``baseline_min``: snakka's median / ``baseline`` >= threshold (no Kafka run).
    """

    workload: str
    metric: str
    label: str
    kind: str
    threshold: float
    unit: str = ""
    baseline: float = 0.0

    def text(self) -> str:
        if self.kind == "ratio_min":
            return f">= {self.threshold:g}x"
        if self.kind == "ratio_max":
            return f"<= {self.threshold:g}x"
        if self.kind == "abs_max":
            return f"< {self.threshold:g} {self.unit}".rstrip()
        return f">= {self.threshold:g}x of {self.baseline:,.0f}"


GOALS: tuple[Goal, ...] = (
    Goal("ck-small", "produce_rec_s", "confluent-kafka 1M x 100 B acks=1: produce rec/s",
         "ratio_min", 1.2),
    Goal("ck-small", "consume_rec_s", "confluent-kafka 1M x 100 B acks=1: consume rec/s",
         "ratio_min", 1.2),
    Goal("ck-large", "produce_mb_s", "confluent-kafka 10k x 100 KiB acks=all: produce MB/s",
         "ratio_min", 1.5),
    Goal("ck-large", "consume_mb_s", "confluent-kafka 10k x 100 KiB acks=all: consume MB/s",
         "ratio_min", 1.5),
    Goal("raw-large", "raw_mb_s", "raw Fetch loop 10k x 100 KiB: consume MB/s (who limits)",
         "ratio_min", 1.5),
    Goal("large-procs", "procs_consume_mb_s",
         "10k x 100 KiB, 4 partitions, --client-procs consumers: MB/s (who limits)",
         "ratio_min", 1.5),
    Goal("ptool-large", "ptool_large_mb_s",
         "consumer-perf-test 10k x 100 KiB: fetch MB/s (who limits)", "ratio_min", 1.5),
    Goal("small-procs", "procs_produce_rec_s",
         "1M x 100 B acks=1, 4 partitions, --client-procs producers: rec/s (who limits)",
         "ratio_min", 1.2),
    Goal("small-procs", "procs_consume_rec_s",
         "1M x 100 B, 4 partitions, --client-procs consumers: rec/s (who limits)",
         "ratio_min", 1.2),
    Goal("raw-small", "raw_produce_rec_s",
         "raw Produce loop 1M x 100 B acks=1, 4 partitions: rec/s (who limits)", "ratio_min", 1.2),
    Goal("raw-small", "raw_fetch_rec_s",
         "raw Fetch loop 1M x 100 B, 4 partitions: rec/s (who limits)", "ratio_min", 1.2),
    Goal("perf-tools", "ptool_produce_acks1_rec_s", "producer-perf-test 1M x 100 B acks=1 rec/s",
         "ratio_min", 1.2),
    Goal("perf-tools", "ptool_produce_acksall_rec_s",
         "producer-perf-test 1M x 100 B acks=all rec/s", "ratio_min", 1.2),
    Goal("perf-tools", "ptool_consume_rec_s", "consumer-perf-test 1M x 100 B rec/s (fetch)",
         "ratio_min", 1.2),
    Goal("ptool-procs", "ptool_procs_acks1_rec_s",
         "producer-perf-test x --client-procs 1M x 100 B acks=1 rec/s (who limits)",
         "ratio_min", 1.2),
    Goal("ptool-procs", "ptool_procs_acksall_rec_s",
         "producer-perf-test x --client-procs 1M x 100 B acks=all rec/s (who limits)",
         "ratio_min", 1.2),
    Goal("latency", "lat50k_p99_ms", "produce latency p99 at 50k rec/s (ms)", "ratio_max", 1.0),
    Goal("latency", "lathalf_p99_ms", "produce latency p99 at 50% of Kafka's max (ms)",
         "ratio_max", 1.0),
    Goal("e2e", "e2e_ck_p99_ms", "end-to-end p99 at 10k rec/s, confluent-kafka (ms)",
         "ratio_max", 1.0),
    Goal("e2e", "e2e_tool_p99_ms", "end-to-end p99, kafka-e2e-latency.sh (ms)", "ratio_max", 1.0),
    Goal("fanout", "fan_rec_s", "100 producers + 100 consumers, 100 partitions: rec/s",
         "ratio_min", 1.0),
    Goal("share", "share_rec_s", "share groups: 16 confluent-kafka ShareConsumers, rec/s acked",
         "baseline_min", 2.0, baseline=SHARE_BASELINE_REC_S),
    Goal("ck-small", "broker_peak_rss_mb", "broker peak RSS during 1M x 100 B (MB)", "abs_max",
         60, "MB"),
    Goal("partitions", "idle_2k_rss_mb", "broker RSS idle with 2,000 partitions (MB)", "abs_max",
         80, "MB"),
    Goal("partitions", "startup_8k_s", "start -> Metadata answer with 8,000 partitions (s)",
         "abs_max", 1.0, "s"),
)


@dataclass
class Workload:
    name: str
    fn: Callable[[Any, Settings], dict]
    kafka: bool = True          # also run on Kafka
    own_broker: bool = False    # the workload starts its broker itself


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("ck-small", wl_ck_small),
    Workload("ck-large", wl_ck_large),
    Workload("raw-large", wl_raw_large),
    Workload("large-procs", wl_large_procs),
    Workload("ptool-large", wl_ptool_large),
    Workload("small-procs", wl_small_procs),
    Workload("raw-small", wl_raw_small),
    Workload("perf-tools", wl_perf_tools),
    Workload("ptool-procs", wl_ptool_procs),
    Workload("latency", wl_latency),
    Workload("e2e", wl_e2e),
    Workload("fanout", wl_fanout),
    Workload("share", wl_share, kafka=False, own_broker=True),
    Workload("partitions", wl_partitions),
)}


def _range(vals: Sequence[float]) -> list[float] | None:
    return [min(vals), max(vals)] if vals else None


def summarize(runs: Sequence[dict], goals: Sequence[Goal] = GOALS) -> list[dict]:
    """Per goal with any run: each broker's median and range, snakka/Kafka, verdict."""
    rows = []
    for g in goals:
        vs = [r[g.metric] for r in runs if r["workload"] == g.workload and r["broker"] == SNAKKA
              and g.metric in r]
        vk = [r[g.metric] for r in runs if r["workload"] == g.workload and r["broker"] == KAFKA
              and g.metric in r]
        if not vs and not vk:
            continue
        ms = statistics.median(vs) if vs else None
        mk = statistics.median(vk) if vk else None
        ratio = ms / mk if ms is not None and mk else None
        if g.kind == "baseline_min" and ms is not None:
            ratio = ms / g.baseline
        verdict = "n/a"
        if g.kind == "ratio_min" and ratio is not None:
            verdict = "pass" if ratio >= g.threshold else "miss"
        elif g.kind == "ratio_max" and ratio is not None:
            verdict = "pass" if ratio <= g.threshold else "miss"
        elif g.kind == "baseline_min" and ratio is not None:
            verdict = "pass" if ratio >= g.threshold else "miss"
        elif g.kind == "abs_max" and ms is not None:
            verdict = "pass" if ms < g.threshold else "miss"
        rows.append({"type": "kafka-compare-summary", "workload": g.workload, "metric": g.metric,
                     "label": g.label, "goal": g.text(), "kind": g.kind,
                     "snakka_median": ms, "snakka_range": _range(vs), "snakka_runs": len(vs),
                     "kafka_median": mk, "kafka_range": _range(vk), "kafka_runs": len(vk),
                     "ratio": None if ratio is None else round(ratio, 3),
                     "p": round(rank_sum_p([float(v) for v in vs], [float(v) for v in vk]), 3)
                     if vs and vk else None,
                     "verdict": verdict})
    return rows


def _num(v: float | None) -> str:
    if v is None:
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}" if abs(v) < 10 else f"{v:,.1f}".rstrip("0").rstrip(".")


def _cell(median: float | None, rng: list[float] | None, runs: int) -> str:
    if median is None:
        return "–"
    if rng is None or runs < 2:
        return _num(median)
    return f"{_num(median)} ({_num(rng[0])}–{_num(rng[1])})"


def markdown_table(rows: Sequence[dict]) -> str:
    out = ["| workload | snakka median (range) | Kafka 4.0 median (range) | snakka/Kafka | p "
           "| goal | |",
           "|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        if r["kind"] == "baseline_min" and r["ratio"] is not None:
            ratio += " of ours"
        p = "–" if r["p"] is None else f"{r['p']:.2f}"
        out.append(f"| {r['label']} | {_cell(r['snakka_median'], r['snakka_range'], r['snakka_runs'])} "
                   f"| {_cell(r['kafka_median'], r['kafka_range'], r['kafka_runs'])} | {ratio} "
                   f"| {p} | {r['goal']} | {r['verdict']} |")
    return "\n".join(out)


# -- the run -----------------------------------------------------------------------------------
@dataclass
class Run:
    settings: Settings
    out: Any
    kafka_reason: str | None
    runs: list[dict] = field(default_factory=list)

    def one(self, wl: Workload, kind: str, round_no: int) -> None:
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        base = {"workload": wl.name, "broker": kind, "round": round_no,
                "load_avg_1m": round(load, 2)}
        try:
            if wl.own_broker:
                res = wl.fn(None, self.settings)
            else:
                with launch(kind, self.settings) as b:
                    res = wl.fn(b, self.settings)
        except Exception as e:  # one broken run must not lose the others' numbers
            emit({"type": "kafka-compare-error", **base, "error": f"{type(e).__name__}: {e}"[:2000]},
                 self.out)
            return
        rec = {"type": "kafka-compare-run", **base, "wall_s": round(time.monotonic() - t0, 1),
               **res}
        self.runs.append(rec)
        emit(rec, self.out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help=f"comma list of: {', '.join(WORKLOADS)} (default: all)")
    ap.add_argument("--rounds", type=int, help=f"default {DEFAULT_ROUNDS} (1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="10x fewer records, 1 round (smoke run)")
    ap.add_argument("--no-kafka", action="store_true", help="snakka only")
    ap.add_argument("--kafka-heap", default=DEFAULT_KAFKA_HEAP,
                    help=f"the reference broker's JVM heap options (default {DEFAULT_KAFKA_HEAP!r})")
    ap.add_argument("--half-rate", type=int, default=0,
                    help="latency workload's second rate (default: half of Kafka's max, measured)")
    ap.add_argument("--client-procs", type=int, default=4,
                    help="client processes of fanout, large-procs, small-procs (producers and "
                         "as many consumers), ptool-procs (default 4)")
    ap.add_argument("--json-out", type=Path, help="also append the JSON lines to this file")
    ap.add_argument("--markdown-out", type=Path, help="also write the markdown table here")
    args = ap.parse_args(argv)
    names = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    rounds = args.rounds or (1 if args.quick else DEFAULT_ROUNDS)
    settings = Settings(quick=args.quick, kafka_heap=args.kafka_heap, half_rate=args.half_rate,
                        client_procs=args.client_procs)
    kafka_reason = "--no-kafka" if args.no_kafka else kafka_skip_reason()
    out = open(args.json_out, "a") if args.json_out else None
    try:
        emit({"type": "kafka-compare-header", **machine_info(), "argv": sys.argv[1:],
              "rounds": rounds, "quick": args.quick, "workloads": names,
              "kafka_heap": args.kafka_heap, "kafka_skipped": kafka_reason,
              "load_avg": [round(x, 2) for x in os.getloadavg()]}, out)
        if kafka_reason:
            print(f"# Kafka runs skipped: {kafka_reason}", file=sys.stderr, flush=True)
        run = Run(settings, out, kafka_reason)
        if "latency" in names and not settings.half_rate and not kafka_reason:
            try:
                settings.half_rate = calibrate_half_rate(settings, out)
            except Exception as e:
                print(f"# calibration failed, no half-max latency row: {e}", file=sys.stderr)
        for round_no in range(1, rounds + 1):
            for name in names:
                wl = WORKLOADS[name]
                kinds = [SNAKKA, KAFKA] if wl.kafka and not kafka_reason else [SNAKKA]
                for kind in round_order(kinds, round_no):
                    run.one(wl, kind, round_no)
                    print(f"# round {round_no} {name} {kind} done; load average "
                          f"{os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
        rows = summarize(run.runs)
        for row in rows:
            emit(row, out)
        loads = [r["load_avg_1m"] for r in run.runs]
        table = markdown_table(rows)
        note = (f"\n{rounds} round(s){' (--quick)' if args.quick else ''}; load average (1 min) "
                f"before the runs {min(loads):.1f}–{max(loads):.1f}" if loads else "")
        print("\n" + table + note)
        if args.markdown_out:
            args.markdown_out.write_text(table + note + "\n")
    finally:
        if out is not None:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
