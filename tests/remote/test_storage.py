"""The RemoteStorageManager (issue 12, item 1): one suite, run against both backends.

Every test that takes ``backend`` runs twice: on the local-directory backend and on the S3
backend against the loopback S3 server (tests/s3_server.py, moto). The segments are real:
written by snakka's UnifiedLog with small segments, rolled, an aborted transaction in the
first (so it has a ``.txnindex``) and none in the second.

An outage is ``backend.down()`` / ``backend.up()``: the S3 server stops listening and resets
its connections; the local root directory is moved away (an unmounted NAS). Waits are on
events (the DEBUG line of a failed try), never sleeps; retry backoffs are a few ms.
"""

from __future__ import annotations

import logging
import os
import random
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from storage.helpers import Clock, append, batch, open_log  # tests/ is on sys.path

from snakka.config import ConfigError
from snakka.protocol.primitives import uuid_to_base64
from snakka.records import Record, build_batch
from snakka.remote.storage import (
    RemoteChecksumError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    create_remote_storage,
)
from snakka.remote.storage.manifest import SegmentManifest
from snakka.remote.storage.objects import ObjectStoreRemoteStorageManager, segment_key_base
from snakka.remote.types import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from snakka.storage import LogConfig

CHUNK = 65536  # rsm.config.chunk.size's smallest value: several chunks per test segment
FAST_RETRY = {"rsm.config.storage.retry.max.attempts": 3,
              "rsm.config.storage.retry.backoff.ms": 5}
LEADER_EPOCHS = b"0\n1\n0 0\n"  # Kafka's leader-epoch checkpoint text: version, count, entries
TP = TopicIdPartition(uuid.UUID("40ab2b9b-fcb2-4f03-8880-72256e2c9529"), "tiered", 3)
RSM_LOGGER = "snakka.remote.storage.objects"

try:
    import obstore  # noqa: F401
    HAVE_OBSTORE = True
except ImportError:
    HAVE_OBSTORE = False
# The S3 tests without the loopback server skip with this; those with it skip through the
# s3_server fixture (moto missing).
needs_obstore = pytest.mark.skipif(
    not HAVE_OBSTORE, reason="the S3 backend needs obstore: pip install 'snakka[s3]'")


# ---------------------------------------------------------------- real segments


@dataclass
class Segment:
    data: LogSegmentData
    base_offset: int
    next_offset: int
    files: dict[str, bytes]  # suffix -> the local file's bytes

    def metadata(self, **kw: Any) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(
            segment_id=kw.pop("segment_id", RemoteLogSegmentId.generate(TP)),
            start_offset=self.base_offset, end_offset=self.next_offset - 1,
            max_timestamp_ms=1_700_000_000_000, broker_id=0, event_timestamp_ms=0,
            segment_size_in_bytes=len(self.files["log"]),
            segment_leader_epochs=((0, self.base_offset),), **kw)


def _segment_of(seg: Any, snapshot: str) -> Segment:
    txn = seg.txn_index.path if os.path.exists(seg.txn_index.path) else None
    data = LogSegmentData(seg.path, seg.offset_index.path, seg.time_index.path, txn, snapshot,
                          LEADER_EPOCHS)
    files = {"log": Path(seg.path).read_bytes(),
             "index": Path(seg.offset_index.path).read_bytes(),
             "timeindex": Path(seg.time_index.path).read_bytes(),
             "snapshot": Path(snapshot).read_bytes(),
             "leader_epoch_checkpoint": LEADER_EPOCHS}
    if txn:
        files["txnindex"] = Path(txn).read_bytes()
    return Segment(data, seg.base_offset, seg.next_offset, files)


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> list[Segment]:
    """Two closed segments of a real log: the first with an aborted transaction (a
    .txnindex), both a few chunks long, with offset and time index entries."""
    path = tmp_path_factory.mktemp("log") / "tiered-3"
    plog = open_log(path, LogConfig(index_interval_bytes=4096), clock=Clock())
    append(plog, batch(3, producer_id=7, producer_epoch=0, base_sequence=0,
                       is_transactional=True))
    plog.append_control_marker(7, 0, False, 0)  # abort: an entry in the .txnindex
    for i in range(60):
        append(plog, batch(20, value_size=200, ts=1_700_000_000_000 + i * 100))
    plog.roll()
    for i in range(50):
        append(plog, batch(20, value_size=200, ts=1_700_000_100_000 + i * 100))
    plog.roll()
    plog.flush()  # indexes are written by a flush (the copier copies flushed segments)
    snapshot = plog.take_snapshot(sync=True)
    first, second = plog.segments[0], plog.segments[1]
    out = [_segment_of(first, snapshot), _segment_of(second, snapshot)]
    plog.close()
    assert "txnindex" in out[0].files and "txnindex" not in out[1].files
    assert len(out[0].files["log"]) > 3 * CHUNK and len(out[0].files["index"]) > 0
    return out


# ---------------------------------------------------------------- the two backends


@dataclass
class Backend:
    name: str
    configs: dict[str, object]
    tmp: Path
    server: Any = None
    _made: list[ObjectStoreRemoteStorageManager] = field(default_factory=list)

    def make(self, **overrides: object) -> ObjectStoreRemoteStorageManager:
        rsm = create_remote_storage({"rsm.config.chunk.size": CHUNK, **FAST_RETRY,
                                     **self.configs, **overrides})
        assert isinstance(rsm, ObjectStoreRemoteStorageManager)
        self._made.append(rsm)
        return rsm

    def copied(self, seg: Segment, **overrides: object
               ) -> tuple[ObjectStoreRemoteStorageManager, RemoteLogSegmentMetadata, str]:
        """A manager, ``seg`` copied by it (metadata with its custom metadata) and the
        segment's object key without suffix."""
        rsm = self.make(**overrides)
        md = seg.metadata()
        md = replace(md, custom_metadata=rsm.copy_log_segment_data(md, seg.data))
        return rsm, md, segment_key_base(str(overrides.get("rsm.config.key.prefix", "")), md)

    @property
    def root(self) -> Path:
        return Path(str(self.configs["rsm.config.storage.root"]))

    def down(self) -> None:
        if self.server is not None:
            self.server.down()
        else:
            self.root.rename(self.tmp / "remote-away")

    def up(self) -> None:
        if self.server is not None:
            self.server.up()
        elif not self.root.exists():
            (self.tmp / "remote-away").rename(self.root)

    def keys(self) -> list[str]:
        if self.server is not None:
            client = self.server.s3_client()
            bucket = self.configs["rsm.config.storage.s3.bucket.name"]
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            return sorted(o["Key"] for p in pages for o in p.get("Contents", []))
        return sorted(p.relative_to(self.root).as_posix()
                      for p in self.root.rglob("*") if p.is_file())

    def read(self, key: str) -> bytes:
        if self.server is not None:
            bucket = self.configs["rsm.config.storage.s3.bucket.name"]
            return self.server.s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
        return (self.root / key).read_bytes()

    def write(self, key: str, data: bytes) -> None:
        if self.server is not None:
            bucket = self.configs["rsm.config.storage.s3.bucket.name"]
            self.server.s3_client().put_object(Bucket=bucket, Key=key, Body=data)
        else:
            (self.root / key).write_bytes(data)

    def remove(self, key: str) -> None:
        if self.server is not None:
            bucket = self.configs["rsm.config.storage.s3.bucket.name"]
            self.server.s3_client().delete_object(Bucket=bucket, Key=key)
        else:
            (self.root / key).unlink()

    def flip_byte(self, key: str, position: int) -> None:
        data = bytearray(self.read(key))
        data[position] ^= 0x40
        self.write(key, bytes(data))

    def close(self) -> None:
        self.up()
        for rsm in self._made:
            rsm.close()


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "local":
        b = Backend("local", {"rsm.config.storage.backend": "local",
                              "rsm.config.storage.root": str(tmp_path / "remote")}, tmp_path)
    else:
        if not HAVE_OBSTORE:
            pytest.skip("the S3 backend needs obstore: pip install 'snakka[s3]'")
        configs = request.getfixturevalue("s3_bucket")
        b = Backend("s3", dict(configs), tmp_path, server=request.getfixturevalue("s3_server"))
    try:
        yield b
    finally:
        b.close()


class _FailedTry(logging.Handler):
    """Sets ``event`` at the storage manager's first 'failed (try' DEBUG line."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.event = threading.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        self.lines.append(f"{record.levelname} {msg}")
        if record.levelno == logging.DEBUG and "failed (try" in msg:
            self.event.set()


@pytest.fixture
def failed_try() -> Iterator[_FailedTry]:
    handler = _FailedTry()
    logger = logging.getLogger(RSM_LOGGER)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def _run_in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


# ---------------------------------------------------------------- round trip, layout


def test_round_trip_of_every_file(backend: Backend, segments: list[Segment]) -> None:
    rsm = backend.make()
    seg = segments[0]
    md = seg.metadata()
    custom = rsm.copy_log_segment_data(md, seg.data)
    assert custom is not None and 0 < len(custom) <= 128
    md = replace(md, custom_metadata=custom)
    # A fresh manager (nothing cached) reads everything back, byte-identical.
    fresh = backend.make()
    for rsm_ in (rsm, fresh):
        log_bytes = seg.files["log"]
        assert rsm_.fetch_log_segment(md, 0, len(log_bytes)) == log_bytes
        assert rsm_.fetch_index(md, IndexType.OFFSET) == seg.files["index"]
        assert rsm_.fetch_index(md, IndexType.TIMESTAMP) == seg.files["timeindex"]
        assert rsm_.fetch_index(md, IndexType.TRANSACTION) == seg.files["txnindex"]
        assert rsm_.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) == seg.files["snapshot"]
        assert rsm_.fetch_index(md, IndexType.LEADER_EPOCH) == LEADER_EPOCHS
    assert rsm.chunk_size == CHUNK


def test_object_keys_follow_the_contract(backend: Backend, segments: list[Segment]) -> None:
    rsm = backend.make(**{"rsm.config.key.prefix": "cluster-a/"})
    seg = segments[0]
    md = seg.metadata()
    rsm.copy_log_segment_data(md, seg.data)
    base = (f"cluster-a/tiered-3-{uuid_to_base64(TP.topic_id)}/"
            f"{seg.base_offset:020d}-{uuid_to_base64(md.segment_id.id)}")
    assert segment_key_base("cluster-a/", md) == base
    assert backend.keys() == sorted(
        f"{base}.{s}" for s in ("log", "index", "timeindex", "txnindex", "snapshot",
                                "leader_epoch_checkpoint", "manifest"))
    # The manifest is compact and names every file with its size.
    manifest = SegmentManifest.decode(backend.read(f"{base}.manifest"))
    assert manifest.chunk_size == CHUNK
    assert {k.suffix: e.size for k, e in manifest.files.items()} == {
        s: len(b) for s, b in seg.files.items()}
    assert len(backend.read(f"{base}.manifest")) < 200


def test_range_reads_across_chunk_boundaries(backend: Backend, segments: list[Segment]) -> None:
    rsm = backend.make()
    seg = segments[0]
    md = seg.metadata()
    rsm.copy_log_segment_data(md, seg.data)
    data = seg.files["log"]
    size = len(data)
    ranges = [(0, 1), (CHUNK - 1, CHUNK + 1), (CHUNK, 2 * CHUNK), (CHUNK + 5, 3 * CHUNK + 7),
              (0, size), (size - 3, size), (size - 3, size + 1000), (7, 7)]
    rng = random.Random(12)
    for _ in range(20):
        a = rng.randrange(size)
        ranges.append((a, a + rng.randrange(1, 3 * CHUNK)))
    for start, end in ranges:
        assert rsm.fetch_log_segment(md, start, end) == data[start:end], (start, end)
    assert rsm.fetch_log_segment(md, size, size + 10) == b""  # past the end: nothing
    assert rsm.fetch_log_segment(md, size + 100, size + 200) == b""
    with pytest.raises(ValueError):
        rsm.fetch_log_segment(md, 10, 5)


# ---------------------------------------------------------------- checksums


def test_a_flipped_byte_is_detected_in_the_chunk_it_is_in(backend: Backend,
                                                          segments: list[Segment]) -> None:
    seg = segments[0]
    rsm, md, base = backend.copied(seg)
    backend.flip_byte(f"{base}.log", 2 * CHUNK + 100)  # in chunk 2
    data = seg.files["log"]
    with pytest.raises(RemoteChecksumError, match="chunk 2"):
        rsm.fetch_log_segment(md, 2 * CHUNK + 50, 2 * CHUNK + 60)
    with pytest.raises(RemoteChecksumError):
        rsm.fetch_log_segment(md, CHUNK, 4 * CHUNK)  # spans it
    # The other chunks still read, verified.
    assert rsm.fetch_log_segment(md, 0, 2 * CHUNK) == data[:2 * CHUNK]
    assert rsm.fetch_log_segment(md, 3 * CHUNK, 4 * CHUNK) == data[3 * CHUNK:4 * CHUNK]
    # Indexes are verified whole.
    backend.flip_byte(f"{base}.index", 3)
    with pytest.raises(RemoteChecksumError):
        rsm.fetch_index(md, IndexType.OFFSET)
    backend.flip_byte(f"{base}.leader_epoch_checkpoint", 0)
    with pytest.raises(RemoteChecksumError):
        rsm.fetch_index(md, IndexType.LEADER_EPOCH)


def test_a_damaged_or_foreign_manifest_is_refused(backend: Backend,
                                                  segments: list[Segment]) -> None:
    seg = segments[0]
    rsm, md, base = backend.copied(seg)
    # Another copy's manifest under this one's name: the custom metadata tells.
    other = seg.metadata()
    rsm.copy_log_segment_data(other, segments[1].data)
    backend.write(f"{base}.manifest", backend.read(f"{segment_key_base('', other)}.manifest"))
    with pytest.raises(RemoteChecksumError, match="custom metadata"):
        backend.make().fetch_log_segment(md, 0, 10)
    # A flipped bit in the manifest fails the manifest's own CRC.
    rsm.copy_log_segment_data(md, seg.data)
    backend.flip_byte(f"{base}.manifest", 12)
    with pytest.raises(RemoteChecksumError, match="manifest"):
        backend.make().fetch_index(md, IndexType.OFFSET)


def test_an_object_shorter_than_its_manifest_is_an_error(backend: Backend,
                                                         segments: list[Segment]) -> None:
    rsm = backend.make()
    seg = segments[0]
    md = seg.metadata()
    rsm.copy_log_segment_data(md, seg.data)
    base = segment_key_base("", md)
    backend.write(f"{base}.log", seg.files["log"][:CHUNK + 10])
    with pytest.raises(RemoteChecksumError, match="manifest says"):
        rsm.fetch_log_segment(md, CHUNK, 3 * CHUNK)
    backend.write(f"{base}.timeindex", seg.files["timeindex"][:-12])
    with pytest.raises(RemoteChecksumError, match="manifest says"):
        rsm.fetch_index(md, IndexType.TIMESTAMP)


def test_checksum_and_not_found_errors_are_not_retried(backend: Backend,
                                                      segments: list[Segment]) -> None:
    rsm = backend.make(**{"rsm.config.storage.retry.max.attempts": 5,
                          "rsm.config.storage.retry.backoff.ms": 60_000})
    seg = segments[0]
    md = seg.metadata()
    rsm.copy_log_segment_data(md, seg.data)
    calls: list[str] = []
    store = rsm.store
    for name in ("get", "get_range"):
        real = getattr(store, name)

        def counted(*a: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(*a)
        setattr(store, name, counted)
    backend.flip_byte(f"{segment_key_base('', md)}.log", 5)
    with pytest.raises(RemoteChecksumError):
        rsm.fetch_log_segment(md, 0, 10)
    assert calls == ["get_range"]
    calls.clear()
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(seg.metadata(), 0, 10)  # never copied: no manifest
    assert calls == ["get"]


# ---------------------------------------------------------------- contract details


def test_a_segment_without_aborted_transactions_has_no_txnindex(
        backend: Backend, segments: list[Segment]) -> None:
    rsm = backend.make()
    seg = segments[1]
    md = seg.metadata()
    rsm.copy_log_segment_data(md, seg.data)
    with pytest.raises(RemoteResourceNotFoundError, match="txnindex"):
        rsm.fetch_index(md, IndexType.TRANSACTION)
    assert not any(k.endswith(".txnindex") for k in backend.keys())
    assert rsm.fetch_index(md, IndexType.OFFSET) == seg.files["index"]
    assert rsm.fetch_log_segment(md, 0, 10**9) == seg.files["log"]


def test_copy_and_delete_are_idempotent(backend: Backend, segments: list[Segment]) -> None:
    rsm = backend.make()
    seg = segments[0]
    md = seg.metadata()
    first = rsm.copy_log_segment_data(md, seg.data)
    keys = backend.keys()
    assert rsm.copy_log_segment_data(md, seg.data) == first  # a retried copy overwrites
    assert backend.keys() == keys
    assert rsm.fetch_log_segment(md, 0, 10**9) == seg.files["log"]
    # A second copy of the same segment (a new segment id) has its own objects.
    md2 = seg.metadata()
    rsm.copy_log_segment_data(md2, seg.data)
    assert len(backend.keys()) == 2 * len(keys)
    rsm.delete_log_segment_data(md)
    rsm.delete_log_segment_data(md)  # again: absent objects are fine
    assert backend.keys() == sorted(k for k in backend.keys()
                                    if k.startswith(segment_key_base("", md2)))
    assert len(backend.keys()) == len(keys)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(md, 0, 10)  # the cached manifest went with it
    with pytest.raises(RemoteResourceNotFoundError):
        backend.make().fetch_index(md, IndexType.OFFSET)
    assert rsm.fetch_log_segment(md2, 0, 10**9) == seg.files["log"]
    rsm.delete_log_segment_data(seg.metadata())  # never copied: nothing to do, no error


def test_a_copy_without_its_manifest_is_unreadable_and_deletable(
        backend: Backend, segments: list[Segment]) -> None:
    """The manifest is the commit point: the objects of a copy that died before it are not a
    segment, and deleting the segment's metadata removes them all."""
    rsm = backend.make()
    seg = segments[0]
    md = seg.metadata()
    rsm.copy_log_segment_data(md, seg.data)
    backend.remove(f"{segment_key_base('', md)}.manifest")
    fresh = backend.make()
    with pytest.raises(RemoteResourceNotFoundError):
        fresh.fetch_log_segment(md, 0, 10)
    with pytest.raises(RemoteResourceNotFoundError):
        fresh.fetch_index(md, IndexType.OFFSET)
    fresh.delete_log_segment_data(md)
    assert backend.keys() == []


def test_the_manifest_is_uploaded_last_and_deleted_first(backend: Backend,
                                                         segments: list[Segment]) -> None:
    rsm = backend.make()
    order: list[str] = []
    store = rsm.store
    for name in ("put_file", "put_bytes", "delete"):
        real = getattr(store, name)

        def traced(key: str, *a: Any, _real: Any = real) -> Any:
            order.append(key.rsplit(".", 1)[1])
            return _real(key, *a)
        setattr(store, name, traced)
    seg = segments[0]
    md = seg.metadata()
    rsm.copy_log_segment_data(md, seg.data)
    assert order[-1] == "manifest" and order.count("manifest") == 1 and len(order) == 7
    order.clear()
    rsm.delete_log_segment_data(md)
    assert order[0] == "manifest"


# ---------------------------------------------------------------- outages


def test_a_copy_rides_out_a_brief_outage(backend: Backend, segments: list[Segment],
                                         failed_try: _FailedTry) -> None:
    rsm = backend.make(**{"rsm.config.storage.retry.max.attempts": 40,
                          "rsm.config.storage.retry.backoff.ms": 20})
    seg = segments[0]
    md = seg.metadata()
    backend.down()
    thread, out = _run_in_thread(lambda: rsm.copy_log_segment_data(md, seg.data))
    assert failed_try.event.wait(30), "the copy never tried the store"
    backend.up()
    thread.join(60)
    assert not thread.is_alive()
    assert "error" not in out, out
    assert any("failed (try 1 of 40)" in line for line in failed_try.lines)
    md = replace(md, custom_metadata=out["result"])
    assert backend.make().fetch_log_segment(md, 0, 10**9) == seg.files["log"]
    # A read rides out an outage the same way.
    failed_try.event.clear()
    reader = backend.make(**{"rsm.config.storage.retry.max.attempts": 40,
                             "rsm.config.storage.retry.backoff.ms": 20})
    backend.down()
    thread, out = _run_in_thread(lambda: reader.fetch_index(md, IndexType.TIMESTAMP))
    assert failed_try.event.wait(30)
    backend.up()
    thread.join(60)
    assert out.get("result") == seg.files["timeindex"], out


def test_a_store_down_for_good_fails_the_copy_in_bounded_time(
        backend: Backend, segments: list[Segment], failed_try: _FailedTry) -> None:
    rsm = backend.make(**{"rsm.config.storage.retry.max.attempts": 4,
                          "rsm.config.storage.retry.backoff.ms": 10})
    seg = segments[0]
    md = seg.metadata()
    backend.down()
    t0 = time.monotonic()
    with pytest.raises(RemoteStorageError, match="tried 4 times") as info:
        rsm.copy_log_segment_data(md, seg.data)
    assert not isinstance(info.value, RemoteResourceNotFoundError)
    with pytest.raises(RemoteStorageError, match="tried 4 times"):
        rsm.fetch_log_segment(md, 0, 10)
    assert time.monotonic() - t0 < 60  # 3 waits of ~10-40 ms each, per call
    assert sum("failed (try" in line for line in failed_try.lines) == 6
    assert sum(line.startswith("WARNING") and "giving up" in line
               for line in failed_try.lines) == 2
    backend.up()
    # Nothing was committed: the segment is not readable.
    with pytest.raises(RemoteResourceNotFoundError):
        backend.make().fetch_log_segment(md, 0, 10)


def test_close_ends_a_retrying_call_at_once(backend: Backend, segments: list[Segment],
                                            failed_try: _FailedTry) -> None:
    rsm = backend.make(**{"rsm.config.storage.retry.max.attempts": 100,
                          "rsm.config.storage.retry.backoff.ms": 600_000})
    seg = segments[0]
    backend.down()
    thread, out = _run_in_thread(lambda: rsm.copy_log_segment_data(seg.metadata(), seg.data))
    assert failed_try.event.wait(30)
    rsm.close()
    thread.join(30)
    assert not thread.is_alive()
    assert isinstance(out.get("error"), RemoteStorageError)
    assert "closed" in str(out["error"])


# ---------------------------------------------------------------- threads


def test_concurrent_use_from_threads(backend: Backend, segments: list[Segment]) -> None:
    rsm = backend.make()
    mds = [(seg.metadata(), seg) for seg in segments for _ in range(4)]

    def copy_and_read(i: int) -> None:
        md, seg = mds[i]
        md = replace(md, custom_metadata=rsm.copy_log_segment_data(md, seg.data))
        rng = random.Random(i)
        data = seg.files["log"]
        for _ in range(10):
            a = rng.randrange(len(data))
            b = a + rng.randrange(1, 2 * CHUNK)
            assert rsm.fetch_log_segment(md, a, b) == data[a:b]
        assert rsm.fetch_index(md, IndexType.OFFSET) == seg.files["index"]
        if i % 2:
            rsm.delete_log_segment_data(md)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(copy_and_read, range(len(mds))))
    kept = {segment_key_base("", md) for i, (md, _) in enumerate(mds) if i % 2 == 0}
    assert {k.rsplit(".", 1)[0] for k in backend.keys()} == kept


# ---------------------------------------------------------------- backend specifics


@needs_obstore
def test_s3_multipart_upload_of_a_big_segment(s3_bucket: dict[str, object], s3_server: Any,
                                              tmp_path: Path) -> None:
    """Part size 5 MiB, a 13 MiB segment: three parts (S3's multipart ETag says so); a part
    that fails is retried with the whole upload."""
    plog = open_log(tmp_path / "big-0", LogConfig(segment_bytes=64 << 20), clock=Clock())
    payload = os.urandom(500_000)
    for i in range(26):  # ~13 MB: records of 500 kB, incompressible
        buf = bytearray(build_batch([Record(timestamp=1_700_000_000_000 + i, key=None,
                                            value=payload)]))
        append(plog, buf)
    plog.roll()
    plog.flush()
    snapshot = plog.take_snapshot(sync=True)
    seg = _segment_of(plog.segments[0], snapshot)
    plog.close()
    size = len(seg.files["log"])
    assert 12 << 20 <= size < 15 << 20
    rsm = create_remote_storage({
        **s3_bucket, **FAST_RETRY, "rsm.config.chunk.size": 1 << 20,
        "rsm.config.storage.s3.multipart.upload.part.size": 5 << 20})
    try:
        md = seg.metadata()
        # The second part fails once (throttled): the upload is tried again, whole.
        s3_server.inject_errors(lambda method, target: method == "PUT"
                                and ".log?" in target and "partNumber=2" in target)
        s3_server.requests.clear()
        rsm.copy_log_segment_data(md, seg.data)
        parts = sorted(t.split("partNumber=")[1].split("&")[0]
                       for m, t in s3_server.requests if m == "PUT" and "partNumber=" in t)
        # Both tries sent parts 1 and 2; part 3 went in the second (and maybe in the first,
        # which had two parts in flight).
        assert parts.count("1") == parts.count("2") == 2 and parts.count("3") in (1, 2), parts
        key = f"{segment_key_base('', md)}.log"
        bucket = s3_bucket["rsm.config.storage.s3.bucket.name"]
        leftover = s3_server.s3_client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        assert leftover == []  # the failed try's upload was aborted: no hidden debris
        head = s3_server.s3_client().head_object(Bucket=bucket, Key=key)
        assert head["ETag"].strip('"').endswith("-3"), head["ETag"]
        assert head["ContentLength"] == size
        assert rsm.fetch_log_segment(md, 0, size) == seg.files["log"]
        a = (5 << 20) - 10
        assert rsm.fetch_log_segment(md, a, a + 100) == seg.files["log"][a:a + 100]
    finally:
        rsm.close()


def test_local_backend_never_leaves_a_half_object_under_its_name(
        tmp_path: Path, segments: list[Segment], monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "remote"
    rsm = create_remote_storage({"rsm.config.storage.root": str(root),
                                 "rsm.config.chunk.size": CHUNK, **FAST_RETRY})
    import shutil

    real = shutil.copyfileobj

    def crash_midway(src: Any, dst: Any, length: int = 0) -> None:
        dst.write(src.read(1000))
        raise OSError(5, "Input/output error")  # EIO half-way through the write

    monkeypatch.setattr(shutil, "copyfileobj", crash_midway)
    seg = segments[0]
    md = seg.metadata()
    with pytest.raises(RemoteStorageError):
        rsm.copy_log_segment_data(md, seg.data)
    assert [p for p in root.rglob("*") if p.is_file()] == []
    monkeypatch.setattr(shutil, "copyfileobj", real)
    # What a real crash leaves (a temporary file) is never read and goes with the segment.
    rsm.copy_log_segment_data(md, seg.data)
    debris = root / f"{segment_key_base('', md)}.log.tmp-0123abcd"
    debris.write_bytes(b"half")
    assert rsm.fetch_log_segment(md, 0, 10**9) == seg.files["log"]
    rsm.delete_log_segment_data(md)
    assert [p for p in root.rglob("*") if p.is_file()] == []
    rsm.close()


def test_local_root_is_created_only_on_first_use(tmp_path: Path,
                                                 segments: list[Segment]) -> None:
    """After the first use a missing root is an unmounted share: not recreated (writing into
    the bare mount point would hide the copies and 'delete' nothing); an outage until back."""
    root = tmp_path / "nas" / "remote"
    rsm = create_remote_storage({"rsm.config.storage.root": str(root),
                                 "rsm.config.chunk.size": CHUNK, **FAST_RETRY},
                                create_root=False)
    try:
        seg = segments[0]
        md = seg.metadata()
        with pytest.raises(RemoteStorageError):
            rsm.copy_log_segment_data(md, seg.data)
        assert not root.exists()
        root.mkdir(parents=True)  # mounted again
        rsm.copy_log_segment_data(md, seg.data)
        assert rsm.fetch_log_segment(md, 0, 10**9) == seg.files["log"]
    finally:
        rsm.close()
    first = create_remote_storage({"rsm.config.storage.root": str(tmp_path / "new")})
    first.close()
    assert (tmp_path / "new").is_dir()


# ---------------------------------------------------------------- configuration


def test_bad_configurations_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rsm.config.storage.root"):
        create_remote_storage({"rsm.config.storage.backend": "local"})
    with pytest.raises(ConfigError, match="bucket"):
        create_remote_storage({"rsm.config.storage.backend": "s3"})
    with pytest.raises(ConfigError, match="access key"):
        create_remote_storage({"rsm.config.storage.backend": "s3",
                               "rsm.config.storage.s3.bucket.name": "b",
                               "rsm.config.storage.aws.access.key.id": "only-the-id"})
    with pytest.raises(ConfigError, match="relative path"):
        create_remote_storage({"rsm.config.storage.root": str(tmp_path),
                               "rsm.config.key.prefix": "../escape/"})
    with pytest.raises(ConfigError, match="'local' or 's3'"):
        create_remote_storage({"rsm.config.storage.backend": "gcs"})


def test_s3_backend_without_its_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "obstore", None)  # import obstore -> ImportError
    monkeypatch.delitem(sys.modules, "snakka.remote.storage.s3", raising=False)
    with pytest.raises(ConfigError, match=re.escape("pip install 'snakka[s3]'")):
        create_remote_storage({"rsm.config.storage.backend": "s3",
                               "rsm.config.storage.s3.bucket.name": "b"})


def test_backoff_is_capped_by_its_max(backend: Backend, segments: list[Segment],
                                      failed_try: _FailedTry) -> None:
    """rsm.config.storage.retry.backoff.max.ms bounds each wait: a first backoff of 10
    minutes capped at 5 ms gives up at once instead of hanging the test (and a copier)."""
    rsm = backend.make(**{"rsm.config.storage.retry.max.attempts": 3,
                          "rsm.config.storage.retry.backoff.ms": 600_000,
                          "rsm.config.storage.retry.backoff.max.ms": 5})
    backend.down()
    seg = segments[0]
    thread, out = _run_in_thread(lambda: rsm.copy_log_segment_data(seg.metadata(), seg.data))
    thread.join(60)
    assert not thread.is_alive()
    assert isinstance(out.get("error"), RemoteStorageError), out
    assert sum("failed (try" in line for line in failed_try.lines) == 2


@needs_obstore
def test_a_hung_s3_server_is_a_timeout_and_retried(segments: list[Segment],
                                                   failed_try: _FailedTry) -> None:
    """A server that accepts and never answers: each request ends at
    rsm.config.storage.s3.request.timeout.ms, is tried again, then the call fails."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        rsm = create_remote_storage({
            "rsm.config.storage.backend": "s3", "rsm.config.storage.s3.bucket.name": "hung",
            "rsm.config.storage.s3.endpoint.url": f"http://127.0.0.1:{port}",
            "rsm.config.storage.s3.path.style.access.enabled": True,
            "rsm.config.storage.aws.access.key.id": "k",
            "rsm.config.storage.aws.secret.access.key": "s",
            "rsm.config.storage.s3.request.timeout.ms": 300, **FAST_RETRY})
        try:
            with pytest.raises(RemoteStorageError, match="tried 3 times"):
                rsm.fetch_index(segments[0].metadata(), IndexType.OFFSET)
        finally:
            rsm.close()
    assert sum("failed (try" in line for line in failed_try.lines) == 2


@needs_obstore
@pytest.mark.parametrize("name", ["rsm.config.storage.retry.backoff.max.ms",
                                  "rsm.config.storage.s3.request.timeout.ms",
                                  "rsm.config.storage.s3.connect.timeout.ms",
                                  "rsm.config.storage.s3.multipart.upload.concurrency"])
def test_optional_bounds_must_be_positive(name: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(name)):
        create_remote_storage({"rsm.config.storage.backend": "s3",
                               "rsm.config.storage.s3.bucket.name": "b", name: 0})


@needs_obstore
def test_virtual_hosted_style_puts_the_bucket_in_the_host() -> None:
    from snakka.remote.storage.s3 import virtual_hosted_endpoint

    assert (virtual_hosted_endpoint("http://minio.local:9000", "logs")
            == "http://logs.minio.local:9000")
    assert virtual_hosted_endpoint("https://s3.example.com/", "b") == "https://b.s3.example.com/"


def test_a_tiny_segment_with_empty_files_round_trips(backend: Backend, tmp_path: Path) -> None:
    """One small batch: its offset index is empty (0 bytes), an empty object in the store."""
    plog = open_log(tmp_path / "tiny-0", clock=Clock())
    append(plog, batch(1))
    plog.roll()
    plog.flush()
    seg = _segment_of(plog.segments[0], plog.take_snapshot(sync=True))
    plog.close()
    assert seg.files["index"] == b""
    rsm = backend.make()
    md = seg.metadata()
    md = replace(md, custom_metadata=rsm.copy_log_segment_data(md, seg.data))
    fresh = backend.make()
    assert fresh.fetch_index(md, IndexType.OFFSET) == b""
    assert fresh.fetch_index(md, IndexType.TIMESTAMP) == seg.files["timeindex"]
    assert fresh.fetch_log_segment(md, 0, 1000) == seg.files["log"]


class _StatusServer:
    """A loopback HTTP server answering every request with one status (an S3 error body),
    counting the requests: what a throttling, failing or refusing S3 looks like."""

    def __init__(self, status: int, code: str) -> None:
        import http.server

        owner = self
        self.requests = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                owner.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                        f"<Message>{code}</Message></Error>").encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_DELETE = do_POST = do_HEAD = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def rsm(self) -> ObjectStoreRemoteStorageManager:
        rsm = create_remote_storage({
            "rsm.config.storage.backend": "s3", "rsm.config.storage.s3.bucket.name": "b-x",
            "rsm.config.storage.s3.endpoint.url":
                f"http://127.0.0.1:{self.server.server_address[1]}",
            "rsm.config.storage.s3.path.style.access.enabled": True,
            "rsm.config.storage.aws.access.key.id": "k",
            "rsm.config.storage.aws.secret.access.key": "s", **FAST_RETRY})
        assert isinstance(rsm, ObjectStoreRemoteStorageManager)
        return rsm

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@needs_obstore
@pytest.mark.parametrize("status,code,tries", [
    (503, "SlowDown", 3),           # throttling: transient, tried rsm...max.attempts times
    (500, "InternalError", 3),      # a 5xx: transient
    (403, "AccessDenied", 1),       # refused: trying again will not help
])
def test_s3_errors_retried_or_not(status: int, code: str, tries: int,
                                  segments: list[Segment]) -> None:
    server = _StatusServer(status, code)
    rsm = server.rsm()
    try:
        with pytest.raises(RemoteStorageError) as info:
            rsm.fetch_index(segments[0].metadata(), IndexType.OFFSET)
        assert not isinstance(info.value, RemoteResourceNotFoundError)
        assert server.requests == tries  # the library's own retries are off: ours count
        server.requests = 0
        with pytest.raises(RemoteStorageError):
            rsm.copy_log_segment_data(segments[1].metadata(), segments[1].data)
        assert server.requests == tries  # the first upload fails; nothing else is tried
    finally:
        rsm.close()
        server.close()


def test_s3_failures_are_one_line() -> None:
    """obstore's errors carry a multi-line request dump; what reaches the log is one line."""
    pytest.importorskip("obstore")
    from snakka.remote.storage.s3 import _translate

    err = _translate("put a/b.log", OSError("Generic S3 error: connection refused\n"
                                            "Debug: Request { method: PUT, ... }\n" * 20))
    assert "\n" not in str(err) and "connection refused" in str(err)
