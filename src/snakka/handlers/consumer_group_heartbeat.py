"""ConsumerGroupHeartbeat (68): the KIP-848 consumer protocol; one call joins, heartbeats,
reconciles and leaves. The logic lives in groups.consumer; this maps fields both ways.

A group id held by an active classic group answers GROUP_ID_NOT_FOUND with a message, so a
client misconfigured with ``group.protocol=consumer`` learns why.

Authorization (Kafka 4.0's KafkaApis): READ on the group (else GROUP_AUTHORIZATION_FAILED),
then DESCRIBE on every subscribed topic name (else TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.consumer_group_heartbeat_response import (
    Assignment,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.consumer_group_heartbeat_request import (
        ConsumerGroupHeartbeatRequest,
    )

API = ApiDeclaration(ApiKey.CONSUMER_GROUP_HEARTBEAT)


def _refused(code: ErrorCode, message: str | None) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=code, error_message=message, member_id=None,
        member_epoch=-1, heartbeat_interval_ms=0, assignment=None)


def handle(ctx: RequestContext,
           req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    v = ctx.api_version
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return _refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if req.subscribed_topic_names:
        hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, req.subscribed_topic_names)
        if hidden:
            return _refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            "The group is not authorized to describe the topics: "
                            + ", ".join(sorted(hidden)))
    # Request validation (empty group id → INVALID_REQUEST, as Kafka) is the core's.
    peer = ctx.client_address
    result = ctx.services.groups.consumer_heartbeat(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
        instance_id=req.instance_id, rack_id=req.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=req.subscribed_topic_names,
        subscribed_topic_regex=req.subscribed_topic_regex if v >= 1 else None,
        server_assignor=req.server_assignor,
        topic_partitions=None if req.topic_partitions is None else
        [(tp.topic_id, list(tp.partitions)) for tp in req.topic_partitions],
        api_version=v, client_id=ctx.client_id or "", client_host=f"/{peer}")
    if result is None:
        return ConsumerGroupHeartbeatResponse(
            throttle_time_ms=0, error_code=ErrorCode.GROUP_ID_NOT_FOUND,
            error_message=f"Group {req.group_id} is a classic group with active members",
            member_id=None, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    assignment = None
    if result.assignment is not None:
        assignment = Assignment(topic_partitions=[
            TopicPartitions(topic_id=tid, partitions=sorted(parts))
            for tid, parts in result.assignment])
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=result.error_code, error_message=result.error_message,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)
