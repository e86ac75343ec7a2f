"""The classic consumer protocol's embedded payloads (JoinGroup subscription metadata, SyncGroup
assignments): a 2-byte version followed by a ConsumerProtocolSubscription/Assignment body.

Newer versions than we know are read with our newest schema, as Kafka's ConsumerProtocol does
(later versions only append fields). Malformed payloads raise DecodeError.
"""

from __future__ import annotations

from typing import TypeVar

from snakka.protocol.errors import DecodeError
from snakka.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from snakka.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from snakka.protocol.primitives import ProtocolStruct

_Payload = TypeVar("_Payload", bound=ProtocolStruct)


def _decode(cls: type[_Payload], data: bytes) -> _Payload:
    if len(data) < 2:
        raise DecodeError("consumer protocol payload shorter than its version")
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        raise DecodeError(f"negative consumer protocol version {version}")
    obj = cls.decode(data[2:], min(version, cls.VALID_VERSIONS[1]))
    assert isinstance(obj, cls)
    return obj


def decode_subscription(data: bytes) -> ConsumerProtocolSubscription:
    return _decode(ConsumerProtocolSubscription, data)


def decode_assignment(data: bytes) -> ConsumerProtocolAssignment:
    return _decode(ConsumerProtocolAssignment, data)
