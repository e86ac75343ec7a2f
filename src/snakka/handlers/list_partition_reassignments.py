"""ListPartitionReassignments (46): the reassignments in progress, as Kafka's controller
answers on a single-node cluster: none, ever.

A reassignment on a single node can only target ``[node id]``, the current replica set, and so
completes at once (alter_partition_reassignments.py); no partition ever has adding or removing
replicas. The answer is therefore an empty topic list, for ``topics`` null (everything) and for
named topics alike (Kafka lists only partitions with a reassignment in progress and skips
unknown topics and partitions without an error).

Authorization: DESCRIBE on the cluster (ControllerApis), else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.list_partition_reassignments_response import (
    ListPartitionReassignmentsResponse,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.list_partition_reassignments_request import (
        ListPartitionReassignmentsRequest,
    )

API = ApiDeclaration(ApiKey.LIST_PARTITION_REASSIGNMENTS)


def handle(ctx: RequestContext, req: ListPartitionReassignmentsRequest
           ) -> ListPartitionReassignmentsResponse:
    if not ctx.is_allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=code,
                                                  error_message=code.message, topics=[])
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                              error_message=None, topics=[])
