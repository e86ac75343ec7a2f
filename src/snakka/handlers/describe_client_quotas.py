"""DescribeClientQuotas (48): the client quotas matching a filter (``kafka-configs.sh --describe
--entity-type users|clients|ips``, ``Admin.describeClientQuotas``).

Kafka's ClientQuotasImage.describe (metadata/client_quotas.py): components of entity type and
match (EXACT name, DEFAULT entity, SPECIFIED: any non-default name); ``strict`` keeps only
entities with exactly the filtered types. A malformed filter is INVALID_REQUEST for the whole
request with Kafka's message. Needs DESCRIBE_CONFIGS on the cluster (dispatch checks it and
answers CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_client_quotas_response import (
    DescribeClientQuotasResponse,
    EntityData,
    EntryData,
    ValueData,
)
from snakka.security.authorizer import CLUSTER, AclOperation, Action

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_client_quotas_request import (
        DescribeClientQuotasRequest,
    )

API = ApiDeclaration(ApiKey.DESCRIBE_CLIENT_QUOTAS,
                     actions=(Action(AclOperation.DESCRIBE_CONFIGS, CLUSTER),))


def handle(ctx: RequestContext, req: DescribeClientQuotasRequest
           ) -> DescribeClientQuotasResponse:
    components = [(c.entity_type, c.match_type, c.match) for c in req.components or []]
    result, found = ctx.services.metadata.client_quotas.describe(components, bool(req.strict))
    if result.error_code != ErrorCode.NONE:
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=result.error_code,
                                            error_message=result.error_message, entries=None)
    entries = [EntryData(entity=[EntityData(entity_type=t, entity_name=n) for t, n in entity],
                         values=[ValueData(key=k, value=v) for k, v in sorted(values.items())])
               for entity, values in found]
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                        error_message=None, entries=entries)
