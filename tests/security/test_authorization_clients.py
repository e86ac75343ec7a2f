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
