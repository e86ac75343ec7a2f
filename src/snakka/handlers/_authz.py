"""Authorization helpers shared by handlers (the checks themselves are each handler's, as in
Kafka's KafkaApis; the decisions are the authorizer's, through ``RequestContext``).

What it owns: answering a whole request with an authorization error the way Kafka's
``getErrorResponse`` does, without going through dispatch's failure path (a denial is not a
handler failure: no ERROR log line; the authorizer logs denials); and the resource mapping of
the config APIs (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs), where each config
resource type is authorized on its own ACL resource (Kafka's ConfigHelper / ControllerApis):
TOPIC on the topic, GROUP on the group, BROKER, BROKER_LOGGER and CLIENT_METRICS on the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from snakka.handlers.context import RequestContext
from snakka.protocol.error_response import error_response
from snakka.protocol.errors import ErrorCode
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from snakka.share.manager import validate_ack_batches

__all__ = ["CONFIG_RESOURCE_TOPIC", "denied_config_resources", "denied_response",
           "refuse_unreadable_acks", "unreadable_topic_ids"]

# ConfigResource.Type codes (the wire values of DescribeConfigs / AlterConfigs resources)
CONFIG_RESOURCE_TOPIC = 2
_CONFIG_RESOURCE_BROKER = 4
_CONFIG_RESOURCE_BROKER_LOGGER = 8
_CONFIG_RESOURCE_CLIENT_METRICS = 16
_CONFIG_RESOURCE_GROUP = 32
_ON_CLUSTER = frozenset({_CONFIG_RESOURCE_BROKER, _CONFIG_RESOURCE_BROKER_LOGGER,
                         _CONFIG_RESOURCE_CLIENT_METRICS})


def denied_response(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
    """The request's error response with ``code`` everywhere it has an error code."""
    handler = ctx.apis.get(ctx.api_key)
    return error_response(ctx.api_key, ctx.api_version, request, code, code.message,
                          getattr(handler, "module", None))


def denied_config_resources(ctx: RequestContext, operation: AclOperation,
                            resources: Iterable[tuple[int, str]],
                            ) -> dict[tuple[int, str], ErrorCode]:
    """The config resources ``(resource type, name)`` on which ``operation`` (DESCRIBE_CONFIGS or
    ALTER_CONFIGS) is denied, each with the error Kafka answers for it
    (TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED): one authorizer call per ACL resource type.
    Resource types Kafka does not know are not authorized here (the handler refuses them)."""
    if ctx.allows_everything:
        return {}
    resources = list(resources)
    out: dict[tuple[int, str], ErrorCode] = {}
    topics = ctx.denied(operation, ResourceType.TOPIC,
                        [n for t, n in resources if t == CONFIG_RESOURCE_TOPIC])
    groups = ctx.denied(operation, ResourceType.GROUP,
                        [n for t, n in resources if t == _CONFIG_RESOURCE_GROUP])
    cluster_denied = any(t in _ON_CLUSTER for t, _n in resources) and not ctx.is_allowed(
        operation, ResourceType.CLUSTER, CLUSTER_NAME)
    for t, n in resources:
        if t == CONFIG_RESOURCE_TOPIC and n in topics:
            out[(t, n)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif t == _CONFIG_RESOURCE_GROUP and n in groups:
            out[(t, n)] = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif t in _ON_CLUSTER and cluster_denied:
            out[(t, n)] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return out


def unreadable_topic_ids(ctx: RequestContext, topic_ids: Iterable[Any]) -> frozenset[Any]:
    """The topic ids (of existing topics) whose topic the principal may not READ, in one
    authorizer call (ShareFetch / ShareAcknowledge; unknown ids are the handler's to answer)."""
    if ctx.allows_everything:
        return frozenset()
    by_id = ctx.services.metadata.topics_by_id
    names = {}
    for tid in set(topic_ids):
        ti = by_id.get(tid)
        if ti is not None:
            names[tid] = ti.name
    denied = ctx.denied(AclOperation.READ, ResourceType.TOPIC, names.values())
    return frozenset(tid for tid, n in names.items() if n in denied)


def refuse_unreadable_acks(acks: dict, unreadable: frozenset[Any], *, allow_renew: bool
                           ) -> dict:
    """Take the acknowledgements of unreadable topics out of ``acks`` (``{(topic id,
    partition): [AckBatch]}``) and return their results, as Kafka's handleAcknowledgements: a
    malformed batch list is still INVALID_REQUEST (validated first), else
    TOPIC_AUTHORIZATION_FAILED; nothing of them is applied."""
    refused: dict = {}
    for tp in [tp for tp in acks if tp[0] in unreadable]:
        bad = validate_ack_batches(acks.pop(tp), allow_renew=allow_renew)
        refused[tp] = (ErrorCode.INVALID_REQUEST, bad) if bad is not None else \
            (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    return refused
