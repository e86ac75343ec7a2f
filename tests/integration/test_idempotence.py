"""Idempotent producers: retries and network duplicates must never duplicate or lose records.

Black box: confluent-kafka with ``enable.idempotence=true`` (acks=all, 5 in flight) produces
through a fault-injecting proxy (faultproxy.FaultProxy) that (a) loses the responses of random
Produce requests *after* the broker appended them, killing the connection, so librdkafka
retries batches the broker already has, and (b) sends random Produce requests to the broker
twice. The broker advertises the proxy's address so every client connection goes through it.
The log must hold every sequence number exactly once, in order, at the offsets the producer was
told. A control run with idempotence off shows the same faults do create duplicates, so the
main test is not passing vacuously.

White box (snakka's protocol client, real generated requests): the same idempotent batch sent
twice gets its original offsets back and is stored once; a sequence gap gets
OUT_OF_ORDER_SEQUENCE_NUMBER (45); a (client-side) epoch bump must restart at sequence 0 and
fences the old epoch; InitProducerId always hands out a new producer id; duplicate detection
survives a clean restart and a kill -9 with strict durability.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from snakka.records import Record, build_batch
from snakka.testing import EmbeddedBroker

from .faultproxy import FaultProxy
from .helpers import (
    ck_consume,
    ck_create_topic,
    ck_end_offsets,
    now_ms,
    raw_connect,
    run_async,
)

PRODUCE_VERSION = 10  # librdkafka's maximum; by topic name (v13+ would need topic ids)
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47


# -- black box: librdkafka through a faulty network ---------------------------------------------
def _produce_through_faults(factory, *, idempotent: bool, n: int, seed: int,
                            lose: float, dup: float, max_faults: int):
    from confluent_kafka import Producer

    proxy = FaultProxy(None, lose_response=lose, duplicate=dup, max_faults=max_faults,
                       seed=seed)
    broker = factory(config={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    proxy.upstream = ("127.0.0.1", broker.port)
    proxy.start()
    bs = f"127.0.0.1:{proxy.port}"
    topic = "idem"
    try:
        ck_create_topic(bs, topic, 2)
        acked: dict[int, tuple[int, int]] = {}
        errors: list[str] = []

        def cb(err, msg):
            seq = int(msg.value())
            if err is not None:
                errors.append(f"{seq}: {err}")
            else:
                acked[seq] = (msg.partition(), msg.offset())

        p = Producer({
            "bootstrap.servers": bs, "enable.idempotence": idempotent, "acks": "all",
            "max.in.flight.requests.per.connection": 5, "linger.ms": 2,
            "batch.num.messages": 100, "retry.backoff.ms": 10, "retry.backoff.max.ms": 50,
            "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 100,
            "message.timeout.ms": 120000, "socket.connection.setup.timeout.ms": 5000,
        })
        for seq in range(n):
            p.produce(topic, key=f"k{seq % 97}".encode(), value=b"%08d" % seq, on_delivery=cb)
            if seq % 200 == 0:
                p.poll(0)
        left = p.flush(150)
        assert left == 0, f"{left} messages undelivered; errors {errors[:5]}"
        proxy.p_lose = proxy.p_dup = 0.0  # consume over a clean network
        ends = ck_end_offsets(bs, topic, range(2))
        stored = sum(hi - lo for lo, hi in ends.values())
        got = ck_consume(bs, topic, range(2), stored, timeout=60)
        assert len(got) == stored
        return proxy, acked, errors, got
    finally:
        proxy.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_idempotent_producer_no_duplicates_no_gaps_under_faults(snakka_broker_factory):
    n = 30_000
    proxy, acked, errors, got = _produce_through_faults(
        snakka_broker_factory, idempotent=True, n=n, seed=7, lose=0.1, dup=0.1, max_faults=80)
    # The faults really happened (else this test proves nothing).
    assert proxy.lost_responses >= 20 and proxy.duplicated >= 20, vars(proxy)
    assert not errors, errors[:5]
    assert len(acked) == n
    seen: dict[int, list[tuple[int, int]]] = defaultdict(list)
    per_part: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for g in got:
        seq = int(g.value)
        seen[seq].append((g.partition, g.offset))
        per_part[g.partition].append((g.offset, seq))
    dups = {s: locs for s, locs in seen.items() if len(locs) > 1}
    assert not dups, f"{len(dups)} sequence numbers stored more than once, e.g. " \
                     f"{list(dups.items())[:5]}"
    assert sorted(seen) == list(range(n)), f"missing: {sorted(set(range(n)) - set(seen))[:20]}"
    assert len(got) == n
    for p, rows in per_part.items():
        assert [o for o, _ in rows] == list(range(len(rows))), f"partition {p}: offset gaps"
        seqs = [s for _, s in rows]
        assert seqs == sorted(seqs), f"partition {p}: order broken"
    wrong = {s: (acked[s], locs[0]) for s, locs in seen.items() if acked[s] != locs[0]}
    assert not wrong, f"acknowledged offsets differ from stored ones: {list(wrong.items())[:5]}"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_control_without_idempotence_the_same_faults_duplicate(snakka_broker_factory):
    """The fault injection is real: a non-idempotent producer ends up with duplicates."""
    n = 5_000
    proxy, acked, errors, got = _produce_through_faults(
        snakka_broker_factory, idempotent=False, n=n, seed=11, lose=0.1, dup=0.1, max_faults=10)
    assert proxy.duplicated >= 1, vars(proxy)
    assert not errors, errors[:5]
    assert {int(g.value) for g in got} == set(range(n))
    assert len(got) > n, f"expected duplicates without idempotence, stored {len(got)} of {n}"


# -- white box: the idempotence rules on the wire ----------------------------------------------
async def _init_pid(conn, producer_id=-1, epoch=-1):
    from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest

    resp = await conn.send(InitProducerIdRequest(transactional_id=None,
                                                 transaction_timeout_ms=-1,
                                                 producer_id=producer_id,
                                                 producer_epoch=epoch))
    assert resp.error_code == 0, resp
    return resp.producer_id, resp.producer_epoch


async def _produce(conn, topic, partition, batch):
    from snakka.protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
        TopicProduceData(name=topic, partition_data=[
            PartitionProduceData(index=partition, records=batch)])])
    resp = await conn.send(req, version=PRODUCE_VERSION)
    r = resp.responses[0].partition_responses[0]
    return r.error_code, r.base_offset


def _batch(pid, epoch, seq, values):
    ts = now_ms()
    return build_batch([Record(timestamp=ts, key=b"k", value=v) for v in values],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def _values(bs, topic, count):
    return [g.value for g in ck_consume(bs, topic, [0], count, timeout=20)]


def test_duplicate_batch_gets_original_offsets_and_is_stored_once(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "wb", 1)

    async def go():
        conn = await raw_connect(bs)
        try:
            pid, epoch = await _init_pid(conn)
            assert pid >= 0 and epoch >= 0
            a = _batch(pid, epoch, 0, [b"a0", b"a1", b"a2"])
            b = _batch(pid, epoch, 3, [b"b0", b"b1"])
            assert await _produce(conn, "wb", 0, a) == (0, 0)
            assert await _produce(conn, "wb", 0, b) == (0, 3)
            # Retries of both retained batches: success with the ORIGINAL offsets, no append.
            assert await _produce(conn, "wb", 0, a) == (0, 0)
            assert await _produce(conn, "wb", 0, b) == (0, 3)
            c = _batch(pid, epoch, 5, [b"c0"])
            assert await _produce(conn, "wb", 0, c) == (0, 5)
            # A gap in the sequence: 6 is expected.
            gap = _batch(pid, epoch, 9, [b"gap"])
            code, _ = await _produce(conn, "wb", 0, gap)
            assert code == OUT_OF_ORDER_SEQUENCE_NUMBER
            # A sequence from the past that is not a retained batch is out of order too.
            old = _batch(pid, epoch, 1, [b"x"])
            code, _ = await _produce(conn, "wb", 0, old)
            assert code == OUT_OF_ORDER_SEQUENCE_NUMBER
            return pid, epoch
        finally:
            await conn.close()

    run_async(go())
    assert _values(bs, "wb", 6) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0"]
    lo, hi = _watermarks(bs, "wb")
    assert (lo, hi) == (0, 6), "rejected or duplicate batches were appended"


def _watermarks(bs, topic, partition=0):
    return ck_end_offsets(bs, topic, [partition])[partition]


def test_epoch_bump_restarts_sequence_and_fences_old_epoch(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "wb-epoch", 1)

    async def go():
        conn = await raw_connect(bs)
        try:
            pid, epoch = await _init_pid(conn)
            assert await _produce(conn, "wb-epoch", 0, _batch(pid, epoch, 0, [b"e0"])) == (0, 0)
            # InitProducerId without a transactional id always hands out a NEW producer id
            # (Kafka's TransactionCoordinator), even when the current id/epoch are passed.
            pid_new, _ = await _init_pid(conn, pid, epoch)
            assert pid_new != pid
            # KIP-360: an idempotent producer bumps its epoch client-side (Java's
            # bumpIdempotentEpochAndResetIdIfNeeded); the broker must then see sequence 0.
            epoch2 = epoch + 1
            code, _ = await _produce(conn, "wb-epoch", 0, _batch(pid, epoch2, 1, [b"bad"]))
            assert code == OUT_OF_ORDER_SEQUENCE_NUMBER, "a new epoch must start at sequence 0"
            assert await _produce(conn, "wb-epoch", 0, _batch(pid, epoch2, 0, [b"e1"])) == (0, 1)
            code, _ = await _produce(conn, "wb-epoch", 0, _batch(pid, epoch, 1, [b"zombie"]))
            assert code == INVALID_PRODUCER_EPOCH
        finally:
            await conn.close()

    run_async(go())
    assert _values(bs, "wb-epoch", 2) == [b"e0", b"e1"]
    assert _watermarks(bs, "wb-epoch") == (0, 2)


def _dedup_after(broker: EmbeddedBroker, topic: str, crash: bool) -> None:
    bs = broker.bootstrap_servers
    ck_create_topic(bs, topic, 1)
    state = {}

    async def first():
        conn = await raw_connect(bs)
        try:
            pid, epoch = await _init_pid(conn)
            state["batches"] = [_batch(pid, epoch, 0, [b"one", b"two"]),
                                _batch(pid, epoch, 2, [b"three"])]
            assert await _produce(conn, topic, 0, state["batches"][0]) == (0, 0)
            assert await _produce(conn, topic, 0, state["batches"][1]) == (0, 2)
        finally:
            await conn.close()

    async def again():
        conn = await raw_connect(bs)
        try:
            assert await _produce(conn, topic, 0, state["batches"][0]) == (0, 0)
            assert await _produce(conn, topic, 0, state["batches"][1]) == (0, 2)
        finally:
            await conn.close()

    run_async(first())
    if crash:
        broker.kill()
        broker.start()
    else:
        broker.restart()
    run_async(again())
    assert _values(bs, topic, 3) == [b"one", b"two", b"three"]
    assert _watermarks(bs, topic) == (0, 3)


def test_duplicate_detection_survives_clean_restart(snakka_broker):
    _dedup_after(snakka_broker, "wb-restart", crash=False)


@pytest.mark.slow
def test_duplicate_detection_survives_kill_9(snakka_broker_factory):
    broker = snakka_broker_factory(mode="subprocess",
                                   config={"log.flush.interval.messages": "1"})
    _dedup_after(broker, "wb-crash", crash=True)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_idempotent_producer_across_kill_9(snakka_broker_factory):
    """librdkafka's idempotent producer keeps producing while the broker is SIGKILLed and
    restarted: the batches in flight at the crash are retried with their old sequence numbers,
    so the restarted broker must know the producer's state (rebuilt from the log / snapshots)
    to store each record exactly once, in order."""
    import time

    from confluent_kafka import Producer

    broker = snakka_broker_factory(mode="subprocess",
                                   config={"log.flush.interval.messages": "1"})
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "idem-crash", 2)
    acked: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def cb(err, msg):
        if err is not None:
            errors.append(f"{msg.value()}: {err}")
        else:
            acked[int(msg.value())] = (msg.partition(), msg.offset())

    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 1, "batch.num.messages": 50, "message.timeout.ms": 90000,
                  "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
                  "retry.backoff.ms": 20})
    n = 12_000
    in_flight_at_kill = None
    deadline = time.monotonic() + 120
    for seq in range(n):
        p.produce("idem-crash", key=b"k%d" % (seq % 13), value=b"%08d" % seq, on_delivery=cb)
        p.poll(0)
        # Keep the producer at most 2,000 records ahead of its acknowledgements: on a loaded
        # machine it could otherwise queue all n before 4,000 are acknowledged, and the kill
        # below would never happen while work is outstanding.
        while seq + 1 - len(acked) - len(errors) > 2000 and time.monotonic() < deadline:
            p.poll(0.01)
        # Kill only while the producer has messages outstanding (queued or in flight), so the
        # crash really interrupts work the restarted broker must deduplicate.
        if in_flight_at_kill is None and len(acked) >= 4000 and len(p) > 0:
            in_flight_at_kill = len(p)
            broker.kill()
            broker.start()
        if seq % 500 == 0:
            p.flush(0.05)
        assert time.monotonic() < deadline
    left = p.flush(90)
    assert left == 0 and not errors, (left, errors[:5])
    assert in_flight_at_kill, "the kill should interrupt in-flight requests"
    assert len(acked) == n
    stored = sum(hi - lo for lo, hi in ck_end_offsets(bs, "idem-crash", range(2)).values())
    got = ck_consume(bs, "idem-crash", range(2), stored, timeout=60)
    seqs = [int(g.value) for g in got]
    dups = len(seqs) - len(set(seqs))
    assert dups == 0, f"{dups} records stored twice after the crash"
    assert sorted(seqs) == list(range(n))
    for g in got:
        assert acked[int(g.value)] == (g.partition, g.offset)
