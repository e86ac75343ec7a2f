"""Kafka's cap on one admin operation's metadata records (snakka.limits.MAX_RECORDS_PER_USER_OP,
10,000), seen by confluent-kafka's AdminClient and kafka-python's admin: a CreateTopics or
CreateAcls over it is refused whole with POLICY_VIOLATION and creates nothing; a
CreatePartitions topic that overflows it fails with UNKNOWN_SERVER_ERROR, as on Kafka 4.0. The same
requests against the reference Kafka 4.0: tests/reference/test_user_op_records_differential.py.
"""

from __future__ import annotations

import pytest

from .helpers import ck_admin, run_async

MESSAGE = "Unable to perform excessively large batch operation."


@pytest.fixture
def bootstrap(snakka_broker_factory) -> str:
    return snakka_broker_factory(config={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true"}).bootstrap_servers


def _errors(futures: dict) -> dict:
    out = {}
    for key, f in futures.items():
        try:
            f.result(timeout=120)
            out[key] = None
        except Exception as e:  # noqa: BLE001 - KafkaException carrying a KafkaError
            out[key] = e.args[0]
    return out


def test_confluent_admin_create_topics_over_the_cap_creates_nothing(bootstrap):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    admin = ck_admin(bootstrap)
    errors = _errors(admin.create_topics(
        [NewTopic("uop-a", 5_000, 1), NewTopic("uop-b", 5_000, 1)],
        operation_timeout=120, request_timeout=120))
    assert {k: (e.code(), e.str()) for k, e in errors.items()} == {
        t: (KafkaError.POLICY_VIOLATION, MESSAGE) for t in ("uop-a", "uop-b")}
    assert not {"uop-a", "uop-b"} & set(admin.list_topics(timeout=30).topics)
    # more than 10,000 partitions asked for in all: refused before anything else (Kafka 4.0)
    errors = _errors(admin.create_topics([NewTopic(f"uop-{i}", 3_334, 1) for i in range(3)],
                                         request_timeout=120))
    assert {e.str() for e in errors.values()} == {
        "Excessively large number of partitions per request."}
    # one topic of 10,000 partitions is 10,001 records; with validate_only too
    errors = _errors(admin.create_topics([NewTopic("uop-a", 10_000, 1)], validate_only=True,
                                         request_timeout=120))
    assert errors["uop-a"].code() == KafkaError.POLICY_VIOLATION
    # the names were not kept reserved: a topic within the cap is created with one of them
    assert _errors(admin.create_topics([NewTopic("uop-a", 3, 1)], request_timeout=60)) == {
        "uop-a": None}
    assert len(admin.list_topics("uop-a", timeout=30).topics["uop-a"].partitions) == 3


def test_kafka_python_create_partitions_and_acls_over_the_cap(bootstrap):
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        KafkaAdminClient,
        NewPartitions,
        NewTopic,
        ResourcePattern,
        ResourceType,
    )
    from kafka.errors import PolicyViolationError, UnknownError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    try:
        admin.create_topics([NewTopic("uop-grow", 1, 1)])
        # 10,001 new partitions: Kafka 4.0's controller answers the topic UNKNOWN_SERVER_ERROR
        with pytest.raises(UnknownError):
            admin.create_partitions({"uop-grow": NewPartitions(10_002)})
        assert len(admin.describe_topics(["uop-grow"])[0]["partitions"]) == 1  # not grown
        admin.create_partitions({"uop-grow": NewPartitions(3)})
        assert len(admin.describe_topics(["uop-grow"])[0]["partitions"]) == 3

        def acl(i: int) -> ACL:
            return ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                       ResourcePattern(ResourceType.TOPIC, f"uop-{i}"))
        result = admin.create_acls([acl(i) for i in range(10_001)])
        assert not result["succeeded"]
        # kafka-python lists the error class of each failed creation
        assert set(result["failed"]) == {PolicyViolationError}
        assert len(result["failed"]) == 10_001
        result = admin.create_acls([acl(i) for i in range(3)])
        assert len(result["succeeded"]) == 3 and not result["failed"]
    finally:
        admin.close()


def test_metadata_auto_creation_over_the_cap_creates_nothing(snakka_broker_factory):
    """Kafka 4.0's broker sends the topics one Metadata request auto-creates as one CreateTopics
    to its controller: over 10,000 records (here 2 topics of num.partitions=5,000: 10,002) none
    is created; the names are answered UNKNOWN_TOPIC_OR_PARTITION."""
    from snakka.client.connection import KafkaConnection, parse_bootstrap
    from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic

    b = snakka_broker_factory(config={"auto.create.topics.enable": "true",
                                      "num.partitions": "5000"})
    names = ["uop-auto-1", "uop-auto-2"]

    async def ask(allow: bool):
        async with KafkaConnection(*parse_bootstrap(b.bootstrap_servers)) as conn:
            return await conn.send(MetadataRequest(
                topics=[MetadataRequestTopic(name=n) for n in names],
                allow_auto_topic_creation=allow))

    resp = run_async(ask(True))
    assert [(t.name, t.error_code) for t in resp.topics] == [(n, 3) for n in names]
    resp = run_async(ask(False))  # nothing was created meanwhile
    assert [(t.name, t.error_code) for t in resp.topics] == [(n, 3) for n in names]
