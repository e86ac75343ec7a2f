"""OffsetForLeaderEpoch (23): the end offset of a leader epoch (KIP-101/KIP-320).

A single broker has one leader epoch, 0, for its whole life: epoch 0 ends at the log end offset;
a requested epoch above it is unknown (epoch -1, offset -1, as Kafka answers); a negative one too.
``current_leader_epoch`` is checked like everywhere (UNKNOWN/FENCED_LEADER_EPOCH).

Authorization: CLUSTER_ACTION on the cluster (a follower) or DESCRIBE on each topic (else
TOPIC_AUTHORIZATION_FAILED for its partitions), as Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.offset_for_leader_epoch_response import (
    EpochEndOffset,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest

API = ApiDeclaration(ApiKey.OFFSET_FOR_LEADER_EPOCH)


def handle(ctx: RequestContext, req: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    replicas = ctx.services.replicas
    topics = []
    denied: frozenset[str] = frozenset()
    if not ctx.allows_everything and not ctx.is_allowed(
            AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False):
        denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC,
                            [t.topic for t in req.topics])
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if denied and t.topic in denied:
                parts.append(EpochEndOffset(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                            partition=p.partition, leader_epoch=-1,
                                            end_offset=-1))
                continue
            pl, err = replicas.lookup(t.topic, p.partition)
            if pl is not None:
                err = replicas.check_leader_epoch(p.current_leader_epoch)
            if pl is None or err:
                parts.append(EpochEndOffset(error_code=err, partition=p.partition,
                                            leader_epoch=-1, end_offset=-1))
            elif p.leader_epoch == replicas.leader_epoch(t.topic, p.partition):
                parts.append(EpochEndOffset(error_code=0, partition=p.partition,
                                            leader_epoch=p.leader_epoch,
                                            end_offset=pl.log_end_offset))
            else:
                parts.append(EpochEndOffset(error_code=ErrorCode.NONE, partition=p.partition,
                                            leader_epoch=-1, end_offset=-1))
        topics.append(OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
