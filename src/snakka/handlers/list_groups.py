"""ListGroups (16): classic, KIP-848 and share groups, with v4 state and v5 type filters.

Groups that exist only through committed offsets (standalone consumers) or pending transactional
offsets (a producer's TxnOffsetCommit) are listed as Empty classic groups with an empty protocol
type, as Kafka does (its "simple" groups).

Authorization (KafkaApis.handleListGroupsRequest): DESCRIBE on the cluster lists every
group; otherwise only the groups the principal may DESCRIBE (filtered, not audited).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.groups.share_group import SHARE_PROTOCOL_TYPE
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.messages.list_groups_response import ListedGroup, ListGroupsResponse
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.list_groups_request import ListGroupsRequest

API = ApiDeclaration(ApiKey.LIST_GROUPS)


def handle(ctx: RequestContext, req: ListGroupsRequest) -> ListGroupsResponse:
    v = ctx.api_version
    groups = ctx.services.groups
    rows: dict[str, tuple[str, str, str]] = {}  # group -> (protocol type, state, type)
    for gid in groups.offsets.groups():
        rows[gid] = ("", "Empty", "classic")
    for gid, ptype, state in groups.classic.list_groups():
        rows[gid] = (ptype, state, "classic")
    for gid, state in groups.consumer.list_groups():
        rows[gid] = ("consumer", state, "consumer")
    for gid, state in groups.share.list_groups():
        rows[gid] = (SHARE_PROTOCOL_TYPE, state, "share")
    states = {s.lower() for s in req.states_filter} if v >= 4 and req.states_filter else None
    types = {t.lower() for t in req.types_filter} if v >= 5 and req.types_filter else None
    if not ctx.allows_everything and not ctx.is_allowed(
            AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False):
        hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.GROUP, rows,
                            log_if_denied=False)
        rows = {g: r for g, r in rows.items() if g not in hidden}
    out = []
    for gid, (ptype, state, gtype) in sorted(rows.items()):
        if states is not None and state.lower() not in states:
            continue
        if types is not None and gtype not in types:
            continue
        out.append(ListedGroup(group_id=gid, protocol_type=ptype, group_state=state,
                               group_type=gtype))
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=out)
