"""ApiVersions answers are built and encoded once per API set and version
(handlers/api_versions.py): the cached answer's encoding is byte-for-byte the uncached
builder's for every version, valid or invalid client software, every API set a broker serves
(with and without the telemetry APIs), and a registry changed in place or a throttle time set
after the handler are never answered from stale bytes."""

from __future__ import annotations

import dataclasses

import pytest

from snakka.handlers import api_versions, load_handlers
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.api_versions_response import ApiVersionsResponse

TELEMETRY = (71, 72)  # GetTelemetrySubscriptions, PushTelemetry: served only with metrics


def registries() -> dict[str, dict]:
    full = load_handlers()
    without = load_handlers()
    for key in TELEMETRY:
        without.pop(key)
    return {"metrics on": full, "metrics off": without}


def encoded(resp: ApiVersionsResponse, version: int) -> bytes:
    out = bytearray()
    resp.write(out, version)
    return bytes(out)


def versions() -> range:
    lo, hi = ApiVersionsResponse.VALID_VERSIONS
    return range(lo, hi + 1)


@pytest.mark.parametrize("kind", ["metrics on", "metrics off"])
@pytest.mark.parametrize("error", [ErrorCode.NONE, ErrorCode.INVALID_REQUEST])
def test_cached_answer_is_byte_for_byte_the_built_one(kind, error):
    apis = registries()[kind]
    cache = api_versions._AnswerCache()
    for v in versions():
        uncached = encoded(api_versions.build_response(apis, error), v)
        first = cache.answer(apis, error, v)
        second = cache.answer(apis, error, v)
        assert encoded(first, v) == uncached
        assert encoded(second, v) == uncached
        assert second._body is first._body  # the second came from the cache
        # The fields too (what metrics or a quota read), not only the bytes.
        assert ApiVersionsResponse.decode(encoded(second, v), v) == \
            ApiVersionsResponse.decode(uncached, v)


def test_api_sets_differ_and_are_cached_apart():
    regs = registries()
    cache = api_versions._AnswerCache()
    on = encoded(cache.answer(regs["metrics on"], 0, 3), 3)
    off = encoded(cache.answer(regs["metrics off"], 0, 3), 3)
    assert on != off
    assert on == encoded(api_versions.build_response(regs["metrics on"], 0), 3)
    assert off == encoded(api_versions.build_response(regs["metrics off"], 0), 3)


def test_a_registry_changed_in_place_is_answered_afresh():
    apis = load_handlers()
    cache = api_versions._AnswerCache()
    before = encoded(cache.answer(apis, 0, 3), 3)
    # A test swapping a handler in place (dataclasses.replace) with another version range ...
    apis[1] = dataclasses.replace(apis[1], max_version=apis[1].max_version - 1)
    after = encoded(cache.answer(apis, 0, 3), 3)
    assert after != before
    assert after == encoded(api_versions.build_response(apis, 0), 3)
    # ... and an API removed.
    del apis[1]
    assert encoded(cache.answer(apis, 0, 3), 3) == \
        encoded(api_versions.build_response(apis, 0), 3)


def test_a_throttle_time_set_after_the_handler_is_encoded():
    apis = load_handlers()
    cache = api_versions._AnswerCache()
    for v in versions():
        resp = cache.answer(apis, 0, v)
        resp.throttle_time_ms = 250  # what the connection does under a client quota
        expected = api_versions.build_response(apis, 0)
        expected.throttle_time_ms = 250
        assert encoded(resp, v) == encoded(expected, v)
        # The cached answer itself is untouched.
        assert encoded(cache.answer(apis, 0, v), v) == \
            encoded(api_versions.build_response(apis, 0), v)


def test_the_cache_holds_a_bounded_number_of_registries():
    cache = api_versions._AnswerCache()
    regs = [load_handlers() for _ in range(api_versions.ANSWER_CACHE_REGISTRIES + 3)]
    for apis in regs:
        cache.answer(apis, 0, 3)
    assert len(cache._by_registry) == api_versions.ANSWER_CACHE_REGISTRIES
