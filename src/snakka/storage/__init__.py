"""Partition logs in Kafka's on-disk layout.

``<log.dirs>/<topic>-<partition>/NNNNNNNNNNNNNNNNNNNN.{log,index,timeindex,snapshot}``,
``partition.metadata``; in the log dir ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``meta.properties``, ``.kafka_cleanshutdown``, ``.lock``.

* :mod:`.config`: :class:`LogConfig` (typed topic configs; the table is snakka.config).
* :mod:`.index`: :class:`OffsetIndex`, :class:`TimeIndex`.
* :mod:`.segment`: :class:`LogSegment`.
* :mod:`.log`: :class:`PartitionLog` (Kafka's UnifiedLog): append, read, ListOffsets,
  DeleteRecords, retention, truncation, recovery, producer-state snapshots.
* :mod:`.manager`: :class:`LogManager`: all logs, checkpoints, start-up recovery.
* :mod:`.flush`: :class:`FlushScheduler`: background group commit, strict mode.
* :mod:`.checkpoint`: the small files' formats.

Threading, in one line: everything on the event-loop thread, except fsync (flush) on one
worker thread; see :mod:`.log` for the lock discipline.
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
from .log import (
    AppendResult,
    LogClosedError,
    OffsetOutOfRangeError,
    PartitionLog,
    ProducerStateError,
    parse_partition_dir_name,
)
from .manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from .segment import LogSegment

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
    "LogManager",
    "LogSegment",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ProducerStateError",
    "TimeIndex",
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
