"""DeleteShareGroupOffsets (92): forget a share group's state for whole topics
(``kafka-share-groups.sh --delete-offsets``).

Only an existing share group without members: GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP otherwise
(top-level, repeated per topic). An unknown topic is UNKNOWN_TOPIC_OR_PARTITION for that topic.
The share-partitions' state is deleted (tombstones in ``__share_group_state``); when the topic
is assigned in the group again it starts afresh from ``share.auto.offset.reset``. Answered once
the deletion is durable under the broker's flush policy.

Authorization (Kafka 4.1's KafkaApis, KIP-932): DELETE on the group, else the whole request is
GROUP_AUTHORIZATION_FAILED; READ on each topic, else TOPIC_AUTHORIZATION_FAILED for that topic
(its state is kept).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from snakka.handlers._authz import denied_response
from snakka.handlers.alter_share_group_offsets import _group_error
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.delete_share_group_offsets_response import (
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.delete_share_group_offsets_request import (
        DeleteShareGroupOffsetsRequest,
    )

API = ApiDeclaration(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
_ZERO_UUID = uuid.UUID(int=0)


def handle(ctx: RequestContext, req: DeleteShareGroupOffsetsRequest):
    services = ctx.services
    md = services.metadata
    if not ctx.is_allowed(AclOperation.DELETE, ResourceType.GROUP, req.group_id):
        return denied_response(ctx, req, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    group_err = _group_error(services, req.group_id)
    unreadable = ctx.denied(AclOperation.READ, ResourceType.TOPIC,
                            [t.topic_name for t in req.topics])
    marks: list = []
    topics = []
    for t in req.topics:
        ti = md.topics.get(t.topic_name)
        msg = None
        if t.topic_name in unreadable:  # refused before the group is asked
            err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            msg = err.message
            ti = None  # its id is not told
        elif group_err is not None:
            err, msg = group_err
        elif ti is None:
            err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            err = ErrorCode.NONE
            marks += services.shares.delete_offsets(req.group_id, ti.topic_id)
        topics.append(DeleteShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=ti.topic_id if ti else _ZERO_UUID,
            error_code=err, error_message=msg))
    code, message = group_err if group_err is not None else (ErrorCode.NONE, None)
    response = DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=code,
                                               error_message=message, responses=topics)
    if any(marks) and services.shares.persister.strict():
        return _after_durable(services, marks, response)
    return response


async def _after_durable(services, marks, response):
    await services.shares.durable(marks)
    return response
