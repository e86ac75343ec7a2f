"""Transactional produce throughput vs non-transactional, snakka and the reference Kafka, one run.

    .venv/bin/python bench/bench_transactions.py                # snakka, and Kafka if present
    .venv/bin/python bench/bench_transactions.py --no-reference # snakka only
    .venv/bin/python bench/bench_transactions.py --seconds 2    # per-measurement budget

For each broker (a fresh ``python -m snakka serve`` subprocess; the reference Apache Kafka 4.0
of ../shared/kafka-reference when it and java are present) and each transaction size of 1, 100
and 1000 records (100-byte values, a topic of 3 partitions, records spread round-robin):

- **transactional**: one confluent-kafka producer (``transactional.id``, linger.ms=5) runs
  begin_transaction / produce x size / commit_transaction back to back for ``--seconds`` (at
  least 3 transactions); reported as transactions/s and records/s. Every commit waits for its
  markers, so small transactions measure the commit round trip, large ones the data path.
- **plain**: the same number of records by a non-transactional producer (acks=all, idempotence
  on, linger.ms=5), produce all then flush, timed after a one-record warm-up (connections,
  metadata, producer id: what init_transactions does before the transactional timing); records/s. The ratio ``txn_vs_plain`` is the
  transactional records/s over the plain records/s.

Results: one JSON line per measurement (bench/common.py emit(), also to ``--json-out``), then a
table. Budget: with the default ``--seconds 3`` a run is about 25 s per broker plus the
reference broker's start-up (7-25 s).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import BrokerProcess, emit, machine_info  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZES = (1, 100, 1000)
VALUE = b"x" * 100
PARTITIONS = 3


def _create_topic(bs: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30)[topic].result(30)


def _transactional(bs: str, topic: str, size: int, seconds: float) -> dict:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "transactional.id": f"bench-{topic}",
                  "linger.ms": 5, "queue.buffering.max.messages": 2_000_000})
    p.init_transactions(30)
    txns = 0
    t0 = time.perf_counter()
    while txns < 3 or time.perf_counter() - t0 < seconds:
        p.begin_transaction()
        for i in range(size):
            p.produce(topic, VALUE, partition=i % PARTITIONS)
        p.commit_transaction(60)
        txns += 1
    wall = time.perf_counter() - t0
    return {"txns": txns, "records": txns * size, "wall_s": round(wall, 3),
            "txn_per_s": round(txns / wall, 1), "records_per_s": round(txns * size / wall)}


def _plain(bs: str, topic: str, records: int) -> dict:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "acks": "all",
                  "enable.idempotence": True, "queue.buffering.max.messages": 2_000_000})
    # Warm-up (connections, metadata, producer id), as init_transactions is for the other side.
    p.produce(topic, VALUE, partition=0)
    assert p.flush(30) == 0
    t0 = time.perf_counter()
    for i in range(records):
        p.produce(topic, VALUE, partition=i % PARTITIONS)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    wall = time.perf_counter() - t0
    return {"records": records, "wall_s": round(wall, 3), "records_per_s": round(records / wall)}


def measure(broker: str, bs: str, seconds: float, out) -> list[dict]:
    rows = []
    for size in SIZES:
        topic = f"bench-txn-{size}"
        _create_topic(bs, topic)
        _create_topic(bs, topic + "-plain")
        txn = _transactional(bs, topic, size, seconds)
        plain = _plain(bs, topic + "-plain", txn["records"])
        row = {"type": "txn", "broker": broker, "records_per_txn": size, **txn,
               "plain_records_per_s": plain["records_per_s"], "plain_wall_s": plain["wall_s"],
               "txn_vs_plain": round(txn["records_per_s"] / plain["records_per_s"], 3)}
        emit(row, out)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="time budget of each transactional measurement")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the reference Kafka even when it is present")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    out = args.json_out.open("a") if args.json_out else None
    emit({"type": "machine", **machine_info()}, out)
    rows: list[dict] = []
    with BrokerProcess() as b:
        rows += measure("snakka", b.bootstrap, args.seconds, out)
    if not args.no_reference:
        sys.path.insert(0, str(ROOT / "tests"))
        import reference_kafka

        reason = reference_kafka.skip_reason()
        if reason:
            print(f"reference Kafka skipped: {reason}", file=sys.stderr)
        else:
            k = reference_kafka.ReferenceKafka().start()
            try:
                rows += measure("kafka-4.0", k.bootstrap_servers, args.seconds, out)
            finally:
                k.stop()
    print(f"\n{'broker':<10} {'rec/txn':>7} {'txn/s':>8} {'rec/s txn':>10} {'rec/s plain':>11}"
          f" {'txn/plain':>9}")
    for r in rows:
        print(f"{r['broker']:<10} {r['records_per_txn']:>7} {r['txn_per_s']:>8} "
              f"{r['records_per_s']:>10} {r['plain_records_per_s']:>11} {r['txn_vs_plain']:>9}")


if __name__ == "__main__":
    main()
