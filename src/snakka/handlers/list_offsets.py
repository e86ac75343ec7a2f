"""ListOffsets (2): earliest, latest, by timestamp, max timestamp, earliest local, tiered markers.

Special timestamps (Kafka's ListOffsetsRequest constants): -2 earliest (log start offset),
-1 latest (high watermark, or the last stable offset for read_committed), -3 the record with the
largest timestamp (v7+), -4 earliest local (v8+; the first offset on this disk: above the log start offset once tiered
storage has deleted local segments), -5 latest tiered (v9+: the last offset in remote storage,
-1 before the first copy) and -6 earliest pending upload (v11+: the first offset not yet in
remote storage); both answer offset -1 for a topic without remote storage, as Kafka does. A non-negative timestamp finds the
earliest offset whose timestamp is >= it, or offset -1 if there is none.
v0 (older clients) answers with ``old_style_offsets``.

Tiered storage (KIP-405): a timestamp whose records lie in remote segments is looked up in
their time and offset indexes and bytes, fetched off the event loop. As Kafka's
DelayedRemoteListOffsets, the handler then answers later: it waits for those partitions (the
request's TimeoutMs when positive (v10+), else ``remote.list.offsets.request.timeout.ms``,
default 30 s), looks them up again, and answers REQUEST_TIMED_OUT for any partition still
waiting at the deadline; a failed remote read is KAFKA_STORAGE_ERROR for its partition.

Authorization: DESCRIBE on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.list_offsets_response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from snakka.remote.reader import RemoteReadError
from snakka.security.authorizer import AclOperation, ResourceType
from snakka.storage import RemoteFetchPending, RemoteLogUnavailableError

if TYPE_CHECKING:
    from snakka.protocol.messages.list_offsets_request import ListOffsetsRequest

API = ApiDeclaration(ApiKey.LIST_OFFSETS)

EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = (
    -2, -1, -3, -4, -5, -6)
# The lowest request version that may use each special timestamp.
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}


def _lookup(services, topic, p, v: int, read_committed: bool):
    replicas = services.replicas
    pl, err = replicas.lookup(topic, p.partition_index)
    if pl is None:
        return err, -1, -1
    err = replicas.check_leader_epoch(p.current_leader_epoch)
    if err:
        return err, -1, -1
    ts = p.timestamp
    if ts < 0 and v < _MIN_VERSION.get(ts, 0):
        return ErrorCode.UNSUPPORTED_VERSION, -1, -1
    if ts == EARLIEST:
        return ErrorCode.NONE, -1, pl.log_start_offset
    if ts == EARLIEST_LOCAL:
        return ErrorCode.NONE, -1, pl.local_log_start_offset
    if ts == LATEST:
        return ErrorCode.NONE, -1, pl.last_stable_offset if read_committed else pl.high_watermark
    if ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        if not pl.config.remote_storage_enable:
            return ErrorCode.NONE, -1, -1  # Kafka: -1 for a topic without remote storage
        hi = pl.highest_offset_in_remote_storage
        if ts == LATEST_TIERED:
            return ErrorCode.NONE, -1, hi
        # The first offset not yet in remote storage (none pending: the log end).
        return ErrorCode.NONE, -1, max(hi + 1, pl.log_start_offset)
    if ts == MAX_TIMESTAMP:
        found = pl.max_timestamp_offset()
        return (ErrorCode.NONE, -1, -1) if found is None else (ErrorCode.NONE, found[1], found[0])
    if ts < 0:
        return ErrorCode.INVALID_REQUEST, -1, -1
    try:
        found = pl.offset_for_timestamp(ts)  # may need remote segments (tiered storage)
    except RemoteReadError:  # the remote reader logged it
        return ErrorCode.KAFKA_STORAGE_ERROR, -1, -1
    except RemoteLogUnavailableError:  # tiered, its remote part not attached yet
        return ErrorCode.REPLICA_NOT_AVAILABLE, -1, -1
    if found is None:
        return ErrorCode.NONE, -1, -1
    return ErrorCode.NONE, found[1], found[0]


def _answer(services, t, p, v: int, read_committed: bool) -> ListOffsetsPartitionResponse:
    """One partition's answer; raises RemoteFetchPending when remote data must be read."""
    err, ts, off = _lookup(services, t.name, p, v, read_committed)
    return _response(services, t, p, v, err, ts, off)


def _response(services, t, p, v: int, err: int, ts: int, off: int
              ) -> ListOffsetsPartitionResponse:
    r = ListOffsetsPartitionResponse(
        partition_index=p.partition_index, error_code=err, timestamp=ts, offset=off,
        # Kafka reports no epoch (-1) when no offset was found (a timestamp past the end)
        leader_epoch=services.replicas.leader_epoch(t.name, p.partition_index)
        if err == ErrorCode.NONE and off >= 0 else -1)
    if v == 0:
        r.old_style_offsets = [off] if err == ErrorCode.NONE and off >= 0 else []
    return r


def _denied(p, v: int) -> ListOffsetsPartitionResponse:
    r = ListOffsetsPartitionResponse(
        partition_index=p.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        timestamp=-1, offset=-1, leader_epoch=-1)
    if v == 0:
        r.old_style_offsets = []
    return r


def handle(ctx: RequestContext, req: ListOffsetsRequest):
    services = ctx.services
    v = ctx.api_version
    read_committed = v >= 2 and req.isolation_level == 1
    topics = []
    waiting = []  # (topic, partition request, its slot in parts, the pending awaitable)
    denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, [t.name for t in req.topics])
    for t in req.topics:
        parts: list[ListOffsetsPartitionResponse | None] = []
        for p in t.partitions:
            if denied and t.name in denied:
                parts.append(_denied(p, v))
                continue
            try:
                parts.append(_answer(services, t, p, v, read_committed))
            except RemoteFetchPending as e:
                waiting.append((t, p, parts, len(parts), e.ready))
                parts.append(None)
        topics.append(ListOffsetsTopicResponse(name=t.name, partitions=parts))
    if waiting:
        timeout_ms = req.timeout_ms if v >= 10 and req.timeout_ms > 0 else None
        return _remote_lookups(services, topics, waiting, v, read_committed, timeout_ms)
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


async def _remote_lookups(services, topics, waiting, v: int, read_committed: bool,
                          timeout_ms: int | None) -> ListOffsetsResponse:
    """Kafka's DelayedRemoteListOffsets: wait for the partitions whose answer needs remote
    data and look them up again (a lookup may need several remote reads) until all are
    answered or the deadline passes (REQUEST_TIMED_OUT for those left)."""
    if timeout_ms is None:
        timeout_ms = services.resolver.broker_int("remote.list.offsets.request.timeout.ms")
    deadline = services.time_ms() + timeout_ms
    while waiting:
        remaining = deadline - services.time_ms()
        if remaining <= 0:
            break
        await asyncio.wait([asyncio.ensure_future(w[4]) for w in waiting],
                           timeout=remaining / 1000, return_when=asyncio.FIRST_COMPLETED)
        still = []
        for t, p, parts, i, ready in waiting:
            if not ready.done():
                still.append((t, p, parts, i, ready))
                continue
            try:
                parts[i] = _answer(services, t, p, v, read_committed)
            except RemoteFetchPending as e:
                still.append((t, p, parts, i, e.ready))
        waiting = still
    for t, p, parts, i, _ready in waiting:
        parts[i] = _response(services, t, p, v, ErrorCode.REQUEST_TIMED_OUT, -1, -1)
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
