"""AlterPartitionReassignments (45): replica reassignment, as Kafka's controller
(ReplicationControlManager.alterPartitionReassignments) answers on a single-node cluster.

Every partition's replica set is ``[node id]``, and the only broker that is registered is this
node, so the only valid target is ``[node id]``: a reassignment to it is a no-op that completes
at once (Kafka builds no partition change when the target equals the current replicas), so no
reassignment is ever in progress. Per partition, in Kafka's order:

- unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION ("Unable to find ...");
- ``replicas`` null (cancel): NO_REASSIGNMENT_IN_PROGRESS, as nothing is ever ongoing;
- an empty replica list, a broker that is not registered (any id but this node's), or a broker
  named twice: INVALID_REPLICA_ASSIGNMENT with Kafka's messages
  (``validateManualPartitionAssignment``, brokers checked in ascending id order);
- v1 with ``allow_replication_factor_change`` false and a target of another size than the
  current replica set (KIP-860): INVALID_REPLICATION_FACTOR (unreachable once the checks above
  pass, kept for the rule's sake);
- otherwise NONE.

Authorization: ALTER on the cluster (ControllerApis), else CLUSTER_AUTHORIZATION_FAILED on the
request and every partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.alter_partition_reassignments_response import (
    AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.alter_partition_reassignments_request import (
        AlterPartitionReassignmentsRequest,
        ReassignablePartition,
    )

API = ApiDeclaration(ApiKey.ALTER_PARTITION_REASSIGNMENTS)


def _alter(ctx: RequestContext, topic: str, target: ReassignablePartition, allow_rf_change: bool
           ) -> tuple[ErrorCode, str | None]:
    ti = ctx.services.metadata.topics.get(topic)
    if ti is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
    if not 0 <= target.partition_index < ti.partitions:
        return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"Unable to find partition {topic}:{target.partition_index}.")
    if target.replicas is None:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS.message
    if not target.replicas:
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(target.replicas):
        if broker != ctx.services.node_id:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {broker}, but no such "
                    "broker is registered.")
        if broker == previous:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {broker} more than "
                    "once.")
        previous = broker
    if not allow_rf_change and len(target.replicas) != 1:
        return (ErrorCode.INVALID_REPLICATION_FACTOR,
                "The replication factor is changed from 1 to "
                f"{len(target.replicas)} but allowReplicationFactorChange is false.")
    return ErrorCode.NONE, None


def handle(ctx: RequestContext, req: AlterPartitionReassignmentsRequest
           ) -> AlterPartitionReassignmentsResponse:
    allow_rf_change = req.allow_replication_factor_change if ctx.api_version >= 1 else True
    if not ctx.is_allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return AlterPartitionReassignmentsResponse(
            throttle_time_ms=0, allow_replication_factor_change=allow_rf_change,
            error_code=code, error_message=code.message, responses=[
                ReassignableTopicResponse(name=t.name, partitions=[
                    ReassignablePartitionResponse(partition_index=p.partition_index,
                                                  error_code=code, error_message=code.message)
                    for p in t.partitions])
                for t in req.topics])
    responses = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, message = _alter(ctx, t.name, p, allow_rf_change)
            parts.append(ReassignablePartitionResponse(partition_index=p.partition_index,
                                                       error_code=code, error_message=message))
        responses.append(ReassignableTopicResponse(name=t.name, partitions=parts))
    return AlterPartitionReassignmentsResponse(
        throttle_time_ms=0, allow_replication_factor_change=allow_rf_change,
        error_code=ErrorCode.NONE, error_message=None, responses=responses)
