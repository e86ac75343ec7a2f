"""Sample data for the console's tests and screenshots, written and read with confluent-kafka."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bs: str, name: str, partitions: int = 3, config: dict[str, str] | None = None
                 ) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        f.result(timeout=30)


def produce(bs: str, topic: str, n: int, *, prefix: str = "") -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=f"{prefix}key-{i}".encode(),
                  value=json.dumps({"order": i, "item": f"{prefix}thing-{i % 7}",
                                    "amount": round(i * 1.25, 2)}).encode(),
                  headers=[("source", b"tests"), ("seq", str(i).encode())])
    assert p.flush(30) == 0


def consume(bs: str, topic: str, group: str, n: int) -> None:
    """Read ``n`` records of ``topic`` in ``group`` and commit; the group is then empty."""
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < n:
            assert time.monotonic() < deadline, f"consumed {got}/{n}"
            m = c.poll(1)
            if m is not None and not m.error():
                got += 1
        c.commit(asynchronous=False)
    finally:
        c.close()


def committed(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def watermarks(bs: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "watermarks"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                for p in range(partitions)}
    finally:
        c.close()
