"""``__share_group_state`` records in Apache Kafka 4.0's format (issue 17).

What it owns
    The bytes of the share-group state persister's records: :class:`ShareStateSerde`, the
    :class:`snakka.coordinator_log.RecordSerde` of ``__share_group_state``. A fact is
    ``(("ShareState", group id, topic id, partition), value)``, value a dict::

        {"type": "ShareSnapshot" | "ShareUpdate", "snapshot_epoch", "leader_epoch",
         "start_offset", "state_epoch" (snapshots only),
         "batches": [[first offset, last offset, delivery state, delivery count], ...]}

    or None (a tombstone: Kafka 4.1+ deletes share state so; 4.0 never writes one). snakka's
    first (JSON) format stored the same dict without the two epochs Kafka added, so a legacy
    record and a Kafka one replay alike.

Format (Kafka 4.0's ShareCoordinatorRecordHelpers through CoordinatorRecordSerde)
    key: int16 record type (0 ShareSnapshotKey, 1 ShareUpdateKey), then the key at v0: group
    id (string), topic id (uuid), partition (int32).
    value: int16 version 0, then the value at v0 (flexible): ShareSnapshotValue =
    SnapshotEpoch uint16, StateEpoch int32, LeaderEpoch int32, StartOffset int64,
    StateBatches [FirstOffset int64, LastOffset int64, DeliveryState int8, DeliveryCount int16];
    ShareUpdateValue = the same without StateEpoch (its StartOffset -1: unchanged).

    Kafka 4.0 shipped share groups as early access and changed these values later *within
    version 0* (4.1 made SnapshotEpoch an int32 and added CreateTimestamp / WriteTimestamp, 4.2
    a tagged DeliveryCompleteCount): the codecs generated from the newer schemas
    (``snakka.protocol.internal.share_coordinator``) cannot write what 4.0 reads. So the 4.0
    layout is written here by hand, and reading tries the 4.0 layout first (it must consume the
    value exactly) and then the newer one, so a data directory of a later Kafka loads too.
    SnapshotEpoch, a uint16 in 4.0, wraps at 65536 (4.0 only reports it; nothing compares it).
"""

from __future__ import annotations

import struct
import uuid

from snakka.protocol.errors import DecodeError
from snakka.protocol.internal.share_coordinator import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
)
from snakka.protocol.primitives import read_uvarint, skip_tagged_fields, write_uvarint

SNAPSHOT = "ShareSnapshot"
UPDATE = "ShareUpdate"
#: The logical key's tag (as in snakka's JSON format).
STATE_KEY = "ShareState"
#: Kafka's record types (ShareCoordinator.SHARE_SNAPSHOT_RECORD_KEY_VERSION / ..._UPDATE_...).
SNAPSHOT_KEY_TYPE = 0
UPDATE_KEY_TYPE = 1
#: Both values are written at version 0 (ShareCoordinator.SHARE_*_RECORD_VALUE_VERSION).
VALUE_VERSION = 0
#: StartOffset of a ShareUpdate that does not move the start offset; of a ShareSnapshot, a
#: share-partition with no state (Kafka's PartitionFactory.UNINITIALIZED_START_OFFSET).
NO_START_OFFSET = -1
SNAPSHOT_EPOCH_MODULUS = 1 << 16

_I16 = struct.Struct(">h")
_SNAP_HEAD = struct.Struct(">Hiiq")  # SnapshotEpoch, StateEpoch, LeaderEpoch, StartOffset
_UPD_HEAD = struct.Struct(">Hiq")  # SnapshotEpoch, LeaderEpoch, StartOffset
_BATCH = struct.Struct(">qqbh")


def _write_batches(out: bytearray, batches: list) -> None:
    write_uvarint(out, len(batches) + 1)
    for first, last, state, count in batches:
        out += _BATCH.pack(int(first), int(last), int(state), int(count))
        out.append(0)  # no tagged fields


def encode_value(value: dict) -> bytes:
    """The 4.0 layout of a ShareSnapshotValue / ShareUpdateValue (module doc)."""
    out = bytearray(_I16.pack(VALUE_VERSION))
    epoch = int(value.get("snapshot_epoch", 0)) % SNAPSHOT_EPOCH_MODULUS
    leader = int(value.get("leader_epoch", 0))
    if value["type"] == SNAPSHOT:
        out += _SNAP_HEAD.pack(epoch, int(value.get("state_epoch", 0)), leader,
                               int(value["start_offset"]))
    elif value["type"] == UPDATE:
        out += _UPD_HEAD.pack(epoch, leader, int(value["start_offset"]))
    else:
        raise ValueError(f"unknown share state record type {value['type']!r}")
    _write_batches(out, list(value.get("batches", ())))
    out.append(0)  # no tagged fields
    return bytes(out)


def _decode_40(buf: memoryview, snapshot: bool) -> dict:
    head = _SNAP_HEAD if snapshot else _UPD_HEAD
    fields = head.unpack_from(buf, 0)
    pos = head.size
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise DecodeError("StateBatches is null")
    batches = []
    for _ in range(n - 1):
        first, last, state, count = _BATCH.unpack_from(buf, pos)
        pos = skip_tagged_fields(buf, pos + _BATCH.size)
        batches.append([first, last, state, count])
    pos = skip_tagged_fields(buf, pos)
    if pos != len(buf):
        raise DecodeError(f"{len(buf) - pos} byte(s) after the value")
    if snapshot:
        epoch, state_epoch, leader, start = fields
        return {"type": SNAPSHOT, "snapshot_epoch": epoch, "state_epoch": state_epoch,
                "leader_epoch": leader, "start_offset": start, "batches": batches}
    epoch, leader, start = fields
    return {"type": UPDATE, "snapshot_epoch": epoch, "leader_epoch": leader,
            "start_offset": start, "batches": batches}


def _decode_later(buf: memoryview, snapshot: bool) -> dict:
    """The layout of Kafka 4.1+ (the generated codecs), for a later Kafka's data directory."""
    v = (ShareSnapshotValue if snapshot else ShareUpdateValue).decode(buf, VALUE_VERSION)
    d = {"type": SNAPSHOT if snapshot else UPDATE, "snapshot_epoch": v.snapshot_epoch,
         "leader_epoch": v.leader_epoch, "start_offset": v.start_offset,
         "batches": [[b.first_offset, b.last_offset, b.delivery_state, b.delivery_count]
                     for b in v.state_batches]}
    if snapshot:
        d["state_epoch"] = v.state_epoch
    return d


def decode_value(data: bytes, snapshot: bool) -> dict:
    if len(data) < 2:
        raise DecodeError("share state value shorter than its version")
    (version,) = _I16.unpack_from(data)
    if version != VALUE_VERSION:
        raise DecodeError(f"unknown share state value version {version}")
    buf = memoryview(data)[2:]
    try:
        return _decode_40(buf, snapshot)
    except (struct.error, DecodeError, IndexError) as first:
        try:
            return _decode_later(buf, snapshot)
        except (DecodeError, ValueError):
            raise DecodeError(f"not a Kafka share state value: {first}") from None


class ShareStateSerde:
    """Kafka 4.0's ``__share_group_state`` records (module doc)."""

    def serialize(self, key: tuple, value: dict | None) -> tuple[bytes, bytes | None]:
        if len(key) != 4 or key[0] != STATE_KEY:
            raise ValueError(f"not a share state key: {key!r}")
        _tag, group, topic_id, partition = key
        update = value is not None and value["type"] == UPDATE
        cls = ShareUpdateKey if update else ShareSnapshotKey
        k = cls(group_id=str(group), topic_id=uuid.UUID(str(topic_id)), partition=int(partition))
        rtype = UPDATE_KEY_TYPE if update else SNAPSHOT_KEY_TYPE
        return (_I16.pack(rtype) + k.encode(0),
                None if value is None else encode_value(value))

    def deserialize(self, key: bytes, value: bytes | None) -> tuple[tuple, dict | None] | None:
        if len(key) < 2:
            raise DecodeError("record key shorter than its type")
        (rtype,) = _I16.unpack_from(key)
        if rtype not in (SNAPSHOT_KEY_TYPE, UPDATE_KEY_TYPE):
            return None  # a record type this Kafka version does not know: skipped
        snapshot = rtype == SNAPSHOT_KEY_TYPE
        k = (ShareSnapshotKey if snapshot else ShareUpdateKey).decode(memoryview(key)[2:], 0)
        fact = (STATE_KEY, k.group_id, str(k.topic_id), k.partition)
        return fact, None if value is None else decode_value(value, snapshot)

    def recognizes(self, key: bytes) -> bool:
        return len(key) >= 2 and key[0] == 0


SHARE_STATE_SERDE = ShareStateSerde()
