"""The records of ``__remote_log_metadata``: Kafka's framing and encoding, byte for byte, and
Kafka's partitioner (snakka.remote.metadata)."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snakka.protocol.primitives import base64_to_uuid
from snakka.remote.metadata import (
    RemoteLogMetadataSerdeError,
    RemoteLogSegmentMetadataSnapshot,
    deserialize,
    metadata_partition,
    serialize,
)
from snakka.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
TP = TopicIdPartition(TOPIC_ID, "orders", 3)
SEG = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")


def _compact_string(s: str) -> bytes:
    b = s.encode()
    assert len(b) + 1 < 128
    return bytes([len(b) + 1]) + b


def _tp_entry() -> bytes:
    # TopicIdPartitionEntry: Name (compact string), Id (uuid), Partition (int32), no tags
    return _compact_string("orders") + TOPIC_ID.bytes + struct.pack(">i", 3) + b"\x00"


def _segment_id_entry() -> bytes:
    return _tp_entry() + SEG.bytes + b"\x00"


# The bytes below are written by hand from Kafka's schemas (internal-records/storage/*.json)
# and AbstractApiMessageSerde's frame: uvarint frame version 1, uvarint api key, uvarint
# version, then the flexible (v0+) record.

SEGMENT_BYTES = (
    b"\x01\x00\x00"
    + _segment_id_entry()
    + struct.pack(">qqiqq", 100, 199, 1, 1_700_000_000_123, 1_700_000_001_000)
    + b"\x03"  # SegmentLeaderEpochs: 2 entries (compact array: n + 1)
    + struct.pack(">iq", 0, 100) + b"\x00"
    + struct.pack(">iq", 2, 150) + b"\x00"
    + struct.pack(">i", 4096)
    + b"\x00"  # CustomMetadata null (compact nullable bytes: 0)
    + b"\x00"  # RemoteLogSegmentState COPY_SEGMENT_STARTED
    + b"\x01" + b"\x00\x01\x01"  # one tagged field: tag 0 (TxnIndexEmpty), size 1, true
)

SEGMENT = RemoteLogSegmentMetadata(
    segment_id=RemoteLogSegmentId(TP, SEG), start_offset=100, end_offset=199,
    max_timestamp_ms=1_700_000_000_123, broker_id=1, event_timestamp_ms=1_700_000_001_000,
    segment_size_in_bytes=4096, segment_leader_epochs=((0, 100), (2, 150)),
    state=RemoteLogSegmentState.COPY_SEGMENT_STARTED, custom_metadata=None,
    txn_index_empty=True)

UPDATE_BYTES = (
    b"\x01\x01\x00"
    + _segment_id_entry()
    + struct.pack(">iq", 1, 1_700_000_002_000)
    + b"\x05" + b"\xca\xfe\xba\xbe"  # CustomMetadata: 4 bytes (compact: n + 1)
    + b"\x01"  # COPY_SEGMENT_FINISHED
    + b"\x00"
)

UPDATE = RemoteLogSegmentMetadataUpdate(
    segment_id=RemoteLogSegmentId(TP, SEG), event_timestamp_ms=1_700_000_002_000,
    state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED, broker_id=1,
    custom_metadata=b"\xca\xfe\xba\xbe")

DELETE_BYTES = (
    b"\x01\x02\x00"
    + _tp_entry()
    + struct.pack(">iq", 1, 1_700_000_003_000)
    + b"\x00"  # DELETE_PARTITION_MARKED
    + b"\x00"
)

DELETE = RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                                       1_700_000_003_000, 1)

SNAPSHOT_BYTES = (
    b"\x01\x03\x00"
    + SEG.bytes
    + struct.pack(">qqiqq", 100, 199, 1, 1_700_000_000_123, 1_700_000_001_000)
    + b"\x02" + struct.pack(">iq", 0, 100) + b"\x00"
    + struct.pack(">i", 4096)
    + b"\x00"
    + b"\x01"
    + b"\x00"  # TxnIndexEmpty false: not written (tagged default)
)

SNAPSHOT = RemoteLogSegmentMetadataSnapshot(
    segment_id=SEG, start_offset=100, end_offset=199, max_timestamp_ms=1_700_000_000_123,
    broker_id=1, event_timestamp_ms=1_700_000_001_000, segment_size_in_bytes=4096,
    segment_leader_epochs=((0, 100),), state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)

CASES = [(SEGMENT_BYTES, SEGMENT), (UPDATE_BYTES, UPDATE), (DELETE_BYTES, DELETE),
         (SNAPSHOT_BYTES, SNAPSHOT)]


@pytest.mark.parametrize(("raw", "value"), CASES, ids=["segment", "update", "delete", "snapshot"])
def test_kafka_bytes_decode(raw: bytes, value: object) -> None:
    assert deserialize(raw) == value


@pytest.mark.parametrize(("raw", "value"), CASES, ids=["segment", "update", "delete", "snapshot"])
def test_encode_is_kafkas_bytes(raw: bytes, value: object) -> None:
    assert serialize(value) == raw  # type: ignore[arg-type]


def test_roundtrip_with_custom_metadata_and_no_epochs() -> None:
    md = RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId(TP, uuid.uuid4()), start_offset=0, end_offset=0,
        max_timestamp_ms=-1, broker_id=0, event_timestamp_ms=0, segment_size_in_bytes=0,
        segment_leader_epochs=(), custom_metadata=b"x" * 128)
    assert deserialize(serialize(md)) == md
    assert deserialize(bytearray(serialize(md))) == md
    assert deserialize(memoryview(serialize(md))) == md


@pytest.mark.parametrize(("raw", "message"), [
    (b"", "truncated"),
    (b"\x01", "truncated"),
    (b"\x00\x00\x00" + SEGMENT_BYTES[3:], "frame version 0"),
    (b"\x02\x00\x00" + SEGMENT_BYTES[3:], "frame version 2"),
    (b"\x01\x04\x00", "api key 4"),
    (b"\x01\x7f\x00", "api key 127"),
    (b"\x01\x00\x01" + SEGMENT_BYTES[3:], "unsupported version 1"),
    (SEGMENT_BYTES[:-5], "cannot decode"),
    (SEGMENT_BYTES + b"\x00", "garbage"),
    (DELETE_BYTES[:-2] + b"\x07\x00", "delete state 7"),
    (UPDATE_BYTES[:-2] + b"\x09\x00", "segment state 9"),
])
def test_undecodable_values_are_clear_errors(raw: bytes, message: str) -> None:
    with pytest.raises(RemoteLogMetadataSerdeError, match=message):
        deserialize(raw)


# -- partitioner ---------------------------------------------------------------------------

def _kafka_partition(topic_id: uuid.UUID, partition: int, n: int) -> int:
    """Kafka's algorithm written out independently (Java ints, Objects.hash, murmur2)."""
    def to_int(x: int) -> int:
        x &= 0xFFFFFFFF
        return x - (1 << 32) if x >= 1 << 31 else x

    def long_hash(v: int) -> int:  # Long.hashCode of a signed long
        v = v - (1 << 64) if v >= 1 << 63 else v
        return to_int(v ^ ((v & 0xFFFFFFFFFFFFFFFF) >> 32))

    msb, lsb = topic_id.int >> 64, topic_id.int & ((1 << 64) - 1)
    h = 1
    for e in (long_hash(lsb), long_hash(msb), partition):
        h = to_int(31 * h + e)
    data = struct.pack(">i", h)
    # murmur2 (org.apache.kafka.common.utils.Utils.murmur2), seed 0x9747b28c
    m, r = 0x5BD1E995, 24
    length = len(data)
    hh = to_int(0x9747B28C ^ length)
    k = to_int(struct.unpack("<i", data)[0] * m)
    k ^= (k & 0xFFFFFFFF) >> r
    k = to_int(k * m)
    hh = to_int(hh * m)
    hh = to_int(hh ^ k)
    hh = to_int(hh ^ ((hh & 0xFFFFFFFF) >> 13))
    hh = to_int(hh * m)
    hh = to_int(hh ^ ((hh & 0xFFFFFFFF) >> 15))
    return (hh & 0x7FFFFFFF) % n


def test_partition_as_seen_on_kafka_4_0() -> None:
    # KAFKA-FACTS: topic QAwrm_yyTwOIgHHbJilSdw partition 0 -> metadata partition 25 of 50.
    tp = TopicIdPartition(base64_to_uuid("QAwrm_yyTwOIgHHbJilSdw"), "t", 0)
    assert metadata_partition(tp, 50) == 25


@pytest.mark.parametrize("seed", range(40))
def test_partition_matches_kafkas_algorithm(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    topic_id = uuid.UUID(int=rnd.getrandbits(128))
    partition = rnd.choice([0, 1, 7, rnd.randrange(1 << 31)])
    n = rnd.choice([1, 3, 50, 1000])
    tp = TopicIdPartition(topic_id, "x", partition)
    assert metadata_partition(tp, n) == _kafka_partition(topic_id, partition, n)


def test_partition_ignores_topic_name() -> None:
    a = TopicIdPartition(TOPIC_ID, "a", 1)
    b = TopicIdPartition(TOPIC_ID, "b", 1)
    assert metadata_partition(a, 50) == metadata_partition(b, 50)
    with pytest.raises(ValueError):
        metadata_partition(a, 0)


# Two values captured from Apache Kafka 4.0's __remote_log_metadata (reference broker, a topic
# "tiered" with id WPRer1eQQamecTkYMhgdlg tiered through a test RSM returning custom metadata
# "snakka-0"): the first segment's COPY_SEGMENT_STARTED record (TxnIndexEmpty tagged true), then
# its COPY_SEGMENT_FINISHED update. Both sat in metadata partition 6 of 50.
# tests/remote/test_metadata_kafka_compat.py captures fresh ones when Kafka and javac exist.
KAFKA_SEGMENT = (
    b"\x01\x00\x00\x07tieredX\xf4^\xafW\x90A\xa9\x9eq9\x182\x18\x1d\x96\x00\x00\x00\x00\x00R2"
    b"\xd4\xb9\x98\xc0Jp\xaa\xa5U`E7\xad\x98\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    b"\x00\x00\x00\x00g\x00\x00\x00\x01\x00\x00\x01\xa2\x12\xbf\xd5%\x00\x00\x01\xa2\x12\xbf"
    b"\xd6\xb8\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0f\xfb\xc0\x00\x00"
    b"\x01\x00\x01\x01")
KAFKA_UPDATE = (
    b"\x01\x01\x00\x07tieredX\xf4^\xafW\x90A\xa9\x9eq9\x182\x18\x1d\x96\x00\x00\x00\x00\x00R2"
    b"\xd4\xb9\x98\xc0Jp\xaa\xa5U`E7\xad\x98\x00\x00\x00\x00\x01\x00\x00\x01\xa2\x12\xbf\xd7$"
    b"\tsnakka-0\x01\x00")


def test_values_captured_from_kafka_4_0() -> None:
    tp = TopicIdPartition(base64_to_uuid("WPRer1eQQamecTkYMhgdlg"), "tiered", 0)
    md = deserialize(KAFKA_SEGMENT)
    assert isinstance(md, RemoteLogSegmentMetadata)
    assert md.topic_id_partition == tp
    assert (md.start_offset, md.end_offset, md.broker_id, md.segment_size_in_bytes) == (
        0, 103, 1, 1047488)
    assert md.segment_leader_epochs == ((0, 0),)
    assert md.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED and md.txn_index_empty
    assert md.custom_metadata is None
    update = deserialize(KAFKA_UPDATE)
    assert isinstance(update, RemoteLogSegmentMetadataUpdate)
    assert update.segment_id == md.segment_id
    assert update.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    assert update.custom_metadata == b"snakka-0"
    assert serialize(md) == KAFKA_SEGMENT and serialize(update) == KAFKA_UPDATE
    assert metadata_partition(tp, 50) == 6


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([SEGMENT_BYTES, UPDATE_BYTES, DELETE_BYTES, SNAPSHOT_BYTES,
                        KAFKA_SEGMENT, KAFKA_UPDATE]),
       st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4),
       st.integers(0, 250), st.binary(max_size=8))
def test_damaged_values_raise_only_the_serde_error(raw: bytes, flips: list[tuple[int, int]],
                                                   cut: int, tail: bytes) -> None:
    """Whatever a damaged value holds, decoding either succeeds or raises the serde's error
    (the manager logs and skips those; anything else would stop the broker's start)."""
    data = bytearray(raw)
    for pos, byte in flips:
        if pos < len(data):
            data[pos] = byte
    data = data[:cut] + tail if cut < len(data) else data
    try:
        event = deserialize(bytes(data))
    except RemoteLogMetadataSerdeError:
        return
    assert deserialize(serialize(event)) == event
