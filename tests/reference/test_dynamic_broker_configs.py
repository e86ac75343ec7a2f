"""Broker configs changed at run time, against the reference Kafka 4.0: the same
IncrementalAlterConfigs / AlterConfigs / DescribeConfigs requests on a BROKER resource to both
brokers, the same error codes and (where snakka's validators can say the same) messages.

Each case SETs then DELETEs, so what a case stores is gone when it ends (both brokers are shared
by the package's tests). Differences that are right are named per case in ``MESSAGE_DIFFERS``
(same code, other wording) and ``CODE_DIFFERS`` (a documented gap); everything else must match
exactly.
"""

from __future__ import annotations

import asyncio

import pytest

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.messages.alter_configs_request import (
    AlterableConfig as LegacyConfig,
)
from snakka.protocol.messages.alter_configs_request import (
    AlterConfigsRequest,
)
from snakka.protocol.messages.alter_configs_request import (
    AlterConfigsResource as LegacyResource,
)
from snakka.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from snakka.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)

BROKER = 4
SET, DELETE = 0, 1
NODE = "1"  # both brokers run as node 1 (kafka-ref.sh, EmbeddedBroker)

# (resource name, config, value): each SET, then each DELETE.
CASES = [
    ("1", "log.dirs", "/tmp/x"),                 # static: INVALID_REQUEST; DELETE accepted
    ("", "log.dirs", "/tmp/x"),
    ("1", "num.partitions", "3"),                # static in Kafka (was dynamic in snakka)
    ("", "auto.create.topics.enable", "false"),
    ("1", "fetch.max.bytes", "1000"),
    ("1", "replica.lag.time.max.ms", "1000"),    # static in Kafka, unknown to snakka
    ("1", "foo.bar.custom", "1"),                # unknown: stored as a plugin's config
    ("", "foo.bar.custom", "1"),
    ("1", "log.retention.ms", "abc"),            # type and range errors
    ("", "log.retention.ms", "abc"),
    ("1", "log.retention.ms", "-5"),             # unvalidated in Kafka: no time limit
    ("1", "message.max.bytes", "-1"),
    ("1", "message.max.bytes", "3000000000"),
    ("1", "compression.type", "bogus"),
    ("", "log.cleaner.min.cleanable.ratio", "2"),
    ("", "log.retention.ms", "100000"),          # dynamic: accepted
    ("1", "log.retention.ms", "100000"),
    ("2", "log.retention.ms", "100000"),         # another broker's id
    ("x", "log.retention.ms", "100000"),
    ("", "log.segment.bytes", "10"),
    ("", "log.cleaner.threads", "0"),
    ("", "log.cleaner.backoff.ms", "20000"),     # dynamic in both (applied at run time)
    ("1", "log.cleaner.io.max.bytes.per.second", "1000000.0"),
    ("1", "log.cleaner.threads", "2"),           # Kafka adds a thread; snakka has one (gap)
    ("1", "remote.fetch.max.wait.ms", "1000"),   # dynamic in both
    ("", "remote.log.manager.copy.max.bytes.per.second", "1000000"),  # dynamic in both
    ("1", "remote.log.manager.fetch.max.bytes.per.second", "1000000"),
    ("", "remote.log.manager.fetch.quota.window.num", "5"),  # static in both
    ("", "remote.list.offsets.request.timeout.ms", "0"),
    ("", "listeners", "PLAINTEXT://:1"),         # per-broker configs on the cluster default
    ("", "ssl.cipher.suites", "x"),
    ("1", "ssl.keystore.location", "/nope"),     # only per listener
    ("", "ssl.keystore.location", "/nope"),
    ("", "max.connections", "1000"),             # dynamic in both (applied at run time)
    ("1", "max.connections.per.ip", "1000"),
    ("", "max.connections.per.ip.overrides", "127.0.0.9:5"),
    ("", "max.connections.per.ip", "0"),         # 0 needs overrides (no one could connect)
    ("", "max.connection.creation.rate", "1000"),  # dynamic in both (applied at run time)
    ("1", "num.io.threads", "4"),                # Kafka resizes its pool; snakka has none (gap)
    ("", "num.network.threads", "3"),
    ("1", "remote.log.reader.threads", "5"),
    ("1", "ssl.cipher.suites", "TLS_AES_128_GCM_SHA256"),  # Kafka: per broker; snakka: gap
    ("1", "sasl.enabled.mechanisms", "PLAIN"),
    ("1", "listener.name.plaintext.max.connections", "10"),
    ("1", "listeners", "PLAINTEXT://127.0.0.1:0"),  # both refuse, for their own reasons
    ("1", "principal.builder.class", "x"),
]

# (resource, config, value) -> why the message legitimately differs (the code is the same).
MESSAGE_DIFFERS = {
    ("", "log.segment.bytes", "10"): "snakka's floor is 14 bytes (tests use tiny segments); "
                                     "Kafka 4.0's is 1 MiB: both 'Value must be at least N'",
    ("", "log.cleaner.threads", "0"): "Kafka fails its reconfiguration with '/ by zero'; "
                                      "snakka's range check says 'Value must be at least 1'",
    ("1", "listeners", "PLAINTEXT://127.0.0.1:0"): "Kafka's reconfiguration fails on its "
                                                  "controller listener; snakka cannot rebind",
    ("1", "principal.builder.class", "x"): "Kafka: 'Class x could not be found'; snakka "
                                           "cannot change it at run time",
}
# (resource, config, value) -> (kafka code, snakka code, why): documented gaps.
CODE_DIFFERS = {
    ("1", "log.cleaner.threads", "2"): (0, 42, "snakka runs one cleaner thread "
                                               "(docs/configuration.md, known gap)"),
    ("1", "num.io.threads", "4"): (0, 42, "snakka has no I/O thread pool to resize "
                                          "(docs/configuration.md, known gap)"),
    ("", "num.network.threads", "3"): (0, 42, "no network thread pool (known gap)"),
    ("1", "remote.log.reader.threads", "5"): (0, 42, "the reader pool is built at start "
                                                     "(known gap)"),
    ("1", "ssl.cipher.suites", "TLS_AES_128_GCM_SHA256"): (
        0, 42, "only the per-listener key and trust stores are reloaded (known gap)"),
    ("1", "sasl.enabled.mechanisms", "PLAIN"): (0, 42, "SASL is configured at start "
                                                       "(known gap)"),
    ("1", "listener.name.plaintext.max.connections", "10"): (
        0, 42, "per-listener connection limits are static (known gap)"),
}


async def _incremental(bootstrap: str, name: str, config: str, op: int,
                       value: str | None) -> tuple[int, str | None]:
    host, port = parse_bootstrap(bootstrap)
    async with KafkaConnection(host, port) as c:
        r = await c.send(IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
            resource_type=BROKER, resource_name=name,
            configs=[AlterableConfig(name=config, config_operation=op, value=value)])],
            validate_only=False), 1)
    x = r.responses[0]
    return x.error_code, x.error_message


async def _legacy(bootstrap: str, name: str, config: str, value: str,
                  validate_only: bool) -> tuple[int, str | None]:
    host, port = parse_bootstrap(bootstrap)
    async with KafkaConnection(host, port) as c:
        r = await c.send(AlterConfigsRequest(resources=[LegacyResource(
            resource_type=BROKER, resource_name=name,
            configs=[LegacyConfig(name=config, value=value)])], validate_only=validate_only), 2)
    x = r.responses[0]
    return x.error_code, x.error_message


async def _describe(bootstrap: str, name: str) -> dict[str, tuple[bool, str | None]]:
    host, port = parse_bootstrap(bootstrap)
    async with KafkaConnection(host, port) as c:
        r = await c.send(DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=BROKER, resource_name=name, configuration_keys=None)],
            include_synonyms=False, include_documentation=False), 4)
    assert r.results[0].error_code == 0
    return {x.name: (x.read_only, x.value) for x in r.results[0].configs}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0] or 'default'}-{c[1]}={c[2]}")
def test_incremental_alter_broker_config_answers_as_kafka(brokers, case):
    name, config, value = case
    for op in (SET, DELETE):
        got = [asyncio.run(_incremental(bs, name, config, op, value if op == SET else None))
               for bs in brokers]
        (k_code, k_msg), (s_code, s_msg) = got
        if op == SET and case in CODE_DIFFERS:
            assert (k_code, s_code) == CODE_DIFFERS[case][:2], got
            continue
        assert s_code == k_code, (op, got)
        if op == SET and case in MESSAGE_DIFFERS:
            assert s_msg and (config in s_msg), got
            continue
        assert s_msg == k_msg, (op, got)


@pytest.mark.timeout(300)
def test_stored_broker_configs_are_described_alike(brokers):
    """Dynamic values set on the node and on the default, and custom (plugin) configs, show in
    DescribeConfigs as Kafka shows them: a custom config is listed on the resource that holds
    it (on the node's only when asked for by name), sensitive, typeless and read-only."""
    stored = (("1", "log.retention.ms", "123456"), ("", "log.cleaner.delete.retention.ms", "4242"),
              ("1", "foo.bar.custom", "1"), ("", "zzz.default.custom", "2"))
    try:
        for bs in brokers:
            for name, config, value in stored:
                assert asyncio.run(_incremental(bs, name, config, SET, value)) == (0, None)
        for resource in (NODE, ""):
            for keys in (None, ["log.retention.ms", "log.cleaner.delete.retention.ms",
                                "foo.bar.custom", "zzz.default.custom"]):
                k, s = (asyncio.run(_describe_entries(bs, resource, keys)) for bs in brokers)
                picked = {"log.retention.ms", "log.cleaner.delete.retention.ms",
                          "foo.bar.custom", "zzz.default.custom"}
                k = {n: e for n, e in k.items() if n in picked}
                s = {n: e for n, e in s.items() if n in picked}
                assert s == k, (resource, keys)
                if resource == NODE:
                    assert k["log.retention.ms"][:2] == ("123456", False)
                    assert k["foo.bar.custom"] == (None, True, 2, True, 0)
    finally:
        for bs in brokers:
            for name, config, _v in stored:
                asyncio.run(_incremental(bs, name, config, DELETE, None))


async def _describe_entries(bootstrap: str, name: str, keys: list[str] | None
                            ) -> dict[str, tuple[str | None, bool, int, bool, int]]:
    """name -> (value, read_only, source, sensitive, type)."""
    host, port = parse_bootstrap(bootstrap)
    async with KafkaConnection(host, port) as c:
        r = await c.send(DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=BROKER, resource_name=name, configuration_keys=keys)],
            include_synonyms=False, include_documentation=False), 4)
    assert r.results[0].error_code == 0
    return {x.name: (x.value, x.read_only, x.config_source, x.is_sensitive, x.config_type)
            for x in r.results[0].configs}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", [("1", "log.dirs", "/x"), ("", "num.partitions", "2"),
                                  ("1", "log.retention.ms", "abc"),
                                  ("", "listeners", "PLAINTEXT://:1")],
                         ids=lambda c: f"{c[0] or 'default'}-{c[1]}")
def test_legacy_alter_configs_validate_only_answers_as_kafka(brokers, case):
    """AlterConfigs (v2, validate_only so neither broker's overrides are replaced)."""
    name, config, value = case
    k, s = (asyncio.run(_legacy(bs, name, config, value, True)) for bs in brokers)
    assert s == k


@pytest.mark.timeout(300)
def test_read_only_of_broker_configs_is_kafkas(brokers):
    """DescribeConfigs(BROKER) read_only for every config both brokers describe: the same
    (Kafka's DynamicBrokerConfig.AllDynamicConfigs)."""
    kafka, snakka = (asyncio.run(_describe(bs, NODE)) for bs in brokers)
    both = sorted(set(kafka) & set(snakka))
    assert len(both) > 100
    differs = {n: (kafka[n][0], snakka[n][0]) for n in both if kafka[n][0] != snakka[n][0]}
    assert differs == {}
    assert snakka["num.partitions"][0] and snakka["fetch.max.bytes"][0]
    assert not snakka["max.connections"][0] and not snakka["log.cleaner.threads"][0]
