"""DescribeTransactions (65): the coordinator's view of transactional ids (KIP-664).

What ``kafka-transactions.sh describe`` and ``find-hanging`` read, asked of the id's
transaction coordinator (the admin client finds it with FindCoordinator key type 1). The core
answers (``TransactionCoordinator.describe_transaction``); this module checks authorization and
encodes, as Kafka's KafkaApis: an id the principal may not DESCRIBE is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and the partitions of topics it may not DESCRIBE are left
out of the answer. The core's errors: INVALID_REQUEST (empty id), NOT_COORDINATOR (another
broker's id, or its ``__transaction_state`` partition is not loaded), TRANSACTIONAL_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_transactions_response import (
    DescribeTransactionsResponse,
    TopicData,
    TransactionState,
)
from snakka.security.authorizer import (
    AclOperation,
    ResourceType,
)

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_transactions_request import (
        DescribeTransactionsRequest,
    )

API = ApiDeclaration(ApiKey.DESCRIBE_TRANSACTIONS)


def _describe(ctx: RequestContext, tid: str, allowed: bool) -> TransactionState:
    if not allowed:
        return TransactionState(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                transactional_id=tid)
    coordinator = ctx.services.txns.coordinator
    err, m = coordinator.describe_transaction(tid)
    if m is None:
        return TransactionState(error_code=err, transactional_id=tid)
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(p)
    visible = ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, list(by_topic))
    return TransactionState(
        error_code=0, transactional_id=tid,
        transaction_state=coordinator.state_name(m.state),
        transaction_timeout_ms=m.txn_timeout_ms,
        transaction_start_time_ms=m.txn_start_timestamp_ms,
        producer_id=m.producer_id, producer_epoch=m.producer_epoch,
        topics=[TopicData(topic=t, partitions=ps)
                for (t, ps), ok in zip(by_topic.items(), visible, strict=True) if ok])


def handle(ctx: RequestContext, req: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    ids = list(req.transactional_ids)
    allowed = ctx.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, ids)
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=[
        _describe(ctx, tid, ok) for tid, ok in zip(ids, allowed, strict=True)])
