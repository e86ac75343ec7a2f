"""ShareFetch (78, v1-v2): share-group consumption (KIP-932). The logic is in share.manager
(acquisition, long polls, persistence) and share.sessions (session epochs).

Order of work, as Kafka's: resolve the share session (errors are top-level: INVALID_REQUEST,
SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED), apply the
piggy-backed acknowledgements (per-partition AcknowledgeErrorCode), then either close the
session (epoch -1: release what the member still holds) or acquire records from every partition
of the session (per-partition ErrorCode: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION for a
partition index that does not exist or a share-partition the group was never assigned). With
IsRenewAck (v2) the request only renews locks: nothing is fetched, and MaxBytes, MinBytes,
MaxRecords and MaxWaitMs must be 0 (else INVALID_REQUEST, as Kafka). Renewals of a group with
``share.renew.acknowledge.enable=false`` are refused with INVALID_RECORD_STATE.

Limits (Kafka 4.2; 0 never means "unlimited"): MaxBytes is capped by ``fetch.max.bytes`` (and,
for a consumer with a ``consumer_byte_rate``, by a quota span's worth of it, as Kafka 4.0) and
split evenly over the share-partitions that may acquire, soft like Fetch (KIP-74: the first
partition with data returns at least one whole batch); MaxBytes <= 0 answers UNKNOWN_SERVER_ERROR
for each of those partitions ("Request max bytes must be greater than 0", Kafka's
PartitionMaxBytesStrategy). MaxRecords <= 0 acquires nothing. MinBytes <= 0 answers at once;
MaxWaitMs <= 0 does not wait. BatchSize <= 0 splits AcquiredRecords at every log batch. The
session's partitions are rotated by ShareSessionEpoch % n before they are filled (share.manager).

The response lists every partition with acquired records, an error or an acknowledgement
result; it is sent only once the acknowledgements are durable (share.manager). Membership and
assignment are not checked here, as in Kafka: the share-partition leader serves any member id
of the group; acknowledgements are checked against who holds each record.

Authorization (KafkaApis.handleShareFetchRequest): READ on the group, else the whole request is
GROUP_AUTHORIZATION_FAILED; READ on each topic of the request and the session: the partitions
of an unreadable topic answer TOPIC_AUTHORIZATION_FAILED (nothing is acquired from them) and
their piggy-backed acknowledgements TOPIC_AUTHORIZATION_FAILED (not applied).

One node: CurrentLeader is always this broker with leader epoch 0, and NodeEndpoints is empty
(it only lists leaders of NOT_LEADER_OR_FOLLOWER partitions, which never happen).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from snakka.handlers._authz import refuse_unreadable_acks, unreadable_topic_ids
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.share_fetch_response import (
    AcquiredRecords,
    LeaderIdAndEpoch,
    PartitionData,
    ShareFetchableTopicResponse,
    ShareFetchResponse,
)
from snakka.protocol.share import AckBatch, AcquireMode
from snakka.security.authorizer import AclOperation, ResourceType
from snakka.share.manager import PartitionResult

if TYPE_CHECKING:
    from snakka.protocol.messages.share_fetch_request import ShareFetchRequest

# v0 was KIP-932's early-access version, removed in Kafka 4.1
API = ApiDeclaration(ApiKey.SHARE_FETCH, min_version=1)


def _error(code: ErrorCode, message: str | None, lock_ms: int = 0) -> ShareFetchResponse:
    return ShareFetchResponse(throttle_time_ms=0, error_code=code, error_message=message,
                              acquisition_lock_timeout_ms=lock_ms, responses=[],
                              node_endpoints=[])


def _response(replicas, lock_ms: int, results: list[PartitionResult],
              ack_results: dict, refused: list[PartitionResult]) -> ShareFetchResponse:
    by_tp = {(r.topic_id, r.partition): r for r in results}
    for r in refused:
        by_tp[(r.topic_id, r.partition)] = r
    for tp in ack_results:
        if tp not in by_tp:
            by_tp[tp] = PartitionResult(tp[0], tp[1])
    topics: dict = {}
    for (topic_id, partition), r in by_tp.items():
        ack = ack_results.get((topic_id, partition))
        if r.error == ErrorCode.NONE and not r.acquired and ack is None:
            continue  # nothing to tell about this partition
        ack_code, ack_msg = ack if ack is not None else (ErrorCode.NONE, None)
        topics.setdefault(topic_id, []).append(PartitionData(
            partition_index=partition, error_code=r.error, error_message=r.error_message,
            acknowledge_error_code=ack_code, acknowledge_error_message=ack_msg,
            current_leader=LeaderIdAndEpoch(
                leader_id=replicas.leader_id(topic_id, partition),
                leader_epoch=replicas.leader_epoch(topic_id, partition)),
            records=r.records,
            acquired_records=[AcquiredRecords(first_offset=a.first_offset,
                                              last_offset=a.last_offset,
                                              delivery_count=a.delivery_count)
                              for a in r.acquired]))
    return ShareFetchResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
        acquisition_lock_timeout_ms=lock_ms,
        responses=[ShareFetchableTopicResponse(topic_id=t, partitions=ps)
                   for t, ps in topics.items()],
        node_endpoints=[])


def handle(ctx: RequestContext, req: ShareFetchRequest):
    services = ctx.services
    shares = services.shares
    v = ctx.api_version
    group_id, member_id = req.group_id, req.member_id
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if not group_id or not member_id:
        return _error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set")
    renew = v >= 2 and req.is_renew_ack
    if renew and (req.max_bytes or req.min_bytes or req.max_records or req.max_wait_ms):
        # KIP-1222: a renew-only request must not ask for records (as Kafka's KafkaApis).
        return _error(ErrorCode.INVALID_REQUEST,
                      "a ShareFetch with IsRenewAck must have MaxBytes, MinBytes, MaxRecords "
                      "and MaxWaitMs 0")
    lock_ms = shares.record_lock_duration_ms(group_id)
    fetch = []
    acks: dict = {}
    for t in req.topics:
        for p in t.partitions:
            tp = (t.topic_id, p.partition_index)
            fetch.append(tp)
            if p.acknowledgement_batches:
                acks.setdefault(tp, []).extend(
                    AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                    for b in p.acknowledgement_batches)
    forgotten = [(ft.topic_id, p) for ft in req.forgotten_topics_data for p in ft.partitions]
    sctx = shares.sessions.new_fetch_context(group_id, member_id, req.share_session_epoch,
                                             fetch, forgotten, has_acks=bool(acks),
                                             connection=ctx.connection)
    if sctx.error != ErrorCode.NONE:
        return _error(sctx.error, sctx.message)
    partitions = sctx.partitions
    refused: list[PartitionResult] = []
    unreadable = unreadable_topic_ids(ctx, [tp[0] for tp in fetch + partitions])
    if unreadable:
        refused_acks = refuse_unreadable_acks(acks, unreadable, allow_renew=renew)
        if sctx.kind != "final" and not renew:
            refused = [PartitionResult(tp[0], tp[1], ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                       for tp in partitions if tp[0] in unreadable]
        partitions = [tp for tp in partitions if tp[0] not in unreadable]
    # The acknowledgements are applied first and written together with what the fetch
    # acquires: one __share_group_state append per request, before anything is answered.
    ack_results, acked = shares.apply_acknowledgements(group_id, member_id, acks,
                                                       allow_renew=renew)
    if unreadable:
        ack_results.update(refused_acks)
    marks: list = []
    if sctx.kind == "final":
        marks = shares.persist(acked) + shares.close_session(group_id, member_id)
        results: list[PartitionResult] = []
    elif renew:
        marks = shares.persist(acked)
        results = []  # KIP-1222: a renew-only request fetches nothing
    elif refused and not partitions:
        marks = shares.persist(acked)
        results = []  # every partition refused: answered at once, as Kafka
    else:
        mode = AcquireMode.RECORD_LIMIT if v >= 2 and req.share_acquire_mode == 1 \
            else AcquireMode.BATCH_OPTIMIZED
        # As Kafka's KafkaApis: MaxBytes capped by fetch.max.bytes (0 or less stays an error,
        # never "unlimited") and, for a consumer with a consumer_byte_rate, by a quota span's
        # worth of it (more would be throttled for sure), MinBytes by that.
        max_bytes = min(req.max_bytes, services.resolver.broker_int("fetch.max.bytes"))
        if services.quotas is not None:
            cap = services.quotas.fetch_max_bytes(ctx.principal.name, ctx.client_id or "")
            if cap is not None:
                max_bytes = min(max_bytes, cap)
        results = shares.fetch(group_id, member_id, partitions,
                               max_wait_ms=req.max_wait_ms,
                               min_bytes=min(req.min_bytes, max_bytes), max_bytes=max_bytes,
                               max_records=req.max_records, batch_size=req.batch_size,
                               mode=mode, session_epoch=req.share_session_epoch,
                               persist_with=acked, marks=marks)
    if not asyncio.iscoroutine(results) and not (marks and shares.persister.strict()):
        return _response(services.replicas, lock_ms, results, ack_results, refused)
    return _finish(services, lock_ms, results, ack_results, marks, refused)


async def _finish(services, lock_ms, results, ack_results, marks, refused):
    try:
        await services.shares.durable(marks)
    except BaseException:
        if asyncio.iscoroutine(results):
            results.close()  # never started: nothing was acquired for it
        raise
    if asyncio.iscoroutine(results):
        results = await results
    return _response(services.replicas, lock_ms, results, ack_results, refused)
