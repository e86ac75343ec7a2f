"""Consumer-group administration for the CLI (what ``kafka-consumer-groups.sh`` does).

Speaks only the public protocol: ListGroups, DescribeGroups (classic groups: member assignments
decoded from the consumer protocol's ConsumerProtocolAssignment), ConsumerGroupDescribe (KIP-848
groups), ShareGroupDescribe and DescribeShareGroupOffsets (KIP-932 share groups: a partition may
have several members; the "committed" offset is the share-partition start offset), OffsetFetch,
Group requests go to the group's coordinator (FindCoordinator, retried while Kafka creates
``__consumer_offsets``), as Kafka requires. ListOffsets (for lag), OffsetCommit (reset, and the CLI consumer's commits), DeleteGroups, and
for share groups AlterShareGroupOffsets (reset: the share-partition start offset moves, as
``kafka-share-groups.sh --reset-offsets`` in Kafka 4.1+) through :class:`ShareAdmin`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from snakka.client.admin import AdminError, _check
from snakka.client.share_admin import ShareAdmin
from snakka.protocol import consumer_protocol
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest
from snakka.protocol.messages.delete_groups_request import DeleteGroupsRequest
from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest
from snakka.protocol.messages.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from snakka.protocol.messages.list_groups_request import ListGroupsRequest
from snakka.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from snakka.protocol.messages.offset_fetch_request import OffsetFetchRequest
from snakka.protocol.messages.share_group_describe_request import ShareGroupDescribeRequest


@dataclass
class MemberInfo:
    member_id: str
    client_id: str
    host: str
    assignment: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class GroupInfo:
    group_id: str
    state: str
    group_type: str  # classic | consumer | share
    protocol: str
    members: list[MemberInfo]
    # (topic, partition) -> (committed offset, log end offset, owner member id or None); for a
    # share group the share-partition start offset and the members' ids joined with ","
    partitions: dict[tuple[str, int], tuple[int, int, str | None]] = field(default_factory=dict)


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """A classic consumer-protocol assignment as {topic: partitions}."""
    a = consumer_protocol.decode_assignment(data)
    return {tp.topic: list(tp.partitions) for tp in a.assigned_partitions}


def _described_members(group) -> list[MemberInfo]:
    """Members of a ConsumerGroupDescribe or ShareGroupDescribe group (same member shape)."""
    return [MemberInfo(m.member_id, m.client_id, m.client_host,
                       {tp.topic_name: list(tp.partitions) for tp in m.assignment.topic_partitions})
            for m in group.members]


class GroupsAdmin(ShareAdmin):
    """Consumer and share groups (one verb set for both, as the CLI's ``groups`` commands)."""

    def __init__(self, bootstrap: str, *, client_id: str = "snakka-cli",
                 config: Mapping[str, str] | None = None) -> None:
        super().__init__(bootstrap, client_id=client_id, config=config)

    async def list_groups(self) -> list[tuple[str, str, str, str]]:
        """(group id, type, state, protocol type)."""
        resp = await self.conn.send(ListGroupsRequest())
        _check(resp.error_code, "list groups")
        return sorted((g.group_id, g.group_type or "classic", g.group_state or "?",
                       g.protocol_type) for g in resp.groups)

    async def describe(self, group_id: str) -> GroupInfo:
        members: list[MemberInfo] = []
        group_type, state, protocol = "classic", "Dead", ""
        conn = await self.coordinator(group_id)
        if 69 in conn.versions:
            resp = await conn.send(ConsumerGroupDescribeRequest(group_ids=[group_id]))
            g = resp.groups[0]
            if g.error_code == 0:
                group_type, state, protocol = "consumer", g.group_state, g.assignor_name
                members = _described_members(g)
        if group_type == "classic" and 77 in conn.versions:
            resp = await conn.send(ShareGroupDescribeRequest(
                group_ids=[group_id], include_authorized_operations=False))
            g = resp.groups[0]
            if g.error_code == 0:
                group_type, state, protocol = "share", g.group_state, g.assignor_name
                members = _described_members(g)
        if group_type == "classic":
            resp = await conn.send(DescribeGroupsRequest(groups=[group_id]))
            g = resp.groups[0]
            _check(g.error_code, f"describe group {group_id}")
            state, protocol = g.group_state, g.protocol_data
            for m in g.members:
                assignment = {}
                if g.protocol_type == "consumer":
                    try:
                        assignment = decode_assignment(bytes(m.member_assignment))
                    except ValueError:  # DecodeError: a client's own (non-standard) encoding
                        assignment = {}
                members.append(MemberInfo(m.member_id, m.client_id, m.client_host, assignment))
        info = GroupInfo(group_id, state, group_type, protocol, members)
        if group_type == "share":
            committed = await self.share_start_offsets(group_id)
        else:
            committed = await self.committed(group_id)
        holders: dict[tuple[str, int], list[str]] = {}
        for m in members:
            for t, ps in m.assignment.items():
                for p in ps:
                    holders.setdefault((t, p), []).append(m.member_id)
        owners = {tp: ",".join(sorted(ms)) for tp, ms in holders.items()}
        topics = {t for t, _ in committed} | {t for t, _ in owners}
        for topic in sorted(topics):
            parts = sorted({p for t, p in committed if t == topic} |
                           {p for t, p in owners if t == topic})
            ends = await self.list_offsets(topic, parts, -1)
            for p in parts:
                info.partitions[(topic, p)] = (committed.get((topic, p), -1), ends.get(p, -1),
                                               owners.get((topic, p)))
        return info

    async def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        async def op(conn):
            resp = await conn.send(OffsetFetchRequest(group_id=group_id, topics=None),
                                   version=min(7, conn.version_for(9)))
            _check(resp.error_code, f"fetch offsets of {group_id}")
            return {(t.name, p.partition_index): p.committed_offset
                    for t in resp.topics for p in t.partitions if p.committed_offset >= 0}

        return await self.at_coordinator(group_id, op)

    async def share_start_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """Share-partition start offsets of a share group (empty if the broker lacks
        DescribeShareGroupOffsets)."""
        conn = await self.coordinator(group_id)
        if 90 not in conn.versions:
            return {}
        resp = await conn.send(DescribeShareGroupOffsetsRequest(groups=[
            DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=None)]))
        out = {}
        for g in resp.groups:
            if g.error_code:  # no share-partition state yet: members are still worth showing
                continue
            for t in g.topics:
                for p in t.partitions:
                    if p.error_code == 0 and p.start_offset >= 0:
                        out[(t.topic_name, p.partition_index)] = p.start_offset
        return out

    async def delete_groups(self, group_ids: list[str]) -> None:
        for gid in group_ids:  # each at its own coordinator
            resp = await (await self.coordinator(gid)).send(DeleteGroupsRequest(
                groups_names=[gid]))
            for r in resp.results:
                _check(r.error_code, f"delete group {r.group_id}")

    async def commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit ``offsets`` for ``group_id`` outside any generation (generation -1, no member
        id), as Kafka's tools and an ``assign()``-mode consumer do: Kafka accepts it while the
        group has no members, creating an empty classic group if there is none."""
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(OffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_metadata=""))
        req = OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=-1,
                                  member_id="", topics=[OffsetCommitRequestTopic(
                                      name=t, partitions=ps) for t, ps in by_topic.items()])

        async def op(conn):
            resp = await conn.send(req, version=min(9, conn.version_for(8)))
            for t in resp.topics:
                for pr in t.partitions:
                    _check(pr.error_code, f"commit offset of group {group_id} for "
                                          f"{t.name}-{pr.partition_index}")

        await self.at_coordinator(group_id, op)

    async def reset_offsets(self, group_id: str, topic: str, partitions: list[int] | None,
                            how: str, value: int | None, execute: bool
                            ) -> list[tuple[str, int, int, int]]:
        """Plan (and with ``execute`` apply) new offsets. Returns (topic, partition, current,
        new) rows. Like Kafka's tools, refuses while the group has active members. A consumer
        group's committed offsets are committed (OffsetCommit); a share group's start offsets
        are altered (AlterShareGroupOffsets: its in-flight state for the partition is dropped)."""
        info = await self.describe(group_id)
        if info.members:
            raise AdminError(f"group {group_id} has {len(info.members)} active member(s): "
                             "stop its consumers first (state " + info.state + ")")
        if partitions is None:
            partitions = list(range(await self._partition_count(topic)))
        earliest = await self.list_offsets(topic, partitions, -2)
        latest = await self.list_offsets(topic, partitions, -1)
        share = info.group_type == "share"
        current = (await self.share_start_offsets(group_id) if share
                   else await self.committed(group_id))
        rows = []
        if how in ("offset", "shift", "datetime") and value is None:
            raise ValueError(f"reset by {how} needs a value")
        for p in partitions:
            cur = current.get((topic, p), -1)
            if how == "earliest":
                new = earliest[p]
            elif how == "latest":
                new = latest[p]
            elif how == "offset":
                assert value is not None  # checked above
                new = value
            elif how == "shift":
                assert value is not None
                new = (cur if cur >= 0 else latest[p]) + value
            elif how == "datetime":
                assert value is not None
                found = await self.list_offsets(topic, [p], value)
                new = found[p] if found[p] >= 0 else latest[p]
            else:
                raise AdminError(f"unknown reset mode {how}")
            new = max(earliest[p], min(latest[p], new))  # clamp like Kafka's tool
            rows.append((topic, p, cur, new))
        if execute:
            plan = {(t, p): new for t, p, _, new in rows}
            if share:
                for (t, p), code in (await self.alter_share_group_offsets(group_id,
                                                                          plan)).items():
                    _check(code, f"reset share-group offset of {t}-{p}")
            else:
                await self.commit_offsets(group_id, plan)
        return rows


__all__ = ["GroupsAdmin", "GroupInfo", "MemberInfo", "decode_assignment", "ErrorCode"]
