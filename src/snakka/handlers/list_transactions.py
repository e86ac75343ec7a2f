"""ListTransactions (66): the transactional ids this broker coordinates (KIP-664), v0-1.

``kafka-transactions.sh list`` (and ``find-hanging``, by producer id) sends it to every broker.
The core filters (``TransactionCoordinator.list_transactions``): state names (Kafka's exact
names; unknown ones come back in ``UnknownStateFilters`` and match nothing), producer ids, and
from v1 ``DurationFilter`` (KIP-994: only transactions running longer than that many ms). As
Kafka's KafkaApis, ids the principal may not DESCRIBE are left out. v2's transactional-id
pattern (KIP-1152, Kafka 4.1+) is not served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.messages.list_transactions_response import (
    ListTransactionsResponse,
    TransactionState,
)
from snakka.security.authorizer import (
    AclOperation,
    ResourceType,
)

if TYPE_CHECKING:
    from snakka.protocol.messages.list_transactions_request import ListTransactionsRequest

API = ApiDeclaration(ApiKey.LIST_TRANSACTIONS, max_version=1)


def handle(ctx: RequestContext, req: ListTransactionsRequest) -> ListTransactionsResponse:
    coordinator = ctx.services.txns.coordinator
    # v0 has no DurationFilter: the decoder leaves its default, -1 (no filter).
    listed, unknown = coordinator.list_transactions(
        producer_ids=req.producer_id_filters, state_names=req.state_filters,
        duration_ms=req.duration_filter if ctx.api_version >= 1 else -1)
    allowed = ctx.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                          [tid for tid, _, _ in listed], log_if_denied=False)
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
        transaction_states=[
            TransactionState(transactional_id=tid, producer_id=pid,
                             transaction_state=coordinator.state_name(state))
            for (tid, pid, state), ok in zip(listed, allowed, strict=True) if ok])
