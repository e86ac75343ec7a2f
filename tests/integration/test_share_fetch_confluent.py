"""confluent-kafka's ShareConsumer (librdkafka 2.16, KIP-932 preview) against snakka's share-group
data plane: ShareGroupHeartbeat, ShareFetch with piggy-backed acknowledgements, ShareAcknowledge
and the final-epoch close, with unmodified client code."""

from __future__ import annotations

import time

from .helpers import raw_connect, run_async
from .share_protocol import create_topic, set_group_configs


def _setup(bs: str, topic: str, partitions: int, group: str) -> None:
    async def go():
        c = await raw_connect(bs)
        await create_topic(c, topic, partitions)
        await set_group_configs(c, group, {"share.auto.offset.reset": "earliest"})
        await c.close()

    run_async(go())


def _produce(bs: str, topic: str, n: int, partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def test_two_share_consumers_consume_a_topic_exactly_once(snakka_broker):
    from confluent_kafka import ShareConsumer

    bs = snakka_broker.bootstrap_servers
    _setup(bs, "ck-share", 2, "ckg")
    n = 3000
    _produce(bs, "ck-share", n, 2)
    consumers = [ShareConsumer({"bootstrap.servers": bs, "group.id": "ckg"}) for _ in range(2)]
    seen: dict[tuple[int, int], list[int]] = {}
    try:
        for c in consumers:
            c.subscribe(["ck-share"])
        deadline = time.monotonic() + 60
        while len(seen) < n and time.monotonic() < deadline:
            for idx, c in enumerate(consumers):
                for m in c.poll(0.2):  # implicit mode: the previous poll's records are accepted
                    assert m.error() is None, m.error()
                    assert m.value() == b"v%d" % int(m.key()[1:])
                    seen.setdefault((m.partition(), m.offset()), []).append(idx)
        for c in consumers:
            c.commit_sync(10)
    finally:
        for c in consumers:
            c.close()
    assert len(seen) == n
    # every record went to exactly one consumer, once (nothing released, nothing timed out)
    assert all(len(who) == 1 for who in seen.values())
    # and nothing is left in flight or redelivered to a new consumer afterwards
    late = ShareConsumer({"bootstrap.servers": bs, "group.id": "ckg"})
    try:
        late.subscribe(["ck-share"])
        assert [m for m in late.poll(2.0) if m.error() is None] == []
    finally:
        late.close()


def test_explicit_release_redelivers_and_reject_archives(snakka_broker):
    from confluent_kafka import AcknowledgeType, ShareConsumer

    bs = snakka_broker.bootstrap_servers
    _setup(bs, "ck-explicit", 1, "cke")
    _produce(bs, "ck-explicit", 10, 1)
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "cke",
                       "share.acknowledgement.mode": "explicit"})
    deliveries: dict[int, list[int]] = {}
    try:
        c.subscribe(["ck-explicit"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msgs = [m for m in c.poll(0.5) if m.error() is None]
            for m in msgs:
                deliveries.setdefault(m.offset(), []).append(m.delivery_count())
                if m.offset() == 3 and m.delivery_count() == 1:
                    c.acknowledge(m, AcknowledgeType.RELEASE)
                elif m.offset() == 5:
                    c.acknowledge(m, AcknowledgeType.REJECT)
                else:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                c.commit_sync(10)
            if len(deliveries) == 10 and len(deliveries[3]) == 2:
                break
        # give a rejected record the chance to (wrongly) come back
        for _ in range(3):
            for m in c.poll(0.3):
                if m.error() is None:
                    deliveries.setdefault(m.offset(), []).append(m.delivery_count())
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(10)
    finally:
        c.close()
    assert deliveries[3] == [1, 2]
    assert deliveries[5] == [1]
    assert all(deliveries[o] == [1] for o in range(10) if o != 3)
