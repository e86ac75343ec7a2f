"""Effective configuration: which value of a config is in force, and where it came from.

Kafka resolves a topic config from, in order: the topic's own override (DYNAMIC_TOPIC_CONFIG),
a dynamic per-broker value (DYNAMIC_BROKER_CONFIG), the dynamic cluster-wide default
(DYNAMIC_DEFAULT_BROKER_CONFIG), server.properties (STATIC_BROKER_CONFIG), and the built-in
default (DEFAULT_CONFIG). DescribeConfigs reports the winner and, with synonyms, the whole chain;
the storage layer gets the resolved strings. This module owns that resolution; it is pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from snakka.config import (
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigSource,
    ConfigType,
    broker_default_for_topic_config,
    dynamic_listener_ssl_config,
    ignored_dynamic_broker_config,
)
from snakka.metadata.core import RESOURCE_BROKER, RESOURCE_GROUP, ClusterMetadata, TopicInfo


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    name: str
    value: str | None
    source: ConfigSource
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]  # (name, value, source)


class ConfigResolver:
    def __init__(self, static: BrokerConfig, metadata: ClusterMetadata) -> None:
        self.static = static
        self.metadata = metadata

    def _broker_layers(self, key: str) -> list[tuple[str | None, ConfigSource]]:
        node = str(self.static.node_id)
        layers: list[tuple[str | None, ConfigSource]] = []
        if ignored_dynamic_broker_config(key):
            # Static in Kafka: a dynamic value an older snakka stored is not in force (the
            # broker logged it at start; DescribeConfigs shows the static value).
            if key in self.static.overrides:
                layers.append((self.static.overrides[key], ConfigSource.STATIC_BROKER_CONFIG))
            return layers
        dyn_node = self.metadata.dynamic_configs.get((RESOURCE_BROKER, node), {})
        dyn_default = self.metadata.dynamic_configs.get((RESOURCE_BROKER, ""), {})
        if key in dyn_node:
            layers.append((dyn_node[key], ConfigSource.DYNAMIC_BROKER_CONFIG))
        if key in dyn_default:
            layers.append((dyn_default[key], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        if key in self.static.overrides:
            layers.append((self.static.overrides[key], ConfigSource.STATIC_BROKER_CONFIG))
        return layers

    def broker_value(self, key: str) -> str | None:
        """The broker's value of ``key`` from dynamic or static config (None if unset)."""
        layers = self._broker_layers(key)
        if layers:
            return layers[0][0]
        d = BROKER_CONFIGS.get(key)
        return d.default if d else None

    def broker_int(self, key: str) -> int:
        """:meth:`broker_value` of an INT/LONG broker config (every one has a default)."""
        value = self.broker_value(key)
        if value is None:
            raise KeyError(f"broker config {key} has no value and no default")
        return int(value)

    def broker_value_or_unset(self, key: str) -> str | None:
        layers = self._broker_layers(key)
        return layers[0][0] if layers else None

    # -- brokers -------------------------------------------------------------------------
    def broker_configs(self, broker_resource: str) -> list[ResolvedConfig]:
        """The configs DescribeConfigs lists for a BROKER resource."""
        out = []
        for name, d in BROKER_CONFIGS.items():
            layers = self._broker_layers(name)
            if broker_resource == "":  # the cluster default entity shows only dynamic defaults
                layers = [ly for ly in layers if ly[1] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
                if not layers:
                    continue
            syn = tuple((name, v, s) for v, s in layers)
            if d.default is not None:
                syn += ((name, d.default, ConfigSource.DEFAULT_CONFIG),)
            if layers:
                out.append(ResolvedConfig(name, layers[0][0], layers[0][1], syn))
            else:
                out.append(ResolvedConfig(name, d.default, ConfigSource.DEFAULT_CONFIG, syn))
        # Per-listener SSL configs (listener.name.<l>.ssl.*) set statically or dynamically,
        # as Kafka lists them (the dynamic ones change a listener's certificate at run time).
        node = str(self.static.node_id)
        ssl_keys = set(self.metadata.dynamic_configs.get((RESOURCE_BROKER, node), {}))
        if broker_resource != "":
            ssl_keys |= set(self.static.overrides)
        for name in sorted(k for k in ssl_keys if dynamic_listener_ssl_config(k) is not None):
            layers = self._broker_layers(name)
            if layers:
                out.append(ResolvedConfig(name, layers[0][0], layers[0][1],
                                          tuple((name, v, s) for v, s in layers)))
        # Custom (plugin) configs stored by AlterConfigs, as Kafka lists them: the cluster
        # default's on the default resource, the node's and the default's on the node's.
        dyn_default = self.metadata.dynamic_configs.get((RESOURCE_BROKER, ""), {})
        custom = set(dyn_default) if broker_resource == "" else (
            set(self.metadata.dynamic_configs.get((RESOURCE_BROKER, node), {}))
            | set(dyn_default))
        for name in sorted(custom):
            if name in BROKER_CONFIGS or dynamic_listener_ssl_config(name) is not None:
                continue
            layers = self._broker_layers(name)
            if broker_resource == "":
                layers = [ly for ly in layers
                          if ly[1] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            if layers:
                out.append(ResolvedConfig(name, layers[0][0], layers[0][1],
                                          tuple((name, v, s) for v, s in layers)))
        return out

    # -- topics --------------------------------------------------------------------------
    def topic_config(self, topic: TopicInfo | None, name: str) -> ResolvedConfig:
        d = TOPIC_CONFIGS[name]
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if topic is not None and name in topic.configs:
            synonyms.append((name, topic.configs[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        broker_keys = []
        if d.broker_synonym:
            broker_keys.append(d.broker_synonym)
        if name == "retention.ms":
            broker_keys = ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
        elif name == "segment.ms":
            broker_keys = ["log.roll.ms", "log.roll.hours"]
        elif name == "flush.ms":
            broker_keys = ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
        for k in broker_keys:
            for v, s in self._broker_layers(k):
                synonyms.append((k, v, s))
        value, _src_key = broker_default_for_topic_config(name, self.broker_value_or_unset)
        default_value, _ = broker_default_for_topic_config(
            name, lambda k: BROKER_CONFIGS[k].default if k in BROKER_CONFIGS else None)
        # The last synonym is the built-in default, in the unit of the key that holds it
        # (log.retention.hours=168, not 604800000), as Kafka reports it.
        if broker_keys:
            last = BROKER_CONFIGS[broker_keys[-1]]
            synonyms.append((last.name, last.default if last.default is not None
                             else default_value, ConfigSource.DEFAULT_CONFIG))
        else:
            synonyms.append((name, default_value, ConfigSource.DEFAULT_CONFIG))
        if topic is not None and name in topic.configs:
            return ResolvedConfig(name, topic.configs[name], ConfigSource.DYNAMIC_TOPIC_CONFIG,
                                  tuple(synonyms))
        if len(synonyms) > 1:
            return ResolvedConfig(name, value, synonyms[0][2], tuple(synonyms))
        return ResolvedConfig(name, default_value, ConfigSource.DEFAULT_CONFIG, tuple(synonyms))

    def topic_configs(self, topic: TopicInfo | None) -> list[ResolvedConfig]:
        return [self.topic_config(topic, n) for n in TOPIC_CONFIGS]

    def effective_topic_config_map(self, topic: TopicInfo | None) -> dict[str, str]:
        """name -> value string for every topic config (what storage is configured with)."""
        return {rc.name: rc.value for rc in self.topic_configs(topic) if rc.value is not None}

    # -- groups (resource type GROUP, Kafka's GroupConfig) ----------------------------------
    def group_config(self, group_id: str, name: str) -> ResolvedConfig:
        """A group config: the group's override (GROUP_CONFIG) else its broker synonym (any
        broker layer) else the built-in default."""
        d = GROUP_CONFIGS[name]
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        overrides = self.metadata.dynamic_configs.get((RESOURCE_GROUP, group_id), {})
        if name in overrides:
            synonyms.append((name, overrides[name], ConfigSource.GROUP_CONFIG))
        if d.broker_synonym:
            for v, s in self._broker_layers(d.broker_synonym):
                synonyms.append((d.broker_synonym, v, s))
            default = BROKER_CONFIGS[d.broker_synonym].default
            synonyms.append((d.broker_synonym, default, ConfigSource.DEFAULT_CONFIG))
        else:
            synonyms.append((name, d.default, ConfigSource.DEFAULT_CONFIG))
        value, source = synonyms[0][1], synonyms[0][2]
        return ResolvedConfig(name, value, source, tuple(synonyms))

    def group_configs(self, group_id: str) -> list[ResolvedConfig]:
        return [self.group_config(group_id, n) for n in GROUP_CONFIGS]

    def group_value(self, group_id: str, name: str) -> str:
        """The effective value of group config ``name`` for ``group_id``: the group's override,
        else the broker default it falls back to (e.g. ``share.record.lock.duration.ms`` ←
        ``group.share.record.lock.duration.ms``)."""
        value = self.group_config(group_id, name).value
        assert value is not None, name
        d = GROUP_CONFIGS[name]
        if d.type == ConfigType.STRING:
            # Canonical form (Kafka parses these case-insensitively): "EARLIEST" -> "earliest".
            return str(d.value(value))
        if d.type == ConfigType.BOOLEAN:
            return "true" if d.value(value) else "false"
        return value.strip()
