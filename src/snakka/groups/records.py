"""``__consumer_offsets`` in Kafka 4.0's record formats: the group cores' records <-> Kafka's.

What this module owns
    The mapping between the records the sans-I/O cores emit and replay (:class:`GroupRecord`:
    ``("offset", group, topic, partition)``, ``("txn_offset", group, producer, topic,
    partition)``, ``("classic", group)``, ``("consumer", group)``, ``("consumer_member", group,
    member)``, ``("share", group)``, ``("share_member", group, member)``) and the records Kafka
    4.0's group coordinator writes (``GroupCoordinatorRecordHelpers``), field by field, and
    :class:`KafkaGroupSerde`, the bytes of those records (the coordinator record serde: key =
    int16 record type + key fields, value = int16 version + value fields, null for a
    tombstone), so that a data directory works both ways: ``kafka-dump-log.sh
    --offsets-decoder`` and Kafka 4.0's loader read snakka's segments, and snakka replays Kafka's.

Granularity. Kafka keys a record by what it describes: one OffsetCommit (type 1) per
partition, one GroupMetadata (2) per classic group; a KIP-848 group is the ConsumerGroupMetadata
(3, group epoch), ConsumerGroupPartitionMetadata (4, subscribed topics' metadata: Kafka 4.0
writes it; 4.1 replaced it by a hash), ConsumerGroupTargetAssignmentMetadata (6), one
ConsumerGroupRegularExpression (16) per resolved regex, and per member its
ConsumerGroupMemberMetadata (5), ConsumerGroupTargetAssignmentMember (7) and
ConsumerGroupCurrentMemberAssignment (8); share groups the same with types 9-14 (Kafka 4.0's
ShareGroupPartitionMetadata, 9, included; 4.0 does not write ShareGroupStatePartitionMetadata,
15, which 4.1 introduced with another layout, so it is skipped on read). A core record of a
group or a member *owns* the Kafka records it expands to (:meth:`GroupRecordMapper.translate`):
only those whose value changed are written, those it no longer has are tombstoned, so a steady
member rewrites nothing and a deleted one leaves only tombstones, as Kafka.

Versions are Kafka 4.0's (``MetadataVersion.offsetCommitValueVersion`` /
``groupMetadataValueVersion``): OffsetCommitValue v3 (leader epoch, no expire timestamp; v4
with the topic id is 4.1+), GroupMetadataValue v3, v0 for the KIP-848 and share records. Every
version is read, the legacy key type 0 too. ShareGroupMetadataValue is 4.0's (the epoch only:
4.1 added a non-tagged MetadataHash to v0, so the generated 4.2 codec cannot be used for it).

Transactions. A TxnOffsetCommit is an OffsetCommit record in a transactional batch of its
producer; the producer's COMMIT / ABORT control marker resolves it (Kafka's
``OffsetMetadataManager.replayEndTransactionMarker``). The shell writes the batch and the
marker (``CoordinatorLog.append(producer=)`` / ``append_marker``); here a record's producer is
part of the translation and of the replay. A non-transactional OffsetCommit tombstone also drops
the group's pending offsets of that partition (Kafka's replay). Which of a pending and a
committed offset wins at COMMIT is decided by the order they were written: replay numbers the
offset records in log order (``seq``, what the offsets core compares).

What Kafka does not store, snakka derives on replay: a consumer group's assignor (the most
requested server assignor of its members, as the core chooses it); a regex record's version
and timestamp are written as 0, so Kafka re-resolves the regex on load.
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections import Counter
from collections.abc import Iterable
from typing import Any

from snakka.groups.types import GroupRecord
from snakka.protocol.internal import group_coordinator as gc
from snakka.protocol.internal.group_coordinator import (
    consumer_group_current_member_assignment_value as cgca,
)
from snakka.protocol.internal.group_coordinator import (
    consumer_group_member_metadata_value as cgmm,
)
from snakka.protocol.internal.group_coordinator import (
    consumer_group_partition_metadata_value as cgpm,
)
from snakka.protocol.internal.group_coordinator import (
    consumer_group_target_assignment_member_value as cgta,
)
from snakka.protocol.internal.group_coordinator import group_metadata_value as gmv
from snakka.protocol.internal.group_coordinator import (
    share_group_current_member_assignment_value as sgca,
)
from snakka.protocol.internal.group_coordinator import (
    share_group_target_assignment_member_value as sgta,
)

# Kafka's CoordinatorRecordType ids (Kafka 4.0).
LEGACY_OFFSET_COMMIT = 0
OFFSET_COMMIT = 1
GROUP_METADATA = 2
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
SHARE_GROUP_PARTITION_METADATA = 9
SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15
CONSUMER_GROUP_REGULAR_EXPRESSION = 16

# The value versions Kafka 4.0 writes (module doc).
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

# Key codecs by record type: the generated ones, plus 4.0's ShareGroupPartitionMetadata key
# (group id only, the layout of ConsumerGroupPartitionMetadataKey); the legacy type 0 key has
# OffsetCommitKey's layout.
_KEYS: dict[int, Any] = {t: c for t, c in gc.KEYS.items() if t <= CONSUMER_GROUP_REGULAR_EXPRESSION}
_KEYS[SHARE_GROUP_PARTITION_METADATA] = gc.ConsumerGroupPartitionMetadataKey
_KEYS[LEGACY_OFFSET_COMMIT] = gc.OffsetCommitKey
_KEYS.pop(SHARE_GROUP_STATE_PARTITION_METADATA, None)
# Value codecs: 4.0's layouts. ShareGroupPartitionMetadataValue is ConsumerGroupPartition-
# MetadataValue's; 4.0's ShareGroupMetadataValue (epoch + tagged fields) is read and written by
# ConsumerGroupMetadataValue (whose only tagged field, 4.1's hash, stays unset).
_VALUES: dict[int, Any] = {t: gc.VALUES[t] for t in _KEYS if t in gc.VALUES}
_VALUES[LEGACY_OFFSET_COMMIT] = gc.OffsetCommitValue
_VALUES[OFFSET_COMMIT] = gc.OffsetCommitValue
_VALUES[SHARE_GROUP_PARTITION_METADATA] = gc.ConsumerGroupPartitionMetadataValue
_VALUES[SHARE_GROUP_METADATA] = gc.ConsumerGroupMetadataValue

_I16 = struct.Struct(">h")

# A Kafka record as a fact: key (type, group, other key fields...), value {"version", "message"}.
KafkaKey = tuple[Any, ...]
KafkaValue = dict[str, Any]


def kafka_value(message: Any, version: int = 0) -> KafkaValue:
    return {"version": version, "message": message}


class KafkaGroupSerde:
    """Kafka's coordinator record bytes (``GroupCoordinatorRecordSerde``) <-> facts."""

    def serialize(self, key: tuple, value: dict | None) -> tuple[bytes, bytes | None]:
        rtype = key[0]
        k = _I16.pack(rtype) + _KEYS[rtype](*key[1:]).encode(0)
        if value is None:
            return k, None
        version = value["version"]
        return k, _I16.pack(version) + value["message"].encode(version)

    def deserialize(self, key: bytes, value: bytes | None) -> tuple[tuple, dict | None] | None:
        (rtype,) = _I16.unpack_from(key)
        codec = _KEYS.get(rtype)
        if codec is None:
            return None  # a type Kafka 4.0 does not write (its loader skips unknown types)
        k = codec.decode(memoryview(key)[2:], 0)
        fields = tuple(getattr(k, s) for s in codec.__slots__)
        if rtype == LEGACY_OFFSET_COMMIT:
            rtype = OFFSET_COMMIT  # the same record: only the key version differs
        if value is None:
            return (rtype, *fields), None
        (version,) = _I16.unpack_from(value)
        return (rtype, *fields), kafka_value(_VALUES[rtype].decode(memoryview(value)[2:],
                                                                   version), version)

    def recognizes(self, key: bytes) -> bool:
        return len(key) >= 2 and key[0] == 0


KAFKA_SERDE = KafkaGroupSerde()

# -- core values <-> Kafka messages -------------------------------------------------------

_MEMBER_STATES = {"stable": 0, "unrevoked_partitions": 1, "unreleased_partitions": 2}
_MEMBER_STATE_NAMES = {v: k for k, v in _MEMBER_STATES.items()}


def _b64(b: bytes | None) -> str:
    return base64.b64encode(b or b"").decode("ascii")


def _parts_list(parts: dict[str, list[int]], cls: Any) -> list:
    return [cls(uuid.UUID(t), list(ps)) for t, ps in sorted(parts.items()) if ps]


def _parts_dict(items: Iterable[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in items:
        out.setdefault(str(tp.topic_id), []).extend(tp.partitions)
    return {t: sorted(ps) for t, ps in sorted(out.items()) if ps}


def _topics_metadata(subs: dict[str, list]) -> Any:
    return gc.ConsumerGroupPartitionMetadataValue([
        cgpm.TopicMetadata(uuid.UUID(tid), name, int(n), [])
        for name, (tid, n) in sorted(subs.items())])


def _subs_from(msg: Any) -> dict[str, list]:
    return {t.topic_name: [str(t.topic_id), t.num_partitions] for t in msg.topics}


def _offset_value(v: dict[str, Any]) -> KafkaValue:
    return kafka_value(gc.OffsetCommitValue(
        offset=int(v["offset"]), leader_epoch=int(v["leader_epoch"]),
        metadata=v["metadata"] or "", commit_timestamp=int(v["commit_timestamp_ms"])),
        OFFSET_COMMIT_VALUE_VERSION)


def expand(record: GroupRecord) -> list[tuple[KafkaKey, KafkaValue]]:
    """The Kafka records a core record of a group or a member stands for (none for a
    tombstone), in the order Kafka writes them."""
    kind, gid = record.key[0], record.key[1]
    v = record.value
    if v is None:
        return []
    if kind == "classic":
        return [((GROUP_METADATA, gid), kafka_value(gc.GroupMetadataValue(
            protocol_type=v.get("protocol_type") or "",
            generation=int(v["generation"]),
            protocol=v.get("protocol"),
            leader=v.get("leader"),
            current_state_timestamp=int(v.get("current_state_timestamp", -1)),
            members=[gmv.MemberMetadata(
                member_id=m["member_id"], group_instance_id=m.get("group_instance_id"),
                client_id=m.get("client_id", ""), client_host=m.get("client_host", ""),
                rebalance_timeout=int(m["rebalance_timeout_ms"]),
                session_timeout=int(m["session_timeout_ms"]),
                subscription=base64.b64decode(m.get("subscription", "")),
                assignment=base64.b64decode(m.get("assignment", "")))
                for m in v.get("members") or []]), GROUP_METADATA_VALUE_VERSION))]
    if kind == "consumer":
        out: list[tuple[KafkaKey, KafkaValue]] = [
            ((CONSUMER_GROUP_PARTITION_METADATA, gid),
             kafka_value(_topics_metadata(v["subscription_metadata"]))),
            ((CONSUMER_GROUP_METADATA, gid),
             kafka_value(gc.ConsumerGroupMetadataValue(epoch=int(v["group_epoch"])))),
            ((CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, gid),
             kafka_value(gc.ConsumerGroupTargetAssignmentMetadataValue(
                 assignment_epoch=int(v["assignment_epoch"]))))]
        for regex, topics in sorted(v.get("resolved_regex", {}).items()):
            out.append(((CONSUMER_GROUP_REGULAR_EXPRESSION, gid, regex), kafka_value(
                gc.ConsumerGroupRegularExpressionValue(topics=sorted(topics), version=0,
                                                       timestamp=0))))
        return out
    if kind == "consumer_member":
        mid = record.key[2]
        classic = v.get("classic")
        return [
            ((CONSUMER_GROUP_MEMBER_METADATA, gid, mid), kafka_value(
                gc.ConsumerGroupMemberMetadataValue(
                    instance_id=v.get("instance_id"), rack_id=v.get("rack_id"),
                    client_id=v.get("client_id") or "", client_host=v.get("client_host") or "",
                    subscribed_topic_names=sorted(v.get("subscribed_topic_names") or []),
                    subscribed_topic_regex=v.get("subscribed_topic_regex"),
                    rebalance_timeout_ms=int(v.get("rebalance_timeout_ms", -1)),
                    server_assignor=v.get("server_assignor"),
                    classic_member_metadata=None if not classic else cgmm.ClassicMemberMetadata(
                        int(classic["session_timeout_ms"]),
                        [cgmm.ClassicProtocol(n, base64.b64decode(meta))
                         for n, meta in classic["protocols"]])))),
            ((CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, gid, mid), kafka_value(
                gc.ConsumerGroupTargetAssignmentMemberValue(
                    _parts_list(v.get("target") or {}, cgta.TopicPartition)))),
            ((CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, gid, mid), kafka_value(
                gc.ConsumerGroupCurrentMemberAssignmentValue(
                    member_epoch=int(v["member_epoch"]),
                    previous_member_epoch=int(v["previous_member_epoch"]),
                    state=_MEMBER_STATES.get(v.get("state") or "stable", 0),
                    assigned_partitions=_parts_list(v.get("assigned") or {},
                                                    cgca.TopicPartitions),
                    partitions_pending_revocation=_parts_list(
                        v.get("pending_revocation") or {}, cgca.TopicPartitions))))]
    if kind == "share":
        return [
            ((SHARE_GROUP_PARTITION_METADATA, gid),
             kafka_value(_topics_metadata(v["subscription_metadata"]))),
            ((SHARE_GROUP_METADATA, gid),
             kafka_value(gc.ConsumerGroupMetadataValue(epoch=int(v["group_epoch"])))),
            ((SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, gid),
             kafka_value(gc.ShareGroupTargetAssignmentMetadataValue(
                 assignment_epoch=int(v["assignment_epoch"]))))]
    if kind == "share_member":
        mid = record.key[2]
        return [
            ((SHARE_GROUP_MEMBER_METADATA, gid, mid), kafka_value(
                gc.ShareGroupMemberMetadataValue(
                    rack_id=v.get("rack_id"), client_id=v.get("client_id") or "",
                    client_host=v.get("client_host") or "",
                    subscribed_topic_names=sorted(v.get("subscribed_topic_names") or [])))),
            ((SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, gid, mid), kafka_value(
                gc.ShareGroupTargetAssignmentMemberValue(
                    _parts_list(v.get("target") or {}, sgta.TopicPartition)))),
            ((SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, gid, mid), kafka_value(
                gc.ShareGroupCurrentMemberAssignmentValue(
                    member_epoch=int(v["member_epoch"]),
                    previous_member_epoch=int(v["previous_member_epoch"]), state=0,
                    assigned_partitions=_parts_list(v.get("assigned") or {},
                                                    sgca.TopicPartitions))))]
    raise ValueError(f"no Kafka record for a {kind!r} record")


# The core record that owns a Kafka record of each type: (kind, number of key fields).
_OWNER = {
    GROUP_METADATA: ("classic", 1),
    CONSUMER_GROUP_METADATA: ("consumer", 1),
    CONSUMER_GROUP_PARTITION_METADATA: ("consumer", 1),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: ("consumer", 1),
    CONSUMER_GROUP_REGULAR_EXPRESSION: ("consumer", 1),
    CONSUMER_GROUP_MEMBER_METADATA: ("consumer_member", 2),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: ("consumer_member", 2),
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: ("consumer_member", 2),
    SHARE_GROUP_METADATA: ("share", 1),
    SHARE_GROUP_PARTITION_METADATA: ("share", 1),
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: ("share", 1),
    SHARE_GROUP_MEMBER_METADATA: ("share_member", 2),
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: ("share_member", 2),
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: ("share_member", 2),
}
# Tombstones go in Kafka's order (ConsumerGroup.createGroupTombstoneRecords): current
# assignment, target, target epoch, subscription, subscription metadata, epoch.
_TOMBSTONE_RANK = {t: i for i, t in enumerate((
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    CONSUMER_GROUP_MEMBER_METADATA, SHARE_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_REGULAR_EXPRESSION, CONSUMER_GROUP_PARTITION_METADATA,
    SHARE_GROUP_PARTITION_METADATA, CONSUMER_GROUP_METADATA, SHARE_GROUP_METADATA,
    GROUP_METADATA))}


def owner_of(key: KafkaKey) -> tuple:
    kind, n = _OWNER[key[0]]
    return (kind, *key[1:1 + n])


# One Kafka record to write: key, value (None: tombstone), producer (id, epoch) or None.
Write = tuple[KafkaKey, KafkaValue | None, tuple[int, int] | None]


class GroupRecordMapper:
    """Translates the cores' records into Kafka's (writes) and Kafka's back (replay), keeping
    what is written for every group and member (module doc: granularity)."""

    def __init__(self) -> None:
        # core record key -> {Kafka key: value} of what is durable for it
        self._owned: dict[tuple, dict[KafkaKey, KafkaValue]] = {}
        self._seq = 0
        # group -> producers seen with transactional offsets during replay
        self._txn_producers: dict[str, set[int]] = {}

    # -- writes --------------------------------------------------------------------------
    def translate(self, records: Iterable[GroupRecord]
                  ) -> tuple[list[Write], dict[tuple, dict[KafkaKey, KafkaValue]]]:
        """The Kafka records to append for ``records`` (in order) and what each core record
        then owns; :meth:`commit` the latter once the append succeeded."""
        writes: list[Write] = []
        owned: dict[tuple, dict[KafkaKey, KafkaValue]] = {}
        tombstoned: set[KafkaKey] = set()
        for gr in records:
            kind = gr.key[0]
            if kind in ("offset", "txn_offset"):
                if kind == "offset":
                    _, gid, topic, part = gr.key
                    producer = None
                else:
                    _, gid, pid, topic, part = gr.key
                    producer = None if gr.value is None else (
                        int(pid), int(gr.value.get("producer_epoch", 0)))
                kkey = (OFFSET_COMMIT, gid, topic, int(part))
                if gr.value is None:
                    # One OffsetCommit tombstone drops the committed and the pending offsets
                    # of the partition (Kafka's replay): written once per round.
                    if kkey in tombstoned:
                        continue
                    tombstoned.add(kkey)
                    writes.append((kkey, None, None))
                else:
                    tombstoned.discard(kkey)
                    writes.append((kkey, _offset_value(gr.value), producer))
                continue
            old = owned.get(gr.key, self._owned.get(gr.key, {}))
            new = dict(expand(gr))
            for k, val in new.items():
                if old.get(k) != val:
                    writes.append((k, val, None))
            for k in sorted((k for k in old if k not in new),
                            key=lambda k: _TOMBSTONE_RANK.get(k[0], 99)):
                writes.append((k, None, None))
            owned[gr.key] = new
        return writes, owned

    def commit(self, owned: dict[tuple, dict[KafkaKey, KafkaValue]]) -> None:
        for key, new in owned.items():
            if new:
                self._owned[key] = new
            else:
                self._owned.pop(key, None)

    def forget(self, keys: Iterable[tuple]) -> None:
        """Drop what is known written for these core records (their partition is restated)."""
        for key in keys:
            self._owned.pop(key, None)

    # -- replay --------------------------------------------------------------------------
    def note_seq(self, seq: int) -> None:
        """A legacy offset record's write order: Kafka records replayed later come after."""
        self._seq = max(self._seq, seq)

    def replay(self, key: KafkaKey, value: KafkaValue | None, producer_id: int = -1,
               producer_epoch: int = -1) -> list[GroupRecord]:
        """The core records one replayed Kafka record amounts to."""
        rtype = key[0]
        if rtype == OFFSET_COMMIT:
            _, gid, topic, part = key
            if value is None:
                if producer_id >= 0:
                    return [GroupRecord(("txn_offset", gid, producer_id, topic, part), None)]
                return [GroupRecord(("offset", gid, topic, part), None)] + [
                    GroupRecord(("txn_offset", gid, pid, topic, part), None)
                    for pid in sorted(self._txn_producers.get(gid, ()))]
            m = value["message"]
            self._seq += 1
            v: dict[str, Any] = {"offset": m.offset, "leader_epoch": m.leader_epoch,
                                 "metadata": m.metadata or "",
                                 "commit_timestamp_ms": m.commit_timestamp, "seq": self._seq}
            if producer_id < 0:
                return [GroupRecord(("offset", gid, topic, part), v)]
            self._txn_producers.setdefault(gid, set()).add(producer_id)
            v["producer_epoch"] = producer_epoch
            return [GroupRecord(("txn_offset", gid, producer_id, topic, part), v)]
        if rtype not in _OWNER:
            return []
        owner = owner_of(key)
        parts = self._owned.setdefault(owner, {})
        if value is None:
            parts.pop(key, None)
        else:
            parts[key] = value
        if not parts:
            del self._owned[owner]
            return [GroupRecord(owner, None)]
        return [GroupRecord(owner, self.core_value(owner))]

    def finish(self) -> list[GroupRecord]:
        """After replay: the consumer groups' records again, now that their members are known
        (the assignor is derived from them)."""
        self._txn_producers.clear()
        votes: dict[str, Counter[str]] = {}
        for key, parts in self._owned.items():
            if key[0] == "consumer_member":
                meta = parts.get((CONSUMER_GROUP_MEMBER_METADATA, key[1], key[2]))
                if meta is not None and meta["message"].server_assignor:
                    votes.setdefault(key[1], Counter())[meta["message"].server_assignor] += 1
        out = []
        for key in list(self._owned):
            if key[0] == "consumer":
                value = self.core_value(key)
                v = votes.get(key[1])
                value["assignor"] = min(v, key=lambda n: (-v[n], n)) if v else None
                out.append(GroupRecord(key, value))
        return out

    def core_value(self, owner: tuple) -> dict[str, Any]:
        """The core record of ``owner`` assembled from the Kafka records it owns (a record not
        replayed yet gives its field's default)."""
        parts = self._owned.get(owner, {})
        kind, gid = owner[0], owner[1]

        def msg(rtype: int, *rest: Any) -> Any:
            v = parts.get((rtype, gid, *rest))
            return None if v is None else v["message"]

        if kind == "classic":
            g = msg(GROUP_METADATA)
            return {"version": 0, "protocol_type": g.protocol_type, "generation": g.generation,
                    "protocol": g.protocol, "leader": g.leader,
                    "current_state_timestamp": g.current_state_timestamp,
                    "members": [{
                        "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id, "client_host": m.client_host,
                        "rebalance_timeout_ms": m.rebalance_timeout,
                        "session_timeout_ms": m.session_timeout,
                        "subscription": _b64(m.subscription),
                        "assignment": _b64(m.assignment)} for m in g.members]}
        if kind in ("consumer", "share"):
            consumer = kind == "consumer"
            epoch = msg(CONSUMER_GROUP_METADATA if consumer else SHARE_GROUP_METADATA)
            target = msg(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA if consumer
                         else SHARE_GROUP_TARGET_ASSIGNMENT_METADATA)
            subs = msg(CONSUMER_GROUP_PARTITION_METADATA if consumer
                       else SHARE_GROUP_PARTITION_METADATA)
            out: dict[str, Any] = {
                "group_epoch": 0 if epoch is None else epoch.epoch,
                "assignment_epoch": 0 if target is None else target.assignment_epoch,
                "subscription_metadata": {} if subs is None else _subs_from(subs)}
            if consumer:
                out["assignor"] = None  # derived from the members by finish()
                out["resolved_regex"] = {
                    k[2]: sorted(v["message"].topics) for k, v in sorted(parts.items())
                    if k[0] == CONSUMER_GROUP_REGULAR_EXPRESSION}
            return out
        mid = owner[2]
        if kind == "consumer_member":
            meta = msg(CONSUMER_GROUP_MEMBER_METADATA, mid)
            cur = msg(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, mid)
            tgt = msg(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, mid)
            classic = None if meta is None else meta.classic_member_metadata
            return {
                "instance_id": None if meta is None else meta.instance_id,
                "rack_id": None if meta is None else meta.rack_id,
                "client_id": "" if meta is None else meta.client_id,
                "client_host": "" if meta is None else meta.client_host,
                "rebalance_timeout_ms": -1 if meta is None else meta.rebalance_timeout_ms,
                "subscribed_topic_names": [] if meta is None else list(
                    meta.subscribed_topic_names),
                "subscribed_topic_regex": None if meta is None else meta.subscribed_topic_regex,
                "server_assignor": None if meta is None else meta.server_assignor,
                "member_epoch": 0 if cur is None else cur.member_epoch,
                "previous_member_epoch": -1 if cur is None else cur.previous_member_epoch,
                "state": "stable" if cur is None else _MEMBER_STATE_NAMES.get(cur.state,
                                                                               "stable"),
                "assigned": {} if cur is None else _parts_dict(cur.assigned_partitions),
                "pending_revocation": {} if cur is None else _parts_dict(
                    cur.partitions_pending_revocation),
                "target": {} if tgt is None else _parts_dict(tgt.topic_partitions),
                "classic": None if classic is None else {
                    "session_timeout_ms": classic.session_timeout_ms,
                    "protocols": [[p.name, _b64(p.metadata)]
                                  for p in classic.supported_protocols]},
            }
        meta = msg(SHARE_GROUP_MEMBER_METADATA, mid)
        cur = msg(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, mid)
        tgt = msg(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, mid)
        return {
            "rack_id": None if meta is None else meta.rack_id,
            "client_id": "" if meta is None else meta.client_id,
            "client_host": "" if meta is None else meta.client_host,
            "subscribed_topic_names": [] if meta is None else list(meta.subscribed_topic_names),
            "member_epoch": 0 if cur is None else cur.member_epoch,
            "previous_member_epoch": -1 if cur is None else cur.previous_member_epoch,
            "assigned": {} if cur is None else _parts_dict(cur.assigned_partitions),
            "target": {} if tgt is None else _parts_dict(tgt.topic_partitions),
        }
