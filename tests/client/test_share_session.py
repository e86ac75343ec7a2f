"""ShareSession: Kafka's share-session epoch rules and incremental partition lists."""

from __future__ import annotations

import uuid

import pytest

from snakka.client.share_session import (
    FINAL_EPOCH,
    INT32_MAX,
    FetchParams,
    ShareSession,
    next_epoch,
)
from snakka.protocol.errors import ErrorCode
from snakka.protocol.share import AckBatch

A, B = uuid.UUID(int=1), uuid.UUID(int=2)
P = FetchParams(max_wait_ms=100, max_records=50, batch_size=50)


def listed(req) -> set:
    return {(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions}


def forgotten(req) -> set:
    return {(t.topic_id, p) for t in req.forgotten_topics_data for p in t.partitions}


def test_next_epoch_wraps_and_final_stays_final():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_open_then_incremental_add_and_forget():
    s = ShareSession(1)
    req = s.fetch_request("g", "m", {(A, 0), (A, 1)}, {}, P, 1)
    assert req.share_session_epoch == 0 and listed(req) == {(A, 0), (A, 1)}
    assert req.max_records == 50 and req.max_wait_ms == 100 and forgotten(req) == set()
    s.fetch_done(0)
    assert s.epoch == 1 and s.partitions == {(A, 0), (A, 1)}
    # unchanged set, no acks: nothing listed
    req = s.fetch_request("g", "m", {(A, 0), (A, 1)}, {}, P, 1)
    assert req.share_session_epoch == 1 and listed(req) == set() and forgotten(req) == set()
    s.fetch_done(0)
    # (A,1) revoked, (B,0) added, acks for (A,0) ride along
    acks = {(A, 0): [AckBatch(3, 5, (1,))]}
    req = s.fetch_request("g", "m", {(A, 0), (B, 0)}, acks, P, 2)
    assert req.share_session_epoch == 2
    assert listed(req) == {(A, 0), (B, 0)} and forgotten(req) == {(A, 1)}
    (pa,) = [p for t in req.topics if t.topic_id == A for p in t.partitions]
    assert [(b.first_offset, b.last_offset, b.acknowledge_types)
            for b in pa.acknowledgement_batches] == [(3, 5, [1])]
    s.fetch_done(0)
    assert s.epoch == 3 and s.partitions == {(A, 0), (B, 0)}


def test_acks_never_ride_on_an_opening_fetch():
    s = ShareSession(1)
    with pytest.raises(ValueError):
        s.fetch_request("g", "m", {(A, 0)}, {(A, 0): [AckBatch(0, 0, (1,))]}, P, 1)
    with pytest.raises(ValueError):
        s.acknowledge_request("g", "m", {(A, 0): [AckBatch(0, 0, (1,))]})


@pytest.mark.parametrize("code", [ErrorCode.SHARE_SESSION_NOT_FOUND,
                                  ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                  ErrorCode.UNKNOWN_SERVER_ERROR])
def test_errors_reset_to_a_new_session(code):
    s = ShareSession(1)
    s.fetch_request("g", "m", {(A, 0)}, {}, P, 1)
    s.fetch_done(0)
    s.fetch_request("g", "m", {(A, 0)}, {}, P, 1)
    s.fetch_done(code)
    assert s.epoch == 0 and s.partitions == set()
    req = s.fetch_request("g", "m", {(A, 0)}, {}, P, 1)
    assert req.share_session_epoch == 0 and listed(req) == {(A, 0)}


def test_acknowledge_increments_and_final_closes():
    s = ShareSession(1)
    s.fetch_request("g", "m", {(A, 0)}, {}, P, 1)
    s.fetch_done(0)
    req = s.acknowledge_request("g", "m", {(A, 0): [AckBatch(0, 1, (1, 4))]})
    assert req.share_session_epoch == 1 and req.is_renew_ack
    s.acknowledge_done(0)
    assert s.epoch == 2
    req = s.acknowledge_request("g", "m", {}, final=True)
    assert req.share_session_epoch == FINAL_EPOCH and req.topics == [] and not req.is_renew_ack
    s.acknowledge_done(0, final=True)
    assert s.epoch == 0 and not s.established


def test_v0_sends_partition_max_bytes():
    s = ShareSession(1)
    req = s.fetch_request("g", "m", {(A, 0)}, {}, FetchParams(partition_max_bytes=1234), 0)
    assert req.topics[0].partitions[0].partition_max_bytes == 1234
    req = ShareSession(1).fetch_request("g", "m", {(A, 0)}, {}, FetchParams(), 1)
    assert req.topics[0].partitions[0].partition_max_bytes == 0
