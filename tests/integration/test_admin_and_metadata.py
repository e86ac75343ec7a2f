"""Topic administration, configs, offsets and metadata through the real admin clients.

kafka-python's KafkaAdminClient and confluent-kafka's AdminClient: create (with -1 defaults,
validate_only, and the errors a Kafka broker gives), DescribeConfigs with real entries and
sources, incremental and legacy AlterConfigs (and that they take effect: a lowered
max.message.bytes rejects a bigger batch with MESSAGE_TOO_LARGE), CreatePartitions,
DeleteRecords, DeleteTopics, DescribeCluster, ListOffsets (earliest / latest / by timestamp /
max timestamp), auto-creation through Metadata, and kcat -L over IPv4 and IPv6.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from .helpers import (
    KCAT,
    ck_admin,
    ck_consume,
    ck_consumer_config,
    ck_create_topic,
    ck_end_offsets,
    host_port,
    run,
    run_async,
    wait_until,
)

# Kafka error codes
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40


@pytest.fixture
def broker(snakka_broker_factory):
    return snakka_broker_factory(config={"num.partitions": "4", "message.max.bytes": "2000000"})


@pytest.fixture
def kp_admin(broker):
    from kafka import KafkaAdminClient

    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    yield a
    a.close()


@pytest.fixture
def ck(broker):
    """A confluent-kafka AdminClient; it must outlive the futures it hands out."""
    return ck_admin(broker.bootstrap_servers)


def _ck_partitions(bs: str, topic: str) -> int | None:
    md = ck_admin(bs).list_topics(topic=topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return None
    return len(t.partitions)


def _ck_topics(bs: str) -> set[str]:
    return set(ck_admin(bs).list_topics(timeout=10).topics)


def _src(entry):
    """ConfigEntry.source as a ConfigSource (confluent-kafka 2.16 hands out a plain int)."""
    from confluent_kafka.admin import ConfigSource

    return ConfigSource(entry.source)


def _ck_configs(bs: str, topic: str):
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = ck_admin(bs)
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res], request_timeout=20)[res].result(20)


def _ck_produce(bs: str, topic: str, value: bytes, partition: int = 0, timestamp: int = 0,
                **cfg):  # cfg: producer settings, e.g. acks
    """Produce one record; returns (error name or None, offset)."""
    from confluent_kafka import Producer

    out = []
    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 0, **cfg})
    p.produce(topic, value=value, partition=partition, timestamp=timestamp,
              on_delivery=lambda e, m: out.append((e.name() if e else None, m.offset())))
    assert p.flush(30) == 0
    return out[0]


# -- create ------------------------------------------------------------------------------------
def test_kafka_python_create_topics(broker, kp_admin):
    import kafka.errors as Errors

    bs = broker.bootstrap_servers
    kp_admin.create_topics({"kp-default": {}})  # num_partitions/replication_factor -1
    kp_admin.create_topics({"kp-explicit": {"num_partitions": 2, "replication_factor": 1,
                                            "configs": {"retention.ms": "3600000"}}})
    kp_admin.create_topics({"kp-validate": {"num_partitions": 3}}, validate_only=True)
    assert _ck_partitions(bs, "kp-default") == 4, "-1 partitions must mean num.partitions"
    assert _ck_partitions(bs, "kp-explicit") == 2
    assert "kp-validate" not in _ck_topics(bs), "validate_only must not create the topic"
    described = {t["name"]: t for t in kp_admin.describe_topics(["kp-default", "kp-explicit"])}
    assert len(described["kp-default"]["partitions"]) == 4
    assert described["kp-default"]["topic_id"] != described["kp-explicit"]["topic_id"]
    with pytest.raises(Errors.TopicAlreadyExistsError):
        kp_admin.create_topics({"kp-default": {"num_partitions": 1}})
    for spec, exc in [({"num_partitions": 0}, Errors.InvalidPartitionsError),
                      ({"num_partitions": 1, "replication_factor": 3},
                       Errors.InvalidReplicationFactorError),
                      ({"num_partitions": 1, "configs": {"retention.ms": "soon"}},
                       Errors.InvalidConfigurationError),
                      ({"num_partitions": 1, "configs": {"no.such.config": "1"}},
                       Errors.InvalidConfigurationError)]:
        with pytest.raises(exc):
            kp_admin.create_topics({"kp-bad": spec})
    assert "kp-bad" not in _ck_topics(bs)


def test_confluent_create_topics(broker, ck):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    bs = broker.bootstrap_servers
    admin = ck
    fs = admin.create_topics([NewTopic("ck-default"),
                              NewTopic("ck-explicit", 3, 1, config={"segment.bytes": "1048576"})])
    for f in fs.values():
        f.result(20)
    admin.create_topics([NewTopic("ck-validate", 2, 1)], validate_only=True)["ck-validate"].result(20)
    assert _ck_partitions(bs, "ck-default") == 4
    assert _ck_partitions(bs, "ck-explicit") == 3
    assert "ck-validate" not in _ck_topics(bs)
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic("ck-default", 1, 1)])["ck-default"].result(20)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    # validate_only still validates.
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic("ck-validate", 1, 1, config={"cleanup.policy": "shred"})],
                            validate_only=True)["ck-validate"].result(20)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG


# -- configs -----------------------------------------------------------------------------------
def test_describe_configs_real_entries_with_sources(broker, kp_admin, ck):
    from confluent_kafka.admin import ConfigSource
    from kafka.admin import ConfigResource, ConfigResourceType

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "described", 1, {"retention.ms": "7200000"})
    entries = _ck_configs(bs, "described")
    assert entries["retention.ms"].value == "7200000"
    assert _src(entries["retention.ms"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["cleanup.policy"].value == "delete"
    assert _src(entries["cleanup.policy"]) == ConfigSource.DEFAULT_CONFIG
    # A topic default that comes from the broker's own (static) config.
    assert entries["max.message.bytes"].value == "2000000"
    assert _src(entries["max.message.bytes"]) == ConfigSource.STATIC_BROKER_CONFIG
    assert len(entries) >= 20, f"only {len(entries)} topic configs described"
    # kafka-python, all configs (not just modified ones).
    res = kp_admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "described")],
                                    config_filter="all")
    kp = res["topic"]["described"]
    assert kp["retention.ms"]["value"] == "7200000"
    assert kp["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert kp["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    assert kp["max.message.bytes"]["config_source"] == "STATIC_BROKER_CONFIG"
    # Broker configs: the real keys tools look for.
    node = str(ck.describe_cluster(request_timeout=10).result(10).controller.id)
    res = kp_admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)],
                                    config_filter="all")
    bk = res["broker"][node]
    assert bk["num.partitions"]["value"] == "4"
    assert bk["num.partitions"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert bk["auto.create.topics.enable"]["value"] == "true"
    assert "log.retention.hours" in bk or "log.retention.ms" in bk


def test_incremental_alter_configs_take_effect(broker, ck):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "alter-inc", 1)
    admin = ck
    assert _ck_produce(bs, "alter-inc", b"x" * 3000) == (None, 0)

    def alter(name, value, op):
        res = ConfigResource("TOPIC", "alter-inc", incremental_configs=[
            ConfigEntry(name, value, incremental_operation=op)])
        admin.incremental_alter_configs([res])[res].result(20)

    alter("max.message.bytes", "2000", AlterConfigOpType.SET)
    e = _ck_configs(bs, "alter-inc")["max.message.bytes"]
    assert (e.value, _src(e)) == ("2000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    err, _ = _ck_produce(bs, "alter-inc", b"x" * 3000)
    assert err == "MSG_SIZE_TOO_LARGE"
    assert _ck_produce(bs, "alter-inc", b"y" * 500) == (None, 1)
    alter("max.message.bytes", None, AlterConfigOpType.DELETE)
    e = _ck_configs(bs, "alter-inc")["max.message.bytes"]
    assert (e.value, _src(e)) == ("2000000", ConfigSource.STATIC_BROKER_CONFIG)
    assert _ck_produce(bs, "alter-inc", b"z" * 3000) == (None, 2)
    # LogAppendTime takes effect too: the broker stamps the records.
    alter("message.timestamp.type", "LogAppendTime", AlterConfigOpType.SET)
    t0 = int(time.time() * 1000)
    assert _ck_produce(bs, "alter-inc", b"stamped", timestamp=1_000_000_000_000)[0] is None
    got = ck_consume(bs, "alter-inc", [0], 4)
    assert got[3].value == b"stamped" and got[3].timestamp >= t0 - 1000


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_legacy_alter_configs_replace_the_whole_set(broker, kp_admin, ck):
    from confluent_kafka.admin import ConfigResource, ConfigSource
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "alter-legacy", 1, {"retention.ms": "600000",
                                            "max.message.bytes": "5000"})
    res = ConfigResource("TOPIC", "alter-legacy", set_config={"segment.ms": "3600000"})
    ck.alter_configs([res])[res].result(20)
    e = _ck_configs(bs, "alter-legacy")
    assert (e["segment.ms"].value, _src(e["segment.ms"])) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    # Legacy AlterConfigs replaces all of a topic's dynamic configs: the others revert.
    assert _src(e["retention.ms"]) == ConfigSource.DEFAULT_CONFIG
    assert e["max.message.bytes"].value == "2000000"
    assert _ck_produce(bs, "alter-legacy", b"x" * 8000) == (None, 0)
    # kafka-python, both flavours.
    kp_admin.alter_configs([KpResource(ConfigResourceType.TOPIC, "alter-legacy",
                                       configs={"max.message.bytes": "4000"})], incremental=False)
    e = _ck_configs(bs, "alter-legacy")
    assert e["max.message.bytes"].value == "4000"
    # kafka-python re-sends the other modified keys with a legacy AlterConfigs, so (unlike
    # confluent-kafka's raw alter_configs above) segment.ms survives.
    assert (e["segment.ms"].value, _src(e["segment.ms"])) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert _ck_produce(bs, "alter-legacy", b"x" * 8000)[0] == "MSG_SIZE_TOO_LARGE"
    kp_admin.alter_configs([KpResource(ConfigResourceType.TOPIC, "alter-legacy",
                                       configs={"retention.ms": "900000"})], incremental=True)
    e = _ck_configs(bs, "alter-legacy")
    assert e["retention.ms"].value == "900000" and e["max.message.bytes"].value == "4000"
    # Invalid values are refused and change nothing (kafka-python reports per-resource errors
    # in its return value instead of raising).
    res = kp_admin.alter_configs([KpResource(ConfigResourceType.TOPIC, "alter-legacy",
                                             configs={"retention.ms": "-7"})], incremental=True)
    assert "[Error 40] InvalidConfigurationError" in str(res["topic"]["alter-legacy"]), res
    assert _ck_configs(bs, "alter-legacy")["retention.ms"].value == "900000"


# -- partitions, records, topics ---------------------------------------------------------------
def test_create_partitions(broker, kp_admin, ck):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "grow", 2)
    admin = ck
    admin.create_partitions([NewPartitions("grow", 5)])["grow"].result(20)
    assert _ck_partitions(bs, "grow") == 5
    assert _ck_produce(bs, "grow", b"in the new partition", partition=4) == (None, 0)
    assert [g.value for g in ck_consume(bs, "grow", [4], 1)] == [b"in the new partition"]
    kp_admin.create_partitions({"grow": 6})
    assert _ck_partitions(bs, "grow") == 6
    with pytest.raises(KafkaException) as ei:
        admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(20)
    assert ei.value.args[0].code() == INVALID_PARTITIONS


def test_delete_records_moves_log_start(broker, kp_admin, ck):
    from confluent_kafka import KafkaException, TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTP

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "trim", 1)
    for i in range(10):
        assert _ck_produce(bs, "trim", b"r%d" % i) == (None, i)
    tp = TopicPartition("trim", 0, 4)
    res = ck.delete_records([tp])
    (f,) = res.values()
    assert f.result(20).low_watermark == 4
    assert ck_end_offsets(bs, "trim", [0])[0] == (4, 10)
    got = ck_consume(bs, "trim", [0], 6)
    assert [(g.offset, g.value) for g in got] == [(i, b"r%d" % i) for i in range(4, 10)]
    kp_admin.delete_records({KpTP("trim", 0): 7})
    c = KafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False)
    try:
        assert c.beginning_offsets([KpTP("trim", 0)]) == {KpTP("trim", 0): 7}
        assert c.end_offsets([KpTP("trim", 0)]) == {KpTP("trim", 0): 10}
    finally:
        c.close()
    with pytest.raises(KafkaException) as ei:
        list(ck.delete_records([TopicPartition("trim", 0, 11)]).values())[0].result(20)
    assert ei.value.args[0].name() == "OFFSET_OUT_OF_RANGE"


def test_delete_topics(broker, kp_admin, ck):
    from confluent_kafka import KafkaError, KafkaException, TopicCollection

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "doomed", 2)
    ck_create_topic(bs, "doomed-too", 1)
    assert _ck_produce(bs, "doomed", b"gone soon") == (None, 0)
    old_id = str(ck.describe_topics(TopicCollection(["doomed"]))["doomed"]
                 .result(10).topic_id)
    ck.delete_topics(["doomed"], operation_timeout=20)["doomed"].result(20)
    kp_admin.delete_topics(["doomed-too"])
    assert not {"doomed", "doomed-too"} & _ck_topics(bs)
    with pytest.raises(KafkaException) as ei:
        ck.delete_topics(["doomed"])["doomed"].result(20)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # Re-created: a new topic id and an empty log.
    ck_create_topic(bs, "doomed", 1)
    new_id = str(ck.describe_topics(TopicCollection(["doomed"]))["doomed"]
                 .result(10).topic_id)
    assert new_id != old_id
    assert ck_end_offsets(bs, "doomed", [0])[0] == (0, 0)


def test_describe_cluster(broker, kp_admin, ck):
    bs = broker.bootstrap_servers
    d = ck.describe_cluster(request_timeout=10).result(10)
    assert d.cluster_id
    assert d.controller is not None and len(d.nodes) == 1
    node = d.nodes[0]
    assert d.controller.id == node.id
    assert (node.host, node.port) == host_port(bs)
    kd = kp_admin.describe_cluster()
    assert kd["cluster_id"] == d.cluster_id
    assert kd["controller_id"] == node.id
    assert [(b["broker_id"], b["host"], b["port"]) for b in kd["brokers"]] == [
        (node.id, node.host, node.port)]


def test_describe_log_dirs_and_topic_partitions(broker, kp_admin):
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "sized", 2)
    for _ in range(5):
        assert _ck_produce(bs, "sized", b"x" * 1000, partition=1)[0] is None
    (b,) = kp_admin.describe_log_dirs(["sized"])
    (d,) = b["log_dirs"]
    assert d["error_code"] == 0 and d["log_dir"] == broker.data_dir
    sizes = {p["partition_index"]: p["partition_size"]
             for t in d["topics"] if t["name"] == "sized" for p in t["partitions"]}
    assert sizes[0] == 0 and sizes[1] > 5000, sizes
    res = kp_admin.describe_topic_partitions(["sized"])
    (t,) = res["topics"]
    assert t["error_code"] == 0 and t["name"] == "sized"
    parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
    assert [(p["partition_index"], p["leader_id"], p["isr_nodes"]) for p in parts] == [
        (0, parts[0]["replica_nodes"][0], parts[0]["replica_nodes"]),
        (1, parts[1]["replica_nodes"][0], parts[1]["replica_nodes"])]


# -- offsets -----------------------------------------------------------------------------------
def test_list_offsets_earliest_latest_timestamp_max(broker, ck):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import OffsetSpec
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTP

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "times", 1)
    base = int(time.time() * 1000) - 600_000
    stamps = [base + 1000 * i for i in range(10)]
    stamps[6] = base + 100_000  # the max timestamp sits in the middle
    for i, ts in enumerate(stamps):
        assert _ck_produce(bs, "times", b"t%d" % i, timestamp=ts) == (None, i)
    tp = TopicPartition("times", 0)
    admin = ck

    def lo(spec):
        return admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(10)

    assert lo(OffsetSpec.earliest()).offset == 0
    assert lo(OffsetSpec.latest()).offset == 10
    mx = lo(OffsetSpec.max_timestamp())
    assert (mx.offset, mx.timestamp) == (6, base + 100_000)
    r = lo(OffsetSpec.for_timestamp(base + 2500))
    assert (r.offset, r.timestamp) == (3, base + 3000)
    assert lo(OffsetSpec.for_timestamp(base + 6500)).offset == 6
    assert lo(OffsetSpec.for_timestamp(base + 200_000)).offset == -1
    c = Consumer(ck_consumer_config(bs))
    try:
        (r,) = c.offsets_for_times([TopicPartition("times", 0, base + 2500)], timeout=10)
        assert r.offset == 3
        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 10)
    finally:
        c.close()
    kc = KafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False)
    try:
        ktp = KpTP("times", 0)
        found = kc.offsets_for_times({ktp: base + 2500})[ktp]
        assert (found.offset, found.timestamp) == (3, base + 3000)
        assert kc.offsets_for_times({ktp: base + 200_000})[ktp] is None
        assert kc.beginning_offsets([ktp]) == {ktp: 0}
        assert kc.end_offsets([ktp]) == {ktp: 10}
    finally:
        kc.close()
    out = run([KCAT, "-b", bs, "-Q", "-t", f"times:0:{base + 2500}"])
    assert " offset 3" in out.stdout.decode(), out.stdout


# -- metadata: auto-creation, kcat -L, IPv4/IPv6 ------------------------------------------------
def test_auto_creation_via_metadata_uses_num_partitions(broker):
    from confluent_kafka import Producer

    bs = broker.bootstrap_servers
    p = Producer({"bootstrap.servers": bs})
    md = p.list_topics(topic="auto-made", timeout=10)
    deadline = time.monotonic() + 10
    while md.topics["auto-made"].error is not None and time.monotonic() < deadline:
        md = p.list_topics(topic="auto-made", timeout=10)  # LEADER_NOT_AVAILABLE while creating
    assert md.topics["auto-made"].error is None, md.topics["auto-made"].error
    assert len(md.topics["auto-made"].partitions) == 4
    assert _ck_produce(bs, "auto-made", b"hello", partition=3) == (None, 0)


def test_auto_create_disabled_means_unknown_topic(snakka_broker_factory):
    from confluent_kafka import KafkaError, Producer
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    b = snakka_broker_factory(config={"auto.create.topics.enable": "false"})
    bs = b.bootstrap_servers
    md = Producer({"bootstrap.servers": bs}).list_topics(topic="not-there", timeout=10)
    assert md.topics["not-there"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    kp = KafkaProducer(bootstrap_servers=bs, max_block_ms=1500)
    try:
        with pytest.raises(KafkaTimeoutError):
            kp.send("not-there", b"v").get(timeout=5)
    finally:
        kp.close(timeout=5)
    assert "not-there" not in _ck_topics(bs)


def test_kcat_metadata_over_ipv4_and_ipv6(broker):
    bs = broker.bootstrap_servers
    _, port = host_port(bs)
    ck_create_topic(bs, "listed", 3)
    for family in (socket.AF_INET, socket.AF_INET6):
        addr = "127.0.0.1" if family == socket.AF_INET else "::1"
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect((addr, port))  # the broker listens on both loopbacks
    for server, fam in [(bs, "any"), (f"127.0.0.1:{port}", "v4"), (f"[::1]:{port}", "v6")]:
        out = run([KCAT, "-b", server, "-L", "-J", "-m", "10", "-X",
                   f"broker.address.family={fam}"])
        md = json.loads(out.stdout)
        assert [b["name"] for b in md["brokers"]] == [f"localhost:{port}"], md["brokers"]
        topics = {t["topic"]: t for t in md["topics"]}
        assert "listed" in topics, md
        parts = topics["listed"]["partitions"]
        assert sorted(p["partition"] for p in parts) == [0, 1, 2]
        assert all(p["leader"] == md["brokers"][0]["id"] for p in parts)
    # Plain-text -L too, the way people run it.
    out = run([KCAT, "-b", bs, "-L", "-t", "listed"]).stdout.decode()
    assert "topic \"listed\" with 3 partitions" in out, out


# -- more config effects and Kafka's rules ---------------------------------------------------------
def test_topic_name_rules(broker, ck):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "metrics.cpu", 1)
    for bad in ["has space", "slash/name", "..", ".", "x" * 250, "metrics_cpu"]:
        # metrics_cpu collides with metrics.cpu ('.' and '_' are the same in metric names).
        with pytest.raises(KafkaException) as ei:
            ck.create_topics([NewTopic(bad, 1, 1)])[bad].result(20)
        assert ei.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, (bad, ei.value)
    ck_create_topic(bs, "ok-Name_1.2", 1)
    assert {"metrics.cpu", "ok-Name_1.2"} <= _ck_topics(bs)
    assert not {"has space", "metrics_cpu"} & _ck_topics(bs)


def test_manual_replica_assignment(broker, kp_admin, ck):
    # (kafka-python: confluent-kafka 2.16's NewTopic(replica_assignment=...) fails locally with
    # "Specifying a default partition count and a replica assignment are mutually exclusive".)
    import kafka.errors as Errors

    bs = broker.bootstrap_servers
    node = ck.describe_cluster(request_timeout=10).result(10).controller.id
    kp_admin.create_topics({"assigned": {"assignments": {0: [node], 1: [node]}}})
    assert _ck_partitions(bs, "assigned") == 2
    with pytest.raises(Errors.InvalidReplicationAssignmentError):
        kp_admin.create_topics({"misassigned": {"assignments": {0: [node + 7]}}})
    assert "misassigned" not in _ck_topics(bs)


def test_min_insync_replicas_and_timestamp_limits(broker):
    import kafka.errors as Errors
    from kafka import KafkaProducer

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "isr2", 1, {"min.insync.replicas": "2"})
    # NOT_ENOUGH_REPLICAS is retriable: a producer without retries sees it at once.
    p = KafkaProducer(bootstrap_servers=bs, acks="all", retries=0, enable_idempotence=False)
    try:
        with pytest.raises(Errors.NotEnoughReplicasError):
            p.send("isr2", b"acks=all", partition=0).get(timeout=10)
    finally:
        p.close(timeout=5)
    assert _ck_produce(bs, "isr2", b"acks=1", **{"acks": "1"}) == (None, 0)
    ck_create_topic(bs, "no-future", 1, {"message.timestamp.after.max.ms": "3600000",
                                         "message.timestamp.before.max.ms": "86400000"})
    now = int(time.time() * 1000)
    assert _ck_produce(bs, "no-future", b"late", timestamp=now + 7_200_000)[0] == \
        "INVALID_TIMESTAMP"
    assert _ck_produce(bs, "no-future", b"ancient", timestamp=now - 2 * 86_400_000)[0] == \
        "INVALID_TIMESTAMP"
    assert _ck_produce(bs, "no-future", b"fine", timestamp=now + 60_000) == (None, 0)


def test_retention_deletes_old_segments(snakka_broker_factory):
    b = snakka_broker_factory(config={"log.retention.check.interval.ms": "100"})
    bs = b.bootstrap_servers
    ck_create_topic(bs, "expiring", 1, {"segment.bytes": "2000", "retention.ms": "3600000"})
    now = int(time.time() * 1000)
    old = now - 7_200_000  # two hours ago: older than retention.ms
    for i in range(30):
        ts = old if i < 20 else now
        assert _ck_produce(bs, "expiring", b"r%02d" % i + b"." * 200, timestamp=ts) == (None, i)
    # Segments holding only old records go; the ones with recent records stay.
    wait_until(lambda: ck_end_offsets(bs, "expiring", [0])[0][0] > 0, 10,
               "retention to delete the expired segments")
    lo, hi = ck_end_offsets(bs, "expiring", [0])[0]
    assert 0 < lo <= 20 and hi == 30
    got = ck_consume(bs, "expiring", [0], hi - lo)
    assert [g.offset for g in got] == list(range(lo, 30))
    assert got[-1].value.startswith(b"r29")


def test_consumer_out_of_range_position_resets(broker):
    from confluent_kafka import Consumer, TopicPartition

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "reset", 1)
    for i in range(5):
        assert _ck_produce(bs, "reset", b"v%d" % i) == (None, i)
    for reset, start, count in (("earliest", 0, 5), ("latest", 5, 1)):
        c = Consumer(ck_consumer_config(bs, **{"auto.offset.reset": reset}))
        try:
            c.assign([TopicPartition("reset", 0, 1000)])  # beyond the log end
            if reset == "latest":
                assert c.consume(num_messages=1, timeout=1.0) == []
                assert _ck_produce(bs, "reset", b"v5") == (None, 5)
            msgs = c.consume(num_messages=count, timeout=5)  # returns once all are there
            assert [m.error() for m in msgs] == [None] * count, msgs
            assert [m.offset() for m in msgs] == list(range(start, start + count)), reset
        finally:
            c.close()


def _kp_synonyms(bs: str, topic: str, broker_config: dict | None = None):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    a = KafkaAdminClient(bootstrap_servers=bs)
    try:
        a.create_topics({topic: {"configs": {"segment.ms": "5000"}}})
        r = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                               include_synonyms=True, config_filter="all")
    finally:
        a.close()
    return {k: (v["value"], v["config_source"],
                [(s["name"], s["value"], s["source"]) for s in v["synonyms"]])
            for k, v in r["topic"][topic].items()}


@pytest.fixture
def hours_broker(snakka_broker_factory):
    return snakka_broker_factory(config={"log.retention.hours": "48"})


def test_describe_configs_synonyms(hours_broker):
    cfg = _kp_synonyms(hours_broker.bootstrap_servers, "synonyms")
    assert cfg["max.message.bytes"] == ("1048588", "DEFAULT_CONFIG",
                                        [("message.max.bytes", "1048588", "DEFAULT_CONFIG")])
    assert cfg["cleanup.policy"] == ("delete", "DEFAULT_CONFIG",
                                     [("log.cleanup.policy", "delete", "DEFAULT_CONFIG")])
    value, source, syn = cfg["retention.ms"]
    assert (value, source) == ("172800000", "STATIC_BROKER_CONFIG")
    assert syn[0] == ("log.retention.hours", "48", "STATIC_BROKER_CONFIG")
    value, source, syn = cfg["segment.ms"]
    assert (value, source, syn[0]) == ("5000", "DYNAMIC_TOPIC_CONFIG",
                                       ("segment.ms", "5000", "DYNAMIC_TOPIC_CONFIG"))


def test_describe_configs_hour_synonyms_carry_hours(hours_broker):
    cfg = _kp_synonyms(hours_broker.bootstrap_servers, "synonyms-hours")
    assert cfg["retention.ms"][2][-1] == ("log.retention.hours", "168", "DEFAULT_CONFIG")
    assert cfg["segment.ms"][2][-1] == ("log.roll.hours", "168", "DEFAULT_CONFIG")


def test_aiokafka_admin(broker):
    """aiokafka's admin speaks old versions (CreateTopics v3, DescribeConfigs v2,
    AlterConfigs v1, CreatePartitions v1, Metadata v5)."""

    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    bs = broker.bootstrap_servers

    async def go():
        a = AIOKafkaAdminClient(bootstrap_servers=bs)
        await a.start()
        try:
            r = await a.create_topics([NewTopic("aio", 2, 1,
                                                topic_configs={"retention.ms": "100000"})])
            assert [(t[0], t[1]) for t in r.topic_errors] == [("aio", 0)]
            (r,) = await a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio")])
            entries = {c[0]: c for c in r.resources[0][4]}
            # (name, value, read_only, config_source, is_sensitive, synonyms)
            assert entries["retention.ms"][1:4] == ("100000", False, 1)
            assert entries["cleanup.policy"][1:4] == ("delete", False, 5)
            (r,) = await a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "aio",
                                                         configs={"retention.ms": "200000"})])
            assert r.resources[0][0] == 0, r
            r = await a.create_partitions({"aio": NewPartitions(3)})
            assert r.topic_errors[0][1] == 0, r
            (t,) = await a.describe_topics(["aio"])
            assert len(t["partitions"]) == 3
            cluster = await a.describe_cluster()
            assert cluster["cluster_id"] and len(cluster["brokers"]) == 1
            assert "aio" in await a.list_topics()
            r = await a.delete_topics(["aio"])
            assert [(t[0], t[1]) for t in r.topic_error_codes] == [("aio", 0)]
        finally:
            await a.close()

    run_async(go(), timeout=60)
    assert "aio" not in _ck_topics(bs)


def test_offset_for_leader_epoch(broker):
    """The single broker's leader epoch is 0 for ever: epoch 0 ends at the log end offset."""
    from snakka.protocol.messages.offset_for_leader_epoch_request import (
        OffsetForLeaderEpochRequest,
        OffsetForLeaderPartition,
        OffsetForLeaderTopic,
    )

    from .helpers import raw_connect, run_async

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "epochs", 1)
    for i in range(10):
        assert _ck_produce(bs, "epochs", b"e%d" % i) == (None, i)

    async def go():
        conn = await raw_connect(bs)
        try:
            req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderTopic(
                topic="epochs", partitions=[OffsetForLeaderPartition(
                    partition=0, current_leader_epoch=-1, leader_epoch=0)])])
            return await conn.send(req)
        finally:
            await conn.close()

    resp = run_async(go())
    (p,) = resp.topics[0].partitions
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 10)


def test_dynamic_broker_config_takes_effect_and_persists(snakka_broker_factory):
    """IncrementalAlterConfigs on the broker resource: topics without an override follow the new
    default at once (DYNAMIC_BROKER_CONFIG), and it survives a restart."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

    b = snakka_broker_factory()
    bs = b.bootstrap_servers
    ck_create_topic(bs, "follows", 1)
    ck_create_topic(bs, "overrides", 1, {"max.message.bytes": "100000"})
    admin = ck_admin(bs)
    node = str(admin.describe_cluster(request_timeout=10).result(10).controller.id)
    res = ConfigResource("BROKER", node, incremental_configs=[
        ConfigEntry("message.max.bytes", "3000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(20)

    def check():
        e = _ck_configs(bs, "follows")["max.message.bytes"]
        assert (e.value, _src(e)) == ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG)
        br = ConfigResource("BROKER", node)
        e = admin.describe_configs([br])[br].result(20)["message.max.bytes"]
        assert (e.value, _src(e)) == ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG)
        assert _ck_produce(bs, "follows", b"x" * 4000)[0] == "MSG_SIZE_TOO_LARGE"
        assert _ck_produce(bs, "overrides", b"x" * 4000)[0] is None  # the topic's own value

    check()
    b.restart()
    check()
