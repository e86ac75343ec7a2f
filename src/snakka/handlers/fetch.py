"""Fetch (1): read record batches as they lie on disk; long-poll; incremental fetch sessions.

- Partitions are named (v < 13) or identified by topic id (v13+; unknown ids get UNKNOWN_TOPIC_ID).
- Data is returned as the stored bytes of whole batches starting at the batch that contains the
  fetch offset (clients skip records before their position). Bounds: the request's ``max_bytes``
  (capped by the broker's ``fetch.max.bytes``) and each partition's ``partition_max_bytes``; the
  first partition with data returns at least one whole batch even if it is larger (as Kafka).
- Long poll: if fewer than ``min_bytes`` are available, the handler waits up to ``max_wait_ms``
  and is woken by the first append to any fetched partition, then reads again.
- read_committed (isolation_level 1) reads only up to the last stable offset; with no
  transactions yet the LSO equals the high watermark, and ``aborted_transactions`` is empty
  (null under read_uncommitted, as Kafka sends it).
- Sessions (KIP-227) are resolved by fetch_sessions.FetchSessionCache; an incremental response
  lists only partitions with news.
"""

from __future__ import annotations

from snakka.fetch_sessions import CachedPartition
from snakka.handlers._common import check_leader_epoch
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from snakka.storage import LogClosedError, OffsetOutOfRangeError

API_KEY = 1
# Fetch v0-3 expect message formats v0/v1, which snakka does not store and does not
# down-convert (Kafka 4.0 dropped them too).
MIN_VERSION = 4

_EMPTY = b""


def _resolve_topic(broker, key, by_id: bool):
    if by_id:
        ti = broker.metadata.topics_by_id.get(key)
        return ti.name if ti else None
    return key if key in broker.metadata.topics else None


def _read_partitions(broker, entries, by_id: bool, max_bytes: int, read_committed: bool,
                     incremental: bool):
    """Read every partition once, without touching session state.

    Returns (rows, total bytes, any error) where rows are (topic key, PartitionData, cached
    partition) for the partitions the response should list.
    """
    rows = []
    total = 0
    any_error = False
    first_data = True
    for (tkey, partition), cp in entries:
        name = _resolve_topic(broker, tkey, by_id)
        err = ErrorCode.NONE
        hw = lso = log_start = -1
        records = _EMPTY
        pl = None
        if name is None:
            err = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            ti = broker.metadata.topics[name]
            if not 0 <= partition < ti.partitions:
                err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                pl = broker.partition_log(name, partition)
                if pl is None:
                    err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if pl is not None:
            err = check_leader_epoch(cp.current_leader_epoch)
            hw = pl.high_watermark
            lso = hw  # no transactions yet: last stable offset == high watermark
            log_start = pl.log_start_offset
            if err == ErrorCode.NONE:
                limit = min(cp.max_bytes, max_bytes - total)
                if limit > 0 or first_data:
                    try:
                        records = pl.read(cp.fetch_offset, max(limit, 0),
                                          max_offset=lso if read_committed else None,
                                          min_one_message=first_data)
                    except OffsetOutOfRangeError:
                        err = ErrorCode.OFFSET_OUT_OF_RANGE
                        records = _EMPTY
                    except LogClosedError:  # deleted while this fetch waited
                        err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        records = _EMPTY
                    n = len(records)
                    if n:
                        total += n
                        first_data = False
        # Null versus empty as Kafka sends them: a partition read (or refused by the read:
        # epoch fencing, out of range) has AbortedTransactions null under read_uncommitted and
        # a list under read_committed; a read error also hides the offsets (-1). A partition
        # refused before any read (unknown topic or partition) carries the schema's empty list.
        aborted = [] if read_committed and err == ErrorCode.NONE else None
        if err != ErrorCode.NONE:
            any_error = True
            hw = lso = log_start = -1
            if pl is None:
                aborted = []
        elif incremental and not records and not cp.needs_response(hw, lso, log_start):
            continue
        rows.append((tkey, cp, PartitionData(
            partition_index=partition, error_code=err, high_watermark=hw,
            last_stable_offset=lso, log_start_offset=log_start,
            aborted_transactions=aborted, preferred_read_replica=-1, records=records)))
    return rows, total, any_error


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


def handle(ctx, req):
    broker = ctx.broker
    v = ctx.api_version
    by_id = v >= 13
    if req.replica_id >= 0 or (v >= 15 and req.replica_state.replica_id >= 0):
        # Follower fetches: there are no followers of a single broker.
        return FetchResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             session_id=0, responses=[])
    fetch = []
    for t in req.topics:
        tkey = t.topic_id if by_id else t.topic
        for p in t.partitions:
            fetch.append(((tkey, p.partition), CachedPartition(
                fetch_offset=p.fetch_offset, max_bytes=p.partition_max_bytes,
                current_leader_epoch=p.current_leader_epoch, log_start_offset=p.log_start_offset)))
    forgotten = []
    if v >= 7:
        for ft in req.forgotten_topics_data:
            tkey = ft.topic_id if by_id else ft.topic
            forgotten.extend((tkey, p) for p in ft.partitions)
    fctx = broker.fetch_sessions.resolve(req.session_id if v >= 7 else 0,
                                         req.session_epoch if v >= 7 else -1, fetch, forgotten)
    if fctx.error != ErrorCode.NONE:
        return FetchResponse(throttle_time_ms=0, error_code=fctx.error, session_id=0,
                             responses=[])
    max_bytes = min(req.max_bytes if v >= 3 else 2**31 - 1,
                    int(broker.resolver.broker_value("fetch.max.bytes")))
    read_committed = v >= 4 and req.isolation_level == 1
    rows, total, any_error = _read_partitions(broker, fctx.partitions, by_id, max_bytes,
                                              read_committed, fctx.incremental)
    if total >= req.min_bytes or any_error or req.max_wait_ms <= 0 or not fctx.partitions:
        return _build(fctx.session_id, rows, by_id)
    return _long_poll(broker, req, fctx, by_id, max_bytes, read_committed)


async def _long_poll(broker, req, fctx, by_id, max_bytes, read_committed):
    deadline = broker.time_ms() + req.max_wait_ms
    keys = []
    for (tkey, partition), _cp in fctx.partitions:
        name = _resolve_topic(broker, tkey, by_id)
        if name is not None:
            keys.append((name, partition))
    while True:
        remaining = deadline - broker.time_ms()
        if remaining <= 0:
            break
        if not await broker.wait_for_append(keys, remaining / 1000):
            break
        rows, total, any_error = _read_partitions(broker, fctx.partitions, by_id, max_bytes,
                                                  read_committed, fctx.incremental)
        if total >= req.min_bytes or any_error:
            return _build(fctx.session_id, rows, by_id)
    rows, _, _ = _read_partitions(broker, fctx.partitions, by_id, max_bytes, read_committed,
                                  fctx.incremental)
    return _build(fctx.session_id, rows, by_id)
