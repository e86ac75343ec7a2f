"""Request handlers: one module per Kafka API, named after it (``produce.py`` is API key 0).

Each module defines ``API_KEY`` and ``handle(ctx, request)``, which returns the response object,
``None`` for no response (acks=0 produce), or a coroutine when it must wait (long-poll fetch,
fsync). Handlers translate between the generated protocol objects and the cores/storage; business
logic lives in the cores. A module may narrow the advertised version range with ``MIN_VERSION`` /
``MAX_VERSION``; otherwise every version the schemas define is served and advertised.

Only the APIs listed in HANDLER_MODULES are advertised in ApiVersions; any other API key closes
the connection with a log line.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snakka.protocol.apis import api_spec

HANDLER_MODULES = (
    "produce", "fetch", "list_offsets", "metadata", "api_versions", "offset_for_leader_epoch",
    "create_topics", "delete_topics", "create_partitions", "delete_records",
    "describe_configs", "alter_configs", "incremental_alter_configs", "describe_cluster",
    "describe_topic_partitions", "describe_log_dirs", "init_producer_id", "find_coordinator",
    # consumer groups (issue 3)
    "join_group", "sync_group", "heartbeat", "leave_group", "offset_commit", "offset_fetch",
    "offset_delete", "describe_groups", "list_groups", "delete_groups",
    "consumer_group_heartbeat", "consumer_group_describe",
    # share groups (issue 4)
    "share_group_heartbeat", "share_group_describe", "share_fetch", "share_acknowledge",
    "describe_share_group_offsets", "alter_share_group_offsets", "delete_share_group_offsets",
)


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Callable[[Any, Any], Any]
    module: Any

    def unsupported_version_response(self, broker: Any) -> Any:
        return self.module.unsupported_version_response(broker)


def load_handlers() -> dict[int, Handler]:
    out: dict[int, Handler] = {}
    for name in HANDLER_MODULES:
        mod = importlib.import_module(f"snakka.handlers.{name}")
        spec = api_spec(mod.API_KEY)
        assert spec is not None, name
        max_v = getattr(mod, "MAX_VERSION", None)
        if max_v is None:
            max_v = spec.max_version - (1 if spec.latest_version_unstable else 0)
        min_v = getattr(mod, "MIN_VERSION", spec.min_version)
        out[mod.API_KEY] = Handler(mod.API_KEY, spec.name, min_v, max_v, mod.handle, mod)
    return out
