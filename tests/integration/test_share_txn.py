"""Share groups and transactions (issue 11, item 4): ``share.isolation.level=read_committed``
share groups never get the records of aborted transactions nor anything past the last stable
offset, and no share group gets the COMMIT/ABORT markers, with unmodified share consumers:
snakka's ShareConsumer and confluent-kafka's (librdkafka's KIP-932 preview).

The transactions are written on the in-process broker's event loop (transactional batches
appended to the partition log, markers through ``ReplicaManager.write_txn_marker``, the path
the transaction coordinator takes), so these tests do not depend on a transactional producer;
``test_share_read_committed_with_a_transactional_producer`` drives the same with
confluent-kafka's transactional producer."""

from __future__ import annotations

import asyncio
import time

import pytest

from snakka.client.share_admin import ShareAdmin
from snakka.client.share_consumer import ShareConsumer
from snakka.records import Record, build_batch

from .helpers import ck_create_topic, run_async

pytestmark = pytest.mark.timeout(120)

PID, PID2, PID3 = 4242, 4343, 4444


def _on_loop(eb, fn):
    """Run ``fn(broker)`` on the embedded broker's event loop (white box: the log writes a
    transactional producer and the coordinator would make)."""
    async def call():
        return fn(eb.broker)
    return asyncio.run_coroutine_threadsafe(call(), eb._loop).result(10)


def _txn_batch(b, topic, pid, seq, values, *, transactional=True):
    pl = b.replicas.get_log(topic, 0)
    buf = bytearray(build_batch([Record(timestamp=b.time_ms(), value=v) for v in values],
                                producer_id=pid if transactional else -1,
                                producer_epoch=0 if transactional else -1,
                                base_sequence=seq if transactional else -1,
                                is_transactional=transactional))
    pl.append(buf, pl.validate(buf))
    b.replicas.notify_append(topic, 0)


def _marker(b, topic, pid, commit):
    err, _mark = b.replicas.write_txn_marker(topic, 0, pid, 0, commit, 0)
    assert err == 0, err


def _admin(bs, fn):
    async def go():
        async with ShareAdmin(bs) as a:
            return await fn(a)
    return run_async(go(), timeout=30)


def _group(bs, group, isolation):
    _admin(bs, lambda a: a.alter_group_configs(group, {"share.auto.offset.reset": "earliest",
                                                       "share.isolation.level": isolation}))


def _write_transactions(eb, topic):
    """offsets: 0 p0 | 1-3 PID aborted | 4-5 PID2 committed | 6 ABORT | 7 COMMIT | 8 p1 |
    9 PID3 open | 10 p2 (behind the open transaction)"""
    def go(b):
        _txn_batch(b, topic, -1, -1, [b"p0"], transactional=False)
        _txn_batch(b, topic, PID, 0, [b"a0", b"a1", b"a2"])
        _txn_batch(b, topic, PID2, 0, [b"c0", b"c1"])
        _marker(b, topic, PID, False)
        _marker(b, topic, PID2, True)
        _txn_batch(b, topic, -1, -1, [b"p1"], transactional=False)
        _txn_batch(b, topic, PID3, 0, [b"o0"])
        _txn_batch(b, topic, -1, -1, [b"p2"], transactional=False)
    _on_loop(eb, go)


def _poll_snakka(bs, group, topic, want, timeout=20.0):
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "fetch.max.wait.ms": 200})
    got: list = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            got += [(r.offset, r.value) for r in c.poll(0.2)]
        # Nothing more comes within a few more polls (what is behind the LSO stays there).
        for _ in range(5):
            got += [(r.offset, r.value) for r in c.poll(0.2)]
        c.commit_sync(10)
    finally:
        c.close()
    return got


def _poll_confluent(bs, group, topic, want, timeout=20.0):
    from confluent_kafka import ShareConsumer as CkShareConsumer

    c = CkShareConsumer({"bootstrap.servers": bs, "group.id": group})
    got: list = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value()))
        for _ in range(5):
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value()))
        c.commit_sync(10)
    finally:
        c.close()
    return got


def _start_offset(bs, group, topic):
    async def fn(a):
        return await a.describe_share_group_offsets(group, {topic: [0]})
    return _admin(bs, fn)[(topic, 0)].start_offset


COMMITTED = [(0, b"p0"), (4, b"c0"), (5, b"c1"), (8, b"p1")]
UNCOMMITTED = [(0, b"p0"), (1, b"a0"), (2, b"a1"), (3, b"a2"), (4, b"c0"), (5, b"c1"),
               (8, b"p1"), (9, b"o0"), (10, b"p2")]


@pytest.mark.parametrize("client", ["snakka", "confluent"])
def test_read_committed_share_group_gets_committed_records_only(snakka_broker, client):
    bs = snakka_broker.bootstrap_servers
    topic = f"share-txn-{client}"
    ck_create_topic(bs, topic, 1)
    _write_transactions(snakka_broker, topic)
    poll = _poll_snakka if client == "snakka" else _poll_confluent
    _group(bs, "rc", "read_committed")
    _group(bs, "ru", "read_uncommitted")
    assert sorted(poll(bs, "rc", topic, len(COMMITTED))) == COMMITTED
    # read_uncommitted gets the aborted and the open transaction's records; neither level
    # gets a marker, and the markers do not hold the share-partition start offset back.
    assert sorted(poll(bs, "ru", topic, len(UNCOMMITTED))) == UNCOMMITTED

    # The open transaction aborts: the record behind it comes out, its own never does.
    _on_loop(snakka_broker, lambda b: _marker(b, topic, PID3, False))  # 11
    assert sorted(poll(bs, "rc", topic, 1)) == [(10, b"p2")]
    # A marker is archived when a fetch meets it: the read_uncommitted group gets nothing
    # more. Everything is done now in both groups (the archived ranges and markers included).
    assert poll(bs, "ru", topic, 0) == []
    for group in ("rc", "ru"):
        assert _start_offset(bs, group, topic) == 12, group


def test_share_read_committed_with_a_transactional_producer(snakka_broker):
    """The same with confluent-kafka's transactional producer: commits and aborts interleaved,
    one transaction left open while the share consumers poll, then committed."""
    from confluent_kafka import Producer

    bs = snakka_broker.bootstrap_servers
    topic = "share-txn-producer"
    ck_create_topic(bs, topic, 1)
    _group(bs, "prc", "read_committed")
    _group(bs, "pru", "read_uncommitted")
    p = Producer({"bootstrap.servers": bs, "transactional.id": "share-txn-1", "linger.ms": 5})
    p.init_transactions(30)
    expected: list[bytes] = []
    everything: list[bytes] = []
    for t in range(6):
        p.begin_transaction()
        vals = [b"t%d-%d" % (t, i) for i in range(5)]
        for v in vals:
            p.produce(topic, value=v, partition=0)
        everything += vals
        assert p.flush(30) == 0  # in the log before the abort (an abort purges unsent ones)
        if t % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            expected += vals
    p.begin_transaction()  # left open while the groups read
    open_vals = [b"open-%d" % i for i in range(3)]
    for v in open_vals:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0
    got = [v for _o, v in _poll_snakka(bs, "prc", topic, len(expected))]
    assert sorted(got) == sorted(expected)
    got = [v for _o, v in _poll_confluent(bs, "pru", topic, len(everything) + len(open_vals))]
    assert sorted(got) == sorted(everything + open_vals)
    p.commit_transaction(30)
    got = [v for _o, v in _poll_confluent(bs, "prc", topic, len(open_vals))]
    assert sorted(got) == sorted(open_vals)
