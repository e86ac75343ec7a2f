"""KRaft's on-disk metadata formats: snakka's metadata records as Kafka's, and back.

What it owns (sans-I/O: bytes in, bytes out):

- **Record framing** (Kafka's ``MetadataRecordSerde`` / ``AbstractApiMessageSerde``): the value
  of each data record of ``__cluster_metadata`` is ``uvarint frame version (1) | uvarint api
  key | uvarint record version | the record`` (``snakka.protocol.internal.metadata``); keys are
  null.
- **The mapping** between the metadata core's logical records (``metadata.core``: dicts with a
  ``type``) and Kafka's records, both ways (:class:`KraftCodec`):

  ===========================  =====================================================
  logical record               Kafka records
  ===========================  =====================================================
  topic                        TopicRecord, a ConfigRecord per override (type 2),
                               a PartitionRecord per partition
  partitions (CreatePartitions) a PartitionRecord per new partition
  remove_topic                 RemoveTopicRecord
  config (any resource type:   a ConfigRecord per key (null value = deleted)
  2 topic, 4 broker,
  16 client metrics, 32 group)
  producer_ids                 ProducerIdsRecord (nextProducerId = the next block's start)
  user_scram_credential (+rm)  UserScramCredentialRecord / RemoveUserScramCredentialRecord
  acl / remove_acl             AccessControlEntryRecord / RemoveAccessControlEntryRecord
  client_quota                 ClientQuotaRecord
  feature_level                FeatureLevelRecord
  cluster                      none: the cluster id lives in ``meta.properties``, as in KRaft
  ===========================  =====================================================

  Read back, a PartitionRecord becomes a ``partition`` record (the topic has at least that
  many partitions). Kafka's records that describe machinery a single snakka node does not have
  (broker and controller registrations, fencing, partition leader/ISR changes, no-ops,
  delegation tokens, ZK migration state) are read and ignored. Metadata transactions
  (Begin/End/AbortTransactionRecord) are honoured: records of an aborted or unfinished
  transaction are dropped (:class:`Replayer`).
- **Control records** of the Raft log (Kafka's ``ControlRecordType``): LEADER_CHANGE (2) starts
  every leader epoch, SNAPSHOT_HEADER (3) / SNAPSHOT_FOOTER (4) frame a snapshot
  (``<end offset>-<epoch>.checkpoint``, and ``bootstrap.checkpoint``), KRAFT_VERSION (5) and
  KRAFT_VOTERS (6) configure a dynamic quorum (read and ignored: snakka's quorum is static,
  kraft.version 0).
- **quorum-state** (Kafka's ``FileQuorumStateStore``: JSON with ``data_version``) and
  **leader-epoch-checkpoint** text.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from snakka.protocol.internal import metadata as M
from snakka.protocol.primitives import read_uvarint, uuid_to_base64, write_uvarint
from snakka.records import Record, build_batch
from snakka.records.batch import BatchHeader
from snakka.records.record import batch_records, iter_batches

FRAME_VERSION = 1
# The metadata log's own topic id (Kafka's Topic.CLUSTER_METADATA_TOPIC_ID: Uuid(0, 1)).
METADATA_TOPIC_ID = uuid.UUID(int=1)
# The metadata.version snakka writes: Kafka 4.0's default (MetadataVersion.IBP_4_0_IV3), what
# ``kafka-storage.sh format`` of Kafka 4.0 writes.
METADATA_VERSION_FEATURE = "metadata.version"
METADATA_VERSION_LEVEL = 25
# snakka's quorum is static (controller.quorum.voters): kraft.version 0, no VotersRecord.
KRAFT_VERSION = 0
# Record versions Kafka 4.0 writes at metadata.version 4.0-IV3.
PARTITION_RECORD_VERSION = 2
REGISTER_BROKER_RECORD_VERSION = 3
# Kafka's QuorumController.MAX_RECORDS_PER_BATCH: more records than this in one change are
# wrapped in a metadata transaction (Begin/EndTransactionRecord) over several batches.
MAX_RECORDS_PER_BATCH = 10_000

# ControlRecordType
LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER, KRAFT_VERSION_TYPE, KRAFT_VOTERS = 2, 3, 4, 5, 6
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type

# Kafka's records that carry nothing a single snakka node keeps (see the module docstring).
IGNORED_RECORDS = frozenset({
    M.RegisterBrokerRecord.API_KEY, M.UnregisterBrokerRecord.API_KEY,
    M.RegisterControllerRecord.API_KEY, M.BrokerRegistrationChangeRecord.API_KEY,
    M.FenceBrokerRecord.API_KEY, M.UnfenceBrokerRecord.API_KEY,
    M.PartitionChangeRecord.API_KEY, M.NoOpRecord.API_KEY, M.ClearElrRecord.API_KEY,
    M.DelegationTokenRecord.API_KEY, M.RemoveDelegationTokenRecord.API_KEY,
    M.ZkMigrationStateRecord.API_KEY,
})


class KraftFormatError(ValueError):
    """Bytes that are not a KRaft metadata record."""


# -- framing ---------------------------------------------------------------------------------
def encode_message(msg: Any, version: int) -> bytes:
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, msg.API_KEY)
    write_uvarint(out, version)
    msg.write(out, version)
    return bytes(out)


def decode_message(value: bytes | memoryview) -> tuple[Any, int]:
    """(record, version) of one framed metadata record; KraftFormatError if it is not one."""
    buf = memoryview(value)
    try:
        frame, pos = read_uvarint(buf, 0)
        api_key, pos = read_uvarint(buf, pos)
        version, pos = read_uvarint(buf, pos)
    except Exception as e:  # noqa: BLE001 - any malformation is the same answer
        raise KraftFormatError(f"no metadata record frame ({e})") from None
    if frame != FRAME_VERSION:
        raise KraftFormatError(f"unknown frame version {frame}")
    cls = M.RECORDS.get(api_key)
    if cls is None:
        raise KraftFormatError(f"unknown metadata record type {api_key}")
    try:
        msg, _ = cls.read(buf, pos, version)  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001
        raise KraftFormatError(f"cannot decode {cls.__name__} v{version} ({e})") from None
    return msg, version


def is_json_value(value: bytes | memoryview | None) -> bool:
    """Whether a metadata record value is snakka's legacy JSON (a frame starts with 0x01)."""
    return value is not None and len(value) > 0 and bytes(value[:1]) == b"{"


# -- control records -------------------------------------------------------------------------
def control_key(ctype: int) -> bytes:
    return _CONTROL_KEY.pack(0, ctype)


def control_type(key: bytes | None) -> int:
    if key is None or len(key) < 4:
        return -1
    return int(_CONTROL_KEY.unpack_from(key)[1])


def leader_change_value(leader_id: int) -> bytes:
    """LeaderChangeMessage v0 (flexible): version, leaderId, voters, grantingVoters."""
    out = bytearray(struct.pack(">hi", 0, leader_id))
    for _ in range(2):  # voters, grantingVoters: [leader]
        write_uvarint(out, 2)
        out += struct.pack(">i", leader_id)
        out.append(0)  # Voter's tagged fields
    out.append(0)
    return bytes(out)


def snapshot_header_value(last_contained_log_timestamp: int) -> bytes:
    return struct.pack(">hq", 0, last_contained_log_timestamp) + b"\x00"


def snapshot_footer_value() -> bytes:
    return struct.pack(">h", 0) + b"\x00"


def control_batch(ctype: int, value: bytes, *, epoch: int, timestamp_ms: int,
                  base_offset: int = 0) -> bytes:
    return build_batch([Record(timestamp=timestamp_ms, key=control_key(ctype), value=value)],
                       is_control=True, partition_leader_epoch=epoch, base_offset=base_offset)


def data_batch(values: list[bytes], *, epoch: int, timestamp_ms: int,
               base_offset: int = 0) -> bytes:
    return build_batch([Record(timestamp=timestamp_ms, value=v) for v in values],
                       partition_leader_epoch=epoch, base_offset=base_offset)


def snapshot_bytes(values: list[bytes], *, timestamp_ms: int, epoch: int = 0) -> bytes:
    """A KRaft snapshot (``.checkpoint``): header, the records, footer; offsets from 0."""
    out = bytearray(control_batch(SNAPSHOT_HEADER, snapshot_header_value(timestamp_ms),
                                  epoch=epoch, timestamp_ms=timestamp_ms))
    offset = 1
    for i in range(0, len(values), MAX_RECORDS_PER_BATCH):
        chunk = values[i:i + MAX_RECORDS_PER_BATCH]
        out += data_batch(chunk, epoch=epoch, timestamp_ms=timestamp_ms, base_offset=offset)
        offset += len(chunk)
    out += control_batch(SNAPSHOT_FOOTER, snapshot_footer_value(), epoch=epoch,
                         timestamp_ms=timestamp_ms, base_offset=offset)
    return bytes(out)


def snapshot_values(data: bytes) -> list[bytes]:
    """The data record values of a snapshot file; KraftFormatError without a footer (a torn
    snapshot: Kafka ignores such a file too)."""
    values: list[bytes] = []
    footer = False
    try:
        for h, pos in iter_batches(data):
            for rec in batch_records(data, pos, h):
                if h.is_control:
                    footer = footer or control_type(rec.key) == SNAPSHOT_FOOTER
                elif rec.value is not None:
                    values.append(bytes(rec.value))
    except Exception as e:  # noqa: BLE001
        raise KraftFormatError(f"unreadable snapshot ({e})") from None
    if not footer:
        raise KraftFormatError("snapshot has no footer")
    return values


def snapshot_file_name(end_offset: int, epoch: int) -> str:
    return f"{end_offset:020d}-{epoch:010d}.checkpoint"


def parse_snapshot_file_name(name: str) -> tuple[int, int] | None:
    if not name.endswith(".checkpoint") or len(name) != 20 + 1 + 10 + len(".checkpoint"):
        return None
    try:
        return int(name[:20]), int(name[21:31])
    except ValueError:
        return None


# -- quorum-state and leader-epoch-checkpoint -------------------------------------------------
def quorum_state_json(leader_id: int, epoch: int, *, data_version: int = 0) -> bytes:
    """Kafka's quorum-state for a leader elected in ``epoch`` (FileQuorumStateStore): version 0
    for kraft.version 0 (static voters), version 1 for a dynamic quorum."""
    state: dict[str, Any]
    if data_version == 0:
        state = {"clusterId": "", "leaderId": leader_id, "leaderEpoch": epoch, "votedId": -1,
                 "appliedOffset": 0, "currentVoters": [{"voterId": leader_id}],
                 "data_version": 0}
    else:
        state = {"leaderId": leader_id, "leaderEpoch": epoch, "votedId": -1,
                 "votedDirectoryId": uuid_to_base64(uuid.UUID(int=0)), "data_version": 1}
    return json.dumps(state, separators=(",", ":")).encode()


def parse_quorum_state(text: bytes) -> tuple[int, int]:
    """(leader epoch, data_version) of a quorum-state file; ValueError if malformed."""
    state = json.loads(text)
    return int(state["leaderEpoch"]), int(state.get("data_version", 0))


def leader_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    """Kafka's LeaderEpochCheckpointFile: version 0, count, ``epoch startOffset`` lines."""
    lines = [f"{e} {o}" for e, o in entries]
    return ("\n".join(["0", str(len(lines)), *lines]) + "\n").encode()


# -- the mapping ------------------------------------------------------------------------------
@dataclass
class KraftCodec:
    """Logical metadata records <-> Kafka's records for one node (see the module docstring).
    ``directory_id``: the log dir's ``directory.id`` (meta.properties), named by every
    PartitionRecord as the directory that holds the partition."""

    node_id: int
    directory_id: uuid.UUID
    broker_epoch: int = -1

    def _partition(self, topic_id: uuid.UUID, p: int) -> tuple[Any, int]:
        n = self.node_id
        return M.PartitionRecord(
            partition_id=p, topic_id=topic_id, replicas=[n], isr=[n], removing_replicas=[],
            adding_replicas=[], leader=n, leader_epoch=0, partition_epoch=0,
            directories=[self.directory_id]), PARTITION_RECORD_VERSION

    def to_kafka(self, rec: Mapping[str, Any]) -> list[tuple[Any, int]]:
        """Kafka's records (with the version to write) for one logical record."""
        t = rec["type"]
        if t == "topic":
            tid = uuid.UUID(hex=rec["topic_id"])
            out: list[tuple[Any, int]] = [(M.TopicRecord(name=rec["name"], topic_id=tid), 0)]
            out += [(M.ConfigRecord(resource_type=2, resource_name=rec["name"], name=k, value=v), 0)
                    for k, v in (rec.get("configs") or {}).items() if v is not None]
            out += [self._partition(tid, p) for p in range(int(rec["partitions"]))]
            return out
        if t == "partitions":
            tid = uuid.UUID(hex=rec["topic_id"])
            return [self._partition(tid, p)
                    for p in range(int(rec["first"]), int(rec["partitions"]))]
        if t == "partition":
            return [self._partition(uuid.UUID(hex=rec["topic_id"]), int(rec["partition"]))]
        if t == "remove_topic":
            return [(M.RemoveTopicRecord(topic_id=uuid.UUID(hex=rec["topic_id"])), 0)]
        if t == "config":
            return [(M.ConfigRecord(resource_type=int(rec["resource_type"]),
                                    resource_name=rec["resource_name"], name=k, value=v), 0)
                    for k, v in rec["configs"].items()]
        if t == "producer_ids":
            return [(M.ProducerIdsRecord(broker_id=self.node_id, broker_epoch=self.broker_epoch,
                                         next_producer_id=int(rec["next"])), 0)]
        if t == "user_scram_credential":
            return [(M.UserScramCredentialRecord(
                name=rec["name"], mechanism=int(rec["mechanism"]),
                salt=bytes.fromhex(rec["salt"]), stored_key=bytes.fromhex(rec["stored_key"]),
                server_key=bytes.fromhex(rec["server_key"]),
                iterations=int(rec["iterations"])), 0)]
        if t == "remove_user_scram_credential":
            return [(M.RemoveUserScramCredentialRecord(name=rec["name"],
                                                       mechanism=int(rec["mechanism"])), 0)]
        if t == "acl":
            return [(M.AccessControlEntryRecord(
                id=uuid.UUID(hex=str(rec["id"])), resource_type=int(rec["resource_type"]),
                resource_name=rec["resource_name"], pattern_type=int(rec["pattern_type"]),
                principal=rec["principal"], host=rec["host"], operation=int(rec["operation"]),
                permission_type=int(rec["permission_type"])), 0)]
        if t == "remove_acl":
            return [(M.RemoveAccessControlEntryRecord(id=uuid.UUID(hex=str(rec["id"]))), 0)]
        if t == "client_quota":
            from snakka.protocol.internal.metadata.client_quota_record import EntityData
            return [(M.ClientQuotaRecord(
                entity=[EntityData(entity_type=et, entity_name=en) for et, en in rec["entity"]],
                key=rec["key"], value=float(rec["value"]), remove=bool(rec.get("remove"))), 0)]
        if t == "feature_level":
            return [(M.FeatureLevelRecord(name=rec["name"], feature_level=int(rec["level"])), 0)]
        if t == "cluster":
            return []  # meta.properties holds the cluster id
        raise ValueError(f"no KRaft record for metadata record type {t!r}")

    @staticmethod
    def from_kafka(msg: Any) -> list[dict[str, Any]]:
        """The logical records of one Kafka record ([] for the ignored ones)."""
        k = msg.API_KEY
        if k == M.TopicRecord.API_KEY:
            return [{"type": "topic", "name": msg.name, "topic_id": msg.topic_id.hex,
                     "partitions": 0, "configs": {}}]
        if k == M.PartitionRecord.API_KEY:
            return [{"type": "partition", "topic_id": msg.topic_id.hex,
                     "partition": msg.partition_id}]
        if k == M.RemoveTopicRecord.API_KEY:
            return [{"type": "remove_topic", "topic_id": msg.topic_id.hex}]
        if k == M.ConfigRecord.API_KEY:
            return [{"type": "config", "resource_type": msg.resource_type,
                     "resource_name": msg.resource_name, "configs": {msg.name: msg.value}}]
        if k == M.ProducerIdsRecord.API_KEY:
            return [{"type": "producer_ids", "next": msg.next_producer_id}]
        if k == M.UserScramCredentialRecord.API_KEY:
            return [{"type": "user_scram_credential", "name": msg.name,
                     "mechanism": msg.mechanism, "salt": bytes(msg.salt).hex(),
                     "stored_key": bytes(msg.stored_key).hex(),
                     "server_key": bytes(msg.server_key).hex(), "iterations": msg.iterations}]
        if k == M.RemoveUserScramCredentialRecord.API_KEY:
            return [{"type": "remove_user_scram_credential", "name": msg.name,
                     "mechanism": msg.mechanism}]
        if k == M.AccessControlEntryRecord.API_KEY:
            return [{"type": "acl", "id": msg.id.hex, "resource_type": msg.resource_type,
                     "resource_name": msg.resource_name, "pattern_type": msg.pattern_type,
                     "principal": msg.principal, "host": msg.host, "operation": msg.operation,
                     "permission_type": msg.permission_type}]
        if k == M.RemoveAccessControlEntryRecord.API_KEY:
            return [{"type": "remove_acl", "id": msg.id.hex}]
        if k == M.ClientQuotaRecord.API_KEY:
            return [{"type": "client_quota",
                     "entity": [[e.entity_type, e.entity_name] for e in msg.entity],
                     "key": msg.key, "value": msg.value, "remove": msg.remove}]
        if k == M.FeatureLevelRecord.API_KEY:
            return [{"type": "feature_level", "name": msg.name, "level": msg.feature_level}]
        return []  # IGNORED_RECORDS and the transaction markers (see Replayer)

    def encode(self, records: Iterable[Mapping[str, Any]]) -> list[bytes]:
        """Framed Kafka record values for logical records."""
        return [encode_message(m, v) for r in records for m, v in self.to_kafka(r)]

    def transaction(self, values: list[bytes], name: str) -> list[bytes]:
        """``values`` inside a metadata transaction when they need more than one batch."""
        if len(values) <= MAX_RECORDS_PER_BATCH:
            return values
        return [encode_message(M.BeginTransactionRecord(name=name), 0), *values,
                encode_message(M.EndTransactionRecord(), 0)]


@dataclass
class Replayer:
    """Decodes framed records in log order into logical records, honouring metadata
    transactions: records between BeginTransactionRecord and EndTransactionRecord are held
    back until the end, dropped on AbortTransactionRecord or if the log ends first."""

    pending: list[dict[str, Any]] | None = None
    dropped: int = 0
    ignored: dict[str, int] = field(default_factory=dict)

    def feed(self, value: bytes | memoryview) -> list[dict[str, Any]]:
        msg, _ = decode_message(value)
        k = msg.API_KEY
        if k == M.BeginTransactionRecord.API_KEY:
            if self.pending:
                self.dropped += len(self.pending)
            self.pending = []
            return []
        if k == M.EndTransactionRecord.API_KEY:
            out, self.pending = self.pending or [], None
            return out
        if k == M.AbortTransactionRecord.API_KEY:
            self.dropped += len(self.pending or [])
            self.pending = None
            return []
        if k in IGNORED_RECORDS:
            self.ignored[type(msg).__name__] = self.ignored.get(type(msg).__name__, 0) + 1
        recs = KraftCodec.from_kafka(msg)
        if self.pending is not None:
            self.pending.extend(recs)
            return []
        return recs

    def finish(self) -> int:
        """Records of an unfinished transaction at the end of the log (dropped)."""
        n = len(self.pending or [])
        self.pending = None
        self.dropped += n
        return n


def iter_log_batches(data: bytes | memoryview) -> Iterator[tuple[BatchHeader, int]]:
    return iter_batches(data)


def bootstrap_records(features: Mapping[str, int]) -> list[dict[str, Any]]:
    """The records a fresh metadata log starts with (Kafka's BootstrapMetadata): the
    metadata.version, then the finalized features."""
    return [{"type": "feature_level", "name": METADATA_VERSION_FEATURE,
             "level": METADATA_VERSION_LEVEL},
            *({"type": "feature_level", "name": n, "level": lvl}
              for n, lvl in features.items())]


# Kafka's SecurityProtocol ids.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# What this node supports, as it registers (Kafka's registrations list every feature; a
# version range Kafka 4.0 accepts for metadata.version: 3.3-IV3 (7) to 4.0-IV3 (25)).
REGISTERED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION_FEATURE: (7, METADATA_VERSION_LEVEL),
    "kraft.version": (0, 0),
}


def registration_records(node_id: int, directory_id: uuid.UUID,
                         endpoints: Iterable[tuple[str, str, int, str]],
                         features: Mapping[str, tuple[int, int]],
                         broker_epoch: int) -> list[tuple[Any, int]]:
    """The RegisterControllerRecord and RegisterBrokerRecord of this combined node for one
    start. ``endpoints``: (listener name, host, port, security protocol). The broker is
    registered *fenced*, as Kafka leaves it after a controlled shutdown: no Kafka controller
    tracks snakka's heartbeats, and a fenced registration lets the next Kafka start on this
    directory register the node anew (an unfenced one with a live session would be a
    duplicate registration)."""
    from snakka.protocol.internal.metadata.register_broker_record import (
        BrokerEndpoint,
        BrokerFeature,
    )
    from snakka.protocol.internal.metadata.register_controller_record import (
        ControllerEndpoint,
        ControllerFeature,
    )
    eps = [(n, h, p, SECURITY_PROTOCOL_IDS.get(proto, 0)) for n, h, p, proto in endpoints]
    feats = {**REGISTERED_FEATURES, **features}
    incarnation = uuid.uuid4()
    # No controller endpoints: snakka's controller has no listener of its own (nothing
    # connects to it); Kafka re-registers its controller with its own on its next start.
    controller = M.RegisterControllerRecord(
        controller_id=node_id, incarnation_id=incarnation, zk_migration_ready=False,
        end_points=list[ControllerEndpoint](),
        features=[ControllerFeature(name=f, min_supported_version=lo, max_supported_version=hi)
                  for f, (lo, hi) in feats.items()])
    broker = M.RegisterBrokerRecord(
        broker_id=node_id, is_migrating_zk_broker=False, incarnation_id=incarnation,
        broker_epoch=broker_epoch,
        end_points=[BrokerEndpoint(name=n, host=h, port=p, security_protocol=s)
                    for n, h, p, s in eps],
        features=[BrokerFeature(name=f, min_supported_version=lo, max_supported_version=hi)
                  for f, (lo, hi) in feats.items()],
        rack=None, fenced=True, in_controlled_shutdown=False, log_dirs=[directory_id])
    return [(controller, 0), (broker, REGISTER_BROKER_RECORD_VERSION)]
