"""The rest of the admin API (issue 16 item 5) with real clients against an in-process broker:
ElectLeaders, AlterReplicaLogDirs, DescribeQuorum, AlterPartitionReassignments,
ListPartitionReassignments, ListConfigResources and UpdateFeatures (DescribeFeatures is
ApiVersions), answered as a single combined Kafka node answers them.

Each API is driven by kafka-python's admin client (which used to fail on these against snakka)
and, where it has the method, confluent-kafka's (``elect_leaders``); the reference Java tools
are in tests/reference/test_admin_tools.py. Raw requests pin down Kafka's exact error codes and
messages, and a TableAuthorizer broker checks each API's authorization (cluster ALTER /
DESCRIBE / DESCRIBE_CONFIGS, as Kafka's KafkaApis / ControllerApis).
"""

from __future__ import annotations

import os
import uuid

import kafka.errors as ke
import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, TopicPartition
from security.authz_support import TableAuthorizer  # tests/ is on sys.path

from snakka.protocol.errors import ErrorCode as E
from snakka.protocol.messages.alter_partition_reassignments_request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from snakka.protocol.messages.alter_replica_log_dirs_request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from snakka.protocol.messages.describe_quorum_request import (
    DescribeQuorumRequest,
    PartitionData,
    TopicData,
)
from snakka.protocol.messages.elect_leaders_request import ElectLeadersRequest, TopicPartitions
from snakka.protocol.messages.list_config_resources_request import ListConfigResourcesRequest
from snakka.protocol.messages.list_partition_reassignments_request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)
from snakka.protocol.messages.update_features_request import (
    FeatureUpdateKey,
    UpdateFeaturesRequest,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, raw_connect, run_async

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


@pytest.fixture(scope="module")
def kp_admin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers,
                             client_id="admin-apis-test")
    yield admin
    admin.close()


@pytest.fixture(scope="module")
def topic(broker) -> str:
    name = f"adm-{uuid.uuid4().hex[:8]}"
    ck_create_topic(broker.bootstrap_servers, name, 2)
    return name


def _send(broker, req, version=None):
    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            return await conn.send(req, version)
        finally:
            await conn.close()
    return run_async(go())


def _node_id(broker) -> int:
    return broker.broker.services.node_id


def _log_dir(broker) -> str:
    return os.path.abspath(broker.broker.services.replicas.log_dir)


def _cluster_denied(authz, op: AclOperation) -> None:
    authz.deny(op, ResourceType.CLUSTER, CLUSTER_NAME)


# -- ElectLeaders ------------------------------------------------------------------------------

def test_elect_leaders_kafka_python(kp_admin, topic):
    r = kp_admin.elect_leaders(0, {topic: [0, 1]}, raise_errors=False)
    [res] = r.replica_election_results
    assert res.topic == topic
    assert [(p.partition_id, p.error_code) for p in res.partition_result] == [
        (0, E.ELECTION_NOT_NEEDED), (1, E.ELECTION_NOT_NEEDED)]
    # unclean: the leader is there, so it is not needed either
    r = kp_admin.elect_leaders(1, {topic: [0]}, raise_errors=False)
    assert r.replica_election_results[0].partition_result[0].error_code == E.ELECTION_NOT_NEEDED
    r = kp_admin.elect_leaders(0, {"no-such-topic": [0], topic: [7]}, raise_errors=False)
    codes = {(t.topic, p.partition_id): (p.error_code, p.error_message)
             for t in r.replica_election_results for p in t.partition_result}
    assert codes == {("no-such-topic", 0): (E.UNKNOWN_TOPIC_OR_PARTITION,
                                            "No such topic as no-such-topic"),
                     (topic, 7): (E.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"No such partition as {topic}-7")}


def test_elect_leaders_confluent(broker, topic):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    fut = admin.elect_leaders(ElectionType.PREFERRED, [CkTopicPartition(topic, 0),
                                                       CkTopicPartition(topic, 1)])
    result = fut.result(timeout=30)
    assert {(tp.topic, tp.partition) for tp in result} == {(topic, 0), (topic, 1)}
    assert all(err is not None and err.code() == E.ELECTION_NOT_NEEDED
               for err in result.values()), result
    # librdkafka sends every partition (topic_partitions null) when none are given: Kafka
    # leaves out those that already have their preferred leader, so nothing comes back.
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=30) == {}


def test_elect_leaders_raw_edges(broker, authz, topic):
    r = _send(broker, ElectLeadersRequest(election_type=0, topic_partitions=None,
                                          timeout_ms=5000))
    assert r.error_code == E.NONE
    assert {t.topic: t.partition_result for t in r.replica_election_results}[topic] == []
    r = _send(broker, ElectLeadersRequest(election_type=5, topic_partitions=[
        TopicPartitions(topic=topic, partitions=[0])], timeout_ms=5000))
    assert r.error_code == E.INVALID_REQUEST
    assert r.replica_election_results[0].partition_result[0].error_message == \
        "Unknown election type 5"
    _cluster_denied(authz, AclOperation.ALTER)
    r = _send(broker, ElectLeadersRequest(election_type=0, topic_partitions=[
        TopicPartitions(topic=topic, partitions=[0])], timeout_ms=5000))
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert r.replica_election_results[0].partition_result[0].error_code == \
        E.CLUSTER_AUTHORIZATION_FAILED


# -- Partition reassignments -------------------------------------------------------------------

def test_partition_reassignments_kafka_python(broker, kp_admin, topic):
    me = _node_id(broker)
    assert kp_admin.list_partition_reassignments() == {}
    assert kp_admin.list_partition_reassignments([TopicPartition(topic, 0)]) == {}
    out = kp_admin.alter_partition_reassignments({
        TopicPartition(topic, 0): [me],            # the current replica set: done at once
        TopicPartition(topic, 1): [me + 1],        # no such broker
    })
    assert out[TopicPartition(topic, 0)] is None
    assert out[TopicPartition(topic, 1)] is ke.for_code(E.INVALID_REPLICA_ASSIGNMENT)
    out = kp_admin.alter_partition_reassignments({TopicPartition(topic, 0): None})
    assert out[TopicPartition(topic, 0)] is ke.for_code(E.NO_REASSIGNMENT_IN_PROGRESS)
    assert kp_admin.list_partition_reassignments() == {}


def test_partition_reassignments_raw_edges(broker, authz, topic):
    me = _node_id(broker)

    def alter(*parts, version=None):
        r = _send(broker, AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[
            ReassignableTopic(name=t, partitions=[
                ReassignablePartition(partition_index=p, replicas=reps)])
            for t, p, reps in parts]), version)
        return r, [(p.error_code, p.error_message) for t in r.responses for p in t.partitions]

    r, results = alter((topic, 0, [me, me]), (topic, 1, []), ("nope", 0, [me]), (topic, 9, [me]))
    assert r.error_code == E.NONE
    assert results == [
        (E.INVALID_REPLICA_ASSIGNMENT,
         f"The manual partition assignment includes the broker {me} more than once."),
        (E.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes an empty replica list."),
        (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope."),
        (E.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:9."),
    ]
    _r, results = alter((topic, 0, [me + 7, me]))
    assert results == [(E.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes broker {me + 7}, but no "
                        "such broker is registered.")]
    _cluster_denied(authz, AclOperation.ALTER)
    r, results = alter((topic, 0, [me]))
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert results[0][0] == E.CLUSTER_AUTHORIZATION_FAILED
    authz.clear()
    _cluster_denied(authz, AclOperation.DESCRIBE)
    r = _send(broker, ListPartitionReassignmentsRequest(timeout_ms=5000, topics=[
        ListPartitionReassignmentsTopics(name=topic, partition_indexes=[0])]))
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED and r.topics == []


# -- AlterReplicaLogDirs -----------------------------------------------------------------------

def test_alter_replica_log_dirs_kafka_python(broker, kp_admin, topic):
    me = _node_id(broker)
    out = kp_admin.alter_replica_log_dirs({
        (topic, 0, me): _log_dir(broker),              # where it is already: nothing to move
        (topic, 1, me): "/no/such/log/dir",
    })
    by_partition = {tpr.partition: err for tpr, err in out.items()}
    assert by_partition[0] is ke.NoError
    assert by_partition[1] is ke.LogDirNotFoundError


def test_alter_replica_log_dirs_raw_edges(broker, authz, topic):
    def alter(path, name, parts):
        r = _send(broker, AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDir(
            path=path, topics=[AlterReplicaLogDirTopic(name=name, partitions=parts)])]))
        return {(t.topic_name, p.partition_index): p.error_code
                for t in r.results for p in t.partitions}

    d = _log_dir(broker)
    assert alter(d, "no-such-topic", [0]) == {("no-such-topic", 0): E.REPLICA_NOT_AVAILABLE}
    assert alter(d, topic, [5]) == {(topic, 5): E.REPLICA_NOT_AVAILABLE}
    long_name = "x" * 249
    assert alter(d, long_name, [0]) == {(long_name, 0): E.INVALID_TOPIC_EXCEPTION}
    _cluster_denied(authz, AclOperation.ALTER)
    assert alter(d, topic, [0, 1]) == {(topic, 0): E.CLUSTER_AUTHORIZATION_FAILED,
                                       (topic, 1): E.CLUSTER_AUTHORIZATION_FAILED}


# -- DescribeQuorum ----------------------------------------------------------------------------

def test_describe_quorum_kafka_python(broker, kp_admin):
    me = _node_id(broker)
    q = kp_admin.describe_metadata_quorum()
    [t] = q["topics"]
    assert t["topic_name"] == "__cluster_metadata"
    [p] = t["partitions"]
    assert p["error"] is None and p["leader_id"] == me and p["leader_epoch"] == 1
    [voter] = p["current_voters"]
    assert voter["replica_id"] == me
    assert voter["log_end_offset"] == p["high_watermark"] > 0  # topics were created
    assert p["observers"] == []
    [node] = q["nodes"]
    assert node["node_id"] == me
    port = int(broker.bootstrap_servers.rsplit(":", 1)[1])
    assert [(lst["name"], lst["port"]) for lst in node["listeners"]] == [("PLAINTEXT", port)]


def test_describe_quorum_raw_edges(broker, authz):
    r = _send(broker, DescribeQuorumRequest(topics=[TopicData(
        topic_name="__cluster_metadata", partitions=[PartitionData(partition_index=1)])]))
    assert r.error_code == E.NONE
    assert r.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    r = _send(broker, DescribeQuorumRequest(topics=[TopicData(
        topic_name="__cluster_metadata", partitions=[PartitionData(partition_index=0)])]), 0)
    assert r.topics[0].partitions[0].leader_id == _node_id(broker)
    _cluster_denied(authz, AclOperation.DESCRIBE)
    r = _send(broker, DescribeQuorumRequest(topics=[TopicData(
        topic_name="__cluster_metadata", partitions=[PartitionData(partition_index=0)])]))
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED and r.topics == []


# -- ListConfigResources -----------------------------------------------------------------------

def test_list_config_resources_kafka_python(broker, kp_admin, topic):
    me = str(_node_id(broker))
    got = kp_admin.list_config_resources()
    assert topic in got["topic"]
    assert got["broker"] == [me] and got["broker_logger"] == [me]
    got = kp_admin.list_config_resources(["BROKER"])
    assert got == {"broker": [me]}


def test_list_config_resources_raw_edges(broker, authz, topic):
    r = _send(broker, ListConfigResourcesRequest(resource_types=[2, 99]))
    assert r.error_code == E.UNSUPPORTED_VERSION and r.config_resources == []
    r = _send(broker, ListConfigResourcesRequest(resource_types=[2]))
    assert (topic, 2) in {(c.resource_name, c.resource_type) for c in r.config_resources}
    r = _send(broker, ListConfigResourcesRequest(), 0)  # ListClientMetricsResources
    assert r.error_code == E.NONE and r.config_resources == []
    _cluster_denied(authz, AclOperation.DESCRIBE_CONFIGS)
    r = _send(broker, ListConfigResourcesRequest(resource_types=[]))
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED and r.config_resources == []


# -- DescribeFeatures / UpdateFeatures ---------------------------------------------------------

def test_describe_and_update_features_kafka_python(kp_admin):
    features = kp_admin.describe_features()
    assert features["transaction.version"]["finalized"] == (2, 2)
    assert features["group.version"]["finalized"] == (1, 1)
    assert kp_admin.update_features({"transaction.version": 2}) == {"transaction.version": "OK"}
    assert kp_admin.update_features({"transaction.version": ("SAFE_DOWNGRADE", 1)},
                                    validate_only=True) == {"transaction.version": "OK"}
    with pytest.raises(ke.InvalidUpdateVersionError):
        kp_admin.update_features({"transaction.version": 7})
    with pytest.raises(ke.InvalidUpdateVersionError):  # valid, but snakka's levels are fixed
        kp_admin.update_features({"transaction.version": ("SAFE_DOWNGRADE", 1)})
    assert kp_admin.describe_features()["transaction.version"]["finalized"] == (2, 2)


@pytest.mark.parametrize(("feature", "level", "upgrade_type", "reason"), [
    ("transaction.version", 3, 1, "Local controller {me} only supports versions 0-2"),
    ("metadata.version", 22, 1, "Local controller {me} does not support this feature."),
    ("transaction.version", -1, 1, "A feature version cannot be less than 0."),
    ("transaction.version", 1, 1, "Can't downgrade the version of this feature without setting "
                                  "the upgrade type to either safe or unsafe downgrade."),
    ("group.version", 1, 9, "The controller does not support the given upgrade type."),
])
def test_update_features_validation_messages(broker, feature, level, upgrade_type, reason):
    r = _send(broker, UpdateFeaturesRequest(timeout_ms=5000, validate_only=True, feature_updates=[
        FeatureUpdateKey(feature=feature, max_version_level=level, upgrade_type=upgrade_type)]))
    assert r.error_code == E.INVALID_UPDATE_VERSION
    assert r.error_message == (
        "The update failed for all features since the following feature had an error: "
        f"Invalid update version {level} for feature {feature}. "
        + reason.format(me=_node_id(broker)))


def test_update_features_versions_and_authorization(broker, authz):
    same = [FeatureUpdateKey(feature="group.version", max_version_level=1, upgrade_type=1)]
    r = _send(broker, UpdateFeaturesRequest(timeout_ms=5000, feature_updates=same), 1)
    assert r.error_code == E.NONE
    assert [(x.feature, x.error_code) for x in r.results] == [("group.version", E.NONE)]
    r = _send(broker, UpdateFeaturesRequest(timeout_ms=5000, feature_updates=same), 2)
    assert r.error_code == E.NONE and r.results == []
    _cluster_denied(authz, AclOperation.ALTER)
    r = _send(broker, UpdateFeaturesRequest(timeout_ms=5000, feature_updates=same))
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED
