"""Consume across many partitions (issue 15, the cost curves' ``partitions`` point on its own):
where a Fetch that lists thousands of small partitions spends its time.

    .venv/bin/python bench/bench_fetch_partitions.py                        # 10,000 partitions
    .venv/bin/python bench/bench_fetch_partitions.py --partitions 10,10000 --rounds 3
    .venv/bin/python bench/bench_fetch_partitions.py --py-spy prof/         # + broker profile

For each ``--partitions`` count: a fresh broker, one topic, ``--records`` x 100 B produced once
(confluent-kafka, as bench_curves.py's partitions curve), then ``--rounds`` consumes of all of
them by a new confluent-kafka consumer assigned every partition from offset 0 (the curve's
consumer: librdkafka, which sends full fetches listing every partition it has room for; it
does not use KIP-227 fetch sessions). Each round reports rec/s, the broker's CPU seconds, this
process's CPU seconds (librdkafka's threads: the client side), and from the broker's metrics
endpoint the Fetch requests answered and their handler time. ``--py-spy DIR`` records the
broker during the first round (collapsed stacks; top functions printed).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import (  # noqa: E402
    BrokerProcess,
    PySpy,
    consume_assigned,
    emit,
    machine_info,
    self_cpu_seconds,
    summarize_collapsed,
)

TOPIC = "fetchparts"
VALUE = b"x" * 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch_metrics(port: int) -> tuple[float, float]:
    """(Fetch requests answered, their summed handler seconds) from the broker's metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    count = total = 0.0
    for line in text.splitlines():
        if 'request="Fetch"' not in line:
            continue
        m = re.match(r"(\S+)\{[^}]*\} (\S+)$", line)
        if m is None:
            continue
        name, value = m.groups()
        if name == "kafka_network_requestmetrics_totaltime_seconds_count":
            count += float(value)
        elif name == "kafka_network_requestmetrics_totaltime_seconds_sum":
            total += float(value)
    return count, total


# The most partitions one request may create in a topic: Kafka's controller writes at most
# 10,000 records per operation (a topic's TopicRecord + one PartitionRecord per partition), on
# snakka as on Kafka; a larger topic is grown by CreatePartitions of at most 10,000 more.
CREATE_STEP = 9_999


def create_topic(bootstrap: str, partitions: int, topic: str = TOPIC) -> None:
    """One topic of ``partitions`` (created, then grown in steps Kafka's controller accepts);
    librdkafka's socket.timeout.ms raised (creating 10,000 partitions can take longer than its
    60 s default on a loaded machine; 300 s is its maximum)."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300_000})
    made = min(partitions, CREATE_STEP)
    for f in admin.create_topics([NewTopic(topic, num_partitions=made, replication_factor=1)],
                                 operation_timeout=600, request_timeout=600).values():
        f.result(timeout=600)
    while made < partitions:
        made = min(partitions, made + CREATE_STEP + 1)
        for f in admin.create_partitions([NewPartitions(topic, made)],
                                         operation_timeout=600, request_timeout=600).values():
            f.result(timeout=600)


def produce(bootstrap: str, records: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                  "queue.buffering.max.messages": 1_000_000})
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(TOPIC, VALUE)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    if p.flush(300):
        raise RuntimeError("produce did not complete")
    return time.perf_counter() - t0


def run(partitions: int, records: int, rounds: int, spy_dir: Path | None, out: Any,
        native: bool = False, keep: Path | None = None) -> None:
    data = str(keep / str(partitions)) if keep else tempfile.mkdtemp(prefix="snakka-fetchparts-")
    marker = Path(data) / "bench-fetch-partitions.done"
    mport = free_port()
    try:
        with BrokerProcess(config={"metrics.port": str(mport)}, data_dir=data) as b:
            create_s = produce_s = None
            if not marker.exists():
                t0 = time.perf_counter()
                create_topic(b.bootstrap, partitions)
                create_s = round(time.perf_counter() - t0, 3)
                produce_s = round(produce(b.bootstrap, records), 3)
                if keep:
                    marker.write_text(f"{records}\n")
            elif int(marker.read_text()) != records:
                raise SystemExit(f"{data} holds {marker.read_text().strip()} records")
            for r in range(rounds):
                n0, s0 = fetch_metrics(mport)
                cpu0, self0 = b.cpu_seconds(), self_cpu_seconds()
                if spy_dir is not None and r == 0:
                    spy_dir.mkdir(parents=True, exist_ok=True)
                    path = spy_dir / f"fetch-{partitions}.txt"
                    with PySpy(b.pid, path, native=native):
                        got, elapsed = consume_assigned(b.bootstrap, TOPIC, partitions, records)
                else:
                    path = None
                    got, elapsed = consume_assigned(b.bootstrap, TOPIC, partitions, records)
                cpu = b.cpu_seconds() - cpu0
                client = self_cpu_seconds() - self0
                n1, s1 = fetch_metrics(mport)
                emit({"type": "fetch-partitions", "partitions": partitions, "round": r + 1,
                      "records": records, "consumed": got, "rec_s": round(got / elapsed),
                      "elapsed_s": round(elapsed, 3), "broker_cpu_s": round(cpu, 3),
                      "client_cpu_s": round(client, 3), "fetches": int(n1 - n0),
                      "fetch_handler_s": round(s1 - s0, 3),
                      "create_s": create_s, "produce_s": produce_s, "restarted": keep is not None
                      and create_s is None,
                      "load1": round(os.getloadavg()[0], 2)}, out)
                if path is not None:
                    top = summarize_collapsed(path, top=30)
                    emit({"type": "profile", "partitions": partitions, "file": str(path),
                          **top}, out)
    finally:
        if not keep:
            shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=lambda s: [int(x) for x in s.split(",") if x],
                    default=[10000])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--py-spy", type=Path, metavar="DIR")
    ap.add_argument("--native", action="store_true",
                    help="py-spy --native: C frames too (the garbage collector's, say)")
    ap.add_argument("--data-dir", type=Path,
                    help="keep the data in DIR/<partitions> and reuse it in later runs (the "
                         "broker then starts on it: its partitions are loaded at start-up, "
                         "not created while it runs)")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    out = open(args.json_out, "a") if args.json_out else None
    emit({"type": "machine", **machine_info(), "load": os.getloadavg()}, out)
    for n in args.partitions:
        run(n, args.records, args.rounds, args.py_spy, out, args.native, args.data_dir)
    if out:
        out.close()


if __name__ == "__main__":
    main()
