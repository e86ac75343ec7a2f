"""Shared helpers for the integration tests: real, unmodified clients against real brokers.

Nothing here talks to the broker's internals: records are generated, produced and consumed
through the public Kafka protocol (kafka-python, confluent-kafka, aiokafka, kcat, and snakka's
own protocol client for the few white-box requests the real clients cannot express).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
# The console script installed next to the interpreter running the tests (.venv/bin/snakka).
SNAKKA = str(Path(sys.executable).with_name("snakka"))

Header = tuple[str, bytes | None]


# -- waiting -------------------------------------------------------------------------------
def wait_until(pred: Callable[[], object], timeout: float, what: str, interval: float = 0.02):
    """Poll ``pred`` (bounded, short interval) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_port(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0]
    if first.startswith("["):
        h, _, p = first[1:].partition("]:")
        return h, int(p)
    h, _, p = first.rpartition(":")
    return h, int(p)


def run(cmd: list[str], *, input: bytes | None = None, timeout: float = 120,
        env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a process to completion (bounded), returning stdout/stderr as bytes."""
    p = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd[0]} exited {p.returncode}\nstdout: {p.stdout[-2000:]!r}\n"
                             f"stderr: {p.stderr[-4000:]!r}")
    return p


# -- records -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Rec:
    """A record as sent: what every consumer must give back byte for byte."""

    key: bytes
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int | None  # None: the client stamps it (kcat)


@dataclass(frozen=True, slots=True)
class Got:
    """A record as a consumer returned it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int


KCAT_HEADERS: tuple[Header, ...] = (("source", b"kcat"), ("trace", b"00-af7651916cd43dd8"),
                                    ("source", b"dup-key"))
_EVENTS = ("click", "view", "purchase", "refund", "login", "logout", "search")
_WORDS = ("order", "shipped", "to", "the", "customer", "with", "express", "delivery", "and",
          "a", "discount", "of", "ten", "percent", "because", "of", "delay", "in", "warehouse",
          "Ünïcode", "naïve", "café", "日本", "emoji-free", "payment", "pending", "{braces}",
          "[brackets]", "'quotes'", "semi;colon", "slash/path", "back\\slash", "tab\tchar")


def make_records(n: int, seed: int, *, text_only: bool = False, null_header: bool = True,
                 base_ts: int | None = None) -> list[Rec]:
    """``n`` realistic records, every one keyed and every (key, value) pair unique.

    Values are 50-200 bytes; one in four is binary (all 256 byte values) unless ``text_only``
    (kcat reads lines of text). A few values are empty, and one is null (not with
    ``text_only``: kcat cannot express both, see test_clients_roundtrip). Keys repeat (a few
    thousand users) so a key's records share a partition; the records with empty or null
    values carry unique keys so that every record stays identifiable. Headers vary: none,
    several, duplicate header keys, binary values, an empty value and (not with
    ``text_only``, nor without ``null_header``: kafka-python refuses to send one) a null value.
    Timestamps are explicit, start an hour ago and are not
    monotonic (they jitter by up to a few seconds), unless ``text_only`` (then None).
    """
    rnd = random.Random(seed)
    if base_ts is None:
        base_ts = now_ms() - 3_600_000
    specials_empty = {7, n // 3, n - 2}
    special_null = n // 2 if not text_only else -1
    out = []
    for i in range(n):
        if i in specials_empty or i == special_null:
            key = f"special-{i}".encode()
            value: bytes | None = b"" if i in specials_empty else None
        else:
            key = f"user-{rnd.randrange(4000):04d}".encode()
            size = rnd.randint(50, 200)
            if not text_only and i % 4 == 1:
                value = i.to_bytes(4, "big") + rnd.randbytes(size - 4)
            else:
                # JSON-ish text, as compressible as real events (random characters would
                # defeat LZ-only codecs, and librdkafka then sends batches uncompressed).
                text = (f'{{"seq":{i},"user":"{key.decode()}","event":"{rnd.choice(_EVENTS)}",'
                        f'"amount":{rnd.randint(0, 99999) / 100},"note":"')
                while len(text) < size - 2:
                    text += rnd.choice(_WORDS) + " "
                value = (text[:size - 2] + '"}').encode()
        if text_only:
            headers = KCAT_HEADERS
            ts = None
        else:
            shape = i % 5
            if shape == 0:
                headers = ()
            elif shape == 1:
                headers = (("trace-id", rnd.randbytes(16)), ("content-type", b"application/json"))
            elif shape == 2:
                headers = (("seq", str(i).encode()), ("seq", b"again"), ("empty", b""))
            elif shape == 3:
                headers = (("bin", bytes(range(256))[rnd.randrange(200):]),)
            else:
                headers = (("ünïcode-ключ", "välue".encode()),)
            if i == n // 4:
                headers = (("null-header", None if null_header else b""), ("after", b"x"))
            ts = base_ts + i // 20 + rnd.randint(-3000, 3000)
        out.append(Rec(key, value, headers, ts))
    return out


def check_roundtrip(sent: list[Rec], got: list[Got], n_partitions: int, *,
                    acked: dict[int, tuple[int, int]] | None = None,
                    ts_window: tuple[int, int] | None = None) -> None:
    """Assert ``got`` is exactly ``sent``: byte-identical records, offsets contiguous from 0 in
    every partition, per-partition order kept, counts summing to len(sent).

    ``acked`` (index -> (partition, offset) from delivery reports) must match where each
    record was found. With ``ts_window`` (records stamped by the client) each timestamp must
    lie inside it instead of being equal to the sent one.
    """
    by_kv = {(r.key, r.value): i for i, r in enumerate(sent)}
    assert len(by_kv) == len(sent), "test data must have unique (key, value) pairs"
    per_part: dict[int, list[Got]] = defaultdict(list)
    for g in got:
        per_part[g.partition].append(g)
    counts = {p: len(v) for p, v in sorted(per_part.items())}
    assert set(per_part) <= set(range(n_partitions)), f"unexpected partitions {counts}"
    assert sum(counts.values()) == len(sent), (
        f"consumed {sum(counts.values())} records, sent {len(sent)}: per partition {counts}")
    problems: list[str] = []
    seen: Counter[int] = Counter()
    for p, recs in sorted(per_part.items()):
        offsets = [g.offset for g in recs]
        if offsets != list(range(len(recs))):
            bad = next(i for i, o in enumerate(offsets) if o != i)
            problems.append(f"partition {p}: offsets not contiguous from 0: position {bad} "
                            f"has offset {offsets[bad]} (around: {offsets[max(0, bad - 3):bad + 3]})")
        last = -1
        for g in recs:
            i = by_kv.get((g.key, g.value))
            if i is None:
                problems.append(f"partition {p} offset {g.offset}: record never sent: "
                                f"key={g.key!r} value={g.value[:40] if g.value else g.value!r}")
                continue
            seen[i] += 1
            r = sent[i]
            if g.headers != r.headers:
                problems.append(f"record #{i} at {p}/{g.offset}: headers {g.headers!r} != sent "
                                f"{r.headers!r}")
            if ts_window is not None:
                if not ts_window[0] <= g.timestamp <= ts_window[1]:
                    problems.append(f"record #{i} at {p}/{g.offset}: timestamp {g.timestamp} "
                                    f"outside the produce window {ts_window}")
            elif g.timestamp != r.timestamp:
                problems.append(f"record #{i} at {p}/{g.offset}: timestamp {g.timestamp} != "
                                f"sent {r.timestamp}")
            if i <= last:
                problems.append(f"partition {p}: order broken: record #{i} at offset "
                                f"{g.offset} after record #{last}")
            last = i
            if acked is not None and acked.get(i) != (p, g.offset):
                problems.append(f"record #{i}: acknowledged at {acked.get(i)}, found at "
                                f"{(p, g.offset)}")
            if len(problems) > 20:
                break
    dups = [i for i, c in seen.items() if c > 1]
    if dups:
        problems.append(f"{len(dups)} records consumed more than once, e.g. #{dups[:5]}")
    missing = len(sent) - len(seen)
    if missing and not problems:
        problems.append(f"{missing} records missing")
    assert not problems, "\n".join(problems[:20])


# -- confluent-kafka -----------------------------------------------------------------------
def ck_consumer_config(bootstrap: str, **extra) -> dict:
    """A confluent-kafka consumer for manual assignment only: no group protocol is used.

    librdkafka requires a group.id even for assign(); offsets are neither committed nor
    stored, so it has no reason to talk to a group coordinator.
    """
    cfg = {
        "bootstrap.servers": bootstrap,
        "group.id": "snakka-it-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": 0,
        "fetch.wait.max.ms": 100,
        "fetch.max.bytes": 50 * 1024 * 1024,
        "max.partition.fetch.bytes": 10 * 1024 * 1024,
        "queued.max.messages.kbytes": 256 * 1024,
    }
    cfg.update(extra)
    return cfg


def ck_consume(bootstrap: str, topic: str, partitions: Iterable[int], count: int,
               timeout: float = 60, start_offset: int | None = None, **extra) -> list[Got]:
    """Consume ``count`` records from the start of ``partitions`` (assign, no group)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(ck_consumer_config(bootstrap, **extra))
    try:
        off = OFFSET_BEGINNING if start_offset is None else start_offset
        c.assign([TopicPartition(topic, p, off) for p in partitions])
        out: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for m in c.consume(num_messages=10000, timeout=0.5):
                if m.error():
                    raise AssertionError(f"confluent-kafka consumer error: {m.error()}")
                out.append(Got(m.partition(), m.offset(), m.key(), m.value(),
                               tuple(m.headers() or ()), m.timestamp()[1]))
        return out
    finally:
        c.close()


def ck_read_to_end(bootstrap: str, topic: str, isolation: str, partition: int = 0) -> list[bytes]:
    """Every value of ``partition`` a confluent-kafka consumer of ``isolation.level``
    ``isolation`` reads up to the end of the partition (for read_committed, librdkafka's end is
    the last stable offset)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{isolation}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        out: list[bytes] = []
        for _ in range(300):  # bounded: each poll waits at most 0.2 s
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    return out
                raise AssertionError(str(m.error()))
            out.append(m.value())
        raise AssertionError(f"no end of partition; got {out}")
    finally:
        c.close()


def ck_admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def ck_create_topic(bootstrap: str, name: str, partitions: int,
                    config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    admin = ck_admin(bootstrap)  # must outlive its futures
    fs = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=30, request_timeout=30)
    fs[name].result(timeout=30)


def ck_alter_broker_configs(bootstrap: str, changes: dict[str, str | None],
                            node: str = "1") -> None:
    """SET (a value) or DELETE (None) dynamic configs of broker ``node`` with confluent-kafka's
    IncrementalAlterConfigs, as ``kafka-configs.sh --entity-type brokers --entity-name <node>``
    (confluent-kafka cannot name the cluster default)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource(ConfigResource.Type.BROKER, node, incremental_configs=[
        ConfigEntry(k, "" if v is None else v, incremental_operation=(
            AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET))
        for k, v in changes.items()])
    admin = ck_admin(bootstrap)  # must outlive its futures
    admin.incremental_alter_configs([res])[res].result(30)


def ck_end_offsets(bootstrap: str, topic: str, partitions: Iterable[int]) -> dict[int, tuple[int, int]]:
    """(low, high) watermarks per partition, queried from the broker."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(ck_consumer_config(bootstrap))
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                for p in partitions}
    finally:
        c.close()


# -- snakka's protocol client (white-box requests) -----------------------------------------
async def raw_connect(bootstrap: str):
    from snakka.client.connection import KafkaConnection

    h, p = host_port(bootstrap)
    return await KafkaConnection(h, p, client_id="snakka-it").connect()


def _late_client_leak(_loop, ctx: dict) -> None:
    logging.getLogger("tests.run_async").warning(
        "an earlier run_async's client left this unretrieved, collected only now: %s: %r",
        ctx.get("message"), ctx.get("exception"))


def run_async(coro, timeout: float | None = 60, *, unretrieved_ok: tuple[str, ...] = ()):
    """Run a client-side coroutine on a fresh event loop, bounded by ``timeout``.

    What the loop's exception handler receives (a task or future whose exception nobody
    retrieved) is collected, the clients' garbage included (``gc.collect()`` before the loop
    closes), and fails this test. Without that, a client that leaves a failed future behind
    (aiokafka's sender after a fence) logs "Future exception was never retrieved" whenever the
    collector next runs, into whichever test runs then in the same process. ``unretrieved_ok``
    names the exception types a test expects its clients to leave behind.
    """
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    leaked: list[dict] = []
    with asyncio.Runner() as runner:
        loop = runner.get_loop()
        loop.set_exception_handler(lambda _loop, ctx: leaked.append(ctx))
        try:
            result = runner.run(bounded())
        finally:
            gc.collect()  # while the loop still has the handler and can be handed the leaks
    gc.collect()
    # A future the test itself keeps alive (through the traceback of an exception it holds) is
    # collected later, inside another test: that one gets a WARNING, which fails no error check.
    loop.set_exception_handler(_late_client_leak)
    bad = [ctx for ctx in leaked
           if type(ctx.get("exception")).__name__ not in unretrieved_ok]
    if bad:
        raise AssertionError("the client coroutine left exceptions nobody retrieved: "
                             + "; ".join(f"{c.get('message')}: {c.get('exception') or c.get('task') or c.get('future')!r}"
                                         for c in bad))
    return result


def segment_files(data_dir: str, topic: str, partition: int, suffix: str) -> list[Path]:
    d = Path(data_dir) / f"{topic}-{partition}"
    return sorted(d.glob(f"*{suffix}"))


@dataclass(frozen=True, slots=True)
class DiskBatch:
    """A record batch header as it lies in a segment file (Kafka's v2 layout)."""

    position: int
    size: int
    base_offset: int
    attributes: int
    producer_id: int
    records: int

    @property
    def codec(self) -> int:
        return self.attributes & 0x07


def read_batches(path: Path) -> list[DiskBatch]:
    """The complete batches of one .log file, parsed independently of snakka's code."""
    data = path.read_bytes()
    out = []
    pos = 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        size = length + 12
        if pos + size > len(data):
            break
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        (producer_id,) = struct.unpack_from(">q", data, pos + 43)
        (count,) = struct.unpack_from(">i", data, pos + 57)
        out.append(DiskBatch(pos, size, base, attributes, producer_id, count))
        pos += size
    return out


def topic_batches(data_dir: str, topic: str, partitions: Iterable[int]) -> list[DiskBatch]:
    return [b for p in partitions for f in segment_files(data_dir, topic, p, ".log")
            for b in read_batches(f)]


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus page, parsed by prometheus-client: (name, sorted labels) ->
    value (the page must answer 200 with the text format)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
