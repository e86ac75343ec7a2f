"""What the console shows and does, as plain data (dicts and lists, JSON-ready): the pages
(console/pages.py) render it, the ``/api/...`` endpoints return it as it is.

Where each piece comes from:

- topics, partitions, offsets, sizes, segments, tiering: the partition logs in memory (no
  request round trip), filtered to the topics the user may DESCRIBE (one authorizer call);
- topic configs: DescribeConfigs, groups: ListGroups, DescribeGroups, ConsumerGroupDescribe,
  ShareGroupDescribe, committed offsets: OffsetFetch, share-group start offsets:
  DescribeShareGroupOffsets (console/kafka.py calls the broker's own handlers, so each answer is
  authorized and shaped exactly as for a Kafka client);
- messages: Fetch (READ on the topic), a timestamp resolved with ListOffsets;
- share-partitions' in-flight records (state, delivery count, owner): the share-partition
  manager's loaded partitions (no Kafka API exposes them), after DESCRIBE on the group;
- throughput: the request counters of server/metrics.py, sampled (console/throughput.py).

Actions (produce a test message, reset a consumer or share group's offsets, delete records)
are Produce, OffsetCommit, AlterShareGroupOffsets and DeleteRecords requests; their error
codes come back as :class:`ActionResult` for the page to show.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from snakka import __version__
from snakka.console.kafka import LocalKafka
from snakka.protocol.api_keys import ApiKey
from snakka.protocol.consumer_protocol import decode_assignment
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from snakka.protocol.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest
from snakka.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from snakka.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.list_groups_request import ListGroupsRequest
from snakka.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from snakka.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from snakka.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
)
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.protocol.messages.share_group_describe_request import ShareGroupDescribeRequest
from snakka.records.record import Record, build_batch, iter_records
from snakka.security.authorizer import AclOperation, ResourceType
from snakka.security.principal import KafkaPrincipal
from snakka.share.types import RecordState
from snakka.util.murmur2 import murmur2_partition

if TYPE_CHECKING:
    from snakka.console.throughput import ThroughputHistory
    from snakka.handlers.services import Services
    from snakka.storage.unified_log import UnifiedLog

__all__ = ["ActionResult", "ConsoleData", "Viewer", "decode_bytes"]

# Messages shown per page of the browser (the ``limit`` parameter's default and ceiling).
CONSOLE_MESSAGES_DEFAULT = 50
CONSOLE_MESSAGES_MAX = 500
# Bytes one browser page may read from a partition (several Fetch calls of this many at most).
CONSOLE_FETCH_MAX_BYTES = 4 * 1024 * 1024
# A key, value or header value longer than this is cut in the page (the JSON API too).
CONSOLE_VALUE_PREVIEW_BYTES = 64 * 1024
# In-flight state runs listed per share-partition (the counts above them are always whole).
CONSOLE_SHARE_RUNS_MAX = 200

_EARLIEST, _LATEST = -2, -1
_GROUP_TYPES = ("classic", "consumer", "share")


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who asks: the console user's principal and their browser's address (ACL host)."""

    principal: KafkaPrincipal
    host: str


@dataclass(frozen=True, slots=True)
class ActionResult:
    ok: bool
    message: str
    error: str | None = None  # the Kafka error code's name when the broker refused


def decode_bytes(data: bytes | None) -> dict[str, Any] | None:
    """A key, value or header value for display: text (and pretty JSON when it parses), or
    base64 when it is not UTF-8; ``truncated`` past :data:`CONSOLE_VALUE_PREVIEW_BYTES`."""
    if data is None:
        return None
    size = len(data)
    cut = data[:CONSOLE_VALUE_PREVIEW_BYTES]
    out: dict[str, Any] = {"size": size, "truncated": size > len(cut)}
    try:
        text = cut.decode("utf-8")
    except UnicodeDecodeError:
        out["encoding"] = "base64"
        out["text"] = base64.b64encode(cut).decode()
        return out
    out["encoding"] = "utf-8"
    out["text"] = text
    if not out["truncated"] and text[:1] in ("{", "["):
        try:
            out["json"] = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return out


def _err_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ConsoleData:
    """Reads the broker's state and calls its handlers for one console."""

    def __init__(self, services: Services, kafka: LocalKafka, *,
                 connections: Callable[[], int], listeners: list[dict[str, Any]],
                 throughput: ThroughputHistory | None, read_only: bool,
                 started_ms: int) -> None:
        self.services = services
        self.kafka = kafka
        self._connections = connections
        self.listeners = listeners
        self.throughput = throughput
        self.read_only = read_only
        self.started_ms = started_ms

    # -- helpers -------------------------------------------------------------------------
    async def _call(self, viewer: Viewer, api: ApiKey, version: int, request: Any) -> Any:
        v = self.kafka.version(int(api), version)
        return await self.kafka.call(int(api), v, request, viewer.principal, viewer.host)

    def visible_topics(self, viewer: Viewer, names: Iterable[str]) -> list[str]:
        """The names among ``names`` the viewer may DESCRIBE (not audit-logged: a listing
        filters, as Kafka's Metadata does)."""
        names = sorted(names)
        ctx = self.kafka.context(int(ApiKey.METADATA), 0, viewer.principal, viewer.host)
        denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, names,
                            log_if_denied=False)
        return [n for n in names if n not in denied]

    def allowed(self, viewer: Viewer, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        ctx = self.kafka.context(int(ApiKey.METADATA), 0, viewer.principal, viewer.host)
        return ctx.is_allowed(op, rtype, name, log_if_denied=False)

    def _logs(self, topic: str, partitions: int) -> list[UnifiedLog | None]:
        get = self.services.replicas.get_log
        return [get(topic, p) for p in range(partitions)]

    # -- overview ------------------------------------------------------------------------
    async def overview(self, viewer: Viewer) -> dict[str, Any]:
        md = self.services.metadata
        names = self.visible_topics(viewer, md.topics)
        partitions = size = messages = 0
        for n in names:
            for pl in self._logs(n, md.topics[n].partitions):
                if pl is not None:
                    partitions += 1
                    size += pl.size_bytes
                    messages += max(0, pl.high_watermark - pl.log_start_offset)
        groups = await self.groups(viewer)
        by_type = {t: sum(1 for g in groups["groups"] if g["type"] == t) for t in _GROUP_TYPES}
        now = self.services.time_ms()
        return {
            "cluster_id": md.cluster_id,
            "node_id": self.services.node_id,
            "version": __version__,
            "uptime_ms": max(0, now - self.started_ms),
            "listeners": self.listeners,
            "connections": self._connections(),
            "topics": len(names),
            "internal_topics": sum(1 for n in names if md.topics[n].is_internal),
            "partitions": partitions,
            "size_bytes": size,
            "messages": messages,
            "groups": by_type,
            "tiered_storage": self.services.remote is not None,
            "read_only": self.read_only,
            "principal": str(viewer.principal),
            "throughput": self.throughput.latest() if self.throughput is not None else None,
        }

    # -- topics --------------------------------------------------------------------------
    async def topics(self, viewer: Viewer) -> dict[str, Any]:
        md = self.services.metadata
        rates = self.throughput.topic_rates() if self.throughput is not None else {}
        out = []
        for name in self.visible_topics(viewer, md.topics):
            ti = md.topics[name]
            logs = [pl for pl in self._logs(name, ti.partitions) if pl is not None]
            cfg = logs[0].config if logs else None
            out.append({
                "name": name,
                "topic_id": str(ti.topic_id),
                "internal": ti.is_internal,
                "partitions": ti.partitions,
                "size_bytes": sum(pl.size_bytes for pl in logs),
                "messages": sum(max(0, pl.high_watermark - pl.log_start_offset) for pl in logs),
                "cleanup_policy": ",".join(cfg.cleanup_policy) if cfg else None,
                "retention_ms": cfg.retention_ms if cfg else None,
                "retention_bytes": cfg.retention_bytes if cfg else None,
                "remote_storage": bool(cfg and cfg.remote_storage_enable),
                "messages_in_per_sec": rates.get(name, {}).get("messages_in", 0.0),
                "bytes_in_per_sec": rates.get(name, {}).get("bytes_in", 0.0),
            })
        return {"topics": out}

    async def topic(self, viewer: Viewer, name: str) -> dict[str, Any] | None:
        """One topic: partitions (offsets, sizes, segments, local/remote), configs (with their
        sources); None when it does not exist or the viewer may not DESCRIBE it."""
        md = self.services.metadata
        ti = md.topics.get(name)
        if ti is None or not self.visible_topics(viewer, [name]):
            return None
        parts = []
        for p, pl in enumerate(self._logs(name, ti.partitions)):
            if pl is None:
                parts.append({"partition": p, "online": False})
                continue
            segs = pl.segments
            parts.append({
                "partition": p,
                "online": True,
                "leader": self.services.node_id,
                "leader_epoch": self.services.replicas.leader_epoch(name, p),
                "log_start_offset": pl.log_start_offset,
                "local_log_start_offset": pl.local_log_start_offset,
                "high_watermark": pl.high_watermark,
                "last_stable_offset": pl.last_stable_offset,
                "log_end_offset": pl.log_end_offset,
                "messages": max(0, pl.high_watermark - pl.log_start_offset),
                "size_bytes": pl.size_bytes,
                "segments": len(segs),
                "remote": pl.log_start_offset < pl.local_log_start_offset,
            })
        resp = await self._call(viewer, ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(
            resources=[DescribeConfigsResource(resource_type=2, resource_name=name,
                                               configuration_keys=None)],
            include_synonyms=False, include_documentation=False))
        configs: list[dict[str, Any]] = []
        config_error = None
        for r in resp.results:
            if r.error_code:
                config_error = _err_name(r.error_code)
            for c in sorted(r.configs, key=lambda c: c.name):
                configs.append({"name": c.name, "value": None if c.is_sensitive else c.value,
                                "source": _CONFIG_SOURCES.get(c.config_source, "UNKNOWN"),
                                "default": c.config_source == 5, "sensitive": c.is_sensitive,
                                "read_only": c.read_only})
        return {"name": name, "topic_id": str(ti.topic_id), "internal": ti.is_internal,
                "partitions": parts, "configs": configs, "config_error": config_error,
                "tiered_storage": self.services.remote is not None,
                "can_write": self.allowed(viewer, AclOperation.WRITE, ResourceType.TOPIC, name),
                "can_delete": self.allowed(viewer, AclOperation.DELETE, ResourceType.TOPIC,
                                           name)}

    # -- messages ------------------------------------------------------------------------
    async def messages(self, viewer: Viewer, topic: str, partition: int, *,
                       offset: int | None = None, timestamp_ms: int | None = None,
                       limit: int = CONSOLE_MESSAGES_DEFAULT, newest: bool = False
                       ) -> dict[str, Any]:
        """Records of one partition from ``offset`` (or the first at/after ``timestamp_ms``,
        or the last ``limit`` when ``newest``, else the oldest), at most ``limit``."""
        limit = max(1, min(limit, CONSOLE_MESSAGES_MAX))
        out: dict[str, Any] = {"topic": topic, "partition": partition, "messages": [],
                               "error": None, "limit": limit}
        if timestamp_ms is not None:
            found, err = await self._list_offset(viewer, topic, partition, timestamp_ms)
            if err:
                out["error"] = err
                return out
            if found < 0:  # nothing at or after the timestamp
                found, err = await self._list_offset(viewer, topic, partition, _LATEST)
                if err:
                    out["error"] = err
                    return out
            offset = found
        pl = self.services.replicas.get_log(topic, partition)
        if offset is None:
            if pl is None:
                offset = 0
            elif newest:
                offset = max(pl.log_start_offset, pl.high_watermark - limit)
            else:
                offset = pl.log_start_offset
        out["start_offset"] = offset
        records: list[Record] = []
        position = offset
        read = 0
        while len(records) < limit and read < CONSOLE_FETCH_MAX_BYTES:
            resp = await self._call(viewer, ApiKey.FETCH, 12, FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=CONSOLE_FETCH_MAX_BYTES,
                isolation_level=0, session_id=0, session_epoch=-1, topics=[FetchTopic(
                    topic=topic, partitions=[FetchPartition(
                        partition=partition, current_leader_epoch=-1, fetch_offset=position,
                        log_start_offset=-1, partition_max_bytes=CONSOLE_FETCH_MAX_BYTES)])],
                forgotten_topics_data=[], rack_id=""))
            if resp.error_code:
                out["error"] = _err_name(resp.error_code)
                break
            pd = resp.responses[0].partitions[0] if resp.responses else None
            if pd is None:
                break
            if pd.error_code:
                out["error"] = _err_name(pd.error_code)
                break
            out["high_watermark"] = pd.high_watermark
            out["log_start_offset"] = pd.log_start_offset
            data = bytes(pd.records or b"")
            if not data:
                break
            read += len(data)
            last = position - 1
            for rec in iter_records(data):
                last = max(last, rec.offset)
                if rec.offset >= position and len(records) < limit:
                    records.append(rec)
            if last < position:
                break
            position = last + 1
        out["messages"] = [{
            "offset": r.offset, "timestamp": r.timestamp,
            "key": decode_bytes(r.key), "value": decode_bytes(r.value),
            "headers": [{"key": k, "value": decode_bytes(v)} for k, v in r.headers],
        } for r in records]
        out["next_offset"] = records[-1].offset + 1 if records else position
        return out

    async def _list_offset(self, viewer: Viewer, topic: str, partition: int,
                           timestamp: int) -> tuple[int, str | None]:
        resp = await self._call(viewer, ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(
            replica_id=-1, isolation_level=0, topics=[ListOffsetsTopic(
                name=topic, partitions=[ListOffsetsPartition(
                    partition_index=partition, current_leader_epoch=-1,
                    timestamp=timestamp)])]))
        p = resp.topics[0].partitions[0]
        if p.error_code:
            return -1, _err_name(p.error_code)
        return p.offset, None

    # -- groups --------------------------------------------------------------------------
    async def groups(self, viewer: Viewer) -> dict[str, Any]:
        resp = await self._call(viewer, ApiKey.LIST_GROUPS, 5, ListGroupsRequest(
            states_filter=[], types_filter=[]))
        groups = [{"group_id": g.group_id, "type": (g.group_type or "classic").lower(),
                   "state": g.group_state, "protocol_type": g.protocol_type}
                  for g in resp.groups]
        groups.sort(key=lambda g: (g["type"], g["group_id"]))
        return {"groups": groups, "error": _err_name(resp.error_code) if resp.error_code
                else None}

    async def group(self, viewer: Viewer, group_id: str) -> dict[str, Any] | None:
        """A consumer (classic or KIP-848) group: state, members and their assignments,
        committed offsets and lag; None when it does not exist or may not be described."""
        gtype = self.services.groups.group_type(group_id)
        if gtype is None or gtype == "share":
            return None
        members: list[dict[str, Any]] = []
        if gtype == "consumer":
            resp = await self._call(viewer, ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                                    ConsumerGroupDescribeRequest(group_ids=[group_id]))
            g = resp.groups[0]
            if g.error_code:
                return None
            state = g.group_state
            extra = {"group_epoch": g.group_epoch, "assignor": g.assignor_name}
            for m in g.members:
                members.append({
                    "member_id": m.member_id, "instance_id": m.instance_id,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "member_epoch": m.member_epoch,
                    "subscribed_topics": list(m.subscribed_topic_names or []),
                    "assignment": {tp.topic_name: sorted(tp.partitions)
                                   for tp in m.assignment.topic_partitions}})
        else:
            resp = await self._call(viewer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(
                groups=[group_id]))
            g = resp.groups[0]
            if g.error_code:
                return None
            state = g.group_state
            extra = {"protocol_type": g.protocol_type, "protocol": g.protocol_data}
            for m in g.members:
                assignment: dict[str, list[int]] = {}
                if g.protocol_type == "consumer" and m.member_assignment:
                    try:
                        a = decode_assignment(bytes(m.member_assignment))
                        assignment = {tp.topic: sorted(tp.partitions)
                                      for tp in a.assigned_partitions}
                    except Exception:  # noqa: BLE001 - a client's bytes: show none
                        assignment = {}
                members.append({
                    "member_id": m.member_id, "instance_id": m.group_instance_id,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "assignment": assignment})
        owner = {(t, p): m["member_id"] for m in members
                 for t, ps in m["assignment"].items() for p in ps}
        offsets = await self._committed(viewer, group_id)
        rows = []
        for (topic, partition), committed in sorted(offsets.items()):
            pl = self.services.replicas.get_log(topic, partition)
            hw = pl.high_watermark if pl is not None else None
            rows.append({"topic": topic, "partition": partition, "committed_offset": committed,
                         "high_watermark": hw,
                         "lag": max(0, hw - committed) if hw is not None and committed >= 0
                         else None,
                         "member_id": owner.get((topic, partition))})
        for (topic, partition), member in sorted(owner.items()):
            if (topic, partition) not in offsets:
                pl = self.services.replicas.get_log(topic, partition)
                rows.append({"topic": topic, "partition": partition, "committed_offset": None,
                             "high_watermark": pl.high_watermark if pl is not None else None,
                             "lag": None, "member_id": member})
        rows.sort(key=lambda r: (r["topic"], r["partition"]))
        return {"group_id": group_id, "type": gtype, "state": state, **extra,
                "members": members, "offsets": rows,
                "total_lag": sum(r["lag"] or 0 for r in rows),
                "can_reset": (not members and self.allowed(
                    viewer, AclOperation.READ, ResourceType.GROUP, group_id))}

    async def _committed(self, viewer: Viewer, group_id: str) -> dict[tuple[str, int], int]:
        resp = await self._call(viewer, ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest(
            groups=[OffsetFetchRequestGroup(group_id=group_id, topics=None)],
            require_stable=False))
        out: dict[tuple[str, int], int] = {}
        for g in resp.groups:
            for t in g.topics:
                for p in t.partitions:
                    if not p.error_code and p.committed_offset >= 0:
                        out[(t.name, p.partition_index)] = p.committed_offset
        return out

    async def share_group(self, viewer: Viewer, group_id: str) -> dict[str, Any] | None:
        """A share group: members and assignments, and per share-partition SPSO, SPEO, lag
        and the in-flight records by state and delivery count."""
        if self.services.groups.group_type(group_id) != "share":
            return None
        resp = await self._call(viewer, ApiKey.SHARE_GROUP_DESCRIBE, 0,
                                ShareGroupDescribeRequest(group_ids=[group_id]))
        g = resp.groups[0]
        if g.error_code:
            return None
        members = [{"member_id": m.member_id, "client_id": m.client_id,
                    "client_host": m.client_host, "member_epoch": m.member_epoch,
                    "subscribed_topics": list(m.subscribed_topic_names or []),
                    "assignment": {tp.topic_name: sorted(tp.partitions)
                                   for tp in m.assignment.topic_partitions}}
                   for m in g.members]
        shares = self.services.shares
        visible = set(self.visible_topics(
            viewer, {shares.topic_name(k[1]) or "" for k, _ in shares.loaded_partitions()
                     if k[0] == group_id} - {""}))
        partitions = []
        for (gid, topic_id, partition), sp in shares.loaded_partitions():
            if gid != group_id:
                continue
            topic = shares.topic_name(topic_id)
            if topic is None or topic not in visible:
                continue
            pl = self.services.replicas.get_log(topic, partition)
            hw = pl.high_watermark if pl is not None else 0
            counts = sp.in_flight_counts()
            runs = sp.runs_snapshot()
            by_delivery: dict[str, dict[int, int]] = {}
            for first, last, st, count, _member in runs:
                per = by_delivery.setdefault(RecordState(st).name.lower(), {})
                per[count] = per.get(count, 0) + last - first + 1
            partitions.append({
                "topic": topic, "partition": partition,
                "start_offset": sp.start_offset, "end_offset": sp.end_offset,
                "high_watermark": hw, "lag": sp.lag(hw), "state_epoch": sp.state_epoch,
                "in_flight": {s.name.lower(): counts.get(s, 0) for s in RecordState},
                "by_delivery_count": {s: {str(k): v for k, v in sorted(d.items())}
                                      for s, d in by_delivery.items()},
                "runs": [{"first_offset": f, "last_offset": la,
                          "state": RecordState(st).name.lower(), "delivery_count": c,
                          "member_id": mem}
                         for f, la, st, c, mem in runs[:CONSOLE_SHARE_RUNS_MAX]],
                "runs_truncated": len(runs) > CONSOLE_SHARE_RUNS_MAX,
            })
        partitions.sort(key=lambda r: (r["topic"], r["partition"]))
        return {"group_id": group_id, "type": "share", "state": g.group_state,
                "group_epoch": g.group_epoch, "assignor": g.assignor_name,
                "members": members, "partitions": partitions,
                "can_reset": (not members and self.allowed(
                    viewer, AclOperation.READ, ResourceType.GROUP, group_id))}

    # -- actions -------------------------------------------------------------------------
    async def produce(self, viewer: Viewer, topic: str, partition: int | None,
                      key: bytes | None, value: bytes | None,
                      headers: list[tuple[str, bytes | None]]) -> ActionResult:
        """One record, acks=all, as a producer with Kafka's default partitioner for a keyed
        record (murmur2) and partition 0's neighbours in turn for an unkeyed one."""
        ti = self.services.metadata.topics.get(topic)
        if ti is None:
            return ActionResult(False, "no such topic", "UNKNOWN_TOPIC_OR_PARTITION")
        if partition is None:
            if key is not None:
                partition = murmur2_partition(key, ti.partitions)
            else:
                partition = int(time.monotonic_ns() // 1000) % ti.partitions
        batch = build_batch([Record(timestamp=self.services.time_ms(), key=key, value=value,
                                    headers=headers)])
        resp = await self._call(viewer, ApiKey.PRODUCE, 9, ProduceRequest(
            transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=partition,
                                                                 records=batch)])]))
        pr = resp.responses[0].partition_responses[0]
        if pr.error_code:
            return ActionResult(False, pr.error_message or _err_name(pr.error_code),
                                _err_name(pr.error_code))
        return ActionResult(True, f"produced to partition {partition} at offset "
                                  f"{pr.base_offset}")

    async def _targets(self, viewer: Viewer, partitions: list[tuple[str, int]], strategy: str,
                       value: int | None) -> tuple[dict[tuple[str, int], int], str | None]:
        """Target offsets of a reset (kafka-consumer-groups.sh --reset-offsets' strategies:
        to-earliest, to-latest, to-offset, to-datetime as epoch milliseconds)."""
        out: dict[tuple[str, int], int] = {}
        for topic, partition in partitions:
            if strategy == "to-offset":
                assert value is not None
                pl = self.services.replicas.get_log(topic, partition)
                if pl is None:
                    return {}, "UNKNOWN_TOPIC_OR_PARTITION"
                # As the Kafka tool: clamp into [log start, log end].
                out[(topic, partition)] = max(pl.log_start_offset,
                                              min(value, pl.high_watermark))
                continue
            ts = {"to-earliest": _EARLIEST, "to-latest": _LATEST}.get(strategy, value)
            assert ts is not None
            off, err = await self._list_offset(viewer, topic, partition, ts)
            if err:
                return {}, err
            if off < 0:
                off, err = await self._list_offset(viewer, topic, partition, _LATEST)
                if err:
                    return {}, err
            out[(topic, partition)] = off
        return out, None

    async def reset_group(self, viewer: Viewer, group_id: str, topic: str | None,
                          strategy: str, value: int | None) -> ActionResult:
        """Reset an empty consumer group's committed offsets (all its committed partitions, or
        all partitions of ``topic``) with OffsetCommit, as kafka-consumer-groups.sh does."""
        info = await self.group(viewer, group_id)
        if info is None:
            return ActionResult(False, "no such group", "GROUP_ID_NOT_FOUND")
        if info["members"]:
            return ActionResult(False, "the group has active members: stop its consumers "
                                "first (Kafka resets only an empty group)", "NON_EMPTY_GROUP")
        md = self.services.metadata
        if topic:
            ti = md.topics.get(topic)
            if ti is None:
                return ActionResult(False, "no such topic", "UNKNOWN_TOPIC_OR_PARTITION")
            parts = [(topic, p) for p in range(ti.partitions)]
        else:
            parts = sorted({(r["topic"], r["partition"]) for r in info["offsets"]})
        if not parts:
            return ActionResult(False, "the group has no committed offsets; name a topic",
                                "INVALID_REQUEST")
        targets, err = await self._targets(viewer, parts, strategy, value)
        if err:
            return ActionResult(False, f"cannot resolve the target offsets: {err}", err)
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (t, p), off in sorted(targets.items()):
            by_topic.setdefault(t, []).append(OffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_leader_epoch=-1,
                committed_metadata=""))
        resp = await self._call(viewer, ApiKey.OFFSET_COMMIT, 8, OffsetCommitRequest(
            group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=[OffsetCommitRequestTopic(name=t, partitions=ps)
                                            for t, ps in by_topic.items()]))
        errors = {p.error_code for t in resp.topics for p in t.partitions if p.error_code}
        if errors:
            names = ", ".join(sorted(_err_name(e) for e in errors))
            return ActionResult(False, f"offset commit refused: {names}", names)
        return ActionResult(True, f"reset {len(targets)} partition(s) {strategy}")

    async def reset_share_group(self, viewer: Viewer, group_id: str, topic: str,
                                strategy: str, value: int | None) -> ActionResult:
        """AlterShareGroupOffsets of every partition of ``topic`` (the group must be empty)."""
        ti = self.services.metadata.topics.get(topic)
        if ti is None:
            return ActionResult(False, "no such topic", "UNKNOWN_TOPIC_OR_PARTITION")
        targets, err = await self._targets(viewer, [(topic, p) for p in range(ti.partitions)],
                                           strategy, value)
        if err:
            return ActionResult(False, f"cannot resolve the target offsets: {err}", err)
        resp = await self._call(viewer, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0,
                                AlterShareGroupOffsetsRequest(group_id=group_id, topics=[
                                    AlterShareGroupOffsetsRequestTopic(
                                        topic_name=topic, partitions=[
                                            AlterShareGroupOffsetsRequestPartition(
                                                partition_index=p, start_offset=off)
                                            for (_t, p), off in sorted(targets.items())])]))
        if resp.error_code:
            return ActionResult(False, resp.error_message or _err_name(resp.error_code),
                                _err_name(resp.error_code))
        errors = {p.error_code for t in resp.responses for p in t.partitions if p.error_code}
        if errors:
            names = ", ".join(sorted(_err_name(e) for e in errors))
            return ActionResult(False, f"refused: {names}", names)
        return ActionResult(True, f"reset {len(targets)} share-partition(s) {strategy}")

    async def delete_records(self, viewer: Viewer, topic: str, partition: int,
                             before_offset: int) -> ActionResult:
        """DeleteRecords: move the partition's log start offset up to ``before_offset``
        (-1: the high watermark, i.e. everything)."""
        resp = await self._call(viewer, ApiKey.DELETE_RECORDS, 2, DeleteRecordsRequest(
            topics=[DeleteRecordsTopic(name=topic, partitions=[DeleteRecordsPartition(
                partition_index=partition, offset=before_offset)])], timeout_ms=30000))
        p = resp.topics[0].partitions[0]
        if p.error_code:
            return ActionResult(False, _err_name(p.error_code), _err_name(p.error_code))
        return ActionResult(True, f"partition {partition} now starts at offset "
                                  f"{p.low_watermark}")


# DescribeConfigs' ConfigSource ids (Kafka's DescribeConfigsResponse.ConfigSource).
_CONFIG_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                   3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG",
                   5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                   7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
