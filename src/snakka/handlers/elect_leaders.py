"""ElectLeaders (43): leader elections, answered as a single-node KRaft cluster answers them.

Every partition of a snakka broker has one replica, this node, which is its leader, its
preferred leader and its whole ISR. So no election is ever needed, and the answers are those of
Kafka's controller (ReplicationControlManager.electLeaders) for such a cluster:

- a named partition that exists: ELECTION_NOT_NEEDED, preferred (0) and unclean (1) alike;
- an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION with Kafka's message;
- ``topic_partitions`` null (elect everything): one result per topic, with no partition rows,
  since Kafka leaves out the partitions that already have the desired leader;
- an election type other than 0/1: INVALID_REQUEST for the whole request (Kafka's
  ``InvalidRequestException("Unknown election type N")`` through ``getErrorResponse``).

Authorization: ALTER on the cluster (ControllerApis.handleElectLeaders), else
CLUSTER_AUTHORIZATION_FAILED on the request level and on every named partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.elect_leaders_response import (
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.elect_leaders_request import ElectLeadersRequest

API = ApiDeclaration(ApiKey.ELECT_LEADERS)

# ElectionType: PREFERRED (0), UNCLEAN (1)
_ELECTION_TYPES = frozenset({0, 1})


def _error_response(req: ElectLeadersRequest, code: ErrorCode, message: str | None
                    ) -> ElectLeadersResponse:
    """Kafka's ElectLeadersRequest.getErrorResponse: the code on the request and on every
    partition it names (no partitions when it names none)."""
    return ElectLeadersResponse(throttle_time_ms=0, error_code=code, replica_election_results=[
        ReplicaElectionResult(topic=t.topic, partition_result=[
            PartitionResult(partition_id=p, error_code=code, error_message=message)
            for p in t.partitions])
        for t in req.topic_partitions or []])


def _elect(ctx: RequestContext, topic: str, partition: int) -> PartitionResult:
    ti = ctx.services.metadata.topics.get(topic)
    if ti is None:
        return PartitionResult(partition_id=partition,
                               error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               error_message=f"No such topic as {topic}")
    if not 0 <= partition < ti.partitions:
        return PartitionResult(partition_id=partition,
                               error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               error_message=f"No such partition as {topic}-{partition}")
    return PartitionResult(partition_id=partition, error_code=ErrorCode.ELECTION_NOT_NEEDED,
                           error_message=ErrorCode.ELECTION_NOT_NEEDED.message)


def handle(ctx: RequestContext, req: ElectLeadersRequest) -> ElectLeadersResponse:
    if not ctx.is_allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _error_response(req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                               ErrorCode.CLUSTER_AUTHORIZATION_FAILED.message)
    election_type = req.election_type if ctx.api_version >= 1 else 0
    if election_type not in _ELECTION_TYPES:
        return _error_response(req, ErrorCode.INVALID_REQUEST,
                               f"Unknown election type {election_type}")
    if req.topic_partitions is None:
        # Every partition already has its preferred leader: Kafka lists each topic, no rows.
        results = [ReplicaElectionResult(topic=name, partition_result=[])
                   for name in ctx.services.metadata.topics]
    else:
        results = [ReplicaElectionResult(topic=t.topic,
                                         partition_result=[_elect(ctx, t.topic, p)
                                                           for p in t.partitions])
                   for t in req.topic_partitions]
    return ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                replica_election_results=results)
