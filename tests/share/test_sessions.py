"""Share-session cache (share.sessions): Kafka's epoch rules, incremental partition lists, limits
and connection ownership, with a fake clock."""

from __future__ import annotations

import uuid

import pytest

from snakka.protocol.errors import ErrorCode
from snakka.share.sessions import ShareSessionCache, next_epoch

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def cache() -> ShareSessionCache:
    return ShareSessionCache(3, Clock())


def _open(cache, member="m1", parts=((T1, 0),), conn="c1"):
    ctx = cache.new_fetch_context("g", member, 0, parts, [], has_acks=False, connection=conn)
    assert ctx.error == ErrorCode.NONE
    return ctx


def test_epoch_zero_opens_a_session_with_the_request_partitions(cache):
    ctx = _open(cache, parts=[(T1, 0), (T1, 1)])
    assert ctx.kind == "full" and ctx.partitions == [(T1, 0), (T1, 1)]
    s = cache.get("g", "m1")
    assert s is not None and s.epoch == 1


def test_incremental_fetch_adds_and_forgets_partitions(cache):
    _open(cache, parts=[(T1, 0), (T1, 1)])
    ctx = cache.new_fetch_context("g", "m1", 1, [(T2, 0)], [(T1, 0)], has_acks=True)
    assert ctx.error == ErrorCode.NONE and ctx.kind == "incremental"
    assert ctx.partitions == [(T1, 1), (T2, 0)]
    # A partition named in both lists is forgotten (updates apply before forgets, as Kafka).
    ctx = cache.new_fetch_context("g", "m1", 2, [(T1, 5)], [(T1, 5)], has_acks=False)
    assert ctx.partitions == [(T1, 1), (T2, 0)]
    assert cache.get("g", "m1").epoch == 3


@pytest.mark.parametrize("epoch", [2, 7, -2])
def test_wrong_epoch_is_invalid_share_session_epoch_and_changes_nothing(cache, epoch):
    _open(cache)
    ctx = cache.new_fetch_context("g", "m1", epoch, [(T2, 0)], [], has_acks=False)
    assert ctx.error == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    s = cache.get("g", "m1")
    assert s.epoch == 1 and list(s.partitions) == [(T1, 0)]
    # the right epoch still works afterwards
    assert cache.new_fetch_context("g", "m1", 1, [], [], has_acks=False).error == ErrorCode.NONE


def test_unknown_session_is_share_session_not_found(cache):
    assert cache.new_fetch_context("g", "m1", 1, [], [], has_acks=False).error == \
        ErrorCode.SHARE_SESSION_NOT_FOUND
    assert cache.new_fetch_context("g", "m1", -1, [], [], has_acks=True).error == \
        ErrorCode.SHARE_SESSION_NOT_FOUND
    _open(cache, member="m1")
    # sessions are per (group, member)
    assert cache.new_fetch_context("other", "m1", 1, [], [], has_acks=False).error == \
        ErrorCode.SHARE_SESSION_NOT_FOUND


def test_acknowledgements_in_an_opening_fetch_are_invalid_request(cache):
    ctx = cache.new_fetch_context("g", "m1", 0, [(T1, 0)], [], has_acks=True)
    assert ctx.error == ErrorCode.INVALID_REQUEST
    assert cache.get("g", "m1") is None


def test_epoch_zero_replaces_an_existing_session(cache):
    _open(cache, parts=[(T1, 0)])
    cache.new_fetch_context("g", "m1", 1, [(T1, 1)], [], has_acks=False)
    ctx = _open(cache, parts=[(T2, 3)], conn="c2")
    assert ctx.partitions == [(T2, 3)]
    s = cache.get("g", "m1")
    assert s.epoch == 1 and list(s.partitions) == [(T2, 3)] and s.connection == "c2"
    assert len(cache) == 1


def test_final_fetch_fetches_nothing_and_forgetting_is_invalid(cache):
    _open(cache)
    ctx = cache.new_fetch_context("g", "m1", -1, [(T1, 0)], [], has_acks=True)
    assert ctx.error == ErrorCode.NONE and ctx.kind == "final" and ctx.partitions == []
    ctx = cache.new_fetch_context("g", "m1", -1, [], [(T1, 0)], has_acks=False)
    assert ctx.error == ErrorCode.INVALID_REQUEST


def test_session_limit(cache):
    for m in ("a", "b", "c"):
        _open(cache, member=m)
    ctx = cache.new_fetch_context("g", "d", 0, [(T1, 0)], [], has_acks=False)
    assert ctx.error == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    # Re-opening an existing member's session does not need a new slot.
    _open(cache, member="a")
    cache.remove("g", "b")
    _open(cache, member="d")
    assert len(cache) == 3


def test_share_acknowledge_epochs(cache):
    assert cache.acknowledge_update("g", "m1", 1) == ErrorCode.SHARE_SESSION_NOT_FOUND
    _open(cache)
    assert cache.acknowledge_update("g", "m1", 0) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledge_update("g", "m1", 2) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledge_update("g", "m1", 1) == ErrorCode.NONE
    assert cache.get("g", "m1").epoch == 2
    # a ShareFetch must then carry epoch 2
    assert cache.new_fetch_context("g", "m1", 1, [], [], has_acks=False).error == \
        ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledge_update("g", "m1", -1) == ErrorCode.NONE
    assert cache.get("g", "m1").epoch == 2  # the final epoch does not advance the session


def test_connection_close_removes_only_sessions_last_used_on_it(cache):
    _open(cache, member="a", conn="c1")
    _open(cache, member="b", conn="c1")
    _open(cache, member="c", conn="c2")
    # member b moved to a new connection with a new session
    _open(cache, member="b", conn="c3")
    gone = cache.remove_connection("c1")
    assert [s.member_id for s in gone] == ["a"]
    assert cache.get("g", "b") is not None and cache.get("g", "c") is not None
    assert cache.remove_connection("c1") == []


def test_group_and_topic_removal(cache):
    _open(cache, member="a", parts=[(T1, 0), (T2, 0)])
    cache.new_fetch_context("h", "x", 0, [(T1, 0)], [], has_acks=False)
    cache.forget_topic(T1)
    assert list(cache.get("g", "a").partitions) == [(T2, 0)]
    assert [s.member_id for s in cache.remove_group("g")] == ["a"]
    assert cache.group_has_sessions("h") and not cache.group_has_sessions("g")


def test_epochs_wrap_to_one():
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1


def test_rotate_partitions_round_robin_by_session_epoch():
    """Kafka's PartitionRotateStrategy.rotateRoundRobin: left by epoch % n; none for the
    initial (0) and final (-1) epochs or a single partition."""
    from snakka.share.sessions import rotate_partitions

    ps = [("t", 0), ("t", 1), ("t", 2)]
    assert rotate_partitions(ps, 0) == ps
    assert rotate_partitions(ps, -1) == ps
    assert rotate_partitions(ps, 1) == [("t", 1), ("t", 2), ("t", 0)]
    assert rotate_partitions(ps, 2) == [("t", 2), ("t", 0), ("t", 1)]
    assert rotate_partitions(ps, 3) == ps
    assert rotate_partitions(ps, 2**31 - 1) == rotate_partitions(ps, (2**31 - 1) % 3)
    assert rotate_partitions(ps[:1], 5) == ps[:1]
    assert rotate_partitions([], 5) == []
