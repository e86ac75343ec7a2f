"""The metadata log's KRaft format (metadata/kraft.py): each logical record maps onto Kafka's
records and back to the same state; framing, control records, snapshots, quorum-state and the
leader-epoch checkpoint are Kafka's bytes; metadata transactions are honoured at replay."""

from __future__ import annotations

import json
import uuid

import pytest

from snakka.metadata import kraft
from snakka.metadata.core import ClusterMetadata, state_records
from snakka.protocol.internal import metadata as M
from snakka.records.record import batch_records, iter_batches

DIR = uuid.UUID("12345678-1234-5678-1234-567812345678")
TID = uuid.UUID("5bd3b4ee-029e-4461-a940-e9f36f350d40")


def codec() -> kraft.KraftCodec:
    return kraft.KraftCodec(node_id=1, directory_id=DIR)


def replay(values: list[bytes]) -> ClusterMetadata:
    md = ClusterMetadata()
    r = kraft.Replayer()
    for v in values:
        for rec in r.feed(v):
            md.apply(rec)
    r.finish()
    return md


def sample_state() -> ClusterMetadata:
    md = ClusterMetadata()
    for rec in [
        {"type": "feature_level", "name": "metadata.version", "level": 25},
        {"type": "topic", "name": "orders", "topic_id": TID.hex, "partitions": 3,
         "configs": {"retention.ms": "12345", "cleanup.policy": "compact"}},
        {"type": "partitions", "topic_id": TID.hex, "partitions": 5, "first": 3},
        {"type": "config", "resource_type": 4, "resource_name": "", "configs":
         {"log.cleaner.threads": "2"}},
        {"type": "config", "resource_type": 16, "resource_name": "cm1", "configs":
         {"metrics": "org.apache", "interval.ms": "60000"}},
        {"type": "config", "resource_type": 32, "resource_name": "g1", "configs":
         {"consumer.session.timeout.ms": "50000"}},
        {"type": "producer_ids", "next": 3000},
        {"type": "acl", "id": uuid.uuid4().hex, "resource_type": 2, "resource_name": "orders",
         "pattern_type": 3, "principal": "User:alice", "host": "*", "operation": 3,
         "permission_type": 3},
        {"type": "user_scram_credential", "name": "alice", "mechanism": 1, "salt": "00ff",
         "stored_key": "aa" * 32, "server_key": "bb" * 32, "iterations": 4096},
        {"type": "client_quota", "entity": [["user", "alice"], ["client-id", None]],
         "key": "producer_byte_rate", "value": 1024.0, "remove": False},
    ]:
        md.apply(rec)
    return md


def snapshot(md: ClusterMetadata) -> tuple:
    return ({n: (str(t.topic_id), t.partitions, t.configs) for n, t in md.topics.items()},
            md.dynamic_configs, md.next_producer_id_block, md.features,
            sorted((i, str(a)) for i, a in md.acls.acls(__import__(
                "snakka.security.acl_authorizer", fromlist=["x"]).AclBindingFilter())),
            {u: dict(c) for u, c in md.scram.users.items()}, md.client_quotas.quotas)


def test_state_survives_the_kafka_records_and_back():
    md = sample_state()
    values = codec().encode(state_records(md))
    assert snapshot(replay(values)) == snapshot(md)


def test_topic_maps_to_topic_config_and_partition_records_in_kafkas_order():
    rec = {"type": "topic", "name": "orders", "topic_id": TID.hex, "partitions": 2,
           "configs": {"retention.ms": "1"}}
    msgs = codec().to_kafka(rec)
    assert [type(m).__name__ for m, _ in msgs] == [
        "TopicRecord", "ConfigRecord", "PartitionRecord", "PartitionRecord"]
    p = msgs[2][0]
    assert (p.replicas, p.isr, p.leader, p.directories, msgs[2][1]) == ([1], [1], 1, [DIR], 2)
    assert msgs[0][0].topic_id == TID


@pytest.mark.parametrize("rtype", [2, 4, 16, 32])
def test_config_of_any_resource_type_is_one_config_record_per_key(rtype):
    msgs = codec().to_kafka({"type": "config", "resource_type": rtype, "resource_name": "r",
                             "configs": {"a": "1", "b": None}})
    assert [(m.resource_type, m.name, m.value) for m, _ in msgs] == [(rtype, "a", "1"),
                                                                   (rtype, "b", None)]


def test_framing_is_kafkas_frame_version_api_key_version():
    v = kraft.encode_message(M.FeatureLevelRecord(name="metadata.version", feature_level=25), 0)
    # Kafka's bytes for this record (kafka-dump-log: valueSize 23).
    assert v[:3] == bytes([1, M.FeatureLevelRecord.API_KEY, 0]) and len(v) == 23
    msg, version = kraft.decode_message(v)
    assert (msg.name, msg.feature_level, version) == ("metadata.version", 25, 0)
    with pytest.raises(kraft.KraftFormatError):
        kraft.decode_message(b"\x00not json")
    assert kraft.is_json_value(b'{"type":"topic"}') and not kraft.is_json_value(v)


def test_kafka_only_records_are_ignored_and_cluster_id_is_not_a_record():
    assert codec().to_kafka({"type": "cluster", "cluster_id": "x"}) == []
    assert kraft.KraftCodec.from_kafka(M.NoOpRecord()) == []
    regs = kraft.registration_records(1, DIR, [("PLAINTEXT", "h", 9092, "PLAINTEXT")],
                                      {"group.version": (0, 1)}, 7)
    broker = regs[1][0]
    assert broker.fenced and broker.broker_epoch == 7 and broker.log_dirs == [DIR]
    assert replay([kraft.encode_message(m, v) for m, v in regs]).topics == {}


def test_unfinished_or_aborted_metadata_transactions_are_dropped():
    c = codec()
    topic = c.encode([{"type": "topic", "name": "t", "topic_id": TID.hex, "partitions": 1,
                       "configs": {}}])
    begin = kraft.encode_message(M.BeginTransactionRecord(name="x"), 0)
    end = kraft.encode_message(M.EndTransactionRecord(), 0)
    abort = kraft.encode_message(M.AbortTransactionRecord(), 0)
    assert "t" in replay([begin, *topic, end]).topics
    assert replay([begin, *topic, abort]).topics == {}
    assert replay([begin, *topic]).topics == {}
    big = [kraft.encode_message(M.NoOpRecord(), 0)] * (kraft.MAX_RECORDS_PER_BATCH + 1)
    wrapped = c.transaction(big, "n")
    assert wrapped[0] == begin[:3] + wrapped[0][3:] and len(wrapped) == len(big) + 2


def test_snapshot_file_has_header_records_footer():
    values = codec().encode(kraft.bootstrap_records({"group.version": 1}))
    data = kraft.snapshot_bytes(values, timestamp_ms=5)
    kinds = []
    for h, pos in iter_batches(data):
        for rec in batch_records(data, pos, h):
            kinds.append(kraft.control_type(rec.key) if h.is_control else "data")
    assert kinds == [kraft.SNAPSHOT_HEADER, "data", "data", kraft.SNAPSHOT_FOOTER]
    assert kraft.snapshot_values(data) == values
    with pytest.raises(kraft.KraftFormatError):
        kraft.snapshot_values(data[:-80])  # torn: no footer
    assert kraft.parse_snapshot_file_name(kraft.snapshot_file_name(129, 3)) == (129, 3)


def test_quorum_state_and_leader_epoch_checkpoint_are_kafkas():
    v0 = json.loads(kraft.quorum_state_json(1, 4))
    assert v0 == {"clusterId": "", "leaderId": 1, "leaderEpoch": 4, "votedId": -1,
                  "appliedOffset": 0, "currentVoters": [{"voterId": 1}], "data_version": 0}
    v1 = kraft.quorum_state_json(1, 2, data_version=1)
    assert kraft.parse_quorum_state(v1) == (2, 1)
    assert kraft.leader_epoch_checkpoint([(1, 0), (2, 15)]) == b"0\n2\n1 0\n2 15\n"


def test_leader_change_message_is_version_0():
    v = kraft.leader_change_value(1)
    # version, leaderId, voters [1], grantingVoters [1], tagged fields
    assert v == bytes.fromhex("0000" "00000001" "02" "00000001" "00" "02" "00000001" "00" "00")
