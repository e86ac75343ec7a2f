"""KIP-714 client metrics against a real broker: subscriptions as CLIENT_METRICS config
resources, GetTelemetrySubscriptions / PushTelemetry with Kafka's error codes at the protocol
level, and real clients (confluent-kafka / librdkafka) pushing metrics that then appear on the
Prometheus endpoint labelled with their client instance id and client id.

Subscriptions persist in the metadata log (a restart keeps them). Without the metrics endpoint
the broker has no receiver and neither API is advertised (as Kafka without a ClientTelemetry
reporter).
"""

from __future__ import annotations

import asyncio
import gzip
import uuid

import pytest
from integration.helpers import scrape, wait_until  # tests/ is on sys.path
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from snakka.protocol.messages.get_telemetry_subscriptions_request import (
    GetTelemetrySubscriptionsRequest,
)
from snakka.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from snakka.protocol.messages.list_config_resources_request import ListConfigResourcesRequest
from snakka.protocol.messages.push_telemetry_request import PushTelemetryRequest
from snakka.protocol.primitives import uuid_to_base64
from snakka.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(120)

CLIENT_METRICS = 16
SET, DELETE, APPEND = 0, 1, 2
ZERO = uuid.UUID(int=0)


def series(samples, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(lv), v) for (n, lv), v in samples.items()
            if n == name and set(labels.items()) <= set(lv)]


def run(coro):
    return asyncio.run(coro)


async def connect(bs: str, client_id: str = "telemetry-test") -> KafkaConnection:
    host, port = parse_bootstrap(bs)
    return await KafkaConnection(host, port, client_id=client_id).connect()


async def alter(conn: KafkaConnection, name: str, *ops: tuple[str, str | None, int],
                validate_only: bool = False):
    r = await conn.send(IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
        resource_type=CLIENT_METRICS, resource_name=name,
        configs=[AlterableConfig(name=k, config_operation=op, value=v) for k, v, op in ops])],
        validate_only=validate_only))
    return r.responses[0]


async def describe(conn: KafkaConnection, name: str) -> dict[str, str]:
    r = await conn.send(DescribeConfigsRequest(resources=[DescribeConfigsResource(
        resource_type=CLIENT_METRICS, resource_name=name, configuration_keys=None)]))
    res = r.results[0]
    assert res.error_code == 0, res
    assert all(c.config_source == 7 for c in res.configs)  # CLIENT_METRICS_CONFIG
    return {c.name: c.value for c in res.configs}


async def listed(conn: KafkaConnection, version: int) -> list[str]:
    r = await conn.send(ListConfigResourcesRequest(resource_types=[CLIENT_METRICS]), version)
    assert r.error_code == 0
    return sorted(c.resource_name for c in r.config_resources)


def otlp(name: str, value: float, *, monotonic_delta: bool = False, **attrs: str) -> bytes:
    """A MetricsData with one metric of one data point, as a client would build it."""
    dp = metrics_pb2.NumberDataPoint(as_double=value, attributes=[
        KeyValue(key=k.replace("_", "."), value=AnyValue(string_value=v))
        for k, v in attrs.items()])
    m = metrics_pb2.Metric(name=name)
    if monotonic_delta:
        m.sum.CopyFrom(metrics_pb2.Sum(
            data_points=[dp], is_monotonic=True,
            aggregation_temporality=metrics_pb2.AGGREGATION_TEMPORALITY_DELTA))
    else:
        m.gauge.CopyFrom(metrics_pb2.Gauge(data_points=[dp]))
    data = metrics_pb2.MetricsData(resource_metrics=[metrics_pb2.ResourceMetrics(
        scope_metrics=[metrics_pb2.ScopeMetrics(metrics=[m])])])
    return data.SerializeToString()


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(str(tmp_path / "data"), config={
            "metrics.port": "0", "telemetry.max.bytes": "4096"}) as b:
        yield b


def test_subscriptions_are_config_resources_that_persist(tmp_path):
    data = str(tmp_path / "data")
    with EmbeddedBroker(data, config={"metrics.port": "0"}) as b:
        async def go():
            conn = await connect(b.bootstrap_servers)
            try:
                r = await alter(conn, "sub1", ("metrics", "org.apache.kafka.producer.", SET),
                                ("interval.ms", "1000", SET),
                                ("match", "client_id=app-.*", SET))
                assert r.error_code == 0, r
                r = await alter(conn, "sub1", ("metrics", "org.apache.kafka.consumer.", APPEND))
                assert r.error_code == 0, r
                assert await describe(conn, "sub1") == {
                    "metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer.",
                    "interval.ms": "1000", "match": "client_id=app-.*"}
                assert await alter(conn, "sub2", ("metrics", "*", SET)) is not None
                assert await listed(conn, 0) == ["sub1", "sub2"]  # ListClientMetricsResources
                assert await listed(conn, 1) == ["sub1", "sub2"]
                # Kafka's validation: words and codes
                cases = [
                    ((("bogus", "1", SET),), ErrorCode.INVALID_REQUEST,
                     "Unknown client metrics configuration: bogus"),
                    ((("interval.ms", "50", SET),), ErrorCode.INVALID_REQUEST,
                     "Invalid value 50 for interval.ms, interval must be between 100 and "
                     "3600000 (1 hour)"),
                    ((("interval.ms", "soon", SET),), ErrorCode.INVALID_CONFIG, None),
                    ((("match", "nope=x", SET),), ErrorCode.INVALID_CONFIG,
                     "Illegal client matching pattern: nope=x"),
                    ((("match", "client_id=(", SET),), ErrorCode.INVALID_CONFIG,
                     "Illegal client matching pattern: client_id=("),
                ]
                for ops, code, message in cases:
                    r = await alter(conn, "bad", *ops)
                    assert r.error_code == code, (ops, r)
                    if message is not None:
                        assert r.error_message == message
                r = await alter(conn, "", ("metrics", "*", SET))
                assert r.error_code == ErrorCode.INVALID_REQUEST
                assert "bad" not in await listed(conn, 1)
                # validate_only changes nothing
                r = await alter(conn, "dry", ("metrics", "*", SET), validate_only=True)
                assert r.error_code == 0 and "dry" not in await listed(conn, 1)
                # deleting every config deletes the subscription
                r = await alter(conn, "sub2", ("metrics", None, DELETE))
                assert r.error_code == 0 and await listed(conn, 1) == ["sub1"]
            finally:
                await conn.close()
        run(go())
    with EmbeddedBroker(data, config={"metrics.port": "0"}) as b:
        async def after_restart():
            conn = await connect(b.bootstrap_servers, client_id="app-1")
            try:
                assert await listed(conn, 1) == ["sub1"]
                g = await conn.send(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO))
                assert g.error_code == 0
                assert g.push_interval_ms == 1000
                assert sorted(g.requested_metrics) == ["org.apache.kafka.consumer.",
                                                       "org.apache.kafka.producer."]
            finally:
                await conn.close()
        run(after_restart())


def test_get_and_push_error_paths(broker):
    bs, url = broker.bootstrap_servers, broker.metrics_url

    async def go():
        admin = await connect(bs, client_id="admin")
        conn = await connect(bs, client_id="proto-client")
        try:
            # No subscription yet: nothing requested, Kafka's defaults.
            g = await conn.send(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO))
            assert g.error_code == 0 and g.client_instance_id != ZERO
            assert g.requested_metrics == [] and g.push_interval_ms == 300000
            assert g.accepted_compression_types == [4, 3, 1, 2]  # zstd, lz4, gzip, snappy
            assert g.telemetry_max_bytes == 4096 and g.delta_temporality is True
            # Asked again within the interval: throttled.
            again = await conn.send(GetTelemetrySubscriptionsRequest(
                client_instance_id=g.client_instance_id))
            assert again.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED

            # A subscription that matches this client only: a changed subscription is
            # answered at once (no throttle), with a new subscription id.
            r = await alter(admin, "mine", ("metrics", "test.", SET), ("interval.ms", "100", SET),
                            ("match", "client_id=proto-.*,client_software_name=.*", SET))
            assert r.error_code == 0
            g2 = await conn.send(GetTelemetrySubscriptionsRequest(
                client_instance_id=g.client_instance_id))
            assert g2.error_code == 0, g2
            assert g2.requested_metrics == ["test."] and g2.push_interval_ms == 100
            assert g2.subscription_id != g.subscription_id
            other = await admin.send(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO))
            assert other.requested_metrics == []  # client_id "admin" does not match
            iid = g2.client_instance_id

            def push(**kw):
                fields = {"client_instance_id": iid, "subscription_id": g2.subscription_id,
                          "terminating": False, "compression_type": 0, "metrics": b""}
                fields.update(kw)
                return conn.send(PushTelemetryRequest(**fields))

            p = await push(subscription_id=g2.subscription_id + 1)
            assert p.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
            # (that push was in time: the next one within 100 ms is throttled, unless
            # terminating; the subscription id was wrong, so ask again)
            p = await push(compression_type=1, metrics=gzip.compress(
                otlp("test.queue.size", 7.0, topic="t1")))
            assert p.error_code in (ErrorCode.NONE, ErrorCode.THROTTLING_QUOTA_EXCEEDED)

            zero = await conn.send(PushTelemetryRequest(client_instance_id=ZERO,
                                                        subscription_id=1, metrics=b""))
            assert zero.error_code == ErrorCode.INVALID_REQUEST

            async def fresh():
                """A new instance (first push after a get is always in time)."""
                c = await connect(bs, client_id="proto-fresh")
                got = await c.send(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO))
                assert got.error_code == 0 and got.requested_metrics == ["test."]
                return c, got

            c, got = await fresh()
            p = await c.send(PushTelemetryRequest(
                client_instance_id=got.client_instance_id, subscription_id=got.subscription_id,
                compression_type=7, metrics=b"x"))
            assert p.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
            await c.close()
            c, got = await fresh()
            p = await c.send(PushTelemetryRequest(
                client_instance_id=got.client_instance_id, subscription_id=got.subscription_id,
                compression_type=0, metrics=b"\x00" * 4097))
            assert p.error_code == ErrorCode.TELEMETRY_TOO_LARGE
            await c.close()
            c, got = await fresh()
            p = await c.send(PushTelemetryRequest(
                client_instance_id=got.client_instance_id, subscription_id=got.subscription_id,
                compression_type=1, metrics=b"not gzip at all"))
            assert p.error_code == ErrorCode.INVALID_RECORD
            await c.close()
            c, got = await fresh()
            p = await c.send(PushTelemetryRequest(
                client_instance_id=got.client_instance_id, subscription_id=got.subscription_id,
                compression_type=0, metrics=b"\xff\xff\xff garbage protobuf"))
            assert p.error_code == ErrorCode.INVALID_RECORD
            await c.close()

            # A good push, then a terminating one within the interval (accepted), then
            # nothing more is accepted from that instance.
            c, got = await fresh()
            ok = await c.send(PushTelemetryRequest(
                client_instance_id=got.client_instance_id, subscription_id=got.subscription_id,
                compression_type=1, metrics=gzip.compress(
                    otlp("test.records.sent", 5.0, monotonic_delta=True, topic="t1"))))
            assert ok.error_code == 0
            early = await c.send(PushTelemetryRequest(
                client_instance_id=got.client_instance_id, subscription_id=got.subscription_id,
                compression_type=0, metrics=otlp("test.records.sent", 3.0,
                                                 monotonic_delta=True, topic="t1")))
            assert early.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
            last = await c.send(PushTelemetryRequest(
                client_instance_id=got.client_instance_id, subscription_id=got.subscription_id,
                terminating=True, compression_type=0,
                metrics=otlp("test.records.sent", 3.0, monotonic_delta=True, topic="t1")))
            assert last.error_code == 0
            after = await c.send(PushTelemetryRequest(
                client_instance_id=got.client_instance_id, subscription_id=got.subscription_id,
                terminating=True, compression_type=0, metrics=b""))
            assert after.error_code == ErrorCode.INVALID_REQUEST
            await c.close()
            return uuid_to_base64(got.client_instance_id)
        finally:
            await conn.close()
            await admin.close()

    instance = run(go())
    s = scrape(url)
    # Deltas add up: 5 + 3 (the throttled push's points were not kept).
    got = series(s, "snakka_client_test_records_sent_total", client_instance_id=instance)
    assert got == [({"client_instance_id": instance, "client_id": "proto-fresh",
                     "topic": "t1"}, 8.0)], got
    assert s[("kafka_server_client_metrics_plugin_error_total", ())] == 2
    assert s[("kafka_server_client_metrics_unknown_subscription_request_total", ())] == 1
    assert s[("kafka_server_client_metrics_throttle_total", ())] >= 2


def test_confluent_kafka_pushes_its_metrics(broker):
    """librdkafka (enable.metrics.push defaults to true) fetches the subscription and pushes
    its metrics; they appear on /metrics under its client id and instance id."""
    from confluent_kafka import Producer

    bs, url = broker.bootstrap_servers, broker.metrics_url

    async def subscribe():
        conn = await connect(bs)
        try:
            r = await alter(conn, "rdkafka", ("metrics", "*", SET), ("interval.ms", "200", SET),
                            ("match", "client_software_name=confluent-kafka-python.*|"
                             "librdkafka", SET))
            assert r.error_code == 0, r
        finally:
            await conn.close()
    run(subscribe())

    p = Producer({"bootstrap.servers": bs, "client.id": "ck-telemetry", "linger.ms": 0})
    try:
        for _ in range(20):
            p.produce("telemetry-topic", b"v" * 100)
        assert p.flush(30) == 0

        def pushed():
            p.poll(0.05)
            s = scrape(url)
            mine = {n: (dict(lv), v) for (n, lv), v in s.items()
                    if n.startswith("snakka_client_") and ("client_id", "ck-telemetry") in lv}
            return mine or None

        mine = wait_until(pushed, 60, "librdkafka's pushed metrics on /metrics")
    finally:
        p.flush(5)
    # librdkafka's KIP-714 producer metrics, under its client id and one instance id.
    assert any(n.startswith("snakka_client_org_apache_kafka_producer_") for n in mine), mine
    instances = {lv["client_instance_id"] for lv, _v in mine.values()}
    assert len(instances) == 1 and "" not in instances
    s = scrape(url)
    assert s[("kafka_server_client_metrics_plugin_export_total", ())] >= 1
    assert s[("snakka_client_metrics_series", ())] >= len(mine)


def test_no_receiver_no_telemetry_apis(tmp_path):
    """Without the metrics endpoint the APIs are not advertised (Kafka without a
    ClientTelemetry receiver)."""
    with EmbeddedBroker(str(tmp_path / "d")) as b:
        async def go():
            conn = await connect(b.bootstrap_servers)
            try:
                return dict(conn.versions)
            finally:
                await conn.close()
        versions = run(go())
    assert 71 not in versions and 72 not in versions
    assert 74 in versions  # subscriptions can still be managed
