"""KIP-714 client metrics against the reference Kafka 4.0: GetTelemetrySubscriptions (71) and
PushTelemetry (72), the same requests to both brokers under the same CLIENT_METRICS
subscription, set on both with Kafka's own ``kafka-client-metrics.sh``; the answers compared
field by field (shape.py) and, where both brokers must agree exactly, by value (requested
metrics, push interval, accepted compression types, telemetry.max.bytes, and the subscription
id of a client instance id the client chose itself: Kafka's CRC32C formula).

Kafka serves (and advertises) the two APIs only with a ClientTelemetry receiver, so this
module starts its own reference broker with one: a MetricsReporter implementing
ClientTelemetry whose receiver drops what it gets, compiled here with ``javac`` and put on
the broker's CLASSPATH (skipped with the reason when javac is missing). snakka's receiver is
its Prometheus endpoint (``metrics.port``). Both brokers run with ``telemetry.max.bytes=1024``.

Covered: a new client instance (zero id) and a client-chosen one; a second get within the push
interval (THROTTLING_QUOTA_EXCEEDED); a push, a push too soon, a terminating push within the
interval (accepted), a push after a terminating one (INVALID_REQUEST, which clears the
terminating state, so a terminating push after it is taken); the zero instance id
on push (INVALID_REQUEST); an id the broker never handed out; a wrong subscription id
(UNKNOWN_SUBSCRIPTION_ID), an unknown compression type (UNSUPPORTED_COMPRESSION_TYPE), a
payload over telemetry.max.bytes (TELEMETRY_TOO_LARGE), a gzip-compressed push.

Values that legitimately differ and are excluded (shape.py compares them by class only): the
client instance id a broker generates and the subscription id derived from it.
"""

from __future__ import annotations

import asyncio
import gzip
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2
from reference_kafka import KAFKA_HOME, ReferenceKafka

from snakka.protocol.messages.get_telemetry_subscriptions_request import (
    GetTelemetrySubscriptionsRequest,
)
from snakka.protocol.messages.push_telemetry_request import PushTelemetryRequest
from snakka.testing.embedded import EmbeddedBroker

from .conftest import SNAKKA_CONFIG, _api_versions
from .differential import Peer, assert_same_shape, common_versions, run_both
from .test_java_tools import tool

pytestmark = pytest.mark.xdist_group("reference-kafka")  # a reference JVM of its own

RUN = uuid.uuid4().hex[:8]
CLIENT = f"telemetry-diff-{RUN}"
METRICS = "org.apache.kafka.producer."
INTERVAL_MS = 60000  # long: a second get or push in a scenario is always within it
MAX_BYTES = 1024
ZERO = uuid.UUID(int=0)
GET, PUSH = 71, 72

REPORTER_JAVA = """
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetry;
import org.apache.kafka.server.telemetry.ClientTelemetryReceiver;

/** A ClientTelemetry receiver that drops what it receives: it only enables KIP-714. */
public class DroppingTelemetryReporter implements MetricsReporter, ClientTelemetry {
    @Override public void configure(Map<String, ?> configs) { }
    @Override public void init(List<KafkaMetric> metrics) { }
    @Override public void metricChange(KafkaMetric metric) { }
    @Override public void metricRemoval(KafkaMetric metric) { }
    @Override public void close() { }
    @Override public ClientTelemetryReceiver clientReceiver() { return (context, payload) -> { }; }
}
"""


class TelemetryKafka(ReferenceKafka):
    """A reference broker with the receiver's classes on its CLASSPATH."""

    def __init__(self, classes: Path) -> None:
        self.classes = classes
        super().__init__({"metric.reporters": "DroppingTelemetryReporter",
                          "telemetry.max.bytes": str(MAX_BYTES)})

    def _env(self) -> dict[str, str]:
        env = super()._env()
        env["CLASSPATH"] = str(self.classes)
        return env


@pytest.fixture(scope="module")
def telemetry_brokers(kafka_distribution, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(reference Kafka with a ClientTelemetry receiver, snakka with its metrics endpoint)."""
    if shutil.which("javac") is None:
        pytest.skip("no `javac` on PATH (needed to build the reference broker's receiver)")
    build = tmp_path_factory.mktemp("telemetry-reporter")
    src = build / "DroppingTelemetryReporter.java"
    src.write_text(REPORTER_JAVA)
    classes = build / "classes"
    subprocess.run(["javac", "-d", str(classes), "-cp",
                    str(KAFKA_HOME / "libs" / "kafka-clients-4.0.0.jar"), str(src)],
                   check=True, timeout=120)
    kafka = TelemetryKafka(classes)
    try:
        kafka.start()
        with EmbeddedBroker(config={**SNAKKA_CONFIG, "metrics.port": "0",
                                    "telemetry.max.bytes": str(MAX_BYTES)},
                            host="127.0.0.1") as snakka:
            brokers = (kafka.bootstrap_servers, snakka.bootstrap_servers)
            subscribe(brokers)
            yield brokers
    finally:
        kafka.stop()


def subscribe(brokers: tuple[str, str]) -> None:
    """The same subscription on both, with kafka-client-metrics.sh; then wait until Kafka's
    broker applied it (its ClientMetricsManager learns it from the metadata log)."""
    for bs in brokers:
        out = tool("kafka-client-metrics.sh", "--bootstrap-server", bs, "--alter",
                   "--name", f"sub-{RUN}", "--metrics", METRICS, "--interval", str(INTERVAL_MS),
                   "--match", f"client_id={CLIENT}")
        assert f"Altered client metrics config for sub-{RUN}." in out, out

    async def applied(bs: str) -> None:
        peer = await Peer(bs, bs, {}, client_id=CLIENT).open()
        try:
            deadline = time.monotonic() + 60
            while True:  # a new instance each time (zero id): never throttled
                r = await peer.send(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO),
                                    version=0)
                if r.error_code == 0 and r.push_interval_ms == INTERVAL_MS:
                    return
                assert time.monotonic() < deadline, f"subscription never applied: {r!r}"
                await asyncio.sleep(0.2)
        finally:
            await peer.close()

    for bs in brokers:
        asyncio.run(applied(bs))


@pytest.fixture(scope="module")
def telemetry_versions(telemetry_brokers) -> dict[int, int]:
    vs = common_versions(asyncio.run(_api_versions(telemetry_brokers[0])),
                         asyncio.run(_api_versions(telemetry_brokers[1])))
    assert GET in vs and PUSH in vs, "both brokers advertise KIP-714's APIs"
    return vs


def payload() -> bytes:
    """A small OTLP MetricsData, as a client pushes it."""
    m = metrics_pb2.Metric(name="org.apache.kafka.producer.record.send.total")
    m.gauge.CopyFrom(metrics_pb2.Gauge(data_points=[metrics_pb2.NumberDataPoint(as_double=3)]))
    return metrics_pb2.MetricsData(resource_metrics=[metrics_pb2.ResourceMetrics(
        scope_metrics=[metrics_pb2.ScopeMetrics(metrics=[m])])]).SerializeToString()


def big_payload() -> bytes:
    """An OTLP MetricsData over MAX_BYTES."""
    ms = [metrics_pb2.Metric(name=f"org.apache.kafka.producer.m{i:04d}.{'x' * 40}")
          for i in range(40)]
    for m in ms:
        m.gauge.CopyFrom(metrics_pb2.Gauge(data_points=[metrics_pb2.NumberDataPoint(as_int=1)]))
    data = metrics_pb2.MetricsData(resource_metrics=[metrics_pb2.ResourceMetrics(
        scope_metrics=[metrics_pb2.ScopeMetrics(metrics=ms)])]).SerializeToString()
    assert len(data) > MAX_BYTES
    return data


def push(instance: uuid.UUID, subscription: int, *, terminating: bool = False,
         compression: int = 0, metrics: bytes | None = None) -> PushTelemetryRequest:
    return PushTelemetryRequest(client_instance_id=instance, subscription_id=subscription,
                                terminating=terminating, compression_type=compression,
                                metrics=payload() if metrics is None else metrics)


def test_get_telemetry_subscriptions(telemetry_brokers, telemetry_versions):
    chosen = uuid.uuid4()  # a client-chosen instance id: both brokers must take it as is

    async def scenario(p: Peer):
        first = await p.ask("new_instance", GetTelemetrySubscriptionsRequest(
            client_instance_id=ZERO), version=0)
        await p.ask("again_within_interval", GetTelemetrySubscriptionsRequest(
            client_instance_id=first.client_instance_id), version=0)
        await p.ask("chosen_instance", GetTelemetrySubscriptionsRequest(
            client_instance_id=chosen), version=0)

    kafka, snakka = run_both(telemetry_brokers, telemetry_versions, scenario, client_id=CLIENT)
    # The generated id and the subscription id derived from it differ by nature.
    for peer in (kafka, snakka):
        r = peer.responses["new_instance"]
        assert r.client_instance_id != ZERO, peer.name
        r.subscription_id = 1 if r.subscription_id else 0
    assert_same_shape(kafka, snakka)

    def values(r) -> tuple:
        return (r.error_code, r.client_instance_id, r.subscription_id,
                sorted(r.accepted_compression_types), r.push_interval_ms, r.telemetry_max_bytes,
                r.delta_temporality, sorted(r.requested_metrics))

    k, s = kafka.responses["chosen_instance"], snakka.responses["chosen_instance"]
    assert values(k) == values(s)
    assert (k.error_code, k.client_instance_id, k.push_interval_ms, k.telemetry_max_bytes,
            k.requested_metrics) == (0, chosen, INTERVAL_MS, MAX_BYTES, [METRICS])
    assert k.accepted_compression_types == s.accepted_compression_types  # order: preference
    for peer in (kafka, snakka):
        assert peer.responses["again_within_interval"].error_code == 89, peer.name  # THROTTLING


def test_push_telemetry(telemetry_brokers, telemetry_versions):
    async def scenario(p: Peer):
        async def instance() -> tuple[uuid.UUID, int]:
            """A new client instance (not compared: its ids differ by nature)."""
            r = await p.send(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO),
                             version=0)
            assert r.error_code == 0, (p.name, r)
            return r.client_instance_id, r.subscription_id

        ok, ok_sub = await instance()
        await p.ask("push", push(ok, ok_sub), version=0)
        await p.ask("push_too_soon", push(ok, ok_sub), version=0)
        await p.ask("push_terminating_within_interval", push(ok, ok_sub, terminating=True),
                    version=0)
        await p.ask("push_after_terminating", push(ok, ok_sub), version=0)
        # Kafka sets the instance's terminating flag from every push, refused ones too (in a
        # `finally`): the refused non-terminating push above cleared it, so this one is taken.
        await p.ask("push_terminating_again", push(ok, ok_sub, terminating=True), version=0)

        gz, gz_sub = await instance()
        await p.ask("push_gzip", push(gz, gz_sub, compression=1,
                                      metrics=gzip.compress(payload())), version=0)
        await p.ask("push_empty", push(*(await instance()), metrics=b""), version=0)
        await p.ask("push_zero_instance", push(ZERO, ok_sub), version=0)
        await p.ask("push_never_handed_out", push(uuid.uuid4(), ok_sub), version=0)
        wrong, wrong_sub = await instance()
        await p.ask("push_wrong_subscription", push(wrong, wrong_sub ^ 1), version=0)
        comp, comp_sub = await instance()
        await p.ask("push_unknown_compression", push(comp, comp_sub, compression=9), version=0)
        big, big_sub = await instance()
        await p.ask("push_too_large", push(big, big_sub, metrics=big_payload()), version=0)

    kafka, snakka = run_both(telemetry_brokers, telemetry_versions, scenario, client_id=CLIENT)
    assert_same_shape(kafka, snakka)
    codes = {label: r.error_code for label, r in kafka.responses.items()}
    # Kafka's answers, spelled out (shape equality carries them over to snakka)
    assert codes == {
        "push": 0, "push_too_soon": 89, "push_terminating_within_interval": 0,
        "push_after_terminating": 42, "push_terminating_again": 0, "push_gzip": 0,
        "push_empty": 0, "push_zero_instance": 42, "push_never_handed_out": 117,
        "push_wrong_subscription": 117, "push_unknown_compression": 76, "push_too_large": 118,
    }, codes


def test_subscription_change_reevaluates_client_instances(telemetry_brokers, telemetry_versions):
    """A changed subscription applies to a known instance at once: its next get is answered
    (not throttled, though within the interval) with the new metrics and subscription id; a
    push with the old id is UNKNOWN_SUBSCRIPTION_ID. A deleted subscription leaves the client
    with no metrics and Kafka's default interval (5 minutes)."""
    client = f"telemetry-change-{RUN}"
    name = f"change-{RUN}"
    chosen = uuid.uuid4()

    def client_metrics(*args: str) -> None:
        for bs in telemetry_brokers:
            tool("kafka-client-metrics.sh", "--bootstrap-server", bs, *args)

    async def until(p: Peer, ready) -> None:
        deadline = time.monotonic() + 60
        while True:  # a new instance (zero id) each time: never throttled
            r = await p.send(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO), 0)
            if r.error_code == 0 and ready(r):
                return
            assert time.monotonic() < deadline, f"{p.name}: subscription not applied: {r!r}"
            await asyncio.sleep(0.2)

    def alter(metrics: str) -> None:
        client_metrics("--alter", "--name", name, "--metrics", metrics,
                       "--interval", str(INTERVAL_MS), "--match", f"client_id={client}")

    alter(METRICS)
    first: dict[str, int] = {}

    async def before(p: Peer):
        await until(p, lambda r: r.requested_metrics == [METRICS])
        r = await p.ask("get", GetTelemetrySubscriptionsRequest(client_instance_id=chosen), 0)
        first[p.name] = r.subscription_id
        await p.ask("push", push(chosen, r.subscription_id), 0)

    kafka1, snakka1 = run_both(telemetry_brokers, telemetry_versions, before, client_id=client)
    assert first["kafka"] == first["snakka"]  # the same formula over the same inputs
    assert_same_shape(kafka1, snakka1)

    consumer = "org.apache.kafka.consumer."
    alter(consumer)

    async def changed(p: Peer):
        await until(p, lambda r: r.requested_metrics == [consumer])
        r = await p.ask("get_after_change", GetTelemetrySubscriptionsRequest(
            client_instance_id=chosen), 0)
        await p.ask("push_old_subscription", push(chosen, first[p.name]), 0)
        # The refused push above counted as this interval's push (Kafka updates the push time
        # before it checks the subscription id).
        await p.ask("push_new_subscription", push(chosen, r.subscription_id), 0)

    kafka2, snakka2 = run_both(telemetry_brokers, telemetry_versions, changed, client_id=client)
    assert_same_shape(kafka2, snakka2)
    k, s = kafka2.responses["get_after_change"], snakka2.responses["get_after_change"]
    assert (k.error_code, k.requested_metrics, k.client_instance_id) == (0, [consumer], chosen)
    assert k.subscription_id == s.subscription_id != first["kafka"]
    codes = {label: r.error_code for label, r in kafka2.responses.items()}
    assert codes == {"get_after_change": 0, "push_old_subscription": 117,
                     "push_new_subscription": 89}, codes

    client_metrics("--delete", "--name", name)

    async def deleted(p: Peer):
        await until(p, lambda r: r.requested_metrics == [])
        await p.ask("get_after_delete", GetTelemetrySubscriptionsRequest(
            client_instance_id=chosen), 0)

    kafka3, snakka3 = run_both(telemetry_brokers, telemetry_versions, deleted, client_id=client)
    assert_same_shape(kafka3, snakka3)
    k, s = kafka3.responses["get_after_delete"], snakka3.responses["get_after_delete"]
    assert (k.error_code, k.requested_metrics, k.push_interval_ms) == (0, [], 300000)
    assert (s.error_code, s.requested_metrics, s.push_interval_ms, s.subscription_id) == \
        (0, [], 300000, k.subscription_id)


def test_several_metrics_order_and_subscription_id(telemetry_brokers, telemetry_versions):
    """Several metric prefixes: Kafka renders them in java.util.HashSet order, both in
    RequestedMetrics and in the text its subscription id hashes; snakka's must be the same
    for a client-chosen instance id."""
    client = f"telemetry-many-{RUN}"
    metrics = ["org.apache.kafka.consumer.", "org.apache.kafka.consumer.coordinator.",
               "org.apache.kafka.producer.", "org.apache.kafka.producer.node."]
    for bs in telemetry_brokers:
        tool("kafka-client-metrics.sh", "--bootstrap-server", bs, "--alter",
             "--name", f"many-{RUN}", "--metrics", ",".join(metrics),
             "--interval", str(INTERVAL_MS), "--match", f"client_id={client}")
    chosen = uuid.uuid4()

    async def scenario(p: Peer):
        deadline = time.monotonic() + 60
        while True:  # until the broker applied it (a new instance each time)
            r = await p.send(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO), 0)
            if sorted(r.requested_metrics) == metrics:
                break
            assert time.monotonic() < deadline, f"{p.name}: subscription not applied: {r!r}"
            await asyncio.sleep(0.2)
        await p.ask("get", GetTelemetrySubscriptionsRequest(client_instance_id=chosen), 0)

    kafka, snakka = run_both(telemetry_brokers, telemetry_versions, scenario, client_id=client)
    assert_same_shape(kafka, snakka)
    k, s = kafka.responses["get"], snakka.responses["get"]
    assert k.requested_metrics != metrics  # HashSet order, not sorted: the case this is about
    assert (s.requested_metrics, s.subscription_id) == (k.requested_metrics, k.subscription_id)
