"""Python clients built on snakka's generated protocol: the share consumer (KIP-932) and the
admin helpers the CLI uses. Names are imported lazily so ``snakka.client.admin`` users do not
pay for the share consumer."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "AsyncShareConsumer": "share_consumer",
    "ShareConsumer": "share_consumer",
    "ShareConsumerConfig": "share_consumer",
    "ShareRecord": "share_acks",
    "TopicPartition": "share_acks",
    "IllegalStateError": "share_acks",
    "AcknowledgeType": "share_consumer",
    "ShareAdmin": "share_admin",
    "ShareGroupInfo": "share_admin",
    "SharePartitionOffset": "share_admin",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'snakka.client' has no attribute {name!r}")
    return getattr(import_module(f"snakka.client.{mod}"), name)
