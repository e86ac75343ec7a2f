"""ApiVersions (18): the versions of every API this broker serves (KIP-511 for unknown versions).

The advertised ranges are the handler declarations dispatch serves (``ctx.apis``, collected by
handlers/__init__.py from each module's ``API``), so ApiVersions can never advertise an API or a
version that dispatch would refuse. An ApiVersions request at a version above ours gets a
v0-shaped response with UNSUPPORTED_VERSION and our ranges, so the client can retry at a version
we know (dispatch calls :func:`unsupported_version_response`). v3+ requests carry the client's
software name/version; invalid ones get INVALID_REQUEST as in Kafka. Valid ones are recorded on
the connection by dispatch (as Kafka's network layer does), not here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse

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
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=_api_keys(ctx.apis),
                               throttle_time_ms=0)
