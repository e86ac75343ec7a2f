"""CreatePartitions (37): grow a topic's partition count (never shrink); validate-only.

Manual assignments, when given, must place each new partition on this broker only.

Authorization: ALTER on each topic (else TOPIC_AUTHORIZATION_FAILED), as Kafka.

Controller mutation quota (KIP-599, docs/quotas.md): each topic takes the partitions it adds
from its client's token bucket; from v3 a topic that finds the bucket in debt is
THROTTLING_QUOTA_EXCEEDED and not grown, older versions are only throttled (throttle_time_ms,
then the connection is muted).

Every topic is validated before any grows. Kafka's controller adds one PartitionRecord per new
partition to a list of at most MAX_RECORDS_PER_USER_OP (snakka.limits, 10,000) for the whole
request, topic after topic (in the iteration order of a java.util.HashSet of their names, which
snakka computes: util/java.py), and answers the topic whose records overflow it, and every later
topic that adds partitions, UNKNOWN_SERVER_ERROR without a message (an unexpected exception to
its per-topic handler; validate-only too); earlier topics grow. snakka answers the same. Kafka
4.0 also commits the overflowing topic's first partitions, those that fit, while it reports the
error (checked by hand: a topic of 1 partition grown to 10,002 had 10,001 afterwards); snakka
does not grow a topic it answers with an error.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from snakka.handlers._mutation_quota import THROTTLED, mutation_quota, throttle_ms
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.limits import MAX_RECORDS_PER_USER_OP
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.create_partitions_response import (
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from snakka.security.authorizer import AclOperation, ResourceType
from snakka.util.java import java_hash_set_order

if TYPE_CHECKING:
    from snakka.protocol.messages.create_partitions_request import (
        CreatePartitionsRequest,
        CreatePartitionsTopic,
    )

API = ApiDeclaration(ApiKey.CREATE_PARTITIONS)

log = logging.getLogger("snakka.handlers")


async def _handle(ctx, req):
    services = ctx.services
    results = []
    grow: list[tuple[CreatePartitionsTopicResult, int]] = []  # validated, grown after the check
    seen = set()
    dup = {t.name for t in req.topics if t.name in seen or seen.add(t.name)}
    denied = ctx.denied(AclOperation.ALTER, ResourceType.TOPIC, [t.name for t in req.topics])
    quota = mutation_quota(ctx, strict_since_version=3)  # controller_mutation_rate (KIP-599)
    records = 0  # Kafka's PartitionRecords for the topics validated so far (module doc)
    todo: dict[str, tuple[CreatePartitionsTopicResult, CreatePartitionsTopic]] = {}
    for t in req.topics:  # one result per entry, in request order
        r = CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None)
        results.append(r)
        if t.name in dup:
            r.error_code, r.error_message = ErrorCode.INVALID_REQUEST, "Duplicate topic in request."
        else:
            todo[t.name] = (r, t)
    # Kafka's controller takes the topics in the order of a java.util.HashSet of their names:
    # that order decides which topic a quota in debt or the record cap stops at. Only topics
    # that exist can take from either, so only their names are hashed (in Python, ~23 us a
    # 250-character name: a 100 MB request of unknown names would hold the loop for seconds);
    # the others fail alike in any order and go first.
    exists = services.metadata.topics
    known = [n for n in todo if n in exists]
    order = [n for n in todo if n not in exists] + list(
        java_hash_set_order(known, set_size=len(seen)))
    for name in order:
        r, t = todo[name]
        try:
            if t.name in denied:  # Kafka's ControllerApis sends no message here
                r.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
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
                continue
            if records + t.count - ti.partitions > MAX_RECORDS_PER_USER_OP:
                log.warning("CreatePartitions of %s to %d partitions refused: the request would "
                            "add more than %d partitions (Kafka's MAX_RECORDS_PER_USER_OP)",
                            t.name, t.count, MAX_RECORDS_PER_USER_OP)
                # Kafka's records list is full from here on: any later topic fails as well
                records = MAX_RECORDS_PER_USER_OP
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, None)
            records += t.count - ti.partitions
            grow.append((r, t.count))
        except KafkaError as e:
            # UNKNOWN_SERVER_ERROR goes without a message, as Kafka's ApiError sends it
            r.error_code = e.code
            r.error_message = None if e.code == ErrorCode.UNKNOWN_SERVER_ERROR else e.message
    if not req.validate_only:
        for r, count in grow:
            try:
                await services.controller.create_partitions(r.name, count)
            except KafkaError as e:
                r.error_code, r.error_message = e.code, e.message
    return CreatePartitionsResponse(throttle_time_ms=throttle_ms(quota), results=results)


def handle(ctx: RequestContext, req: CreatePartitionsRequest):
    return _handle(ctx, req)
