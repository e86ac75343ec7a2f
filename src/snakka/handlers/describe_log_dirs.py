"""DescribeLogDirs (35): the log directory, its partitions' sizes, and disk totals (v4+).

Authorization: DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED and no results), as
Kafka.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_log_dirs_response import (
    DescribeLogDirsPartition,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest

API = ApiDeclaration(ApiKey.DESCRIBE_LOG_DIRS)


def handle(ctx: RequestContext, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    services = ctx.services
    md = services.metadata
    if not ctx.is_allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return DescribeLogDirsResponse(throttle_time_ms=0,
                                       error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                       results=[])
    wanted: dict[str, set[int] | None]
    if req.topics is None:
        wanted = {n: None for n in md.topics}
    else:
        wanted = {}
        for t in req.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)  # type: ignore[union-attr]
    topics = []
    for name, parts in wanted.items():
        ti = md.topics.get(name)
        if ti is None:
            continue
        rows = []
        for p in range(ti.partitions):
            if parts is not None and p not in parts:
                continue
            pl = services.replicas.get_log(name, p)
            if pl is None:
                continue
            rows.append(DescribeLogDirsPartition(partition_index=p, partition_size=pl.size_bytes,
                                                 offset_lag=0, is_future_key=False))
        if rows:
            topics.append(DescribeLogDirsTopic(name=name, partitions=rows))
    usage = shutil.disk_usage(services.replicas.log_dir)
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[
        DescribeLogDirsResult(error_code=0, log_dir=services.replicas.log_dir, topics=topics,
                              total_bytes=usage.total, usable_bytes=usage.free)])
