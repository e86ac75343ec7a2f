"""The RemoteStorageManager over any object store: keys, the manifest, checksums, retries.

A backend (:mod:`.local`, :mod:`.s3`) only moves whole objects and byte ranges
(:class:`ObjectStore`); everything KIP-405 asks of a storage manager is here, once, so both
backends behave the same and one test suite covers both:

- **Keys**: ``<rsm.config.key.prefix><topic>-<partition>-<topic id>/<start offset, 20
  digits>-<segment uuid>.<suffix>``, ids in Kafka's base64 form (as ``kafka-topics.sh``
  prints them). Every copy attempt has its own segment uuid, so a copy never overwrites the
  objects of another copy; a retry of the same copy overwrites its own (idempotent).
- **Commit point**: the segment's files go up first, its manifest LAST
  (:mod:`.manifest`); a segment whose manifest is absent is not readable
  (RemoteResourceNotFoundError). Deletion removes the manifest FIRST, so a half-deleted
  segment is never mistaken for a whole one.
- **Checksums**: every byte handed out was verified, chunk by chunk, against the manifest
  (RemoteChecksumError); the manifest itself carries a CRC32C, and the custom metadata the
  copy returned names the manifest it committed.
- **Retries**: a backend raises :class:`TransientStoreError` for what may pass (connection
  refused or reset, timeouts, 5xx, throttling); the call is tried
  ``rsm.config.storage.retry.max.attempts`` times in all, waiting
  ``rsm.config.storage.retry.backoff.ms`` doubled per try (jittered, capped at
  ``rsm.config.storage.retry.backoff.max.ms``), then RemoteStorageError. One DEBUG line per failed try, one
  WARNING per give-up. Not-found and checksum errors are never retried. :meth:`close` ends
  the waits at once.

Thread-safe and synchronous: the remote log manager's copier/expiration threads and the remote
reader's threads call it, never the event loop. The only shared state is the manifest cache
(a lock; manifests never change once written, a segment id names one copy).
"""

from __future__ import annotations

import logging
import random
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Protocol, TypeVar

from snakka.protocol.primitives import uuid_to_base64
from snakka.remote.storage.errors import (
    RemoteChecksumError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TransientStoreError,
)
from snakka.remote.storage.manifest import (
    FILE_KIND_OF_INDEX,
    MANIFEST_SUFFIX,
    FileEntry,
    FileKind,
    SegmentManifest,
    check_custom_metadata,
    chunk_crcs,
    crc32c,
    custom_metadata,
)
from snakka.remote.types import IndexType, LogSegmentData, RemoteLogSegmentMetadata

log = logging.getLogger(__name__)

T = TypeVar("T")

# Default of rsm.config.storage.retry.backoff.max.ms, the longest wait between two tries of one
# object-store call: doubling from rsm.config.storage.retry.backoff.ms must not turn a
# generous attempt count into hours; the remote log manager has its own, longer backoff
# between whole copies (remote.log.manager.task.retry.backoff.max.ms).
RETRY_BACKOFF_MAX_MS = 10_000

# Manifests kept in memory (about 1 KiB each for a 1 GiB segment in 4 MiB chunks), so a
# fetch costs one ranged GET, not two. A bound, not a tuning knob: a miss costs one small GET.
MANIFEST_CACHE_ENTRIES = 4096

# Files are read for their checksums in pieces of at most this size (memory per copy).
_READ_PIECE = 8 << 20


class ObjectStore(Protocol):
    """What a backend does: whole objects and byte ranges, nothing KIP-405 specific.

    Failures: RemoteResourceNotFoundError for an absent object (never retried),
    TransientStoreError for what may pass, RemoteStorageError for the rest."""

    description: str  # for log lines: "s3://bucket/", "directory /data/remote"

    def put_file(self, key: str, path: str, size: int) -> None:
        """Store the file at ``path`` (``size`` bytes) as ``key``: complete or not at all."""
        ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object (fewer if it is shorter); ``start < end``."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; an absent one is fine."""
        ...

    def close(self) -> None: ...


def segment_key_base(prefix: str, metadata: RemoteLogSegmentMetadata) -> str:
    """The object key of ``metadata``'s segment without its suffix."""
    tp = metadata.topic_id_partition
    return (f"{prefix}{tp.topic}-{tp.partition}-{uuid_to_base64(tp.topic_id)}/"
            f"{metadata.start_offset:020d}-{uuid_to_base64(metadata.segment_id.id)}")


class ObjectStoreRemoteStorageManager:
    """Kafka's RemoteStorageManager over an :class:`ObjectStore` (see the module doc)."""

    def __init__(self, store: ObjectStore, *, chunk_size: int, key_prefix: str = "",
                 retry_max_attempts: int = 5, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS) -> None:
        if min(chunk_size, retry_max_attempts, retry_backoff_ms, retry_backoff_max_ms) <= 0:
            raise ValueError("chunk size, retry attempts and backoffs must be positive")
        self.store = store
        self.chunk_size = chunk_size
        self.key_prefix = key_prefix
        self.retry_max_attempts = retry_max_attempts
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._manifests: OrderedDict[object, SegmentManifest] = OrderedDict()

    def __repr__(self) -> str:
        return f"RemoteStorageManager({self.store.description})"

    # ------------------------------------------------------------------ KIP-405 operations

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              data: LogSegmentData) -> bytes | None:
        base = segment_key_base(self.key_prefix, metadata)
        files: list[tuple[FileKind, str | bytes]] = [
            (FileKind.LOG, data.log_segment),
            (FileKind.OFFSET_INDEX, data.offset_index),
            (FileKind.TIME_INDEX, data.time_index),
            (FileKind.PRODUCER_SNAPSHOT, data.producer_snapshot_index),
            (FileKind.LEADER_EPOCH_CHECKPOINT, data.leader_epoch_index),
        ]
        if data.transaction_index is not None:
            files.append((FileKind.TRANSACTION_INDEX, data.transaction_index))
        entries: dict[FileKind, FileEntry] = {}
        for kind, source in files:
            key = f"{base}.{kind.suffix}"
            if isinstance(source, bytes):
                entries[kind] = FileEntry(len(source), chunk_crcs(source, self.chunk_size))
                self._call(f"upload {key}", partial(self.store.put_bytes, key, source))
            else:
                entries[kind] = self._file_entry(source)
                size = entries[kind].size
                self._call(f"upload {key}", partial(self.store.put_file, key, source, size))
        manifest = SegmentManifest(self.chunk_size, entries)
        encoded = manifest.encode()
        key = f"{base}.{MANIFEST_SUFFIX}"
        self._call(f"upload {key}", lambda: self.store.put_bytes(key, encoded))
        self._remember(metadata, manifest)
        return custom_metadata(encoded)

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int) -> bytes:
        if start_position < 0 or end_position < start_position:
            raise ValueError(f"bad range [{start_position}, {end_position})")
        manifest = self._manifest(metadata)
        entry = manifest.files.get(FileKind.LOG)
        if entry is None:
            raise RemoteStorageError("segment manifest without a log file")
        end = min(end_position, entry.size)
        if start_position >= end:
            return b""
        cs = manifest.chunk_size
        first = start_position // cs
        lo, hi = first * cs, min(((end - 1) // cs + 1) * cs, entry.size)
        key = f"{segment_key_base(self.key_prefix, metadata)}.{FileKind.LOG.suffix}"
        data = self._call(f"read {key} [{lo}, {hi})",
                          lambda: self.store.get_range(key, lo, hi))
        if len(data) != hi - lo:
            raise RemoteChecksumError(
                f"{key}: {len(data)} bytes at {lo}, the manifest says {hi - lo}")
        entry.verify(FileKind.LOG, first, data, cs)
        return bytes(memoryview(data)[start_position - lo:end - lo])

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        manifest = self._manifest(metadata)
        kind = FILE_KIND_OF_INDEX[index_type]
        entry = manifest.files.get(kind)
        if entry is None:
            raise RemoteResourceNotFoundError(
                f"segment {metadata.segment_id.id} at {metadata.start_offset} has no "
                f"{kind.suffix}")
        key = f"{segment_key_base(self.key_prefix, metadata)}.{kind.suffix}"
        data = self._call(f"read {key}", lambda: self.store.get(key))
        if len(data) != entry.size:
            raise RemoteChecksumError(f"{key}: {len(data)} bytes, the manifest says {entry.size}")
        entry.verify(kind, 0, data, manifest.chunk_size)
        return data

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        base = segment_key_base(self.key_prefix, metadata)
        # Manifest first: from then on the segment is unreadable, whatever is left.
        for suffix in [MANIFEST_SUFFIX, *(k.suffix for k in FileKind)]:
            key = f"{base}.{suffix}"
            self._call(f"delete {key}", partial(self.store.delete, key))
            if suffix == MANIFEST_SUFFIX:
                # Forgotten once the stored one is gone: a reader racing the deletion cannot
                # cache it again.
                with self._lock:
                    self._manifests.pop(metadata.segment_id, None)

    def close(self) -> None:
        self._closed.set()
        self.store.close()

    # ------------------------------------------------------------------ internals

    def _file_entry(self, path: str) -> FileEntry:
        """Size and chunk checksums of a local file of the segment being copied."""
        crcs: list[int] = []
        size = 0
        piece = max(self.chunk_size, (_READ_PIECE // self.chunk_size) * self.chunk_size)
        try:
            with open(path, "rb") as f:
                while buf := f.read(piece):
                    crcs.extend(chunk_crcs(buf, self.chunk_size))
                    size += len(buf)
        except OSError as exc:
            raise RemoteStorageError(f"cannot read {path} for upload: {exc}") from exc
        return FileEntry(size, tuple(crcs))

    def _manifest(self, metadata: RemoteLogSegmentMetadata) -> SegmentManifest:
        with self._lock:
            cached = self._manifests.get(metadata.segment_id)
            if cached is not None:
                self._manifests.move_to_end(metadata.segment_id)
                return cached
        key = f"{segment_key_base(self.key_prefix, metadata)}.{MANIFEST_SUFFIX}"
        raw = self._call(f"read {key}", lambda: self.store.get(key))
        manifest = SegmentManifest.decode(raw)
        check_custom_metadata(metadata.custom_metadata, raw)
        self._remember(metadata, manifest)
        return manifest

    def _remember(self, metadata: RemoteLogSegmentMetadata, manifest: SegmentManifest) -> None:
        with self._lock:
            self._manifests[metadata.segment_id] = manifest
            self._manifests.move_to_end(metadata.segment_id)
            while len(self._manifests) > MANIFEST_CACHE_ENTRIES:
                self._manifests.popitem(last=False)

    def _call(self, what: str, op: Callable[[], T]) -> T:
        """``op`` with retries of transient failures (see the module doc)."""
        delay_ms = float(self.retry_backoff_ms)
        attempt = 1
        while True:
            if self._closed.is_set():
                raise RemoteStorageError(f"{what}: the remote storage manager is closed")
            try:
                return op()
            except TransientStoreError as exc:
                if attempt >= self.retry_max_attempts:
                    log.warning("remote storage (%s): %s failed %d times, giving up: %s",
                                self.store.description, what, attempt, exc)
                    raise RemoteStorageError(f"{what}: {exc} (tried {attempt} times)") from exc
                wait_ms = min(delay_ms, self.retry_backoff_max_ms) * random.uniform(0.8, 1.2)
                log.debug("remote storage (%s): %s failed (try %d of %d), again in %.0f ms: %s",
                          self.store.description, what, attempt, self.retry_max_attempts,
                          wait_ms, exc)
                if self._closed.wait(wait_ms / 1000):
                    raise RemoteStorageError(
                        f"{what}: the remote storage manager is closed") from exc
                delay_ms *= 2
                attempt += 1


__all__ = [
    "MANIFEST_CACHE_ENTRIES",
    "RETRY_BACKOFF_MAX_MS",
    "ObjectStore",
    "ObjectStoreRemoteStorageManager",
    "crc32c",
    "segment_key_base",
]
