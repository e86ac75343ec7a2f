"""The response size a Fetch records against ``consumer_byte_rate`` (handlers/fetch.py's
``_response_size``, Kafka's FetchResponse.sizeOf: 4 + the encoded body) equals the codec's
encoding of the same response, for every version snakka serves and the shapes a response
takes (topics by name or id, aborted transactions null / empty / listed, empty records)."""

from __future__ import annotations

import uuid

import pytest

from snakka.handlers.fetch import _response_size
from snakka.protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)


def _rows(by_id: bool, read_committed: bool):
    topics = [uuid.uuid4(), uuid.uuid4()] if by_id else ["orders", "ünïcode-topic"]
    rows = []
    for t, tkey in enumerate(topics):
        for p in range(3 + t * 200):  # 200+ partitions: a two-byte compact array length
            aborted = None
            if read_committed:
                aborted = [AbortedTransaction(producer_id=7, first_offset=i) for i in range(p % 3)]
            records = b"r" * (p * 37 % 300)
            rows.append((tkey, None, PartitionData(
                partition_index=p, error_code=0, high_watermark=10, last_stable_offset=10,
                log_start_offset=0, aborted_transactions=aborted, preferred_read_replica=-1,
                records=records)))
    return rows


@pytest.mark.parametrize("version", range(4, 18))
@pytest.mark.parametrize("read_committed", [False, True])
def test_response_size_matches_the_codec(version, read_committed):
    by_id = version >= 13  # topics are named before v13, identified from v13
    rows = _rows(by_id, read_committed)
    topics: dict[object, list[PartitionData]] = {}
    for tkey, _cp, pd in rows:
        topics.setdefault(tkey, []).append(pd)
    resp = FetchResponse(
        throttle_time_ms=123, error_code=0, session_id=5,
        responses=[FetchableTopicResponse(topic_id=k, partitions=ps) if by_id
                   else FetchableTopicResponse(topic=k, partitions=ps)
                   for k, ps in topics.items()])
    records = sum(len(pd.records) for _t, _c, pd in rows)
    assert _response_size(version, rows, by_id, records) == 4 + len(resp.encode(version))
    # Bytes Kafka counts beyond what is sent (a cut batch) add one for one.
    assert _response_size(version, rows, by_id, records + 999) == \
        4 + len(resp.encode(version)) + 999


def test_empty_response_size():
    resp = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[])
    for version in range(4, 18):
        assert _response_size(version, [], False, 0) == 4 + len(resp.encode(version))
