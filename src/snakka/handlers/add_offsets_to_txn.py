"""AddOffsetsToTxn (25): a transaction will commit offsets of a consumer group.

The group's ``__consumer_offsets`` partition (``abs(hash(group)) % offsets.topic.num.partitions``)
joins the transaction, so the commit or abort marker reaches the group's pending transactional
offsets (TxnOffsetCommit). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2 (KIP-588).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.add_offsets_to_txn_response import AddOffsetsToTxnResponse
from snakka.txn.coordinator import error_for_version

if TYPE_CHECKING:
    from snakka.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest

API = ApiDeclaration(ApiKey.ADD_OFFSETS_TO_TXN)


def handle(ctx: RequestContext, req: AddOffsetsToTxnRequest):
    return _handle(ctx, req)


async def _handle(ctx: RequestContext, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not req.group_id:
        return AddOffsetsToTxnResponse(error_code=ErrorCode.INVALID_REQUEST)
    err = await ctx.services.txns.add_offsets(req.transactional_id, req.producer_id,
                                              req.producer_epoch, req.group_id)
    return AddOffsetsToTxnResponse(
        throttle_time_ms=0, error_code=error_for_version(err, API.api_key, ctx.api_version))
