"""ShareMembership: join/rejoin/leave epochs, subscription sending, assignment adoption,
coordinator errors and backoff, with a fake clock."""

from __future__ import annotations

import uuid

from snakka.client.share_membership import (
    HeartbeatOutcome,
    ShareMembership,
    new_member_id,
)
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.share_group_heartbeat_response import (
    Assignment,
    ShareGroupHeartbeatResponse,
    TopicPartitions,
)

T = uuid.UUID(int=3)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def ok(epoch: int, parts=None, interval: int = 2_000) -> ShareGroupHeartbeatResponse:
    return ShareGroupHeartbeatResponse(
        error_code=0, member_epoch=epoch, heartbeat_interval_ms=interval,
        assignment=None if parts is None else Assignment(
            topic_partitions=[TopicPartitions(topic_id=T, partitions=parts)]))


def err(code: int) -> ShareGroupHeartbeatResponse:
    return ShareGroupHeartbeatResponse(error_code=code, member_epoch=-1)


def test_member_id_is_kafka_style_and_stable():
    a, b = new_member_id(), new_member_id()
    assert a != b and len(a) == 22 and "=" not in a
    m = ShareMembership("g", clock=Clock())
    mid = m.member_id
    m.subscribe(["t"])
    m.on_response(err(ErrorCode.FENCED_MEMBER_EPOCH), m.heartbeat_request())
    assert m.heartbeat_request().member_id == mid


def test_join_adopt_assignment_and_steady_heartbeats():
    c = Clock()
    m = ShareMembership("g", clock=c, rack_id="r1")
    assert not m.active
    assert m.subscribe(["b", "a", "a"]) and not m.subscribe(["a", "b"])
    req = m.heartbeat_request()
    assert req.member_epoch == 0 and req.subscribed_topic_names == ["a", "b"]
    assert req.rack_id == "r1" and req.group_id == "g"
    assert m.on_response(ok(5, [0, 1]), req) == HeartbeatOutcome.OK
    assert m.member_epoch == 5 and m.assignment == {(T, 0), (T, 1)}
    assert m.next_heartbeat_ms == c.now + 2_000 and m.assignment_version == 1
    req = m.heartbeat_request()  # unchanged subscription / rack: not resent
    assert req.member_epoch == 5 and req.subscribed_topic_names is None and req.rack_id is None
    m.on_response(ok(6), req)  # null assignment = unchanged
    assert m.assignment == {(T, 0), (T, 1)} and m.assignment_version == 1
    m.subscribe(["a"])
    assert m.next_heartbeat_ms == 0 and m.heartbeat_request().subscribed_topic_names == ["a"]
    m.on_response(ok(7, []), m.heartbeat_request())
    assert m.assignment == frozenset() and m.assignment_version == 2


def test_fencing_errors_rejoin_from_epoch_zero_at_once():
    for code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID,
                 ErrorCode.STALE_MEMBER_EPOCH):
        m = ShareMembership("g", clock=Clock())
        m.subscribe(["t"])
        m.on_response(ok(3, [0]), m.heartbeat_request())
        m.heartbeat_request()
        assert m.on_response(err(code), m.heartbeat_request()) == HeartbeatOutcome.REJOIN
        assert m.member_epoch == 0 and m.assignment == frozenset() and m.next_heartbeat_ms == 0
        req = m.heartbeat_request()
        assert req.member_epoch == 0 and req.subscribed_topic_names == ["t"]


def test_coordinator_errors_and_backoff():
    c = Clock()
    m = ShareMembership("g", clock=c, retry_backoff_ms=100, retry_backoff_max_ms=300)
    m.subscribe(["t"])
    assert m.on_response(err(ErrorCode.NOT_COORDINATOR), m.heartbeat_request()) == \
        HeartbeatOutcome.FIND_COORDINATOR
    assert m.next_heartbeat_ms == c.now + 100
    assert m.on_response(err(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                         m.heartbeat_request()) == HeartbeatOutcome.RETRY
    assert m.next_heartbeat_ms == c.now + 200
    assert m.on_failure() == HeartbeatOutcome.FIND_COORDINATOR
    assert m.next_heartbeat_ms == c.now + 300  # capped
    m.on_response(ok(1, [0]), m.heartbeat_request())
    m.on_response(err(ErrorCode.COORDINATOR_NOT_AVAILABLE), m.heartbeat_request())
    assert m.next_heartbeat_ms == c.now + 100  # reset by the success
    assert m.assignment == {(T, 0)}  # kept across a coordinator move


def test_fatal_errors_stop_the_member():
    m = ShareMembership("g", clock=Clock())
    m.subscribe(["t"])
    resp = ShareGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                       error_message="no", member_epoch=-1)
    assert m.on_response(resp, m.heartbeat_request()) == HeartbeatOutcome.FATAL
    assert m.fatal_error == (ErrorCode.GROUP_AUTHORIZATION_FAILED, "no") and not m.active


def test_leave_and_subscription_change_while_in_flight():
    c = Clock()
    m = ShareMembership("g", clock=c)
    m.subscribe(["t"])
    sent = m.heartbeat_request()
    m.subscribe(["t", "u"])  # changed while the join was in flight
    m.on_response(ok(1, [0]), sent)
    assert m.next_heartbeat_ms == c.now
    assert m.heartbeat_request().subscribed_topic_names == ["t", "u"]
    leave = m.leave_request()
    assert leave.member_epoch == -1 and leave.member_id == m.member_id
    m.left()
    assert not m.active and m.member_epoch == 0 and m.assignment == frozenset()
