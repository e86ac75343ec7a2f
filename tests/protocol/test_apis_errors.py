"""The API registry (apis.py) and the error-code table (errors.py)."""

from __future__ import annotations

import pytest

from snakka.protocol import API_SPECS, api_spec
from snakka.protocol.errors import DecodeError, ErrorCode, KafkaError


def test_all_api_keys_registered():
    assert sorted(API_SPECS) == list(range(95))
    assert api_spec(999) is None and api_spec(0).name == "Produce"


@pytest.mark.parametrize("key", sorted(API_SPECS))
def test_spec_matches_classes(key):
    spec = API_SPECS[key]
    req, resp = spec.request_class, spec.response_class
    assert req.API_KEY == resp.API_KEY == key
    assert req.NAME == resp.NAME == spec.name
    assert req.VALID_VERSIONS == resp.VALID_VERSIONS == (spec.min_version, spec.max_version)
    assert req.FLEXIBLE_MIN == spec.flexible_min
    assert req.LATEST_VERSION_UNSTABLE == spec.latest_version_unstable
    for v in range(spec.min_version, spec.max_version + 1):
        flexible = spec.flexible_min is not None and v >= spec.flexible_min
        assert spec.is_flexible(v) == flexible
        expected_req = 2 if flexible else (0 if (key, v) == (7, 0) else 1)
        assert spec.request_header_version(v) == expected_req
        assert spec.response_header_version(v) == (1 if flexible and key != 18 else 0)


def test_version_ranges_include_pre_kafka_4_versions():
    assert (API_SPECS[0].min_version, API_SPECS[0].max_version) == (0, 13)  # Produce 0-2 from 3.9
    assert API_SPECS[1].min_version == 0  # Fetch 0-3 from 3.9
    assert API_SPECS[19].min_version == 0  # CreateTopics 0-1 from 3.9
    assert API_SPECS[18].response_header_version(3) == 0  # ApiVersions: always v0


def test_unstable_latest_version_not_advertised():
    spec = API_SPECS[22]
    assert spec.latest_version_unstable and spec.max_stable_version == spec.max_version - 1
    assert all(s.max_stable_version == s.max_version for k, s in API_SPECS.items() if k != 22)


def test_error_codes():
    assert ErrorCode(-1) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_TOPIC_ID == 100
    assert ErrorCode.INCONSISTENT_TOPIC_ID == 103 and ErrorCode.SHARE_SESSION_LIMIT_REACHED == 133
    assert [e.value for e in ErrorCode] == list(range(-1, 134))
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER.retriable and ErrorCode.CORRUPT_MESSAGE.retriable
    assert not ErrorCode.TOPIC_AUTHORIZATION_FAILED.retriable and not ErrorCode.NONE.retriable
    assert ErrorCode.from_code(32000) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert all(e.message for e in ErrorCode)


def test_kafka_error_and_decode_error():
    e = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert e.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and e.retriable and e.message
    e = KafkaError(37, "need at least one partition")
    assert e.code is ErrorCode.INVALID_PARTITIONS and e.message == "need at least one partition"
    assert issubclass(DecodeError, ValueError)


def test_constructor_none_means_null_only_for_nullable_fields():
    from snakka.protocol.messages.fetch_response import PartitionData
    from snakka.protocol.messages.metadata_request import MetadataRequest
    from snakka.protocol.messages.produce_request import ProduceRequest

    assert MetadataRequest().topics == [] and MetadataRequest(topics=None).topics is None
    assert MetadataRequest(topics=None).encode(4) == b"\xff\xff\xff\xff\x01"  # null = all topics
    assert PartitionData(aborted_transactions=None).aborted_transactions is None
    # non-nullable array: None just asks for a fresh default
    a, b = ProduceRequest(topic_data=None), ProduceRequest()
    assert a.topic_data == [] and b.topic_data == [] and a.topic_data is not b.topic_data


def test_scatter_buffer_frames_equal_copied_frames():
    """A Fetch response written into a ScatterBuffer (large record sets kept by reference) puts
    exactly the same bytes on the wire as one copied into a plain bytearray."""
    from snakka.protocol import ScatterBuffer, write_response
    from snakka.protocol.messages.fetch_response import (
        FetchableTopicResponse,
        FetchResponse,
        PartitionData,
    )

    big = bytes(range(256)) * 1024  # 256 KiB: above the zero-copy threshold
    small = b"x" * 100
    for version in (4, 11, 12, 16):
        resp = FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[
            PartitionData(partition_index=0, records=big),
            PartitionData(partition_index=1, records=small),
            PartitionData(partition_index=2, records=memoryview(big)),
        ])])
        plain = bytearray()
        write_response(plain, 7, 1, version, resp)
        sb = ScatterBuffer()
        write_response(sb, 7, 1, version, resp)
        assert len(sb.chunks) == 2
        assert b"".join(bytes(p) for p in sb.pieces()) == bytes(plain)
