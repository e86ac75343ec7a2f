"""The controller mutation quota (KIP-599, ``controller_mutation_rate``) of one CreateTopics,
CreatePartitions or DeleteTopics request: metadata/client_quotas.py's ControllerMutationQuota
for the request's principal and client id, strict from the version that knows
THROTTLING_QUOTA_EXCEEDED (Kafka's ``newQuotaFor(request, strictSinceVersion)``), or None when
no such quota is configured anywhere (the request pays one attribute read).

As Kafka's controller, a validate-only request is charged too (its ReplicationControlManager
applies the quota before it knows the request only validates), and a refused topic's error
message is null: Kafka's ApiError.fromThrowable drops a message that is the error's default
one (tests/reference/test_quotas_differential.py compares both with Kafka 4.0)."""

from __future__ import annotations

from snakka.handlers.context import RequestContext
from snakka.metadata.client_quotas import ControllerMutationQuota
from snakka.protocol.errors import ErrorCode

# A refused topic's error code; its error message is null (see the module docstring).
THROTTLED = ErrorCode.THROTTLING_QUOTA_EXCEEDED


def mutation_quota(ctx: RequestContext, strict_since_version: int) -> ControllerMutationQuota | None:
    quotas = ctx.services.quotas
    if quotas is None or not quotas.controller_mutation.active:
        return None
    return quotas.controller_mutation.new_quota(
        ctx.principal.name, ctx.client_id or "",
        strict=ctx.api_version >= strict_since_version)


def throttle_ms(quota: ControllerMutationQuota | None) -> int:
    """The response's throttle_time_ms (the connection then mutes the client that long)."""
    return 0 if quota is None else quota.throttle_time_ms()
