"""The KIP-714 cores without a broker (telemetry/): subscription validation and matching, the
ClientMetricsManager's decisions on an injected clock, the subscription id, OTLP decoding and
the bounded store."""

from __future__ import annotations

import gzip
import uuid

import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.telemetry.manager import ClientMetricsManager, subscription_id
from snakka.telemetry.otlp import Kind, PayloadError, Point, decode_payload, prometheus_name
from snakka.telemetry.store import ClientMetricsStore
from snakka.telemetry.subscriptions import ClientAttributes, validate_subscription
from snakka.util.java import java_hash_set_order


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def attrs(client_id: str = "app", software: str = "apache-kafka-java") -> ClientAttributes:
    return ClientAttributes("", client_id, software, "4.0.0", "127.0.0.1", "5555")


def test_validation_words_and_codes():
    validate_subscription("s", {"metrics": "a.,b.", "interval.ms": "100",
                                "match": "client_id=x.*,client_source_port=5.*"})
    validate_subscription("s", {})  # deleting every config
    for cfg, code in (({"foo": "1"}, ErrorCode.INVALID_REQUEST),
                      ({"interval.ms": "3600001"}, ErrorCode.INVALID_REQUEST),
                      ({"interval.ms": "x"}, ErrorCode.INVALID_CONFIG),
                      ({"match": "client_id"}, ErrorCode.INVALID_CONFIG),
                      ({"match": "client_id=a=b"}, ErrorCode.INVALID_CONFIG),
                      ({"match": "client_id=["}, ErrorCode.INVALID_CONFIG)):
        with pytest.raises(KafkaError) as e:
            validate_subscription("s", cfg)
        assert e.value.code == code, cfg
    with pytest.raises(KafkaError):
        validate_subscription("", {"metrics": "*"})


def test_subscription_id_is_kafkas_crc_xor_uuid_hash():
    u = uuid.UUID(int=(5 << 64) | 7)
    # Java: Crc32C("[a, b]100") ^ Uuid(5, 7).hashCode(); hashCode = (int)(h >> 32) ^ (int) h
    # with h = 5 ^ 7 = 2
    from crc32c import crc32c
    expected = (crc32c(b"[a, b]100") ^ 2) & 0xFFFFFFFF
    expected -= (1 << 32) if expected >= 1 << 31 else 0
    assert subscription_id(frozenset({"b", "a"}), 100, u) == expected


@pytest.mark.parametrize("added,java", [
    # what java.util.HashSet's toString printed (Java 17) for `new HashSet<>()` + addAll(added)
    (["org.apache.kafka.consumer.", "org.apache.kafka.consumer.coordinator.",
      "org.apache.kafka.producer.", "org.apache.kafka.producer.node."],
     ["org.apache.kafka.producer.", "org.apache.kafka.consumer.coordinator.",
      "org.apache.kafka.consumer.", "org.apache.kafka.producer.node."]),
    (["b", "a"], ["a", "b"]),
    (["Aa", "BB", "x"], ["Aa", "BB", "x"]),  # "Aa" and "BB" share a hash: insertion order
    (["BB", "Aa", "x"], ["BB", "Aa", "x"]),
    ([f"m{i}" for i in range(14)],  # past 12 entries the table doubles to 32 buckets
     ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m11", "m10", "m13", "m12"]),
    (["\u00e9t\u00e9.", "\U0001F600.metric", "org.apache.kafka."],  # UTF-16 code units
     ["org.apache.kafka.", "\u00e9t\u00e9.", "\U0001F600.metric"]),
    (["a", "b", "a"], ["a", "b"]),
])
def test_java_hash_set_order(added, java):
    assert list(java_hash_set_order(added)) == java


def test_subscription_order_is_kafkas():
    """RequestedMetrics and the subscription id follow Kafka's HashSet order, not sorted."""
    clock = Clock()
    m = ClientMetricsManager(telemetry_max_bytes=1000, clock_ms=clock)
    m.set_subscriptions({"s": {"metrics": "org.apache.kafka.consumer.,org.apache.kafka.producer."}})
    u = uuid.UUID(int=(5 << 64) | 7)
    inst = m.get_subscriptions(u, attrs(), "conn").instance
    assert inst is not None
    assert inst.requested == ("org.apache.kafka.producer.", "org.apache.kafka.consumer.")
    from crc32c import crc32c
    expected = (crc32c(b"[org.apache.kafka.producer., org.apache.kafka.consumer.]300000") ^ 2)
    expected -= (1 << 32) if expected >= 1 << 31 else 0
    assert inst.subscription_id == expected


def test_matching_union_and_smallest_interval():
    clock = Clock()
    m = ClientMetricsManager(telemetry_max_bytes=1000, clock_ms=clock)
    m.set_subscriptions({
        "a": {"metrics": "x.", "interval.ms": "1000", "match": "client_id=app"},
        "b": {"metrics": "y.", "interval.ms": "500", "match": "client_software_name=apache.*"},
        "c": {"metrics": "*", "match": "client_id=other"}})
    g = m.get_subscriptions(None, attrs(), "conn")
    assert g.error_code == 0 and g.instance is not None
    assert g.instance.metrics == {"x.", "y."} and g.instance.interval_ms == 500
    g2 = m.get_subscriptions(None, attrs("other", "librdkafka"), "conn2")
    assert g2.instance is not None and g2.instance.metrics == {"*"}
    g3 = m.get_subscriptions(None, attrs("nobody", "librdkafka"), "conn3")
    assert g3.instance is not None and g3.instance.metrics == frozenset()
    assert g3.instance.interval_ms == 300_000


def test_get_and_push_timing_and_errors():
    clock = Clock()
    clock.now = 10_000
    m = ClientMetricsManager(telemetry_max_bytes=100, clock_ms=clock)
    m.set_subscriptions({"s": {"metrics": "*", "interval.ms": "1000"}})
    g = m.get_subscriptions(None, attrs(), "c")
    inst = g.instance
    assert inst is not None
    iid, sid = inst.instance_id, inst.subscription_id
    assert m.get_subscriptions(iid, attrs(), "c").error_code == \
        ErrorCode.THROTTLING_QUOTA_EXCEEDED

    def push(**kw):
        fields = {"subscription_id": sid, "terminating": False, "compression_type": 0,
                  "metrics_size": 10}
        fields.update(kw)
        return m.push(iid, attrs(), "c", **fields).error_code

    clock.now += 10  # the first push after a get is in time whatever the interval
    assert push() == ErrorCode.NONE
    clock.now += 999
    assert push() == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.now += 1
    assert push(subscription_id=sid + 1) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    clock.now += 1000
    assert push(compression_type=5) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    clock.now += 1000
    assert push(metrics_size=101) == ErrorCode.TELEMETRY_TOO_LARGE
    clock.now += 1000
    assert push() == ErrorCode.NONE
    assert push(terminating=True) == ErrorCode.NONE  # within the interval: accepted
    assert push(terminating=True) == ErrorCode.INVALID_REQUEST
    assert m.push(uuid.UUID(int=0), attrs(), "c", subscription_id=0, terminating=False,
                  compression_type=0, metrics_size=0).error_code == ErrorCode.INVALID_REQUEST
    assert m.stats.throttled == 2 and m.stats.unknown_subscription == 1


def test_changed_subscription_reevaluates_and_disconnect_forgets():
    clock = Clock()
    m = ClientMetricsManager(telemetry_max_bytes=100, clock_ms=clock)
    g = m.get_subscriptions(None, attrs(), "c")
    assert g.instance is not None
    iid = g.instance.instance_id
    m.set_subscriptions({"s": {"metrics": "a."}})
    g2 = m.get_subscriptions(iid, attrs(), "c")  # changed: answered at once
    assert g2.error_code == 0 and g2.instance is not None
    assert g2.instance.metrics == {"a."}
    assert g2.instance.subscription_id != g.instance.subscription_id
    m.set_subscriptions({"s": {"metrics": "a."}})  # the same: no new version
    assert m.get_subscriptions(iid, attrs(), "c").error_code == \
        ErrorCode.THROTTLING_QUOTA_EXCEEDED
    m.connection_closed("c")
    assert iid not in m.instances


def test_instances_expire_and_are_bounded():
    clock = Clock()
    m = ClientMetricsManager(telemetry_max_bytes=100, clock_ms=clock, max_instances=3)
    for i in range(5):
        m.get_subscriptions(None, attrs(f"c{i}"), f"conn{i}")
    assert len(m.instances) == 3
    clock.now += 300_000 * 3  # 3 x the default interval
    m.expire(clock.now)
    assert not m.instances


def _metric(kind: str) -> metrics_pb2.MetricsData:
    m = metrics_pb2.Metric(name="org.apache.kafka.x")
    dp = metrics_pb2.NumberDataPoint(as_int=3)
    if kind == "gauge":
        m.gauge.CopyFrom(metrics_pb2.Gauge(data_points=[dp]))
    else:
        m.histogram.CopyFrom(metrics_pb2.Histogram(
            data_points=[metrics_pb2.HistogramDataPoint(count=4, sum=10.0)],
            aggregation_temporality=metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE))
    return metrics_pb2.MetricsData(resource_metrics=[metrics_pb2.ResourceMetrics(
        scope_metrics=[metrics_pb2.ScopeMetrics(metrics=[m])])])


def test_decode_payload_shapes_and_errors():
    raw = _metric("gauge").SerializeToString()
    assert decode_payload(1, gzip.compress(raw)) == [
        Point("org_apache_kafka_x", Kind.GAUGE, False, (), 3.0)]
    hist = decode_payload(0, _metric("histogram").SerializeToString())
    assert [(p.name, p.value) for p in hist] == [("org_apache_kafka_x_count", 4.0),
                                                  ("org_apache_kafka_x_sum", 10.0)]
    with pytest.raises(PayloadError):
        decode_payload(4, b"not zstd")
    with pytest.raises(PayloadError):
        decode_payload(0, b"\xff\xff\xff\xff")
    assert prometheus_name("1a.b-c") == "_1a_b_c"


def test_store_deltas_retention_and_series_cap():
    clock = Clock()
    store = ClientMetricsStore(retention_ms=1000, max_series=2, clock_ms=clock)
    store.record("i1", "app", [Point("c", Kind.COUNTER, True, (), 2.0),
                               Point("g", Kind.GAUGE, False, (("t", "x"),), 1.0)])
    store.record("i1", "app", [Point("c", Kind.COUNTER, True, (), 3.0),
                               Point("g", Kind.GAUGE, False, (("t", "x"),), 7.0),
                               Point("g", Kind.GAUGE, False, (("t", "y"),), 1.0)])
    rows = {(n, lv): v for n, _k, lv, v in store.samples()}
    assert rows[("c", (("client_id", "app"), ("client_instance_id", "i1")))] == 5.0
    assert rows[("g", (("client_id", "app"), ("client_instance_id", "i1"), ("t", "x")))] == 7.0
    assert store.series == 2 and store.dropped_series == 1
    store.record("i2", "app", [Point("c", Kind.GAUGE, False, (), 1.0)])  # kind clash
    assert store.dropped_points == 1
    clock.now += 1000
    assert list(store.samples()) == [] and store.series == 0
