"""``__transaction_state`` records (snakka.txn.records): Kafka 4.0's TransactionLogKey/Value.
Byte equality with Kafka's own records is proven against the reference Kafka in
tests/reference/test_coordinator_state_records.py."""

from __future__ import annotations

import pytest

from snakka.protocol.errors import DecodeError
from snakka.txn.coordinator import TransactionLogValue, TxnState, value_from_dict, value_to_dict
from snakka.txn.records import TransactionLogSerde, value_version

ONGOING = TransactionLogValue(
    producer_id=7, producer_epoch=3, transaction_timeout_ms=60000,
    transaction_status=int(TxnState.ONGOING),
    transaction_partitions=(("a", (0, 2)), ("b", (1,))),
    transaction_last_update_timestamp_ms=1000, transaction_start_timestamp_ms=900,
    client_transaction_version=2)
EMPTY = TransactionLogValue(
    producer_id=7, producer_epoch=0, transaction_timeout_ms=60000,
    transaction_status=int(TxnState.EMPTY), transaction_partitions=(),
    transaction_last_update_timestamp_ms=1000, transaction_start_timestamp_ms=-1)


def test_value_version_follows_the_finalized_transaction_version():
    assert [value_version(level) for level in (0, 1, 2)] == [0, 1, 1]


@pytest.mark.parametrize("level", [0, 2])
def test_round_trip(level):
    serde = TransactionLogSerde(level)
    for v in (ONGOING, EMPTY):
        k, b = serde.serialize(("transaction", "tid"), value_to_dict(v))
        assert k == b"\x00\x00\x00\x03tid"
        assert b is not None and b[:2] == bytes([0, value_version(level)])
        key, d = serde.deserialize(k, b)
        assert key == ("transaction", "tid") and d is not None
        got = value_from_dict(d)
        # v0 holds no tagged fields (ClientTransactionVersion)
        assert got == (v if level else TransactionLogValue(
            **{**{f: getattr(v, f) for f in v.__slots__}, "client_transaction_version": 0}))


def test_empty_has_null_partitions_and_the_tagged_field_is_written():
    serde = TransactionLogSerde(2)
    _k, empty = serde.serialize(("transaction", "t"), value_to_dict(EMPTY))
    # ProducerId, ProducerEpoch, TimeoutMs, Status, then a null compact array (0)
    assert empty is not None and empty[2 + 8 + 2 + 4 + 1] == 0
    _k, ongoing = serde.serialize(("transaction", "t"), value_to_dict(ONGOING))
    # the last bytes: one tagged field, tag 2 (ClientTransactionVersion), 2 bytes, value 2
    assert ongoing is not None and ongoing.endswith(b"\x01\x02\x02\x00\x02")


def test_tombstones_unknown_types_and_versions():
    serde = TransactionLogSerde(2)
    k, v = serde.serialize(("transaction", "t"), None)
    assert v is None and serde.deserialize(k, None) == (("transaction", "t"), None)
    assert serde.deserialize(b"\x00\x01\x00\x01x", b"") is None  # Kafka's UnknownKey
    with pytest.raises(DecodeError):
        serde.deserialize(k, b"\x00\x05")
