"""Old home of :class:`PartitionLog`, kept only so imports of ``snakka.storage.log`` work
while issue 10's refactor is merged; the lead removes it when every user is renamed.

The partition log is now split as in Kafka: :mod:`.unified_log` (UnifiedLog),
:mod:`.local_log` (LocalLog), :mod:`.loader` (LogLoader), :mod:`.validator` (LogValidator).
"""

from __future__ import annotations

from .local_log import parse_partition_dir_name
from .unified_log import (
    AppendResult,
    LogClosedError,
    OffsetOutOfRangeError,
    ProducerStateError,
    UnifiedLog,
)

PartitionLog = UnifiedLog  # alias until every user says UnifiedLog

__all__ = [
    "AppendResult",
    "LogClosedError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ProducerStateError",
    "UnifiedLog",
    "parse_partition_dir_name",
]
