"""Share-group administration (what ``kafka-share-groups.sh`` and Kafka's Admin client do for
KIP-932 share groups), on snakka's protocol client.

Speaks only the public protocol, so it works against Apache Kafka 4.1+ as well as snakka:

* ``describe_share_groups``: ShareGroupDescribe (77) at the group coordinator;
* ``list_share_groups``: ListGroups v5+ with the type filter ``share``, asked of every broker
  (each lists the groups it coordinates);
* ``describe_share_group_offsets``: DescribeShareGroupOffsets (90): the share-partition start
  offset (SPSO) of each partition and, from v1, the lag; with v0 the lag is derived from
  ListOffsets (log end offset - start offset, an upper bound since acknowledged records past the
  start offset are not subtracted);
* ``alter_share_group_offsets``: AlterShareGroupOffsets (91); ``reset_share_group_offsets``
  resolves earliest / latest / a timestamp / explicit offsets through ListOffsets first, asked
  of each partition's leader (the group must have no members, as Kafka requires);
* ``delete_share_group_offsets``: DeleteShareGroupOffsets (92); ``delete_share_groups``:
  DeleteGroups;
* ``alter_group_configs`` / ``describe_group_configs``: IncrementalAlterConfigs /
  DescribeConfigs on resource type GROUP (32), e.g. ``share.auto.offset.reset``,
  ``share.record.lock.duration.ms``, ``share.delivery.count.limit``.

Errors come back as ``AdminError`` (top-level or group-level codes) or, per partition, in the
results.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from snakka.client.admin import (
    _COORDINATOR_RETRIABLE,
    COORDINATOR_WAIT_S,
    KEY_TYPE_GROUP,
    Admin,
    AdminError,
    _check,
)
from snakka.client.connection import KafkaConnection
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from snakka.protocol.messages.delete_groups_request import DeleteGroupsRequest
from snakka.protocol.messages.delete_share_group_offsets_request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from snakka.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from snakka.protocol.messages.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from snakka.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from snakka.protocol.messages.list_groups_request import ListGroupsRequest
from snakka.protocol.messages.metadata_request import MetadataRequest
from snakka.protocol.messages.share_group_describe_request import ShareGroupDescribeRequest

RESOURCE_TYPE_GROUP = 32
_GROUP_RETRIABLE = (*_COORDINATOR_RETRIABLE, ErrorCode.NOT_COORDINATOR)
T = TypeVar("T")
OP_SET, OP_DELETE = 0, 1
LATEST_TIMESTAMP, EARLIEST_TIMESTAMP = -1, -2


@dataclass
class ShareMemberInfo:
    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    rack_id: str | None
    subscribed_topics: list[str]
    assignment: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class ShareGroupInfo:
    group_id: str
    state: str  # Empty | Stable | Dead
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ShareMemberInfo]


@dataclass(frozen=True)
class SharePartitionOffset:
    """Start offset (SPSO) and lag of one share-partition; ``start_offset`` -1 if the group
    has no state for it; ``error`` is the partition's error code (0 = none)."""

    topic: str
    partition: int
    start_offset: int
    lag: int
    leader_epoch: int = -1
    error: int = 0


class ShareAdmin(Admin):
    """Share-group admin operations. Use as ``async with ShareAdmin(bootstrap) as admin``."""

    def __init__(self, bootstrap: str, *, client_id: str = "snakka-share-admin",
                 config: Mapping[str, str] | None = None) -> None:
        super().__init__(bootstrap, client_id=client_id, config=config)

    async def coordinator(self, group_id: str) -> KafkaConnection:
        """A connection to ``group_id``'s group coordinator (FindCoordinator key type GROUP,
        retried while it is not available yet: see :meth:`Admin.find_coordinator`)."""
        return (await self.find_coordinator(group_id, KEY_TYPE_GROUP))[1]

    async def at_coordinator(self, group_id: str,
                             op: Callable[[KafkaConnection], Awaitable[T]]) -> T:
        """``op(connection to the coordinator)``, found again and retried (bounded by
        COORDINATOR_WAIT_S) while it fails with NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
        COORDINATOR_LOAD_IN_PROGRESS, as Kafka's clients do: Kafka answers so while a new
        ``__consumer_offsets`` partition is loading or its leadership moves."""
        deadline = time.monotonic() + COORDINATOR_WAIT_S
        backoff = 0.05
        while True:
            try:
                return await op(await self.coordinator(group_id))
            except AdminError as e:
                if e.code not in _GROUP_RETRIABLE or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(backoff)
            backoff = min(1.0, backoff * 2)

    # -- groups --------------------------------------------------------------------------------
    async def list_share_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group, from every broker."""
        meta = await self.conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
        out: set[tuple[str, str]] = set()
        brokers = [(b.host, b.port) for b in meta.brokers] or [(self.conn.host, self.conn.port)]
        for host, port in brokers:
            conn = await self._conn_to(host, port)
            if conn.version_for(16) < 5:
                raise AdminError("ListGroups v5 (group type filter) is not supported")
            resp = await conn.send(ListGroupsRequest(states_filter=[], types_filter=["share"]))
            _check(resp.error_code, "list groups")
            out |= {(g.group_id, g.group_state) for g in resp.groups}
        return sorted(out)

    async def describe_share_groups(self, group_ids: list[str]) -> dict[str, ShareGroupInfo]:
        out: dict[str, ShareGroupInfo] = {}
        for gid in group_ids:
            conn = await self.coordinator(gid)
            resp = await conn.send(ShareGroupDescribeRequest(group_ids=[gid],
                                                             include_authorized_operations=False))
            g = resp.groups[0]
            _check(g.error_code, f"describe share group {gid}", g.error_message)
            out[gid] = ShareGroupInfo(
                g.group_id, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name,
                [ShareMemberInfo(m.member_id, m.client_id, m.client_host, m.member_epoch,
                                 m.rack_id, list(m.subscribed_topic_names),
                                 {tp.topic_name: sorted(tp.partitions)
                                  for tp in m.assignment.topic_partitions})
                 for m in g.members])
        return out

    async def delete_share_groups(self, group_ids: list[str]) -> None:
        for gid in group_ids:
            conn = await self.coordinator(gid)
            resp = await conn.send(DeleteGroupsRequest(groups_names=[gid]))
            for r in resp.results:
                _check(r.error_code, f"delete group {r.group_id}", r.error_message)

    # -- offsets -------------------------------------------------------------------------------
    async def describe_share_group_offsets(self, group_id: str,
                                           partitions: dict[str, list[int]] | None = None
                                           ) -> dict[tuple[str, int], SharePartitionOffset]:
        """Start offset and lag per share-partition (all the group has state for when
        ``partitions`` is None)."""
        conn = await self.coordinator(group_id)
        topics = None if partitions is None else [
            DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=list(ps))
            for t, ps in partitions.items()]
        version = conn.version_for(90)
        resp = await conn.send(DescribeShareGroupOffsetsRequest(groups=[
            DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=topics)]), version)
        g = resp.groups[0]
        _check(g.error_code, f"describe share-group offsets of {group_id}", g.error_message)
        out: dict[tuple[str, int], SharePartitionOffset] = {}
        for t in g.topics:
            ends: dict[int, int] = {}
            if version < 1:  # no Lag field: approximate it from the log end offset
                ends = await self.list_offsets(t.topic_name,
                                               [p.partition_index for p in t.partitions],
                                               LATEST_TIMESTAMP)
            for p in t.partitions:
                lag = getattr(p, "lag", -1) if version >= 1 else (
                    ends[p.partition_index] - p.start_offset if p.start_offset >= 0 else -1)
                out[(t.topic_name, p.partition_index)] = SharePartitionOffset(
                    t.topic_name, p.partition_index, p.start_offset, lag, p.leader_epoch,
                    p.error_code)
        return out

    async def alter_share_group_offsets(self, group_id: str,
                                        offsets: dict[tuple[str, int], int]
                                        ) -> dict[tuple[str, int], int]:
        """Set share-partition start offsets; returns each partition's error code (0 = ok).
        The group must be empty (Kafka answers NON_EMPTY_GROUP otherwise)."""
        conn = await self.coordinator(group_id)
        by_topic: dict[str, list[AlterShareGroupOffsetsRequestPartition]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(
                AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=off))
        resp = await conn.send(AlterShareGroupOffsetsRequest(group_id=group_id, topics=[
            AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
            for t, ps in by_topic.items()]))
        _check(resp.error_code, f"alter share-group offsets of {group_id}", resp.error_message)
        return {(t.topic_name, p.partition_index): p.error_code
                for t in resp.responses for p in t.partitions}

    async def reset_share_group_offsets(self, group_id: str, topic: str,
                                        partitions: list[int] | None = None, *,
                                        to: str = "earliest", value: int | None = None,
                                        execute: bool = True
                                        ) -> dict[tuple[str, int], int]:
        """Plan (and with ``execute`` apply) new start offsets: ``to`` is ``earliest``,
        ``latest``, ``timestamp`` (``value`` = ms since the epoch: the first offset at or after
        it, or the log end if none) or ``offset`` (``value``, clamped to the log). Returns the
        new offsets."""
        if partitions is None:
            partitions = list(range(await self._partition_count(topic)))
        earliest = await self.list_offsets(topic, partitions, EARLIEST_TIMESTAMP)
        latest = await self.list_offsets(topic, partitions, LATEST_TIMESTAMP)
        if to == "earliest":
            new = dict(earliest)
        elif to == "latest":
            new = dict(latest)
        elif to == "timestamp":
            if value is None:
                raise AdminError("reset to a timestamp needs the timestamp")
            found = await self.list_offsets(topic, partitions, value)
            new = {p: found[p] if found[p] >= 0 else latest[p] for p in partitions}
        elif to == "offset":
            if value is None:
                raise AdminError("reset to an offset needs the offset")
            new = {p: max(earliest[p], min(latest[p], value)) for p in partitions}
        else:
            raise AdminError(f"unknown reset target {to!r}")
        plan = {(topic, p): new[p] for p in partitions}
        if execute:
            errors = await self.alter_share_group_offsets(group_id, plan)
            for (t, p), code in errors.items():
                _check(code, f"reset share-group offset of {t}-{p}")
        return plan

    async def delete_share_group_offsets(self, group_id: str, topics: list[str]
                                         ) -> dict[str, int]:
        """Forget the group's share-partition state for ``topics``; returns each topic's error
        code (0 = ok)."""
        conn = await self.coordinator(group_id)
        resp = await conn.send(DeleteShareGroupOffsetsRequest(group_id=group_id, topics=[
            DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]))
        _check(resp.error_code, f"delete share-group offsets of {group_id}", resp.error_message)
        return {r.topic_name: r.error_code for r in resp.responses}

    # -- group configs -------------------------------------------------------------------------
    async def alter_group_configs(self, group_id: str, configs: dict[str, str | None]) -> None:
        """Set (or, for a None value, delete) group configs such as
        ``share.auto.offset.reset`` (IncrementalAlterConfigs, resource type GROUP)."""
        req = IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
            resource_type=RESOURCE_TYPE_GROUP, resource_name=group_id, configs=[
                AlterableConfig(name=k, config_operation=OP_DELETE if v is None else OP_SET,
                                value=v) for k, v in configs.items()])], validate_only=False)
        resp = await self.conn.send(req)
        for r in resp.responses:
            _check(r.error_code, f"alter configs of group {group_id}", r.error_message)

    async def describe_group_configs(self, group_id: str) -> dict[str, str | None]:
        resp = await self.conn.send(DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=RESOURCE_TYPE_GROUP, resource_name=group_id, configuration_keys=None)]))
        r = resp.results[0]
        _check(r.error_code, f"describe configs of group {group_id}", r.error_message)
        return {c.name: c.value for c in r.configs}

    async def group_config_entries(self, group_id: str) -> list[tuple[str, str | None, int]]:
        """(name, value, config source) of every config of ``group_id``, as
        ``kafka-configs.sh --entity-type groups --describe --all`` shows them; the source is
        Kafka's ConfigSource (8 GROUP_CONFIG for the group's own overrides)."""
        resp = await self.conn.send(DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=RESOURCE_TYPE_GROUP, resource_name=group_id, configuration_keys=None)]))
        r = resp.results[0]
        _check(r.error_code, f"describe configs of group {group_id}", r.error_message)
        return sorted((c.name, c.value, c.config_source) for c in r.configs)


__all__ = ["ErrorCode", "ShareAdmin", "ShareGroupInfo", "ShareMemberInfo",
           "SharePartitionOffset"]
