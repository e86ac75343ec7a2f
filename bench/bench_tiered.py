"""Tiered-storage benchmark (issue 12): the storage backends, and consuming remote vs local data.

    .venv/bin/python bench/bench_tiered.py                   # both backends, ~2 minutes
    .venv/bin/python bench/bench_tiered.py --backends local  # no S3 server
    .venv/bin/python bench/bench_tiered.py --segments 4 --consume-mb 32   # quicker
    .venv/bin/python bench/bench_tiered.py --topic-segment-mb 1           # the tests' segments

Two parts, in ONE run, against each backend (``local``: a temporary directory; ``s3``: the
loopback S3 API server the tests use, tests/s3_server.py):

1. **The RemoteStorageManager alone** (``snakka.remote.storage.create_remote_storage``, as the
   broker builds it): ``--segments`` segment files of ``--segment-mb`` MiB (half random,
   half text, with small index files) are uploaded with ``copy_log_segment_data`` one after
   another (upload MB/s: segment bytes / wall time, manifest and indexes included in the
   time), then read back whole with ``fetch_log_segment`` in ``rsm.config.chunk.size``
   ranges, every chunk CRC32C-checked (remote-read MB/s). A single thread each: the copier
   copies one segment per partition at a time, and one fetch reads one range at a time.
2. **Consume throughput, remote vs local**: a ``python -m snakka serve`` subprocess with tiered
   storage on that backend, two topics of one partition with ``--consume-mb`` MiB of 1 KiB
   records each, segments of ``--topic-segment-mb`` MiB: ``remote`` (``remote.storage.enable=true``,
   ``local.retention.ms=0``: once copied, only the active segment stays on disk) and
   ``local`` (not tiered). The tiered topic is produced first, alone, and timed from its
   first record to the copier having caught up (``produced_to_tiered_s``, ``tiered_mb_s``:
   the broker's end-to-end upload rate, with the remote log manager's task interval at 200
   ms). Then one confluent-kafka consumer reads each topic from offset 0 to the end (MB/s of
   record values, records/s); the ``remote`` read is served from the object store through
   the broker's chunk cache and read-ahead.

Output: one JSON object per line (``{"type": ...}``), then a summary line per backend.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from common import BrokerProcess, machine_info  # noqa: E402

MiB = 1 << 20


# -- backends ----------------------------------------------------------------------------------
class LocalStore:
    name = "local"

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="snakka-bench-remote-")

    def configs(self) -> dict[str, str]:
        return {"rsm.config.storage.backend": "local", "rsm.config.storage.root": self.root}

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class S3Store:
    """A bucket on the tests' loopback S3 server (tests/s3_server.py: moto's S3 API in this
    process, on 127.0.0.1 and an ephemeral port)."""

    name = "s3"

    def __init__(self) -> None:
        from s3_server import LoopbackS3Server, moto_skip_reason

        reason = moto_skip_reason()
        if reason:
            raise SystemExit(reason)
        self.server = LoopbackS3Server()
        self.server.up()
        self.bucket = "bench-tiered"
        self.server.create_bucket(self.bucket)

    def configs(self) -> dict[str, str]:
        return {k: (str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in self.server.rsm_configs(self.bucket).items()}

    def close(self) -> None:
        self.server.remove_bucket(self.bucket)
        self.server.down()


def start_store(name: str):
    return LocalStore() if name == "local" else S3Store()


def parsed_rsm_configs(configs: dict[str, str]) -> dict[str, object]:
    from snakka.config import BROKER_CONFIGS, BrokerConfig

    cfg = BrokerConfig(dict(configs))
    return {n: cfg.get(n) for n in BROKER_CONFIGS if n.startswith("rsm.config.")}


# -- part 1: the storage manager ---------------------------------------------------------------
def make_segment(d: Path, base: int, size: int, rnd: random.Random):
    from snakka.remote.types import LogSegmentData

    words = b"order shipped to the customer with express delivery and a discount ".split()
    text = b" ".join(rnd.choice(words) for _ in range(size // 12))[: size // 2]
    log_path = d / f"{base:020d}.log"
    log_path.write_bytes(rnd.randbytes(size - len(text)) + text)
    for suffix, n in (("index", 10 * 1024), ("timeindex", 15 * 1024), ("snapshot", 64)):
        (d / f"{base:020d}.{suffix}").write_bytes(rnd.randbytes(n))
    return LogSegmentData(
        log_segment=str(log_path), offset_index=str(d / f"{base:020d}.index"),
        time_index=str(d / f"{base:020d}.timeindex"), transaction_index=None,
        producer_snapshot_index=str(d / f"{base:020d}.snapshot"),
        leader_epoch_index=b"0\n1\n0 %d\n" % base)


def bench_rsm(store, segments: int, segment_mb: int) -> dict:
    from snakka.remote.storage import create_remote_storage
    from snakka.remote.types import (
        RemoteLogSegmentId,
        RemoteLogSegmentMetadata,
        TopicIdPartition,
    )

    rsm = create_remote_storage(parsed_rsm_configs(store.configs()))
    tmp = Path(tempfile.mkdtemp(prefix="snakka-bench-segments-"))
    try:
        rnd = random.Random(12)
        tp = TopicIdPartition(uuid.uuid4(), "bench", 0)
        size = segment_mb * MiB
        mds = []
        datas = []
        for i in range(segments):
            base = i * 100_000
            datas.append(make_segment(tmp, base, size, rnd))
            mds.append(RemoteLogSegmentMetadata(
                segment_id=RemoteLogSegmentId.generate(tp), start_offset=base,
                end_offset=base + 99_999, max_timestamp_ms=0, broker_id=0,
                event_timestamp_ms=0, segment_size_in_bytes=size,
                segment_leader_epochs=((0, base),)))
        t0 = time.perf_counter()
        for md, data in zip(mds, datas, strict=True):
            rsm.copy_log_segment_data(md, data)
        upload_s = time.perf_counter() - t0
        chunk = rsm.chunk_size
        t0 = time.perf_counter()
        read = 0
        for md in mds:
            pos = 0
            while pos < size:
                read += len(rsm.fetch_log_segment(md, pos, pos + chunk))
                pos += chunk
        read_s = time.perf_counter() - t0
        assert read == size * segments, (read, size * segments)
        return {"segments": segments, "segment_mb": segment_mb, "chunk_bytes": chunk,
                "upload_s": round(upload_s, 3),
                "upload_mb_s": round(segments * segment_mb / upload_s, 1),
                "remote_read_s": round(read_s, 3),
                "remote_read_mb_s": round(segments * segment_mb / read_s, 1)}
    finally:
        rsm.close()
        shutil.rmtree(tmp, ignore_errors=True)


# -- part 2: consume remote vs local -----------------------------------------------------------
def produce(bootstrap: str, topic: str, mb: int, record: int = 1024) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "compression.type": "none"})
    rnd = random.Random(5)
    value = rnd.randbytes(record)
    n = mb * MiB // record
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, key=b"%d" % i, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    del p
    gc.collect()  # librdkafka's handle goes now, not when the broker is already gone
    return n


def consume(bootstrap: str, topic: str, end: int) -> tuple[float, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-tiered",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                  "fetch.max.bytes": 50 * MiB, "max.partition.fetch.bytes": 16 * MiB,
                  "queued.max.messages.kbytes": 256 * 1024})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        t0 = time.perf_counter()
        got = 0
        nbytes = 0
        deadline = time.monotonic() + 300
        while got < end:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consume {topic}: stuck at {got}/{end}")
            for m in c.consume(num_messages=10000, timeout=0.5):
                if m.error():
                    raise RuntimeError(str(m.error()))
                got += 1
                nbytes += len(m.value())
        return time.perf_counter() - t0, nbytes
    finally:
        c.close()


def list_offset(bootstrap: str, topic: str, ts: int) -> int:
    import asyncio

    from snakka.client.connection import KafkaConnection
    from snakka.protocol.messages.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    async def go() -> int:
        host, port = bootstrap.rsplit(":", 1)
        conn = await KafkaConnection(host, int(port), client_id="bench").connect()
        try:
            r = await conn.send(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(
                name=topic, partitions=[ListOffsetsPartition(partition_index=0,
                                                             timestamp=ts)])]), version=9)
        finally:
            await conn.close()
        return r.topics[0].partitions[0].offset

    return asyncio.run(go())


def bench_consume(store, mb: int, segment_mb: int) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerProcess({"remote.log.storage.system.enable": "true",
                            "remote.log.manager.task.interval.ms": "200",
                            **store.configs()}).start()
    try:
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        fs = admin.create_topics([
            NewTopic("remote", 1, 1, config={"remote.storage.enable": "true",
                                            "segment.bytes": str(segment_mb * MiB),
                                            "local.retention.ms": "0"}),
            NewTopic("local", 1, 1, config={"segment.bytes": str(segment_mb * MiB)})])
        for f in fs.values():
            f.result(30)
        out: dict[str, object] = {"consume_mb": mb, "topic_segment_mb": segment_mb}
        # The tiered topic alone first: from its first produced byte to every closed segment
        # copied (and deleted locally) is the broker's end-to-end upload rate.
        t0 = time.perf_counter()
        n_remote = produce(bs, "remote", mb)
        out["produce_remote_s"] = round(time.perf_counter() - t0, 2)
        deadline = time.monotonic() + 300
        while True:
            local_start = list_offset(bs, "remote", -4)
            tiered = list_offset(bs, "remote", -5)
            # Copier caught up: the earliest local offset reached the active segment, so
            # everything before it is served from the store.
            if (tiered >= 0 and local_start == tiered + 1
                    and n_remote - local_start <= segment_mb * 1024):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"copier did not catch up: -4 {local_start} -5 {tiered}")
            time.sleep(0.05)
        tiered_s = time.perf_counter() - t0
        out["produced_to_tiered_s"] = round(tiered_s, 2)
        out["tiered_mb_s"] = round(local_start * 1024 / MiB / tiered_s, 1)
        out["remote_records"] = local_start
        n_local = produce(bs, "local", mb)
        for topic, n in (("remote", n_remote), ("local", n_local)):
            secs, nbytes = consume(bs, topic, n)
            out[f"{topic}_consume_s"] = round(secs, 2)
            out[f"{topic}_consume_mb_s"] = round(nbytes / MiB / secs, 1)
            out[f"{topic}_records_s"] = round(n / secs)
        return out
    finally:
        broker.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="local,s3")
    ap.add_argument("--segments", type=int, default=8)
    ap.add_argument("--segment-mb", type=int, default=16)
    ap.add_argument("--consume-mb", type=int, default=128)
    ap.add_argument("--topic-segment-mb", type=int, default=8,
                    help="segment.bytes of the two topics of part 2 (MiB)")
    args = ap.parse_args()
    print(json.dumps({"type": "machine", **machine_info()}), flush=True)
    for name in args.backends.split(","):
        store = start_store(name)
        try:
            rsm = bench_rsm(store, args.segments, args.segment_mb)
            print(json.dumps({"type": "rsm", "backend": name, **rsm}), flush=True)
            cons = bench_consume(store, args.consume_mb, args.topic_segment_mb)
            print(json.dumps({"type": "consume", "backend": name, **cons}), flush=True)
            print(json.dumps({
                "type": "summary", "backend": name, "upload_mb_s": rsm["upload_mb_s"],
                "remote_read_mb_s": rsm["remote_read_mb_s"],
                "consume_remote_mb_s": cons["remote_consume_mb_s"],
                "consume_local_mb_s": cons["local_consume_mb_s"]}), flush=True)
        finally:
            store.close()


if __name__ == "__main__":
    main()
