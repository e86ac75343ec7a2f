"""Shared core of AlterConfigs and IncrementalAlterConfigs: validate, apply, persist, reconfigure.

Topic, broker, group and client-metrics (KIP-714 subscription) changes go to the metadata log (durable before the answer); the affected
partition logs are reconfigured at once, and group configs are read where they are used (the
share-group core and the share-partition side ask ConfigResolver.group_value each time). Broker-logger changes set Python logger levels and are
not persisted (as in Kafka). Only dynamic broker configs may change at run time; a static one,
a bad value or one snakka cannot apply gets INVALID_REQUEST naming the keys, as in Kafka
(ClusterMetadata._check_broker_config_change).

Authorization is the handlers' (handlers/_authz.denied_config_resources: ALTER_CONFIGS on the
topic, the group or the cluster); a denied resource is answered with its authorization error
here, after the checks Kafka's broker makes before forwarding to its controller (a BROKER
resource's name and config validation come first), and nothing of it is applied.

Per-listener SSL configs (``listener.name.<l>.ssl.keystore.location``...) on this broker's
resource are loaded and validated before the change is written and installed after it is
durable (security/ssl_reload.py: certificate reload without restart).
"""

from __future__ import annotations

import logging

from snakka.config import BROKER_CONFIGS, dynamic_listener_ssl_config
from snakka.metadata.core import (
    RESOURCE_BROKER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
)
from snakka.protocol.errors import ErrorCode, KafkaError

RESOURCE_BROKER_LOGGER = 8
_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
           "WARN": logging.WARNING, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
           "FATAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}


def _alter_loggers(services, name: str, changes: dict, validate_only: bool) -> None:
    if name != str(services.node_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id {name}")
    for logger, level in changes.items():
        if level is not None and level.upper() not in _LEVELS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Cannot set logger {logger} to {level}")
    if validate_only:
        return
    for logger, level in changes.items():
        lg = logging.getLogger() if logger == "root" else logging.getLogger(logger)
        lg.setLevel(logging.NOTSET if level is None else _LEVELS[level.upper()])


def _check_broker_id(services, rname: str) -> None:
    """A BROKER resource names this node or is empty (the cluster default); Kafka's
    ConfigAdminManager.validateResourceNameIsCurrentNodeId wording."""
    if rname == "":
        return
    try:
        node = int(rname)
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Node id must be an integer, but it is: {rname}") from None
    if node != services.node_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {services.node_id}, but received "
                         f"{rname}")


def _value_after(services, rname: str, cfg: dict, replace: bool, key: str) -> str | None:
    """``key``'s broker value in force once ``cfg`` is applied to BROKER resource ``rname``
    (dynamic per node, dynamic default, static, default)."""
    node = str(services.node_id)
    md = services.metadata
    layers = {n: ({} if (replace and n == rname) else
                  dict(md.dynamic_configs.get((RESOURCE_BROKER, n), {}))) for n in (node, "")}
    for k, v in cfg.items():
        if v is None:
            layers[rname].pop(k, None)
        else:
            layers[rname][k] = v
    for layer in (layers[node], layers[""]):
        if key in layer:
            return layer[key]
    static = services.resolver.static.overrides
    return static[key] if key in static else BROKER_CONFIGS[key].default


def _check_reconfiguration(services, rname: str, cfg: dict, replace: bool) -> None:
    """Kafka's validation of the broker config as it will be (its KafkaConfig requirements and
    reconfigurables' validateReconfiguration), for what snakka applies at run time: per-IP
    limit 0 needs overrides, or no client could connect again."""
    if not {"max.connections.per.ip", "max.connections.per.ip.overrides"} & set(cfg):
        return
    per_ip = _value_after(services, rname, cfg, replace, "max.connections.per.ip")
    overrides = _value_after(services, rname, cfg, replace, "max.connections.per.ip.overrides")
    if per_ip is not None and int(per_ip) == 0 and not (overrides or "").strip():
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "requirement failed: max.connections.per.ip can be set to zero only "
                         "if max.connections.per.ip.overrides property is set.")


def _prepare_ssl(services, rname: str, cfg: dict, replace: bool):
    """The new TLS contexts a BROKER change implies (None: it changes none); KafkaError when
    a new key or trust store cannot be used."""
    reconf = services.ssl_reconfiguration
    if reconf is None:
        keys = sorted(k for k in cfg if dynamic_listener_ssl_config(k) is not None)
        if keys:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"This broker has no SSL listener to reconfigure: {keys}")
        return None
    return reconf.prepare(rname, cfg, replace=replace)


async def alter_resources(services, changes, validate_only: bool,
                          denied: dict[tuple[int, str], ErrorCode] | None = None):
    """changes: [(resource_type, resource_name, {key: value|None}, replace)]; ``denied``: the
    resources the principal may not alter, with their authorization error.
    Returns [(resource_type, resource_name, error_code, error_message)]."""
    results: list[tuple[int, str, int, str | None]] = []
    records: list[dict] = []
    touched_topics: set[str] = set()
    touched_broker = False
    ssl_plans: list = []
    for rtype, rname, cfg, replace in changes:
        try:
            refused = denied.get((rtype, rname)) if denied else None
            if refused is not None:
                if rtype == RESOURCE_BROKER:  # Kafka's broker validates before forwarding
                    _check_broker_id(services, rname)
                    services.metadata.check_config_change(rtype, rname, cfg)
                raise KafkaError(refused, refused.message)
            if rtype == RESOURCE_BROKER_LOGGER:
                _alter_loggers(services, rname, cfg, validate_only)
            elif rtype == RESOURCE_GROUP:
                bv = services.resolver.broker_value
                if validate_only:
                    services.metadata.check_config_change(rtype, rname, cfg, bv, replace=replace)
                else:
                    records += services.metadata.alter_configs(rtype, rname, cfg, replace=replace,
                                                             broker_value=bv)
            elif rtype == RESOURCE_CLIENT_METRICS:  # KIP-714 subscriptions (telemetry/)
                if validate_only:
                    services.metadata.check_config_change(rtype, rname, cfg, replace=replace)
                else:
                    records += services.metadata.alter_configs(rtype, rname, cfg, replace=replace)
            elif rtype in (RESOURCE_TOPIC, RESOURCE_BROKER):
                if rtype == RESOURCE_BROKER:
                    _check_broker_id(services, rname)
                if rtype == RESOURCE_BROKER:
                    # Per-listener SSL stores are loaded and checked before anything is
                    # written (security/ssl_reload.py); installed once durable.
                    services.metadata.check_config_change(rtype, rname, cfg, replace=replace)
                    _check_reconfiguration(services, rname, cfg, replace)
                    plan = _prepare_ssl(services, rname, cfg, replace)
                    if plan is not None and not validate_only:
                        ssl_plans.append(plan)
                if validate_only:
                    services.metadata.check_config_change(rtype, rname, cfg)
                else:
                    records += services.metadata.alter_configs(rtype, rname, cfg, replace=replace)
                    if rtype == RESOURCE_TOPIC:
                        touched_topics.add(rname)
                    else:
                        touched_broker = True
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
            results.append((rtype, rname, 0, None))
        except KafkaError as e:
            results.append((rtype, rname, int(e.code), e.message))
    if records:
        await services.controller.commit_metadata(records)
        services.controller.reconfigure_topics(None if touched_broker else touched_topics)
        if touched_broker:  # connection limits and other broker-wide appliers
            services.controller.reconfigure_broker()
    for plan in ssl_plans:
        assert services.ssl_reconfiguration is not None
        services.ssl_reconfiguration.apply(plan)
    return results
