"""CreateTopics (19): create topics with partitions, configs, -1 defaults and validate-only.

-1 partitions / replication factor mean the broker defaults (``num.partitions``,
``default.replication.factor``). Manual replica assignments must place every partition on this
broker. A topic named twice in one request fails with INVALID_REQUEST. From v5 the response
carries the resulting partition count, replication factor and the topic's effective configs;
from v7 its topic id. Reserved names (``__cluster_metadata``, the internal topics) are refused
with INVALID_REQUEST, as Kafka refuses ``__cluster_metadata``.

Every topic is validated and its name reserved synchronously, in request order; the broker then
creates the partition logs (in a worker thread for large requests, see Broker.plan_topic) and
commits all new topics to the metadata log in one append and one fsync. A topic whose logs
cannot be created gets KAFKA_STORAGE_ERROR and is not in metadata afterwards. Building the
response yields to the event loop in slices (thousands of topics with configs).

Authorization (Kafka 4.0's ControllerApis.createTopics): CREATE on the cluster (asked without
audit logging) or else CREATE on each topic: a topic without it is TOPIC_AUTHORIZATION_FAILED
"Authorization failed." and not created (a duplicate name and ``__cluster_metadata`` are
answered INVALID_REQUEST before any check). A created (or validated) topic the principal may
not DESCRIBE_CONFIGS is answered without its configs, partition count and replication factor,
with TopicConfigErrorCode TOPIC_AUTHORIZATION_FAILED (ReplicationControlManager).

Controller mutation quota (KIP-599, ``controller_mutation_rate``, docs/quotas.md): each topic
to create takes its partition count from its client's token bucket. From v6 (clients that know
the error) a topic that finds the bucket in debt is THROTTLING_QUOTA_EXCEEDED and not created
(the request that overdrew it still succeeds); older versions are only throttled. The response
carries the throttle time and the connection is muted for it (KIP-219). Validate-only requests
take nothing.

Kafka 4.0's controller bounds a request twice by its MAX_RECORDS_PER_USER_OP (snakka.limits,
10,000), and so does snakka: first the partitions all its topics ask for (duplicates,
unauthorized topics and ``__cluster_metadata`` aside; -1 counts ``num.partitions``): more is
POLICY_VIOLATION "Excessively large number of partitions per request."; then the metadata
records its valid topics would write (a topic counts 1 + its partitions + its configs, so at
most 9,999 partitions in one topic): more is POLICY_VIOLATION "Unable to perform excessively
large batch operation.". Either refuses the whole request, every topic answered with the error,
validate-only too, and creates nothing (the second keeps what the topics before the overflow took
from the mutation quota, as Kafka).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import TYPE_CHECKING

from snakka.handlers._mutation_quota import THROTTLED, mutation_quota, throttle_ms
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.core import (
    CLUSTER_METADATA_TOPIC,
    TopicInfo,
    UserOpTooLarge,
    check_partitions_per_request,
    check_user_op_records,
    creation_records,
)
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.create_topics_response import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsResponse,
)
from snakka.protocol.primitives import ZERO_UUID
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from snakka.util.slicing import TimeSlice

if TYPE_CHECKING:
    from snakka.protocol.messages.create_topics_request import CreateTopicsRequest

API = ApiDeclaration(ApiKey.CREATE_TOPICS)


def _configs_for(services, ti):
    return [CreatableTopicConfigs(name=rc.name, value=rc.value, read_only=False,
                                  config_source=int(rc.source), is_sensitive=False)
            for rc in services.resolver.topic_configs(ti)]


def _result(name, code, message=None, **kw) -> CreatableTopicResult:
    return CreatableTopicResult(name=name, error_code=code, error_message=message,
                                topic_id=kw.pop("topic_id", ZERO_UUID),
                                num_partitions=kw.pop("num_partitions", -1),
                                replication_factor=kw.pop("replication_factor", -1),
                                configs=kw.pop("configs", []))  # Kafka: [] on error, not null


def _created(r: _Request, name: str, topic_id, partitions: int, configs) -> CreatableTopicResult:
    """A created (or validated) topic's result; its configs only for a principal allowed
    DESCRIBE_CONFIGS on it."""
    if name in r.undescribable:
        res = _result(name, ErrorCode.NONE, topic_id=topic_id)
        res.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return res
    return _result(name, ErrorCode.NONE, topic_id=topic_id, num_partitions=partitions,
                   replication_factor=1, configs=configs)


def _plan(services, t) -> tuple[int, dict[str, str | None]]:
    partitions = t.num_partitions
    rf = t.replication_factor
    if t.assignments:
        if partitions != -1 or rf != -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "Both numPartitions or replicationFactor and replicasAssignments "
                             "were set. Both cannot be used at the same time.")
        idx = sorted(a.partition_index for a in t.assignments)
        if idx != list(range(len(idx))):
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "Partitions should be a consecutive 0-based integer sequence")
        for a in t.assignments:
            if list(a.broker_ids) != [services.node_id]:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Replica assignment {list(a.broker_ids)} is not valid: the only "
                                 f"broker is {services.node_id}")
        partitions, rf = len(idx), 1
    if partitions == -1:
        partitions = services.controller.default_partitions()
    if rf == -1:
        rf = services.config.default_replication_factor
    configs = {c.name: c.value for c in t.configs}
    services.metadata.check_create_topic(t.name, partitions, rf, configs)
    return partitions, configs


# Topics a request may name and still be validated in one go on the loop (~50-100 us each);
# a larger request is validated in slices that yield to the event loop.
_VALIDATE_AT_ONCE = 100


class _Request:
    """One CreateTopics request being validated: results in request order, plans to create."""

    def __init__(self, ctx: RequestContext, req) -> None:
        self.services, self.v, self.req = ctx.services, ctx.api_version, req
        self.counts = Counter(t.name for t in req.topics)
        # Authorization, one authorizer call per question (module doc)
        self.uncreatable: frozenset[str] = frozenset()
        self.undescribable: frozenset[str] = frozenset()
        if not ctx.allows_everything:
            names = [n for n, c in self.counts.items() if c == 1 and n != CLUSTER_METADATA_TOPIC]
            if not ctx.is_allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME,
                                  log_if_denied=False):
                self.uncreatable = ctx.denied(AclOperation.CREATE, ResourceType.TOPIC, names)
            self.undescribable = ctx.denied(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC,
                                            names, log_if_denied=False)
        self.results: list[CreatableTopicResult | None] = []
        self.plans: list = []  # (index in results, TopicCreation)
        # Kafka's metadata records for the topics validated so far (MAX_RECORDS_PER_USER_OP)
        self.records = 0
        self.too_large: UserOpTooLarge | None = None
        self.defaults = None  # validate-only: the broker defaults' configs, resolved once
        # controller_mutation_rate (KIP-599): strict from v6
        self.quota = mutation_quota(ctx, strict_since_version=6)
        try:
            check_partitions_per_request(self._partitions_asked())
        except UserOpTooLarge as e:
            self.too_large = e

    def _partitions_asked(self) -> int:
        """Kafka's validateTotalNumberOfPartitions over the topics its controller is given
        (duplicates, unauthorized ones and ``__cluster_metadata`` are not): a manual assignment
        counts its partitions, -1 the broker's num.partitions, any other count below 1 none."""
        default: int | None = None
        total = 0
        for t in self.req.topics:
            if (self.counts[t.name] > 1 or t.name in self.uncreatable
                    or t.name == CLUSTER_METADATA_TOPIC):
                continue
            if t.assignments:
                total += len(t.assignments)
            elif t.num_partitions == -1:
                if default is None:
                    default = self.services.controller.default_partitions()
                total += default
            elif t.num_partitions > 0:
                total += t.num_partitions
        return total

    def add(self, t) -> None:
        services = self.services
        if self.too_large is not None:  # Kafka's controller stops at the record that overflows
            return
        if self.counts[t.name] > 1:
            self.results.append(_result(
                t.name, ErrorCode.INVALID_REQUEST,
                "Create topics request from client contains a duplicate topic"))
            return
        if t.name in self.uncreatable:
            self.results.append(_result(t.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                        "Authorization failed."))
            return
        try:
            partitions, configs = _plan(services, t)
            # Charged before validate-only returns, as Kafka's controller does.
            if self.quota is not None and not self.quota.record(partitions):
                self.results.append(_result(t.name, THROTTLED))
                return
            self.records += creation_records(partitions, configs)
            check_user_op_records(self.records)
            if self.req.validate_only:
                if self.v >= 5 and self.defaults is None:
                    self.defaults = _configs_for(services, None)
                # Kafka names the topic id it would have used; clients read it like a real one
                self.results.append(_created(self, t.name, uuid.uuid4(), partitions,
                                             self.defaults if self.v >= 5 else []))
                return
            self.plans.append((len(self.results), services.controller.plan_topic(t.name, partitions, configs)))
            self.results.append(None)
        except UserOpTooLarge as e:
            self.too_large = e
        except KafkaError as e:
            self.results.append(_result(t.name, e.code, e.message))

    def refused_whole(self) -> CreateTopicsResponse | None:
        """The answer to a request over MAX_RECORDS_PER_USER_OP (Kafka's CreateTopicsRequest
        error response: every topic named, with the error), its reserved names freed."""
        if self.too_large is None:
            return None
        for _i, plan in self.plans:
            self.services.metadata.release(plan.name)
        self.plans = []
        e = self.too_large
        return CreateTopicsResponse(throttle_time_ms=throttle_ms(self.quota), topics=[
            _result(t.name, e.code, e.message) for t in self.req.topics])


def handle(ctx: RequestContext, req: CreateTopicsRequest):
    r = _Request(ctx, req)
    if len(req.topics) > _VALIDATE_AT_ONCE:
        return _validate_then_create(r)
    for t in req.topics:
        r.add(t)
    refused = r.refused_whole()
    if refused is not None:
        return refused
    if not r.plans:
        return CreateTopicsResponse(throttle_time_ms=throttle_ms(r.quota), topics=r.results)
    # Small creations are in metadata when this returns (a pipelined request sees them).
    done = r.services.controller.create_topics([p for _i, p in r.plans])
    return _respond(r, done)


async def _validate_then_create(r: _Request):
    slicer = TimeSlice()
    try:
        for t in r.req.topics:
            r.add(t)
            await slicer.tick()
    except BaseException:  # cancelled (connection closed): free the names reserved so far
        for _i, plan in r.plans:
            r.services.metadata.release(plan.name)
        raise
    refused = r.refused_whole()
    if refused is not None:
        return refused
    done = r.services.controller.create_topics([p for _i, p in r.plans]) if r.plans else None
    return await _respond(r, done)


async def _respond(r: _Request, done):
    services, v, results = r.services, r.v, r.results
    if done is not None:
        await asyncio.shield(done)
    slicer = TimeSlice()
    configs_cache: dict[frozenset, list] = {}
    for i, plan in r.plans:
        if plan.error is not None:
            results[i] = _result(plan.name, plan.error.code, plan.error.message)
            continue
        # The plan, not the metadata: a DeleteTopics may already have run during a yield.
        ti = TopicInfo(plan.name, plan.topic_id, plan.partitions, plan.configs)
        configs = None
        if v >= 5 and plan.name not in r.undescribable:
            key = frozenset(ti.configs.items())
            configs = configs_cache.get(key)
            if configs is None:
                configs = configs_cache[key] = _configs_for(services, ti)
                await slicer.tick()
        results[i] = _created(r, plan.name, ti.topic_id, plan.partitions, configs)
    return CreateTopicsResponse(throttle_time_ms=throttle_ms(r.quota), topics=results)
