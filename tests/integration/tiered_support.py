"""Shared pieces of the tiered-storage acceptance tests (issue 12, KIP-405).

Everything here judges the broker from outside, the way a user would:

- **The workload** (:class:`Workload`): a deterministic stream of records of mixed sizes
  (50 B to 256 KiB), keyed and keyless, with and without headers (duplicate keys, binary and
  null values), produced by confluent-kafka in phases that alternate uncompressed, lz4 and
  zstd producers (each phase flushed before the next, so every partition's order is the
  generation order). What a partition must hold is then known without keeping 200 MB in
  memory: :class:`PartitionDigest` folds (offset, key, value, headers) into a hash, checking
  on the way that offsets run from 0 without a gap.
- **Three consumers** that fold what they read into the same digests: confluent-kafka
  (librdkafka), kafka-python, and the reference Kafka's ``kafka-console-consumer.sh``
  (Java), whose DefaultMessageFormatter output (``BytesDeserializer``: printable ASCII as is,
  every other byte as ``\\xHH``) is parsed back to bytes.
- **Probes**: ListOffsets -2/-4/-5 and DescribeLogDirs over the wire (snakka's protocol client:
  the real clients do not expose -4/-5), the local ``.log`` bytes of a partition directory,
  and the objects of the remote store (:class:`Backend`).
- **The broker**: a subprocess (``EmbeddedBroker(mode="subprocess")``) so restarts and SIGKILL
  are real; its output is checked for ERROR lines and tracebacks by :func:`assert_clean_output`.

Waits poll with a deadline (:func:`tests.integration.helpers.wait_until`, or
:func:`wait_tiered`'s deadline on progress); nothing sleeps for a fixed time.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .helpers import ck_consumer_config, run_async

MiB = 1 << 20
SEGMENT_BYTES = MiB

# Broker configs for tiered storage in every test (contracts.md): fast copier rounds and a
# quick retry after an outage.
TIERED_BROKER = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "200",
    "remote.log.manager.task.retry.backoff.ms": "200",
    "remote.log.manager.task.retry.backoff.max.ms": "2000",
    "rsm.config.storage.retry.max.attempts": "2",
    "rsm.config.storage.retry.backoff.ms": "50",
}


def tiered_topic_config(segment_bytes: int = SEGMENT_BYTES,
                        local_retention_bytes: int = SEGMENT_BYTES, **extra: str) -> dict[str, str]:
    """A tiered topic: small segments, about one segment kept locally."""
    return {"remote.storage.enable": "true", "segment.bytes": str(segment_bytes),
            "local.retention.bytes": str(local_retention_bytes), **extra}


# -- the workload ----------------------------------------------------------------------------
Header = tuple[str, bytes | None]
_CODECS = ("none", "lz4", "zstd")
_WORDS = (b"order shipped customer express delivery discount percent because delay warehouse "
          b"payment pending refund invoice {braces} [brackets] 'quotes' semi;colon slash/path "
          b"tab\tnew\nline caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac back\\slash ").split(b" ")


def _corpus(seed: int, size: int = 2 * MiB) -> bytes:
    import random

    rnd = random.Random(seed)
    parts: list[bytes] = []
    n = 0
    while n < size:
        w = rnd.choice(_WORDS)
        parts.append(w)
        n += len(w) + 1
    return b" ".join(parts)


@dataclass(frozen=True, slots=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class Workload:
    """``total_bytes`` of records over ``partitions`` partitions, deterministic in ``seed``.

    Sizes: 85% 50 B-1 KiB, 12% 1-16 KiB, 3% 16-256 KiB; half the values text (compressible),
    half random bytes. Every 50th key is null, every 400th value null, every 97th empty.
    ``phases()`` yields (compression codec, records) in chunks of ``phase_bytes``."""

    def __init__(self, total_bytes: int, partitions: int, seed: int = 12,
                 phase_bytes: int = 8 * MiB) -> None:
        self.total_bytes = total_bytes
        self.partitions = partitions
        self.seed = seed
        self.phase_bytes = phase_bytes
        self._corpus = _corpus(seed)

    def records(self) -> Iterator[Rec]:
        import random

        rnd = random.Random(self.seed)
        corpus = self._corpus
        sent = 0
        i = 0
        while sent < self.total_bytes:
            r = rnd.random()
            if r < 0.85:
                size = rnd.randint(50, 1024)
            elif r < 0.97:
                size = rnd.randint(1024, 16 * 1024)
            else:
                size = rnd.randint(16 * 1024, 256 * 1024)
            value: bytes | None
            if i % 400 == 17:
                value = None
            elif i % 97 == 5:
                value = b""
            elif rnd.random() < 0.5:
                at = rnd.randrange(len(corpus) - size)
                value = b"%d:" % i + corpus[at:at + size]
            else:
                value = rnd.randbytes(size)
            key = None if i % 50 == 3 else b"user-%05d" % rnd.randrange(20000)
            shape = i % 6
            headers: tuple[Header, ...]
            if shape == 0:
                headers = ()
            elif shape == 1:
                headers = (("trace-id", rnd.randbytes(16)),)
            elif shape == 2:
                headers = (("h", b""), ("h", b"dup"), ("content-type", b"application/json"))
            elif shape == 3:
                headers = (("\u00fcn\u00efcode", "v\u00e4lue".encode()), ("nul", None))
            else:
                headers = (("seq", b"%d" % i),)
            yield Rec(i % self.partitions, key, value, headers)
            sent += size + (len(key) if key else 0)
            i += 1

    def phases(self) -> Iterator[tuple[str, list[Rec]]]:
        batch: list[Rec] = []
        size = 0
        n = 0
        for rec in self.records():
            batch.append(rec)
            size += len(rec.value or b"") + 32
            if size >= self.phase_bytes:
                yield _CODECS[n % len(_CODECS)], batch
                batch, size, n = [], 0, n + 1
        if batch:
            yield _CODECS[n % len(_CODECS)], batch

    def expected(self) -> dict[int, PartitionDigest]:
        digests = {p: PartitionDigest(p) for p in range(self.partitions)}
        for rec in self.records():
            d = digests[rec.partition]
            d.add(d.count, rec.key, rec.value, rec.headers)
        return digests

    def produce(self, bootstrap: str, topic: str, timeout: float = 600) -> dict[int, int]:
        """Produce everything (idempotent producers, one per phase); returns records per
        partition."""
        from confluent_kafka import Producer

        deadline = time.monotonic() + timeout
        counts = dict.fromkeys(range(self.partitions), 0)
        failures: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None and len(failures) < 5:
                failures.append(str(err))

        for codec, recs in self.phases():
            p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                          "compression.type": codec, "linger.ms": 20,
                          "batch.size": 1_000_000, "message.max.bytes": 1_000_000,
                          "queue.buffering.max.kbytes": 64 * 1024})
            for rec in recs:
                while True:
                    try:
                        p.produce(topic, key=rec.key, value=rec.value, partition=rec.partition,
                                  headers=list(rec.headers) or None, on_delivery=on_delivery)
                        break
                    except BufferError:
                        p.poll(0.05)
                        if time.monotonic() > deadline:
                            raise AssertionError("produce timed out") from None
                counts[rec.partition] += 1
            left = p.flush(max(1.0, deadline - time.monotonic()))
            assert left == 0 and not failures, f"produce failed: {left} left, {failures}"
        return counts


# -- numbered records (one producer, one partition: record i at offset i) ---------------------
RECORD = 1000  # value bytes: ~250 records per 256 KiB segment


def produce_numbered(bootstrap: str, topic: str, start: int, n: int,
                     timestamp_ms: int | None = None) -> None:
    """Records ``start .. start+n-1``, each value beginning with its own offset."""
    from confluent_kafka import Producer

    # Batches well under the small segments of these tests (librdkafka's default batch.size
    # is 1 MB, and a segment rolls only after a whole batch).
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 5, "compression.type": "none", "batch.size": 32 * 1024})
    pad = b"x" * RECORD
    for i in range(start, start + n):
        v = b"%010d:" % i + pad
        while True:
            try:
                if timestamp_ms is None:
                    p.produce(topic, key=b"k%d" % (i % 50), value=v, partition=0)
                else:
                    p.produce(topic, key=b"k%d" % (i % 50), value=v, partition=0,
                              timestamp=timestamp_ms)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def read_from_earliest(bootstrap: str, topic: str, end: int,
                       start: int | None = None) -> list[int]:
    """The offsets a confluent-kafka consumer reads from the earliest offset (or ``start``)
    to ``end``, checking each value names its offset."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(ck_consumer_config(bootstrap))
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING if start is None else start)])
        got: list[int] = []
        deadline = time.monotonic() + 60
        while (not got or got[-1] < end - 1) and time.monotonic() < deadline:
            for m in c.consume(num_messages=10000, timeout=0.5):
                assert not m.error(), m.error()
                assert m.value().startswith(b"%010d:" % m.offset()), m.offset()
                got.append(m.offset())
        return got
    finally:
        c.close()


# -- digests ---------------------------------------------------------------------------------
@dataclass
class PartitionDigest:
    """A running hash of one partition's records in offset order; ``problems`` lists the
    first gaps or repeats seen (a consumer must read offsets 0, 1, 2, ... exactly once)."""

    partition: int
    count: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)
    _h: object = field(default_factory=lambda: hashlib.blake2b(digest_size=20))

    def add(self, offset: int, key: bytes | None, value: bytes | None,
            headers: Iterable[tuple[str, bytes | None]]) -> None:
        if offset != self.count and len(self.problems) < 5:
            self.problems.append(f"partition {self.partition}: offset {offset} where "
                                 f"{self.count} was expected")
        h = self._h
        hs = tuple(headers)
        h.update(struct.pack(">qiii", offset, -1 if key is None else len(key),  # type: ignore[attr-defined]
                             -1 if value is None else len(value), len(hs)))
        if key:
            h.update(key)  # type: ignore[attr-defined]
        if value:
            h.update(value)  # type: ignore[attr-defined]
        for k, v in hs:
            kb = k.encode()
            h.update(struct.pack(">ii", len(kb), -1 if v is None else len(v)) + kb + (v or b""))  # type: ignore[attr-defined]
        self.count += 1
        self.bytes += len(value or b"")

    @property
    def hexdigest(self) -> str:
        return self._h.hexdigest()  # type: ignore[attr-defined]

    def summary(self) -> tuple[int, str, tuple[str, ...]]:
        return self.count, self.hexdigest, tuple(self.problems)


def summaries(digests: dict[int, PartitionDigest]) -> dict[int, tuple[int, str, tuple[str, ...]]]:
    return {p: d.summary() for p, d in sorted(digests.items())}


def ck_digest(bootstrap: str, topic: str, ends: dict[int, int], timeout: float = 300,
              **extra) -> dict[int, PartitionDigest]:
    """confluent-kafka reads each partition from offset 0 up to ``ends[p]`` (exclusive)."""
    from confluent_kafka import Consumer, TopicPartition

    digests = {p: PartitionDigest(p) for p in ends}
    c = Consumer(ck_consumer_config(bootstrap, **extra))
    try:
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        deadline = time.monotonic() + timeout
        left = {p for p, end in ends.items() if end > 0}
        nxt = dict.fromkeys(ends, 0)
        while left:
            if time.monotonic() > deadline:
                raise AssertionError(f"confluent-kafka: timed out at {nxt} of {ends}")
            for m in c.consume(num_messages=10000, timeout=0.5):
                if m.error():
                    raise AssertionError(f"confluent-kafka consumer error: {m.error()}")
                p = m.partition()
                digests[p].add(m.offset(), m.key(), m.value(), m.headers() or ())
                nxt[p] = m.offset() + 1
                if nxt[p] >= ends[p]:
                    left.discard(p)
        return digests
    finally:
        c.close()


def kp_digest(bootstrap: str, topic: str, ends: dict[int, int],
              timeout: float = 300) -> dict[int, PartitionDigest]:
    """kafka-python reads each partition from offset 0 up to ``ends[p]``."""
    from kafka import KafkaConsumer, TopicPartition

    digests = {p: PartitionDigest(p) for p in ends}
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      max_partition_fetch_bytes=8 * MiB, fetch_max_bytes=32 * MiB,
                      request_timeout_ms=40000)
    try:
        tps = {p: TopicPartition(topic, p) for p in ends}
        c.assign(list(tps.values()))
        for tp in tps.values():
            c.seek(tp, 0)
        deadline = time.monotonic() + timeout
        left = {p for p, end in ends.items() if end > 0}
        while left:
            if time.monotonic() > deadline:
                raise AssertionError(f"kafka-python: timed out; left {left}")
            for tp, msgs in c.poll(timeout_ms=500, max_records=5000).items():
                for m in msgs:
                    digests[tp.partition].add(m.offset, m.key, m.value, m.headers or ())
                    if m.offset + 1 >= ends[tp.partition]:
                        left.discard(tp.partition)
        return digests
    finally:
        c.close()


NULL_LITERAL = b"<null>"


def java_digest(bootstrap: str, topic: str, ends: dict[int, int],
                timeout: float = 600) -> dict[int, PartitionDigest]:
    """The reference Kafka's console consumer reads each partition from offset 0 (one JVM per
    partition: ``--partition P --offset 0 --max-messages N``), printing partition, offset,
    headers, key and value with ``BytesDeserializer`` (non-printable bytes as ``\\xHH``), which
    is parsed back to bytes here, streaming (no 200 MB in memory)."""
    from reference_kafka import reference_dir

    home = reference_dir()
    assert home is not None
    env = dict(os.environ)
    env.setdefault("KAFKA_HEAP_OPTS", "-Xmx512m")
    env.setdefault("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:+UseSerialGC")
    env["LOG_DIR"] = os.environ.get("TMPDIR", "/tmp")
    # Header keys are printed as Java Strings: UTF-8 whatever the machine's locale.
    env["KAFKA_OPTS"] = "-Dfile.encoding=UTF-8 -Dstdout.encoding=UTF-8"
    bytes_de = "org.apache.kafka.common.serialization.BytesDeserializer"
    digests = {p: PartitionDigest(p) for p in ends}
    for p, end in ends.items():
        if end == 0:
            continue
        cmd = ["bash", str(home / "bin" / "kafka-console-consumer.sh"),
               "--bootstrap-server", bootstrap, "--topic", topic, "--partition", str(p),
               "--offset", "0", "--max-messages", str(end), "--timeout-ms", "60000",
               "--consumer-property", "max.partition.fetch.bytes=8388608"]
        for k, v in {"print.partition": "true", "print.offset": "true",
                     "print.headers": "true", "print.key": "true", "print.value": "true",
                     "key.deserializer": bytes_de, "value.deserializer": bytes_de,
                     "headers.deserializer": bytes_de, "headers.separator": "\t",
                     "null.literal": NULL_LITERAL.decode()}.items():
            cmd += ["--property", f"{k}={v}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True)
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + timeout
            for line in proc.stdout:
                _java_line(digests[p], line.rstrip(b"\n"))
                if time.monotonic() > deadline:
                    raise AssertionError("console consumer: timed out")
            rc = proc.wait(60)
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            assert rc == 0, f"console consumer exited {rc}: {err[-3000:]}"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
    return digests


def _unescape(field_: bytes) -> bytes | None:
    if field_ == NULL_LITERAL:
        return None
    return codecs.escape_decode(field_)[0] if b"\\" in field_ else field_


def _java_line(digest: PartitionDigest, line: bytes) -> None:
    parts = line.split(b"\t")
    assert parts[0].startswith(b"Partition:") and parts[1].startswith(b"Offset:"), line[:200]
    offset = int(parts[1][7:])
    key, value = _unescape(parts[-2]), _unescape(parts[-1])
    headers: list[tuple[str, bytes | None]] = []
    if parts[2:-2] != [b"NO_HEADERS"]:
        for h in parts[2:-2]:
            k, _, v = h.partition(b":")
            headers.append((k.decode(), _unescape(v)))
    digest.add(offset, key, value, headers)


# -- probes ----------------------------------------------------------------------------------
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5


def list_offsets(bootstrap: str, topic: str, partitions: Iterable[int],
                 timestamp: int) -> dict[int, int]:
    """ListOffsets (v9: -4 and -5 need v8/v9) for ``timestamp`` over the wire."""
    from snakka.protocol.messages.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    from .helpers import raw_connect

    async def go() -> dict[int, int]:
        conn = await raw_connect(bootstrap)
        try:
            resp = await conn.send(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(
                name=topic, partitions=[ListOffsetsPartition(partition_index=p,
                                                             timestamp=timestamp)
                                        for p in partitions])]), version=9)
        finally:
            await conn.close()
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                assert p.error_code == 0, (timestamp, p)
                out[p.partition_index] = p.offset
        return out

    return run_async(go())


def describe_log_dirs(bootstrap: str, topic: str) -> dict[int, int]:
    """DescribeLogDirs: the size the broker reports per partition of ``topic``."""
    from snakka.protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest

    from .helpers import raw_connect

    async def go() -> dict[int, int]:
        conn = await raw_connect(bootstrap)
        try:
            resp = await conn.send(DescribeLogDirsRequest(topics=None))
        finally:
            await conn.close()
        out: dict[int, int] = {}
        for r in resp.results:
            assert r.error_code == 0, r
            for t in r.topics:
                if t.name == topic:
                    for p in t.partitions:
                        out[p.partition_index] = out.get(p.partition_index, 0) + p.partition_size
        return out

    return run_async(go())


def batch_ranges(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each complete v2 batch in segment bytes, parsed here
    independently of snakka's code (base offset: int64 at 0; length: int32 at 8; last offset
    delta: int32 at 23)."""
    out = []
    pos = 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        if pos + 12 + length > len(data):
            break
        out.append((base, base + delta))
        pos += 12 + length
    return out


def local_log_bytes(data_dir: str, topic: str, partition: int) -> int:
    d = Path(data_dir) / f"{topic}-{partition}"
    return sum(_size(f) for f in d.glob("*.log"))


def _size(path: Path) -> int:
    """A file's size, 0 if it went away since it was listed (retention deletes segments while
    the tests watch the directory)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def active_segment_base(data_dir: str, topic: str, partition: int) -> int:
    d = Path(data_dir) / f"{topic}-{partition}"
    return max(int(f.name.split(".")[0]) for f in d.glob("*.log"))


def wait_tiered(bootstrap: str, data_dir: str, topic: str, partitions: Iterable[int], *,
                timeout: float, local_max: int) -> dict[int, int]:
    """Wait until every closed segment is remote (ListOffsets -5 = active segment's base - 1)
    and local data shrank to at most ``local_max`` bytes per partition; returns -5 offsets.

    ``timeout`` bounds the time WITHOUT progress (no segment tiered, no local byte deleted):
    how long the copier takes in all depends on the machine's load (a loaded CI run needed over
    300 s for 96 MiB through the slow S3 proxy), while a stuck copier still fails within
    ``timeout``. The whole wait is capped at ``PROGRESS_WAIT_CAP`` times ``timeout``."""
    parts = list(partitions)
    last: tuple[object, ...] | None = None
    stall_deadline = time.monotonic() + timeout
    hard_deadline = time.monotonic() + PROGRESS_WAIT_CAP * timeout
    while True:
        tiered = list_offsets(bootstrap, topic, parts, LATEST_TIERED)
        local = [local_log_bytes(data_dir, topic, p) for p in parts]
        if all(tiered[p] == active_segment_base(data_dir, topic, p) - 1 and b <= local_max
               for p, b in zip(parts, local, strict=True)):
            return tiered
        now = time.monotonic()
        progress = (tuple(tiered[p] for p in parts), tuple(local))
        if progress != last:
            last, stall_deadline = progress, now + timeout
        if now > stall_deadline or now > hard_deadline:
            raise AssertionError(
                f"{topic}: no progress for {timeout:.0f}s (or over {PROGRESS_WAIT_CAP}x that in "
                f"all) waiting for every closed segment copied and local data under "
                f"{local_max} bytes per partition; tiered up to {tiered}, "
                f"local bytes {dict(zip(parts, local, strict=True))}")
        time.sleep(0.2)


# wait_tiered's cap on the whole wait, in multiples of its no-progress timeout.
PROGRESS_WAIT_CAP = 4


def assert_clean_output(broker, allow: Iterable[str] = ()) -> None:
    """A subprocess broker logged no ERROR and no traceback (``allow``: substrings of ERROR
    lines a test provokes on purpose)."""
    allowed = tuple(allow)
    bad = [line for line in broker.output
           if (" ERROR " in line or "Traceback" in line) and not any(a in line for a in allowed)]
    assert not bad, "\n".join(bad[:20])


# -- the remote store ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RemoteObject:
    key: str
    topic_dir: str  # "<topic>-<partition>-<topic id>"
    start_offset: int
    segment_uuid: str
    suffix: str

    def partition_of(self, topic: str) -> int | None:
        """The partition if this object belongs to ``topic`` (topic names and topic ids may
        both contain '-': the known name is matched as a prefix)."""
        if not self.topic_dir.startswith(topic + "-"):
            return None
        part, sep, _topic_id = self.topic_dir[len(topic) + 1:].partition("-")
        return int(part) if sep and part.isdigit() else None

    def topic_id(self, topic: str) -> str:
        return self.topic_dir[len(topic) + 1:].partition("-")[2]


def parse_key(key: str, prefix: str = "") -> RemoteObject | None:
    """An object key of contracts.md (``<prefix><topic>-<p>-<topic id>/<20-digit start
    offset>-<uuid>.<suffix>``), or None for anything else."""
    if not key.startswith(prefix):
        return None
    rest = key[len(prefix):]
    d, _, name = rest.rpartition("/")
    stem, _, suffix = name.partition(".")
    off, _, uid = stem.partition("-")
    if not d or not off.isdigit() or len(off) != 20:
        return None
    return RemoteObject(key, d, int(off), str(key_uuid(uid)), suffix)


def key_uuid(text: str) -> uuid.UUID:
    """A uuid as object keys spell it: Kafka's URL-safe base64 (22 characters, as
    kafka-topics.sh prints topic ids), or the usual hex form."""
    try:
        return uuid.UUID(text)
    except ValueError:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def rsm_configs(backend: Backend) -> dict[str, object]:
    """The parsed rsm.config.* values for ``create_remote_storage`` (as the broker passes
    them), from a backend's configs."""
    from snakka.config import BROKER_CONFIGS, BrokerConfig

    cfg = BrokerConfig(dict(backend.configs()))
    return {name: cfg.get(name) for name in BROKER_CONFIGS if name.startswith("rsm.config.")}


class Backend:
    """One remote storage backend as the tests see it: the ``rsm.config.*`` keys a broker
    needs, and a listing of the stored objects."""

    name = "?"
    prefix = ""

    def configs(self) -> dict[str, str]:
        raise NotImplementedError

    def keys(self) -> list[str]:
        raise NotImplementedError

    def objects(self, topic: str | None = None) -> list[RemoteObject]:
        out = []
        for k in self.keys():
            o = parse_key(k, self.prefix)
            if o is not None and (topic is None or o.partition_of(topic) is not None):
                out.append(o)
        return out

    def segments(self, topic: str, partition: int) -> dict[int, set[str]]:
        """start offset -> suffixes stored, of the objects of one partition."""
        out: dict[int, set[str]] = {}
        for o in self.objects(topic):
            if o.partition_of(topic) == partition:
                out.setdefault(o.start_offset, set()).add(o.suffix)
        return out

    def close(self) -> None:
        pass


class LocalBackend(Backend):
    name = "local"

    def __init__(self, root: str) -> None:
        self.root = root

    def configs(self) -> dict[str, str]:
        return {"rsm.config.storage.backend": "local", "rsm.config.storage.root": self.root}

    def keys(self) -> list[str]:
        base = Path(self.root)
        return sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())

    def down(self) -> None:
        """An unmounted NAS: the root directory is not there (the backend never creates it,
        it retries as for a store that does not answer)."""
        os.rename(self.root, self.root + ".away")

    def up(self) -> None:
        if os.path.exists(self.root):  # recreated meanwhile: what the mount would hide
            os.rename(self.root, self.root + ".recreated")
        os.rename(self.root + ".away", self.root)

    def corrupt(self, key: str, position: int) -> None:
        """Flip the bits of one byte of a stored object (bit rot, a bad disk)."""
        with open(os.path.join(self.root, key), "r+b") as f:
            f.seek(position)
            b = f.read(1)
            f.seek(position)
            f.write(bytes([b[0] ^ 0xFF]))

    def is_down(self) -> bool:
        """Still away: nobody recreated the root meanwhile (a broker writing into the empty
        mount point of an unmounted NAS would)."""
        return not os.path.exists(self.root)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.root + ".away", ignore_errors=True)
        shutil.rmtree(self.root + ".recreated", ignore_errors=True)


class S3Backend(Backend):
    """A fresh bucket on the tests' loopback S3 server (tests/s3_server.py: moto's S3 API on
    127.0.0.1, which can go down and come back)."""

    name = "s3"

    def __init__(self, server) -> None:

        self.server = server
        self.bucket = f"tiered-{uuid.uuid4().hex[:12]}"
        server.create_bucket(self.bucket)
        self._client = server.s3_client()

    def configs(self) -> dict[str, str]:
        return {k: (str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in self.server.rsm_configs(self.bucket).items()}

    def keys(self) -> list[str]:
        out: list[str] = []
        for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            out.extend(o["Key"] for o in page.get("Contents", ()))
        return out

    def down(self) -> None:
        self.server.down()

    def up(self) -> None:
        self.server.up()

    def is_down(self) -> bool:
        return not self.server.is_up

    def corrupt(self, key: str, position: int) -> None:
        data = bytearray(self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        data[position] ^= 0xFF
        self._client.put_object(Bucket=self.bucket, Key=key, Body=bytes(data))

    def close(self) -> None:
        if not self.server.is_up:
            self.server.up()
        self.server.remove_bucket(self.bucket)  # moto keeps objects in this process's memory


def _s3_backend(request) -> S3Backend:
    from s3_server import moto_skip_reason

    reason = moto_skip_reason()
    if reason:
        pytest.skip(reason)
    return S3Backend(request.getfixturevalue("s3_server"))


@pytest.fixture(scope="module", params=["local", "s3"])
def tiered_backend(request):
    """Each backend in turn, for the SAME tests (module-scoped: one produced topic per
    backend)."""
    if request.param == "local":
        backend: Backend = LocalBackend(tempfile.mkdtemp(prefix="snakka-remote-"))
    else:
        backend = _s3_backend(request)
    try:
        yield backend
    finally:
        backend.close()


# -- __remote_log_metadata, read as any client can ---------------------------------------------
def remote_segment_states(bootstrap: str, topic: str, timeout: float = 60) -> dict:
    """Every remote segment of ``topic`` as ``__remote_log_metadata`` records it: segment uuid
    -> :class:`SegmentHistory` (its metadata as added and every state it went through, in log
    order), read with confluent-kafka and decoded with the records' serde."""
    from confluent_kafka import Consumer, TopicPartition

    from snakka.remote.metadata import deserialize
    from snakka.remote.types import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate

    name = "__remote_log_metadata"
    c = Consumer(ck_consumer_config(bootstrap))
    try:
        md = c.list_topics(name, timeout=10).topics[name]
        assert md.error is None, md.error
        ends = {}
        for p in md.partitions:
            lo, hi = c.get_watermark_offsets(TopicPartition(name, p), timeout=10, cached=False)
            if hi > lo:
                ends[p] = hi
        c.assign([TopicPartition(name, p, 0) for p in ends])
        events: dict[int, list[tuple[int, object]]] = {p: [] for p in ends}
        left = set(ends)
        deadline = time.monotonic() + timeout
        while left:
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}: timed out reading {left}")
            for m in c.consume(num_messages=10000, timeout=0.5):
                assert not m.error(), m.error()
                events[m.partition()].append((m.offset(), deserialize(m.value())))
                if m.offset() + 1 >= ends[m.partition()]:
                    left.discard(m.partition())
    finally:
        c.close()
    out: dict[str, SegmentHistory] = {}
    for evs in events.values():
        for _, ev in evs:
            if isinstance(ev, RemoteLogSegmentMetadata) and ev.topic_id_partition.topic == topic:
                out[str(ev.segment_id.id)] = SegmentHistory(ev, [ev.state])
            elif (isinstance(ev, RemoteLogSegmentMetadataUpdate)
                  and ev.segment_id.topic_id_partition.topic == topic):
                out[str(ev.segment_id.id)].states.append(ev.state)
    return out


@dataclass
class SegmentHistory:
    metadata: object  # RemoteLogSegmentMetadata as first added (COPY_SEGMENT_STARTED)
    states: list  # every RemoteLogSegmentState, in order

    @property
    def state(self):
        return self.states[-1]

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.states]


class SlowProxy:
    """A TCP proxy on 127.0.0.1 that delays every chunk a client sends by ``delay`` seconds
    (responses pass at once): the broker's uploads through it take visible time, so a test
    can catch a copy mid-upload. Threads; ``close()`` ends them and their sockets."""

    CHUNK = 64 * 1024

    def __init__(self, upstream: tuple[str, int], delay: float) -> None:
        import socket
        import threading

        self.upstream = upstream
        self.delay = delay
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._closed = threading.Event()
        self._conns: list = []
        self._thread = threading.Thread(target=self._accept, daemon=True, name="slow-proxy")
        self._thread.start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self._closed.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            self._conns += [client, server]
            for src, dst, slow in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, slow), daemon=True).start()

    def _pump(self, src, dst, slow: bool) -> None:
        import socket

        try:
            while not self._closed.is_set():
                data = src.recv(self.CHUNK)
                if not data:
                    break
                if slow:
                    self._closed.wait(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed.set()
        self._sock.close()
        for s in self._conns:
            s.close()
