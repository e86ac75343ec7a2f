"""InitProducerId (22): producer ids for idempotent producers.

As in Kafka's coordinator, a request without a transactional id always gets a fresh producer id
with epoch 0 (also when a v3+ client presents its previous id and epoch after an
OUT_OF_ORDER_SEQUENCE_NUMBER: a new id resets its sequences). Ids come in blocks recorded in the
metadata log, so none is ever handed out twice, across restarts too.

Transactional ids need the transaction coordinator, which snakka does not have yet; such requests
are answered with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as FindCoordinator answers their
coordinator lookup (see find_coordinator.py for why this code): fatal at once in every client,
where a retriable error would be retried until the client's timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.init_producer_id_response import InitProducerIdResponse

if TYPE_CHECKING:
    from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest

API = ApiDeclaration(ApiKey.INIT_PRODUCER_ID)


def handle(ctx: RequestContext, req: InitProducerIdRequest):
    return _handle(ctx, req)


async def _handle(ctx, req) -> InitProducerIdResponse:
    if req.transactional_id is not None:
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1, producer_epoch=-1)
    pid = await ctx.services.controller.next_producer_id()
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid,
                                  producer_epoch=0)
