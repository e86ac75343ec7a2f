"""Shared pieces of the compaction integration tests (issue 13): a compacted topic's configs,
keyed writes with a model of the latest acknowledged value per key, and readers of a whole
partition from offset 0 with each real client.

Readers stop at the partition's high watermark, read once before they start: compaction leaves
gaps in offsets but never removes the last record of the log (the active segment is never
cleaned), so a reader has reached the end when it has seen offset ``end - 1``.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from .helpers import KCAT, ck_end_offsets, run_async

Seen = tuple[int, bytes | None, bytes | None]  # (offset, key, value) as a client read it


def compacted_topic_config(segment_bytes: int, **extra: str) -> dict[str, str]:
    """A topic the cleaner visits soon: compact, small segments, any dirt qualifies."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(segment_bytes),
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100",
        **extra,
    }


def latest_per_key(seen: Iterable[Seen]) -> dict[bytes, bytes]:
    """What a consumer that read ``seen`` in order holds: the last value per key, a tombstone
    (value None) deleting the key."""
    out: dict[bytes, bytes] = {}
    for _, k, v in seen:
        assert k is not None, "a keyless record in a compacted topic"
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def check_offsets(seen: list[Seen], end: int) -> None:
    offsets = [o for o, _, _ in seen]
    assert offsets == sorted(set(offsets)), "offsets not strictly increasing"
    assert not offsets or offsets[-1] == end - 1, (offsets[-1:], end)


class KeyedWriter:
    """confluent-kafka producer (acks=all, idempotent) of keyed values and tombstones; keeps
    the latest *acknowledged* value per key (a failed delivery leaves the model as it was:
    the write may or may not be in the log, so such keys are remembered as uncertain)."""

    def __init__(self, bootstrap: str, topic: str, **extra) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        # Small batches (librdkafka's default batch.size is 1 MB): many batches across many
        # segments, as a steady stream of writes makes, not one batch the cleaner keeps whole.
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5,
                                  "batch.num.messages": 50, "message.timeout.ms": 30000,
                                  **extra})
        self.acked: dict[bytes, bytes | None] = {}
        self.order: dict[bytes, int] = {}  # key -> offset of its latest acknowledged write
        self.uncertain: set[bytes] = set()
        self.sent = 0

    def _delivered(self, err, msg) -> None:
        k = msg.key()
        if err is not None:
            self.uncertain.add(k)
            return
        if msg.offset() >= self.order.get(k, -1):
            self.order[k] = msg.offset()
            self.acked[k] = msg.value()

    def write(self, key: bytes, value: bytes | None) -> None:
        while True:
            try:
                self.producer.produce(self.topic, key=key, value=value, partition=0,
                                      on_delivery=self._delivered)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.sent += 1
        self.producer.poll(0)

    def flush(self, timeout: float = 60) -> None:
        left = self.producer.flush(timeout)
        assert left == 0, f"{left} writes not acknowledged within {timeout}s"

    def expected(self) -> dict[bytes, bytes]:
        return {k: v for k, v in self.acked.items() if v is not None}


# -- readers, one per real client --------------------------------------------------------
def end_offset(bootstrap: str, topic: str) -> int:
    return ck_end_offsets(bootstrap, topic, [0])[0][1]


def ck_read_all(bootstrap: str, topic: str, end: int, timeout: float = 120) -> list[Seen]:
    from confluent_kafka import Consumer, TopicPartition

    from .helpers import ck_consumer_config

    c = Consumer(ck_consumer_config(bootstrap))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[Seen] = []
        deadline = time.monotonic() + timeout
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            for m in c.consume(num_messages=10000, timeout=0.5):
                if m.error():
                    raise AssertionError(f"confluent-kafka consumer error: {m.error()}")
                out.append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def kp_read_all(bootstrap: str, topic: str, end: int, timeout: float = 120) -> list[Seen]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        out: list[Seen] = []
        deadline = time.monotonic() + timeout
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500, max_records=10000).values():
                out.extend((m.offset, m.key, m.value) for m in msgs)
        return out
    finally:
        c.close()


def aiokafka_read_all(bootstrap: str, topic: str, end: int, timeout: float = 120) -> list[Seen]:
    async def main() -> list[Seen]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            out: list[Seen] = []
            deadline = time.monotonic() + timeout
            while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
                got = await c.getmany(tp, timeout_ms=500, max_records=10000)
                out.extend((m.offset, m.key, m.value) for m in got.get(tp, []))
            return out
        finally:
            await c.stop()

    return run_async(main(), timeout + 30)


def kcat_read_all(bootstrap: str, topic: str, end: int, timeout: float = 120) -> list[Seen]:
    """kcat -C from offset 0 to the end (-e), one line per record: offset, key length, key,
    value length, value (lengths tell a null, -1, from an empty value; values are hex so any
    byte survives)."""
    fmt = r"%o %K %k %S %s\n"
    proc = subprocess.run(
        [KCAT, "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e",
         "-q", "-f", fmt], capture_output=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out: list[Seen] = []
    for line in proc.stdout.split(b"\n"):
        if not line:
            continue
        off, klen, rest = line.split(b" ", 2)
        key = None if int(klen) < 0 else rest[: int(klen)]
        rest = rest[max(int(klen), 0) + 1:] if int(klen) >= 0 else rest[1:]
        vlen, _, value = rest.partition(b" ")
        out.append((int(off), key, None if int(vlen) < 0 else value[: int(vlen)]))
    assert not out or out[-1][0] == end - 1, (out[-1:], end)
    return out


def leftover_swap_files(data_dir: str, topic: str) -> list[Path]:
    """Files of an interrupted clean (Kafka's ``.cleaned`` and ``.swap`` suffixes)."""
    d = Path(data_dir) / f"{topic}-0"
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir()
                  if p.name.endswith(".cleaned") or p.name.endswith(".swap"))

