"""KafkaJS 2.2 (npm, unmodified) against a real snakka broker: what KafkaJS users do.

Each test drives tests/clients/kafkajs/run.js (one subcommand per role: produce, consume, a
two-member group, transactions, admin) with a JSON spec and asserts on the JSON it prints;
records KafkaJS writes are read back by confluent-kafka (and the reverse), committed offsets are
checked through confluent-kafka's AdminClient, so each test shows KafkaJS and another client
agreeing about the broker's state. Without node or the npm packages every test here skips with
the reason tests/clients/kafkajs_support.py gives.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from snakka.testing import EmbeddedBroker

from . import kafkajs_support as kjs

pytestmark = pytest.mark.skipif(kjs.skip_reason() is not None, reason=str(kjs.skip_reason()))

PARTITIONS = 3
# A new group's first join waits group.initial.rebalance.delay.ms (3 s by default, as in Kafka)
# for more members; the tests' groups have one member at first, so they do not wait.
FAST_GROUPS = {"num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}


def name(what: str) -> str:
    return f"kjs-{what}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def broker():
    # One broker for the module; every test names its own topics and groups.
    with EmbeddedBroker(config={"num.partitions": str(PARTITIONS),
                                "group.initial.rebalance.delay.ms": "0",
                                "message.max.bytes": "100000"}) as b:
        yield b


def spec(b: EmbeddedBroker, **kw: Any) -> dict[str, Any]:
    return {"brokers": [b.bootstrap_servers], **kw}


def create_topic(bs: str, topic: str, partitions: int = PARTITIONS, **cfg: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bs})  # kept alive until the futures resolve
    fs = admin.create_topics([NewTopic(topic, partitions, 1, config=cfg)])
    for f in fs.values():
        f.result(timeout=30)


def ck_read(bs: str, topic: str, n: int, partitions: int = PARTITIONS,
            isolation: str = "read_uncommitted", extra: dict[str, str] | None = None,
            ) -> list[dict[str, Any]]:
    """Every record of ``topic`` read by confluent-kafka (assign from 0, until ``n`` records)."""
    import confluent_kafka as ck

    c = ck.Consumer({"bootstrap.servers": bs, "group.id": name("reader"),
                     "enable.auto.commit": False, "isolation.level": isolation, **(extra or {})})
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(n, timeout=0.5):
                assert not m.error(), m.error()
                out.append({"partition": m.partition(), "offset": m.offset(),
                            "key": None if m.key() is None else m.key().decode(),
                            "value": None if m.value() is None else m.value().decode(),
                            "headers": {k: v.decode() for k, v in (m.headers() or [])}})
        return out
    finally:
        c.close()


def ck_produce(bs: str, topic: str, n: int, partitions: int = PARTITIONS,
               compression: str = "none") -> None:
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": bs, "compression.type": compression})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def committed(bs: str, group: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    """The group's committed offsets as confluent-kafka's AdminClient lists them."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient

    req = ck.ConsumerGroupTopicPartitions(
        group, [ck.TopicPartition(topic, p) for p in range(partitions)])
    admin = AdminClient({"bootstrap.servers": bs})
    fs = admin.list_consumer_group_offsets([req])
    res = fs[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def java_partition(key: str, partitions: int) -> int:
    """The Java client's (and KafkaJS's default partitioner's) murmur2 choice for ``key``."""
    from kafka.partitioner.default import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


# -- 1. producer ---------------------------------------------------------------------------------
@pytest.mark.parametrize("acks,compression,idempotent", [
    (-1, "none", False), (1, "gzip", False), (0, "snappy", False), (-1, "gzip", True)],
    ids=["acks-all", "acks1-gzip", "acks0-snappy", "idempotent-gzip"])
def test_produce_read_back_by_confluent_kafka(broker, acks, compression, idempotent):
    bs = broker.bootstrap_servers
    topic = name("produce")
    create_topic(bs, topic)
    sent = [{"key": f"key-{i}", "value": f"value-{i}", "headers": {"h": f"x{i}", "trace": "t"}}
            for i in range(12)]
    explicit = [{"key": f"p-{i}", "value": f"pinned-{i}", "partition": i % PARTITIONS,
                 "headers": {"pin": str(i)}} for i in range(6)]
    tomb = [{"key": "gone", "value": None, "partition": 0}]
    batch = [{"topic": topic, "messages": [{"value": f"batch-{i}", "partition": 2}
                                           for i in range(5)]}]
    out = kjs.run("produce", spec(broker, acks=acks, compression=compression,
                                  idempotent=idempotent, batch=batch,
                                  sends=[{"topic": topic, "messages": sent},
                                         {"topic": topic, "messages": explicit + tomb}]))
    assert all("ok" in r for r in out["results"]), out
    if acks != 0:  # with acks=0 the broker answers nothing, so KafkaJS has no offsets to show
        metas = [m for r in out["results"] for m in r["ok"]]
        assert {m["topicName"] for m in metas} == {topic}
        assert all(m["errorCode"] == 0 for m in metas), metas

    got = ck_read(bs, topic, 24)
    assert len(got) == 24
    by_value = {r["value"]: r for r in got if r["value"] is not None}
    for m in sent:
        r = by_value[m["value"]]
        assert (r["key"], r["headers"]) == (m["key"], m["headers"])
        assert r["partition"] == java_partition(m["key"], PARTITIONS)  # same partitioner as Java
    for m in explicit:
        r = by_value[m["value"]]
        assert (r["key"], r["partition"], r["headers"]) == (m["key"], m["partition"],
                                                            m["headers"])
    assert [(r["partition"], r["key"], r["headers"]) for r in got if r["value"] is None] == [
        (0, "gone", {})]
    # sendBatch: in order, one partition
    assert [r["value"] for r in got if r["value"] and r["value"].startswith("batch-")] == [
        f"batch-{i}" for i in range(5)]
    # per partition, offsets are dense from 0: nothing lost, nothing duplicated
    for p in range(PARTITIONS):
        offs = sorted(r["offset"] for r in got if r["partition"] == p)
        assert offs == list(range(len(offs)))


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy"])
def test_kafkajs_reads_what_confluent_kafka_wrote(broker, compression):
    bs = broker.bootstrap_servers
    topic = name("read")
    create_topic(bs, topic)
    ck_produce(bs, topic, 30, compression=compression)
    out = kjs.run("consume", spec(broker, groupId=name("g"), topics=[topic], count=30))
    assert out["crashes"] == [] and "error" not in out, out
    got = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in out["records"])
    assert got == sorted((i % PARTITIONS, i // PARTITIONS, f"k{i}", f"v{i}") for i in range(30))


@pytest.mark.parametrize("compression,mode", [("none", "message"), ("gzip", "batch")])
def test_many_records_through_small_fetches(broker, compression, mode):
    """20,000 records written by KafkaJS (sendBatch, 500 a call) and read by KafkaJS with a
    4 KiB maxBytesPerPartition, so every fetch stops at a limit: each record once, in order."""
    topic = name("bulk")
    create_topic(broker.bootstrap_servers, topic)
    n = 20_000
    out = kjs.run("produce", spec(broker, compression=compression, generate={
        "topic": topic, "count": n, "chunk": 500, "partitions": PARTITIONS, "valueSize": 40}))
    assert out["results"] == [{"ok": "generated"}]
    got = kjs.run("consume", spec(broker, groupId=name("g"), topics=[topic], count=n,
                                  brief=True, mode=mode, maxBytesPerPartition=4096,
                                  concurrency=PARTITIONS, timeoutMs=90_000))
    assert got["crashes"] == [] and "error" not in got, {k: v for k, v in got.items()
                                                         if k != "records"}
    assert len(got["records"]) == n
    for p in range(PARTITIONS):
        mine = [(o, v) for q, o, v in got["records"] if q == p]
        want = [f"v{i}-".ljust(40, "x") for i in range(p, n, PARTITIONS)]
        assert [o for o, _ in mine] == list(range(len(want)))
        assert [v for _, v in mine] == want


def test_subscribe_by_pattern_across_topics(broker):
    bs = broker.bootstrap_servers
    prefix = name("re")
    for t in ("a", "b"):
        create_topic(bs, f"{prefix}-{t}", 2)
        ck_produce(bs, f"{prefix}-{t}", 4, 2)
    create_topic(bs, f"{prefix}x-c", 1)  # does not match the pattern
    ck_produce(bs, f"{prefix}x-c", 3, 1)
    out = kjs.run("consume", spec(broker, groupId=name("g"), topicPattern=f"^{prefix}-.$",
                                  count=8))
    assert sorted((r["topic"], r["partition"], r["offset"]) for r in out["records"]) == sorted(
        (f"{prefix}-{t}", p, o) for t in ("a", "b") for p in range(2) for o in range(2))
    assignment = out["joins"][-1]["assignment"]
    assert {t: sorted(ps) for t, ps in assignment.items()} == {
        f"{prefix}-a": [0, 1], f"{prefix}-b": [0, 1]}


# -- 2. consumer groups ------------------------------------------------------------------------
def test_group_auto_commit_visible_to_confluent_kafka(broker):
    bs = broker.bootstrap_servers
    topic, group = name("auto"), name("g")
    create_topic(bs, topic)
    ck_produce(bs, topic, 30)
    out = kjs.run("consume", spec(broker, groupId=group, topics=[topic], count=30))
    assert out["crashes"] == [] and "error" not in out, out
    assert len(out["records"]) == 30
    # the one member got every partition
    assert sorted(out["joins"][-1]["assignment"][topic]) == list(range(PARTITIONS))
    # disconnect committed what was consumed: 10 per partition, seen by another client
    assert committed(bs, group, topic) == {p: 10 for p in range(PARTITIONS)}
    # and a second KafkaJS run of the group resumes there (reads only what is new)
    ck_produce(bs, topic, 3)
    again = kjs.run("consume", spec(broker, groupId=group, topics=[topic], count=3))
    assert sorted((r["partition"], r["offset"]) for r in again["records"]) == [
        (p, 10) for p in range(PARTITIONS)]


def test_group_join_rebalance_leave_manual_commit(broker):
    bs = broker.bootstrap_servers
    topic, group = name("group"), name("g")
    create_topic(bs, topic, 4)
    out = kjs.run("group", spec(broker, groupId=group, topic=topic, partitions=4, batch=20))
    assert not any("error" in p for p in out["phases"]), out["phases"]
    first, two, alone = out["phases"]
    assert sorted(first["a"]) == [0, 1, 2, 3]
    # both members hold partitions, and together exactly all of them
    assert two["a"] and two["b"] and sorted(two["a"] + two["b"]) == [0, 1, 2, 3]
    assert sorted(alone["a"]) == [0, 1, 2, 3]
    assert out["a"]["crashes"] == [] and out["b"]["crashes"] == []
    assert out["b"]["records"], "the second member consumed nothing"
    seen = [r["value"] for m in ("a", "b") for r in out[m]["records"]]
    assert sorted(seen) == sorted(f"v{i}" for i in range(60))  # none lost, none twice
    # the commits (one per record) are what another client sees
    assert sum(committed(bs, group, topic, 4).values()) == 60


# -- 3. transactions -----------------------------------------------------------------------------
def test_transactions_commit_abort_send_offsets(broker):
    bs = broker.bootstrap_servers
    topic, source, group = name("txn"), name("txn-src"), name("txn-g")
    create_topic(bs, topic, 1)
    create_topic(bs, source, 1)
    ck_produce(bs, source, 5, 1)
    msgs = lambda tag: [{"key": tag, "value": f"{tag}-{i}"} for i in range(3)]  # noqa: E731
    txns = [
        {"topic": topic, "messages": msgs("c1"), "end": "commit",
         "offsets": {"groupId": group,
                     "topics": [{"topic": source, "partitions": [{"partition": 0,
                                                                  "offset": "5"}]}]}},
        {"topic": topic, "messages": msgs("a1"), "end": "abort"},
        {"topic": topic, "messages": msgs("c2"), "end": "commit"},
    ]
    out = kjs.run("transact", spec(broker, transactionalId=name("tid"), txns=txns))
    assert out["results"] == [{"ok": "commit"}, {"ok": "abort"}, {"ok": "commit"}]
    want = [f"c1-{i}" for i in range(3)] + [f"c2-{i}" for i in range(3)]
    rc = ck_read(bs, topic, 6, 1, isolation="read_committed")
    assert [r["value"] for r in rc] == want
    ru = ck_read(bs, topic, 9, 1)
    assert [r["value"] for r in ru] == want[:3] + [f"a1-{i}" for i in range(3)] + want[3:]
    # KafkaJS's own consumer, read_committed by default, agrees
    kc = kjs.run("consume", spec(broker, groupId=name("g"), topics=[topic], count=6))
    assert [r["value"] for r in kc["records"]] == want
    # sendOffsets committed the group's offset with the first transaction
    assert committed(bs, group, source, 1) == {0: 5}


def test_transactional_producer_fenced(broker):
    topic = name("fence")
    create_topic(broker.bootstrap_servers, topic, 1)
    out = kjs.run("fence", spec(broker, transactionalId=name("tid"), topic=topic))
    # the older producer can neither send nor commit once the newer one has initialised
    for step in ("aSend", "aCommit"):
        assert out[step]["type"] == "INVALID_PRODUCER_EPOCH", out
    assert out["bCommit"] == "ok"
    got = ck_read(broker.bootstrap_servers, topic, 1, 1, isolation="read_committed")
    assert [r["value"] for r in got] == ["b"]  # the fenced transaction was aborted


def test_read_committed_stops_at_open_transaction(broker):
    topic = name("lso")
    create_topic(broker.bootstrap_servers, topic, 1)
    out = kjs.run("lso", spec(broker, transactionalId=name("tid"), groupId=name("g"),
                              topic=topic))
    assert "error" not in out, out
    # the plain record after the open transaction is held back too (the last stable offset)
    assert out["whileOpen"] == []
    assert out["afterCommit"] == ["txn-0", "txn-1", "after-open"]


# -- 4. admin ------------------------------------------------------------------------------------
def test_admin_calls(broker):
    bs = broker.bootstrap_servers
    t1, t2, group = name("adm1"), name("adm2"), name("adm-g")
    ops: list[list[Any]] = [
        ["createTopics", {"topics": [
            {"topic": t1, "numPartitions": 2, "replicationFactor": 1,
             "configEntries": [{"name": "retention.ms", "value": "123456"}]},
            {"topic": t2}]}],                                                  # 0
        ["createTopics", {"topics": [{"topic": t1}]}],                         # 1: exists
        ["listTopics"],                                                        # 2
        ["fetchTopicMetadata", {"topics": [t1]}],                              # 3
        ["createPartitions", {"topicPartitions": [{"topic": t1, "count": 4}]}],  # 4
        ["fetchTopicMetadata", {"topics": [t1]}],                              # 5
        ["describeConfigs", {"includeSynonyms": False,
                             "resources": [{"type": 2, "name": t1,
                                            "configNames": ["retention.ms"]}]}],  # 6
        ["alterConfigs", {"validateOnly": False, "resources": [
            {"type": 2, "name": t1, "configEntries": [{"name": "retention.ms",
                                                       "value": "654321"}]}]}],  # 7
        ["describeConfigs", {"includeSynonyms": False,
                             "resources": [{"type": 2, "name": t1,
                                            "configNames": ["retention.ms"]}]}],  # 8
        ["describeCluster"],                                                   # 9
    ]
    out = kjs.run("admin", spec(broker, ops=ops))["results"]
    assert out[0] == {"ok": True}
    assert out[1] == {"ok": False}  # KafkaJS answers false for a topic that exists
    assert {t1, t2} <= set(out[2]["ok"])
    assert len(out[3]["ok"]["topics"][0]["partitions"]) == 2
    assert out[4] == {"ok": None}  # createPartitions resolves to nothing
    assert sorted(p["partitionId"] for p in out[5]["ok"]["topics"][0]["partitions"]) == [0, 1, 2, 3]
    entry = out[6]["ok"]["resources"][0]["configEntries"][0]
    assert (entry["configName"], entry["configValue"]) == ("retention.ms", "123456")
    assert out[7]["ok"]["resources"][0]["errorCode"] == 0
    assert out[8]["ok"]["resources"][0]["configEntries"][0]["configValue"] == "654321"
    cluster = out[9]["ok"]
    assert [b["port"] for b in cluster["brokers"]] == [broker.port]
    assert cluster["controller"] == cluster["brokers"][0]["nodeId"]

    # offsets: write 10 records to t1 (4 partitions), consume them as a group, then look
    ck_produce(bs, t1, 8, 4)
    ts_before = int(time.time() * 1000) - 60_000
    kjs.run("consume", spec(broker, groupId=group, topics=[t1], count=8))
    ops = [
        ["fetchTopicOffsets", t1],                                             # 0
        ["fetchOffsets", {"groupId": group, "topics": [t1]}],                  # 1
        ["fetchTopicOffsetsByTimestamp", t1, ts_before],                       # 2
        ["fetchTopicOffsetsByTimestamp", t1, int(time.time() * 1000) + 3_600_000],  # 3
        ["listGroups"],                                                        # 4
        ["describeGroups", [group]],                                           # 5
        ["setOffsets", {"groupId": group, "topic": t1,
                        "partitions": [{"partition": 0, "offset": "1"}]}],     # 6
        ["fetchOffsets", {"groupId": group, "topics": [t1]}],                  # 7
        ["resetOffsets", {"groupId": group, "topic": t1, "earliest": True}],   # 8
        ["fetchOffsets", {"groupId": group, "topics": [t1]}],                  # 9
        ["deleteGroups", [group]],                                             # 10
        ["listGroups"],                                                        # 11
        ["deleteTopics", {"topics": [t2]}],                                    # 12
        ["listTopics"],                                                        # 13
    ]
    out = kjs.run("admin", spec(broker, ops=ops))["results"]
    assert all("ok" in r for r in out), [r for r in out if "ok" not in r]
    ends = {p["partition"]: p for p in out[0]["ok"]}
    assert {p: (e["low"], e["high"], e["offset"]) for p, e in ends.items()} == {
        p: ("0", "2", "2") for p in range(4)}
    assert {p["partition"]: p["offset"] for p in out[1]["ok"][0]["partitions"]} == {
        p: "2" for p in range(4)}
    assert {p["partition"]: p["offset"] for p in out[2]["ok"]} == {p: "0" for p in range(4)}
    assert {p["partition"]: p["offset"] for p in out[3]["ok"]} == {p: "2" for p in range(4)}
    listed = {g["groupId"]: g["protocolType"] for g in out[4]["ok"]["groups"]}
    assert listed.get(group) == "consumer"
    described = out[5]["ok"]["groups"][0]
    assert (described["groupId"], described["state"], described["errorCode"]) == (
        group, "Empty", 0)
    assert {p["partition"]: p["offset"] for p in out[7]["ok"][0]["partitions"]}[0] == "1"
    # resetOffsets commits Kafka's EARLIEST sentinel (-2) for the consumer to resolve, on Kafka
    # 4.0 too (tests/reference/test_kafkajs_differential.py)
    assert {p["partition"]: p["offset"] for p in out[9]["ok"][0]["partitions"]} == {
        p: "-2" for p in range(4)}
    assert out[10]["ok"] == [{"groupId": group, "errorCode": 0}]
    assert group not in {g["groupId"] for g in out[11]["ok"]["groups"]}
    assert t2 not in out[13]["ok"] and t1 in out[13]["ok"]
    # the offsets setOffsets/resetOffsets wrote were seen by confluent-kafka before deletion:
    # here, after deleteGroups, the group has no offsets left
    assert set(committed(bs, group, t1, 4).values()) == {-1001}


def test_admin_acls_with_authorizer():
    # ANONYMOUS is a super user so the PLAINTEXT admin may manage ACLs (as in tests/security)
    cfg = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:ANONYMOUS"}
    with EmbeddedBroker(config=cfg) as b:
        topic = name("acl")
        acl = {"resourceType": 2, "resourceName": topic, "resourcePatternType": 3,
               "principal": "User:bob", "host": "*", "operation": 3, "permissionType": 3}
        # ACL_RESOURCE_TYPES.TOPIC=2, RESOURCE_PATTERN_TYPES.LITERAL=3, ACL_OPERATION_TYPES
        # ANY=1 ALL=2 READ=3, ACL_PERMISSION_TYPES ANY=1 ALLOW=3
        flt = {"resourceType": 2, "resourceName": topic, "resourcePatternType": 3,
               "principal": "User:bob", "host": "*", "operation": 1, "permissionType": 1}
        ops = [
            ["createAcls", {"acl": [acl, {**acl, "operation": 2}]}],
            ["describeAcls", flt],
            ["deleteAcls", {"filters": [{**flt, "operation": 3}]}],
            ["describeAcls", flt],
        ]
        out = kjs.run("admin", spec(b, ops=ops))["results"]
        assert out[0] == {"ok": True}, out[0]
        assert "ok" in out[1], out
        got = out[1]["ok"]["resources"]
        assert [(r["resourceName"], sorted(a["operation"] for a in r["acls"])) for r in got] == [
            (topic, [2, 3])]
        assert out[2]["ok"]["filterResponses"][0]["matchingAcls"][0]["operation"] == 3
        left = out[3]["ok"]["resources"]
        assert [a["operation"] for r in left for a in r["acls"]] == [2]


# -- 5. security -----------------------------------------------------------------------------------
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    cfg = {"listeners": "SASL_PLAINTEXT://localhost:0",
           "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
           "sasl.jaas.config": PLAIN_JAAS, **FAST_GROUPS}
    with EmbeddedBroker(str(tmp_path_factory.mktemp("kjs-sasl")), config=cfg) as b:
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers,
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                             "sasl.username": "admin", "sasl.password": "admin-secret"})
        fs = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("s256", ScramCredentialInfo(
                ScramMechanism.SCRAM_SHA_256, 4096), b"s256-pw"),
            UserScramCredentialUpsertion("s512", ScramCredentialInfo(
                ScramMechanism.SCRAM_SHA_512, 8192), b"s512-pw")])
        for f in fs.values():
            f.result(timeout=30)
        yield b


def roundtrip(b_spec: dict[str, Any]) -> list[str]:
    topic = name("sec")
    values = [f"s{i}" for i in range(10)]
    out = kjs.run("produce", {**b_spec, "sends": [
        {"topic": topic, "messages": [{"value": v} for v in values]}]})
    assert all("ok" in r for r in out["results"]), out
    got = kjs.run("consume", {**b_spec, "groupId": name("g"), "topics": [topic], "count": 10})
    return [r["value"] for r in got["records"]]


@pytest.mark.parametrize("mechanism,user,password", [
    ("plain", "alice", "alice-secret"),
    ("scram-sha-256", "s256", "s256-pw"),
    ("scram-sha-512", "s512", "s512-pw")])
def test_sasl_roundtrip(sasl_broker, mechanism, user, password):
    sasl = {"mechanism": mechanism, "username": user, "password": password}
    assert roundtrip(spec(sasl_broker, sasl=sasl)) == [f"s{i}" for i in range(10)]


def test_sasl_principal_authorized_by_acls(tmp_path):
    """alice may not write until admin (a super user) gives her ACLs through KafkaJS."""
    cfg = {"listeners": "SASL_PLAINTEXT://localhost:0", "sasl.enabled.mechanisms": "PLAIN",
           "sasl.jaas.config": PLAIN_JAAS, **FAST_GROUPS,
           "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:admin"}
    with EmbeddedBroker(str(tmp_path), config=cfg) as b:
        topic = name("authz")
        admin = spec(b, sasl={"mechanism": "plain", "username": "admin",
                              "password": "admin-secret"})
        alice = spec(b, retries=0, sasl={"mechanism": "plain", "username": "alice",
                                         "password": "alice-secret"})
        kjs.run("admin", {**admin, "ops": [["createTopics", {"topics": [{"topic": topic}]}]]})
        send = {"sends": [{"topic": topic, "messages": [{"value": "a"}]}]}
        denied = kjs.run("produce", {**alice, **send})["results"][0]["error"]
        assert "TOPIC_AUTHORIZATION_FAILED" in (denied["type"], (denied["cause"] or {}).get("type")), denied
        # WRITE (4) and DESCRIBE (8) on the topic, ALLOW (3), LITERAL (3)
        acls = [{"resourceType": 2, "resourceName": topic, "resourcePatternType": 3,
                 "principal": "User:alice", "host": "*", "operation": op, "permissionType": 3}
                for op in (4, 8)]
        assert kjs.run("admin", {**admin, "ops": [["createAcls", {"acl": acls}]]})[
            "results"] == [{"ok": True}]
        allowed = kjs.run("produce", {**alice, **send})["results"][0]
        assert allowed["ok"][0]["errorCode"] == 0, allowed


def test_sasl_wrong_password_is_an_authentication_error(sasl_broker):
    sasl = {"mechanism": "scram-sha-256", "username": "s256", "password": "nope"}
    out = kjs.run("admin", spec(sasl_broker, sasl=sasl, retries=0, ops=[["listTopics"]]),
                  check=False)
    assert out["error"]["name"] == "KafkaJSSASLAuthenticationError", out


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    from tests.security.certs import make_material

    return make_material(tmp_path_factory.mktemp("kjs-tls"))


@pytest.mark.parametrize("client_auth", ["none", "required"])
def test_ssl_roundtrip(tls, client_auth):
    cfg = {"listeners": "SSL://localhost:0", **FAST_GROUPS,
           **tls.broker_config(client_auth=client_auth, prefix="listener.name.ssl.")}
    ssl = {"ca": str(tls.ca)}
    if client_auth == "required":  # mutual TLS: KafkaJS presents alice's certificate
        ssl |= {"cert": str(tls.clients["alice"].cert), "key": str(tls.clients["alice"].key)}
    with EmbeddedBroker(config=cfg) as b:
        assert roundtrip(spec(b, ssl=ssl)) == [f"s{i}" for i in range(10)]
        if client_auth == "required":  # without a certificate: refused, reported, no hang
            out = kjs.run("admin", spec(b, ssl={"ca": str(tls.ca)}, retries=0,
                                        ops=[["listTopics"]]), check=False)
            assert out["error"]["name"].startswith("KafkaJS"), out


# -- 6. errors -------------------------------------------------------------------------------------
def test_unknown_topic_without_auto_creation(broker):
    topic = name("missing")
    out = kjs.run("produce", spec(broker, allowAutoTopicCreation=False, retries=1,
                                  sends=[{"topic": topic, "messages": [{"value": "x"}]}]))
    err = out["results"][0]["error"]
    assert err["type"] == "UNKNOWN_TOPIC_OR_PARTITION" or (
        err["cause"] or {}).get("type") == "UNKNOWN_TOPIC_OR_PARTITION", err
    listed = kjs.run("admin", spec(broker, ops=[["listTopics"]]))["results"][0]["ok"]
    assert topic not in listed  # nothing was created behind the client's back


def test_message_too_large(broker):
    topic = name("big")
    create_topic(broker.bootstrap_servers, topic, 1)
    out = kjs.run("produce", spec(broker, retries=0, sends=[
        {"topic": topic, "messages": [{"value": "x" * 200_000}]},
        {"topic": topic, "messages": [{"value": "small"}]}]))
    big, small = out["results"]
    assert "MESSAGE_TOO_LARGE" in (big["error"]["type"], (big["error"]["cause"] or {}).get("type"))
    assert small["ok"][0]["baseOffset"] == "0"  # the failure left the partition usable


def test_offset_out_of_range_resets(broker):
    bs = broker.bootstrap_servers
    topic, group = name("oor"), name("g")
    create_topic(bs, topic, 1)
    ck_produce(bs, topic, 5, 1)
    # a committed offset past the end (set by confluent-kafka's AdminClient; KafkaJS's own
    # setOffsets takes ~6 s, test_admin_calls covers it): the consumer gets
    # OFFSET_OUT_OF_RANGE and resets to the earliest offset (fromBeginning), reading all once
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bs})
    fs = admin.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(
        group, [ck.TopicPartition(topic, 0, 1000)])])
    fs[group].result(timeout=30)
    assert committed(bs, group, topic, 1) == {0: 1000}
    out = kjs.run("consume", spec(broker, groupId=group, topics=[topic], count=5))
    assert [r["offset"] for r in out["records"]] == [0, 1, 2, 3, 4]
    assert out["crashes"] == []
