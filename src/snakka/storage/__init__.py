"""Partition logs in Kafka's on-disk layout.

``<log.dirs>/<topic>-<partition>/NNNNNNNNNNNNNNNNNNNN.{log,index,timeindex,snapshot}``,
``partition.metadata``; in the log dir ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``meta.properties``, ``.kafka_cleanshutdown``, ``.lock``.

Layers inside this package, top to bottom (arrows point down only):

* :mod:`.manager`: :class:`LogManager`: all logs, checkpoints, start-up recovery (opens
  each partition's :class:`UnifiedLog`, which runs the loader).
* :mod:`.flush`: :class:`FlushScheduler`: background group commit, strict mode.
* :mod:`.unified_log`: :class:`UnifiedLog` (Kafka's UnifiedLog): the partition's log as
  the broker sees it: log start offset, high watermark, last stable offset, producer
  state, append (producer checks, offset assignment), reads, ListOffsets, DeleteRecords,
  retention policy, truncation; the seam where a remote (tiered) part will plug in
  (:class:`RemoteLogReader`).
* :mod:`.validator`: :class:`LogValidator`: produced batches against the topic's configs,
  broker-side recompression.
* :mod:`.loader`: :class:`LogLoader`: start-up recovery of a partition directory and
  producer-state rebuilding (snapshots + log).
* :mod:`.local_log`: :class:`LocalLog` (Kafka's LocalLog): the segments on this disk:
  roll, append bytes, read by offset / time, truncate, delete segments, recovery point,
  flush, close.
* :mod:`.segment`: :class:`LogSegment`; :mod:`.index`: :class:`OffsetIndex`,
  :class:`TimeIndex`; :mod:`.files`: the segment file-descriptor pool.
* :mod:`.config`: :class:`LogConfig` (typed topic configs; the table is snakka.config);
  :mod:`.checkpoint`: the small files' formats.

Threading, in one line: everything on the event-loop thread, except fsync (flush) on one
worker thread; see :mod:`.local_log` for the lock discipline.
"""

from .checkpoint import (
    ensure_meta_properties,
    read_meta_properties,
    read_offset_checkpoint,
    read_partition_metadata,
    topic_id_from_str,
    topic_id_to_str,
    write_meta_properties,
    write_offset_checkpoint,
    write_partition_metadata,
)
from .config import TOPIC_CONFIG_NAMES, LogConfig
from .flush import (
    DEFAULT_FLUSH_INTERVAL_MS,
    LOG_FLUSH_INTERVAL_MS_CONFIG,
    LOG_FLUSH_STRICT_CONFIG,
    FlushScheduler,
)
from .index import CorruptIndexError, OffsetIndex, TimeIndex
from .loader import LoadedLog, LogLoader
from .local_log import LocalLog, parse_partition_dir_name
from .manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from .segment import LogSegment
from .unified_log import (
    AppendResult,
    LogClosedError,
    OffsetOutOfRangeError,
    ProducerStateError,
    RemoteFetchPending,
    RemoteLogReader,
    RemoteLogUnavailableError,
    UnifiedLog,
)
from .validator import LogValidator

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "DEFAULT_FLUSH_INTERVAL_MS",
    "LOG_FLUSH_INTERVAL_MS_CONFIG",
    "LOG_FLUSH_STRICT_CONFIG",
    "LOG_START_OFFSET_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "TOPIC_CONFIG_NAMES",
    "AppendResult",
    "CorruptIndexError",
    "FlushScheduler",
    "LogClosedError",
    "LogConfig",
    "LoadedLog",
    "LocalLog",
    "LogLoader",
    "LogManager",
    "LogSegment",
    "LogValidator",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "ProducerStateError",
    "RemoteFetchPending",
    "RemoteLogUnavailableError",
    "RemoteLogReader",
    "TimeIndex",
    "UnifiedLog",
    "ensure_meta_properties",
    "parse_partition_dir_name",
    "read_meta_properties",
    "read_offset_checkpoint",
    "read_partition_metadata",
    "topic_id_from_str",
    "topic_id_to_str",
    "write_meta_properties",
    "write_offset_checkpoint",
    "write_partition_metadata",
]
