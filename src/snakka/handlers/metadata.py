"""Metadata (3): brokers, topics, partitions, topic ids; auto-creates topics when allowed.

The broker list carries the advertised endpoint of the listener the client connected through.
Topics may be named (all versions) or, from v10, identified by topic id. A named topic that does
not exist is created with the broker's defaults when ``auto.create.topics.enable`` is true and the
request allows it (v4+ ``allow_auto_topic_creation``; always for older versions), as Kafka does.

Auto-creation never creates a reserved name (``__cluster_metadata``, the internal topics: their
coordinators create them): such a name that does not exist is UNKNOWN_TOPIC_OR_PARTITION, which
is what Kafka 4.0 answers while its auto-creation runs asynchronously.

Authorization (KafkaApis.handleTopicMetadataRequest): topics the principal may not DESCRIBE are
left out of an all-topics answer (without an audit line) and answered TOPIC_AUTHORIZATION_FAILED
when named (by id: the id echoed, topic ids are not secret; by name: the existence not
disclosed); auto-creation needs CREATE on the cluster or on the topic (else
TOPIC_AUTHORIZATION_FAILED). The authorized-operations bit fields (v8+) are computed when
asked: the cluster's (v8-10, 0 without DESCRIBE on it) and each described topic's.

All topics a request auto-creates are created together (Broker.plan_topic / create_topics): one
metadata append and fsync, file work in a worker thread when there are many, so a Metadata
request naming 5,000 unknown topics costs time linear in that number and never stalls other
clients. As on Kafka 4.0, whose broker sends them to its controller as one CreateTopics, more
than MAX_RECORDS_PER_USER_OP (snakka.limits, 10,000) metadata records in one request's
auto-creation (a topic: 1 + ``num.partitions``) create none of them: those names are answered
UNKNOWN_TOPIC_OR_PARTITION (an INFO line says why). A name that another request is creating right now is waited for, then answered.
Small creations happen before this handler returns (a pipelined Produce sees the topic); the
response does not wait for their fsync, as before (the next metadata change or CreateTopics
does).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from snakka.handlers._common import AUTHORIZED_OPERATIONS_OMITTED
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.limits import MAX_RECORDS_PER_USER_OP
from snakka.metadata.core import RESERVED_TOPICS, creation_records, validate_topic_name
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from snakka.protocol.primitives import ZERO_UUID
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from snakka.util.slicing import TimeSlice

if TYPE_CHECKING:
    from collections.abc import Iterable

    from snakka.metadata.core import TopicInfo
    from snakka.protocol.messages.metadata_request import MetadataRequest

API = ApiDeclaration(ApiKey.METADATA)

log = logging.getLogger("snakka.handlers")


def _topic_response(services, ti, v: int) -> MetadataResponseTopic:
    replicas = services.replicas
    parts = []
    for p in range(ti.partitions):
        leader = replicas.leader_id(ti.name, p)
        parts.append(MetadataResponsePartition(
            error_code=0, partition_index=p, leader_id=leader,
            leader_epoch=replicas.leader_epoch(ti.name, p), replica_nodes=[leader],
            isr_nodes=[leader], offline_replicas=[]))
    return MetadataResponseTopic(error_code=0, name=ti.name, topic_id=ti.topic_id,
                                 is_internal=ti.is_internal, partitions=parts,
                                 topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


def _error_topic(name, topic_id, code: ErrorCode) -> MetadataResponseTopic:
    return MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id or ZERO_UUID,
                                 is_internal=False, partitions=[],
                                 topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


def _response(ctx, req, topics) -> MetadataResponse:
    services = ctx.services
    v = ctx.api_version
    host, port = services.advertised_endpoint(ctx.listener)
    cluster_ops = AUTHORIZED_OPERATIONS_OMITTED
    if v >= 8:
        # KIP-430: filled only when asked; the cluster's only up to v10 (v11 dropped it).
        if v <= 10 and req.include_cluster_authorized_operations:
            cluster_ops = ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME) \
                if ctx.is_allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME) \
                else 0
        if req.include_topic_authorized_operations:
            for t in topics:  # the topics the principal may describe (not the refused ones)
                if t.name is not None and \
                        t.error_code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    t.topic_authorized_operations = ctx.authorized_operations(
                        ResourceType.TOPIC, t.name)
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponseBroker(node_id=services.node_id, host=host, port=port, rack=None)],
        cluster_id=services.metadata.cluster_id,
        controller_id=services.node_id,
        topics=topics,
        cluster_authorized_operations=cluster_ops,
        error_code=0,
    )


def handle(ctx: RequestContext, req: MetadataRequest):
    services = ctx.services
    v = ctx.api_version
    md = services.metadata
    topics: list = []
    if req.topics is None or (v == 0 and not req.topics):
        listed: Iterable[TopicInfo] = md.topics.values()
        if not ctx.allows_everything:  # unauthorized topics are left out, unlogged (Kafka)
            hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, md.topics,
                                log_if_denied=False)
            listed = [ti for ti in listed if ti.name not in hidden]
        return _response(ctx, req, [_topic_response(services, ti, v) for ti in listed])
    allow_auto = (req.allow_auto_topic_creation if v >= 4 else True) and \
        services.resolver.broker_value("auto.create.topics.enable") == "true"
    no_describe: frozenset[str] = frozenset()
    no_create: frozenset[str] = frozenset()
    if not ctx.allows_everything:
        no_describe, no_create = _unauthorized(ctx, req, md, allow_auto)
    later: list[tuple[int, str]] = []  # (index in topics, name): answered once created
    create: list[str] = []  # names to auto-create
    for t in req.topics:
        if t.name is None and v < 12:
            # v10-11 define topic ids in requests but Kafka never served them there.
            topics.append(_error_topic("", t.topic_id, ErrorCode.INVALID_REQUEST))
            continue
        if t.name is None:
            ti = md.topics_by_id.get(t.topic_id)
            if ti is None:
                topics.append(_error_topic(None, t.topic_id, ErrorCode.UNKNOWN_TOPIC_ID))
            elif ti.name in no_describe:  # topic ids are not secret: the id is echoed
                topics.append(_error_topic(None, t.topic_id,
                                           ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            else:
                topics.append(_topic_response(services, ti, v))
            continue
        if t.name in no_describe:  # existence not disclosed
            topics.append(_error_topic(t.name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        if t.name in no_create:
            err = _error_topic(t.name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            err.is_internal = t.name in RESERVED_TOPICS
            topics.append(err)
            continue
        ti = md.topics.get(t.name)
        if ti is not None:
            topics.append(_topic_response(services, ti, v))
            continue
        try:
            validate_topic_name(t.name)
        except KafkaError as e:
            topics.append(_error_topic(t.name, None, e.code))
            continue
        if not allow_auto or t.name in RESERVED_TOPICS:
            topics.append(_error_topic(t.name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        if t.name not in md.pending:  # else another request is creating it: wait for it
            create.append(t.name)
        later.append((len(topics), t.name))
        topics.append(None)
    if not later:
        return _response(ctx, req, topics)
    partitions = services.controller.default_partitions()
    if len(create) * creation_records(partitions, {}) > MAX_RECORDS_PER_USER_OP:
        _refuse_auto_creation(ctx, topics, later, create, partitions)
        create = []
        later = [(i, name) for i, name in later if topics[i] is None]
        if not later:
            return _response(ctx, req, topics)
    if not services.controller.creates_inline(len(create) * partitions):
        # Many: plan them in slices too (validation costs ~50 us a topic).
        return _respond_later(ctx, req, topics, later, create, partitions)
    plans = _plan(services, topics, later, create, partitions)
    if plans:
        services.controller.create_topics(list(plans.values()))  # small: in metadata now; the fsync follows in background
    if all(name not in md.pending for _i, name in later):
        _fill(services, v, topics, later, plans)
        return _response(ctx, req, topics)
    return _respond_later(ctx, req, topics, later, [], partitions)


def _refuse_auto_creation(ctx: RequestContext, topics: list, later: list[tuple[int, str]],
                          create: list[str], partitions: int) -> None:
    """Kafka 4.0 sends the topics one Metadata request auto-creates to its controller as one
    CreateTopics, which refuses it whole above MAX_RECORDS_PER_USER_OP records (a topic's
    TopicRecord and one PartitionRecord per partition): none is created, and the names are
    answered as Kafka answers them while an auto-creation is in flight."""
    log.info("auto-creation of %d topics of %d partitions for %s refused: %d metadata records "
             "in one operation, more than Kafka's MAX_RECORDS_PER_USER_OP (%d)", len(create),
             partitions, ctx.client_address, len(create) * creation_records(partitions, {}),
             MAX_RECORDS_PER_USER_OP)
    refused = set(create)
    for i, name in later:
        if name in refused:
            topics[i] = _error_topic(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _unauthorized(ctx: RequestContext, req: MetadataRequest, md, allow_auto: bool
                  ) -> tuple[frozenset[str], frozenset[str]]:
    """The named topics the principal may not DESCRIBE, and the missing ones it may not
    auto-create (CREATE on the cluster, else on each topic; Kafka's handleTopicMetadataRequest).
    """
    names = []
    for t in req.topics:
        if t.name is not None:
            names.append(t.name)
        elif ctx.api_version >= 12:
            ti = md.topics_by_id.get(t.topic_id)
            if ti is not None:
                names.append(ti.name)
    no_describe = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    missing = [t.name for t in req.topics if t.name is not None and t.name not in no_describe
               and t.name not in md.topics]
    no_create: frozenset[str] = frozenset()
    if allow_auto and missing and not ctx.is_allowed(
            AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False):
        no_create = ctx.denied(AclOperation.CREATE, ResourceType.TOPIC, missing)
    return no_describe, no_create


def _plan(services, topics, later, create, partitions) -> dict:
    plans = {}
    for name in create:
        try:
            plans[name] = services.controller.plan_topic(name, partitions, {})
        except KafkaError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:  # else created meanwhile: answered
                i = next(i for i, n in later if n == name)
                topics[i] = _error_topic(name, None, e.code)
    return plans


def _fill(services, v, topics, later, plans) -> None:
    for i, name in later:
        if topics[i] is not None:
            continue
        ti = services.metadata.topics.get(name)
        if ti is not None:
            topics[i] = _topic_response(services, ti, v)
        else:
            plan = plans.get(name)
            err = plan.error if plan is not None and plan.error is not None else None
            topics[i] = _error_topic(name, None, err.code if err is not None
                                     else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


async def _respond_later(ctx, req, topics, later, create, partitions):
    services = ctx.services
    slicer = TimeSlice()
    plans = {}
    errors = {}
    try:
        for name in create:
            try:
                plans[name] = services.controller.plan_topic(name, partitions, {})
            except KafkaError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    errors[name] = e.code
            await slicer.tick()
    except BaseException:  # cancelled (connection closed): free the names reserved so far
        for name in plans:
            services.metadata.release(name)
        raise
    for i, name in later:
        if name in errors:
            topics[i] = _error_topic(name, None, errors[name])
    if plans:
        await asyncio.shield(services.controller.create_topics(list(plans.values())))
    for _i, name in later:
        await services.controller.wait_for_creation(name)
    for i, name in later:  # in slices: a response of 10,000 topics
        if topics[i] is None:
            _fill(services, ctx.api_version, topics, [(i, name)], plans)
            await slicer.tick()
    return _response(ctx, req, topics)
