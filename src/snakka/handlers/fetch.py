"""Fetch (1): read record batches as they lie on disk; long-poll; incremental fetch sessions.

- Partitions are named (v < 13) or identified by topic id (v13+; unknown ids get UNKNOWN_TOPIC_ID).
- Data is returned as the stored bytes of whole batches starting at the batch that contains the
  fetch offset (clients skip records before their position). Bounds (KIP-74, as Kafka's
  ReplicaManager.readFromLog): the request's ``max_bytes`` (capped by the broker's
  ``fetch.max.bytes`` and ``snakka.fetch.response.target.bytes``) shrinks by what each
  partition returned, each partition reads at most
  ``min(partition_max_bytes, what is left)``, and the first partition with data returns at least
  one whole batch even if it is larger (so MaxBytes or PartitionMaxBytes 0 or 1 give the first
  whole batch). A negative size where there is data to read is UNKNOWN_SERVER_ERROR for that
  partition (Kafka's segment read refuses it); a negative request MaxBytes leaves 0 for the
  partitions after it. Kafka also returns the truncated bytes of the batch the limit ends in,
  which clients drop; snakka's log read stops at the last whole batch (same records).
- Long poll: if fewer than ``min_bytes`` are available, the handler waits up to ``max_wait_ms``
  and is woken by the first append to any fetched partition, then reads again.
- read_committed (isolation_level 1) reads only up to the last stable offset (decided with the
  high watermark and leader-epoch checks in the replica manager, ``ReplicaManager.read``);
  ``aborted_transactions`` lists (producer id, first offset) of the aborted transactions that
  overlap the returned batches (from the segments' ``.txnindex``, via the replica manager's
  read); an empty list when there are none, null under read_uncommitted, as Kafka sends it.
- Authorization (KafkaApis.handleFetchRequest): a consumer needs READ on each topic (else
  TOPIC_AUTHORIZATION_FAILED for its partitions, every time the session lists them); a follower
  fetch (replica id >= 0) needs CLUSTER_ACTION on the cluster. One authorizer call per request,
  none with the allow-all authorizer.
- Sessions (KIP-227) are resolved by fetch_sessions.FetchSessionCache; an incremental response
  lists only partitions with news, and a partition that returned records moves to the end of
  the session's order (Kafka's fairness: the next fetch reads the others first).
- Tiered storage (KIP-405): a partition whose fetch offset lies in remote segments not yet in
  memory reads nothing at first (its ReadResult carries a pending awaitable; the remote reader
  fetches off the event loop). As Kafka's DelayedRemoteFetch, the fetch then waits for those
  reads, at most ``remote.fetch.max.wait.ms`` (whatever the request's MaxWaitMs and MinBytes,
  as Kafka does), reads every partition once more and answers: the remote data if it came, the
  other partitions' data either way; a partition still pending is answered without records
  (the consumer fetches it again), a failed remote read with KAFKA_STORAGE_ERROR.
- MinBytes is lowered to the fetch's byte limit (Kafka's ``min(MinBytes, fetch max bytes)``);
  a fetch whose MinBytes reaches its limit counts its reads filled (``_fill_bytes``), so it is
  answered as soon as the limit is readable, as on Kafka.
- Client quotas (docs/quotas.md; KafkaApis.handleFetchRequest): a consumer fetch's handler time
  (``request_percentage``) and response size (``consumer_byte_rate``, the whole response as
  Kafka's FetchResponse.sizeOf, ``_response_size``) are recorded here, before the response is
  made; a fetch either throttles is answered empty with the throttle time (``_answer``,
  Kafka's throttled fetch response) and its bytes are taken back, so the consumer fetches the
  same offsets again once the throttle ends (the connection leaves Fetch out of its own
  request-quota recording). A consumer with a ``consumer_byte_rate`` never asks for more than
  a quota span's worth of its rate, and its reads are counted as Kafka's, filled to their
  byte limits (``_fill_bytes``): the same throttle times, the same answer to a MinBytes above
  the span (at once), the same whole batches per partition; only the whole batches are sent.
- Zero copy: on a plaintext listener (``ctx.connection.zero_copy``) a partition's record set of
  64 KiB or more is a ``FileRegion`` of the segment file, not bytes: the connection sends it
  with sendfile (server/connection.py), so a 50 MB response costs no memory. Elsewhere (TLS)
  records are read into memory and a response holds at most ``snakka.fetch.memory.max.bytes``
  of them (Kafka may always return less than MaxBytes; the first whole batch still comes).
- Memory: every read first reserves its bytes in the
  broker-wide ``queued.max.response.bytes`` budget (server/memory.py) and reads at most what it
  got (still the first whole batch); record sets sent from files count too (a conservative
  bound: they hold a descriptor, not memory). When the budget is spent and this connection has not yet
  taken its earlier bytes, the fetch waits for room up to ``max_wait_ms`` and then answers
  without records, as when nothing is available.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from snakka.fetch_sessions import CachedPartition
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.limits import INT32_MAX
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from snakka.replica.manager import _next_offset_after as next_offset_after
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.fetch_request import FetchRequest

# Fetch v0-3 expect message formats v0/v1, which snakka does not store and does not
# down-convert (Kafka 4.0 dropped them too).
API = ApiDeclaration(ApiKey.FETCH, min_version=4)

# Epoch errors refuse a partition before its log is read.
_FENCED = (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH)


# No topic key seen yet (_read_partitions).
_NO_TOPIC = object()


def _resolve_topic(services, key, by_id: bool):
    if by_id:
        ti = services.metadata.topics_by_id.get(key)
        return ti.name if ti else None
    return key if key in services.metadata.topics else None


def _read_partitions(services, entries, by_id: bool, denied: frozenset, max_bytes: int,
                     read_committed: bool, incremental: bool, min_one_batch: bool = True,
                     zero_copy: bool = False, fill: bool = False):
    """Read every partition once, without touching session state.

    Returns (rows, total bytes, any error, pending) where rows are (topic key, PartitionData,
    cached partition) for the partitions the response should list and pending the awaitables
    of partitions whose remote data is being fetched (answered without records for now).

    ``fill`` (a consumer held by a ``consumer_byte_rate``, or a MinBytes at or above the
    fetch's byte limit; see :func:`_fill_bytes`): a
    partition whose read stopped at its byte limit with more data behind it counts as its
    whole limit, in the total and in what is left for the partitions after it, as Kafka's
    read does (it fills the limit with the next batch cut short); only whole batches are sent.
    """
    replicas = services.replicas
    unknown = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    rows = []
    total = 0
    remaining = max_bytes  # Kafka's limitBytes: what the response may still hold
    any_error = False
    pending = []
    first_data = min_one_batch
    # Each topic resolved once per read, not once per partition (a consumer of one
    # 10,000-partition topic lists it 10,000 times; entries come grouped by topic).
    last_key: object = _NO_TOPIC
    name = None
    for (tkey, partition), cp in entries:
        limit = min(cp.max_bytes, remaining)
        if denied and tkey in denied:  # not READ-able: refused before any lookup
            read = replicas.read(None, partition, 0, 0,
                                 unknown=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        else:
            if tkey is not last_key and tkey != last_key:
                last_key, name = tkey, _resolve_topic(services, tkey, by_id)
            read = replicas.read(name, partition,
                                 cp.fetch_offset, limit,
                                 current_leader_epoch=cp.current_leader_epoch,
                                 read_committed=read_committed, min_one_message=first_data,
                                 unknown=unknown, zero_copy=zero_copy)
        err = read.error_code
        records = read.records
        if read.pending is not None:
            pending.append(read.pending)
        n = len(records)
        if fill and err == ErrorCode.NONE:
            n_kafka = _fill_bytes(read, n, limit, cp.fetch_offset, read_committed)
        else:
            n_kafka = n
        if read.found and err not in _FENCED and (limit != 0 or first_data):
            # A read happened (even one that failed): what is left shrinks by what it returned,
            # and a negative request MaxBytes leaves 0 for the partitions after it.
            remaining = max(0, remaining - n_kafka)
        if n:
            first_data = False
        total += n_kafka
        hw, lso, log_start = read.high_watermark, read.last_stable_offset, read.log_start_offset
        # Null versus empty as Kafka sends them: a partition read (or refused by the read:
        # epoch fencing, out of range) has AbortedTransactions null under read_uncommitted and
        # a list under read_committed; a read error also hides the offsets (-1). A partition
        # refused before any read (unknown topic or partition) carries the schema's empty list.
        aborted: list[AbortedTransaction] | None = \
            [AbortedTransaction(producer_id=pid, first_offset=first)
             for pid, first in read.aborted_transactions] \
            if read_committed and err == ErrorCode.NONE else None
        if err != ErrorCode.NONE:
            any_error = True
            hw = lso = log_start = -1
            if not read.found:
                aborted = []
        elif incremental and not records and not cp.needs_response(hw, lso, log_start):
            continue
        rows.append((tkey, cp, PartitionData(
            partition_index=partition, error_code=err, high_watermark=hw,
            last_stable_offset=lso, log_start_offset=log_start,
            aborted_transactions=aborted, preferred_read_replica=-1, records=records)))
    return rows, total, any_error, pending


def _fill_bytes(read, n: int, limit: int, fetch_offset: int, read_committed: bool) -> int:
    """The bytes Kafka's read of this partition returns where snakka's returned ``n``: Kafka's
    segment read hands out ``min(limit, bytes up to the bound)`` (LogSegment.read: the batches
    that fit, then the next one cut at the limit, which clients drop), so a read that stopped
    short of its limit with more data below the high watermark (the LSO, read_committed)
    counts as the whole limit. Kafka counts those bytes against the consumer's quota, sizes
    the partitions after it with what is left, and meets ``fetch.min.bytes`` with them; snakka
    does the same bookkeeping (same throttle times, same records per partition) and sends the
    whole batches only (the cut bytes would be dropped by every client). A pending remote read
    or a read past the bound counts what it returned."""
    if n >= limit or read.pending is not None:
        return n
    bound = read.last_stable_offset if read_committed else read.high_watermark
    nxt = next_offset_after(read.records) if n else fetch_offset
    return limit if 0 <= nxt < bound else n


def _response_size(version: int, rows, by_id: bool, record_bytes: int) -> int:
    """The size Kafka counts against ``consumer_byte_rate`` for this response
    (FetchResponse.sizeOf: 4 + the encoded body, no header), with ``record_bytes`` as the
    records' total (Kafka's, see :func:`_fill_bytes`). Computed from the schema's field sizes
    rather than by encoding the response twice; tests/unit/test_fetch_quota_size.py checks it
    against the codec."""
    flex = version >= 12
    tag = 1 if flex else 0  # an empty tagged-field section

    def arr(k: int) -> int:
        return _uvarint_size(k + 1) if flex else 4

    topics: dict[object, int] = {}
    size = 4 + (4 if version >= 1 else 0) + (6 if version >= 7 else 0) + tag + record_bytes
    for tkey, _cp, pd in rows:
        if tkey not in topics:
            topics[tkey] = 0
            if by_id:
                size += 16
            else:
                name = len(str(tkey).encode())
                size += (_uvarint_size(name + 1) if flex else 2) + name
        topics[tkey] += 1
        size += 14 + (8 if version >= 4 else 0) + (8 if version >= 5 else 0) + tag
        size += 4 if version >= 11 else 0
        if version >= 4:
            aborted = pd.aborted_transactions
            if aborted is None:
                size += 1 if flex else 4
            else:
                size += arr(len(aborted)) + len(aborted) * (16 + tag)
        size += _uvarint_size(len(pd.records) + 1) if flex else 4
    size += arr(len(topics)) + sum(arr(k) + tag for k in topics.values())
    return size


def _uvarint_size(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _build(session_id: int, rows, by_id: bool) -> FetchResponse:
    """Build the response and record in the session what the client is now told."""
    topics: dict[object, list[PartitionData]] = {}
    for tkey, cp, pd in rows:
        cp.record_sent(pd.high_watermark, pd.last_stable_offset, pd.log_start_offset)
        topics.setdefault(tkey, []).append(pd)
    if by_id:
        resp_topics = [FetchableTopicResponse(topic_id=k, partitions=ps) for k, ps in topics.items()]
    else:
        resp_topics = [FetchableTopicResponse(topic=k, partitions=ps) for k, ps in topics.items()]
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=session_id,
                         responses=resp_topics)


def _answer(ctx: RequestContext, fctx, rows, by_id: bool, total: int | None = None,
            handler_s: float = 0.0) -> FetchResponse:
    """The response to a consumer's fetch, or Kafka's throttled one (KafkaApis.
    handleFetchRequest). The handler time (``handler_s``: the request thread's time, Kafka's
    requestThreadTimeNanos; a fetch answered after a wait counts its first pass only) is
    recorded against ``request_percentage`` and the response's size (:func:`_response_size`;
    ``total``: the records as Kafka counts them, default what is sent) against
    ``consumer_byte_rate``. When either throttles, the fetch's bytes are taken back and not
    sent, nothing is noted in the session, and the response is empty (no partitions, error
    NONE) with the larger throttle time; the connection then mutes the channel that long
    (KIP-219). As Kafka's FetchContext.getThrottledResponse, a full fetch's new session is not
    kept (session id 0: the client's next fetch is full again), an incremental one keeps its
    id (its epoch has moved on)."""
    quotas = ctx.services.quotas
    if quotas is not None and quotas.enabled:
        user, client_id = ctx.principal.name, ctx.client_id or ""
        throttle = quotas.record_fetch_request(user, client_id, handler_s)
        if quotas.fetch.active:
            if total is None:
                total = sum(len(pd.records) for _tkey, _cp, pd in rows)
            size = _response_size(ctx.api_version, rows, by_id, total)
            throttle = max(throttle, quotas.record_fetch(user, client_id, size,
                                                         unrecord=throttle > 0))
        if throttle > 0:
            _give_back(ctx)
            session_id = fctx.session_id
            if session_id and not fctx.incremental:
                ctx.services.fetch_sessions.close(session_id)
                session_id = 0
            return FetchResponse(throttle_time_ms=throttle, error_code=0, session_id=session_id,
                                 responses=[])
    if fctx.incremental and fctx.session is not None:
        _rotate(fctx.session, rows)
    return _build(fctx.session_id, rows, by_id)


def _rotate(session, rows) -> None:
    """Kafka's fairness across a session's partitions (FetchSession.scala, IncrementalFetch-
    Context): a partition that returned records moves to the end of the session's order, so
    the next fetch reads the partitions that got nothing (the byte limit ran out first)
    before it. Without it, a session with more backlogged partitions than one response holds
    would serve the first ones only until they catch up."""
    parts = session.partitions
    for tkey, _cp, pd in rows:
        if pd.records:
            key = (tkey, pd.partition_index)
            if key in parts:
                parts.move_to_end(key)


def _since(started: float) -> float:
    """Handler time so far (the request quota's measure; perf_counter as the connection's)."""
    return time.perf_counter() - started


def handle(ctx: RequestContext, req: FetchRequest):
    started = time.perf_counter()
    services = ctx.services
    v = ctx.api_version
    by_id = v >= 13
    if req.replica_id >= 0 or (v >= 15 and req.replica_state.replica_id >= 0):
        # A follower fetch needs CLUSTER_ACTION on the cluster; denied, each partition is
        # TOPIC_AUTHORIZATION_FAILED (Kafka). Allowed: there are no followers of a single broker.
        if not ctx.is_allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return _all_denied(req, by_id)
        return FetchResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             session_id=0, responses=[])
    fetch = []
    for t in req.topics:
        tkey = t.topic_id if by_id else t.topic
        for p in t.partitions:
            fetch.append(((tkey, p.partition), CachedPartition(
                fetch_offset=p.fetch_offset, max_bytes=p.partition_max_bytes,
                current_leader_epoch=p.current_leader_epoch, log_start_offset=p.log_start_offset)))
    forgotten: list[tuple[object, int]] = []
    if v >= 7:
        for ft in req.forgotten_topics_data:
            tkey = ft.topic_id if by_id else ft.topic
            forgotten.extend((tkey, p) for p in ft.partitions)
    fctx = services.fetch_sessions.resolve(req.session_id if v >= 7 else 0,
                                         req.session_epoch if v >= 7 else -1, fetch, forgotten)
    if fctx.error != ErrorCode.NONE:
        quotas = services.quotas
        throttle = 0
        if quotas is not None and quotas.enabled:  # recorded as any consumer fetch (Kafka)
            throttle = quotas.record_fetch_request(ctx.principal.name, ctx.client_id or "",
                                                   _since(started))
        return FetchResponse(throttle_time_ms=throttle, error_code=fctx.error, session_id=0,
                             responses=[])
    denied = frozenset() if ctx.allows_everything else \
        _denied_topics(ctx, fctx.partitions, by_id)
    # snakka.fetch.response.target.bytes: below glibc's largest mmap threshold, so clients
    # that take a new buffer per response (librdkafka) reuse heap memory instead of faulting
    # in a fresh mapping each time; the first whole batch still comes (KIP-74).
    max_bytes = min(req.max_bytes if v >= 3 else INT32_MAX,
                    services.resolver.broker_int("fetch.max.bytes"),
                    services.resolver.broker_int("snakka.fetch.response.target.bytes"))
    if not getattr(ctx.connection, "zero_copy", False):
        # The records will be read into memory (TLS): at most this much per response.
        max_bytes = min(max_bytes, services.resolver.broker_int("snakka.fetch.memory.max.bytes"))
    fill = False
    if services.quotas is not None:
        # A consumer with a consumer_byte_rate never gets more than a quota span's worth at
        # once (Kafka: more would be throttled for sure, holding the consumer back), and its
        # reads are counted as Kafka's (filled to their limits: _fill_bytes).
        cap = services.quotas.fetch_max_bytes(ctx.principal.name, ctx.client_id or "")
        if cap is not None:
            max_bytes = min(max_bytes, cap)
            fill = True
    # Kafka's fetchMinBytes: min(MinBytes, the fetch's byte limit). A consumer whose
    # fetch.min.bytes reaches what one response may hold (its quota span, typically) is
    # answered once a full response is readable instead of waiting MaxWaitMs every time: its
    # reads are counted filled, as Kafka's (other fetches do without that bookkeeping: a
    # MinBytes below the limit is met by whole batches alike, give or take one batch).
    if req.min_bytes >= max_bytes:
        fill = True
    opts = _Opts(min(req.min_bytes, max_bytes), fill)
    read_committed = v >= 4 and req.isolation_level == 1
    deadline = services.time_ms() + max(req.max_wait_ms, 0)
    got = _read_reserved(ctx, fctx, by_id, denied, max_bytes, read_committed, fill)
    if got is None:  # the response budget is spent and this connection holds unsent bytes
        if req.max_wait_ms <= 0:
            return _answer(ctx, fctx, _read_nothing(services, fctx, by_id, denied, read_committed),
                           by_id, handler_s=_since(started))
        opts.handler_s = _since(started)
        return _fetch_later(ctx, req, fctx, by_id, denied, max_bytes, read_committed, deadline,
                            opts)
    rows, total, any_error, pending = got
    if pending:
        _give_back(ctx)
        opts.handler_s = _since(started)
        return _remote_fetch(ctx, fctx, by_id, denied, max_bytes, read_committed, deadline,
                             pending, opts)
    if total >= opts.min_bytes or any_error or req.max_wait_ms <= 0 or not fctx.partitions:
        return _answer(ctx, fctx, rows, by_id, total, _since(started))
    _give_back(ctx)
    opts.handler_s = _since(started)
    return _long_poll(ctx, req, fctx, by_id, denied, max_bytes, read_committed, deadline, opts)


class _Opts:
    """What a waiting fetch carries besides its read bounds: the effective MinBytes, whether
    its reads count as Kafka's filled ones (a quota-limited consumer), and the handler time of
    its first pass (what the request quota records, as Kafka's requestThreadTimeNanos of a
    fetch completed later)."""

    __slots__ = ("min_bytes", "fill", "handler_s")

    def __init__(self, min_bytes: int, fill: bool) -> None:
        self.min_bytes = min_bytes
        self.fill = fill
        self.handler_s = 0.0


def _denied_topics(ctx: RequestContext, partitions, by_id: bool) -> frozenset:
    """The topic keys (names, or ids from v13) of the session's partitions this consumer may
    not READ: one authorizer call per request. An unknown topic id stays UNKNOWN_TOPIC_ID
    (it names nothing to authorize); an unknown name is authorized like any (Kafka answers
    TOPIC_AUTHORIZATION_FAILED before UNKNOWN_TOPIC_OR_PARTITION, so a denied principal
    cannot probe which topics exist)."""
    services = ctx.services
    names: dict[object, str] = {}
    for (tkey, _partition), _cp in partitions:
        if tkey not in names:
            name = _resolve_topic(services, tkey, True) if by_id else tkey
            if name is not None:
                names[tkey] = name
    refused = ctx.denied(AclOperation.READ, ResourceType.TOPIC, names.values())
    return frozenset(k for k, n in names.items() if n in refused) if refused else refused


def _all_denied(req: FetchRequest, by_id: bool) -> FetchResponse:
    """A follower fetch without CLUSTER_ACTION: every requested partition refused."""
    err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    topics = []
    for t in req.topics:
        parts = [PartitionData(partition_index=p.partition, error_code=err, high_watermark=-1,
                               last_stable_offset=-1, log_start_offset=-1,
                               aborted_transactions=[], preferred_read_replica=-1, records=b"")
                 for p in t.partitions]
        topics.append(FetchableTopicResponse(topic_id=t.topic_id, partitions=parts) if by_id
                      else FetchableTopicResponse(topic=t.topic, partitions=parts))
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)


def _read_reserved(ctx, fctx, by_id, denied, max_bytes, read_committed, fill=False):
    """Reserve response memory, then read at most that much; None when none can be had now.

    The reservation (settled to the bytes read) is left in ``ctx.response_bytes``; the
    connection turns it into the response's charge when it writes it."""
    conn = ctx.connection
    grant = conn.reserve_response_bytes(max(max_bytes, 0))
    if grant is None:
        return None
    # A negative request MaxBytes reserves nothing but keeps its meaning for the read (Kafka's
    # limitBytes: the first partition's negative size is an error, the rest get 0).
    try:
        rows, total, any_error, pending = _read_partitions(
            ctx.services, fctx.partitions, by_id, denied, max_bytes if max_bytes < 0 else grant,
            read_committed, fctx.incremental, zero_copy=getattr(conn, "zero_copy", False),
            fill=fill)
    except BaseException:
        # The read failed (e.g. a segment file that cannot be opened: the request is answered
        # with an error): the reservation goes back, or the connection would keep it charged
        # to the broker-wide budget for as long as it stays open.
        conn.settle_response_bytes(grant, 0)
        raise
    conn.settle_response_bytes(grant, total)
    ctx.response_bytes = total
    return rows, total, any_error, pending


def _give_back(ctx) -> None:
    """Drop a read that will not be sent (long poll: fewer than min_bytes)."""
    ctx.connection.settle_response_bytes(ctx.response_bytes, 0)
    ctx.response_bytes = 0


def _read_nothing(services, fctx, by_id, denied, read_committed):
    """Partition states without records (for a fetch that got no response memory)."""
    return _read_partitions(services, fctx.partitions, by_id, denied, 0, read_committed, fctx.incremental,
                            min_one_batch=False)[0]


async def _read_when_memory(ctx, fctx, by_id, denied, max_bytes, read_committed, deadline,
                            fill=False):
    """_read_reserved, waiting for response memory until the deadline, then without records."""
    services = ctx.services
    while True:
        got = _read_reserved(ctx, fctx, by_id, denied, max_bytes, read_committed, fill)
        if got is not None:
            return got
        remaining = deadline - services.time_ms()
        if remaining <= 0 or not await ctx.connection.wait_for_response_memory(remaining / 1000):
            return _read_nothing(services, fctx, by_id, denied, read_committed), 0, False, []


async def _remote_fetch(ctx, fctx, by_id, denied, max_bytes, read_committed, deadline, pending,
                        opts):
    """Kafka's DelayedRemoteFetch: wait for the pending remote reads (at most
    ``remote.fetch.max.wait.ms``), read every partition once more and answer with what there
    is (a partition whose remote data is still on its way: no records this time)."""
    services = ctx.services
    wait_ms = services.resolver.broker_int("remote.fetch.max.wait.ms")
    await asyncio.wait([asyncio.ensure_future(p) for p in pending], timeout=wait_ms / 1000)
    rows, total, _any_error, _still = await _read_when_memory(
        ctx, fctx, by_id, denied, max_bytes, read_committed, deadline, opts.fill)
    return _answer(ctx, fctx, rows, by_id, total, opts.handler_s)


async def _fetch_later(ctx, req, fctx, by_id, denied, max_bytes, read_committed, deadline, opts):
    services = ctx.services
    rows, total, any_error, pending = await _read_when_memory(
        ctx, fctx, by_id, denied, max_bytes, read_committed, deadline, opts.fill)
    if pending:
        _give_back(ctx)
        return await _remote_fetch(ctx, fctx, by_id, denied, max_bytes, read_committed, deadline,
                                   pending, opts)
    if total >= opts.min_bytes or any_error or services.time_ms() >= deadline:
        return _answer(ctx, fctx, rows, by_id, total, opts.handler_s)
    _give_back(ctx)
    return await _long_poll(ctx, req, fctx, by_id, denied, max_bytes, read_committed, deadline,
                            opts)


async def _long_poll(ctx, req, fctx, by_id, denied, max_bytes, read_committed, deadline, opts):
    services = ctx.services
    keys = []
    for (tkey, partition), _cp in fctx.partitions:
        name = _resolve_topic(services, tkey, by_id)
        if name is not None:
            keys.append((name, partition))
    while True:
        remaining = deadline - services.time_ms()
        if remaining <= 0:
            break
        if not await services.replicas.wait_for_append(keys, remaining / 1000):
            break
        rows, total, any_error, pending = await _read_when_memory(
            ctx, fctx, by_id, denied, max_bytes, read_committed, deadline, opts.fill)
        if pending:
            _give_back(ctx)
            return await _remote_fetch(ctx, fctx, by_id, denied, max_bytes, read_committed,
                                       deadline, pending, opts)
        if total >= opts.min_bytes or any_error:
            return _answer(ctx, fctx, rows, by_id, total, opts.handler_s)
        _give_back(ctx)
    rows, total, _, pending = await _read_when_memory(
        ctx, fctx, by_id, denied, max_bytes, read_committed, deadline, opts.fill)
    if pending:
        _give_back(ctx)
        return await _remote_fetch(ctx, fctx, by_id, denied, max_bytes, read_committed, deadline,
                                   pending, opts)
    return _answer(ctx, fctx, rows, by_id, total, opts.handler_s)
