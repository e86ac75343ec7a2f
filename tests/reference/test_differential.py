"""Differential tests: the same requests to the reference Kafka 4.0 and to snakka, same shapes.

Each test runs one scenario (differential.py) on both brokers and compares, for every response,
which fields are null, empty or filled and every error code (shape.py). This is what caught the
Java admin client's NullPointerException on DescribeTopicPartitions' EligibleLeaderReplicas
(issue 9 item 1): Kafka sends null only where its code does, an empty list elsewhere, and the
Java client calls methods on what it reads.

Versions: the highest version both brokers support, and for the APIs whose nullable fields
changed across versions also a lower version that common clients use (librdkafka and
kafka-python stay on older Fetch/Metadata/ListOffsets/OffsetFetch versions).

Differences that are right are listed per test as ``{path glob: reason}``; everything else fails.

Not compared, because Kafka 4.0 cannot answer them as snakka does: the share-group APIs
(ShareGroupHeartbeat/Describe, ShareFetch/ShareAcknowledge: 4.0 has only the early-access v0,
snakka serves 4.2's v1+; Describe/Alter/DeleteShareGroupOffsets: 4.0 lacks or has v0 only).
"""

from __future__ import annotations

import time
import uuid

import pytest

from snakka.protocol.messages import alter_configs_request as legacy_alter
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.consumer_group_describe_request import (
    ConsumerGroupDescribeRequest,
)
from snakka.protocol.messages.consumer_group_heartbeat_request import (
    ConsumerGroupHeartbeatRequest,
)
from snakka.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from snakka.protocol.messages.consumer_protocol_assignment import (
    TopicPartition as AssignmentTopicPartition,
)
from snakka.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from snakka.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from snakka.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from snakka.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from snakka.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from snakka.protocol.messages.delete_groups_request import DeleteGroupsRequest
from snakka.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from snakka.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from snakka.protocol.messages.describe_acls_request import DescribeAclsRequest
from snakka.protocol.messages.describe_cluster_request import DescribeClusterRequest
from snakka.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest
from snakka.protocol.messages.describe_log_dirs_request import (
    DescribableLogDirTopic,
    DescribeLogDirsRequest,
)
from snakka.protocol.messages.describe_topic_partitions_request import (
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from snakka.protocol.messages.fetch_request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
)
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.messages.heartbeat_request import HeartbeatRequest
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
from snakka.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
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
from snakka.protocol.messages.offset_delete_request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from snakka.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from snakka.protocol.messages.offset_for_leader_epoch_request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.protocol.messages.sync_group_request import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from snakka.records.record import Record, build_batch

from .differential import RETRIABLE, Peer, assert_same_shape, run_both

RUN = uuid.uuid4().hex[:8]  # the reference broker may outlive a run: names must be fresh


def name(what: str) -> str:
    return f"diff-{what}-{RUN}"


def batch(n: int, *, producer_id: int = -1, base_sequence: int = -1) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([Record(timestamp=now, key=b"k%d" % i, value=b"v%d" % i)
                        for i in range(n)],
                       producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=base_sequence)


def produce_request(topic: str, partition: int, records: bytes, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=30000, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=partition, records=records)])])


# -- cluster and topics ------------------------------------------------------------------------

@pytest.mark.parametrize("version", [None, 3, 0])
def test_api_versions(brokers, versions, version):
    async def scenario(p: Peer):
        await p.ask("api_versions", ApiVersionsRequest(
            client_software_name="snakka-differential", client_software_version="1.0"),
            version=version)

    k, s = run_both(brokers, versions, scenario)
    exceptions = {
        "api_versions.api_keys[*": "snakka serves a subset of Kafka's APIs (no SASL, "
                                   "delegation tokens, quotas, KRaft RPCs) and some that "
                                   "4.0 lacks (91, 92)",
    }
    if version is None or version >= 3:
        exceptions.update({
            "api_versions.supported_features*": "snakka has no feature flags: no KRaft quorum, "
                                                "no transactions (TV1/TV2), no ELR",
            "api_versions.finalized_features*": "none finalized, so clients take their classic "
                                                "paths (KAFKA-FACTS: transactions TV1 first)",
        })
    assert_same_shape(k, s, exceptions)


def test_metadata(brokers, versions):
    t = name("md")

    async def scenario(p: Peer):
        await p.create_topic(t, partitions=2)
        v = p.version(3)
        await p.ask("named", MetadataRequest(
            topics=[MetadataRequestTopic(name=t), MetadataRequestTopic(name=name("md-nosuch"))],
            allow_auto_topic_creation=False, include_topic_authorized_operations=True), version=v)
        md = await p.ask("by_id", MetadataRequest(
            topics=[MetadataRequestTopic(topic_id=p.responses["named"].topics[0].topic_id,
                                         name=None),
                    MetadataRequestTopic(topic_id=uuid.uuid4(), name=None)],
            allow_auto_topic_creation=False), version=v)
        assert md is not None
        await p.ask("v9", MetadataRequest(topics=[MetadataRequestTopic(name=t)],
                                          allow_auto_topic_creation=False), version=9)
        await p.ask("v1", MetadataRequest(topics=[MetadataRequestTopic(name=t)]), version=1)
        for label, v_all in (("all_topics", v), ("all_topics_v1", 1)):
            # every topic (librdkafka's full refresh): compare the one both brokers have
            everything = await p.send(MetadataRequest(topics=None), version=v_all)
            everything.topics = [x for x in everything.topics if x.name == t]
            p.responses[label] = everything
        await p.ask("invalid_name", MetadataRequest(
            topics=[MetadataRequestTopic(name="bad/name")], allow_auto_topic_creation=True),
            version=v)

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_describe_topic_partitions(brokers, versions):
    """The Java admin client's describeTopics (kafka-topics.sh --describe, Spark's connector)."""
    t, t2 = name("dtp"), name("dtp2")

    async def scenario(p: Peer):
        await p.create_topic(t, partitions=3)
        await p.create_topic(t2, partitions=1)
        await p.ask("two", DescribeTopicPartitionsRequest(
            topics=[TopicRequest(name=t), TopicRequest(name=t2),
                    TopicRequest(name=name("dtp-nosuch"))]))
        await p.ask("paged", DescribeTopicPartitionsRequest(
            topics=[TopicRequest(name=t), TopicRequest(name=t2)], response_partition_limit=2))

    assert_same_shape(*run_both(brokers, versions, scenario))


@pytest.mark.parametrize("version", [None, 0])
def test_describe_cluster(brokers, versions, version):
    async def scenario(p: Peer):
        await p.ask("describe_cluster", DescribeClusterRequest(
            include_cluster_authorized_operations=False), version=version)

    assert_same_shape(*run_both(brokers, versions, scenario))


@pytest.mark.parametrize("version", [None, 1])
def test_acl_apis_without_an_authorizer(brokers, versions, version):
    """Neither broker has an authorizer: SECURITY_DISABLED for the request (DescribeAcls) or
    for every creation and filter (Create/DeleteAcls), nothing matched (issue 13: MM2)."""
    def acl_filter(cls):
        return cls(resource_type_filter=2, resource_name_filter=None, pattern_type_filter=1,
                   principal_filter=None, host_filter=None, operation=1, permission_type=1)

    async def scenario(p: Peer):
        await p.ask("describe_acls", acl_filter(DescribeAclsRequest), version=version)
        await p.ask("create_acls", CreateAclsRequest(creations=[AclCreation(
            resource_type=2, resource_name=f"t{i}", resource_pattern_type=3, principal="User:x",
            host="*", operation=3, permission_type=3) for i in range(2)]), version=version)
        await p.ask("delete_acls", DeleteAclsRequest(
            filters=[acl_filter(DeleteAclsFilter)] * 2), version=version)

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_create_topics(brokers, versions):
    t = name("ct")

    async def scenario(p: Peer):
        def req(topic, partitions=2, configs=(), validate_only=False):
            return CreateTopicsRequest(topics=[CreatableTopic(
                name=topic, num_partitions=partitions, replication_factor=1, assignments=[],
                configs=[CreatableTopicConfig(name=k, value=v) for k, v in configs])],
                timeout_ms=30000, validate_only=validate_only)
        await p.ask("created", req(t, configs=[("retention.ms", "100000")]))
        await p.ask("exists", req(t))
        await p.ask("validate_only", req(name("ct-validate"), validate_only=True))
        await p.ask("bad_config", req(name("ct-badcfg"), configs=[("retention.ms", "abc")]))
        await p.ask("bad_partitions", req(name("ct-badparts"), partitions=0))
        await p.ask("bad_name", req("bad/name"))
        await p.ask("v4", req(name("ct-v4")), version=4)

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_delete_topics(brokers, versions):
    t, t2 = name("dt"), name("dt2")

    async def scenario(p: Peer):
        await p.create_topic(t)
        await p.create_topic(t2)
        md = await p.send(MetadataRequest(topics=[MetadataRequestTopic(name=t2)]), version=12)
        await p.ask("by_name", DeleteTopicsRequest(
            topics=[DeleteTopicState(name=t), DeleteTopicState(name=name("dt-nosuch"))],
            timeout_ms=30000))
        await p.ask("by_id", DeleteTopicsRequest(
            topics=[DeleteTopicState(topic_id=md.topics[0].topic_id),
                    DeleteTopicState(topic_id=uuid.uuid4())], timeout_ms=30000))
        await p.ask("v3", DeleteTopicsRequest(topic_names=[name("dt-nosuch")], timeout_ms=30000),
                    version=3)

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_create_partitions(brokers, versions):
    t = name("cp")

    async def scenario(p: Peer):
        await p.create_topic(t, partitions=1)

        def req(topic, count, validate_only=False):
            return CreatePartitionsRequest(topics=[CreatePartitionsTopic(
                name=topic, count=count, assignments=None)], timeout_ms=30000,
                validate_only=validate_only)
        await p.ask("grow", req(t, 3))
        await p.ask("shrink", req(t, 2))
        await p.ask("same", req(t, 3))
        await p.ask("validate_only", req(t, 4, validate_only=True))
        await p.ask("unknown", req(name("cp-nosuch"), 2))

    assert_same_shape(*run_both(brokers, versions, scenario), {
        "unknown.results[*].error_message": "snakka names the missing topic; Kafka sends null",
    })


def test_describe_configs(brokers, versions):
    t = name("dc")

    async def scenario(p: Peer):
        await p.create_topic(t, configs=[CreatableTopicConfig(name="retention.ms",
                                                              value="100000")])
        keys = ["retention.ms", "cleanup.policy", "segment.bytes", "max.message.bytes"]
        await p.ask("topic_keys", DescribeConfigsRequest(resources=[
            DescribeConfigsResource(resource_type=2, resource_name=t, configuration_keys=keys)],
            include_synonyms=True, include_documentation=True))
        await p.ask("topic_keys_plain", DescribeConfigsRequest(resources=[
            DescribeConfigsResource(resource_type=2, resource_name=t, configuration_keys=keys)]))
        await p.ask("unknown_topic", DescribeConfigsRequest(resources=[
            DescribeConfigsResource(resource_type=2, resource_name=name("dc-nosuch"),
                                    configuration_keys=None)]))
        await p.ask("broker_keys", DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=4, resource_name=str(p.node_id),
            configuration_keys=["log.retention.hours", "num.partitions", "message.max.bytes",
                                "auto.create.topics.enable"])], include_synonyms=True))
        await p.ask("v1", DescribeConfigsRequest(resources=[
            DescribeConfigsResource(resource_type=2, resource_name=t, configuration_keys=keys)],
            include_synonyms=True), version=1)

    unit_synonym = ("snakka also names the unit synonym that supplies the default "
                    "(log.retention.hours); Kafka lists only log.retention.ms")
    assert_same_shape(*run_both(brokers, versions, scenario), {
        "*.configs['retention.ms'].synonyms['log.retention.hours']*": unit_synonym,
        "unknown_topic.results[*].error_message": "snakka names the missing topic; Kafka: \"\"",
    })


def test_incremental_alter_configs(brokers, versions):
    t = name("iac")

    async def scenario(p: Peer):
        await p.create_topic(t)

        def req(resource_type, resource, cfgs, validate_only=False):
            return IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
                resource_type=resource_type, resource_name=resource,
                configs=[AlterableConfig(name=k, config_operation=op, value=v)
                         for k, op, v in cfgs])], validate_only=validate_only)
        await p.ask("set", req(2, t, [("retention.ms", 0, "200000")]))
        await p.ask("delete", req(2, t, [("retention.ms", 1, None)]))
        await p.ask("unknown_config", req(2, t, [("no.such.config", 0, "1")]))
        await p.ask("bad_value", req(2, t, [("retention.ms", 0, "abc")]))
        await p.ask("unknown_topic", req(2, name("iac-nosuch"), [("retention.ms", 0, "1")]))
        await p.ask("validate_only", req(2, t, [("retention.ms", 0, "300000")], True))

    assert_same_shape(*run_both(brokers, versions, scenario))


# -- produce and consume ------------------------------------------------------------------------

@pytest.mark.parametrize("version", [None, 7])
def test_produce(brokers, versions, version):
    t = name(f"prod{version}")

    async def scenario(p: Peer):
        await p.create_topic(t)
        await p.ask("ok", produce_request(t, 0, batch(3)), version=version)
        await p.ask("bad_partition", produce_request(t, 5, batch(1)), version=version)
        big = build_batch([Record(timestamp=int(time.time() * 1000), value=b"x" * 1_100_000)])
        await p.ask("too_large", produce_request(t, 0, big), version=version)
        corrupt = bytearray(batch(2))
        corrupt[-1] ^= 0xFF  # the CRC no longer matches
        await p.ask("corrupt", produce_request(t, 0, bytes(corrupt)), version=version)
        await p.ask("bad_acks", produce_request(t, 0, batch(1), acks=2), version=version)
        control = build_batch([Record(timestamp=int(time.time() * 1000), key=b"\0\0\0\0",
                                      value=b"\0\0\0\0\0\0")], is_control=True)
        await p.ask("control_batch", produce_request(t, 0, control), version=version)
        await p.ask("unknown_topic", produce_request(name("prod-nosuch") + str(version), 0,
                                                     batch(1)), version=version)

    says_why = "snakka says why it refused the batch; Kafka sends null (clients show either)"
    exceptions: dict[str, str] = {}
    if version is None:
        exceptions.update({f"{label}.*.error_message": says_why
                           for label in ("too_large", "corrupt", "control_batch")})
    assert_same_shape(*run_both(brokers, versions, scenario), exceptions)


def test_produce_without_a_key_to_a_compacted_topic(brokers, versions):
    """Keyless records on a compacted topic (issue 13): the same error code, RecordErrors
    (batch index, message) and error message as Kafka, uncompressed and compressed; keyed
    records and a tombstone are accepted."""
    t = name("prod-compact")
    now = int(time.time() * 1000)

    def records(keys, compression=0) -> bytes:
        return build_batch([Record(timestamp=now, key=k, value=None if k == b"tomb" else b"v")
                            for k in keys], compression=compression)

    async def scenario(p: Peer):
        await p.create_topic(t, configs=[CreatableTopicConfig(name="cleanup.policy",
                                                              value="compact")])
        await p.ask("keyed", produce_request(t, 0, records([b"a", b"b", b"tomb"])))
        await p.ask("one_keyless", produce_request(t, 0, records([b"a", None, b"b"])))
        await p.ask("all_keyless_lz4", produce_request(t, 0, records([None, None], 3)))
        await p.ask("empty_key", produce_request(t, 0, records([b""])))

    assert_same_shape(*run_both(brokers, versions, scenario))


@pytest.mark.parametrize("version", [None, 11, 4])
@pytest.mark.parametrize("isolation_level", [0, 1])
def test_fetch(brokers, versions, version, isolation_level):
    t = name(f"fetch{version}-{isolation_level}")

    async def scenario(p: Peer):
        await p.create_topic(t, partitions=2)
        await p.send(produce_request(t, 0, batch(3)))
        v = p.version(1) if version is None else version
        md = await p.send(MetadataRequest(topics=[MetadataRequestTopic(name=t)]), version=12)
        tid = md.topics[0].topic_id

        def fetch(offset, partitions=(0, 1), topic=t, topic_id=tid, epoch=-1):
            return FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                isolation_level=isolation_level, session_id=0, session_epoch=-1,
                topics=[FetchTopic(topic=topic, topic_id=topic_id, partitions=[FetchPartition(
                    partition=i, fetch_offset=offset, partition_max_bytes=1 << 20,
                    current_leader_epoch=epoch, last_fetched_epoch=-1, log_start_offset=-1)
                    for i in partitions])], forgotten_topics_data=[], rack_id="")
        await p.ask("data", fetch(0), version=v)
        await p.ask("at_end", fetch(3, partitions=(0,)), version=v)
        await p.ask("out_of_range", fetch(100, partitions=(0,)), version=v)
        if v >= 9:  # (a fenced, older epoch cannot exist: every partition's epoch is 0)
            await p.ask("future_epoch", fetch(0, partitions=(0,), epoch=9), version=v)
        await p.ask("bad_partition", fetch(0, partitions=(7,)), version=v)
        if v >= 13:
            await p.ask("unknown_topic_id", fetch(0, partitions=(0,), topic="",
                                                  topic_id=uuid.uuid4()), version=v)
        else:
            await p.ask("unknown_topic", fetch(0, partitions=(0,), topic=name("fetch-nosuch")),
                        version=v)

    assert_same_shape(*run_both(brokers, versions, scenario))


@pytest.mark.parametrize("version", [None, 4, 1])
def test_list_offsets(brokers, versions, version):
    t = name(f"lo{version}")

    async def scenario(p: Peer):
        await p.create_topic(t, partitions=2)
        await p.send(produce_request(t, 0, batch(3)))
        v = p.version(2) if version is None else version
        stamps = {"earliest": -2, "latest": -1, "ts0": 0,
                  "future": int(time.time() * 1000) + 3_600_000}
        if v >= 7:
            stamps["max_timestamp"] = -3
        for label, ts in stamps.items():
            await p.ask(label, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                ListOffsetsTopic(name=t, partitions=[ListOffsetsPartition(
                    partition_index=0, timestamp=ts, current_leader_epoch=-1)])]), version=v)
        for label, ts in {"empty_earliest": -2, "empty_latest": -1}.items():
            await p.ask(label, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                ListOffsetsTopic(name=t, partitions=[ListOffsetsPartition(
                    partition_index=1, timestamp=ts, current_leader_epoch=-1)])]), version=v)
        await p.ask("bad_partition", ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(
            name=t, partitions=[ListOffsetsPartition(partition_index=9, timestamp=-1)])]),
            version=v)

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_init_producer_id(brokers, versions):
    async def scenario(p: Peer):
        await p.ask_ready("idempotent", InitProducerIdRequest(transactional_id=None,
                                                              transaction_timeout_ms=60000))
        await p.ask("v2", InitProducerIdRequest(transactional_id=None,
                                                transaction_timeout_ms=60000), version=2)

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_delete_records(brokers, versions):
    t = name("dr")

    async def scenario(p: Peer):
        await p.create_topic(t)
        await p.send(produce_request(t, 0, batch(5)))

        def req(partition, offset):
            return DeleteRecordsRequest(topics=[DeleteRecordsTopic(name=t, partitions=[
                DeleteRecordsPartition(partition_index=partition, offset=offset)])],
                timeout_ms=30000)
        await p.ask("ok", req(0, 2))
        await p.ask("to_end", req(0, -1))
        await p.ask("beyond_end", req(0, 100))
        await p.ask("bad_partition", req(3, 1))

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_offset_for_leader_epoch(brokers, versions):
    t = name("ofle")

    async def scenario(p: Peer):
        await p.create_topic(t)
        await p.send(produce_request(t, 0, batch(2)))

        def req(partition, epoch, current=-1):
            return OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderTopic(
                topic=t, partitions=[OffsetForLeaderPartition(
                    partition=partition, current_leader_epoch=current, leader_epoch=epoch)])])
        await p.ask("epoch0", req(0, 0))
        await p.ask("future_epoch", req(0, 5))
        await p.ask("fenced", req(0, 0, current=7))
        await p.ask("bad_partition", req(4, 0))

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_describe_log_dirs(brokers, versions):
    t = name("dld")

    async def scenario(p: Peer):
        await p.create_topic(t)
        await p.send(produce_request(t, 0, batch(2)))
        await p.ask("topic", DescribeLogDirsRequest(topics=[DescribableLogDirTopic(
            topic=t, partitions=[0])]))
        await p.ask("v1", DescribeLogDirsRequest(topics=[DescribableLogDirTopic(
            topic=t, partitions=[0])]), version=1)

    assert_same_shape(*run_both(brokers, versions, scenario))


# -- groups -----------------------------------------------------------------------------------

def subscription(topic: str) -> bytes:
    return b"\x00\x01" + ConsumerProtocolSubscription(topics=[topic]).encode(1)


def assignment(topic: str) -> bytes:
    return b"\x00\x01" + ConsumerProtocolAssignment(assigned_partitions=[
        AssignmentTopicPartition(topic=topic, partitions=[0])]).encode(1)


def coordinator_ready(resp) -> bool:
    codes = [c.error_code for c in resp.coordinators] if resp.coordinators else [resp.error_code]
    return not set(codes) & RETRIABLE


async def wait_group_coordinator(p: Peer, group: str) -> None:
    """Until the group's coordinator has loaded its __consumer_offsets partition (Kafka names
    the coordinator before it has; requests then get NOT_COORDINATOR or LOAD_IN_PROGRESS)."""
    await p.until(None, lambda: DescribeGroupsRequest(groups=[group]),
                  lambda r: r.groups[0].error_code not in RETRIABLE, version=5)


@pytest.mark.parametrize("version", [None, "old"])
def test_classic_group(brokers, versions, version):
    """The classic protocol as the Java consumer and librdkafka drive it, then the admin side."""
    g, t = name(f"cg{version}"), name(f"cg{version}-t")
    old = version == "old"  # the versions librdkafka 2.x and kafka-python use

    async def scenario(p: Peer):
        await p.create_topic(t)
        await p.until("find_coordinator", lambda: FindCoordinatorRequest(
            key=g, key_type=0, coordinator_keys=[g]), coordinator_ready,
            version=3 if old else None)
        await wait_group_coordinator(p, g)
        await p.ask("find_txn_coordinator_unknown_type", FindCoordinatorRequest(
            key=g, key_type=7, coordinator_keys=[g]), version=3 if old else None)
        jv = 5 if old else None

        def join(member_id):
            return JoinGroupRequest(group_id=g, session_timeout_ms=30000,
                                    rebalance_timeout_ms=30000, member_id=member_id,
                                    protocol_type="consumer", protocols=[
                                        JoinGroupRequestProtocol(name="range",
                                                                 metadata=subscription(t))])
        first = await p.ask("join_needs_member_id", join(""), version=jv)
        joined = await p.ask("join", join(first.member_id), version=jv)
        m, gen = joined.member_id, joined.generation_id
        await p.ask("sync", SyncGroupRequest(
            group_id=g, generation_id=gen, member_id=m, protocol_type="consumer",
            protocol_name="range", assignments=[SyncGroupRequestAssignment(
                member_id=m, assignment=assignment(t))]), version=3 if old else None)
        await p.ask("heartbeat", HeartbeatRequest(group_id=g, generation_id=gen, member_id=m),
                    version=3 if old else None)
        await p.ask("heartbeat_bad_generation", HeartbeatRequest(
            group_id=g, generation_id=gen + 5, member_id=m), version=3 if old else None)
        await p.ask("heartbeat_unknown_member", HeartbeatRequest(
            group_id=g, generation_id=gen, member_id="nobody"), version=3 if old else None)
        await p.ask("sync_bad_generation", SyncGroupRequest(
            group_id=g, generation_id=gen + 5, member_id=m, protocol_type="consumer",
            protocol_name="range", assignments=[]), version=3 if old else None)
        await p.ask("join_other_protocol_type", JoinGroupRequest(
            group_id=g, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="",
            protocol_type="connect", protocols=[JoinGroupRequestProtocol(
                name="x", metadata=b"")]), version=jv)
        for label, (gen_, member) in {"commit_bad_generation": (gen + 5, m),
                                      "commit_unknown_member": (gen, "nobody")}.items():
            await p.ask(label, OffsetCommitRequest(
                group_id=g, generation_id_or_member_epoch=gen_, member_id=member, topics=[
                    OffsetCommitRequestTopic(name=t, partitions=[OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1)])]), version=7 if old else None)
        await p.ask("commit", OffsetCommitRequest(
            group_id=g, generation_id_or_member_epoch=gen, member_id=m, topics=[
                OffsetCommitRequestTopic(name=t, partitions=[
                    OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                 committed_metadata="meta"),
                    OffsetCommitRequestPartition(partition_index=5, committed_offset=1)])]),
            version=7 if old else None)
        if old:
            await p.ask("fetch_offsets", OffsetFetchRequest(group_id=g, topics=[
                OffsetFetchRequestTopic(name=t, partition_indexes=[0, 1])]), version=7)
            await p.ask("fetch_offsets_all", OffsetFetchRequest(group_id=g, topics=None),
                        version=7)
        else:
            await p.ask("fetch_offsets", OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
                group_id=g, topics=[OffsetFetchRequestTopics(name=t, partition_indexes=[0, 1])]),
                OffsetFetchRequestGroup(group_id=name("cg-nosuch"), topics=None)]))
            await p.ask("fetch_offsets_all", OffsetFetchRequest(groups=[
                OffsetFetchRequestGroup(group_id=g, topics=None)]))
        await p.ask("describe", DescribeGroupsRequest(groups=[g, name("cg-nosuch")]),
                    version=4 if old else None)
        listed = await p.send(ListGroupsRequest(states_filter=[], types_filter=[]),
                              version=2 if old else None)
        listed.groups = [x for x in listed.groups if x.group_id == g]
        p.responses["list"] = listed
        await p.ask("delete_non_empty", DeleteGroupsRequest(groups_names=[g]))
        await p.ask("offset_delete_subscribed", OffsetDeleteRequest(group_id=g, topics=[
            OffsetDeleteRequestTopic(name=t, partitions=[
                OffsetDeleteRequestPartition(partition_index=0)])]))
        await p.ask("leave", LeaveGroupRequest(group_id=g, member_id=m, members=[
            MemberIdentity(member_id=m)]), version=2 if old else None)
        await p.ask("leave_unknown", LeaveGroupRequest(group_id=g, member_id="nobody", members=[
            MemberIdentity(member_id="nobody")]), version=2 if old else None)
        await p.ask("describe_empty", DescribeGroupsRequest(groups=[g]),
                    version=4 if old else None)
        await p.ask("offset_delete", OffsetDeleteRequest(group_id=g, topics=[
            OffsetDeleteRequestTopic(name=t, partitions=[
                OffsetDeleteRequestPartition(partition_index=0)])]))
        await p.ask("delete", DeleteGroupsRequest(groups_names=[g, name("cg-nosuch")]))

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_consumer_group_kip848(brokers, versions):
    """The KIP-848 consumer protocol (Java consumer with group.protocol=consumer)."""
    g, t = name("kg"), name("kg-t")

    async def scenario(p: Peer):
        await p.create_topic(t, partitions=2)
        await p.until(None, lambda: FindCoordinatorRequest(
            key=g, key_type=0, coordinator_keys=[g]), coordinator_ready)
        await wait_group_coordinator(p, g)
        first = await p.until("join", lambda: ConsumerGroupHeartbeatRequest(
            group_id=g, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=[t], server_assignor="uniform", topic_partitions=[]),
            lambda r: r.error_code not in RETRIABLE)
        m, epoch = first.member_id, first.member_epoch
        # the assignment arrives with the first heartbeat or a later one
        hb = await p.until("assigned", lambda: ConsumerGroupHeartbeatRequest(
            group_id=g, member_id=m, member_epoch=epoch, rebalance_timeout_ms=-1,
            subscribed_topic_names=None, server_assignor=None, topic_partitions=None),
            lambda r: r.error_code != 0 or r.assignment is not None or first.assignment)
        assert hb is not None
        # One group per request: Kafka 4.0 answers [known, unknown] with four entries (the
        # known group again, as not found), a Kafka defect clients survive by taking the first.
        await p.ask("describe", ConsumerGroupDescribeRequest(group_ids=[g]))
        await p.ask("describe_unknown", ConsumerGroupDescribeRequest(group_ids=[name("kg-no")]))
        await p.ask("fenced", ConsumerGroupHeartbeatRequest(
            group_id=g, member_id=m, member_epoch=epoch + 10, rebalance_timeout_ms=-1))
        await p.ask("leave", ConsumerGroupHeartbeatRequest(group_id=g, member_id=m,
                                                           member_epoch=-1))

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_idempotent_produce(brokers, versions):
    t = name("idem")

    async def scenario(p: Peer):
        await p.create_topic(t)
        pid = (await p.ask_ready("init", InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60000))).producer_id
        await p.ask("first", produce_request(t, 0, batch(2, producer_id=pid, base_sequence=0)))
        await p.ask("duplicate", produce_request(t, 0, batch(2, producer_id=pid,
                                                               base_sequence=0)))
        await p.ask("gap", produce_request(t, 0, batch(1, producer_id=pid, base_sequence=7)))
        await p.ask("unknown_pid", produce_request(t, 0, batch(1, producer_id=pid + 1000,
                                                                 base_sequence=3)))

    assert_same_shape(*run_both(brokers, versions, scenario), {
        "gap.*.error_message": "snakka says which sequence it expected; Kafka sends null"})


def test_fetch_session(brokers, versions):
    """KIP-227 sessions as the Java consumer and librdkafka use them."""
    t = name("fsess")

    async def scenario(p: Peer):
        await p.create_topic(t, partitions=2)
        await p.send(produce_request(t, 0, batch(2)))
        md = await p.send(MetadataRequest(topics=[MetadataRequestTopic(name=t)]), version=12)
        tid = md.topics[0].topic_id

        def fetch(session_id, epoch, partitions, offset=0, forgotten=()):
            return FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                isolation_level=0, session_id=session_id, session_epoch=epoch,
                topics=[FetchTopic(topic=t, topic_id=tid, partitions=[FetchPartition(
                    partition=i, fetch_offset=offset, partition_max_bytes=1 << 20)
                    for i in partitions])] if partitions else [],
                forgotten_topics_data=[ForgottenTopic(topic=t, topic_id=tid,
                                                      partitions=list(forgotten))]
                if forgotten else [], rack_id="")
        full = await p.ask("new_session", fetch(0, 0, (0, 1)))
        sid = full.session_id
        await p.ask("incremental_nothing_new", fetch(sid, 1, (), 0))
        await p.ask("incremental_forget", fetch(sid, 2, (), 0, forgotten=(1,)))
        await p.ask("bad_epoch", fetch(sid, 7, (), 0))
        await p.ask("unknown_session", fetch(sid + 12345, 1, (), 0))
        await p.ask("close", fetch(sid, -1, (0,)))

    assert_same_shape(*run_both(brokers, versions, scenario))


def test_alter_configs(brokers, versions):
    """The legacy AlterConfigs (kafka-python's alter_configs, older admin tools)."""
    t = name("ac")

    async def scenario(p: Peer):
        await p.create_topic(t)

        def req(resource, cfgs, validate_only=False):
            return legacy_alter.AlterConfigsRequest(resources=[legacy_alter.AlterConfigsResource(
                resource_type=2, resource_name=resource,
                configs=[legacy_alter.AlterableConfig(name=k, value=v) for k, v in cfgs])],
                validate_only=validate_only)
        await p.ask("set", req(t, [("retention.ms", "200000")]))
        await p.ask("unknown_config", req(t, [("no.such.config", "1")]))
        await p.ask("bad_value", req(t, [("retention.ms", "abc")]))
        await p.ask("unknown_topic", req(name("ac-nosuch"), [("retention.ms", "1")]))
        await p.ask("validate_only", req(t, [("retention.ms", "300000")], True))

    assert_same_shape(*run_both(brokers, versions, scenario))
