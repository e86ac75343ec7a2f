"""ApiVersions (18): the versions of every API this broker serves (KIP-511 for unknown versions).

The advertised ranges are the handler declarations dispatch serves (``ctx.apis``, collected by
handlers/__init__.py from each module's ``API``), so ApiVersions can never advertise an API or a
version that dispatch would refuse. An ApiVersions request at a version above ours gets a
v0-shaped response with UNSUPPORTED_VERSION and our ranges, so the client can retry at a version
we know (dispatch calls :func:`unsupported_version_response`). v3+ requests carry the client's
software name/version; invalid ones get INVALID_REQUEST as in Kafka. Valid ones are recorded on
the connection by dispatch (as Kafka's network layer does), not here. v3+ answers carry the
feature levels (snakka.metadata.features: ``transaction.version`` 2 makes the Java 4.0 producer use
Transactions V2, as against a fresh Kafka 4.0 cluster).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.features import (
    FINALIZED_FEATURES,
    FINALIZED_FEATURES_EPOCH,
    SUPPORTED_FEATURES,
)
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.api_versions_response import (
    ApiVersion,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)

if TYPE_CHECKING:
    from snakka.protocol.messages.api_versions_request import ApiVersionsRequest

API = ApiDeclaration(ApiKey.API_VERSIONS)

_SOFTWARE_RE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def valid_client_software(req: Any, version: int) -> bool:
    """Kafka's ApiVersionsRequest.isValid: v3+ names its client software with [a-zA-Z0-9.-]
    (alphanumeric at both ends); older versions carry none."""
    if version < 3:
        return True
    return bool(_SOFTWARE_RE.match(req.client_software_name or "")
                and _SOFTWARE_RE.match(req.client_software_version or ""))


def _api_keys(apis: Mapping[int, Any]) -> list[ApiVersion]:
    return [ApiVersion(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
            for h in sorted(apis.values(), key=lambda h: h.api_key)]


def unsupported_version_response(apis: Mapping[int, Any]) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys(apis))


def handle(ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
    if not valid_client_software(req, ctx.api_version):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST,
                                   api_keys=_api_keys(ctx.apis))
    # The feature fields are v3+ tagged fields: older versions do not carry them.
    return ApiVersionsResponse(
        error_code=ErrorCode.NONE, api_keys=_api_keys(ctx.apis), throttle_time_ms=0,
        supported_features=[SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                            for n, (lo, hi) in SUPPORTED_FEATURES.items()],
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=[FinalizedFeatureKey(name=n, min_version_level=level,
                                                max_version_level=level)
                            for n, level in FINALIZED_FEATURES.items()])
