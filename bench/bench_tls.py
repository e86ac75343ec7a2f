"""Produce/consume throughput over PLAINTEXT vs SSL vs SASL_SSL, snakka and the reference Kafka,
in one run.

    .venv/bin/python bench/bench_tls.py                  # snakka, and Kafka 4.0 if present
    .venv/bin/python bench/bench_tls.py --quick          # 5x fewer records (< 2 min in all)
    .venv/bin/python bench/bench_tls.py --no-reference   # snakka only
    .venv/bin/python bench/bench_tls.py --repeat 3       # median of 3 per case

Brokers:

- **snakka**: one ``python -m snakka serve`` subprocess (bench/common.py BrokerProcess) with
  three listeners: ``PLAINTEXT``, ``SSL`` and ``SASL_SSL`` (SCRAM-SHA-512; the user is made with
  AlterUserScramCredentials by a PLAIN admin). TLS with a PEM key store from
  tests/security/certs.py (an EC P-256 key; certificates generated into a temporary directory
  at start).
- **kafka-4.0**: the reference Apache Kafka 4.0 of ../shared/kafka-reference (when it and
  ``java`` are present, unless ``--no-reference``), started by kafka-ref.sh with an SSL listener
  added through ``KREF_EXTRA`` (``ssl.keystore.type=PEM``, the same key store file): PLAINTEXT
  and SSL.

Cases: 100-byte records (``small``: 1,000,000; 200,000 with --quick) and 10 KiB records
(``large``: 50,000, i.e. 500 MiB; 10,000 with --quick), acks=1, one partition, a fresh topic per case. The
client is confluent-kafka (librdkafka) as in bench/bench_produce_consume.py: producer with
linger.ms=5, batch.size=1 MB, no compression; produce time is first produce() -> flush()
returned. Consumer: assign() at the beginning, 50 MB fetches, timed from assign() to the last
record on a consumer that has already connected (a watermark query, which also checks the
record count). The TLS session is set up outside the clock in both phases, so the numbers are
the cost of encrypting the data path, not of handshakes. Broker CPU seconds per phase are read
from /proc (for Kafka: the JVM's pid from kafka-ref.sh's pid file).

Output: one JSON line per case (bench/common.py emit(), also to ``--json-out``), then a table
with each protocol's throughput relative to the same broker's PLAINTEXT.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = Path(__file__).resolve().parents[1]

from common import (  # noqa: E402
    BrokerProcess,
    emit,
    machine_info,
    proc_cpu_seconds,
    self_cpu_seconds,
)

MiB = 1024 * 1024
SCENARIOS = {"small": (1_000_000, 100), "large": (50_000, 10 * 1024)}
QUICK_DIVISOR = 5
PRODUCE_TIMEOUT_S = 300.0
CONSUME_TIMEOUT_S = 300.0
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')
SCRAM_USER, SCRAM_PASSWORD = "bench", "bench-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Target:
    """One broker listener as a client sees it: bootstrap string and client configs."""

    def __init__(self, broker: str, protocol: str, bootstrap: str, config: dict[str, str],
                 pid: int) -> None:
        self.broker, self.protocol, self.bootstrap = broker, protocol, bootstrap
        self.config, self.pid = config, pid


def client_configs(ca: Path) -> dict[str, dict[str, str]]:
    ssl_ = {"security.protocol": "SSL", "ssl.ca.location": str(ca)}
    return {"PLAINTEXT": {}, "SSL": ssl_,
            "SASL_SSL": {**ssl_, "security.protocol": "SASL_SSL",
                         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": SCRAM_USER,
                         "sasl.password": SCRAM_PASSWORD}}


def add_scram_user(bootstrap: str, ca: Path) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(ca), "sasl.mechanism": "PLAIN",
                         "sasl.username": "admin", "sasl.password": "admin-secret",
                         "log_level": 3})
    fs = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        SCRAM_PASSWORD.encode())])
    for f in fs.values():
        f.result(timeout=30)


def create_topic(t: Target, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": t.bootstrap, **t.config, "log_level": 3})
    fs = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                             operation_timeout=30, request_timeout=30)
    fs[topic].result(timeout=30)


def produce(t: Target, topic: str, n: int, size: int) -> dict:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": t.bootstrap, **t.config, "acks": "1", "linger.ms": 5,
                  "batch.size": 1_000_000, "compression.type": "none",
                  "queue.buffering.max.messages": max(100_000, min(n + 1000, 2_000_000)),
                  "queue.buffering.max.kbytes": 2_097_151,
                  "message.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000)})
    # Connect (TLS handshake, SASL) and learn the leader outside the clock.
    p.list_topics(topic, timeout=30)
    value = random.Random(1).randbytes(size)
    errors: list[str] = []
    delivered = [0]

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered[0] += 1

    produce_, poll = p.produce, p.poll
    deadline = time.monotonic() + PRODUCE_TIMEOUT_S
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                produce_(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.01)
                if time.monotonic() > deadline:
                    raise TimeoutError("produce timed out") from None
        if i & 0x3FFF == 0:
            poll(0)
    remaining = p.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - t0
    if remaining or errors or delivered[0] != n:
        raise RuntimeError(f"produce incomplete: {remaining} unflushed, {len(errors)} errors "
                           f"(e.g. {errors[:3]}), {delivered[0]}/{n} delivered")
    return {"produce_s": round(elapsed, 3), "produce_rec_s": round(n / elapsed),
            "produce_mb_s": round(n * size / MiB / elapsed, 1)}


def consume(t: Target, topic: str, n: int) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    fetch_max = 50 * MiB
    c = Consumer({"bootstrap.servers": t.bootstrap, **t.config, "group.id": "bench-unused",
                  "enable.auto.commit": False, "enable.partition.eof": False,
                  "fetch.queue.backoff.ms": 1, "fetch.wait.max.ms": 100,
                  "fetch.max.bytes": fetch_max, "max.partition.fetch.bytes": fetch_max,
                  "receive.message.max.bytes": fetch_max + MiB,
                  "queued.max.messages.kbytes": 1024 * 1024, "queued.min.messages": 1_000_000})
    got = nbytes = 0
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
        if high != n:
            raise RuntimeError(f"topic holds {high} records, {n} produced")
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while got < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {got}/{n} records before the deadline")
            for m in c.consume(num_messages=min(n - got, 100_000), timeout=0.05):
                if m.error():
                    raise RuntimeError(f"consumer error: {m.error()}")
                nbytes += len(m)
                got += 1
        elapsed = time.perf_counter() - t0
    finally:
        c.close()
    return {"consume_s": round(elapsed, 3), "consume_rec_s": round(got / elapsed),
            "consume_mb_s": round(nbytes / MiB / elapsed, 1)}


def run_case(t: Target, scenario: str, n: int, size: int, out, warm_up: bool = False) -> dict:
    topic = f"bench-{t.protocol.lower()}-{scenario}-{uuid.uuid4().hex[:6]}"
    create_topic(t, topic)
    res: dict = {"type": "run", "broker": t.broker, "protocol": t.protocol,
                 "scenario": scenario, "records": n, "record_bytes": size,
                 "loadavg_1m": round(os.getloadavg()[0], 2)}
    for phase, fn in (("produce", lambda: produce(t, topic, n, size)),
                      ("consume", lambda: consume(t, topic, n))):
        bcpu0, ccpu0 = proc_cpu_seconds(t.pid), self_cpu_seconds()
        res.update(fn())
        res[f"{phase}_broker_cpu_s"] = round(proc_cpu_seconds(t.pid) - bcpu0, 2)
        res[f"{phase}_client_cpu_s"] = round(self_cpu_seconds() - ccpu0, 2)
    if not warm_up:
        emit(res, out)
    return res


def run_all(targets: list[Target], sizes: dict[str, tuple[int, int]], scenarios: list[str],
            repeat: int, out) -> list[dict]:
    """A warm-up pass first (each listener, a quarter of the small case, not reported: the
    JVM's JIT, librdkafka's and OpenSSL's first allocations), then every case."""
    for t in targets:
        run_case(t, "warmup", sizes["small"][0] // 4, sizes["small"][1], out, warm_up=True)
    return [run_case(t, scenario, *sizes[scenario], out)
            for _ in range(repeat) for scenario in scenarios for t in targets]


def snakka_broker(tls) -> tuple[BrokerProcess, dict[str, int]]:
    ports = {"SSL": free_port(), "SASL_SSL": free_port()}
    b = BrokerProcess({
        "listeners": f"PLAINTEXT://localhost:0,SSL://localhost:{ports['SSL']},"
                     f"SASL_SSL://localhost:{ports['SASL_SSL']}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN", "sasl.jaas.config": PLAIN_JAAS,
        **tls.broker_config()})
    b.start()
    ports["PLAINTEXT"] = b.port
    return b, ports


def reference_broker(tls):
    """kafka-ref.sh's broker with an SSL listener beside PLAINTEXT (KREF_EXTRA: later lines
    win in Java Properties), or (None, reason)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import reference_kafka

    reason = reference_kafka.skip_reason()
    if reason:
        return None, reason
    def extra(port: int) -> dict[str, str]:
        ssl_port = free_port()
        while ssl_port in (port, port + 1):
            ssl_port = free_port()
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 1},"
                         f"SSL://127.0.0.1:{ssl_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},"
                                    f"CONTROLLER://127.0.0.1:{port + 1},"
                                    f"SSL://127.0.0.1:{ssl_port}",
            "listener.security.protocol.map":
                "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.server_keystore),
        }

    # ReferenceKafka.start chooses the ports again if one was taken before Kafka bound it.
    k = reference_kafka.ReferenceKafka(extra).start()
    k.ssl_port = int(k.extra["listeners"].rsplit(":", 1)[1])
    return k, None


def print_table(rows: list[dict]) -> None:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["broker"], r["scenario"], r["protocol"]), []).append(r)
    med = {key: {k: statistics.median(r[k] for r in rs) for k in
                 ("produce_rec_s", "produce_mb_s", "consume_rec_s", "consume_mb_s",
                  "produce_broker_cpu_s", "consume_broker_cpu_s")}
           for key, rs in groups.items()}
    reps = max(len(rs) for rs in groups.values())
    if reps > 1:
        print(f"\nmedian of {reps} runs per case:")
    hdr = (f"{'broker':<10} {'records':<12} {'protocol':<10} {'prod rec/s':>11} {'prod MB/s':>9}"
           f" {'vs PT':>6} {'cons rec/s':>11} {'cons MB/s':>9} {'vs PT':>6}"
           f" {'brk cpu p/c s':>14}")
    print("\n" + hdr + "\n" + "-" * len(hdr))
    for (broker, scenario, protocol), m in med.items():
        base = med.get((broker, scenario, "PLAINTEXT"))
        rel_p = f"{m['produce_rec_s'] / base['produce_rec_s']:.2f}" if base else "-"
        rel_c = f"{m['consume_rec_s'] / base['consume_rec_s']:.2f}" if base else "-"
        size = groups[(broker, scenario, protocol)][0]["record_bytes"]
        n = groups[(broker, scenario, protocol)][0]["records"]
        print(f"{broker:<10} {f'{n:,} x {size} B':<12} {protocol:<10} "
              f"{round(m['produce_rec_s']):>11,} {m['produce_mb_s']:>9.1f} {rel_p:>6} "
              f"{round(m['consume_rec_s']):>11,} {m['consume_mb_s']:>9.1f} {rel_c:>6} "
              f"{m['produce_broker_cpu_s']:>6.2f}/{m['consume_broker_cpu_s']:<6.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_DIVISOR}x fewer records (under ~2 minutes with the reference)")
    ap.add_argument("--scenarios", default="small,large", help="comma list: small,large")
    ap.add_argument("--protocols", default="PLAINTEXT,SSL,SASL_SSL")
    ap.add_argument("--repeat", type=int, default=1, help="run every case N times")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the reference Kafka even when it is present")
    ap.add_argument("--json-out", type=Path, help="also append the JSON lines to this file")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from tests.security.certs import make_material

    sizes = {k: ((n // QUICK_DIVISOR) if args.quick else n, s) for k, (n, s) in SCENARIOS.items()}
    protocols = args.protocols.split(",")
    scenarios = args.scenarios.split(",")
    out = open(args.json_out, "a") if args.json_out else None
    rows: list[dict] = []
    t_start = time.monotonic()
    try:
        emit({"type": "machine", **machine_info(), "argv": sys.argv[1:] if argv is None
              else argv, "loadavg": os.getloadavg()}, out)
        with tempfile.TemporaryDirectory(prefix="bench-tls-") as d:
            tls = make_material(Path(d))
            configs = client_configs(tls.ca)
            b, ports = snakka_broker(tls)
            try:
                add_scram_user(f"localhost:{ports['SASL_SSL']}", tls.ca)
                targets = [Target("snakka", p, f"localhost:{ports[p]}", configs[p], b.pid)
                           for p in protocols]
                rows += run_all(targets, sizes, scenarios, args.repeat, out)
            finally:
                b.close()
            if not args.no_reference:
                k, reason = reference_broker(tls)
                if k is None:
                    print(f"reference Kafka skipped: {reason}", file=sys.stderr)
                else:
                    try:
                        pid = int((Path(k.dir) / "kafka.pid").read_text())
                        ref = {"PLAINTEXT": k.bootstrap_servers,
                               "SSL": f"127.0.0.1:{k.ssl_port}"}
                        targets = [Target("kafka-4.0", p, ref[p], configs[p], pid)
                                   for p in protocols if p in ref]
                        rows += run_all(targets, sizes, scenarios, args.repeat, out)
                    finally:
                        k.stop()
        print_table(rows)
        print(f"\ntotal {time.monotonic() - t_start:.0f} s; load average now "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        if out is not None:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
