"""ShareFetch / ShareAcknowledge (KIP-932) at the protocol level against an in-process broker:
acquisition, the four acknowledgement types, lock expiry and redelivery, the delivery-count
limit, long polls woken by produce and by release, share-session errors and bad
acknowledgements. Members join through ShareGroupHeartbeat, as real share consumers do."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from snakka.protocol.errors import ErrorCode

from .helpers import raw_connect, run_async
from .share_protocol import (
    ACCEPT,
    REJECT,
    RELEASE,
    RENEW,
    ShareMember,
    ack_errors,
    acks,
    create_topic,
    produce,
    set_group_configs,
)

# Kafka's minimum lock duration is 1 s once group.share.min.record.lock.duration.ms allows it.
SHORT_LOCKS = {"group.share.min.record.lock.duration.ms": "1000",
               "group.share.record.lock.duration.ms": "1000"}


async def _setup(bs, topic, partitions=1, *, group="g", values=None, configs=None):
    admin = await raw_connect(bs)
    tid = await create_topic(admin, topic, partitions)
    await set_group_configs(admin, group, {"share.auto.offset.reset": "earliest",
                                           **(configs or {})})
    if values:
        await produce(admin, topic, 0, values)
    return admin, tid


async def _member(bs, group, topic):
    m = await ShareMember.connect(bs, group)
    await m.join([topic])
    return m


def test_acquire_accept_release_reject(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-basic", values=[b"v%d" % i for i in range(10)])
        a = await _member(bs, "g", "sf-basic")
        tp = (tid, 0)
        f = await a.fetch([tp])
        got = f.records(*tp)
        assert [(o, v, c) for o, v, c in got] == [(i, b"v%d" % i, 1) for i in range(10)]
        assert f.lock_ms == 30_000
        # accept 0-3, release 4-5, reject 6, accept 7-9 (piggy-backed on the next fetch)
        f = await a.fetch(ack={tp: acks((0, 3, ACCEPT), (4, 6, [RELEASE, RELEASE, REJECT]),
                                        (7, 9, ACCEPT))})
        assert ack_errors(f) == {tp: 0}
        # The released records come back at once, in the same response (delivery count 2);
        # the rejected one never does.
        assert f.records(*tp) == [(4, b"v4", 2), (5, b"v5", 2)]
        # Acknowledging an acknowledged record again is INVALID_RECORD_STATE; the request is
        # atomic, so 4-5 are not accepted by it either.
        errs = await a.acknowledge({tp: acks((4, 5, ACCEPT), (7, 7, ACCEPT))})
        assert errs == {tp: ErrorCode.INVALID_RECORD_STATE}
        errs = await a.acknowledge({tp: acks((4, 5, ACCEPT))})
        assert errs == {tp: 0}
        f = await a.fetch()
        assert f.records(*tp) == []
        # Offsets before the share-partition start offset are done: skipped without error.
        errs = await a.acknowledge({tp: acks((0, 0, ACCEPT))})
        assert errs == {tp: 0}
        await a.close()
        await admin.close()

    run_async(go())


def test_records_go_to_one_member_at_a_time(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-two", values=[b"x%d" % i for i in range(6)])
        a = await _member(bs, "g", "sf-two")
        b = await _member(bs, "g", "sf-two")
        tp = (tid, 0)
        fa = await a.fetch([tp], max_records=3, batch_size=3, mode=1)
        fb = await b.fetch([tp], max_records=3, batch_size=3, mode=1)
        oa = [o for o, _v, _c in fa.records(*tp)]
        ob = [o for o, _v, _c in fb.records(*tp)]
        assert oa == [0, 1, 2] and ob == [3, 4, 5]
        # b cannot acknowledge a's records
        assert await b.acknowledge({tp: acks((0, 2, ACCEPT))}) == \
            {tp: ErrorCode.INVALID_RECORD_STATE}
        # a leaves the group (heartbeat epoch -1) but keeps its share session: its records
        # stay with it, so that its final acknowledgements (sent after leaving, as librdkafka
        # does) still count; closing its connection then releases the rest to b.
        assert (await a.heartbeat(epoch=-1)).error_code == 0
        fb = await b.fetch(ack={tp: acks((3, 5, ACCEPT))})
        assert fb.records(*tp) == []
        assert await a.acknowledge({tp: acks((0, 0, ACCEPT))}) == {tp: 0}
        await a.close()
        fb = await b.fetch(max_wait_ms=5000)
        assert [(o, c) for o, _v, c in fb.records(*tp)] == [(1, 2), (2, 2)]
        await b.close()
        await admin.close()

    run_async(go())


def test_lock_expiry_redelivers_and_renew_extends(snakka_broker_factory):
    broker = snakka_broker_factory(config=SHORT_LOCKS)
    bs = broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-lock", values=[b"a", b"b"])
        m = await _member(bs, "g", "sf-lock")
        tp = (tid, 0)
        f = await m.fetch([tp])
        assert f.lock_ms == 1000
        assert [o for o, _v, _c in f.records(*tp)] == [0, 1]
        # Renew offset 0 (v2, IsRenewAck); let offset 1's lock expire.
        t0 = time.monotonic()
        await asyncio.sleep(0.6)
        assert await m.acknowledge({tp: acks((0, 0, RENEW))}, renew=True) == {tp: 0}
        # A long poll is woken by the expiry of offset 1 (well before its 5 s max wait).
        f = await m.fetch(max_wait_ms=5000)
        assert [(o, c) for o, _v, c in f.records(*tp)] == [(1, 2)]
        assert time.monotonic() - t0 < 4
        # offset 0 is still ours after the renewal: accepting it works
        assert await m.acknowledge({tp: acks((0, 1, ACCEPT))}) == {tp: 0}
        await m.close()
        await admin.close()

    run_async(go())


def test_delivery_count_limit_archives_a_poison_record(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-poison", values=[b"poison"],
                                  configs={"share.delivery.count.limit": "3"})
        m = await _member(bs, "g", "sf-poison")
        tp = (tid, 0)
        counts = []
        f = await m.fetch([tp])
        for _ in range(5):
            got = f.records(*tp)
            if not got:
                break
            counts.append(got[0][2])
            f = await m.fetch(ack={tp: acks((0, 0, RELEASE))})
        assert counts == [1, 2, 3]
        await produce(admin, "sf-poison", 0, [b"next"])
        f = await m.fetch()
        assert f.records(*tp) == [(1, b"next", 1)]
        await m.close()
        await admin.close()

    run_async(go())


def test_long_poll_woken_by_produce_and_by_release(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-poll")
        a = await _member(bs, "g", "sf-poll")
        b = await _member(bs, "g", "sf-poll")
        tp = (tid, 0)
        await b.fetch([tp])  # opens b's session (nothing to get yet)
        # a's long poll on an empty partition is woken by a produce
        t0 = time.monotonic()
        fut = asyncio.ensure_future(a.fetch([tp], max_wait_ms=5000))
        await asyncio.sleep(0.2)
        assert not fut.done()
        await produce(admin, "sf-poll", 0, [b"one", b"two"])
        f = await fut
        assert [o for o, _v, _c in f.records(*tp)] == [0, 1]
        assert time.monotonic() - t0 < 3
        # b's long poll (everything is held by a) is woken when a releases
        fut = asyncio.ensure_future(b.fetch(max_wait_ms=5000))
        await asyncio.sleep(0.2)
        assert not fut.done()
        t1 = time.monotonic()
        assert await a.acknowledge({tp: acks((0, 1, RELEASE))}) == {tp: 0}
        f = await fut
        assert [(o, c) for o, _v, c in f.records(*tp)] == [(0, 2), (1, 2)]
        assert time.monotonic() - t1 < 3
        await a.close()
        await b.close()
        await admin.close()

    run_async(go())


def test_empty_long_poll_waits_max_wait(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-empty")
        m = await _member(bs, "g", "sf-empty")
        t0 = time.monotonic()
        f = await m.fetch([(tid, 0)], max_wait_ms=800)
        elapsed = time.monotonic() - t0
        assert f.partitions == {} or f.records(tid, 0) == []
        assert 0.7 <= elapsed < 4
        await m.close()
        await admin.close()

    run_async(go())


def test_share_session_errors(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-sess", values=[b"r"])
        m = await _member(bs, "g", "sf-sess")
        tp = (tid, 0)
        # no session yet
        await m.fetch([tp], epoch=1, expect_error=ErrorCode.SHARE_SESSION_NOT_FOUND)
        await m.acknowledge({tp: acks((0, 0, ACCEPT))}, epoch=1,
                            expect_error=ErrorCode.SHARE_SESSION_NOT_FOUND)
        # acknowledgements in the opening request
        await m.fetch([tp], ack={tp: acks((0, 0, ACCEPT))}, epoch=0,
                      expect_error=ErrorCode.INVALID_REQUEST)
        f = await m.fetch([tp])
        assert len(f.records(*tp)) == 1
        # stale / future epochs
        await m.fetch(epoch=5, expect_error=ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        await m.acknowledge({tp: acks((0, 0, ACCEPT))}, epoch=0,
                            expect_error=ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        await m.acknowledge({tp: acks((0, 0, ACCEPT))}, epoch=7,
                            expect_error=ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        # nothing changed: the record is still acquired and acknowledgeable
        assert await m.acknowledge({tp: acks((0, 0, ACCEPT))}) == {tp: 0}
        # close the session (final epoch), then it is gone
        await m.fetch(epoch=-1)
        await m.fetch(epoch=m.session_epoch, expect_error=ErrorCode.SHARE_SESSION_NOT_FOUND)
        await m.close()
        await admin.close()

    run_async(go())


def test_final_fetch_releases_what_the_member_holds(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-final", values=[b"a", b"b", b"c"])
        a = await _member(bs, "g", "sf-final")
        b = await _member(bs, "g", "sf-final")
        tp = (tid, 0)
        assert len((await a.fetch([tp])).records(*tp)) == 3
        f = await a.fetch(ack={tp: acks((0, 0, ACCEPT))}, epoch=-1)
        assert f.error_code == 0 and ack_errors(f) == {tp: 0}
        f = await b.fetch([tp])
        assert [(o, c) for o, _v, c in f.records(*tp)] == [(1, 2), (2, 2)]
        await a.close()
        await b.close()
        await admin.close()

    run_async(go())


def test_disconnect_releases_the_members_records(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-disc", values=[b"a", b"b"])
        a = await _member(bs, "g", "sf-disc")
        b = await _member(bs, "g", "sf-disc")
        tp = (tid, 0)
        assert len((await a.fetch([tp])).records(*tp)) == 2
        await a.close()
        f = await b.fetch([tp], max_wait_ms=5000)
        assert [(o, c) for o, _v, c in f.records(*tp)] == [(0, 2), (1, 2)]
        await b.close()
        await admin.close()

    run_async(go())


def test_bad_acknowledgements_and_unknown_topics(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-bad", values=[b"a", b"b", b"c"])
        m = await _member(bs, "g", "sf-bad")
        tp = (tid, 0)
        unknown = (uuid.uuid4(), 0)
        f = await m.fetch([tp, unknown, (tid, 7)])
        assert f.partitions[unknown].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        assert f.partitions[(tid, 7)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert len(f.records(*tp)) == 3
        errs = await m.acknowledge({
            unknown: acks((0, 0, ACCEPT)),
            tp: acks((1, 0, ACCEPT)),  # last < first
        })
        assert errs == {unknown: ErrorCode.UNKNOWN_TOPIC_ID, tp: ErrorCode.INVALID_REQUEST}
        # outside the window (never delivered) and wrong type counts
        assert await m.acknowledge({tp: acks((5, 9, ACCEPT))}) == {tp: ErrorCode.INVALID_REQUEST}
        assert await m.acknowledge({tp: acks((0, 2, [1, 1]))}) == {tp: ErrorCode.INVALID_REQUEST}
        # RENEW needs IsRenewAck; unknown type values are invalid
        assert await m.acknowledge({tp: acks((0, 0, RENEW))}) == {tp: ErrorCode.INVALID_REQUEST}
        assert await m.acknowledge({tp: acks((0, 0, 9))}) == {tp: ErrorCode.INVALID_REQUEST}
        # none of that changed anything: all three are still ours
        assert await m.acknowledge({tp: acks((0, 2, [ACCEPT, REJECT, ACCEPT]))}) == {tp: 0}
        await m.close()
        await admin.close()

    run_async(go())


@pytest.mark.parametrize("version", [1, 2])
def test_both_versions_serve_records(snakka_broker, version):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-ver", values=[b"x"])
        m = await _member(bs, "g", "sf-ver")
        f = await m.fetch([(tid, 0)], version=version)
        assert f.records(tid, 0) == [(0, b"x", 1)]
        assert await m.acknowledge({(tid, 0): acks((0, 0, ACCEPT))}, version=version) == \
            {(tid, 0): 0}
        await m.close()
        await admin.close()

    run_async(go())


def test_renew_only_share_fetch_and_renewals_disabled(snakka_broker):
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-renew", values=[b"a", b"b", b"c"])
        m = await _member(bs, "g", "sf-renew")
        tp = (tid, 0)
        assert len((await m.fetch([tp])).records(*tp)) == 3
        # a renew-only ShareFetch must not ask for records
        await m.fetch(ack={tp: acks((0, 0, RENEW))}, renew=True, max_wait_ms=100,
                      expect_error=ErrorCode.INVALID_REQUEST)
        # done right: the lock is renewed, another type in the same request applies, and
        # nothing is fetched (2 is still acquired by us and would not be anyway)
        f = await m.fetch(ack={tp: acks((0, 1, [RENEW, ACCEPT]))}, renew=True, max_bytes=0,
                          min_bytes=0, max_records=0, max_wait_ms=0)
        assert ack_errors(f) == {tp: 0} and f.records(*tp) == []
        await set_group_configs(admin, "g", {"share.renew.acknowledge.enable": "false"})
        assert await m.acknowledge({tp: acks((2, 2, RENEW))}, renew=True) == \
            {tp: ErrorCode.INVALID_RECORD_STATE}
        assert await m.acknowledge({tp: acks((0, 0, ACCEPT), (2, 2, ACCEPT))}) == {tp: 0}
        await m.close()
        await admin.close()

    run_async(go())


# ------------------------------------------ limits (issue 9 items 2, 2b, 2c; Kafka 4.2 rules)


def test_record_lock_cap_gates_and_record_limit_is_strict(snakka_broker_factory):
    """group.share.partition.max.record.locks=100 with 200-record producer batches:
    batch_optimized acquires the whole first batch (200, Kafka's behaviour, issue 9 item 2's
    "200 with a cap of 100"), and the full window is a gate: nothing more until the SPSO moves.
    record_limit (ShareAcquireMode 1) acquires exactly 100; the rest of the batch stays
    AVAILABLE inside the window and goes to the next fetch."""
    broker = snakka_broker_factory(config={"group.share.partition.max.record.locks": "100"})
    bs = broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-cap", values=[b"a%d" % i for i in range(200)])
        await produce(admin, "sf-cap", 0, [b"b%d" % i for i in range(200)])
        tp = (tid, 0)
        a = await _member(bs, "g", "sf-cap")
        b = await _member(bs, "g", "sf-cap")
        f = await a.fetch([tp], max_records=500)
        assert [o for o, _v, _c in f.records(*tp)] == list(range(200))
        f = await b.fetch([tp], max_records=500)
        assert f.records(*tp) == []  # at the cap: 200..399 are not handed out
        f = await a.fetch(ack={tp: acks((0, 199, ACCEPT))}, max_records=500)
        assert [o for o, _v, _c in f.records(*tp)] == list(range(200, 400))

        await set_group_configs(admin, "h", {"share.auto.offset.reset": "earliest"})
        c = await _member(bs, "h", "sf-cap")
        d = await _member(bs, "h", "sf-cap")
        f = await c.fetch([tp], max_records=500, mode=1)
        assert [o for o, _v, _c in f.records(*tp)] == list(range(100))
        # The window is over the cap but holds AVAILABLE records (100..199): d gets those,
        # nothing past them.
        f = await d.fetch([tp], max_records=500, mode=1)
        assert [o for o, _v, _c in f.records(*tp)] == list(range(100, 200))
        f = await d.fetch(max_records=500, mode=1)
        assert f.records(*tp) == []
        for m in (a, b, c, d):
            await m.close()
        await admin.close()

    run_async(go())


@pytest.mark.parametrize("max_bytes", [0, -1])
def test_max_bytes_zero_is_an_error_not_unlimited(snakka_broker, max_bytes):
    """Issue 9 item 2b: a ShareFetch with MaxBytes 0 got 10 records. Kafka 4.1+ answers the
    partition with UNKNOWN_SERVER_ERROR, at once, and acquires nothing."""
    bs = snakka_broker.bootstrap_servers
    topic = f"sf-maxbytes{-max_bytes}"

    async def go():
        admin, tid = await _setup(bs, topic, values=[b"v%d" % i for i in range(10)])
        tp = (tid, 0)
        m = await _member(bs, "g", topic)
        t0 = time.monotonic()
        f = await m.fetch([tp], max_bytes=max_bytes, max_wait_ms=5000)
        assert time.monotonic() - t0 < 4
        pd = f.partitions[tp]
        assert (pd.error_code, pd.error_message) == (
            ErrorCode.UNKNOWN_SERVER_ERROR, "Request max bytes must be greater than 0")
        assert f.records(*tp) == [] and not pd.acquired_records
        # MaxBytes 1 is soft: one whole batch.
        f = await m.fetch(max_bytes=1)
        assert [o for o, _v, _c in f.records(*tp)] == list(range(10))
        await m.close()
        await admin.close()

    run_async(go())


def test_partitions_rotate_between_fetches(snakka_broker):
    """Issue 9 item 2c, as Kafka 4.2 does it: the session's partitions rotate by
    ShareSessionEpoch % n, and MaxRecords is shared in that order, so with MaxRecords of one
    batch consecutive fetches serve the partitions in turn."""
    bs = snakka_broker.bootstrap_servers

    async def go():
        admin, tid = await _setup(bs, "sf-rotate", 2)
        for p in (0, 1):
            for k in range(3):
                await produce(admin, "sf-rotate", p, [b"p%d-%d-%d" % (p, k, i)
                                                         for i in range(10)])
        m = await _member(bs, "g", "sf-rotate")
        tps = [(tid, 0), (tid, 1)]
        served = []
        f = await m.fetch(tps, max_records=10)          # epoch 0: session order
        for _ in range(4):
            got = {p for p, *_ in f.all_records()}
            assert len(got) == 1
            served.append(got.pop())
            f = await m.fetch(max_records=10)           # epochs 1, 2, ...
        assert served == [0, 1, 0, 1]
        await m.close()
        await admin.close()

    run_async(go())
