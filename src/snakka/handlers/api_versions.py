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

Per-request cost: every client opens its connections with an ApiVersions request, and building
~90 ``ApiVersion`` structs and encoding them was about a tenth of the broker's CPU per opened
connection. So the answer is built and encoded once per API set and version
(:class:`_AnswerCache`) and each request gets a fresh response object sharing the cached lists
whose ``write`` appends the cached bytes. Invalidation: the cache is keyed by the registry
object and checked against its handlers on every request (one C-level list comparison,
identity first: a test that swaps a handler in place, or another listener's or the controller's
registry, gets its own answer); the feature levels are constants (snakka.metadata.features:
UpdateFeatures changes nothing), and the cached bytes are only used while the response still
has ``throttle_time_ms`` 0 (a client quota's throttle is written into the response after the
handler: such a response is encoded field by field, as before).
"""

from __future__ import annotations

import re
import threading
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


def build_response(apis: Mapping[int, Any], error_code: int) -> ApiVersionsResponse:
    """The answer, built field by field (what the cache holds; tests compare against it)."""
    if error_code != ErrorCode.NONE:
        return ApiVersionsResponse(error_code=error_code, api_keys=_api_keys(apis))
    # The feature fields are v3+ tagged fields: older versions do not carry them.
    return ApiVersionsResponse(
        error_code=ErrorCode.NONE, api_keys=_api_keys(apis), throttle_time_ms=0,
        supported_features=[SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                            for n, (lo, hi) in SUPPORTED_FEATURES.items()],
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=[FinalizedFeatureKey(name=n, min_version_level=level,
                                                max_version_level=level)
                            for n, level in FINALIZED_FEATURES.items()])


class _CachedAnswer(ApiVersionsResponse):
    """An ApiVersionsResponse whose encoding at ``_version`` is known: ``write`` appends it
    while ``throttle_time_ms`` is still the 0 it was encoded with (module doc)."""

    __slots__ = ("_version", "_body")
    _version: int
    _body: bytes

    def write(self, out: bytearray, version: int) -> None:
        if version == self._version and self.throttle_time_ms == 0:
            out += self._body
        else:
            super().write(out, version)


# Registries (API sets) whose answers are cached: one per dispatcher (listeners, controller),
# more only in tests that build many brokers in one process; beyond this the oldest goes.
ANSWER_CACHE_REGISTRIES = 8


class _AnswerCache:
    """(registry, error code, version) -> the answer's fields and encoding (module doc)."""

    def __init__(self) -> None:
        # id(registry) -> (the registry's handlers when cached, {(error, version): entry})
        self._by_registry: dict[int, tuple[list[Any], dict[tuple[int, int], Any]]] = {}
        # Brokers embedded in one process answer from their own threads: a miss (rare)
        # changes the dicts under this lock; a hit only reads them (atomic under the GIL).
        self._lock = threading.Lock()

    def answer(self, apis: Mapping[int, Any], error_code: int,
               version: int) -> ApiVersionsResponse:
        handlers = list(apis.values())
        slot = self._by_registry.get(id(apis))
        # The handlers compared in C (identical objects at once; others by value, and the
        # answer depends only on their values): an id reused by another registry, or a handler
        # swapped in place with other versions, misses.
        entry = slot[1].get((error_code, version)) if slot is not None and \
            slot[0] == handlers else None
        if entry is None:
            entry = self._miss(apis, handlers, error_code, version)
        built, body = entry
        r = _CachedAnswer(built.error_code, built.api_keys, 0, built.supported_features,
                          built.finalized_features_epoch, built.finalized_features)
        r._version = version
        r._body = body
        return r

    def _miss(self, apis: Mapping[int, Any], handlers: list[Any], error_code: int,
              version: int) -> tuple[ApiVersionsResponse, bytes]:
        built = build_response(apis, error_code)
        encoded = bytearray()
        built.write(encoded, version)
        entry = (built, bytes(encoded))
        with self._lock:
            slot = self._by_registry.get(id(apis))
            if slot is None or slot[0] != handlers:
                if len(self._by_registry) >= ANSWER_CACHE_REGISTRIES:
                    self._by_registry.pop(next(iter(self._by_registry)))
                slot = (handlers, {})
                self._by_registry[id(apis)] = slot
            slot[1][(error_code, version)] = entry
        return entry


_ANSWERS = _AnswerCache()


def handle(ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
    error = ErrorCode.NONE if valid_client_software(req, ctx.api_version) \
        else ErrorCode.INVALID_REQUEST
    return _ANSWERS.answer(ctx.apis, error, ctx.api_version)
