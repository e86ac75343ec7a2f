"""Real clients against a broker whose authorizer denies User:ANONYMOUS some actions
(tests/security/authz_support.TableAuthorizer): each client surfaces exactly Kafka's
authorization error, and an allowed principal's traffic is untouched."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from snakka.security.authorizer import AclOperation as Op
from snakka.security.authorizer import ResourceType as RT
from snakka.testing import EmbeddedBroker

from .authz_support import TableAuthorizer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def authz():
    return TableAuthorizer()


@pytest.fixture(scope="module")
def broker(authz):
    with EmbeddedBroker(authorizer=authz, config={"auto.create.topics.enable": "false"}) as b:
        yield b


@pytest.fixture(autouse=True)
def _clean_table(authz):
    authz.clear()
    yield
    authz.clear()


def _create(bs: str, *names: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        f.result(20)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bs: str, topic: str, **extra) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": bs, "message.timeout.ms": 10000, **extra})
    p.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(20)
    return errors[0]


def test_producer_denied_write_gets_topic_authorization_failed(broker, authz):
    bs = broker.bootstrap_servers
    ok, no = _name("ok"), _name("no")
    _create(bs, ok, no)
    authz.deny(Op.WRITE, RT.TOPIC, no)
    assert _produce(bs, ok) is None
    err = _produce(bs, no)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert any(a.operation is Op.WRITE and a.resource_pattern.name == no
               for _p, a in authz.denials())


def test_consumer_denied_read_on_topic_and_group(broker, authz):
    bs = broker.bootstrap_servers
    topic = _name("t")
    _create(bs, topic)
    assert _produce(bs, topic) is None
    group = _name("g")
    authz.deny(Op.READ, RT.GROUP, group)
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        err = None
        for _ in range(50):
            m = c.poll(0.5)
            if m is not None and m.error():
                err = m.error()
                break
        assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
    finally:
        c.close()
    authz.clear()
    # READ denied on the topic only: assign() (no group traffic) and fetch.
    authz.deny(Op.READ, RT.TOPIC, topic)
    from confluent_kafka import TopicPartition
    c = Consumer({"bootstrap.servers": bs, "group.id": _name("g2"),
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        err = None
        for _ in range(50):
            m = c.poll(0.5)
            if m is not None and m.error():
                err = m.error()
                break
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    finally:
        c.close()


def test_metadata_all_topics_hides_undescribable_topics(broker, authz):
    bs = broker.bootstrap_servers
    seen, hidden = _name("seen"), _name("hidden")
    _create(bs, seen, hidden)
    authz.deny(Op.DESCRIBE, RT.TOPIC, hidden)
    admin = AdminClient({"bootstrap.servers": bs})
    topics = admin.list_topics(timeout=10).topics
    assert seen in topics and hidden not in topics
    # Filtering is not an audit event (Kafka: logIfDenied=false for all-topics Metadata).
    assert all(a.resource_pattern.name != hidden or not a.log_if_denied
               for _p, a in authz.denials())
    named = admin.list_topics(topic=hidden, timeout=10).topics[hidden]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_transactional_producer_denied_on_transactional_id(broker, authz):
    bs = broker.bootstrap_servers
    tid = _name("txn")
    authz.deny(Op.WRITE, RT.TRANSACTIONAL_ID, tid)
    p = Producer({"bootstrap.servers": bs, "transactional.id": tid})
    with pytest.raises(KafkaException) as e:
        p.init_transactions(20)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_admin_create_topics_denied_create(broker, authz):
    bs = broker.bootstrap_servers
    ok, no = _name("ct-ok"), _name("ct-no")
    authz.deny(Op.CREATE, RT.CLUSTER).deny(Op.CREATE, RT.TOPIC, no)
    admin = AdminClient({"bootstrap.servers": bs})
    futures = admin.create_topics([NewTopic(n, 1, 1) for n in (ok, no)])
    futures[ok].result(20)
    with pytest.raises(KafkaException) as e:
        futures[no].result(20)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert no not in admin.list_topics(timeout=10).topics


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_admin_describe_and_alter_configs_denied(broker, authz):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    bs = broker.bootstrap_servers
    t = _name("cfg")
    _create(bs, t)
    admin = AdminClient({"bootstrap.servers": bs})
    topic = ConfigResource(ConfigResource.Type.TOPIC, t)
    node = str(broker.broker.services.node_id)
    brk = ConfigResource(ConfigResource.Type.BROKER, node)

    def code_of(future):
        with pytest.raises(KafkaException) as e:
            future.result(20)
        return e.value.args[0].code()

    authz.deny(Op.DESCRIBE_CONFIGS, RT.TOPIC, t).deny(Op.DESCRIBE_CONFIGS, RT.CLUSTER)
    fs = admin.describe_configs([topic])
    assert code_of(fs[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    fs = admin.describe_configs([brk])
    assert code_of(fs[brk]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    authz.clear()
    assert "retention.ms" in admin.describe_configs([topic])[topic].result(20)

    authz.deny(Op.ALTER_CONFIGS, RT.TOPIC, t)
    legacy = ConfigResource(ConfigResource.Type.TOPIC, t, set_config={"retention.ms": "4321"})
    assert code_of(admin.alter_configs([legacy])[legacy]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    incremental = ConfigResource(ConfigResource.Type.TOPIC, t, incremental_configs=[
        ConfigEntry("retention.ms", "4321", incremental_operation=AlterConfigOpType.SET)])
    assert code_of(admin.incremental_alter_configs([incremental])[incremental]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert broker.broker.metadata.topics[t].configs.get("retention.ms") is None
    authz.clear()
    admin.incremental_alter_configs([incremental])[incremental].result(20)
    assert broker.broker.metadata.topics[t].configs.get("retention.ms") == "4321"


def test_admin_describe_consumer_groups_denied(broker, authz):
    bs = broker.bootstrap_servers
    topic = _name("dg")
    _create(bs, topic)
    group = _name("dg-g")
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": "consumer"})
    try:
        c.subscribe([topic])
        for _ in range(40):  # until the member has joined (its first poll sends the heartbeat)
            c.poll(0.25)
            if c.assignment():
                break
        admin = AdminClient({"bootstrap.servers": bs})
        (d,) = admin.describe_consumer_groups([group]).values()
        assert d.result(20).group_id == group
        authz.deny(Op.DESCRIBE, RT.GROUP, group)
        (d,) = admin.describe_consumer_groups([group]).values()
        with pytest.raises(KafkaException) as e:
            d.result(20)
        assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        authz.clear()
        c.close()


def test_kafka_python_describe_configs_denied(broker, authz):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    bs = broker.bootstrap_servers
    t = _name("kp-cfg")
    _create(bs, t)
    authz.deny(Op.DESCRIBE_CONFIGS, RT.TOPIC, t)
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        # kafka-python 3 reads configs and drops a resource's error code: a denied topic comes
        # back without any config (Kafka answers it with none)
        res = ConfigResource(ConfigResourceType.TOPIC, t)
        assert admin.describe_configs([res], config_filter="all") == {"topic": {t: {}}}
        authz.clear()
        got = admin.describe_configs([res], config_filter="all")["topic"][t]
        assert "retention.ms" in got
    finally:
        admin.close()
