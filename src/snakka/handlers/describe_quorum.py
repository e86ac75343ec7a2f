"""DescribeQuorum (55): the KRaft metadata quorum, as a single combined Kafka node describes it.

A snakka broker is its own controller: the metadata quorum (``__cluster_metadata``-0, the
metadata log, snakka.metadata.store) has one voter, this node, which is its leader; there are no
observers (in combined mode the broker shares the controller's raft client). The answer has
Kafka's shape (KafkaRaftClient / RaftUtil.singletonDescribeQuorumResponse):

- leader id = this node, leader epoch 1 (the first election of a fresh quorum; snakka never
  re-elects), high watermark = log end offset of the voter = the metadata log's end offset
  (every metadata record is fsynced before it is acknowledged);
- the leader reports its last-fetch and last-caught-up timestamps as now;
- v2: replica directory ids are the zero uuid (snakka's quorum is static, like
  ``controller.quorum.voters`` with ``kraft.version`` 0), and ``nodes`` lists this node with its
  listeners (a snakka node serves DescribeQuorum on every listener; there is no separate
  controller listener);
- a request for anything but exactly ``__cluster_metadata``-0: UNKNOWN_TOPIC_OR_PARTITION on
  every partition it names (Kafka's ``getPartitionLevelErrorResponse``).

Kafka's broker forwards this API to the controller; ``kafka-metadata-quorum.sh
--bootstrap-server`` sends it to a broker, ``--bootstrap-controller`` to a controller; both work
against snakka's listeners.

Authorization: DESCRIBE on the cluster (ControllerApis), else CLUSTER_AUTHORIZATION_FAILED on
the request level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_quorum_response import (
    DescribeQuorumResponse,
    Listener,
    Node,
    PartitionData,
    ReplicaState,
    TopicData,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_quorum_request import DescribeQuorumRequest

API = ApiDeclaration(ApiKey.DESCRIBE_QUORUM)

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
# The epoch of the first (and, for a single static voter, only) leader election.
QUORUM_LEADER_EPOCH = 1


def _is_metadata_partition(req: DescribeQuorumRequest) -> bool:
    return (len(req.topics) == 1 and req.topics[0].topic_name == METADATA_TOPIC
            and len(req.topics[0].partitions) == 1
            and req.topics[0].partitions[0].partition_index == METADATA_PARTITION)


def _metadata_log_end_offset(ctx: RequestContext) -> int:
    metadata_log = ctx.services.controller.metadata_log
    return -1 if metadata_log is None else metadata_log.store.log.log_end_offset


def handle(ctx: RequestContext, req: DescribeQuorumRequest) -> DescribeQuorumResponse:
    if not ctx.is_allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return DescribeQuorumResponse(error_code=code, error_message=code.message, topics=[],
                                      nodes=[])
    if not _is_metadata_partition(req):
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return DescribeQuorumResponse(error_code=ErrorCode.NONE, error_message=None, topics=[
            TopicData(topic_name=t.topic_name, partitions=[
                PartitionData(partition_index=p.partition_index, error_code=code,
                              error_message=code.message)
                for p in t.partitions])
            for t in req.topics], nodes=[])
    services = ctx.services
    node_id = services.node_id
    now = services.time_ms()
    end_offset = _metadata_log_end_offset(ctx)
    voter = ReplicaState(replica_id=node_id, log_end_offset=end_offset,
                         last_fetch_timestamp=now, last_caught_up_timestamp=now)
    listeners = []
    for listener in services.config.listeners:
        host, port = services.advertised_endpoint(listener)
        listeners.append(Listener(name=listener.name, host=host, port=port))
    return DescribeQuorumResponse(
        error_code=ErrorCode.NONE, error_message=None,
        topics=[TopicData(topic_name=METADATA_TOPIC, partitions=[
            PartitionData(partition_index=METADATA_PARTITION, error_code=ErrorCode.NONE,
                          error_message=None, leader_id=node_id,
                          leader_epoch=QUORUM_LEADER_EPOCH, high_watermark=end_offset,
                          current_voters=[voter], observers=[])])],
        nodes=[Node(node_id=node_id, listeners=listeners)] if ctx.api_version >= 2 else [])
