"""DeleteTopics (20): delete topics by name (all versions) or topic id (v6+).

The topic leaves the metadata log first (durably), then its partition directories are removed
off the event loop. Long-polling fetches on it are woken and see UNKNOWN_TOPIC_OR_PARTITION.
``delete.topic.enable=false`` answers TOPIC_DELETION_DISABLED. Internal topics cannot be deleted.
All topics of a request are deleted together (Broker.delete_topics): one metadata append and
fsync, one worker-thread job for the directories, clean-up in slices that yield to the loop.

Authorization (Kafka's controller): DELETE on each topic (else TOPIC_AUTHORIZATION_FAILED);
a topic named by id without DESCRIBE on it is TOPIC_AUTHORIZATION_FAILED with its name withheld;
an unknown id is UNKNOWN_TOPIC_ID.

Controller mutation quota (KIP-599, docs/quotas.md): each topic to delete takes its partition
count from its client's token bucket; from v5 a topic that finds the bucket in debt is
THROTTLING_QUOTA_EXCEEDED and kept, older versions are only throttled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._mutation_quota import THROTTLED, mutation_quota, throttle_ms
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.delete_topics_response import (
    DeletableTopicResult,
    DeleteTopicsResponse,
)
from snakka.protocol.primitives import ZERO_UUID
from snakka.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.delete_topics_request import DeleteTopicsRequest

API = ApiDeclaration(ApiKey.DELETE_TOPICS)


async def _handle(ctx, req):
    services = ctx.services
    v = ctx.api_version
    targets = []  # (name or None, topic_id or None)
    if v >= 6:
        targets = [(t.name, t.topic_id if t.name is None else None) for t in req.topics]
    else:
        targets = [(n, None) for n in req.topic_names]
    enabled = services.resolver.broker_value("delete.topic.enable") == "true"
    results = []
    doomed: dict[str, DeletableTopicResult] = {}  # name -> its result
    resolved = [services.metadata.topics.get(name) if name is not None else
                services.metadata.topics_by_id.get(tid) for name, tid in targets]
    no_describe: frozenset[str] = frozenset()
    no_delete: frozenset[str] = frozenset()
    if not ctx.allows_everything:
        names = [n if n is not None else ti.name for (n, _t), ti in zip(targets, resolved,
                                                                          strict=True)
                 if n is not None or ti is not None]
        no_describe = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                 [ti.name for (n, _t), ti in zip(targets, resolved, strict=True)
                                  if n is None and ti is not None])
        no_delete = ctx.denied(AclOperation.DELETE, ResourceType.TOPIC, names)
    quota = mutation_quota(ctx, strict_since_version=5)  # controller_mutation_rate (KIP-599)
    for (name, tid), ti in zip(targets, resolved, strict=True):
        res = DeletableTopicResult(name=name, topic_id=tid or ZERO_UUID, error_code=0,
                                   error_message=None)
        # Kafka's controller answers every error with a message (the error's default one)
        if name is None and ti is not None and ti.name in no_describe:
            # the id is not secret, the name is: not returned
            res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            res.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED.message
        elif (name if name is not None else ti.name if ti is not None else None) in no_delete:
            res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            res.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED.message
        elif ti is None:
            res.error_code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else \
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            res.error_message = ErrorCode(res.error_code).message
        elif not enabled:
            res.error_code = ErrorCode.TOPIC_DELETION_DISABLED
            res.error_message = ErrorCode.TOPIC_DELETION_DISABLED.message
        elif ti.is_internal:
            res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            res.error_message = f"Internal topic {ti.name} cannot be deleted"
        elif ti.name in doomed:
            res.error_code = ErrorCode.INVALID_REQUEST
            res.error_message = "Duplicate topic in request."
        elif quota is not None and not quota.record(ti.partitions):
            # named and identified, as Kafka's controller answers a topic it found
            res.name, res.topic_id, res.error_code = ti.name, ti.topic_id, THROTTLED
        else:
            res.name, res.topic_id = ti.name, ti.topic_id
            doomed[ti.name] = res
        results.append(res)
    if doomed:
        try:
            await services.controller.delete_topics(list(doomed))
        except KafkaError as e:
            for res in doomed.values():
                res.error_code, res.error_message = e.code, e.message
    return DeleteTopicsResponse(throttle_time_ms=throttle_ms(quota), responses=results)


def handle(ctx: RequestContext, req: DeleteTopicsRequest):
    return _handle(ctx, req)
