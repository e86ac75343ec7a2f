"""The durable metadata log: ``<log.dir>/__cluster_metadata-0``, as in KRaft.

Metadata records (see metadata.core) are JSON values of ordinary v2 record batches in an ordinary
partition log, so the same recovery (CRC check, torn-tail truncation) protects them as any topic.
At start-up every record is replayed into ClusterMetadata. Metadata changes are rare (topic
creation, config changes, producer-id blocks), so every change is fsynced before the client hears
of it; the fsync runs off the event loop (see Broker.commit_metadata). A request that changes many
things (CreateTopics of many topics, Metadata auto-creating many) appends all its records as one
batch and pays one fsync.

A record that cannot be decoded at replay fails start-up with one line naming the segment file and
offset (:class:`MetadataLogError`). Skipping it instead was considered and rejected: every record
is a change the broker acknowledged (a topic, a config, a producer-id block), so skipping one
would silently lose metadata, or worse, hand out producer ids twice. Recovery has already
truncated torn tails and checked CRCs, so an undecodable record means the log was written by
something else, and an operator should look at it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator

from snakka.records import Record, build_batch, validate_batches
from snakka.storage import LogConfig, UnifiedLog

log = logging.getLogger("snakka.metadata")


class MetadataLogError(RuntimeError):
    """The metadata log holds a record that cannot be replayed: start-up must stop."""

METADATA_DIR = "__cluster_metadata-0"
# Read chunk when replaying; a single metadata batch is tiny.
_REPLAY_CHUNK = 1 << 20


class MetadataStore:
    def __init__(self, log_dir: str) -> None:
        path = os.path.join(log_dir, METADATA_DIR)
        os.makedirs(path, exist_ok=True)
        # Retention off: the metadata log is the source of truth and is never trimmed.
        cfg = LogConfig.from_dict({"retention.ms": "-1", "retention.bytes": "-1"})
        self.log = UnifiedLog(path, cfg, recover=True)

    def replay(self) -> Iterator[tuple[int, dict]]:
        """Every record as (offset, record), in log order; MetadataLogError if one is not a
        JSON metadata record."""
        for rec in self.log.iter_records(_REPLAY_CHUNK):
            if rec.value is None:
                continue
            try:
                value = json.loads(rec.value)
            except ValueError as e:
                raise self.error(rec.offset, f"record is not valid JSON ({e})") from None
            if not isinstance(value, dict) or not isinstance(value.get("type"), str):
                raise self.error(rec.offset, "record has no metadata record type")
            yield rec.offset, value

    def error(self, offset: int, problem: str) -> MetadataLogError:
        """A MetadataLogError naming the segment file that holds ``offset``."""
        path = self.log.dir_path
        for seg in self.log.segments:
            if seg.base_offset <= offset:
                path = seg.path
        return MetadataLogError(
            f"cannot start: metadata log {path} offset {offset}: {problem}; the broker's "
            "metadata cannot be replayed (restore the metadata log or move the log dir aside)")

    def append(self, records: list[dict], *, sync: bool = True) -> None:
        if not records:
            return
        now = time.time_ns() // 1_000_000
        batch = bytearray(build_batch(
            [Record(timestamp=now, value=json.dumps(r, separators=(",", ":")).encode())
             for r in records]))
        infos = validate_batches(batch, max_message_bytes=1 << 30)
        self.log.append(batch, infos, log_append_time_ms=None)
        if sync:
            self.sync()

    def sync(self) -> None:
        self.log.flush()

    def close(self) -> None:
        self.log.flush()
        self.log.close()
