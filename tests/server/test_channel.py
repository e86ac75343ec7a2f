"""The sans-I/O connection core (server/channel.py), without sockets or an event loop: framing
(including hypothesis over random splits of the byte stream), response order, the in-flight
bound, the arrival clock, response-memory accounting and the read/pause decisions."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snakka.protocol import decode_response_header, encode_request
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.api_versions_response import ApiVersionsResponse
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.security.principal import ANONYMOUS, SecurityProtocol
from snakka.server.authentication import AuthState
from snakka.server.channel import (
    CLOSE,
    NEED_DATA,
    NO_RESPONSE,
    PAUSED,
    ChannelLimits,
    CloseConnection,
    KafkaChannel,
    RequestReceived,
    Send,
)
from snakka.server.memory import ResponseMemoryPool

LIMITS = ChannelLimits(max_request_bytes=10_000, max_inflight_requests=4,
                       max_buffered_response_bytes=1_000, request_arrival_timeout_ms=2_000)


def channel(limits: ChannelLimits = LIMITS, budget: int = 1 << 20,
            **kw) -> tuple[KafkaChannel, ResponseMemoryPool]:
    pool = ResponseMemoryPool(budget)
    return KafkaChannel(limits, pool, now=0.0, **kw), pool


def requests(n: int, metadata: bool = True) -> list[bytes]:
    """``n`` encoded requests of varied versions and sizes (ApiVersions, and every third a
    Metadata when ``metadata``); correlation ids 1..n."""
    out = []
    for corr in range(1, n + 1):
        if metadata and corr % 3 == 0:
            out.append(encode_request(corr, "c" * corr, 9, MetadataRequest(
                topics=[MetadataRequestTopic(name=f"t{i}") for i in range(corr % 7)])))
        else:
            out.append(encode_request(corr, "client", corr % 4, ApiVersionsRequest(
                client_software_name="x", client_software_version=str(corr))))
    return out


def drain_events(ch: KafkaChannel, now: float = 0.0) -> list:
    out = []
    while True:
        ev = ch.next_event(now)
        if ev is NEED_DATA or ev is PAUSED:
            return out
        out.append(ev)
        if isinstance(ev, CloseConnection):
            return out


def answer(corr: int) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=0, api_keys=[], throttle_time_ms=corr)


def sent_correlation_ids(items: list) -> list[int]:
    ids = []
    for item in items:
        assert isinstance(item, Send), item
        frame = bytes(b"".join(bytes(p) for p in item.pieces()))
        size = struct.unpack_from(">i", frame, 0)[0]
        assert size == len(frame) - 4
        header, _ = decode_response_header(frame[4:], 18, 0)
        ids.append(header.correlation_id)
    return ids


# -- framing -------------------------------------------------------------------------------
def test_frames_and_fixed_header():
    ch, _ = channel()
    wire = requests(3)
    ch.receive_data(b"".join(wire), now=1.0)
    events = drain_events(ch)
    assert [(e.request_id, e.correlation_id) for e in events] == [(0, 1), (1, 2), (2, 3)]
    assert [(e.api_key, e.api_version) for e in events] == [(18, 1), (18, 2), (3, 9)]
    assert [bytes(e.frame) for e in events] == [w[4:] for w in wire]
    assert ch.request_started is None and ch.last_active == 1.0


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 8), cuts=st.lists(st.integers(0, 2000), max_size=30))
def test_random_splits_give_the_same_requests(n, cuts):
    wire = b"".join(requests(n))
    points = sorted({c % (len(wire) + 1) for c in cuts} | {0, len(wire)})
    limits = ChannelLimits(10_000, 100, 1_000, 2_000)
    ch, _ = channel(limits)
    events = []
    for a, b in zip(points, points[1:], strict=False):
        ch.receive_data(wire[a:b], now=0.0)
        events += drain_events(ch)
        # A partial request is being timed exactly while bytes of one are buffered.
        assert (ch.request_started is not None) == (ch.buffered_request_bytes > 0)
    assert [e.correlation_id for e in events] == list(range(1, n + 1))
    assert b"".join(struct.pack(">i", len(e.frame)) + bytes(e.frame) for e in events) == wire


@pytest.mark.parametrize("size", [-1, 0, 3, 7, 10_001, 0x7FFFFFFF])
def test_impossible_sizes_close(size):
    ch, _ = channel()
    ch.receive_data(struct.pack(">i", size) + b"\0" * 16, now=0.0)
    ev = ch.next_event(0.0)
    assert isinstance(ev, CloseConnection)
    assert "socket.request.max.bytes=10000" in ev.reason
    assert ch.next_event(0.0) is PAUSED  # closed: nothing more is read
    ch.receive_data(b"more", now=0.0)
    assert ch.next_event(0.0) is PAUSED


def test_largest_allowed_frame_is_read():
    limits = ChannelLimits(100, 4, 1_000, 2_000)
    ch, _ = channel(limits)
    frame = struct.pack(">hhi", 18, 0, 7) + b"\0" * 92
    ch.receive_data(struct.pack(">i", 100) + frame, now=0.0)
    ev = ch.next_event(0.0)
    assert isinstance(ev, RequestReceived) and ev.correlation_id == 7


# -- arrival clock -------------------------------------------------------------------------
def test_arrival_clock_times_only_incomplete_requests():
    ch, _ = channel()
    wire = requests(1)[0]
    ch.receive_data(wire[:3], now=10.0)
    assert ch.next_event(10.0) is NEED_DATA and ch.request_started == 10.0
    ch.receive_data(wire[3:-1], now=11.5)  # bytes arriving do not restart the clock
    assert ch.next_event(11.5) is NEED_DATA and ch.request_started == 10.0
    assert not ch.arrival_overdue(12.0)
    assert ch.arrival_overdue(12.01)  # socket.request.arrival.timeout.ms = 2000
    ch.receive_data(wire[-1:], now=12.0)
    assert isinstance(ch.next_event(12.0), RequestReceived)
    assert ch.next_event(12.0) is NEED_DATA and ch.request_started is None
    assert not ch.arrival_overdue(100.0)


def test_arrival_clock_stops_while_we_do_not_read():
    ch, _ = channel(ChannelLimits(10_000, 1, 1_000, 2_000))
    wire = requests(2)
    ch.receive_data(wire[0] + wire[1][:5], now=0.0)
    assert isinstance(ch.next_event(0.0), RequestReceived)
    assert ch.next_event(0.0) is PAUSED  # in-flight bound: the rest is our delay
    assert ch.request_started is None and not ch.arrival_overdue(1000.0)


# -- order and the in-flight bound ---------------------------------------------------------
def test_responses_leave_in_request_order():
    ch, _ = channel()
    ch.receive_data(b"".join(requests(4, metadata=False)), now=0.0)
    ids = drain_events(ch)
    assert ch.complete(ids[2], answer(3), now=1.0) == []
    assert ch.complete(ids[1], NO_RESPONSE, now=1.0) == []
    assert sent_correlation_ids(ch.complete(ids[0], answer(1), now=1.0)) == [1, 3]
    assert ch.inflight == 1
    assert sent_correlation_ids(ch.complete(ids[3], answer(4), now=2.0)) == [4]
    assert ch.inflight == 0 and ch.last_active == 2.0


@settings(max_examples=100, deadline=None)
@given(order=st.permutations(range(6)), silent=st.sets(st.integers(0, 5)))
def test_any_completion_order_answers_in_request_order(order, silent):
    ch, _ = channel(ChannelLimits(10_000, 10, 1_000, 2_000))
    ch.receive_data(b"".join(requests(6, metadata=False)), now=0.0)
    events = drain_events(ch)
    sent = []
    for i in order:
        result = NO_RESPONSE if i in silent else answer(i + 1)
        sent += sent_correlation_ids(ch.complete(events[i], result, now=0.0))
    assert sent == [i + 1 for i in range(6) if i not in silent]
    assert ch.inflight == 0


def test_inflight_bound_pauses_reading_until_answers_leave():
    ch, _ = channel()  # queued.max.requests = 4
    ch.receive_data(b"".join(requests(6, metadata=False)), now=0.0)
    events = drain_events(ch)
    assert len(events) == 4 and ch.inflight == 4
    assert ch.read_decision(0) == (True, False)
    # Answers queued behind an unanswered request still count (they are not written yet).
    for ev in events[1:]:
        ch.complete(ev, answer(ev.correlation_id), now=0.0)
    assert ch.read_decision(0) == (True, False) and ch.next_event(0.0) is PAUSED
    assert len(ch.complete(events[0], answer(1), now=0.0)) == 4
    assert ch.read_decision(0) == (False, False)
    assert [e.correlation_id for e in drain_events(ch)] == [5, 6]


def test_close_is_ordered_behind_earlier_responses():
    ch, _ = channel()
    ch.receive_data(b"".join(requests(3, metadata=False)), now=0.0)
    a, b, c = drain_events(ch)
    assert ch.complete(b, CLOSE, now=0.0) == []
    out = ch.complete(a, answer(1), now=0.0)
    assert sent_correlation_ids(out[:1]) == [1]
    assert out[1] == CloseConnection(None) and ch.closed
    assert ch.complete(c, answer(3), now=0.0) == []  # nothing after the close


def test_unencodable_response_closes_with_its_exception():
    ch, _ = channel()
    ch.receive_data(requests(1)[0], now=0.0)
    (ev,) = drain_events(ch)
    out = ch.complete(ev, object(), now=0.0)
    assert len(out) == 1 and isinstance(out[0], CloseConnection)
    assert "cannot encode response to API key 18" in out[0].reason and out[0].exc is not None
    assert ch.closed


def test_completing_unknown_or_twice_is_a_bug():
    ch, _ = channel()
    ch.receive_data(b"".join(requests(2, metadata=False)), now=0.0)
    a, b = drain_events(ch)
    ch.complete(b, answer(2), now=0.0)
    with pytest.raises(AssertionError):
        ch.complete(b, answer(2), now=0.0)
    stranger, _ = channel()
    stranger.receive_data(requests(1, metadata=False)[0], now=0.0)
    with pytest.raises(AssertionError):
        ch.complete(stranger.next_event(0.0), answer(2), now=0.0)


# -- response memory -----------------------------------------------------------------------
def test_written_bytes_are_charged_until_drained():
    ch, pool = channel(budget=1000)
    ch.receive_data(requests(1)[0], now=0.0)
    (ev,) = drain_events(ch)
    grant = ch.reserve_response_bytes(300)
    assert grant == 300 and pool.used == 300 and ch.held == 300
    (send,) = ch.complete(ev, answer(1), reserved=grant, now=0.0)
    size = send.total_length()
    assert pool.used == ch.held == size  # the reservation became the frame's charge
    ch.drained(now=5.0)
    assert pool.used == ch.held == 0 and ch.last_active == 5.0


def test_reserve_shrinks_floors_and_refuses():
    ch, pool = channel(budget=1000)
    other, _ = channel(budget=1)
    assert ch.reserve_response_bytes(600) == 600
    assert ch.reserve_response_bytes(600) == 400  # what is left
    assert ch.reserve_response_bytes(10) is None  # spent, and this channel holds bytes
    fresh = KafkaChannel(LIMITS, pool, now=0.0)
    assert fresh.reserve_response_bytes(10) == 0  # holds nothing: the first batch only
    ch.settle_response_bytes(1000, 0)
    assert pool.used == 0 and ch.held == 0
    assert other.reserve_response_bytes(5) == 1


def test_memory_pause_and_buffered_pause():
    ch, pool = channel(budget=100)
    ch.receive_data(requests(1)[0], now=0.0)
    (ev,) = drain_events(ch)
    ch.complete(ev, answer(1), now=0.0)  # not drained: held
    assert ch.read_decision(0) == (False, False)
    pool.charge(200)  # someone else spent the budget
    assert ch.read_decision(0) == (True, True)  # holds unsent bytes: wait for a release
    idle, _ = channel(budget=100)
    assert idle.read_decision(0) == (False, False)
    pool.release(200)
    assert ch.read_decision(0) == (False, False)
    assert ch.read_decision(1_001) == (True, False)  # queued.max.response.bytes.per.connection
    assert ch.next_event(0.0) is PAUSED


def test_close_gives_everything_back():
    ch, pool = channel(budget=1000)
    ch.receive_data(b"".join(requests(2, metadata=False)) + b"\0\0", now=0.0)
    a, b = drain_events(ch)
    ch.reserve_response_bytes(100)
    ch.complete(a, answer(1), now=0.0)
    assert pool.used > 0
    assert ch.close() > 0
    assert pool.used == 0 and ch.held == 0 and ch.inflight == 0
    assert ch.reserve_response_bytes(50) == 50 and pool.used == 0  # nothing counted now
    assert ch.complete(b, answer(2), now=0.0) == []


def test_write_progress_counts_as_activity():
    ch, _ = channel()
    ch.note_write_progress(500, now=1.0)
    assert ch.last_active == 0.0  # more buffered than before: no progress
    ch.note_write_progress(200, now=2.0)
    assert ch.last_active == 2.0


def test_limits_come_from_the_kafka_configs():
    from snakka.config import BrokerConfig
    limits = ChannelLimits.from_config(BrokerConfig({
        "socket.request.max.bytes": "1234", "queued.max.requests": "7",
        "queued.max.response.bytes.per.connection": "99",
        "socket.request.arrival.timeout.ms": "5000"}))
    assert limits == ChannelLimits(1234, 7, 99, 5000)


# -- typed state ---------------------------------------------------------------------------
def test_plaintext_starts_authenticated_as_anonymous_sasl_does_not():
    plain, _ = channel()
    assert plain.auth.state is AuthState.AUTHENTICATED and plain.auth.principal == ANONYMOUS
    sasl, _ = channel(security_protocol=SecurityProtocol.SASL_PLAINTEXT,
                      listener_name="CLIENTS")
    assert sasl.auth.state is AuthState.UNAUTHENTICATED and sasl.auth.principal is None
    assert (sasl.listener_name, sasl.security_protocol) == (
        "CLIENTS", SecurityProtocol.SASL_PLAINTEXT)
    assert plain.client_information is None
