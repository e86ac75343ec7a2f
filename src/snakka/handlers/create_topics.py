"""CreateTopics (19): create topics with partitions, configs, -1 defaults and validate-only.

-1 partitions / replication factor mean the broker defaults (``num.partitions``,
``default.replication.factor``). Manual replica assignments must place every partition on this
broker. A topic named twice in one request fails with INVALID_REQUEST. From v5 the response
carries the resulting partition count, replication factor and the topic's effective configs;
from v7 its topic id. All new topics of a request are committed to the metadata log in one fsync.
"""

from __future__ import annotations

import uuid
from collections import Counter

from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.create_topics_response import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsResponse,
)
from snakka.protocol.primitives import ZERO_UUID

API_KEY = 19


def _configs_for(broker, ti):
    return [CreatableTopicConfigs(name=rc.name, value=rc.value, read_only=False,
                                  config_source=int(rc.source), is_sensitive=False)
            for rc in broker.resolver.topic_configs(ti)]


def _result(name, code, message=None, **kw) -> CreatableTopicResult:
    return CreatableTopicResult(name=name, error_code=code, error_message=message,
                                topic_id=kw.pop("topic_id", ZERO_UUID),
                                num_partitions=kw.pop("num_partitions", -1),
                                replication_factor=kw.pop("replication_factor", -1),
                                configs=kw.pop("configs", []))  # Kafka: [] on error, not null


def _plan(broker, t) -> tuple[int, dict[str, str | None]]:
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
            if list(a.broker_ids) != [broker.node_id]:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Replica assignment {list(a.broker_ids)} is not valid: the only "
                                 f"broker is {broker.node_id}")
        partitions, rf = len(idx), 1
    if partitions == -1:
        partitions = int(broker.resolver.broker_value("num.partitions"))
    if rf == -1:
        rf = broker.config.default_replication_factor
    configs = {c.name: c.value for c in t.configs}
    broker.metadata.check_create_topic(t.name, partitions, rf, configs)
    return partitions, configs


def handle(ctx, req):
    broker = ctx.broker
    v = ctx.api_version
    counts = Counter(t.name for t in req.topics)
    results = []
    records: list[dict] = []
    for t in req.topics:
        if counts[t.name] > 1:
            results.append(_result(t.name, ErrorCode.INVALID_REQUEST,
                                   "Create topics request from client contains a duplicate topic"))
            continue
        try:
            partitions, configs = _plan(broker, t)
            if req.validate_only:
                # Kafka names the topic id it would have used; clients read it like a real one
                results.append(_result(t.name, ErrorCode.NONE, topic_id=uuid.uuid4(),
                                       num_partitions=partitions, replication_factor=1,
                                       configs=_configs_for(broker, None) if v >= 5 else []))
                continue
            ti, recs = broker.create_topic_now(t.name, partitions, configs)
            records.extend(recs)
            results.append(_result(t.name, ErrorCode.NONE, topic_id=ti.topic_id,
                                   num_partitions=partitions, replication_factor=1,
                                   configs=_configs_for(broker, ti) if v >= 5 else []))
        except KafkaError as e:
            results.append(_result(t.name, e.code, e.message))
    response = CreateTopicsResponse(throttle_time_ms=0, topics=results)
    if not records:
        return response
    return _commit(broker, records, response)


async def _commit(broker, records, response):
    await broker.commit_metadata(records)
    return response
