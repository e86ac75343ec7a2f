"""Raw protocol requests against a broker whose TableAuthorizer denies User:ANONYMOUS one
action at a time: each API answers exactly Kafka's error code for the denial, and the same
request succeeds once the denial is lifted (tests/security/authz_support.py)."""

from __future__ import annotations

import uuid

import pytest
from integration.helpers import ck_create_topic, raw_connect, run_async  # tests/ is on sys.path

from snakka.protocol.errors import ErrorCode as E
from snakka.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from snakka.protocol.messages.describe_cluster_request import DescribeClusterRequest
from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest
from snakka.protocol.messages.list_groups_request import ListGroupsRequest
from snakka.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.primitives import ZERO_UUID
from snakka.security.authorizer import (
    SUPPORTED_OPERATIONS,
    operations_bit_field,
)
from snakka.security.authorizer import (
    AclOperation as Op,
)
from snakka.security.authorizer import (
    ResourceType as RT,
)
from snakka.testing import EmbeddedBroker

from .authz_support import TableAuthorizer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def authz():
    return TableAuthorizer()


@pytest.fixture(scope="module")
def broker(authz):
    with EmbeddedBroker(authorizer=authz) as b:
        yield b


@pytest.fixture(autouse=True)
def _clean_table(authz):
    authz.clear()
    yield
    authz.clear()


def _send(broker, req, version=None):
    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            return await conn.send(req, version)
        finally:
            await conn.close()
    return run_async(go())


def _topic(broker) -> str:
    name = f"m-{uuid.uuid4().hex[:8]}"
    ck_create_topic(broker.bootstrap_servers, name, 1)
    return name


def _both(broker, authz, req, code_of, denied_code, deny, version=None):
    """Denied: ``denied_code``; allowed: NONE (``code_of`` reads the code)."""
    authz.deny(*deny)
    assert code_of(_send(broker, req, version)) == denied_code
    authz.clear()
    assert code_of(_send(broker, req, version)) == E.NONE


def test_list_offsets_needs_describe_on_topic(broker, authz):
    t = _topic(broker)
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsTopic(
        name=t, partitions=[ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                 timestamp=-1)])])
    _both(broker, authz, req, lambda r: r.topics[0].partitions[0].error_code,
          E.TOPIC_AUTHORIZATION_FAILED, (Op.DESCRIBE, RT.TOPIC, t))


def test_delete_records_needs_delete_on_topic(broker, authz):
    t = _topic(broker)
    req = DeleteRecordsRequest(timeout_ms=5000, topics=[DeleteRecordsTopic(
        name=t, partitions=[DeleteRecordsPartition(partition_index=0, offset=0)])])
    _both(broker, authz, req, lambda r: r.topics[0].partitions[0].error_code,
          E.TOPIC_AUTHORIZATION_FAILED, (Op.DELETE, RT.TOPIC, t))


def test_find_coordinator_group_and_transaction_keys(broker, authz):
    req = FindCoordinatorRequest(key_type=0, coordinator_keys=["g1"])
    _both(broker, authz, req, lambda r: r.coordinators[0].error_code,
          E.GROUP_AUTHORIZATION_FAILED, (Op.DESCRIBE, RT.GROUP, "g1"))
    req = FindCoordinatorRequest(key_type=1, coordinator_keys=["tx1"])
    _both(broker, authz, req, lambda r: r.coordinators[0].error_code,
          E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, (Op.DESCRIBE, RT.TRANSACTIONAL_ID, "tx1"))
    # v3: the single-key form answers the error at the top level
    req = FindCoordinatorRequest(key="g1", key_type=0)
    _both(broker, authz, req, lambda r: r.error_code, E.GROUP_AUTHORIZATION_FAILED,
          (Op.DESCRIBE, RT.GROUP, "g1"), version=3)


def test_init_producer_id_idempotent_and_transactional(broker, authz):
    idem = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                 producer_id=-1, producer_epoch=-1)
    # IDEMPOTENT_WRITE denied but WRITE on some topic allowed: still fine (Kafka 4.0)
    authz.deny(Op.IDEMPOTENT_WRITE, RT.CLUSTER)
    assert _send(broker, idem).error_code == E.NONE
    authz.deny(Op.WRITE, RT.TOPIC)  # ... and no topic is writable: refused
    assert _send(broker, idem).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    authz.clear()
    txn = InitProducerIdRequest(transactional_id="tx-ip", transaction_timeout_ms=60000,
                                producer_id=-1, producer_epoch=-1)
    _both(broker, authz, txn, lambda r: r.error_code, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
          (Op.WRITE, RT.TRANSACTIONAL_ID, "tx-ip"))


def test_list_groups_filters_without_cluster_describe(broker, authz):
    for g in ("lg-a", "lg-b"):
        r = _send(broker, FindCoordinatorRequest(key_type=0, coordinator_keys=[g]))
        assert r.coordinators[0].error_code == 0
    from snakka.protocol.messages.offset_commit_request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    t = _topic(broker)
    for g in ("lg-a", "lg-b"):  # simple-consumer commits make the groups exist
        r = _send(broker, OffsetCommitRequest(
            group_id=g, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=[OffsetCommitRequestTopic(name=t, partitions=[OffsetCommitRequestPartition(
                partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                committed_metadata="")])]), 8)
        assert r.topics[0].partitions[0].error_code == 0
    names = lambda: {g.group_id for g in _send(broker, ListGroupsRequest()).groups}  # noqa: E731
    assert {"lg-a", "lg-b"} <= names()
    authz.deny(Op.DESCRIBE, RT.CLUSTER).deny(Op.DESCRIBE, RT.GROUP, "lg-b")
    got = names()
    assert "lg-a" in got and "lg-b" not in got
    assert all(not a.log_if_denied for _p, a in authz.denials())  # filtering: not audited
    # DESCRIBE on the cluster lists every group
    authz.clear()
    authz.deny(Op.DESCRIBE, RT.GROUP, "lg-b")
    assert {"lg-a", "lg-b"} <= names()
    # DescribeGroups: the denied group answers GROUP_AUTHORIZATION_FAILED
    r = _send(broker, DescribeGroupsRequest(groups=["lg-a", "lg-b"],
                                            include_authorized_operations=True))
    codes = {g.group_id: g.error_code for g in r.groups}
    assert codes == {"lg-a": 0, "lg-b": E.GROUP_AUTHORIZATION_FAILED}
    ops = {g.group_id: g.authorized_operations for g in r.groups}
    assert ops["lg-a"] == operations_bit_field(SUPPORTED_OPERATIONS[RT.GROUP])
    # OffsetCommit denied on the group / on the topic
    authz.clear()
    authz.deny(Op.READ, RT.GROUP, "lg-a")
    req = OffsetCommitRequest(
        group_id="lg-a", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[OffsetCommitRequestTopic(name=t, partitions=[OffsetCommitRequestPartition(
            partition_index=0, committed_offset=0, committed_leader_epoch=-1,
            committed_metadata="")])])
    assert _send(broker, req, 8).topics[0].partitions[0].error_code == \
        E.GROUP_AUTHORIZATION_FAILED
    authz.clear()
    authz.deny(Op.READ, RT.TOPIC, t)
    assert _send(broker, req, 8).topics[0].partitions[0].error_code == \
        E.TOPIC_AUTHORIZATION_FAILED


def test_metadata_named_topics_auto_create_and_authorized_operations(broker, authz):
    t = _topic(broker)
    req = MetadataRequest(topics=[MetadataRequestTopic(name=t)],
                          allow_auto_topic_creation=False,
                          include_topic_authorized_operations=True)
    r = _send(broker, req)
    assert r.topics[0].error_code == 0
    assert r.topics[0].topic_authorized_operations == \
        operations_bit_field(SUPPORTED_OPERATIONS[RT.TOPIC])
    authz.deny(Op.WRITE, RT.TOPIC, t)
    ops = _send(broker, req).topics[0].topic_authorized_operations
    assert ops == operations_bit_field([o for o in SUPPORTED_OPERATIONS[RT.TOPIC]
                                        if o is not Op.WRITE])
    authz.clear()
    authz.deny(Op.DESCRIBE, RT.TOPIC, t)
    (mt,) = _send(broker, req).topics
    assert (mt.error_code, mt.partitions) == (E.TOPIC_AUTHORIZATION_FAILED, [])
    # auto-creation needs CREATE on the cluster or on the topic
    authz.clear()
    authz.deny(Op.CREATE, RT.CLUSTER).deny(Op.CREATE, RT.TOPIC, "auto-no")
    r = _send(broker, MetadataRequest(topics=[MetadataRequestTopic(name="auto-no"),
                                              MetadataRequestTopic(name="auto-yes")],
                                      allow_auto_topic_creation=True))
    codes = {x.name: x.error_code for x in r.topics}
    assert codes["auto-no"] == E.TOPIC_AUTHORIZATION_FAILED
    assert codes["auto-yes"] in (0, E.LEADER_NOT_AVAILABLE)
    assert "auto-no" not in broker.broker.metadata.topics


def test_describe_cluster_authorized_operations(broker, authz):
    req = DescribeClusterRequest(include_cluster_authorized_operations=True)
    assert _send(broker, req).cluster_authorized_operations == \
        operations_bit_field(SUPPORTED_OPERATIONS[RT.CLUSTER])
    authz.deny(Op.DESCRIBE, RT.CLUSTER)
    assert _send(broker, req).cluster_authorized_operations == 0
    authz.clear()
    assert _send(broker, DescribeClusterRequest(
        include_cluster_authorized_operations=False)).cluster_authorized_operations == -2**31


# -- CreateTopics -------------------------------------------------------------------------------

def _create_req(*names, validate_only=False):
    from snakka.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
    return CreateTopicsRequest(topics=[CreatableTopic(
        name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[])
        for n in names], timeout_ms=10_000, validate_only=validate_only)


def test_create_topics_needs_create_on_cluster_or_topic(broker, authz):
    no, yes, quiet = (f"ct-{x}-{uuid.uuid4().hex[:6]}" for x in ("no", "yes", "quiet"))
    # CREATE on the cluster denied (asked without audit), on the topic allowed: created
    authz.deny(Op.CREATE, RT.CLUSTER).deny(Op.CREATE, RT.TOPIC, no)
    r = {t.name: t for t in _send(broker, _create_req(no, yes)).topics}
    assert (r[no].error_code, r[no].error_message) == (E.TOPIC_AUTHORIZATION_FAILED,
                                                       "Authorization failed.")
    assert r[yes].error_code == 0 and r[yes].num_partitions == 1 and r[yes].configs
    assert no not in broker.broker.metadata.topics and yes in broker.broker.metadata.topics
    assert all(a.log_if_denied == (a.resource_pattern.resource_type is RT.TOPIC)
               for _p, a in authz.denials())
    # CREATE on the cluster allowed: the topic-level denial does not matter
    authz.clear()
    authz.deny(Op.CREATE, RT.TOPIC, no)
    assert _send(broker, _create_req(no)).topics[0].error_code == 0
    # created, but DESCRIBE_CONFIGS denied: no configs, TopicConfigErrorCode set
    authz.clear()
    authz.deny(Op.DESCRIBE_CONFIGS, RT.TOPIC, quiet)
    for validate_only in (True, False):
        (t,) = _send(broker, _create_req(quiet, validate_only=validate_only)).topics
        assert (t.error_code, t.topic_config_error_code) == (0, E.TOPIC_AUTHORIZATION_FAILED)
        assert (t.configs, t.num_partitions, t.replication_factor) == ([], -1, -1)
        assert t.topic_id != ZERO_UUID
    # duplicates are INVALID_REQUEST before any check
    authz.clear()
    authz.deny(Op.CREATE, RT.CLUSTER).deny(Op.CREATE, RT.TOPIC)
    codes = [t.error_code for t in _send(broker, _create_req("dup-x", "dup-x")).topics]
    assert codes == [E.INVALID_REQUEST, E.INVALID_REQUEST]


# -- DescribeConfigs / AlterConfigs / IncrementalAlterConfigs -----------------------------------

TOPIC_RES, BROKER_RES, LOGGER_RES, GROUP_RES = 2, 4, 8, 32


def test_describe_configs_per_resource_type(broker, authz):
    from snakka.protocol.messages.describe_configs_request import (
        DescribeConfigsRequest,
        DescribeConfigsResource,
    )
    t = _topic(broker)
    node = str(broker.broker.services.node_id)
    resources = [(TOPIC_RES, t), (BROKER_RES, node), (LOGGER_RES, node), (GROUP_RES, "dc-g")]
    req = DescribeConfigsRequest(resources=[
        DescribeConfigsResource(resource_type=rt, resource_name=n, configuration_keys=None)
        for rt, n in resources], include_synonyms=False, include_documentation=False)

    def results():
        return {(x.resource_type, x.resource_name): x for x in _send(broker, req).results}

    ok = results()
    assert all(x.error_code == 0 and x.configs for x in ok.values())
    authz.deny(Op.DESCRIBE_CONFIGS, RT.TOPIC, t).deny(Op.DESCRIBE_CONFIGS, RT.GROUP, "dc-g")
    got = results()
    assert got[(TOPIC_RES, t)].error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert got[(TOPIC_RES, t)].error_message == E.TOPIC_AUTHORIZATION_FAILED.message
    assert got[(TOPIC_RES, t)].configs == []
    assert got[(GROUP_RES, "dc-g")].error_code == E.GROUP_AUTHORIZATION_FAILED
    assert got[(BROKER_RES, node)].error_code == 0 and got[(LOGGER_RES, node)].error_code == 0
    authz.clear()
    authz.deny(Op.DESCRIBE_CONFIGS, RT.CLUSTER)
    got = results()
    assert got[(BROKER_RES, node)].error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert got[(LOGGER_RES, node)].error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert got[(TOPIC_RES, t)].error_code == 0 and got[(GROUP_RES, "dc-g")].error_code == 0


def _topic_config(broker, topic: str, key: str) -> str | None:
    return broker.broker.metadata.topics[topic].configs.get(key)


def test_alter_configs_and_incremental_alter_configs_per_resource_type(broker, authz):
    from snakka.protocol.messages.alter_configs_request import (
        AlterableConfig as LegacyConfig,
    )
    from snakka.protocol.messages.alter_configs_request import (
        AlterConfigsRequest,
    )
    from snakka.protocol.messages.alter_configs_request import (
        AlterConfigsResource as LegacyResource,
    )
    from snakka.protocol.messages.incremental_alter_configs_request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )
    t = _topic(broker)
    node = str(broker.broker.services.node_id)

    def incremental(rt, name, key, value):
        return IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
            resource_type=rt, resource_name=name,
            configs=[AlterableConfig(name=key, config_operation=0, value=value)])],
            validate_only=False)

    def legacy(rt, name, key, value):
        return AlterConfigsRequest(resources=[LegacyResource(
            resource_type=rt, resource_name=name,
            configs=[LegacyConfig(name=key, value=value)])], validate_only=False)

    code = lambda r: r.responses[0].error_code  # noqa: E731
    for make, value in ((incremental, "1234"), (legacy, "5678")):
        before = _topic_config(broker, t, "retention.ms")
        authz.deny(Op.ALTER_CONFIGS, RT.TOPIC, t)
        r = _send(broker, make(TOPIC_RES, t, "retention.ms", value))
        assert (code(r), r.responses[0].error_message) == (
            E.TOPIC_AUTHORIZATION_FAILED, E.TOPIC_AUTHORIZATION_FAILED.message)
        assert _topic_config(broker, t, "retention.ms") == before  # nothing applied
        authz.clear()
        assert code(_send(broker, make(TOPIC_RES, t, "retention.ms", value))) == 0
        assert _topic_config(broker, t, "retention.ms") == value
        _both(broker, authz, make(GROUP_RES, "ac-g", "share.record.lock.duration.ms", "20000"),
              code, E.GROUP_AUTHORIZATION_FAILED, (Op.ALTER_CONFIGS, RT.GROUP, "ac-g"))
        # a dynamic broker config (num.partitions is static, as in Kafka 4.0)
        _both(broker, authz, make(BROKER_RES, node, "log.cleaner.delete.retention.ms",
                                  "86400000"), code,
              E.CLUSTER_AUTHORIZATION_FAILED, (Op.ALTER_CONFIGS, RT.CLUSTER))
    _both(broker, authz, incremental(LOGGER_RES, node, "snakka.tests.authz", "INFO"), code,
          E.CLUSTER_AUTHORIZATION_FAILED, (Op.ALTER_CONFIGS, RT.CLUSTER))
    # A broker resource is validated before it is authorized (Kafka's broker does so before
    # forwarding to the controller): a bad one answers its validation error even when denied.
    bad = incremental(BROKER_RES, "12345", "num.partitions", "1")
    authz.deny(Op.ALTER_CONFIGS, RT.CLUSTER)
    assert code(_send(broker, bad)) == E.INVALID_REQUEST


# -- ShareFetch / ShareAcknowledge -------------------------------------------------------------

def test_share_fetch_and_acknowledge_need_read_on_group_and_topics(broker, authz):
    from integration.share_protocol import ACCEPT, ShareMember, acks, produce, set_group_configs

    bs = broker.bootstrap_servers
    a_name, b_name = _topic(broker), _topic(broker)
    md = broker.broker.metadata
    a, b = (md.topics[a_name].topic_id, 0), (md.topics[b_name].topic_id, 0)
    group = f"sg-{uuid.uuid4().hex[:6]}"

    async def go():
        m = await ShareMember.connect(bs, group)
        try:
            await set_group_configs(m.conn, group, {"share.auto.offset.reset": "earliest"})
            await produce(m.conn, a_name, 0, [b"a0", b"a1"])
            await produce(m.conn, b_name, 0, [b"b0", b"b1"])
            await m.join([a_name, b_name])
            authz.deny(Op.READ, RT.GROUP, group)
            await m.fetch([a, b], expect_error=E.GROUP_AUTHORIZATION_FAILED)
            await m.acknowledge({a: acks((0, 0, ACCEPT))}, epoch=1,
                                expect_error=E.GROUP_AUTHORIZATION_FAILED)
            authz.clear()
            f = await m.fetch([a, b], max_wait_ms=2000)
            assert {o for _p, o, _v, _c in f.all_records()} == {0, 1}
            assert len(f.all_records()) == 4
            # READ on topic a denied: its partition answers TOPIC_AUTHORIZATION_FAILED, its
            # acknowledgements are refused (not applied), b is served
            authz.deny(Op.READ, RT.TOPIC, a_name)
            f = await m.fetch(ack={a: acks((0, 0, ACCEPT)), b: acks((0, 0, ACCEPT))})
            assert f.partitions[a].error_code == E.TOPIC_AUTHORIZATION_FAILED
            assert f.partitions[a].acknowledge_error_code == E.TOPIC_AUTHORIZATION_FAILED
            assert f.partitions[b].acknowledge_error_code == 0
            assert await m.acknowledge({a: acks((1, 1, ACCEPT)), b: acks((1, 1, ACCEPT))}) == {
                a: E.TOPIC_AUTHORIZATION_FAILED, b: 0}
            authz.clear()
            # a's records are still acquired by this member: accepting them now works
            assert await m.acknowledge({a: acks((0, 1, ACCEPT))}) == {a: 0}
        finally:
            await m.close()

    run_async(go())


# -- DescribeShareGroupOffsets / AlterShareGroupOffsets / DeleteShareGroupOffsets ---------------

def test_share_group_offsets_apis(broker, authz):
    from integration.share_protocol import ShareMember, produce, set_group_configs

    from snakka.protocol.messages.alter_share_group_offsets_request import (
        AlterShareGroupOffsetsRequest,
        AlterShareGroupOffsetsRequestPartition,
        AlterShareGroupOffsetsRequestTopic,
    )
    from snakka.protocol.messages.delete_share_group_offsets_request import (
        DeleteShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsRequestTopic,
    )
    from snakka.protocol.messages.describe_share_group_offsets_request import (
        DescribeShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsRequestGroup,
        DescribeShareGroupOffsetsRequestTopic,
    )

    bs = broker.bootstrap_servers
    t1, t2 = _topic(broker), _topic(broker)
    md = broker.broker.metadata
    group = f"so-{uuid.uuid4().hex[:6]}"

    async def setup():
        m = await ShareMember.connect(bs, group)
        try:
            await set_group_configs(m.conn, group, {"share.auto.offset.reset": "earliest"})
            await produce(m.conn, t1, 0, [b"x"])
            await produce(m.conn, t2, 0, [b"y"])
            await m.join([t1, t2])
            await m.fetch([(md.topics[t1].topic_id, 0), (md.topics[t2].topic_id, 0)],
                          max_wait_ms=2000)
            await m.fetch(epoch=-1)  # close the session
            await m.heartbeat(epoch=-1)  # leave: the group is empty
        finally:
            await m.close()

    run_async(setup())

    def describe(topics):
        req = DescribeShareGroupOffsetsRequest(groups=[DescribeShareGroupOffsetsRequestGroup(
            group_id=group, topics=None if topics is None else [
                DescribeShareGroupOffsetsRequestTopic(topic_name=n, partitions=[0])
                for n in topics])])
        return _send(broker, req).groups[0]

    g = describe([t1, t2])
    assert g.error_code == 0 and all(p.error_code == 0 for t in g.topics for p in t.partitions)
    authz.deny(Op.DESCRIBE, RT.GROUP, group)
    assert describe([t1]).error_code == E.GROUP_AUTHORIZATION_FAILED
    authz.clear()
    authz.deny(Op.DESCRIBE, RT.TOPIC, t2)
    g = describe([t1, t2])
    parts = {t.topic_name: (t.topic_id, t.partitions[0].error_code) for t in g.topics}
    assert parts[t1][1] == 0
    assert parts[t2] == (ZERO_UUID, E.TOPIC_AUTHORIZATION_FAILED)
    assert {t.topic_name for t in describe(None).topics} == {t1}  # all topics: left out
    authz.clear()

    alter = AlterShareGroupOffsetsRequest(group_id=group, topics=[
        AlterShareGroupOffsetsRequestTopic(topic_name=n, partitions=[
            AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)])
        for n in (t1, t2)])
    authz.deny(Op.READ, RT.GROUP, group)
    r = _send(broker, alter)
    assert r.error_code == E.GROUP_AUTHORIZATION_FAILED
    assert {p.error_code for t in r.responses for p in t.partitions} == \
        {E.GROUP_AUTHORIZATION_FAILED}
    authz.clear()
    authz.deny(Op.READ, RT.TOPIC, t2)
    r = _send(broker, alter)
    codes = {t.topic_name: t.partitions[0].error_code for t in r.responses}
    assert (r.error_code, codes) == (0, {t1: 0, t2: E.TOPIC_AUTHORIZATION_FAILED})
    authz.clear()

    delete = DeleteShareGroupOffsetsRequest(group_id=group, topics=[
        DeleteShareGroupOffsetsRequestTopic(topic_name=n) for n in (t1, t2)])
    authz.deny(Op.DELETE, RT.GROUP, group)
    assert _send(broker, delete).error_code == E.GROUP_AUTHORIZATION_FAILED
    authz.clear()
    authz.deny(Op.READ, RT.TOPIC, t2)
    r = _send(broker, delete)
    codes = {t.topic_name: t.error_code for t in r.responses}
    assert (r.error_code, codes) == (0, {t1: 0, t2: E.TOPIC_AUTHORIZATION_FAILED})


# -- ConsumerGroupDescribe / ShareGroupDescribe / DescribeTopicPartitions -----------------------

def test_consumer_group_describe(broker, authz):
    from snakka.protocol.messages.consumer_group_describe_request import (
        ConsumerGroupDescribeRequest,
    )
    from snakka.protocol.messages.consumer_group_heartbeat_request import (
        ConsumerGroupHeartbeatRequest,
    )
    t = _topic(broker)
    group = f"cg-{uuid.uuid4().hex[:6]}"
    r = _send(broker, ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=10000,
        subscribed_topic_names=[t], topic_partitions=[]))
    assert r.error_code == 0, r
    req = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=True)
    (g,) = _send(broker, req).groups
    assert g.error_code == 0 and g.members
    assert {tp.topic_name for tp in g.members[0].target_assignment.topic_partitions} == {t}
    assert g.authorized_operations == operations_bit_field(SUPPORTED_OPERATIONS[RT.GROUP])
    authz.deny(Op.DELETE, RT.GROUP, group)
    (g,) = _send(broker, req).groups
    assert g.authorized_operations == operations_bit_field(
        [o for o in SUPPORTED_OPERATIONS[RT.GROUP] if o is not Op.DELETE])
    authz.clear()
    authz.deny(Op.DESCRIBE, RT.GROUP, group)
    (g,) = _send(broker, req).groups
    assert (g.error_code, g.members) == (E.GROUP_AUTHORIZATION_FAILED, [])
    # DESCRIBE denied on a topic of the members' assignments: the whole group is refused
    authz.clear()
    authz.deny(Op.DESCRIBE, RT.TOPIC, t)
    (g,) = _send(broker, req).groups
    assert (g.error_code, g.error_message, g.members) == (
        E.TOPIC_AUTHORIZATION_FAILED,
        "The group has described topic(s) that the client is not authorized to describe.", [])


def test_share_group_describe(broker, authz):
    from integration.share_protocol import ShareMember

    from snakka.protocol.messages.share_group_describe_request import ShareGroupDescribeRequest

    t = _topic(broker)
    group = f"sd-{uuid.uuid4().hex[:6]}"

    async def join():
        m = await ShareMember.connect(broker.bootstrap_servers, group)
        try:
            await m.join([t])
        finally:
            await m.close()

    run_async(join())
    req = ShareGroupDescribeRequest(group_ids=[group], include_authorized_operations=True)
    (g,) = _send(broker, req).groups
    assert g.error_code == 0 and g.members
    assert g.authorized_operations == operations_bit_field(SUPPORTED_OPERATIONS[RT.GROUP])
    # topics of the assignments are not checked by ShareGroupDescribe (Kafka 4.0)
    authz.deny(Op.DESCRIBE, RT.TOPIC, t)
    assert _send(broker, req).groups[0].error_code == 0
    authz.clear()
    _both(broker, authz, req, lambda r: r.groups[0].error_code, E.GROUP_AUTHORIZATION_FAILED,
          (Op.DESCRIBE, RT.GROUP, group))


def test_describe_topic_partitions(broker, authz):
    from snakka.protocol.messages.describe_topic_partitions_request import (
        DescribeTopicPartitionsRequest,
        TopicRequest,
    )
    t1, t2 = sorted([_topic(broker), _topic(broker)])
    named = DescribeTopicPartitionsRequest(topics=[TopicRequest(name=n) for n in (t2, t1)],
                                           response_partition_limit=100)
    all_topics = DescribeTopicPartitionsRequest(topics=[], response_partition_limit=2000)
    full = operations_bit_field(SUPPORTED_OPERATIONS[RT.TOPIC])
    r = _send(broker, named)
    assert [(x.name, x.error_code, x.topic_authorized_operations) for x in r.topics] == [
        (t1, 0, full), (t2, 0, full)]
    authz.deny(Op.DESCRIBE, RT.TOPIC, t2).deny(Op.ALTER, RT.TOPIC, t1)
    r = _send(broker, named)
    assert [(x.name, x.error_code) for x in r.topics] == [(t1, 0),
                                                          (t2, E.TOPIC_AUTHORIZATION_FAILED)]
    assert r.topics[0].topic_authorized_operations == operations_bit_field(
        [o for o in SUPPORTED_OPERATIONS[RT.TOPIC] if o is not Op.ALTER])
    assert (r.topics[1].topic_id, r.topics[1].partitions) == (ZERO_UUID, [])
    names = {x.name for x in _send(broker, all_topics).topics}
    assert t1 in names and t2 not in names


# -- TxnOffsetCommit ----------------------------------------------------------------------------

def test_txn_offset_commit_topics_checked_in_one_call(broker, authz):
    from snakka.protocol.messages.txn_offset_commit_request import (
        TxnOffsetCommitRequest,
        TxnOffsetCommitRequestPartition,
        TxnOffsetCommitRequestTopic,
    )
    t1, t2 = _topic(broker), _topic(broker)
    calls = []
    real = authz.authorize

    def spy(context, actions):
        calls.append([(a.operation, a.resource_pattern.resource_type) for a in actions])
        return real(context, actions)

    authz.authorize = spy
    try:
        authz.deny(Op.READ, RT.TOPIC, t2)
        r = _send(broker, TxnOffsetCommitRequest(
            transactional_id="txo", group_id="txo-g", producer_id=1, producer_epoch=0,
            generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=[TxnOffsetCommitRequestTopic(name=n, partitions=[
                TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                                committed_leader_epoch=-1,
                                                committed_metadata="")])
                for n in (t1, t2)]), 3)
    finally:
        del authz.authorize
    codes = {t.name: t.partitions[0].error_code for t in r.topics}
    assert codes[t2] == E.TOPIC_AUTHORIZATION_FAILED and codes[t1] != E.TOPIC_AUTHORIZATION_FAILED
    topic_calls = [c for c in calls if any(rt is RT.TOPIC for _o, rt in c)]
    assert topic_calls == [[(Op.READ, RT.TOPIC), (Op.READ, RT.TOPIC)]]
