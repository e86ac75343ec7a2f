"""Share-partition state survives broker restarts (``__share_group_state``): acknowledged records
never come back; records acquired but not acknowledged when the broker went away are delivered
again with their delivery count kept (the next delivery is counted on top of it); released and
rejected records keep their state. Clean restart (in-process broker) and kill -9 (subprocess)."""

from __future__ import annotations

import pytest

from snakka.protocol.errors import ErrorCode

from .helpers import raw_connect, run_async
from .share_protocol import (
    ACCEPT,
    REJECT,
    RELEASE,
    ShareMember,
    acks,
    create_topic,
    produce,
    set_group_configs,
)


@pytest.mark.parametrize("how", ["clean", "kill-9", "kill-9-strict"])
def test_restart_keeps_acknowledged_and_redelivers_in_flight(snakka_broker_factory, how):
    # kill -9 keeps what reached the page cache; log.flush.strict=true answers acknowledgements
    # only once fsynced (what a power loss would need), and must give the same result.
    broker = snakka_broker_factory(
        mode="thread" if how == "clean" else "subprocess",
        config={"log.flush.strict": "true"} if how == "kill-9-strict" else None)
    bs = broker.bootstrap_servers
    member_id = "3f8e9c1e-0000-4000-8000-000000000001"

    async def before():
        admin = await raw_connect(bs)
        tid = await create_topic(admin, "sr", 2)
        await set_group_configs(admin, "g", {"share.auto.offset.reset": "earliest"})
        await produce(admin, "sr", 0, [b"a%d" % i for i in range(10)])
        await produce(admin, "sr", 1, [b"b%d" % i for i in range(4)])
        m = await ShareMember.connect(bs, "g", member_id=member_id)
        await m.join(["sr"])
        tp0, tp1 = (tid, 0), (tid, 1)
        f = await m.fetch([tp0, tp1])
        assert len(f.records(*tp0)) == 10 and len(f.records(*tp1)) == 4
        # p0: accept 0-4, reject 5, release 6 (re-acquired at once: count 2); 7-9 stay acquired
        f = await m.fetch(ack={tp0: acks((0, 6, [ACCEPT] * 5 + [REJECT, RELEASE])),
                               tp1: acks((0, 1, ACCEPT))})
        assert [(o, c) for o, _v, c in f.records(*tp0)] == [(6, 2)]
        # p1: 0-1 accepted, 2-3 acquired
        await admin.close()
        await m.close()
        return tid

    tid = run_async(before())
    if how == "clean":
        broker.restart()
    else:
        broker.kill()
        broker.start()

    async def after():
        m = await ShareMember.connect(bs, "g", member_id=member_id)
        await m.join(["sr"])
        tp0, tp1 = (tid, 0), (tid, 1)
        # the old session is gone with the broker
        await m.fetch([tp0], epoch=1, expect_error=ErrorCode.SHARE_SESSION_NOT_FOUND)
        f = await m.fetch([tp0, tp1])
        got0 = [(o, v, c) for o, v, c in f.records(*tp0)]
        got1 = [(o, v, c) for o, v, c in f.records(*tp1)]
        assert got0 == [(6, b"a6", 3), (7, b"a7", 2), (8, b"a8", 2), (9, b"a9", 2)]
        assert got1 == [(2, b"b2", 2), (3, b"b3", 2)]
        await m.acknowledge({tp0: acks((6, 9, ACCEPT)), tp1: acks((2, 3, ACCEPT))})
        admin = await raw_connect(bs)
        await produce(admin, "sr", 0, [b"new"])
        f = await m.fetch(max_wait_ms=3000)
        assert f.records(*tp0) == [(10, b"new", 1)]
        await admin.close()
        await m.close()

    run_async(after())

    # and once more: everything acknowledged stays acknowledged
    if how == "clean":
        broker.restart()
    else:
        broker.kill()
        broker.start()

    async def again():
        m = await ShareMember.connect(bs, "g", member_id=member_id)
        await m.join(["sr"])
        f = await m.fetch([(tid, 0), (tid, 1)])
        assert f.records(tid, 1) == []
        assert f.records(tid, 0) == [(10, b"new", 2)]
        await m.close()

    run_async(again())
