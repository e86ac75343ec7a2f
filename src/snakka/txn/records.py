"""``__transaction_state`` records in Apache Kafka 4.0's format (issue 17).

What it owns
    The bytes of the transaction coordinator's records: :class:`TransactionLogSerde`, the
    :class:`snakka.coordinator_log.RecordSerde` of ``__transaction_state``. A fact is
    ``(("transaction", transactional id), value)`` where value is the TransactionLogValue under
    Kafka's schema field names (:func:`snakka.txn.coordinator.value_to_dict`) or None (a
    tombstone), the same facts snakka's first (JSON) format held, so a legacy record and a
    Kafka one replay alike.

Format (Kafka 4.0's ``TransactionLog.keyToBytes`` / ``valueToBytes``)
    key: int16 record type 0, then TransactionLogKey v0 (the transactional id).
    value: int16 version, then TransactionLogValue at that version; a null value is a
    tombstone (an expired transactional id). The version is
    ``TransactionVersion.transactionLogValueVersion()`` of the *finalized* ``transaction.version``
    (1 from level 1 up, else 0), as Kafka's TransactionStateManager passes its cluster level,
    not the client's. TransactionPartitions is null in the Empty state and otherwise one entry
    per topic. Kafka 4.0 sets ClientTransactionVersion among the tagged fields; snakka also
    keeps PreviousProducerId / NextProducerId, which 4.0's schema defines and 4.0's loader reads
    (``readTxnRecordValue``) but 4.0's writer leaves at their default: snakka's core needs them
    to finish an epoch-exhausted TV2 transaction after a restart (a tagged field at its default
    is not written, so records without them are byte-identical to Kafka's).

Reading follows ``TransactionLog.readTxnRecordKey`` / ``readTxnRecordValue``: a key of another
record type is ignored (Kafka's UnknownKey), a value version Kafka does not know is an error.
"""

from __future__ import annotations

import struct

from snakka.protocol.errors import DecodeError
from snakka.protocol.internal.transaction_coordinator import TransactionLogKey, TransactionLogValue
from snakka.protocol.internal.transaction_coordinator.transaction_log_value import PartitionsSchema

#: The record type Kafka writes before a TransactionLogKey (TransactionLog's key version).
TXN_KEY_TYPE = 0
#: The logical key's tag (as in snakka's JSON format: ``["transaction", id]``).
TXN_KEY = "transaction"
_I16 = struct.Struct(">h")
_EMPTY = 0  # TransactionState Empty's id

_FIELDS = (
    ("ProducerId", "producer_id"), ("PreviousProducerId", "previous_producer_id"),
    ("NextProducerId", "next_producer_id"), ("ProducerEpoch", "producer_epoch"),
    ("NextProducerEpoch", "next_producer_epoch"),
    ("TransactionTimeoutMs", "transaction_timeout_ms"),
    ("TransactionStatus", "transaction_status"),
    ("TransactionLastUpdateTimestampMs", "transaction_last_update_timestamp_ms"),
    ("TransactionStartTimestampMs", "transaction_start_timestamp_ms"),
    ("ClientTransactionVersion", "client_transaction_version"),
)


def value_version(transaction_version_level: int) -> int:
    """Kafka's ``TransactionVersion.transactionLogValueVersion()``."""
    return 1 if transaction_version_level >= 1 else 0


def key_bytes(transactional_id: str) -> bytes:
    return _I16.pack(TXN_KEY_TYPE) + TransactionLogKey(transactional_id).encode(0)


def value_bytes(value: dict, version: int) -> bytes:
    v = TransactionLogValue()
    for k, a in _FIELDS:
        if k in value:
            setattr(v, a, int(value[k]))
    parts = value.get("TransactionPartitions") or []
    if v.transaction_status == _EMPTY and not parts:
        v.transaction_partitions = None  # Kafka writes null in Empty (valueToBytes)
    else:
        v.transaction_partitions = [PartitionsSchema(str(e["Topic"]),
                                                     [int(p) for p in e["PartitionIds"]])
                                    for e in parts]
    return _I16.pack(version) + v.encode(version)


def decode_value(data: bytes) -> dict:
    """A TransactionLogValue's bytes as the fact's dict; DecodeError (a ValueError) if
    undecodable."""
    if len(data) < 2:
        raise DecodeError("TransactionLogValue shorter than its version")
    (version,) = _I16.unpack_from(data)
    lo, hi = TransactionLogValue.VALID_VERSIONS
    if not lo <= version <= hi:
        raise DecodeError(f"unknown TransactionLogValue version {version}")
    v = TransactionLogValue.decode(memoryview(data)[2:], version)
    d: dict[str, object] = {k: getattr(v, a) for k, a in _FIELDS}
    d["TransactionPartitions"] = [{"Topic": e.topic, "PartitionIds": list(e.partition_ids)}
                                  for e in (v.transaction_partitions or ())]
    return d


class TransactionLogSerde:
    """Kafka 4.0's ``__transaction_state`` records (module doc)."""

    def __init__(self, transaction_version_level: int) -> None:
        self.value_version = value_version(transaction_version_level)

    def serialize(self, key: tuple, value: dict | None) -> tuple[bytes, bytes | None]:
        if len(key) != 2 or key[0] != TXN_KEY:
            raise ValueError(f"not a transaction log key: {key!r}")
        return key_bytes(str(key[1])), (None if value is None
                                         else value_bytes(value, self.value_version))

    def deserialize(self, key: bytes, value: bytes | None) -> tuple[tuple, dict | None] | None:
        if len(key) < 2:
            raise DecodeError("record key shorter than its type")
        (rtype,) = _I16.unpack_from(key)
        if rtype != TXN_KEY_TYPE:
            return None  # Kafka's UnknownKey: skipped by the loader
        k = TransactionLogKey.decode(memoryview(key)[2:], 0)
        return (TXN_KEY, k.transactional_id), None if value is None else decode_value(value)

    def recognizes(self, key: bytes) -> bool:
        return len(key) >= 2 and key[0] == 0
