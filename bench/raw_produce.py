"""A minimal raw Produce loop: how fast a broker takes in small records from a client that is not
the bottleneck (issue 15, "small records": who limits confluent-kafka's produce rec/s?).

    .venv/bin/python bench/raw_produce.py --bootstrap localhost:9092 --topic t --partitions 4 \\
        --records 1000000

The record batches are encoded ONCE, before the clock starts, with snakka's own v2 batch encoder
(``snakka.records.record.build_batch``) and Produce request codec (``snakka.protocol``): per
partition ``DISTINCT_BATCHES`` different batches (their values differ), each as large as
librdkafka makes them (module constant ``BATCH_BYTES``: librdkafka's ``batch.size``, 1,000,000
bytes, which ck-small's producer sets too; with 100 B records it is reached before
``batch.num.messages``' 10,000), then sent in turn until the partition has its share.
The producer is not idempotent (producer id -1, no sequence numbers), so the broker has no
reason to refuse a batch it has seen before: each copy is validated (CRC, record walk) and
appended again, at new offsets, as a retried batch of a plain producer would be.

One connection per partition (a thread each; sending and the tiny acks=1 responses release
the GIL), Produce v7 (the last version before flexible headers, which both brokers accept),
``IN_FLIGHT`` requests outstanding per connection (the Java producer's
``max.in.flight.requests.per.connection`` default): a response received -> the next request
sent. Every response is decoded with snakka's codec and its partition error checked; the
acknowledged record count is what the loop reports, and the caller checks the log end offsets.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass

from snakka.protocol import decode_response_header, encode_request
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.protocol.messages.produce_response import ProduceResponse
from snakka.records.batch import HEADER_SIZE
from snakka.records.record import Record, build_batch, encode_record

PRODUCE_KEY = 0
PRODUCE_VERSION = 7            # the last non-flexible version; Kafka 4.0 accepts 3..12
BATCH_BYTES = 1_000_000        # librdkafka's batch.size (its default and ck-small's setting)
BATCH_RECORDS = 10_000         # librdkafka's batch.num.messages default
DISTINCT_BATCHES = 4           # different pre-encoded batches per partition, sent in turn
IN_FLIGHT = 5                  # requests outstanding per connection (Java's default)
ACK_TIMEOUT_MS = 30_000        # the Produce request's timeout_ms
MiB = 1024 * 1024


def records_per_batch(value_size: int, batch_bytes: int = BATCH_BYTES) -> int:
    """How many keyless records of ``value_size`` bytes fit a batch of ``batch_bytes`` (the
    batch header included), as librdkafka fills a batch up to batch.size, and at most
    ``BATCH_RECORDS`` (its batch.num.messages)."""
    value = b"\0" * value_size
    size, n = HEADER_SIZE, 0
    while n < BATCH_RECORDS:
        one = len(encode_record(n, 0, None, value))   # the offset delta's varint grows
        if size + one > batch_bytes:
            break
        size += one
        n += 1
    return max(1, n)


def encode_produce(correlation_id: int, topic: str, partition: int, batch: bytes,
                   acks: int = 1, client_id: str = "raw-produce") -> bytes:
    """A size-prefixed Produce v7 request carrying one batch for one partition."""
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=ACK_TIMEOUT_MS,
                         topic_data=[TopicProduceData(name=topic, partition_data=[
                             PartitionProduceData(index=partition, records=batch)])])
    return encode_request(correlation_id, client_id, PRODUCE_VERSION, req)


def build_batches(value_size: int, count: int, per_batch: int, seed: int) -> list[bytes]:
    """``count`` distinct batches of ``per_batch`` records (values from a seeded random
    stream), timestamped now (CreateTime)."""
    rnd = random.Random(seed)
    now = int(time.time() * 1000)
    return [build_batch([Record(timestamp=now, value=rnd.randbytes(value_size))
                         for _ in range(per_batch)]) for _ in range(count)]


@dataclass(frozen=True)
class PartitionPlan:
    """The pre-encoded requests of one partition: ``frames[i % len(frames)]`` carries
    ``per_batch`` records, ``sends`` of them, then ``last`` (a smaller batch) if any."""

    partition: int
    frames: list[bytes]
    per_batch: int
    sends: int
    last: bytes | None
    last_records: int

    @property
    def records(self) -> int:
        return self.per_batch * self.sends + self.last_records


def plan_partition(topic: str, partition: int, records: int, value_size: int,
                   per_batch: int | None = None, acks: int = 1) -> PartitionPlan:
    per_batch = per_batch or records_per_batch(value_size)
    per_batch = min(per_batch, records)
    sends, rest = divmod(records, per_batch)
    batches = build_batches(value_size, min(DISTINCT_BATCHES, sends), per_batch, seed=partition)
    frames = [encode_produce(i, topic, partition, b, acks) for i, b in enumerate(batches)]
    last = None
    if rest:
        tail = build_batches(value_size, 1, rest, seed=10_000 + partition)[0]
        last = encode_produce(len(frames), topic, partition, tail, acks)
    return PartitionPlan(partition, frames, per_batch, sends, last, rest)


def parse_produce_response(frame: bytes | memoryview) -> list[tuple[int, int, int]]:
    """(partition, error code, base offset) of every partition in a Produce v7 response frame
    (without its size prefix)."""
    _header, pos = decode_response_header(frame, PRODUCE_KEY, PRODUCE_VERSION)
    resp, _ = ProduceResponse.read(frame, pos, PRODUCE_VERSION)
    return [(p.index, p.error_code, p.base_offset)
            for t in resp.responses for p in t.partition_responses]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("the broker closed the connection")
        got += k
    return bytes(buf)


def _send_partition(bootstrap: str, plan: PartitionPlan, in_flight: int, go: threading.Event,
                    timeout_s: float, result: dict) -> None:
    host, port = bootstrap.rsplit(":", 1)
    schedule: list[tuple[bytes, int]] = [(plan.frames[i % len(plan.frames)], plan.per_batch)
                                         for i in range(plan.sends)]
    if plan.last is not None:
        schedule.append((plan.last, plan.last_records))
    acked = 0
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            result["ready"] = True
            go.wait()
            sent = 0
            pending: list[int] = []   # record counts of the requests in flight, in order
            while sent < len(schedule) and len(pending) < in_flight:
                sock.sendall(schedule[sent][0])
                pending.append(schedule[sent][1])
                sent += 1
            while pending:
                (size,) = struct.unpack(">i", _recv_exact(sock, 4))
                for part, err, _base in parse_produce_response(_recv_exact(sock, size)):
                    if part != plan.partition or err != 0:
                        raise RuntimeError(f"partition {part} answered error {err}")
                acked += pending.pop(0)
                if sent < len(schedule):
                    sock.sendall(schedule[sent][0])
                    pending.append(schedule[sent][1])
                    sent += 1
            result["end"] = time.monotonic()
    except Exception as e:  # reported to the caller, which raises it
        result["error"] = f"{type(e).__name__}: {e}"
    finally:
        result["acked"] = acked


def plan_topic(topic: str, partitions: int, records: int, value_size: int = 100,
               per_batch: int | None = None) -> list[PartitionPlan]:
    """``records`` records of ``value_size`` bytes spread evenly over ``partitions``, encoded."""
    shares = [records // partitions + (1 if p < records % partitions else 0)
              for p in range(partitions)]
    return [plan_partition(topic, p, shares[p], value_size, per_batch)
            for p in range(partitions) if shares[p]]


def raw_produce(bootstrap: str, plans: list[PartitionPlan], value_size: int = 100,
                in_flight: int = IN_FLIGHT, timeout_s: float = 600.0) -> dict:
    """Send the planned requests (one connection per partition, acks=1) as fast as the broker
    acknowledges them: rec/s from the release of the connected threads to the last
    acknowledgement."""
    go = threading.Event()
    results: list[dict] = [{} for _ in plans]
    threads = [threading.Thread(target=_send_partition,
                                args=(bootstrap, pl, in_flight, go, timeout_s, r), daemon=True)
               for pl, r in zip(plans, results, strict=True)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    while not all(r.get("ready") or "error" in r for r in results):
        if time.monotonic() > deadline:
            go.set()
            raise TimeoutError("raw produce: connections not ready")
        time.sleep(0.01)
    t0 = time.monotonic()
    go.set()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    errors = [r["error"] for r in results if "error" in r]
    if errors or any(t.is_alive() for t in threads):
        raise RuntimeError(f"raw produce failed: {errors or 'timed out'}")
    acked = sum(r["acked"] for r in results)
    elapsed = max(r["end"] for r in results) - t0
    return {"raw_produce_records": acked, "raw_produce_s": round(elapsed, 3),
            "raw_produce_rec_s": round(acked / elapsed),
            "raw_produce_mb_s": round(acked * value_size / MiB / elapsed, 1),
            "raw_batch_records": plans[0].per_batch if plans else 0,
            "raw_requests": sum(pl.sends + (pl.last is not None) for pl in plans),
            "raw_connections": len(plans), "raw_in_flight": in_flight}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--in-flight", type=int, default=IN_FLIGHT)
    args = ap.parse_args()
    plans = plan_topic(args.topic, args.partitions, args.records, args.value_size)
    print(json.dumps(raw_produce(args.bootstrap, plans, args.value_size, args.in_flight)))


if __name__ == "__main__":
    main()
