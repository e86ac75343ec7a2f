"""DescribeConfigs (32): effective configs of topics, brokers and broker loggers, with sources.

Every known config is listed with its value, source (topic override, dynamic broker, dynamic
cluster default, server.properties, built-in default), type (v3+), documentation (v3+ on
request) and, with ``include_synonyms``, the chain of places that could supply it — tools like
``kafka-configs.sh --describe --all`` and admin UIs rely on real, complete answers.
Resource types: 2 TOPIC, 4 BROKER (this node's id, or "" for the cluster default entity),
8 BROKER_LOGGER (snakka's Python loggers and their levels), 32 GROUP (Kafka's group configs:
the group's overrides, else their broker synonyms; a group need not exist to be configured),
16 CLIENT_METRICS (a KIP-714 subscription's configs as set, Kafka's ConfigHelper).

A request naming many resources is answered in time slices that yield to the event loop.

Authorization (Kafka's ConfigHelper): DESCRIBE_CONFIGS on the topic (else
TOPIC_AUTHORIZATION_FAILED), on the group (GROUP_AUTHORIZATION_FAILED), on the cluster for
BROKER, BROKER_LOGGER and CLIENT_METRICS resources (CLUSTER_AUTHORIZATION_FAILED); a denied
resource is answered with the error's message and no configs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from snakka.config import (
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    KAFKA_DYNAMIC_BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    dynamic_listener_ssl_config,
)
from snakka.handlers._authz import denied_config_resources
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.core import (
    RESOURCE_BROKER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    validate_topic_name,
)
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.describe_configs_response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)
from snakka.security.authorizer import AclOperation
from snakka.util.slicing import TimeSlice

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_configs_request import DescribeConfigsRequest

API = ApiDeclaration(ApiKey.DESCRIBE_CONFIGS)
RESOURCE_BROKER_LOGGER = 8


def logger_names() -> list[str]:
    names = {"snakka", "root"}
    names.update(n for n in logging.root.manager.loggerDict if n.startswith("snakka"))
    return sorted(names)


def _entry(rc, defs, include_synonyms: bool, include_docs: bool, v: int):
    d = defs.get(rc.name)
    # A broker config is read-only unless Kafka 4.0 lets IncrementalAlterConfigs change it at
    # run time (its AllDynamicConfigs; the few of those snakka refuses to change are a documented
    # gap, config.UNAPPLIED_DYNAMIC_BROKER_CONFIGS); topic and group configs are all alterable.
    read_only = rc.name not in KAFKA_DYNAMIC_BROKER_CONFIGS if defs is BROKER_CONFIGS else \
        bool(d.read_only) if d else False
    listener_ssl = dynamic_listener_ssl_config(rc.name) if defs is BROKER_CONFIGS else None
    if listener_ssl is not None:  # listener.name.<l>.ssl.*: typed (and secret) as its base
        d = defs.get(listener_ssl[1])
        read_only = False
    # A config snakka does not know (a plugin's, stored as given) may hold a secret: Kafka
    # reports such a broker config as sensitive, without its value.
    sensitive = d.sensitive if d is not None else defs is BROKER_CONFIGS
    return DescribeConfigsResourceResult(
        name=rc.name, value=None if sensitive else rc.value,
        read_only=read_only,
        is_default=rc.source == ConfigSource.DEFAULT_CONFIG,
        config_source=int(rc.source), is_sensitive=sensitive,
        synonyms=[DescribeConfigsSynonym(name=n, value=None if sensitive else val,
                                         source=int(s))
                  for n, val, s in rc.synonyms] if include_synonyms else [],
        config_type=int(d.type) if d else int(ConfigType.UNKNOWN),
        documentation=d.doc if (d and include_docs) else None,
    )


def _describe(services, res, v: int, include_synonyms: bool, include_docs: bool):
    keys = None if res.configuration_keys is None else set(res.configuration_keys)
    rtype = res.resource_type
    if rtype == RESOURCE_TOPIC:
        validate_topic_name(res.resource_name)
        ti = services.metadata.topics.get(res.resource_name)
        if ti is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Topic {res.resource_name} does not exist")
        rcs = services.resolver.topic_configs(ti)
        defs = TOPIC_CONFIGS
    elif rtype == RESOURCE_BROKER:
        if res.resource_name not in ("", str(services.node_id)):
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {services.node_id} or empty string, "
                             f"but received {res.resource_name}")
        rcs = services.resolver.broker_configs(res.resource_name)
        defs = BROKER_CONFIGS
    elif rtype == RESOURCE_GROUP:
        if not res.resource_name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Group id must not be empty")
        rcs = services.resolver.group_configs(res.resource_name)
        defs = GROUP_CONFIGS
    elif rtype == RESOURCE_CLIENT_METRICS:
        # Kafka's ConfigHelper: the subscription's configs as set, source CLIENT_METRICS_CONFIG.
        if not res.resource_name:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "Client metrics subscription name must not be empty")
        return [DescribeConfigsResourceResult(
            name=k, value=v, read_only=False, is_default=False,
            config_source=int(ConfigSource.CLIENT_METRICS_CONFIG), is_sensitive=False,
            synonyms=[], config_type=int(ConfigType.UNKNOWN), documentation=None)
            for k, v in services.metadata.current_overrides(rtype, res.resource_name).items()
            if keys is None or k in keys]
    elif rtype == RESOURCE_BROKER_LOGGER:
        if res.resource_name != str(services.node_id):
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id {res.resource_name}")
        out = []
        for name in logger_names():
            lg = logging.getLogger() if name == "root" else logging.getLogger(name)
            level = logging.getLevelName(lg.getEffectiveLevel())
            if keys is not None and name not in keys:
                continue
            out.append(DescribeConfigsResourceResult(
                name=name, value=level, read_only=False, is_default=False,
                config_source=int(ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG), is_sensitive=False,
                synonyms=[], config_type=int(ConfigType.STRING), documentation=None))
        return out
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
    return [_entry(rc, defs, include_synonyms, include_docs, v)
            for rc in rcs if keys is None or rc.name in keys]


# Resources described in one go on the loop; a topic costs ~0.5 ms to resolve (every topic
# config with its synonyms), so a request naming thousands is answered in time slices.
_DESCRIBE_AT_ONCE = 16


def _result(ctx, res, syn: bool, docs: bool, denied) -> DescribeConfigsResult:
    # Kafka answers a described resource with error message "" (not null)
    r = DescribeConfigsResult(error_code=0, error_message="", resource_type=res.resource_type,
                              resource_name=res.resource_name, configs=[])
    code = denied.get((res.resource_type, res.resource_name))
    if code is not None:
        r.error_code, r.error_message = code, code.message
        return r
    try:
        r.configs = _describe(ctx.services, res, ctx.api_version, syn, docs)
    except KafkaError as e:
        r.error_code, r.error_message = e.code, e.message
    return r


def handle(ctx: RequestContext, req: DescribeConfigsRequest):
    v = ctx.api_version
    syn = v >= 1 and req.include_synonyms
    docs = v >= 3 and req.include_documentation
    denied = denied_config_resources(ctx, AclOperation.DESCRIBE_CONFIGS,
                                     [(r.resource_type, r.resource_name) for r in req.resources])
    if len(req.resources) > _DESCRIBE_AT_ONCE:
        return _handle_sliced(ctx, req, syn, docs, denied)
    return DescribeConfigsResponse(
        throttle_time_ms=0, results=[_result(ctx, res, syn, docs, denied)
                                     for res in req.resources])


async def _handle_sliced(ctx, req, syn: bool, docs: bool, denied) -> DescribeConfigsResponse:
    slicer = TimeSlice()
    results = []
    for res in req.resources:
        results.append(_result(ctx, res, syn, docs, denied))
        await slicer.tick()
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
