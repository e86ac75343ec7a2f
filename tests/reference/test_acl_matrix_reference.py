"""The ACL matrix against the reference Kafka 4.0 with its StandardAuthorizer (issue 14).

Both brokers serve a SASL_PLAINTEXT listener with the PLAIN users admin, alice and bob, the
StandardAuthorizer, ``super.users=User:admin`` and ``allow.everyone.if.no.acl.found=false``
(Kafka's default). ``admin`` creates the topics, groups (by committing offsets) and a partial
set of ACLs for alice, with raw CreateAcls requests; then the same sequence of raw requests
runs as ``bob`` (no ACLs: every check denies) and as ``alice`` (some allowed, some denied: READ
vs WRITE vs DESCRIBE vs DELETE vs ALTER on topics, PREFIXED ACLs, a DENY beating a prefixed
ALLOW, a host-specific ACL for another host, CREATE on a topic prefix, READ/DESCRIBE/DELETE on
groups, WRITE on a transactional id, nothing on the cluster). Every response is compared field
by field (shape.py: every error code, which fields are null/empty/filled, and the names of
listed topics and groups, so a topic Metadata shows or hides is compared too), and the
authorized-operations bit sets (which shape.py leaves out) are compared by value.

The reference broker is this module's own (the package's has no SASL listener and no
authorizer): one JVM start (~10-25 s, ~1 GB). Skipped with the one reason when the reference
distribution or java is missing.
"""

from __future__ import annotations

import asyncio
import re
import socket
import uuid
from collections.abc import Iterator

import pytest
from reference_kafka import ReferenceKafka

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.messages import alter_configs_request as legacy_alter
from snakka.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from snakka.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from snakka.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from snakka.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from snakka.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from snakka.protocol.messages.delete_groups_request import DeleteGroupsRequest
from snakka.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from snakka.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from snakka.protocol.messages.describe_cluster_request import DescribeClusterRequest
from snakka.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest
from snakka.protocol.messages.join_group_request import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
)
from snakka.protocol.messages.list_groups_request import ListGroupsRequest
from snakka.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from snakka.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.testing.embedded import EmbeddedBroker

from .conftest import SNAKKA_CONFIG
from .differential import RETRIABLE, Peer, assert_same_shape, common_versions, run_both
from .shape import shape
from .test_differential import batch

R = uuid.uuid4().hex[:8]
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")


def sasl(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def secured(kafka_distribution) -> Iterator[tuple[str, str]]:
    """(the reference Kafka's SASL_PLAINTEXT bootstrap, snakka's)."""
    def extra(p: int) -> dict[str, str]:  # p: the client port (controller on p + 1)
        q = _free_port()
        while q in (p, p + 1):
            q = _free_port()
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{p + 1},"
                         f"SASL_PLAINTEXT://127.0.0.1:{q}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{p + 1},"
                                    f"SASL_PLAINTEXT://127.0.0.1:{q}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                                              "SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": STANDARD,
            # kafka-ref.sh's PLAINTEXT and controller listeners (its probe) are ANONYMOUS
            "super.users": "User:ANONYMOUS;User:admin",
            "allow.everyone.if.no.acl.found": "false",
        }

    kafka = ReferenceKafka(extra)
    try:
        kafka.start()
        with EmbeddedBroker(host="127.0.0.1", config={
                **SNAKKA_CONFIG, "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
                "authorizer.class.name": STANDARD, "super.users": "User:admin",
                "allow.everyone.if.no.acl.found": "false"}) as b:
            sasl_listener = kafka.extra["listeners"].rsplit(",", 1)[1]  # SASL_PLAINTEXT://h:q
            yield sasl_listener.split("://", 1)[1], b.bootstrap_servers
    finally:
        kafka.stop()


@pytest.fixture(scope="module")
def sasl_versions(secured) -> dict[int, int]:
    async def advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
        host, port = parse_bootstrap(bootstrap)
        conn = await KafkaConnection(host, port, config=sasl("admin")).connect()
        try:
            return dict(conn.versions)
        finally:
            await conn.close()
    return common_versions(asyncio.run(advertised(secured[0])),
                           asyncio.run(advertised(secured[1])))


# -- names ---------------------------------------------------------------------------------
def t(what: str) -> str:
    return f"m{R}-{what}"


def g(what: str) -> str:
    return f"g{R}-{what}"


def x(what: str) -> str:
    return f"x{R}-{what}"


TOPICS = ["read", "write", "none", "desc", "del", "alter", "p.a", "p.denied", "host", "hostok"]
GROUPS = ["ok", "desc", "del", "no"]

# ACL codes: resource TOPIC=2 GROUP=3 CLUSTER=4 TRANSACTIONAL_ID=5; pattern LITERAL=3
# PREFIXED=4; operation ALL=2 READ=3 WRITE=4 CREATE=5 DELETE=6 ALTER=7 DESCRIBE=8
# DESCRIBE_CONFIGS=10 ALTER_CONFIGS=11; permission DENY=2 ALLOW=3.
TOPIC, GROUP, TXN = 2, 3, 5
LITERAL, PREFIXED = 3, 4
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, ALTER_CONFIGS = 2, 3, 4, 5, 6, 7, 8, 11


def acl(rtype: int, name: str, op: int, *, pattern: int = LITERAL, perm: int = 3,
        host: str = "*", principal: str = "User:alice") -> AclCreation:
    return AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
                       principal=principal, host=host, operation=op, permission_type=perm)


ALICE_ACLS = [
    acl(TOPIC, t("read"), READ),
    acl(TOPIC, t("write"), WRITE),
    acl(TOPIC, t("desc"), DESCRIBE),
    acl(TOPIC, t("del"), DELETE),
    acl(TOPIC, t("alter"), ALTER),
    acl(TOPIC, t("alter"), ALTER_CONFIGS),
    acl(TOPIC, t("p."), ALL, pattern=PREFIXED),
    acl(TOPIC, t("p.denied"), WRITE, perm=2),  # DENY beats the prefixed ALLOW ALL
    acl(TOPIC, t("new."), CREATE, pattern=PREFIXED),
    acl(TOPIC, t("host"), READ, host="10.9.9.9"),  # another host than the test's
    acl(TOPIC, t("hostok"), READ, host="127.0.0.1"),
    acl(GROUP, g("ok"), READ),
    acl(GROUP, g("desc"), DESCRIBE),
    acl(GROUP, g("del"), DELETE),
    acl(TXN, x("ok"), WRITE),
]


async def setup(p: Peer) -> None:
    """As admin (a super user): topics, groups with committed offsets, alice's ACLs."""
    for name in TOPICS:
        await p.create_topic(t(name))
    resp = await p.send(CreateAclsRequest(creations=ALICE_ACLS))
    assert all(r.error_code == 0 for r in resp.results), (p.name, resp)
    await p.send(ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[TopicProduceData(
        name=t(n), partition_data=[PartitionProduceData(index=0, records=batch(3))])
        for n in ("read", "del")]))
    for name in GROUPS:
        await p.until(None, lambda name=name: FindCoordinatorRequest(
            key=g(name), key_type=0, coordinator_keys=[g(name)]),
            lambda r: all(c.error_code == 0 for c in r.coordinators))
        await p.until(None, lambda name=name: OffsetCommitRequest(
            group_id=g(name), generation_id_or_member_epoch=-1, member_id="", topics=[
                OffsetCommitRequestTopic(name=t("read"), partitions=[
                    OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]),
            lambda r: r.topics[0].partitions[0].error_code not in RETRIABLE)
    await p.until(None, lambda: FindCoordinatorRequest(
        key=x("ok"), key_type=1, coordinator_keys=[x("ok")]),
        lambda r: all(c.error_code == 0 for c in r.coordinators))


def _produce(*topics: str) -> ProduceRequest:
    return ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[TopicProduceData(
        name=name, partition_data=[PartitionProduceData(index=0, records=batch(1))])
        for name in topics])


def _fetch(*topics: str) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[FetchTopic(topic=name, partitions=[
            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20,
                           current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)])
            for name in topics], forgotten_topics_data=[], rack_id="")


def _list_offsets(*topics: str) -> ListOffsetsRequest:
    return ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(name=name, partitions=[
        ListOffsetsPartition(partition_index=0, timestamp=-1)]) for name in topics])


def _commit(group: str, *topics: str) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                               topics=[OffsetCommitRequestTopic(name=name, partitions=[
                                   OffsetCommitRequestPartition(partition_index=0,
                                                                committed_offset=1)])
                                   for name in topics])


def _join(group: str) -> JoinGroupRequest:
    return JoinGroupRequest(group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                            member_id="", protocol_type="consumer", protocols=[
                                JoinGroupRequestProtocol(name="range", metadata=b"")])


def _add_partitions(tid: str, pid: int, epoch: int, *topics: str) -> AddPartitionsToTxnRequest:
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
            AddPartitionsToTxnTopic(name=name, partitions=[0]) for name in topics])


def _describe_configs(p: Peer, *topics: str) -> DescribeConfigsRequest:
    return DescribeConfigsRequest(resources=[
        *(DescribeConfigsResource(resource_type=2, resource_name=name,
                                  configuration_keys=["retention.ms"]) for name in topics),
        DescribeConfigsResource(resource_type=4, resource_name=str(p.node_id),
                                configuration_keys=["num.partitions"])])


def _create_topics(*topics: str) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])
        for name in topics], timeout_ms=30000, validate_only=False)


async def matrix(p: Peer) -> None:
    """The compared requests, as one principal (bob first: nothing changes; then alice)."""
    md = p.version(3)
    await p.ask("metadata_all", MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=True),
        version=md)
    await p.ask("metadata_named", MetadataRequest(topics=[MetadataRequestTopic(name=t(n)) for n in (
        "read", "write", "none", "desc", "p.a", "p.denied", "host", "hostok", "p.nosuch",
        "nosuch")], allow_auto_topic_creation=False, include_topic_authorized_operations=True),
        version=md)
    await p.ask("metadata_v9", MetadataRequest(topics=[MetadataRequestTopic(name=t(n)) for n in (
        "read", "none")], allow_auto_topic_creation=False), version=9)
    await p.ask("produce", _produce(*map(t, ("write", "read", "none", "p.a", "p.denied",
                                             "nosuch", "p.nosuch"))))
    await p.ask("fetch_v12", _fetch(*map(t, ("read", "write", "none", "host", "hostok"))),
                version=12)
    await p.ask("list_offsets", _list_offsets(*map(t, ("read", "write", "none", "desc",
                                                       "nosuch"))))
    await p.ask("find_coordinator", FindCoordinatorRequest(
        key=g("ok"), key_type=0, coordinator_keys=[g("ok"), g("no")]))
    await p.ask("find_txn_coordinator", FindCoordinatorRequest(
        key=x("ok"), key_type=1, coordinator_keys=[x("ok"), x("no")]))
    await p.ask("find_coordinator_v2", FindCoordinatorRequest(key=g("no"), key_type=0),
                version=2)
    await p.ask("commit_ok_group", _commit(g("ok"), t("read"), t("write"), t("nosuch")))
    await p.ask("commit_no_group", _commit(g("no"), t("read")))
    await p.ask("offset_fetch", OffsetFetchRequest(groups=[
        OffsetFetchRequestGroup(group_id=g("ok"), topics=[
            OffsetFetchRequestTopics(name=t(n), partition_indexes=[0])
            for n in ("read", "write", "none")]),
        OffsetFetchRequestGroup(group_id=g("desc"), topics=None),
        OffsetFetchRequestGroup(group_id=g("no"), topics=None)]))
    await p.ask("offset_fetch_v7", OffsetFetchRequest(group_id=g("ok"), topics=None), version=7)
    await p.ask("offset_fetch_v7_denied", OffsetFetchRequest(group_id=g("no"), topics=None),
                version=7)
    await p.ask("join_ok", _join(g("ok")))
    await p.ask("join_no", _join(g("no")))
    await p.ask("describe_groups", DescribeGroupsRequest(
        groups=[g(n) for n in GROUPS], include_authorized_operations=True))
    await p.ask("list_groups", ListGroupsRequest(states_filter=[], types_filter=[]))
    await p.ask("list_groups_v2", ListGroupsRequest(), version=2)
    # (ask_ready: Kafka's producer-id manager and transaction coordinator load in the background)
    await p.ask_ready("init_idempotent", InitProducerIdRequest(transactional_id=None,
                                                         transaction_timeout_ms=60000))
    await p.ask("init_txn_no", InitProducerIdRequest(transactional_id=x("no"),
                                                     transaction_timeout_ms=60000))
    init = await p.ask_ready("init_txn_ok", InitProducerIdRequest(transactional_id=x("ok"),
                                                            transaction_timeout_ms=60000))
    pid, epoch = max(init.producer_id, 0), max(init.producer_epoch, 0)
    await p.ask("add_partitions_denied_topic", _add_partitions(
        x("ok"), pid, epoch, t("write"), t("read")), version=3)
    await p.ask("add_partitions_denied_txn", _add_partitions(x("no"), 0, 0, t("write")),
                version=3)
    await p.ask("add_offsets_denied_group", AddOffsetsToTxnRequest(
        transactional_id=x("ok"), producer_id=pid, producer_epoch=epoch, group_id=g("no")),
        version=3)
    await p.ask("create_topics", _create_topics(t("new.a"), t("other"), t("p.created")))
    await p.ask("describe_configs", _describe_configs(p, t("read"), t("alter"), t("p.a"),
                                                      t("nosuch")))
    await p.ask("alter_configs", legacy_alter.AlterConfigsRequest(resources=[
        *(legacy_alter.AlterConfigsResource(resource_type=2, resource_name=t(n), configs=[
            legacy_alter.AlterableConfig(name="retention.ms", value="200000")])
          for n in ("alter", "read")),
        legacy_alter.AlterConfigsResource(resource_type=4, resource_name="", configs=[
            legacy_alter.AlterableConfig(name="log.retention.ms", value="600000")])],
        validate_only=True))
    await p.ask("incremental_alter_configs", IncrementalAlterConfigsRequest(resources=[
        AlterConfigsResource(resource_type=2, resource_name=t(n), configs=[
            AlterableConfig(name="retention.ms", config_operation=0, value="300000")])
        for n in ("alter", "read", "p.a")], validate_only=False))
    await p.ask("delete_records", DeleteRecordsRequest(topics=[
        DeleteRecordsTopic(name=t(n), partitions=[DeleteRecordsPartition(partition_index=0,
                                                                         offset=1)])
        for n in ("del", "read")], timeout_ms=30000))
    await p.ask("create_partitions", CreatePartitionsRequest(topics=[
        CreatePartitionsTopic(name=t(n), count=2, assignments=None)
        for n in ("alter", "read", "nosuch")], timeout_ms=30000, validate_only=True))
    await p.ask("describe_cluster", DescribeClusterRequest(
        include_cluster_authorized_operations=True))
    await p.ask("delete_groups", DeleteGroupsRequest(groups_names=[g(n) for n in GROUPS]))
    await p.ask("delete_topics", DeleteTopicsRequest(topics=[
        DeleteTopicState(name=t(n)) for n in ("del", "read", "p.nosuch", "nosuch")],
        timeout_ms=30000))


def _authorized_ops(peer: Peer) -> dict[str, object]:
    """The authorized-operations bit sets (shape.py ignores their values)."""
    r = peer.responses
    return {
        "metadata_all": sorted((x.name, x.topic_authorized_operations)
                               for x in r["metadata_all"].topics),
        "metadata_named": sorted((x.name, x.topic_authorized_operations)
                                 for x in r["metadata_named"].topics),
        "describe_groups": sorted((x.group_id, x.authorized_operations)
                                  for x in r["describe_groups"].groups),
        "describe_cluster": r["describe_cluster"].cluster_authorized_operations,
    }


# A few of Kafka's answers, so the matrix cannot pass by everything failing alike: (label,
# shape path after the label) -> error code, per principal.
SPOT_CHECKS = {
    "alice": {
        ("produce", "responses['{write}'].partition_responses[0].error_code"): "0",
        ("produce", "responses['{read}'].partition_responses[0].error_code"): "29",
        ("produce", "responses['{p.denied}'].partition_responses[0].error_code"): "29",
        ("fetch_v12", "responses['{host}'].partitions[0].error_code"): "29",
        ("fetch_v12", "responses['{hostok}'].partitions[0].error_code"): "0",
        ("init_idempotent", "error_code"): "0",
        ("create_topics", "topics['{new.a}'].topic_config_error_code"): "29",
        ("delete_groups", "results['{g:del}'].error_code"): "0",
    },
    "bob": {
        ("init_idempotent", "error_code"): "31",
        ("init_txn_ok", "error_code"): "53",
        ("join_ok", "error_code"): "30",
        ("alter_configs", "responses[''].error_code"): "31",
    },
}


def _spot(path: str) -> str:
    return re.sub(r"\{(g:)?([^}]*)\}", lambda m: (g if m.group(1) else t)(m.group(2)), path)


@pytest.fixture(scope="module")
def prepared(secured, sasl_versions) -> tuple[str, str]:
    run_both(secured, sasl_versions, setup, config=sasl("admin"))
    return secured


@pytest.mark.parametrize("user", ["bob", "alice"])
def test_acl_matrix_against_the_standard_authorizer(prepared, sasl_versions, user):
    kafka, snakka = run_both(prepared, sasl_versions, matrix, config=sasl(user))
    for (label, path), code in SPOT_CHECKS[user].items():
        assert shape(kafka.responses[label], label)[f"{label}.{_spot(path)}"] == code
    assert_same_shape(kafka, snakka)
    assert _authorized_ops(snakka) == _authorized_ops(kafka)
