"""CreatePartitions (37): grow a topic's partition count (never shrink); validate-only.

Manual assignments, when given, must place each new partition on this broker only.

Authorization: ALTER on each topic (else TOPIC_AUTHORIZATION_FAILED), as Kafka.

Controller mutation quota (KIP-599, docs/quotas.md): each topic takes the partitions it adds
from its client's token bucket; from v3 a topic that finds the bucket in debt is
THROTTLING_QUOTA_EXCEEDED and not grown, older versions are only throttled (throttle_time_ms,
then the connection is muted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._mutation_quota import THROTTLED, mutation_quota, throttle_ms
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.create_partitions_response import (
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.create_partitions_request import CreatePartitionsRequest

API = ApiDeclaration(ApiKey.CREATE_PARTITIONS)


async def _handle(ctx, req):
    services = ctx.services
    results = []
    seen = set()
    dup = {t.name for t in req.topics if t.name in seen or seen.add(t.name)}
    denied = ctx.denied(AclOperation.ALTER, ResourceType.TOPIC, [t.name for t in req.topics])
    quota = mutation_quota(ctx, strict_since_version=3)  # controller_mutation_rate (KIP-599)
    for t in req.topics:
        r = CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None)
        try:
            if t.name in dup:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
            if t.name in denied:  # Kafka's ControllerApis sends no message here
                r.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                results.append(r)
                continue
            ti = services.metadata.check_create_partitions(t.name, t.count)
            if t.assignments is not None:
                if len(t.assignments) != t.count - ti.partitions:
                    raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                     f"Increasing the number of partitions by "
                                     f"{t.count - ti.partitions} but {len(t.assignments)} "
                                     "assignments provided.")
                for a in t.assignments:
                    if list(a.broker_ids) != [services.node_id]:
                        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                         f"Unknown broker(s) in replica assignment: {a.broker_ids}")
            # Charged before validate-only returns, as Kafka's controller does.
            if quota is not None and not quota.record(t.count - ti.partitions):
                r.error_code = THROTTLED
                results.append(r)
                continue
            if not req.validate_only:
                await services.controller.create_partitions(t.name, t.count)
        except KafkaError as e:
            r.error_code, r.error_message = e.code, e.message
        results.append(r)
    return CreatePartitionsResponse(throttle_time_ms=throttle_ms(quota), results=results)


def handle(ctx: RequestContext, req: CreatePartitionsRequest):
    return _handle(ctx, req)
