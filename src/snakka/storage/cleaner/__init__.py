"""Kafka's log cleaner (log compaction) for ``cleanup.policy=compact`` topics.

What this package owns
    Keeping, in the cleanable part of a compacted log, the latest record per key: the
    bounded key -> offset map (:mod:`.offset_map`, Kafka's SkimpyOffsetMap), what a pass keeps
    of each batch (:mod:`.filter`: Kafka's Cleaner record filter, MemoryRecords.filterTo and
    CleanedTransactionMetadata), and the cleaner itself (choosing logs, dirty ratio, the
    cleaner-offset-checkpoint, writing ``.cleaned`` segments and swapping them in, the
    thread and its throttle).

Layering
    Part of the storage layer: imports the records (base) and storage modules, never the
    broker, handlers or server. The filter and the map are pure (no I/O, no clock of their
    own: the pass's ``now_ms`` is handed in).
"""

from .filter import (
    CleanContext,
    CleanedTxns,
    FilteredBatch,
    add_batch_to_offset_map,
    batch_keys,
    filter_batch,
)
from .offset_map import ENTRY_BYTES, OffsetMap, OffsetMapFullError

__all__ = [
    "ENTRY_BYTES",
    "CleanContext",
    "CleanedTxns",
    "FilteredBatch",
    "OffsetMap",
    "OffsetMapFullError",
    "add_batch_to_offset_map",
    "batch_keys",
    "filter_batch",
]
