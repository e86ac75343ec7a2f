"""KIP-227 fetch session cache: session life cycle, epochs, eviction, change detection."""

from snakka.fetch_sessions import EVICTION_MS, CachedPartition, FetchSessionCache
from snakka.protocol.errors import ErrorCode


class Clock:
    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


def cp(offset=0):
    return CachedPartition(fetch_offset=offset, max_bytes=1 << 20)


def test_full_then_incremental():
    c = FetchSessionCache(10, Clock())
    ctx = c.resolve(0, 0, [(("t", 0), cp()), (("t", 1), cp())], [])
    assert ctx.error == ErrorCode.NONE and ctx.session_id > 0 and not ctx.incremental
    sid = ctx.session_id
    ctx = c.resolve(sid, 1, [(("t", 0), cp(5))], [])
    assert ctx.incremental and len(ctx.partitions) == 2
    assert dict(ctx.partitions)[("t", 0)].fetch_offset == 5
    ctx = c.resolve(sid, 2, [], [("t", 1)])
    assert [k for k, _ in ctx.partitions] == [("t", 0)]


def test_epoch_and_id_errors():
    c = FetchSessionCache(10, Clock())
    sid = c.resolve(0, 0, [(("t", 0), cp())], []).session_id
    assert c.resolve(sid, 5, [], []).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert c.resolve(sid + 1, 1, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # closing with epoch -1 makes a sessionless fetch
    ctx = c.resolve(sid, -1, [(("t", 0), cp())], [])
    assert ctx.session_id == 0 and ctx.error == ErrorCode.NONE
    assert c.resolve(sid, 1, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_sessionless_and_disabled_cache():
    c = FetchSessionCache(0, Clock())
    ctx = c.resolve(0, 0, [(("t", 0), cp())], [])
    assert ctx.session_id == 0 and len(ctx.partitions) == 1
    assert len(c) == 0


def test_bounded_slots_evict_only_idle_sessions():
    clock = Clock()
    c = FetchSessionCache(1, clock)
    first = c.resolve(0, 0, [(("t", 0), cp())], []).session_id
    assert c.resolve(0, 0, [(("t", 0), cp())], []).session_id == 0  # full, not idle
    clock.now += EVICTION_MS
    second = c.resolve(0, 0, [(("t", 0), cp())], []).session_id
    assert second not in (0, first)
    assert c.resolve(first, 1, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_change_detection():
    p = cp()
    assert p.needs_response(10, 10, 0)
    p.record_sent(10, 10, 0)
    assert not p.needs_response(10, 10, 0)
    assert p.needs_response(11, 11, 0)
