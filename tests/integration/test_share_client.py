"""snakka's share consumer (snakka.client) against a real snakka broker: the things the
acceptance tests do not cover.

* the asyncio flavour (several consumers on one loop), ``commit_async`` callbacks;
* every compression codec, keys, headers and null values byte for byte;
* ``max.poll.records``, ``acknowledge_offset``, RENEW (KIP-1222) keeping a record past its lock;
* ``close`` leaves the group at once (ShareGroupDescribe shows no member right after);
* a fenced member (stale epoch) rejoins with the same member id and keeps consuming;
* a consumer survives a broker restart (new coordinator connection, new share session);
* share_admin: describe/list share groups, group configs, delete offsets and the group.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from snakka.client.share_admin import ShareAdmin
from snakka.client.share_consumer import (
    AcknowledgeType,
    AsyncShareConsumer,
    ShareConsumer,
    TopicPartition,
)
from snakka.client.share_membership import HeartbeatOutcome
from snakka.protocol.errors import ErrorCode

from .helpers import ck_create_topic, run_async

pytestmark = pytest.mark.timeout(120)

CONFIG = {"group.share.min.record.lock.duration.ms": "1000",
          "group.share.min.heartbeat.interval.ms": "200",
          "group.share.heartbeat.interval.ms": "300"}


def admin(bs: str, fn):
    async def go():
        async with ShareAdmin(bs) as a:
            return await fn(a)
    return run_async(go(), timeout=30)


def earliest(bs: str, group: str, **more: str) -> None:
    admin(bs, lambda a: a.alter_group_configs(group, {"share.auto.offset.reset": "earliest",
                                                      **more}))


def produce(bs: str, topic: str, records: list[tuple], partition: int = 0, **cfg) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, **cfg})
    for key, value, headers in records:
        p.produce(topic, key=key, value=value, headers=headers, partition=partition)
    assert p.flush(30) == 0


def consumer(bs: str, group: str, **cfg) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bs, "group.id": group, "fetch.max.wait.ms": 200,
                          **cfg})


def poll_n(c, n: int, timeout: float = 20.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"{len(out)} of {n} records"
        out += c.poll(0.2)
    return out


def test_async_consumers_on_one_loop_and_commit_async(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "aio", 2)
    earliest(bs, "g-aio")
    produce(bs, "aio", [(None, b"%d" % i, None) for i in range(500)], partition=0)
    produce(bs, "aio", [(None, b"%d" % i, None) for i in range(500, 1000)], partition=1)

    async def go():
        results: list = []
        cs = [AsyncShareConsumer({"bootstrap.servers": bs, "group.id": "g-aio",
                                  "share.acknowledgement.mode": "explicit",
                                  "max.poll.records": 100}) for _ in range(3)]
        for c in cs:
            c.set_acknowledgement_commit_callback(lambda o, e: results.append((o, e)))
            await c.subscribe(["aio"])
        seen: list = []

        async def run(c):
            while len(seen) < 1000:
                recs = await c.poll(0.2)
                assert len(recs) <= 100
                for r in recs:
                    c.acknowledge(r)
                seen.extend((r.partition, r.offset) for r in recs)
                await c.commit_async(callback=lambda o, e: results.append(("mine", o, e)))
        await asyncio.wait_for(asyncio.gather(*(run(c) for c in cs)), 60)
        for c in cs:
            await c.close()
        return seen, results
    seen, results = run_async(go(), timeout=None)
    assert sorted(seen) == sorted([(0, i) for i in range(500)] + [(1, i) for i in range(500)])
    acked = {(tp.partition, o) for r in results if r[0] != "mine"
             for tp, offs in r[0].items() for o in offs if r[1] is None}
    assert acked == set(seen)
    assert any(r[0] == "mine" for r in results)
    assert all(r[-1] is None for r in results)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_codecs_keys_headers_and_nulls_round_trip(snakka_broker, codec):
    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "codec", 1)
    earliest(bs, "g-codec")
    sent = [(b"k%d" % i if i % 3 else None,
             None if i % 7 == 0 else b"value-%d-" % i * (i % 5 + 1),
             [("h", b"x%d" % i), ("n", None)] if i % 2 else None) for i in range(200)]
    produce(bs, "codec", sent, **{"compression.type": codec})
    c = consumer(bs, "g-codec")
    c.subscribe(["codec"])
    got = poll_n(c, 200)
    assert [r.offset for r in got] == list(range(200))
    assert [(r.key, r.value, r.headers or None) for r in got] == \
        [(k, v, h) for k, v, h in sent]
    assert c.commit_sync(5) == {TopicPartition("codec", 0): None}
    c.close()


def test_max_poll_records_acknowledge_offset_and_renew(snakka_broker_factory):
    b = snakka_broker_factory(config=CONFIG)
    bs = b.bootstrap_servers
    ck_create_topic(bs, "renew", 1)
    earliest(bs, "g-renew", **{"share.record.lock.duration.ms": "1000"})
    produce(bs, "renew", [(None, b"%d" % i, None) for i in range(10)])
    a = consumer(bs, "g-renew", **{"share.acknowledgement.mode": "explicit",
                                   "max.poll.records": 4})
    a.subscribe(["renew"])
    first = poll_n(a, 1)
    assert len(first) == 4
    for r in first[1:]:
        a.acknowledge_offset("renew", 0, r.offset, AcknowledgeType.ACCEPT)
    # Keep offset 0 for three lock durations by renewing it; nobody else may get it.
    a.acknowledge(first[0], AcknowledgeType.RENEW)
    other = consumer(bs, "g-renew", **{"share.acknowledgement.mode": "explicit"})
    other.subscribe(["renew"])
    got_other: list = []
    rest: list = []
    t_end = time.monotonic() + 3.0
    while time.monotonic() < t_end:
        assert a.commit_sync(5) == {TopicPartition("renew", 0): None}
        for r in a.poll(0.2):  # the renewed record does not block the next poll
            rest.append(r)
            a.acknowledge(r)
        for r in other.poll(0.1):
            got_other.append(r.offset)
            other.acknowledge(r)
        other.commit_sync(5)
        a.acknowledge(first[0], AcknowledgeType.RENEW)
    assert 0 not in got_other
    a.acknowledge(first[0], AcknowledgeType.ACCEPT)
    assert a.commit_sync(5) == {TopicPartition("renew", 0): None}
    assert sorted({r.offset for r in rest} | set(got_other) | {r.offset for r in first}) == \
        list(range(10))
    offs = admin(bs, lambda ad: ad.describe_share_group_offsets("g-renew"))
    assert offs[("renew", 0)].start_offset == 10 and offs[("renew", 0)].lag == 0
    a.close()
    other.close()


def test_close_leaves_the_group_at_once(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "leave", 2)
    c1, c2 = consumer(bs, "g-leave"), consumer(bs, "g-leave")
    for c in (c1, c2):
        c.subscribe(["leave"])
    deadline = time.monotonic() + 20
    while True:
        for c in (c1, c2):
            c.poll(0.1)
        info = admin(bs, lambda a: a.describe_share_groups(["g-leave"]))["g-leave"]
        if len(info.members) == 2 and info.state == "Stable":
            break
        assert time.monotonic() < deadline, info
    ids = {m.member_id for m in info.members}
    assert ids == {c1.member_id, c2.member_id}
    assert all(m.subscribed_topics == ["leave"] for m in info.members)
    t0 = time.monotonic()
    c1.close()
    assert time.monotonic() - t0 < 5
    info = admin(bs, lambda a: a.describe_share_groups(["g-leave"]))["g-leave"]
    assert [m.member_id for m in info.members] == [c2.member_id]
    c2.close()
    info = admin(bs, lambda a: a.describe_share_groups(["g-leave"]))["g-leave"]
    assert info.members == [] and info.state == "Empty"


def test_fenced_member_rejoins_and_keeps_consuming(snakka_broker_factory):
    b = snakka_broker_factory(config=CONFIG)
    bs = b.bootstrap_servers
    ck_create_topic(bs, "fence", 1)
    earliest(bs, "g-fence")
    produce(bs, "fence", [(None, b"a", None)] * 5)
    c = consumer(bs, "g-fence")
    c.subscribe(["fence"])
    poll_n(c, 5)
    member, epoch = c.member_id, c.member_epoch
    assert epoch > 0
    # White-box: make the client's epoch stale, as if it had missed a bump; the coordinator
    # answers FENCED_MEMBER_EPOCH and the client must rejoin from epoch 0 on its own.
    m = c._consumer._membership
    outcomes: list = []
    on_response = m.on_response

    def spy(resp, sent):
        outcomes.append((sent.member_epoch, resp.error_code, on_response(resp, sent)))
        return outcomes[-1][2]
    m.on_response = spy
    m.member_epoch = epoch + 7
    deadline = time.monotonic() + 10
    while not any(sent == 0 and code == 0 for sent, code, _o in outcomes):
        assert time.monotonic() < deadline, outcomes
        c.poll(0.1)
    assert outcomes[0][:2] == (epoch + 7, ErrorCode.FENCED_MEMBER_EPOCH)
    assert outcomes[0][2] == HeartbeatOutcome.REJOIN
    assert c.member_id == member and c.member_epoch > 0
    produce(bs, "fence", [(None, b"b", None)] * 3)
    got = poll_n(c, 3)
    assert [r.value for r in got] == [b"b"] * 3
    c.close()


def test_consumer_survives_a_broker_restart(snakka_broker_factory):
    b = snakka_broker_factory(config=CONFIG)
    bs = b.bootstrap_servers
    ck_create_topic(bs, "survive", 1)
    earliest(bs, "g-survive")
    produce(bs, "survive", [(None, b"before", None)] * 5)
    c = consumer(bs, "g-survive", **{"share.acknowledgement.mode": "explicit"})
    c.subscribe(["survive"])
    for r in poll_n(c, 5):
        c.acknowledge(r)
    assert c.commit_sync(5) == {TopicPartition("survive", 0): None}
    b.restart()
    produce(bs, "survive", [(None, b"after", None)] * 5)
    got = poll_n(c, 5, timeout=30)
    assert [r.value for r in got] == [b"after"] * 5
    for r in got:
        c.acknowledge(r)
    assert c.commit_sync(5) == {TopicPartition("survive", 0): None}
    c.close()


def test_share_admin_groups_configs_and_deletes(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "adm2", 2)
    earliest(bs, "g-adm2", **{"share.delivery.count.limit": "3"})
    cfg = admin(bs, lambda a: a.describe_group_configs("g-adm2"))
    assert cfg["share.auto.offset.reset"] == "earliest"
    assert cfg["share.delivery.count.limit"] == "3"
    produce(bs, "adm2", [(None, b"x", None)] * 4, partition=1)
    c = consumer(bs, "g-adm2")
    c.subscribe(["adm2"])
    poll_n(c, 4)
    c.commit_sync(5)
    groups = admin(bs, lambda a: a.list_share_groups())
    assert ("g-adm2", "Stable") in groups
    info = admin(bs, lambda a: a.describe_share_groups(["g-adm2"]))["g-adm2"]
    assert info.members[0].assignment == {"adm2": [0, 1]}
    assert info.members[0].member_id == c.member_id
    c.close()
    offs = admin(bs, lambda a: a.describe_share_group_offsets("g-adm2"))
    assert offs[("adm2", 1)].start_offset == 4 and offs[("adm2", 1)].lag == 0
    assert admin(bs, lambda a: a.delete_share_group_offsets("g-adm2", ["adm2"])) == {"adm2": 0}
    offs = admin(bs, lambda a: a.describe_share_group_offsets("g-adm2"))
    assert all(o.start_offset == -1 for (t, _p), o in offs.items() if t == "adm2")
    admin(bs, lambda a: a.alter_group_configs("g-adm2", {"share.delivery.count.limit": None}))
    assert "share.delivery.count.limit" not in {
        k for k, v in admin(bs, lambda a: a.describe_group_configs("g-adm2")).items()
        if v == "3"}
    admin(bs, lambda a: a.delete_share_groups(["g-adm2"]))
    assert "g-adm2" not in {g for g, _s in admin(bs, lambda a: a.list_share_groups())}


def test_record_limit_acquire_mode_with_the_record_lock_cap(snakka_broker_factory):
    """share.acquire.mode=record_limit (ShareFetch v2 ShareAcquireMode 1) under a record-lock cap
    of 100 with one 300-record producer batch: each consumer's fetch acquires exactly
    max.poll.records, and the rest of the batch stays AVAILABLE for the other consumer (in
    batch_optimized mode the first fetch would hold all 300)."""
    from snakka.records import Record, build_batch

    from .helpers import raw_connect
    from .share_protocol import create_topic

    b = snakka_broker_factory(config={"group.share.partition.max.record.locks": "100"})
    bs = b.bootstrap_servers

    async def setup():
        conn = await raw_connect(bs)
        await create_topic(conn, "sc-rl", 1)
        from snakka.protocol.messages.produce_request import (
            PartitionProduceData,
            ProduceRequest,
            TopicProduceData,
        )
        batch = build_batch([Record(timestamp=int(time.time() * 1000), key=None,
                                    value=b"r%d" % i) for i in range(300)])
        r = await conn.send(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000,
                                           topic_data=[TopicProduceData(name="sc-rl", partition_data=[
                                               PartitionProduceData(index=0, records=batch)])]),
                            version=9)
        assert r.responses[0].partition_responses[0].error_code == 0
        await conn.close()

    run_async(setup(), timeout=30)
    earliest(bs, "rl")
    cfg = {"share.acquire.mode": "record_limit", "max.poll.records": 100,
           "share.acknowledgement.mode": "explicit"}
    a = consumer(bs, "rl", **cfg)
    c = consumer(bs, "rl", **cfg)
    try:
        a.subscribe(["sc-rl"])
        got_a = poll_n(a, 1)
        assert [r.offset for r in got_a] == list(range(100))
        c.subscribe(["sc-rl"])
        got_c = poll_n(c, 1)
        assert [r.offset for r in got_c] == list(range(100, 200))
    finally:
        a.close()
        c.close()
