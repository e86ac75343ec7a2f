"""ShareGroupDescribe (77): share groups' state, epochs, assignor and members with their
assignments (topic ids resolved to names). An unknown group ("Group X not found.") or one of
another type ("Group X is not a share group.") answers GROUP_ID_NOT_FOUND with the other fields
at their defaults, as Kafka does; an empty id INVALID_GROUP_ID.

Authorization (Kafka's KafkaApis.handleShareGroupDescribe): DESCRIBE on each group, else
GROUP_AUTHORIZATION_FAILED for it; ``include_authorized_operations`` fills a described group's
bit field. (Unlike ConsumerGroupDescribe, the assignments' topics are not checked.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._common import AUTHORIZED_OPERATIONS_OMITTED, named_assignment
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.share_group_describe_response import (
    Assignment,
    DescribedGroup,
    Member,
    ShareGroupDescribeResponse,
    TopicPartitions,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.share_group_describe_request import ShareGroupDescribeRequest

# v0 was KIP-932's early-access version, removed in Kafka 4.1
API = ApiDeclaration(ApiKey.SHARE_GROUP_DESCRIBE, min_version=1)

def _assignment(md, parts) -> Assignment:
    return Assignment(topic_partitions=[
        TopicPartitions(topic_id=tid, topic_name=name, partitions=ps)
        for tid, name, ps in named_assignment(md, parts)])


def handle(ctx: RequestContext, req: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    md = ctx.services.metadata
    groups = ctx.services.groups
    undescribable = ctx.denied(AclOperation.DESCRIBE, ResourceType.GROUP, req.group_ids)
    out = []
    for gid in req.group_ids:
        if gid in undescribable:
            out.append(DescribedGroup(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None,
                group_id=gid, group_state="", group_epoch=0, assignment_epoch=0,
                assignor_name="", members=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        d = groups.share.describe(gid) if gid else None
        if d is None:
            if not gid:
                code, msg = ErrorCode.INVALID_GROUP_ID, "The group id is empty."
            elif groups.group_type(gid) is not None:
                code, msg = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group."
            else:
                code, msg = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found."
            out.append(DescribedGroup(
                error_code=code, error_message=msg, group_id=gid, group_state="",
                group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
                authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        ops = ctx.authorized_operations(ResourceType.GROUP, gid) \
            if req.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
        out.append(DescribedGroup(
            error_code=0, error_message=None, group_id=gid, group_state=d.state,
            group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor_name, authorized_operations=ops,
            members=[Member(member_id=m.member_id, rack_id=m.rack_id,
                            member_epoch=m.member_epoch, client_id=m.client_id,
                            client_host=m.client_host,
                            subscribed_topic_names=list(m.subscribed_topic_names),
                            assignment=_assignment(md, m.assignment))
                     for m in d.members]))
    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=out)
