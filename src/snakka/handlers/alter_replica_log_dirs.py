"""AlterReplicaLogDirs (34): move replicas between log directories, as Kafka's
ReplicaManager.alterReplicaLogDirs answers on a broker with one log directory.

snakka has one log directory (``log.dir``, see DescribeLogDirs), so a replica can only be
"moved" to the directory it is already in, which Kafka answers with NONE and no work. Per
partition, in Kafka's order:

- a topic name so long that the future log's directory name (``<topic>-<p>.<32 hex>-future``)
  would exceed 255 characters: INVALID_TOPIC_EXCEPTION;
- a path that is not a configured log directory (compared as absolute paths, as Kafka's
  LogManager.isLogDirOnline): LOG_DIR_NOT_FOUND;
- a partition this broker does not host: REPLICA_NOT_AVAILABLE (Kafka keeps that code for this
  API for compatibility);
- otherwise NONE.

The request maps each partition to one path (a partition named under two paths: the last
wins, as Kafka's ``partitionDirs`` map); results are grouped by topic.

Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED on every partition
(KafkaApis.handleAlterReplicaLogDirsRequest).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.alter_replica_log_dirs_response import (
    AlterReplicaLogDirPartitionResult,
    AlterReplicaLogDirsResponse,
    AlterReplicaLogDirTopicResult,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.alter_replica_log_dirs_request import AlterReplicaLogDirsRequest

API = ApiDeclaration(ApiKey.ALTER_REPLICA_LOG_DIRS)

# Kafka's limit on a log directory name (KAFKA-4893), applied to the future log's name:
# "<topic>-<partition>.<32 hex uuid>-future".
MAX_LOG_DIR_NAME_LENGTH = 255
_FUTURE_SUFFIX_LENGTH = 1 + 32 + len("-future")


def _partition_error(ctx: RequestContext, topic: str, partition: int, path: str) -> ErrorCode:
    if len(f"{topic}-{partition}") + _FUTURE_SUFFIX_LENGTH > MAX_LOG_DIR_NAME_LENGTH:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if path != os.path.abspath(ctx.services.replicas.log_dir):
        return ErrorCode.LOG_DIR_NOT_FOUND
    ti = ctx.services.metadata.topics.get(topic)
    if ti is None or not 0 <= partition < ti.partitions \
            or ctx.services.replicas.get_log(topic, partition) is None:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    return ErrorCode.NONE


def handle(ctx: RequestContext, req: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
    partition_dirs: dict[tuple[str, int], str] = {}
    for d in req.dirs:
        for t in d.topics:
            for p in t.partitions:
                partition_dirs[(t.name, p)] = d.path
    if ctx.is_allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        errors = {tp: _partition_error(ctx, tp[0], tp[1], path)
                  for tp, path in partition_dirs.items()}
    else:
        errors = dict.fromkeys(partition_dirs, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    by_topic: dict[str, list[AlterReplicaLogDirPartitionResult]] = {}
    for (topic, p), code in errors.items():
        by_topic.setdefault(topic, []).append(
            AlterReplicaLogDirPartitionResult(partition_index=p, error_code=code))
    return AlterReplicaLogDirsResponse(throttle_time_ms=0, results=[
        AlterReplicaLogDirTopicResult(topic_name=t, partitions=parts)
        for t, parts in by_topic.items()])
