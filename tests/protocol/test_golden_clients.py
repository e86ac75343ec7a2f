"""Golden bytes from real Kafka client libraries.

Requests (and some responses) are encoded offline by kafka-python 3's
schema-driven classes (``kafka.protocol.*``), by kafka-python's older
hand-written structs (``kafka.protocol.old``) and by aiokafka's hand-written
structs; we decode them with our codecs, check the field values, and re-encode
to the identical bytes.  A few frames are also assembled by hand from the
protocol spec (e.g. the ApiVersions v3 request librdkafka sends first).
"""

from __future__ import annotations

import struct
import uuid

import pytest

from snakka.protocol import (
    ErrorCode,
    decode_request,
    decode_request_header,
    decode_response_header,
    encode_request,
    encode_response,
)
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from snakka.protocol.messages.create_topics_request import CreateTopicsRequest
from snakka.protocol.messages.fetch_request import FetchRequest
from snakka.protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    PartitionData,
)
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.messages.heartbeat_request import HeartbeatRequest
from snakka.protocol.messages.join_group_request import JoinGroupRequest
from snakka.protocol.messages.list_offsets_request import ListOffsetsRequest
from snakka.protocol.messages.metadata_request import MetadataRequest
from snakka.protocol.messages.metadata_response import MetadataResponse
from snakka.protocol.messages.offset_commit_request import OffsetCommitRequest
from snakka.protocol.messages.produce_request import ProduceRequest
from snakka.protocol.messages.produce_response import ProduceResponse
from snakka.protocol.messages.request_header import RequestHeader
from snakka.protocol.messages.sync_group_request import SyncGroupRequest

kp_meta = pytest.importorskip("kafka.protocol.metadata")
kp_cons = pytest.importorskip("kafka.protocol.consumer")
kp_prod = pytest.importorskip("kafka.protocol.producer")
kp_admin = pytest.importorskip("kafka.protocol.admin")
kp_old_produce = pytest.importorskip("kafka.protocol.old.produce")
kp_old_fetch = pytest.importorskip("kafka.protocol.old.fetch")
kp_old_list_offsets = pytest.importorskip("kafka.protocol.old.list_offsets")
ak_admin = pytest.importorskip("aiokafka.protocol.admin")
ak_meta = pytest.importorskip("aiokafka.protocol.metadata")
ak_fetch = pytest.importorskip("aiokafka.protocol.fetch")
ak_produce = pytest.importorskip("aiokafka.protocol.produce")
ak_offset = pytest.importorskip("aiokafka.protocol.offset")
ak_commit = pytest.importorskip("aiokafka.protocol.commit")
ak_group = pytest.importorskip("aiokafka.protocol.group")
ak_coord = pytest.importorskip("aiokafka.protocol.coordination")

RECORDS = b"\x00" * 12 + b"records-blob"  # opaque to the codec


def roundtrip(cls, data: bytes, version: int):
    """Decode client bytes with our codec and check we re-encode them identically."""
    data = bytes(data)
    obj = cls.decode(data, version)
    assert obj.encode(version) == data, f"{cls.__name__} v{version} re-encoding differs"
    return obj


# ----------------------------------------------------------------- ApiVersions


@pytest.mark.parametrize("v", [0, 1, 2, 3])
def test_api_versions_request_kafka_python(v):
    kw = (
        {"client_software_name": "kafka-python", "client_software_version": "3.0.12"}
        if v >= 3
        else {}
    )
    data = kp_meta.ApiVersionsRequest[v](**kw).encode()
    obj = roundtrip(ApiVersionsRequest, data, v)
    if v >= 3:
        assert (obj.client_software_name, obj.client_software_version) == ("kafka-python", "3.0.12")


@pytest.mark.parametrize("v", [0, 1, 2])
def test_api_versions_request_aiokafka(v):
    data = getattr(ak_admin, f"ApiVersionRequest_v{v}")().encode()
    assert data == b""
    assert ApiVersionsRequest.decode(data, v) == ApiVersionsRequest()


def test_api_versions_v3_request_as_librdkafka_sends_it():
    # size | header v2: key 18, version 3, correlation id 1, client id "rdkafka"
    # (int16 length even in header v2), empty tags | body: compact strings.
    body = b"\x0blibrdkafka" + b"\x062.6.0" + b"\x00"
    header = struct.pack(">hhih", 18, 3, 1, 7) + b"rdkafka" + b"\x00"
    frame = header + body
    hdr, off, spec = decode_request_header(frame)
    assert (hdr.request_api_key, hdr.request_api_version, hdr.correlation_id) == (18, 3, 1)
    assert hdr.client_id == "rdkafka" and off == len(header) and spec.name == "ApiVersions"
    _, req, _ = decode_request(frame)
    assert req.client_software_name == "librdkafka"
    assert req.client_software_version == "2.6.0"
    sized = encode_request(1, "rdkafka", 3, req)
    assert sized == struct.pack(">i", len(frame)) + frame


def test_api_versions_response_kafka_python_decodes_ours():
    resp = ApiVersionsResponse(
        error_code=0,
        api_keys=[ApiVersion(0, 0, 13), ApiVersion(18, 0, 4)],
        throttle_time_ms=5,
    )
    frame = encode_response(42, 18, 3, resp)
    size, corr = struct.unpack_from(">ii", frame)
    assert size == len(frame) - 4 and corr == 42
    # ApiVersions responses always use response header v0: the body follows directly.
    theirs = kp_meta.ApiVersionsResponse.decode(frame[8:], version=3)
    assert theirs.error_code == 0 and theirs.throttle_time_ms == 5
    assert [(k.api_key, k.min_version, k.max_version) for k in theirs.api_keys] == [
        (0, 0, 13),
        (18, 0, 4),
    ]
    # and kafka-python's own encoding of it decodes to the same object
    assert ApiVersionsResponse.decode(bytes(theirs.encode()), 3) == resp


def test_api_versions_v0_error_response_bytes():
    resp = ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[ApiVersion(18, 0, 4)]
    )
    assert encode_response(7, 18, 0, resp) == bytes.fromhex(
        "00000010 00000007 0023 00000001 0012 0000 0004"
    )


# -------------------------------------------------------------------- Metadata


@pytest.mark.parametrize("v", [0, 1, 4, 8, 9, 10, 12, 13])
def test_metadata_request_kafka_python(v):
    K = kp_meta.MetadataRequest
    topics = [
        K.MetadataRequestTopic(name="orders", **({"topic_id": uuid.UUID(int=0)} if v >= 10 else {}))
    ]
    kw = {"topics": topics}
    if v >= 4:
        kw["allow_auto_topic_creation"] = False
    if 8 <= v <= 10:
        kw["include_cluster_authorized_operations"] = True
    if v >= 8:
        kw["include_topic_authorized_operations"] = True
    obj = roundtrip(MetadataRequest, K[v](**kw).encode(), v)
    assert [t.name for t in obj.topics] == ["orders"]
    if v >= 4:
        assert obj.allow_auto_topic_creation is False
    if v >= 8:
        assert obj.include_topic_authorized_operations is True


@pytest.mark.parametrize("v", [1, 4, 9])
def test_metadata_request_null_topics_means_all(v):
    obj = roundtrip(MetadataRequest, kp_meta.MetadataRequest[v](topics=None).encode(), v)
    assert obj.topics is None


@pytest.mark.parametrize("v", [0, 1, 2, 3, 4, 5])
def test_metadata_request_aiokafka(v):
    data = getattr(ak_meta, f"MetadataRequest_v{v}")(
        *((["a", "b"],) + ((True,) if v >= 4 else ()))
    ).encode()
    obj = roundtrip(MetadataRequest, data, v)
    assert [t.name for t in obj.topics] == ["a", "b"]


def test_metadata_response_aiokafka_v1():
    cls = ak_meta.MetadataResponse_v1
    data = cls(
        [(1, "host1", 9092, "rack-a"), (2, "host2", 9093, None)],
        1,
        [(0, "orders", False, [(0, 0, 1, [1, 2], [1])])],
    ).encode()
    obj = roundtrip(MetadataResponse, data, 1)
    assert [(b.node_id, b.host, b.port, b.rack) for b in obj.brokers] == [
        (1, "host1", 9092, "rack-a"),
        (2, "host2", 9093, None),
    ]
    (t,) = obj.topics
    assert (t.name, t.is_internal, t.partitions[0].replica_nodes, t.partitions[0].isr_nodes) == (
        "orders",
        False,
        [1, 2],
        [1],
    )


def test_metadata_response_kafka_python_v12():
    K = kp_meta.MetadataResponse
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    theirs = K[12](
        throttle_time_ms=0,
        brokers=[K.MetadataResponseBroker(node_id=1, host="localhost", port=9092, rack=None)],
        cluster_id="cluster-1",
        controller_id=1,
        topics=[
            K.MetadataResponseTopic(
                error_code=0,
                name="orders",
                topic_id=tid,
                is_internal=False,
                partitions=[
                    K.MetadataResponseTopic.MetadataResponsePartition(
                        error_code=0,
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=3,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                ],
            )
        ],
    )
    obj = roundtrip(MetadataResponse, theirs.encode(), 12)
    assert obj.cluster_id == "cluster-1" and obj.topics[0].topic_id == tid
    assert obj.topics[0].partitions[0].leader_epoch == 3


# --------------------------------------------------------------------- Produce


@pytest.mark.parametrize("v", [3, 7, 8, 9, 11, 12])
def test_produce_request_kafka_python(v):
    K = kp_prod.ProduceRequest
    T, P = K.TopicProduceData, K.TopicProduceData.PartitionProduceData
    data = K[v](
        transactional_id="tx-1",
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            T(name="orders", partition_data=[P(index=0, records=RECORDS), P(index=1, records=None)])
        ],
    ).encode()
    obj = roundtrip(ProduceRequest, data, v)
    assert (obj.transactional_id, obj.acks, obj.timeout_ms) == ("tx-1", -1, 30000)
    (t,) = obj.topic_data
    assert t.name == "orders"
    assert [p.index for p in t.partition_data] == [0, 1]
    assert isinstance(t.partition_data[0].records, memoryview)
    assert t.partition_data[0].records == RECORDS and t.partition_data[1].records is None


@pytest.mark.parametrize("v", [0, 1, 2])
def test_produce_request_old_versions(v):
    data = getattr(kp_old_produce, f"ProduceRequest_v{v}")(
        acks=1, timeout_ms=1000, topic_data=[("orders", [(0, RECORDS)])]
    ).encode()
    obj = roundtrip(ProduceRequest, data, v)
    assert obj.transactional_id is None and obj.acks == 1
    assert obj.topic_data[0].partition_data[0].records == RECORDS


@pytest.mark.parametrize("v", [0, 3, 5, 7, 8])
def test_produce_request_aiokafka(v):
    cls = getattr(ak_produce, f"ProduceRequest_v{v}")
    args = (1, 1500, [("orders", [(3, RECORDS)])])
    data = cls(*(((None,) + args) if v >= 3 else args)).encode()
    obj = roundtrip(ProduceRequest, data, v)
    assert obj.topic_data[0].partition_data[0].index == 3


@pytest.mark.parametrize("v", [8, 9, 10])
def test_produce_response_kafka_python(v):
    K = kp_prod.ProduceResponse
    T = K.TopicProduceResponse
    P = T.PartitionProduceResponse
    theirs = K[v](
        responses=[
            T(
                name="orders",
                partition_responses=[
                    P(
                        index=0,
                        error_code=0,
                        base_offset=100,
                        log_append_time_ms=-1,
                        log_start_offset=0,
                    ),
                    P(
                        index=1,
                        error_code=6,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        error_message="not leader",
                    ),
                ],
            )
        ],
        throttle_time_ms=0,
    )
    obj = roundtrip(ProduceResponse, theirs.encode(), v)
    p0, p1 = obj.responses[0].partition_responses
    assert (p0.base_offset, p1.error_code, p1.error_message) == (100, 6, "not leader")


# ----------------------------------------------------------------------- Fetch


@pytest.mark.parametrize("v", [4, 7, 11, 12, 13, 15])
def test_fetch_request_kafka_python(v):
    K = kp_cons.FetchRequest
    T, P = K.FetchTopic, K.FetchTopic.FetchPartition
    tid = uuid.UUID(int=0x1234)
    topic = T(
        partitions=[
            P(
                partition=2,
                fetch_offset=1000,
                partition_max_bytes=1 << 20,
                current_leader_epoch=5,
                log_start_offset=-1,
            )
        ],
        **({"topic_id": tid} if v >= 13 else {"topic": "orders"}),
    )
    kw = {
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 50 << 20,
        "isolation_level": 1,
        "topics": [topic],
    }
    if v < 15:
        kw["replica_id"] = -1
    if v >= 7:
        kw.update(session_id=0, session_epoch=-1, forgotten_topics_data=[])
    if v >= 11:
        kw["rack_id"] = "rack-a"
    obj = roundtrip(FetchRequest, K[v](**kw).encode(), v)
    (t,) = obj.topics
    p = t.partitions[0]
    assert (p.partition, p.fetch_offset, p.partition_max_bytes) == (2, 1000, 1 << 20)
    assert obj.isolation_level == 1 and obj.max_wait_ms == 500
    if v >= 13:
        assert t.topic_id == tid
    else:
        assert t.topic == "orders"
    if v >= 11:
        assert obj.rack_id == "rack-a"


@pytest.mark.parametrize("v", [0, 1, 2, 3])
def test_fetch_request_old_versions_kafka_python(v):
    data = getattr(kp_old_fetch, f"FetchRequest_v{v}")(
        -1, 100, 1, *((1 << 20,) if v == 3 else ()), [("orders", [(0, 42, 4096)])]
    ).encode()
    obj = roundtrip(FetchRequest, data, v)
    assert obj.replica_id == -1 and obj.max_wait_ms == 100
    p = obj.topics[0].partitions[0]
    assert (p.partition, p.fetch_offset, p.partition_max_bytes) == (0, 42, 4096)


@pytest.mark.parametrize("v", [0, 1, 2, 3, 4])
def test_fetch_request_aiokafka(v):
    cls = getattr(ak_fetch, f"FetchRequest_v{v}")
    head = (-1, 100, 1) + (((1 << 20),) if v >= 3 else ()) + ((0,) if v >= 4 else ())
    data = cls(*head, [("orders", [(0, 42, 4096)])]).encode()
    obj = roundtrip(FetchRequest, data, v)
    assert obj.topics[0].partitions[0].fetch_offset == 42


def test_fetch_response_aiokafka_v4():
    data = ak_fetch.FetchResponse_v4(
        0, [("orders", [(0, 0, 100, 90, [(7, 50)], RECORDS)])]
    ).encode()
    obj = roundtrip(FetchResponse, data, 4)
    p = obj.responses[0].partitions[0]
    assert (p.high_watermark, p.last_stable_offset) == (100, 90)
    assert p.aborted_transactions == [AbortedTransaction(producer_id=7, first_offset=50)]
    assert p.records == RECORDS


def test_fetch_response_v12_tagged_fields_kafka_python():
    ours = FetchResponse(
        throttle_time_ms=0,
        error_code=0,
        session_id=9,
        responses=[
            FetchableTopicResponse(
                topic="orders",
                partitions=[
                    PartitionData(
                        partition_index=0,
                        high_watermark=10,
                        last_stable_offset=10,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=RECORDS,
                        current_leader=LeaderIdAndEpoch(leader_id=1, leader_epoch=4),
                    ),
                    PartitionData(partition_index=1, error_code=6, preferred_read_replica=-1),
                ],
            )
        ],
    )
    # default tagged fields are not written; a non-default one is (tag 1)
    data = ours.encode(12)
    theirs = kp_cons.FetchResponse.decode(data, version=12)
    p0, p1 = theirs.responses[0].partitions
    assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (1, 4)
    assert bytes(p0.records) == RECORDS and p1.error_code == 6
    assert p1.current_leader is None or p1.current_leader.leader_id == -1
    assert FetchResponse.decode(data, 12) == ours


# ------------------------------------------------------------------ ListOffsets


def test_list_offsets_v0_old_kafka_python_and_aiokafka():
    data = ak_offset.OffsetRequest_v0(-1, [("orders", [(0, -1, 1)])]).encode()
    obj = roundtrip(ListOffsetsRequest, data, 0)
    p = obj.topics[0].partitions[0]
    assert (p.partition_index, p.timestamp, p.max_num_offsets) == (0, -1, 1)
    assert (
        bytes(kp_old_list_offsets.ListOffsetsRequest_v0(-1, [("orders", [(0, -1, 1)])]).encode())
        == data
    )


# aiokafka's OffsetRequest_v4/v5 declare current_leader_epoch as Int64 (Kafka: int32),
# so only v1-v3 are usable as golden bytes.
@pytest.mark.parametrize("v", [1, 2, 3])
def test_list_offsets_aiokafka(v):
    cls = getattr(ak_offset, f"OffsetRequest_v{v}")
    partition = (0, -2)
    data = cls(-1, *((1,) if v >= 2 else ()), [("orders", [partition])]).encode()
    obj = roundtrip(ListOffsetsRequest, data, v)
    assert obj.topics[0].partitions[0].timestamp == -2


@pytest.mark.parametrize("v", [1, 6, 8, 10])
def test_list_offsets_kafka_python(v):
    K = kp_cons.ListOffsetsRequest
    T, P = K.ListOffsetsTopic, K.ListOffsetsTopic.ListOffsetsPartition
    data = K[v](
        replica_id=-1,
        isolation_level=1,
        topics=[
            T(
                name="orders",
                partitions=[P(partition_index=3, current_leader_epoch=-1, timestamp=-1)],
            )
        ],
    ).encode()
    obj = roundtrip(ListOffsetsRequest, data, v)
    assert obj.topics[0].partitions[0].partition_index == 3


# ------------------------------------------------------------------ CreateTopics


@pytest.mark.parametrize("v", [0, 1, 2, 3])
def test_create_topics_aiokafka(v):
    cls = getattr(ak_admin, f"CreateTopicsRequest_v{v}")
    topics = [("orders", 3, 1, [], [("cleanup.policy", "compact")])]
    data = cls(topics, 5000, *((True,) if v >= 1 else ())).encode()
    obj = roundtrip(CreateTopicsRequest, data, v)
    (t,) = obj.topics
    assert (t.name, t.num_partitions, t.replication_factor) == ("orders", 3, 1)
    assert [(c.name, c.value) for c in t.configs] == [("cleanup.policy", "compact")]
    assert obj.timeout_ms == 5000
    if v >= 1:
        assert obj.validate_only is True


@pytest.mark.parametrize("v", [2, 4, 5, 7])
def test_create_topics_kafka_python(v):
    K = kp_admin.CreateTopicsRequest
    T = K.CreatableTopic
    data = K[v](
        topics=[
            T(
                name="orders",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[T.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])],
                configs=[T.CreatableTopicConfig(name="retention.ms", value=None)],
            )
        ],
        timeout_ms=1000,
        validate_only=False,
    ).encode()
    obj = roundtrip(CreateTopicsRequest, data, v)
    assert obj.topics[0].assignments[0].broker_ids == [1, 2]
    assert obj.topics[0].configs[0].value is None


# ---------------------------------------------------------- groups/coordinator


@pytest.mark.parametrize("v", [0, 1, 2, 3, 4, 6])
def test_find_coordinator_kafka_python(v):
    K = kp_meta.FindCoordinatorRequest
    kw = {"key_type": 0}
    if v < 4:
        kw["key"] = "my-group"
    else:
        kw["coordinator_keys"] = ["g1", "g2"]
    obj = roundtrip(FindCoordinatorRequest, K[v](**kw).encode(), v)
    if v < 4:
        assert obj.key == "my-group"
    else:
        assert obj.coordinator_keys == ["g1", "g2"]


@pytest.mark.parametrize("v", [0, 1])
def test_find_coordinator_aiokafka(v):
    cls = getattr(ak_coord, f"FindCoordinatorRequest_v{v}")
    data = cls("my-group", *((1,) if v else ())).encode()
    obj = roundtrip(FindCoordinatorRequest, data, v)
    assert obj.key == "my-group" and obj.key_type == (1 if v else 0)


@pytest.mark.parametrize("v", [0, 1, 2, 5])
def test_join_group_aiokafka(v):
    cls = getattr(ak_group, f"JoinGroupRequest_v{v}")
    args = ["grp", 10000]
    if v >= 1:
        args.append(300000)
    args.append("")
    if v >= 5:
        args.append(None)
    args += ["consumer", [("range", b"\x00\x01meta")]]
    obj = roundtrip(JoinGroupRequest, cls(*args).encode(), v)
    assert obj.group_id == "grp" and obj.protocol_type == "consumer"
    assert obj.protocols[0].name == "range" and obj.protocols[0].metadata == b"\x00\x01meta"
    if v >= 5:
        assert obj.group_instance_id is None


@pytest.mark.parametrize("v", [6, 7, 9])
def test_join_group_kafka_python_flexible(v):
    K = kp_cons.JoinGroupRequest
    P = K.JoinGroupRequestProtocol
    data = K[v](
        group_id="grp",
        session_timeout_ms=45000,
        rebalance_timeout_ms=300000,
        member_id="m-1",
        group_instance_id="inst",
        protocol_type="consumer",
        protocols=[P(name="cooperative-sticky", metadata=b"\x00\x03")],
        reason="rejoin",
    ).encode()
    obj = roundtrip(JoinGroupRequest, data, v)
    assert obj.group_instance_id == "inst" and obj.protocols[0].name == "cooperative-sticky"


@pytest.mark.parametrize("v", [0, 1, 3])
def test_sync_group_and_heartbeat_aiokafka(v):
    args = ["grp", 3, "m-1"] + ([None] if v >= 3 else []) + [[("m-1", b"assign")]]
    obj = roundtrip(
        SyncGroupRequest, getattr(ak_group, f"SyncGroupRequest_v{v}")(*args).encode(), v
    )
    assert obj.assignments[0].assignment == b"assign"
    if v <= 1:
        hb = roundtrip(
            HeartbeatRequest,
            getattr(ak_group, f"HeartbeatRequest_v{v}")("grp", 3, "m-1").encode(),
            v,
        )
        assert (hb.group_id, hb.generation_id, hb.member_id) == ("grp", 3, "m-1")


@pytest.mark.parametrize("v", [0, 1, 2, 3])
def test_offset_commit_aiokafka(v):
    cls = getattr(ak_commit, f"OffsetCommitRequest_v{v}")
    if v == 0:
        args = ["grp", [("orders", [(0, 123, "meta")])]]
    elif v == 1:
        args = ["grp", 5, "m-1", [("orders", [(0, 123, 1700000000000, "meta")])]]
    else:
        args = ["grp", 5, "m-1", -1, [("orders", [(0, 123, "meta")])]]
    obj = roundtrip(OffsetCommitRequest, cls(*args).encode(), v)
    p = obj.topics[0].partitions[0]
    assert (p.partition_index, p.committed_offset, p.committed_metadata) == (0, 123, "meta")
    if v == 1:
        assert p.commit_timestamp == 1700000000000
    if v >= 2:
        assert obj.retention_time_ms == -1


@pytest.mark.parametrize("v", [2, 5, 8, 9])
def test_offset_commit_kafka_python(v):
    K = kp_cons.OffsetCommitRequest
    T, P = K.OffsetCommitRequestTopic, K.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    data = K[v](
        group_id="grp",
        generation_id_or_member_epoch=7,
        member_id="m-1",
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[
            T(
                name="orders",
                partitions=[
                    P(
                        partition_index=1,
                        committed_offset=99,
                        committed_leader_epoch=2,
                        committed_metadata=None,
                    )
                ],
            )
        ],
    ).encode()
    obj = roundtrip(OffsetCommitRequest, data, v)
    p = obj.topics[0].partitions[0]
    assert (p.committed_offset, p.committed_metadata) == (99, None)
    assert obj.generation_id_or_member_epoch == 7


# ------------------------------------------------------------------- framing


@pytest.mark.parametrize("v", [1, 9])
def test_full_request_frame_kafka_python(v):
    req = kp_meta.MetadataRequest[v](topics=None)
    req.with_header(correlation_id=77, client_id="kp-client")
    frame = bytes(req.encode(header=True, framed=True))
    hdr, off, spec = decode_request_header(frame[4:])
    assert (hdr.correlation_id, hdr.client_id, spec.api_key) == (77, "kp-client", 3)
    assert spec.request_header_version(v) == (2 if v >= 9 else 1)
    _, body, _ = decode_request(frame[4:])
    assert body.topics is None
    assert encode_request(77, "kp-client", v, body) == frame


def test_unknown_api_key_header_still_readable():
    frame = struct.pack(">hhih", 999, 4, 5, 3) + b"abc" + b"rest"
    hdr, off, spec = decode_request_header(frame)
    assert spec is None and hdr.correlation_id == 5 and hdr.client_id == "abc" and off == 13
    hdr, off, spec = decode_request_header(struct.pack(">hhih", 3, 99, 6, -1))
    assert spec.name == "Metadata" and hdr.correlation_id == 6 and hdr.client_id is None


def test_controlled_shutdown_v0_uses_request_header_v0():
    from snakka.protocol.apis import API_SPECS

    assert API_SPECS[7].request_header_version(0) == 0
    frame = struct.pack(">hhi", 7, 0, 11) + struct.pack(">i", 3)  # broker id 3
    hdr, off, spec = decode_request_header(frame)
    assert off == 8 and hdr.correlation_id == 11
    _, req, _ = decode_request(frame)
    assert req.broker_id == 3


def test_response_header_versions_and_framing():
    resp = MetadataResponse(brokers=[], topics=[], cluster_id=None, controller_id=-1)
    flex = encode_response(9, 3, 12, resp)
    classic = encode_response(9, 3, 8, resp)
    assert flex[8] == 0  # response header v1: empty tagged fields after the correlation id
    hdr, off = decode_response_header(flex[4:], 3, 12)
    assert hdr.correlation_id == 9 and off == 5
    assert MetadataResponse.decode(flex[4 + off :], 12) == resp
    hdr, off = decode_response_header(classic[4:], 3, 8)
    assert off == 4 and MetadataResponse.decode(classic[8:], 8) == resp
    theirs = kp_meta.MetadataResponse.decode(flex[4:], version=12, header=True)
    assert theirs.controller_id == -1


def test_request_header_roundtrip_against_kafka_python_header_bytes():
    # header v1 and v2 for the same request: only the trailing tagged byte differs
    h1 = RequestHeader(3, 1, 1234, "client").encode(1)
    h2 = RequestHeader(3, 9, 1234, "client").encode(2)
    assert h1 == struct.pack(">hhih", 3, 1, 1234, 6) + b"client"
    assert h2 == struct.pack(">hhih", 3, 9, 1234, 6) + b"client\x00"
    null_client = RequestHeader(3, 1, 1, None).encode(1)
    assert null_client.endswith(b"\xff\xff")
