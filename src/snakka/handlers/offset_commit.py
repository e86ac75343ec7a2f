"""OffsetCommit (8): store committed offsets after the group core validates the committer.

Topics by name (v0-9) or topic id (v10). The committer is checked by the group's core: classic
groups by generation/member/instance id, KIP-848 groups by member epoch; ``generation -1`` with
an empty member id is a standalone (or admin) commit, allowed when the group has no members.
Unknown topics/partitions get UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID, an oversized metadata
string OFFSET_METADATA_TOO_LARGE. ``retention_time_ms`` (v2-4) is ignored, as in Kafka 4
(``offsets.retention.minutes`` applies).

Authorization (KafkaApis.handleOffsetCommitRequest): READ on the group (else
GROUP_AUTHORIZATION_FAILED on every partition), READ on each topic (else
TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.offset_commit_response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.offset_commit_request import OffsetCommitRequest

API = ApiDeclaration(ApiKey.OFFSET_COMMIT)


def _names(md, req, by_id: bool) -> list[str]:
    """The request's topic names (ids resolved; unknown ids are UNKNOWN_TOPIC_ID, not
    authorized)."""
    if not by_id:
        return [t.name for t in req.topics]
    return [ti.name for ti in (md.topics_by_id.get(t.topic_id) for t in req.topics)
            if ti is not None]


def handle(ctx: RequestContext, req: OffsetCommitRequest) -> OffsetCommitResponse:
    services = ctx.services
    v = ctx.api_version
    md = services.metadata
    by_id = v >= 10
    group_err: int = ErrorCode.NONE
    denied_topics: frozenset[str] = frozenset()
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, req.group_id):
        group_err = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif not req.group_id:
        group_err = ErrorCode.INVALID_GROUP_ID
    else:
        if not ctx.allows_everything:
            denied_topics = ctx.denied(AclOperation.READ, ResourceType.TOPIC, _names(md, req, by_id))
        group_err = services.groups.validate_commit(
            req.group_id, req.member_id if v >= 1 else "",
            req.generation_id_or_member_epoch if v >= 1 else -1,
            req.group_instance_id if v >= 7 else None)
        # v9+ tell an unknown group apart (KIP-848 era); older versions keep ILLEGAL_GENERATION.
        if v >= 9 and group_err == ErrorCode.ILLEGAL_GENERATION and \
                services.groups.group_type(req.group_id) is None:
            group_err = ErrorCode.GROUP_ID_NOT_FOUND
    out_topics = []
    entries = []
    slots = []  # (topic response partitions list index) for entries to fill after commit
    for t in req.topics:
        ti = md.topics_by_id.get(t.topic_id) if by_id else md.topics.get(t.name)
        parts = []
        for p in t.partitions:
            if group_err:
                err = group_err
            elif denied_topics and ti is not None and ti.name in denied_topics:
                err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif denied_topics and not by_id and t.name in denied_topics:
                err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif ti is None:
                err = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not 0 <= p.partition_index < ti.partitions:
                err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                err = None
                entries.append((ti.name, p.partition_index, p.committed_offset,
                                p.committed_leader_epoch if v >= 6 else -1,
                                p.committed_metadata))
            resp = OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                 error_code=err or 0)
            if err is None:
                slots.append(resp)
            parts.append(resp)
        out_topics.append(OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id,
                                                    partitions=parts))
    if entries:
        for resp, err in zip(slots, services.groups.commit_offsets(req.group_id, entries),
                             strict=True):
            resp.error_code = err
    return OffsetCommitResponse(throttle_time_ms=0, topics=out_topics)
