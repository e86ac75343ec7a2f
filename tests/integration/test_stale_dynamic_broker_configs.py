"""A data dir from an older snakka, which let ``num.partitions``, ``auto.create.topics.enable``
and ``fetch.max.bytes`` change at run time: the dynamic values it stored in the metadata log
are static configs in Kafka 4.0, so the broker ignores them at start with a warning naming
them, and the static values are in force (topic creation with a real client, DescribeConfigs).
A DELETE removes them, as kafka-configs.sh --delete-config would.

The older broker is stood in for by writing the config record it wrote straight to the metadata
log (the broker's own append, bypassing today's validation), then restarting.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.metadata.core import RESOURCE_BROKER
from snakka.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from snakka.testing import EmbeddedBroker

from .helpers import ck_admin, run_async

pytestmark = pytest.mark.timeout(120)


def _write_old_record(broker: EmbeddedBroker, configs: dict[str, str]) -> None:
    controller = broker.broker.controller
    record = {"type": "config", "resource_type": RESOURCE_BROKER, "resource_name": "",
              "configs": configs}

    async def write():
        controller.metadata.apply(record)
        await controller.commit_metadata([record])

    assert broker._loop is not None
    asyncio.run_coroutine_threadsafe(write(), broker._loop).result(30)


def test_stale_dynamic_values_of_static_configs_are_ignored_after_restart(caplog):
    with EmbeddedBroker(config={"num.partitions": "2"}) as broker:
        _write_old_record(broker, {"num.partitions": "7", "fetch.max.bytes": "1000",
                                   "log.cleaner.delete.retention.ms": "4242"})
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="snakka.broker"):
            broker.restart()
        warnings = [r.getMessage() for r in caplog.records if r.name == "snakka.broker"
                    and "ignoring dynamic broker config" in r.getMessage()]
        assert len(warnings) == 1 and "fetch.max.bytes, num.partitions" in warnings[0], warnings

        admin = ck_admin(broker.bootstrap_servers)
        admin.create_topics([NewTopic("stale-np")])["stale-np"].result(30)  # broker default
        md = admin.list_topics(topic="stale-np", timeout=30)
        assert len(md.topics["stale-np"].partitions) == 2  # static, not the stored 7

        res = ConfigResource(ConfigResource.Type.BROKER, "1")
        entries = admin.describe_configs([res])[res].result(30)
        src = {k: int(getattr(entries[k].source, "value", entries[k].source))
               for k in ("num.partitions", "log.cleaner.delete.retention.ms")}
        assert (entries["num.partitions"].value, src["num.partitions"]) == (
            "2", ConfigSource.STATIC_BROKER_CONFIG.value)
        # A dynamic config stored beside them is still in force.
        assert (entries["log.cleaner.delete.retention.ms"].value,
                src["log.cleaner.delete.retention.ms"]) == (
            "4242", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

        # Deleting the stale values (what the docs tell operators to do) is accepted.
        async def delete():
            host, port = parse_bootstrap(broker.bootstrap_servers)
            async with KafkaConnection(host, port) as conn:
                return await conn.send(IncrementalAlterConfigsRequest(resources=[
                    AlterConfigsResource(resource_type=RESOURCE_BROKER, resource_name="",
                                         configs=[AlterableConfig(name=n, config_operation=1,
                                                                  value=None)
                                                  for n in ("num.partitions", "fetch.max.bytes")])],
                    validate_only=False))
        r = run_async(delete())
        assert [(x.error_code, x.error_message) for x in r.responses] == [(0, None)]
        assert broker.broker.controller.metadata.dynamic_configs[(RESOURCE_BROKER, "")] == {
            "log.cleaner.delete.retention.ms": "4242"}
