"""ConsumerGroupDescribe (69): KIP-848 groups: epochs, assignor, members with their current and
target assignments (topic ids resolved to names). Unknown groups answer GROUP_ID_NOT_FOUND
"Group X not found."; classic and share groups GROUP_ID_NOT_FOUND "Group X is not a consumer
group.", as Kafka does.

Authorization (Kafka 4.0's KafkaApis.handleConsumerGroupDescribe): DESCRIBE on each group, else
GROUP_AUTHORIZATION_FAILED for it; ``include_authorized_operations`` fills a described group's
bit field. Then, with an authorizer, DESCRIBE on every topic of the described groups' members'
current and target assignments (one check for the whole response): a group with any topic the
principal may not describe is answered TOPIC_AUTHORIZATION_FAILED "The group has described
topic(s) that the client is not authorized to describe." and nothing else of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._common import AUTHORIZED_OPERATIONS_OMITTED, named_assignment
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.consumer_group_describe_response import (
    Assignment,
    ConsumerGroupDescribeResponse,
    DescribedGroup,
    Member,
    TopicPartitions,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.consumer_group_describe_request import (
        ConsumerGroupDescribeRequest,
    )

API = ApiDeclaration(ApiKey.CONSUMER_GROUP_DESCRIBE)
_HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


def _refused(gid: str, code: ErrorCode, message: str | None) -> DescribedGroup:
    """A group answered with an error only (Kafka's defaults for every other field)."""
    return DescribedGroup(error_code=code, error_message=message, group_id=gid, group_state="",
                          group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
                          authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


def _assignment(md, parts) -> Assignment:
    return Assignment(topic_partitions=[
        TopicPartitions(topic_id=tid, topic_name=name, partitions=ps)
        for tid, name, ps in named_assignment(md, parts)])


def handle(ctx: RequestContext, req: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    md = ctx.services.metadata
    out = []
    undescribable = ctx.denied(AclOperation.DESCRIBE, ResourceType.GROUP, req.group_ids)
    for gid in req.group_ids:
        if gid in undescribable:
            out.append(_refused(gid, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
            continue
        d = ctx.services.groups.consumer.describe(gid) if gid else None
        if d is None:
            other = ctx.services.groups.group_type(gid) if gid else None
            msg = ("The group id is empty." if not gid else
                   f"Group {gid} is not a consumer group." if other else
                   f"Group {gid} not found.")
            out.append(DescribedGroup(
                error_code=ErrorCode.INVALID_GROUP_ID if not gid else ErrorCode.GROUP_ID_NOT_FOUND,
                error_message=msg,
                # Kafka leaves a group it does not know without a state ("")
                group_id=gid, group_state="", group_epoch=-1, assignment_epoch=-1,
                assignor_name="", members=[],
                authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        ops = ctx.authorized_operations(ResourceType.GROUP, gid) \
            if req.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
        out.append(DescribedGroup(
            error_code=0, error_message=None, group_id=gid, group_state=d.state,
            group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor_name, authorized_operations=ops,
            members=[Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                            member_epoch=m.member_epoch, client_id=m.client_id,
                            client_host=m.client_host,
                            subscribed_topic_names=list(m.subscribed_topic_names),
                            # Kafka: "" for a member subscribed by names (not null)
                            subscribed_topic_regex=m.subscribed_topic_regex or "",
                            assignment=_assignment(md, m.assignment),
                            target_assignment=_assignment(md, m.target_assignment),
                            member_type=1)  # 1 = consumer protocol member
                     for m in d.members]))
    if not ctx.allows_everything:
        out = _hide_groups_with_undescribable_topics(ctx, out)
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=out)


def _assigned_topics(g: DescribedGroup) -> set[str]:
    return {tp.topic_name for m in g.members
            for a in (m.assignment, m.target_assignment) for tp in a.topic_partitions}


def _hide_groups_with_undescribable_topics(ctx: RequestContext,
                                           groups: list[DescribedGroup]) -> list[DescribedGroup]:
    names: set[str] = set()
    for g in groups:
        names |= _assigned_topics(g)
    hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, sorted(names))
    if not hidden:
        return groups
    return [_refused(g.group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, _HIDDEN_TOPICS)
            if _assigned_topics(g) & hidden else g for g in groups]
