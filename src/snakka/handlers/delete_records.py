"""DeleteRecords (21): move a partition's log start offset forward (``kafka-delete-records``).

Offset -1 means the high watermark. An offset beyond the high watermark is OFFSET_OUT_OF_RANGE.
Whole segments below the new start offset are deleted; the new start offset survives restarts
(log-start-offset checkpoint).
"""

from __future__ import annotations

from snakka.handlers._common import lookup_log
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.delete_records_response import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from snakka.storage import OffsetOutOfRangeError

API_KEY = 21


def handle(ctx, req) -> DeleteRecordsResponse:
    broker = ctx.broker
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            pl, err = lookup_log(broker, t.name, p.partition_index)
            low = -1
            if pl is not None:
                offset = pl.high_watermark if p.offset == -1 else p.offset
                try:
                    if offset < 0:
                        raise OffsetOutOfRangeError(offset)
                    pl.delete_records_before(offset)
                    low = pl.log_start_offset
                    broker.logs.checkpoint()
                except OffsetOutOfRangeError:
                    err = ErrorCode.OFFSET_OUT_OF_RANGE
            parts.append(DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                                      low_watermark=low, error_code=err))
        topics.append(DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
