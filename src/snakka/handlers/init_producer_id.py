"""InitProducerId (22): producer ids for idempotent and transactional producers.

Without a transactional id, as in Kafka's coordinator, a request always gets a fresh producer id
with epoch 0 (also when a v3+ client presents its previous id and epoch after an
OUT_OF_ORDER_SEQUENCE_NUMBER: a new id resets its sequences). Ids come in blocks recorded in the
metadata log, so none is ever handed out twice, across restarts too.

With a transactional id the transaction coordinator answers (``services.txns``, see
snakka.txn.manager): the id's producer id with its epoch bumped (fencing older producers of the
same id; an open transaction of theirs is aborted first, CONCURRENT_TRANSACTIONS meanwhile),
KIP-360 recovery when the client presents its current id and epoch (v3+), and
INVALID_TRANSACTION_TIMEOUT above ``transaction.max.timeout.ms``. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH for clients older than v4 (KIP-588), as Kafka answers them.

Authorization (KafkaApis.handleInitProducerIdRequest): WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer (no transactional id) needs
IDEMPOTENT_WRITE on the cluster or WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers._authz import denied_response
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.init_producer_id_response import InitProducerIdResponse
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from snakka.txn.coordinator import error_for_version

if TYPE_CHECKING:
    from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest

API = ApiDeclaration(ApiKey.INIT_PRODUCER_ID)


def handle(ctx: RequestContext, req: InitProducerIdRequest):
    return _handle(ctx, req)


async def _handle(ctx: RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse:
    v = ctx.api_version
    if req.transactional_id is not None:
        if not ctx.is_allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                              req.transactional_id):
            return denied_response(ctx, req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        pid, epoch = (req.producer_id, req.producer_epoch) if v >= 3 else (-1, -1)
        r = await ctx.services.txns.init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, pid, epoch)
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=error_for_version(r.error, API.api_key, v),
            producer_id=r.producer_id, producer_epoch=r.producer_epoch)
    if not ctx.allows_everything and not ctx.is_allowed(
            AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME,
            log_if_denied=False) and not ctx.allowed_by_resource_type(
            AclOperation.WRITE, ResourceType.TOPIC):
        return denied_response(ctx, req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    pid = await ctx.services.controller.next_producer_id()
    return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                  producer_id=pid, producer_epoch=0)
