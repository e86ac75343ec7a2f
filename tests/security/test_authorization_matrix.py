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
