"""The ACL matrix end to end (issue 14): real authentication, the real StandardAuthorizer, real
clients.

One broker for the module: a SASL_PLAINTEXT listener with the PLAIN users admin, alice and bob
(a JAAS line), ``authorizer.class.name=...StandardAuthorizer``, ``super.users=User:admin``,
``allow.everyone.if.no.acl.found=false``. ``admin`` creates topics and ACLs through
confluent-kafka's AdminClient (``create_acls``); then, per API and resource type, a principal
that was granted the ACL (alice) and one that was not (bob) use confluent-kafka, kafka-python,
aiokafka and snakka's ShareConsumer, and each client surfaces exactly Kafka's error code.
Every test uses its own topic, group and transactional-id names, so the ACLs of one test never
decide another's.

The same requests are compared field by field with the reference Kafka's StandardAuthorizer in
tests/reference/test_acl_matrix_reference.py.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from snakka.testing import EmbeddedBroker

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("no_broker_errors")]

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
Op, Perm, RT = AclOperation, AclPermissionType, ResourceType


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(host="127.0.0.1", log_level="INFO", config={
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": JAAS, "authorizer.class.name": STANDARD,
            "super.users": "User:admin", "allow.everyone.if.no.acl.found": "false",
            "auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0",
            "group.share.enable": "true"}) as b:
        yield b


def sec(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


def kp_sec(user: str) -> dict[str, str]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]}


def admin_client(b: EmbeddedBroker, user: str = "admin") -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap_servers, **sec(user)})


def uniq(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def grant(b: EmbeddedBroker, *bindings: AclBinding) -> None:
    admin = admin_client(b)  # held: a collected client cancels its futures
    for f in admin.create_acls(list(bindings), request_timeout=15).values():
        f.result()


def acl(rtype: ResourceType, name: str, op: AclOperation, principal: str = "User:alice", *,
        perm: AclPermissionType = Perm.ALLOW, pattern=ResourcePatternType.LITERAL,
        host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def create_topics(b: EmbeddedBroker, *names: str) -> None:
    admin = admin_client(b)
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(20)


def code_of(exc: KafkaException) -> int:
    return exc.args[0].code()


def produce(b: EmbeddedBroker, user: str, topic: str, n: int = 1, **extra) -> KafkaError | None:
    """The first delivery error of ``n`` records (None: all delivered)."""
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": b.bootstrap_servers, "message.timeout.ms": 10000,
                  **sec(user), **extra})
    for i in range(n):
        p.produce(topic, b"v%d" % i,
                  on_delivery=lambda err, _m: errors.append(err) if err else None)
    p.flush(20)
    return errors[0] if errors else None


def first_consumer_error(c: Consumer, want: Callable[[KafkaError], bool] | None = None,
                         timeout: float = 30) -> KafkaError | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() and (want is None or want(m.error())):
            return m.error()
    return None


# -- Produce -------------------------------------------------------------------------------
def test_produce_needs_write_on_the_topic(broker, caplog):
    t = uniq("prod")
    create_topics(broker, t)
    # bob may see the topic (else librdkafka stops at Metadata), not write it
    grant(broker, acl(RT.TOPIC, t, Op.WRITE), acl(RT.TOPIC, t, Op.DESCRIBE, "User:bob"))
    assert produce(broker, "alice", t, 3) is None
    with caplog.at_level(logging.INFO, logger="snakka.authorizer"):
        err = produce(broker, "bob", t)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # one audit line per denial, in Kafka's words
    lines = [r.getMessage() for r in caplog.records if r.name == "snakka.authorizer"]
    assert any(f"Principal = User:bob is Denied operation = WRITE from host = 127.0.0.1 on "
               f"resource = Topic:LITERAL:{t} for request = Produce" in line for line in lines)
    assert not any("User:alice" in line and "Denied" in line for line in lines)

    # kafka-python: the same code through its future
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, **kp_sec("alice"))
    try:
        kp.send(t, b"kp").get(20)
    finally:
        kp.close()
    # (not idempotent: bob has no WRITE anywhere, so InitProducerId would fail first)
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, enable_idempotence=False,
                       **kp_sec("bob"))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            kp.send(t, b"kp").get(20)
    finally:
        kp.close(1)


def test_idempotent_producer_with_write_on_a_topic_only(broker):
    """Kafka's authorizeByResourceType: IDEMPOTENT_WRITE on the cluster is implied by WRITE on
    any topic; without any WRITE, InitProducerId fails with CLUSTER_AUTHORIZATION_FAILED."""
    t = uniq("idem")
    create_topics(broker, t)
    grant(broker, acl(RT.TOPIC, t, Op.WRITE), acl(RT.TOPIC, t, Op.DESCRIBE, "User:bob"))
    assert produce(broker, "alice", t, 3, **{"enable.idempotence": True}) is None
    try:
        err = produce(broker, "bob", t, 1, **{"enable.idempotence": True})
    except (KafkaException, SystemError) as e:
        # librdkafka raises the fatal error from flush(); when it lands while a delivery
        # callback runs, CPython reports a SystemError whose cause is that KafkaException.
        fatal = e if isinstance(e, KafkaException) else e.__cause__
        assert isinstance(fatal, KafkaException), repr(e)
        err = fatal.args[0]
    assert err is not None
    assert err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED or (
        err.code() == KafkaError._FATAL and "CLUSTER_AUTHORIZATION_FAILED" in err.str()), err


# -- Consume with a group --------------------------------------------------------------------
def _group_consumer(b: EmbeddedBroker, user: str, group: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     **sec(user), **extra})


def _consume_ok(c: Consumer, topic: str, n: int) -> list[bytes]:
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert not m.error(), m.error()
            got.append(m.value())
    c.commit(asynchronous=False)
    return got


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consume_needs_read_on_topic_and_group(broker, protocol):
    """READ on the topic and the group (classic JoinGroup/SyncGroup/OffsetCommit, or KIP-848's
    ConsumerGroupHeartbeat with group.protocol=consumer); missing either: its error."""
    t, g_ok, g_no = uniq("cons"), uniq("g"), uniq("g")
    create_topics(broker, t)
    assert produce(broker, "admin", t, 3) is None
    grant(broker, acl(RT.TOPIC, t, Op.READ), acl(RT.GROUP, g_ok, Op.READ),
          acl(RT.GROUP, g_no, Op.READ, "User:bob"))
    extra = {"group.protocol": protocol} if protocol == "consumer" else {}
    c = _group_consumer(broker, "alice", g_ok, **extra)
    try:
        assert _consume_ok(c, t, 3) == [b"v0", b"v1", b"v2"]
        assert c.committed([TopicPartition(t, 0)], 10)[0].offset == 3
    finally:
        c.close()
    # alice on a group she may not read
    c = _group_consumer(broker, "alice", g_no, **extra)
    try:
        c.subscribe([t])
        err = first_consumer_error(c)
        assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
    finally:
        c.close()
    # bob may read the group, not the topic
    c = _group_consumer(broker, "bob", g_no, **extra)
    try:
        c.subscribe([t])
        err = first_consumer_error(c)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    finally:
        c.close()


def test_kafka_python_and_aiokafka_consumers(broker):
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    t, g = uniq("kpc"), uniq("g")
    create_topics(broker, t)
    assert produce(broker, "admin", t, 2) is None
    grant(broker, acl(RT.TOPIC, t, Op.READ), acl(RT.GROUP, g, Op.READ),
          acl(RT.TOPIC, t, Op.READ, "User:bob"))  # bob: the topic, not the group
    c = KafkaConsumer(t, bootstrap_servers=broker.bootstrap_servers, group_id=g,
                      auto_offset_reset="earliest", consumer_timeout_ms=15000,
                      **kp_sec("alice"))
    try:
        got = []
        for m in c:
            got.append(m.value)
            if len(got) == 2:
                break
        assert got == [b"v0", b"v1"]
    finally:
        c.close()
    c = KafkaConsumer(t, bootstrap_servers=broker.bootstrap_servers, group_id=g,
                      auto_offset_reset="earliest", **kp_sec("bob"))
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            c.poll(10000)
            c.poll(10000)
    finally:
        c.close()

    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import GroupAuthorizationFailedError as AioGroupDenied

    async def bob_joins() -> None:
        ac = AIOKafkaConsumer(t, bootstrap_servers=broker.bootstrap_servers, group_id=g,
                              auto_offset_reset="earliest", **kp_sec("bob"))
        try:
            with pytest.raises(AioGroupDenied):  # from start(): it joins the group
                await ac.start()
                await asyncio.wait_for(ac.getone(), 20)
        finally:
            await ac.stop()

    from tests.integration.helpers import run_async
    run_async(bob_joins())


# -- Transactions -----------------------------------------------------------------------------
def test_transactional_producer_and_send_offsets(broker):
    t, g_ok, g_no = uniq("txn"), uniq("g"), uniq("g")
    tid, tid_bob = uniq("tx"), uniq("tx")
    create_topics(broker, t)
    # TxnOffsetCommit needs READ on the topic of the offsets (Kafka), hence READ and WRITE
    grant(broker, acl(RT.TOPIC, t, Op.WRITE), acl(RT.TOPIC, t, Op.READ),
          acl(RT.TRANSACTIONAL_ID, tid, Op.WRITE),
          acl(RT.GROUP, g_ok, Op.READ), acl(RT.TOPIC, t, Op.WRITE, "User:bob"))
    base = {"bootstrap.servers": broker.bootstrap_servers, "message.timeout.ms": 10000}
    p = Producer({**base, **sec("alice"), "transactional.id": tid})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(t, b"committed")
    meta = Consumer({**base, **sec("alice"), "group.id": g_ok}).consumer_group_metadata()
    p.send_offsets_to_transaction([TopicPartition(t, 0, 1)], meta, 20)
    p.commit_transaction(20)
    # READ on the group is what send_offsets_to_transaction needs (AddOffsetsToTxn)
    p.begin_transaction()
    p.produce(t, b"aborted")
    denied_meta = Consumer({**base, **sec("alice"), "group.id": g_no}).consumer_group_metadata()
    with pytest.raises(KafkaException) as e:
        p.send_offsets_to_transaction([TopicPartition(t, 0, 1)], denied_meta, 20)
    assert code_of(e.value) == KafkaError.GROUP_AUTHORIZATION_FAILED
    p.abort_transaction(20)
    # bob may write the topic but not use a transactional id
    pb = Producer({**base, **sec("bob"), "transactional.id": tid_bob})
    with pytest.raises(KafkaException) as e:
        pb.init_transactions(20)
    assert code_of(e.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


# -- Metadata -----------------------------------------------------------------------------------
def test_metadata_shows_only_describable_topics(broker):
    r, w, d, hidden = uniq("mr"), uniq("mw"), uniq("md"), uniq("mh")
    create_topics(broker, r, w, d, hidden)
    grant(broker, acl(RT.TOPIC, r, Op.READ), acl(RT.TOPIC, w, Op.WRITE),
          acl(RT.TOPIC, d, Op.DESCRIBE))
    topics = admin_client(broker, "alice").list_topics(timeout=10).topics  # synchronous
    assert {r, w, d} <= topics.keys() and hidden not in topics
    bob = admin_client(broker, "bob")
    assert not {r, w, d, hidden} & bob.list_topics(timeout=10).topics.keys()
    alice = admin_client(broker, "alice")
    named = alice.list_topics(topic=hidden, timeout=10).topics[hidden]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    from kafka import KafkaConsumer
    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, **kp_sec("alice"))
    try:
        assert {r, w, d} <= kc.topics() and hidden not in kc.topics()
    finally:
        kc.close()


# -- Create / delete topics -------------------------------------------------------------------
def test_create_topics_on_a_prefix_or_the_cluster_and_delete(broker):
    prefix = uniq("team") + "."
    grant(broker, acl(RT.TOPIC, prefix, Op.CREATE, pattern=ResourcePatternType.PREFIXED),
          acl(RT.TOPIC, prefix, Op.DELETE, pattern=ResourcePatternType.PREFIXED),
          acl(RT.BROKER, "kafka-cluster", Op.CREATE, "User:bob"))
    alice = admin_client(broker, "alice")
    mine, other = prefix + "a", uniq("other")
    fs = alice.create_topics([NewTopic(mine, 1, 1), NewTopic(other, 1, 1)])
    fs[mine].result(20)
    with pytest.raises(KafkaException) as e:
        fs[other].result(20)
    assert code_of(e.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # CREATE on the cluster: any name
    bobs = uniq("bobs")
    bob = admin_client(broker, "bob")
    bob.create_topics([NewTopic(bobs, 1, 1)])[bobs].result(20)
    # DELETE: alice on her prefix only, bob has none
    fs = alice.delete_topics([mine, bobs], operation_timeout=20)
    fs[mine].result(20)
    with pytest.raises(KafkaException) as e:
        fs[bobs].result(20)
    assert code_of(e.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        bob.delete_topics([bobs], operation_timeout=20)[bobs].result(20)
    assert code_of(e.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED


# -- Configs ------------------------------------------------------------------------------------
def test_describe_and_alter_configs(broker):
    t, other = uniq("cfg"), uniq("cfg")
    create_topics(broker, t, other)
    grant(broker, acl(RT.TOPIC, t, Op.ALTER_CONFIGS), acl(RT.TOPIC, other, Op.READ))
    alice = admin_client(broker, "alice")
    res = ConfigResource(RT.TOPIC, t)
    assert "retention.ms" in alice.describe_configs([res])[res].result(20)  # implied
    alter = ConfigResource(RT.TOPIC, t, incremental_configs=[ConfigEntry(
        "retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    alice.incremental_alter_configs([alter])[alter].result(20)
    assert alice.describe_configs([res])[res].result(20)["retention.ms"].value == "123456"
    denied = ConfigResource(RT.TOPIC, other)
    with pytest.raises(KafkaException) as e:
        alice.describe_configs([denied])[denied].result(20)
    assert code_of(e.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    broker_res = ConfigResource(RT.BROKER, "1")
    with pytest.raises(KafkaException) as e:
        alice.describe_configs([broker_res])[broker_res].result(20)
    assert code_of(e.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, **kp_sec("bob"))
    try:
        # kafka-python 3 drops a resource's error code: a denied topic comes back empty
        res = KpConfigResource(ConfigResourceType.TOPIC, t)
        assert kp.describe_configs([res], config_filter="all") == {"topic": {t: {}}}
    finally:
        kp.close()


# -- Groups -------------------------------------------------------------------------------------
def test_list_describe_delete_groups(broker):
    t, g_read, g_del, g_none = uniq("grp"), uniq("g"), uniq("g"), uniq("g")
    create_topics(broker, t)
    admin = admin_client(broker)
    for g in (g_read, g_del, g_none):  # empty groups with committed offsets
        c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": g,
                      **sec("admin")})
        try:
            c.commit(offsets=[TopicPartition(t, 0, 1)], asynchronous=False)
        finally:
            c.close()
    assert {g_read, g_del, g_none} <= {
        x.group_id for x in admin.list_consumer_groups().result(20).valid}
    grant(broker, acl(RT.GROUP, g_read, Op.READ), acl(RT.GROUP, g_del, Op.DELETE))
    alice = admin_client(broker, "alice")
    listed = {x.group_id for x in alice.list_consumer_groups().result(20).valid}
    assert {g_read, g_del} <= listed and g_none not in listed  # DESCRIBE implied
    fs = alice.describe_consumer_groups([g_read, g_none])
    assert fs[g_read].result(20).group_id == g_read
    with pytest.raises(KafkaException) as e:
        fs[g_none].result(20)
    assert code_of(e.value) == KafkaError.GROUP_AUTHORIZATION_FAILED
    fs = alice.delete_consumer_groups([g_del, g_read], request_timeout=20)
    fs[g_del].result(20)
    with pytest.raises(KafkaException) as e:
        fs[g_read].result(20)
    assert code_of(e.value) == KafkaError.GROUP_AUTHORIZATION_FAILED


# -- Patterns, DENY, hosts -----------------------------------------------------------------------
def test_prefixed_allow_deny_wins_and_host_specific_acls(broker):
    prefix = uniq("app") + "."
    ok, denied, here, elsewhere = prefix + "ok", prefix + "no", uniq("h"), uniq("h")
    create_topics(broker, ok, denied, here, elsewhere)
    grant(broker, acl(RT.TOPIC, prefix, Op.WRITE, pattern=ResourcePatternType.PREFIXED),
          acl(RT.TOPIC, denied, Op.WRITE, perm=Perm.DENY),
          acl(RT.TOPIC, here, Op.WRITE, host="127.0.0.1"),
          acl(RT.TOPIC, elsewhere, Op.WRITE, host="10.9.9.9"))
    assert produce(broker, "alice", ok) is None
    assert produce(broker, "alice", here) is None
    for t in (denied, elsewhere):
        err = produce(broker, "alice", t)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, t
    # a DENY for everyone beats alice's ALLOW too
    grant(broker, acl(RT.TOPIC, here, Op.WRITE, "User:*", perm=Perm.DENY))
    err = produce(broker, "alice", here)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


# -- Share groups ---------------------------------------------------------------------------------
def test_share_consumer_needs_read_on_group_and_topic(broker):
    from snakka.client.share_consumer import ShareConsumer
    from snakka.protocol.errors import ErrorCode
    from snakka.protocol.errors import KafkaError as SnakkaError

    t, t_hidden, g, g_no = uniq("share"), uniq("share"), uniq("sg"), uniq("sg")
    create_topics(broker, t, t_hidden)
    admin = admin_client(broker)
    for group in (g, g_no):
        res = ConfigResource(RT.GROUP, group, incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(20)
    assert produce(broker, "admin", t, 3) is None
    # bob: the group and DESCRIBE on the topic (it is in his Metadata), not READ on it
    grant(broker, acl(RT.TOPIC, t, Op.READ), acl(RT.GROUP, g, Op.READ),
          acl(RT.GROUP, g_no, Op.READ, "User:bob"), acl(RT.TOPIC, t, Op.DESCRIBE, "User:bob"))

    def consumer(user: str, group: str) -> ShareConsumer:
        return ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                              "fetch.max.wait.ms": 200, **sec(user)})

    c = consumer("alice", g)
    try:
        c.subscribe([t])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got += c.poll(0.5)
        assert sorted(r.value for r in got) == [b"v0", b"v1", b"v2"]
    finally:
        c.close()
    # bob on t_hidden: not even DESCRIBE, so Metadata refuses it (the Java consumer raises
    # TopicAuthorizationException from poll rather than waiting for the topic forever).
    for user, group, topic, code in (
            ("alice", g_no, t, ErrorCode.GROUP_AUTHORIZATION_FAILED),
            ("bob", g_no, t, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            ("bob", g_no, t_hidden, ErrorCode.TOPIC_AUTHORIZATION_FAILED)):
        c = consumer(user, group)
        try:
            c.subscribe([topic])
            with pytest.raises(SnakkaError) as e:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    c.poll(0.5)
            assert e.value.code == code, (user, e.value)
        finally:
            c.close()
