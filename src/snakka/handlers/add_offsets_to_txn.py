"""AddOffsetsToTxn (25): a transaction will commit offsets of a consumer group.

The group's ``__consumer_offsets`` partition (``abs(hash(group)) % offsets.topic.num.partitions``)
joins the transaction, so the commit or abort marker reaches the group's pending transactional
offsets (TxnOffsetCommit). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2 (KIP-588).

Authorization (KafkaApis.handleAddOffsetsToTxnRequest): WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group (GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.add_offsets_to_txn_response import AddOffsetsToTxnResponse
from snakka.security.authorizer import AclOperation, ResourceType
from snakka.txn.coordinator import error_for_version

if TYPE_CHECKING:
    from snakka.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest

API = ApiDeclaration(ApiKey.ADD_OFFSETS_TO_TXN)


def handle(ctx: RequestContext, req: AddOffsetsToTxnRequest):
    return _handle(ctx, req)


async def _handle(ctx: RequestContext, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    # No check of the group id: Kafka 4.0 adds the __consumer_offsets partition of an empty
    # group id like any other (checked against the reference broker: NONE, and the transaction
    # then commits); TxnOffsetCommit is where a group id is validated.
    if not ctx.is_allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                          req.transactional_id):
        return AddOffsetsToTxnResponse(
            throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.is_allowed(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0,
                                       error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    err = await ctx.services.txns.add_offsets(req.transactional_id, req.producer_id,
                                              req.producer_epoch, req.group_id)
    return AddOffsetsToTxnResponse(
        throttle_time_ms=0, error_code=error_for_version(err, API.api_key, ctx.api_version))
