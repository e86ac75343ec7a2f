"""ApiVersions (18): the versions of every API this broker serves (KIP-511 for unknown versions).

An ApiVersions request at a version above ours gets a v0-shaped response with UNSUPPORTED_VERSION
and our ranges, so the client can retry at a version we know. v3+ requests carry the client's
software name/version; invalid ones get INVALID_REQUEST as in Kafka.
"""

from __future__ import annotations

import re

from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse

API_KEY = 18

_SOFTWARE_RE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def _api_keys(broker) -> list[ApiVersion]:
    return [ApiVersion(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
            for h in sorted(broker.handlers.values(), key=lambda h: h.api_key)]


def unsupported_version_response(broker) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys(broker))


def handle(ctx, req) -> ApiVersionsResponse:
    if ctx.api_version >= 3:
        if not (_SOFTWARE_RE.match(req.client_software_name or "")
                and _SOFTWARE_RE.match(req.client_software_version or "")):
            return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST,
                                       api_keys=_api_keys(ctx.broker))
        ctx.connection.client_software = (req.client_software_name, req.client_software_version)
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=_api_keys(ctx.broker),
                               throttle_time_ms=0)
