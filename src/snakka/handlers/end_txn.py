"""EndTxn (26): commit or abort the producer's transaction.

The coordinator writes PrepareCommit / PrepareAbort, the COMMIT / ABORT markers to every partition
of the transaction (and to the ``__consumer_offsets`` partition of each group whose offsets it
carries), then CompleteCommit / CompleteAbort, and answers (snakka.txn.manager). v5+ is
Transactions V2 (KIP-890): every EndTxn bumps the epoch and the answer carries the producer id
and epoch the client continues with; below v5 those fields are -1. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH below v2 (KIP-588).

Authorization: WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.end_txn_response import EndTxnResponse
from snakka.security.authorizer import AclOperation, ResourceType
from snakka.txn.coordinator import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, error_for_version

if TYPE_CHECKING:
    from snakka.protocol.messages.end_txn_request import EndTxnRequest

API = ApiDeclaration(ApiKey.END_TXN)

# EndTxn versions that mean Transactions V2 (Kafka: clientTransactionVersion TV_2 from v5).
TV2_VERSION = 5


def handle(ctx: RequestContext, req: EndTxnRequest):
    return _handle(ctx, req)


async def _handle(ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse:
    v = ctx.api_version
    tv2 = v >= TV2_VERSION
    if not ctx.is_allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                          req.transactional_id):
        return EndTxnResponse(throttle_time_ms=0,
                              error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                              producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)
    r = await ctx.services.txns.end_txn(req.transactional_id, req.producer_id,
                                        req.producer_epoch, req.committed, 2 if tv2 else 0)
    return EndTxnResponse(
        throttle_time_ms=0, error_code=error_for_version(r.error, API.api_key, v),
        producer_id=r.producer_id if tv2 else NO_PRODUCER_ID,
        producer_epoch=r.producer_epoch if tv2 else NO_PRODUCER_EPOCH)
