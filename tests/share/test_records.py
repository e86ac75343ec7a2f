"""``__share_group_state`` records (snakka.share.records): Kafka 4.0's v0 layout, written and
read; a later Kafka's layout (int32 SnapshotEpoch, timestamps: the generated codecs) read too.
Byte equality with Kafka's own records is proven against the reference Kafka in
tests/reference/test_coordinator_state_records.py."""

from __future__ import annotations

import struct
import uuid

import pytest

from snakka.protocol.errors import DecodeError
from snakka.protocol.internal.share_coordinator import ShareSnapshotValue
from snakka.protocol.internal.share_coordinator.share_snapshot_value import StateBatch
from snakka.share.records import SHARE_STATE_SERDE, decode_value, encode_value

TID = uuid.UUID("79b3aebf-283b-4bb9-8e50-b481c54d4872")
KEY = ("ShareState", "g", str(TID), 3)
SNAPSHOT = {"type": "ShareSnapshot", "snapshot_epoch": 7, "state_epoch": 2, "leader_epoch": 1,
            "start_offset": 10, "batches": [[10, 12, 2, 1], [13, 13, 4, 5]]}
UPDATE = {"type": "ShareUpdate", "snapshot_epoch": 7, "leader_epoch": 1, "start_offset": -1,
          "batches": [[14, 20, 0, 1]]}


def test_snapshot_layout_is_kafka_40s():
    k, v = SHARE_STATE_SERDE.serialize(KEY, SNAPSHOT)
    # key: type 0, GroupId "g", TopicId, Partition 3
    assert k == b"\x00\x00" + b"\x00\x01g" + TID.bytes + b"\x00\x00\x00\x03"
    # value: version 0, SnapshotEpoch uint16, StateEpoch, LeaderEpoch, StartOffset, 2 batches
    head = b"\x00\x00" + struct.pack(">Hiiq", 7, 2, 1, 10) + b"\x03"
    batches = struct.pack(">qqbh", 10, 12, 2, 1) + b"\x00" + struct.pack(">qqbh", 13, 13, 4, 5)
    assert v == head + batches + b"\x00\x00"
    assert SHARE_STATE_SERDE.deserialize(k, v) == (KEY, SNAPSHOT)


def test_update_round_trip_and_key_type():
    k, v = SHARE_STATE_SERDE.serialize(KEY, UPDATE)
    assert k[:2] == b"\x00\x01"
    assert SHARE_STATE_SERDE.deserialize(k, v) == (KEY, UPDATE)


def test_snapshot_epoch_wraps_as_a_uint16():
    v = encode_value({**SNAPSHOT, "snapshot_epoch": 65536 + 5})
    assert decode_value(v, snapshot=True)["snapshot_epoch"] == 5


def test_a_later_kafkas_layout_is_read():
    later = ShareSnapshotValue(snapshot_epoch=70000, state_epoch=2, leader_epoch=1,
                               start_offset=10, create_timestamp=1, write_timestamp=2,
                               state_batches=[StateBatch(10, 12, 2, 1)])
    d = decode_value(b"\x00\x00" + later.encode(0), snapshot=True)
    assert d == {"type": "ShareSnapshot", "snapshot_epoch": 70000, "state_epoch": 2,
                 "leader_epoch": 1, "start_offset": 10, "batches": [[10, 12, 2, 1]]}


def test_tombstone_and_unknown_types():
    k, v = SHARE_STATE_SERDE.serialize(KEY, None)
    assert v is None and SHARE_STATE_SERDE.deserialize(k, None) == (KEY, None)
    assert SHARE_STATE_SERDE.deserialize(b"\x00\x05xyz", b"") is None
    with pytest.raises(DecodeError):
        decode_value(b"\x00\x00\x01", snapshot=True)
    with pytest.raises(DecodeError):
        decode_value(b"\x00\x01" + b"\x00" * 40, snapshot=False)
