"""OffsetForLeaderEpoch (23): the end offset of a leader epoch (KIP-101/KIP-320).

A single broker has one leader epoch, 0, for its whole life: epoch 0 ends at the log end offset;
a requested epoch above it is unknown (epoch -1, offset -1, as Kafka answers); a negative one too.
``current_leader_epoch`` is checked like everywhere (UNKNOWN/FENCED_LEADER_EPOCH).
"""

from __future__ import annotations

from snakka.handlers._common import LEADER_EPOCH, check_leader_epoch, lookup_log
from snakka.handlers.context import ApiDeclaration, ApiKey
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.offset_for_leader_epoch_response import (
    EpochEndOffset,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)

API = ApiDeclaration(ApiKey.OFFSET_FOR_LEADER_EPOCH)


def handle(ctx, req) -> OffsetForLeaderEpochResponse:
    broker = ctx.broker
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            pl, err = lookup_log(broker, t.topic, p.partition)
            if pl is not None:
                err = check_leader_epoch(p.current_leader_epoch)
            if err:
                parts.append(EpochEndOffset(error_code=err, partition=p.partition,
                                            leader_epoch=-1, end_offset=-1))
            elif p.leader_epoch == LEADER_EPOCH:
                parts.append(EpochEndOffset(error_code=0, partition=p.partition,
                                            leader_epoch=LEADER_EPOCH,
                                            end_offset=pl.log_end_offset))
            else:
                parts.append(EpochEndOffset(error_code=ErrorCode.NONE, partition=p.partition,
                                            leader_epoch=-1, end_offset=-1))
        topics.append(OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
