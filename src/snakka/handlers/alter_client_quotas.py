"""AlterClientQuotas (49): set and remove client quotas (``kafka-configs.sh --alter
--add-config 'producer_byte_rate=1048576' --entity-type clients --entity-name X``,
``Admin.alterClientQuotas``).

Each entry names an entity (user / client-id, or ip; a null name is the ``<default>`` entity)
and its ops; metadata/client_quotas.py validates them with Kafka's words (unknown key, bad
entity, fractional or non-positive value: INVALID_REQUEST) and the controller makes the valid
entries durable before the answer (``validate_only``: nothing is written). One result per
entry, echoing its entity. Needs ALTER_CONFIGS on the cluster (dispatch checks it and answers
CLUSTER_AUTHORIZATION_FAILED for every entry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.client_quotas import QuotaAlteration
from snakka.protocol.messages.alter_client_quotas_response import (
    AlterClientQuotasResponse,
    EntityData,
    EntryData,
)
from snakka.security.authorizer import CLUSTER, AclOperation, Action

if TYPE_CHECKING:
    from snakka.protocol.messages.alter_client_quotas_request import AlterClientQuotasRequest

API = ApiDeclaration(ApiKey.ALTER_CLIENT_QUOTAS,
                     actions=(Action(AclOperation.ALTER_CONFIGS, CLUSTER),))


async def handle(ctx: RequestContext, req: AlterClientQuotasRequest
                 ) -> AlterClientQuotasResponse:
    entries = list(req.entries or [])
    alterations = [QuotaAlteration(
        [(e.entity_type, e.entity_name) for e in entry.entity or []],
        [(op.key, float(op.value), bool(op.remove)) for op in entry.ops or []])
        for entry in entries]
    results = await ctx.services.controller.alter_client_quotas(
        alterations, validate_only=bool(req.validate_only))
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
        EntryData(error_code=r.error_code, error_message=r.error_message,
                  entity=[EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                          for e in entry.entity or []])
        for entry, r in zip(entries, results, strict=True)])
