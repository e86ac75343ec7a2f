"""OffsetFetch (9): committed offsets of one group (v1-7) or of a batch of groups (v8+).

A partition without a committed offset answers offset -1 and an empty metadata string (as
Kafka). A null topic list (v2+) means every partition the group has committed. v9+ may name the
member (KIP-848): its epoch is checked like a commit's (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID).

Pending transactional offsets (TxnOffsetCommit before its COMMIT marker) are never returned:
without ``require_stable`` a partition answers its last committed offset; with it (v7+, what a
read_committed consumer sends) a partition with a pending offset answers at once, as Kafka's
OffsetMetadataManager does: UNSTABLE_OFFSET_COMMIT, offset -1, leader epoch -1, metadata "", and
the client retries. Kafka does not wait for the transaction here. A null topic list lists the
partitions with a committed offset, as Kafka (a partition with only a pending one is absent).

Authorization (KafkaApis.handleOffsetFetchRequest): DESCRIBE on each group (else
GROUP_AUTHORIZATION_FAILED for it); DESCRIBE on each topic: named topics the principal may not
describe get TOPIC_AUTHORIZATION_FAILED per partition, an all-topics fetch leaves them out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.offset_fetch_response import (
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from snakka.protocol.primitives import ZERO_UUID
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.offset_fetch_request import OffsetFetchRequest

API = ApiDeclaration(ApiKey.OFFSET_FETCH)


def _fetch(services, group_id: str, topics, require_stable: bool):
    """topics: None or [(name, [partitions])]. Returns
    {name: [(partition, offset, epoch, md, error)]}."""
    wanted = None
    if topics is not None:
        wanted = [(name, p) for name, parts in topics for p in parts]
    offsets = services.groups.offsets
    out: dict[str, list] = {}
    for topic, partition, co in offsets.fetch(group_id, wanted):
        if require_stable and offsets.has_pending(group_id, topic, partition):
            row = (partition, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
        elif co is None:
            row = (partition, -1, -1, "", ErrorCode.NONE)
        else:
            row = (partition, co.offset, co.leader_epoch, co.metadata, ErrorCode.NONE)
        out.setdefault(topic, []).append(row)
    if topics is not None:  # requested topics with no partitions still appear
        for name, _parts in topics:
            out.setdefault(name, [])
    return out


def _authorized_fetch(ctx: RequestContext, group_id: str, topics, require_stable: bool):
    """_fetch, showing only topics the principal may DESCRIBE (Kafka: all-topics answers
    leave the others out, named ones get TOPIC_AUTHORIZATION_FAILED per partition)."""
    if ctx.allows_everything:
        return _fetch(ctx.services, group_id, topics, require_stable)
    if topics is None:
        rows = _fetch(ctx.services, group_id, None, require_stable)
        hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, rows)
        return {name: parts for name, parts in rows.items() if name not in hidden}
    denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, [n for n, _ in topics])
    rows = _fetch(ctx.services, group_id, [(n, ps) for n, ps in topics if n not in denied],
                  require_stable)
    for name, parts in topics:
        if name in denied:
            rows[name] = [(p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in parts]
    return rows


def handle(ctx: RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse:
    services = ctx.services
    v = ctx.api_version
    md = services.metadata
    if v < 8:
        if not ctx.is_allowed(AclOperation.DESCRIBE, ResourceType.GROUP, req.group_id):
            return OffsetFetchResponse(throttle_time_ms=0,
                                       error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=[])
        if not req.group_id:
            return OffsetFetchResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_GROUP_ID,
                                       topics=[])
        topics = None if req.topics is None else [(t.name, t.partition_indexes) for t in req.topics]
        rows = _authorized_fetch(ctx, req.group_id, topics, v >= 7 and req.require_stable)
        return OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=[
            OffsetFetchResponseTopic(name=name, partitions=[
                OffsetFetchResponsePartition(partition_index=p, committed_offset=o,
                                             committed_leader_epoch=e, metadata=m,
                                             error_code=err)
                for p, o, e, m, err in parts]) for name, parts in rows.items()])
    groups = []
    for g in req.groups:
        err: int = ErrorCode.NONE
        if not ctx.is_allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
            err = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif not g.group_id:
            err = ErrorCode.INVALID_GROUP_ID
        elif v >= 9 and g.member_id is not None:
            err = services.groups.validate_fetch(g.group_id, g.member_id, g.member_epoch)
        if err:
            groups.append(OffsetFetchResponseGroup(group_id=g.group_id, topics=[], error_code=err))
            continue
        topics = None
        unknown_ids = []
        if g.topics is not None:
            topics = []
            for t in g.topics:
                if v >= 10:
                    ti = md.topics_by_id.get(t.topic_id)
                    if ti is None:
                        unknown_ids.append(t)
                        continue
                    topics.append((ti.name, t.partition_indexes))
                else:
                    topics.append((t.name, t.partition_indexes))
        rows = _authorized_fetch(ctx, g.group_id, topics, req.require_stable)
        out_topics = []
        for name, parts in rows.items():
            ti = md.topics.get(name)
            out_topics.append(OffsetFetchResponseTopics(
                name=name, topic_id=ti.topic_id if ti else ZERO_UUID, partitions=[
                    OffsetFetchResponsePartitions(partition_index=p, committed_offset=o,
                                                  committed_leader_epoch=e, metadata=m,
                                                  error_code=err)
                    for p, o, e, m, err in parts]))
        for t in unknown_ids:
            out_topics.append(OffsetFetchResponseTopics(topic_id=t.topic_id, partitions=[
                OffsetFetchResponsePartitions(partition_index=p, committed_offset=-1,
                                              committed_leader_epoch=-1, metadata="",
                                              error_code=ErrorCode.UNKNOWN_TOPIC_ID)
                for p in t.partition_indexes]))
        groups.append(OffsetFetchResponseGroup(group_id=g.group_id, topics=out_topics,
                                               error_code=0))
    return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
