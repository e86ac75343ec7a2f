"""DeleteRecords (21): move a partition's log start offset forward (``kafka-delete-records``).

Offset -1 means the high watermark. An offset beyond the high watermark is OFFSET_OUT_OF_RANGE.
Whole segments below the new start offset are deleted; the new start offset survives restarts
(log-start-offset checkpoint). A reserved topic (``__consumer_offsets``, ...) is
INVALID_TOPIC_EXCEPTION, as Kafka answers: only its coordinator trims it.

Authorization: DELETE on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.core import RESERVED_TOPICS
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.delete_records_response import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from snakka.security.authorizer import AclOperation, ResourceType
from snakka.storage import OffsetOutOfRangeError

if TYPE_CHECKING:
    from snakka.protocol.messages.delete_records_request import DeleteRecordsRequest

API = ApiDeclaration(ApiKey.DELETE_RECORDS)


def handle(ctx: RequestContext, req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    replicas = ctx.services.replicas
    topics = []
    denied = ctx.denied(AclOperation.DELETE, ResourceType.TOPIC, [t.name for t in req.topics])
    for t in req.topics:
        parts = []
        for p in t.partitions:
            pl, err = replicas.lookup(t.name, p.partition_index)
            if t.name in denied:
                pl, err = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif t.name in RESERVED_TOPICS:
                pl, err = None, ErrorCode.INVALID_TOPIC_EXCEPTION
            low = -1
            if pl is not None:
                offset = pl.high_watermark if p.offset == -1 else p.offset
                try:
                    if offset < 0:
                        raise OffsetOutOfRangeError(f"offset {offset} is below 0")
                    replicas.delete_records_before(pl, offset)
                    low = pl.log_start_offset
                except OffsetOutOfRangeError:
                    err = ErrorCode.OFFSET_OUT_OF_RANGE
            parts.append(DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                                      low_watermark=low, error_code=err))
        topics.append(DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
