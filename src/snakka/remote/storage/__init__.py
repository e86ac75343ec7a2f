"""The RemoteStorageManager (Kafka's KIP-405 contract) and its backends.

What it owns: the objects of remote segments (the log, its offset/time/transaction indexes,
the producer snapshot, the leader-epoch checkpoint, and a manifest that commits them), their
checksums, and retrying a store that does not answer. What it does not: which segments are
remote and in which state (the RemoteLogMetadataManager, ``__remote_log_metadata``), when
to copy or delete (the RemoteLogManager), caching reads (the remote reader).

- :mod:`.objects`: the one implementation of the contract over any object store (keys,
  manifest-last commit, CRC32C per chunk, retries with backoff).
- :mod:`.manifest`: the manifest's binary format.
- :mod:`.local`: a directory (tests, NAS, the embedded default).
- :mod:`.s3`: S3-compatible object storage, through obstore (the ``s3`` extra).

Synchronous and thread-safe: called from worker threads, never from the event loop.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Protocol

from snakka.config import ConfigError, broker_default
from snakka.remote.storage.errors import (
    RemoteChecksumError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from snakka.remote.storage.objects import (
    RETRY_BACKOFF_MAX_MS,
    ObjectStore,
    ObjectStoreRemoteStorageManager,
)
from snakka.remote.types import IndexType, LogSegmentData, RemoteLogSegmentMetadata

log = logging.getLogger(__name__)

S3_INSTALL_HINT = "pip install 'snakka[s3]'"


class RemoteStorageManager(Protocol):
    """Kafka's RemoteStorageManager (``org.apache.kafka.server.log.remote.storage``)."""

    chunk_size: int  # rsm.config.chunk.size: reads are verified (and best cached) in these

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              data: LogSegmentData) -> bytes | None:
        """Upload every file of the segment, then LAST its manifest (the commit point).
        Returns the custom metadata to store with the segment (the manifest's checksum).
        Idempotent: a retry of the same copy overwrites its own objects."""
        ...

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int) -> bytes:
        """Bytes [start_position, end_position) of the segment's log (end clipped to its
        size; b"" past it), every chunk touched verified (RemoteChecksumError)."""
        ...

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """A whole index file, verified; TRANSACTION of a segment without aborted
        transactions raises RemoteResourceNotFoundError."""
        ...

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Remove the segment's objects, manifest first; absent objects are fine."""
        ...

    def close(self) -> None: ...


def _get(configs: Mapping[str, object], name: str) -> object:
    v = configs.get(name)
    return broker_default(name) if v is None else v


def _int(configs: Mapping[str, object], name: str) -> int:
    v = _get(configs, name)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(name, v, "expected an integer")
    return v


def _opt_int(configs: Mapping[str, object], name: str, default: int) -> int:
    """A bound of this package not (yet) in the broker's config table: read from ``configs``
    when given (the ``rsm.config.*`` prefix passes any key through, as in Kafka), positive."""
    v = configs.get(name, default)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConfigError(name, v, "expected a positive integer")
    return v


def _str(configs: Mapping[str, object], name: str) -> str:
    return str(_get(configs, name) or "")


def create_remote_storage(configs: Mapping[str, object], *,
                          create_root: bool = True) -> RemoteStorageManager:
    """The storage manager ``configs`` (the ``rsm.config.*`` broker configs, full names,
    values parsed; a missing key takes its default) describe.

    ``rsm.config.storage.root`` must be set (the caller resolves its default) for the local
    backend, and is created if absent when ``create_root`` (the broker's first use of tiered
    storage); otherwise a missing root is an outage. ConfigError for a bad combination, or for backend s3
    when its library is not installed."""
    backend = _str(configs, "rsm.config.storage.backend")
    prefix = _str(configs, "rsm.config.key.prefix")
    store: ObjectStore
    if backend == "local":
        root = _str(configs, "rsm.config.storage.root")
        if not root:
            raise ConfigError("rsm.config.storage.root", root,
                              "the local remote-storage backend needs a directory")
        if os.path.isabs(prefix) or any(p in (".", "..") for p in prefix.split("/")):
            raise ConfigError("rsm.config.key.prefix", prefix,
                              "must be a relative path for the local backend")
        # Only on first use (the caller knows): once segments may be in it, a missing root
        # is an outage (an unmounted NAS: creating it would write into the bare mount point
        # and "delete" nothing), reported and retried by every call until it is back.
        if create_root:
            try:
                os.makedirs(root, exist_ok=True)
            except OSError as exc:
                raise ConfigError("rsm.config.storage.root", root, str(exc)) from exc
        elif not os.path.isdir(root):
            log.warning("tiered storage: the local backend's root %s is not there (an "
                        "unmounted share?); remote reads, copies and deletions wait for it",
                        root)
        from snakka.remote.storage.local import LocalDirectoryStore
        store = LocalDirectoryStore(root)
    elif backend == "s3":
        bucket = _str(configs, "rsm.config.storage.s3.bucket.name")
        if not bucket:
            raise ConfigError("rsm.config.storage.s3.bucket.name", bucket,
                              "the s3 remote-storage backend needs a bucket")
        key_id = _str(configs, "rsm.config.storage.aws.access.key.id")
        secret = _str(configs, "rsm.config.storage.aws.secret.access.key")
        if bool(key_id) != bool(secret):
            raise ConfigError("rsm.config.storage.aws.access.key.id", key_id,
                              "set both the access key id and the secret access key, or "
                              "neither (the AWS credential chain)")
        try:
            from snakka.remote.storage.s3 import (
                CONNECT_TIMEOUT_MS,
                MULTIPART_CONCURRENCY,
                REQUEST_TIMEOUT_MS,
                S3ObjectStore,
            )
        except ImportError as exc:
            raise ConfigError("rsm.config.storage.backend", backend,
                              f"the s3 backend needs the obstore library: {S3_INSTALL_HINT} "
                              f"({exc})") from exc
        try:
            store = S3ObjectStore(
                bucket=bucket,
                endpoint_url=_str(configs, "rsm.config.storage.s3.endpoint.url"),
                region=_str(configs, "rsm.config.storage.s3.region"),
                path_style=bool(_get(configs, "rsm.config.storage.s3.path.style.access.enabled")),
                access_key_id=key_id, secret_access_key=secret,
                part_size=_int(configs, "rsm.config.storage.s3.multipart.upload.part.size"),
                part_concurrency=_opt_int(configs, "rsm.config.storage.s3.multipart.upload."
                                          "concurrency", MULTIPART_CONCURRENCY),
                connect_timeout_ms=_opt_int(configs, "rsm.config.storage.s3.connect.timeout.ms",
                                            CONNECT_TIMEOUT_MS),
                request_timeout_ms=_opt_int(configs, "rsm.config.storage.s3.request.timeout.ms",
                                            REQUEST_TIMEOUT_MS))
        except ConfigError:
            raise
        except Exception as exc:  # the library refuses its configuration (bad endpoint URL...)
            raise ConfigError("rsm.config.storage.s3.endpoint.url",
                              _str(configs, "rsm.config.storage.s3.endpoint.url"),
                              f"the S3 client refuses this configuration: {exc}") from exc
    else:
        raise ConfigError("rsm.config.storage.backend", backend, "expected 'local' or 's3'")
    rsm = ObjectStoreRemoteStorageManager(
        store, chunk_size=_int(configs, "rsm.config.chunk.size"), key_prefix=prefix,
        retry_max_attempts=_int(configs, "rsm.config.storage.retry.max.attempts"),
        retry_backoff_ms=_int(configs, "rsm.config.storage.retry.backoff.ms"),
        retry_backoff_max_ms=_opt_int(configs, "rsm.config.storage.retry.backoff.max.ms",
                                      RETRY_BACKOFF_MAX_MS))
    log.info("remote storage: %s, chunks of %d bytes", store.description, rsm.chunk_size)
    return rsm


__all__ = [
    "S3_INSTALL_HINT",
    "RemoteChecksumError",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
    "create_remote_storage",
]
