"""ShareAcknowledge (79, v1-v2): acknowledge records acquired through ShareFetch (KIP-932).

The share session must exist and the epoch be its next one (epoch 0 is
INVALID_SHARE_SESSION_EPOCH: only ShareFetch opens sessions; -1 acknowledges and then closes the
session, releasing whatever the member still holds on its partitions). Per-partition errors:
UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION (no such partition, or a share-partition the group
never had), INVALID_REQUEST (malformed batches), INVALID_RECORD_STATE (records not acquired by
this member). Renew (type 4) needs v2 with IsRenewAck, as Kafka. The response is sent once the
acknowledgements are durable under the broker's flush policy (share.manager).

Authorization (KafkaApis.handleShareAcknowledgeRequest): READ on the group, else the whole
request is GROUP_AUTHORIZATION_FAILED; READ on each topic: acknowledgements of an unreadable
topic answer TOPIC_AUTHORIZATION_FAILED for their partition and are not applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._authz import refuse_unreadable_acks, unreadable_topic_ids
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.share_acknowledge_response import (
    LeaderIdAndEpoch,
    PartitionData,
    ShareAcknowledgeResponse,
    ShareAcknowledgeTopicResponse,
)
from snakka.protocol.share import AckBatch
from snakka.security.authorizer import AclOperation, ResourceType
from snakka.share.sessions import FINAL_EPOCH

if TYPE_CHECKING:
    from snakka.protocol.messages.share_acknowledge_request import ShareAcknowledgeRequest

# v0 was KIP-932's early-access version, removed in Kafka 4.1
API = ApiDeclaration(ApiKey.SHARE_ACKNOWLEDGE, min_version=1)


def _error(code: ErrorCode, message: str | None = None) -> ShareAcknowledgeResponse:
    return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                    acquisition_lock_timeout_ms=0, responses=[],
                                    node_endpoints=[])


def handle(ctx: RequestContext, req: ShareAcknowledgeRequest):
    services = ctx.services
    shares = services.shares
    v = ctx.api_version
    group_id, member_id = req.group_id, req.member_id
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not group_id or not member_id:
        return _error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set")
    err = shares.sessions.acknowledge_update(group_id, member_id, req.share_session_epoch)
    if err != ErrorCode.NONE:
        return _error(err)
    acks: dict = {}
    for t in req.topics:
        for p in t.partitions:
            acks.setdefault((t.topic_id, p.partition_index), []).extend(
                AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                for b in p.acknowledgement_batches)
    renew = v >= 2 and req.is_renew_ack
    unreadable = unreadable_topic_ids(ctx, [t.topic_id for t in req.topics])
    refused = refuse_unreadable_acks(acks, unreadable, allow_renew=renew) if unreadable else {}
    results, marks = shares.acknowledge(group_id, member_id, acks, allow_renew=renew)
    results.update(refused)
    if req.share_session_epoch == FINAL_EPOCH:
        marks += shares.close_session(group_id, member_id)
    topics: dict = {}
    for (topic_id, partition), (code, msg) in results.items():
        topics.setdefault(topic_id, []).append(PartitionData(
            partition_index=partition, error_code=code, error_message=msg,
            current_leader=LeaderIdAndEpoch(
                leader_id=services.replicas.leader_id(topic_id, partition),
                leader_epoch=services.replicas.leader_epoch(topic_id, partition))))
    response = ShareAcknowledgeResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
        acquisition_lock_timeout_ms=shares.record_lock_duration_ms(group_id),
        responses=[ShareAcknowledgeTopicResponse(topic_id=t, partitions=ps)
                   for t, ps in topics.items()],
        node_endpoints=[])
    if marks and shares.persister.strict():
        return _after_durable(shares, marks, response)
    return response


async def _after_durable(shares, marks, response):
    await shares.durable(marks)
    return response
