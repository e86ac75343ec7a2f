"""TxnOffsetCommit (28): a transactional producer commits a group's offsets inside its
transaction (``send_offsets_to_transaction``); they stay pending until the transaction ends.

The order is Kafka's (``KafkaApis.handleTxnOffsetCommitRequest``, then the group coordinator's
transactional write):

1. authorization: WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for
   every partition), READ on the group (GROUP_AUTHORIZATION_FAILED), READ per topic
   (TOPIC_AUTHORIZATION_FAILED for that topic's partitions);
2. an unknown topic or partition is answered UNKNOWN_TOPIC_OR_PARTITION for itself; the others
   go on (none left: answered at once);
3. an empty group id: INVALID_GROUP_ID;
4. the transaction coordinator verifies that the group's ``__consumer_offsets`` partition is in
   the transaction (v0-4, added by AddOffsetsToTxn) or adds it (v5, KIP-890 TV2). Its raw error
   is mapped as Kafka's AddPartitionsToTxnManager does: PRODUCER_FENCED becomes
   INVALID_PRODUCER_EPOCH at every version, TRANSACTION_ABORTABLE (partition not in the
   transaction) becomes INVALID_TXN_STATE below v4; then as the coordinator runtime maps
   exceptions (``CoordinatorOperationExceptionHelper``), and COORDINATOR_LOAD_IN_PROGRESS is
   COORDINATOR_NOT_AVAILABLE below v2 (KafkaApis);
5. the transaction is checked again with no wait before the store (Kafka's VerificationGuard:
   it may have ended while step 4 waited); the group checks the committer (generation / member /
   static instance, or the KIP-848 member epoch: GroupCoordinator.txn_commit_offsets) and
   stores the offsets as pending; a metadata string over ``offset.metadata.max.bytes`` is
   OFFSET_METADATA_TOO_LARGE for its partition; a failed write NOT_COORDINATOR.

Errors of steps 3-5 are answered for every partition that reached them; step 2's stay, and
come first in their topic, as Kafka's response builder orders them (checked against the
reference Kafka 4.0 in tests/reference/test_differential_txn_offsets.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.groups.coordinator import OFFSETS_TOPIC
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.txn_offset_commit_response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from snakka.security.authorizer import (
    AclOperation,
    ResourceType,
)
from snakka.txn.coordinator import leader_verification_error

if TYPE_CHECKING:
    from snakka.protocol.messages.txn_offset_commit_request import TxnOffsetCommitRequest

# v6 names topics by id (KIP-1319, after Kafka 4.0).
API = ApiDeclaration(ApiKey.TXN_OFFSET_COMMIT, max_version=5)

# Kafka's CoordinatorOperationExceptionHelper: what a client of a coordinator API is told for an
# error of the partition write underneath.
_OPERATION_ERRORS: dict[int, int] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def verification_error(raw: int, version: int) -> int:
    """The error a TxnOffsetCommit of ``version`` answers for the transaction coordinator's raw
    verification error (module doc, step 4)."""
    raw = leader_verification_error(ErrorCode(raw), version >= 4)
    if raw == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and version < 2:
        # KafkaApis: 0.11-2.0 producers could crash on the loading error (KAFKA-7296).
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return _OPERATION_ERRORS.get(raw, raw)


def handle(ctx: RequestContext, req: TxnOffsetCommitRequest):
    return _handle(ctx, req)


async def _handle(ctx: RequestContext, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    services = ctx.services
    v = ctx.api_version

    if not ctx.is_allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                          req.transactional_id):
        return _fail_all(req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return _fail_all(req, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    # READ on every topic in one authorizer call (Kafka's filterByAuthorized)
    unreadable = ctx.denied(AclOperation.READ, ResourceType.TOPIC, [t.name for t in req.topics])

    # As Kafka's response builder: the partitions refused here come first (request order),
    # then those the group coordinator answered, merged into their topics.
    out: dict[str, list[TxnOffsetCommitResponsePartition]] = {}
    md = services.metadata
    entries: list[tuple[str, int, int, int, str | None]] = []
    for t in req.topics:
        ti = md.topics.get(t.name)
        denied = t.name in unreadable
        for p in t.partitions:
            err: int
            if denied:
                err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif ti is None or not 0 <= p.partition_index < ti.partitions:
                err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                entries.append((t.name, p.partition_index, p.committed_offset,
                                p.committed_leader_epoch if v >= 2 else -1,
                                p.committed_metadata))
                continue
            out.setdefault(t.name, []).append(
                TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                 error_code=err))
    if entries:
        for (topic, partition, *_), code in zip(entries, await _commit(ctx, req, entries),
                                                strict=True):
            out.setdefault(topic, []).append(
                TxnOffsetCommitResponsePartition(partition_index=partition, error_code=code))
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        TxnOffsetCommitResponseTopic(name=name, partitions=parts) for name, parts in out.items()])


async def _commit(ctx: RequestContext, req: TxnOffsetCommitRequest,
                  entries: list[tuple[str, int, int, int, str | None]]) -> list[int]:
    """Steps 3-5 of the module doc for the partitions that passed 1-2: an error per entry."""
    v = ctx.api_version
    if not req.group_id:
        return [ErrorCode.INVALID_GROUP_ID] * len(entries)
    groups = ctx.services.groups
    txns = ctx.services.txns
    tp = (OFFSETS_TOPIC, groups.partition_for(req.group_id))
    raw = await txns.verify_or_add(req.transactional_id, req.producer_id, req.producer_epoch,
                                   [tp], add=v >= 5)
    err = verification_error(raw.get(tp, ErrorCode.NONE), v)
    if err:
        return [err] * len(entries)
    # Kafka's VerificationGuard: the verification above may have waited (v5 writes the
    # transaction state), and the transaction may have ended meanwhile (a timeout abort, a
    # pipelined EndTxn); its markers would have found nothing pending, and offsets stored now
    # would wait for the producer's NEXT transaction. So check again, synchronously, with no
    # await between this check and the store.
    top, per = txns.coordinator.verify_partitions(
        req.transactional_id, req.producer_id, req.producer_epoch, [tp])
    err = verification_error(top or per.get(tp, ErrorCode.NONE), v)
    if err:
        return [err] * len(entries)
    try:
        return groups.txn_commit_offsets(
            req.group_id, req.producer_id, req.producer_epoch,
            member_id=req.member_id if v >= 3 else "",
            generation_id=req.generation_id_or_member_epoch if v >= 3 else -1,
            group_instance_id=req.group_instance_id if v >= 3 else None, entries=entries)
    except KafkaError as e:  # the write failed and was rolled back
        return [verification_error(e.code, v)] * len(entries)


def _fail_all(req: TxnOffsetCommitRequest, err: int) -> TxnOffsetCommitResponse:
    """Kafka's ``TxnOffsetCommitRequest.getErrorResponse``: every partition of the request."""
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=err)
            for p in t.partitions]) for t in req.topics])
