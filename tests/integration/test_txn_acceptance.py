"""Issue 11's acceptance criteria for transactions, with the three real Python clients.

1. **Interleaved clients.** confluent-kafka, kafka-python and aiokafka transactional producers
   run at the same time on one topic of 3 partitions: in every round each has a transaction
   open with records written to all partitions before any of them ends its own (a barrier), and
   each commits or aborts by its own seeded plan, so commits and aborts interleave in every
   partition. Each compresses its batches with another codec (lz4, gzip, zstd). Then read_committed consumers of all three clients see exactly the committed
   records (no aborted one, no duplicate, per-partition order kept) and read_uncommitted
   consumers see every record.
2. **LSO.** An open transaction holds the last stable offset at its first offset: ListOffsets
   LATEST read_committed answers it, and a read_committed consumer of each client gets nothing
   past it (while the open transaction's records and later non-transactional ones are there for
   read_uncommitted). The LSO advances on commit, on abort, and on the coordinator's timeout of
   a producer that just stops (transaction.timeout.ms short, the abort timer's interval small;
   awaited by polling ListOffsets).
3. **Zombie fencing** of kafka-python and aiokafka producers (confluent-kafka's case is in
   test_transactions.py): a second producer of the same transactional.id aborts the first one's
   open transaction; the first one's commit fails as fenced; only the second one's records are
   visible to read_committed.
"""

from __future__ import annotations

import random
import threading

import pytest

from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, run_async
from .txn_clients import CLIENTS, consume, stable_and_high, wait_stable

PARTITIONS = 3
ABORT_TIMER_MS = 100
TXN_TIMEOUT_MS = 8000


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(config={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms":
                str(ABORT_TIMER_MS)}) as b:
        yield b


# -- 1. interleaved clients ------------------------------------------------------------------
ROUNDS = 6
PER_TXN = 9  # 3 per partition


def _plan(client: str) -> list[bool]:
    """commit (True) or abort per round, seeded per client; both happen for every client."""
    rnd = random.Random(f"txn-acceptance-{client}")
    plan = [rnd.random() < 0.5 for _ in range(ROUNDS)]
    plan[0], plan[1] = True, False
    return plan


def _value(client: str, rnd: int, k: int) -> bytes:
    return f"{client}|{rnd:03d}|{k:03d}".encode()


def _confluent_producer(bs: str, topic: str, tid: str, round_sync: threading.Barrier) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 5,
                  "compression.type": "lz4"})
    p.init_transactions(30)
    for r, commit in enumerate(_plan("confluent")):
        p.begin_transaction()
        for k in range(PER_TXN):
            p.produce(topic, value=_value("confluent", r, k), partition=k % PARTITIONS)
        assert p.flush(30) == 0  # written (librdkafka purges what is unsent on abort)
        round_sync.wait()  # every client has an open transaction with records in it
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        round_sync.wait()


def _kafka_python_producer(bs: str, topic: str, tid: str, round_sync: threading.Barrier) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bs, transactional_id=tid, linger_ms=5,
                      compression_type="gzip")
    try:
        p.init_transactions()
        for r, commit in enumerate(_plan("kafka-python")):
            p.begin_transaction()
            futs = [p.send(topic, value=_value("kafka-python", r, k), partition=k % PARTITIONS)
                    for k in range(PER_TXN)]
            p.flush()
            for f in futs:
                f.get(timeout=30)
            round_sync.wait()
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
            round_sync.wait()
    finally:
        p.close(timeout=10)


def _aiokafka_producer(bs: str, topic: str, tid: str, round_sync: threading.Barrier) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def go() -> None:
        loop = asyncio.get_running_loop()
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=tid, linger_ms=5,
                             compression_type="zstd")
        await p.start()
        try:
            for r, commit in enumerate(_plan("aiokafka")):
                await p.begin_transaction()
                futs = [await p.send(topic, value=_value("aiokafka", r, k),
                                     partition=k % PARTITIONS) for k in range(PER_TXN)]
                await asyncio.gather(*futs)
                await loop.run_in_executor(None, round_sync.wait)
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
                await loop.run_in_executor(None, round_sync.wait)
        finally:
            await p.stop()

    run_async(go(), timeout=120)


def _run_together(targets) -> None:
    """Run the producer functions in threads at once; the first failure aborts the barrier
    (the others fail fast instead of waiting) and is re-raised."""
    errors: list[BaseException] = []
    threads = []
    for fn in targets:
        def body(fn=fn):
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
                errors.append(e)
                fn.keywords["round_sync"].abort()
        threads.append(threading.Thread(target=body, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not any(t.is_alive() for t in threads), "a producer thread hung"
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        raise (real or errors)[0]


def _check_order(got: list[tuple[int, int, bytes]]) -> None:
    """Per partition, each producer's records appear in the order it sent them, once."""
    last: dict[tuple[int, str], tuple[int, int]] = {}
    for part, _off, value in sorted(got):
        client, r, k = value.decode().split("|")
        pos = (int(r), int(k))
        prev = last.get((part, client))
        assert prev is None or prev < pos, f"partition {part}: {client} {pos} after {prev}"
        last[(part, client)] = pos


def test_three_clients_interleave_commits_and_aborts(broker):
    from functools import partial

    bs = broker.bootstrap_servers
    topic = "txn-interleaved"
    ck_create_topic(bs, topic, PARTITIONS)
    sync = threading.Barrier(3, timeout=60)
    _run_together([
        partial(_confluent_producer, bs, topic, "il-ck", round_sync=sync),
        partial(_kafka_python_producer, bs, topic, "il-kp", round_sync=sync),
        partial(_aiokafka_producer, bs, topic, "il-aio", round_sync=sync)])

    every = {_value(c, r, k) for c in CLIENTS for r in range(ROUNDS) for k in range(PER_TXN)}
    committed = {_value(c, r, k) for c in CLIENTS for r, ok in enumerate(_plan(c)) if ok
                 for k in range(PER_TXN)}
    assert 0 < len(committed) < len(every)
    # Interleaved for real: in partition 0 the three producers' records alternate by round.
    runs = 0
    prev = None
    for client in (v.split(b"|")[0] for _, _, v in sorted(
            consume("confluent", bs, topic, [0], "read_uncommitted", len(every) // 3))):
        runs += client != prev
        prev = client
    assert runs >= 2 * ROUNDS, f"the producers' transactions did not interleave ({runs} runs)"
    # Nothing left open; every partition holds its records plus one marker per transaction
    # that wrote there (each of the 3 clients, every round).
    offs = wait_stable(bs, topic, list(range(PARTITIONS)))
    for p, (_lso, hw) in offs.items():
        assert hw == len(every) // PARTITIONS + len(CLIENTS) * ROUNDS, (p, hw)
    for client in CLIENTS:
        got = consume(client, bs, topic, list(range(PARTITIONS)), "read_committed",
                      len(committed))
        values = [v for _, _, v in got]
        assert len(values) == len(set(values)), f"{client}: duplicates"
        assert set(values) == committed, (
            f"{client} read_committed: {len(set(values) - committed)} aborted record(s) seen, "
            f"{len(committed - set(values))} committed record(s) missing")
        _check_order(got)
        got = consume(client, bs, topic, list(range(PARTITIONS)), "read_uncommitted",
                      len(every))
        values = [v for _, _, v in got]
        assert len(values) == len(set(values)) and set(values) == every, client
        _check_order(got)


# -- 2. the LSO ------------------------------------------------------------------------------
def _plain_produce(bs: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(30) == 0


def _open_txn(bs: str, tid: str, topic: str, values: list[bytes], **cfg):
    """A confluent-kafka producer with an open transaction holding ``values`` (partition 0)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 0, **cfg})
    p.init_transactions(30)
    p.begin_transaction()
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0
    return p


def _assert_blocked_at(bs: str, topic: str, lso: int, visible: list[bytes],
                       clients: tuple[str, ...] = CLIENTS) -> None:
    """ListOffsets read_committed answers ``lso`` (below the high watermark), and a
    read_committed consumer of every client gets exactly ``visible`` and nothing past it."""
    (got_lso, hw), = stable_and_high(bs, topic, [0]).values()
    assert got_lso == lso < hw, (got_lso, lso, hw)
    for client in clients:
        got = consume(client, bs, topic, [0], "read_committed", len(visible), quiet=1.5)
        assert [v for _, _, v in got] == visible, client
        assert all(off < lso for _, off, _ in got), client


@pytest.mark.parametrize("end", ["commit", "abort", "timeout"])
def test_the_lso_blocks_behind_an_open_transaction_until_it_ends(broker, end):
    bs = broker.bootstrap_servers
    topic = f"txn-lso-{end}"
    ck_create_topic(bs, topic, 1)
    before = [b"before-%d" % i for i in range(4)]
    _plain_produce(bs, topic, before)  # offsets 0-3
    # The timeout case checks the block with ListOffsets only (the consumers' checks take
    # seconds); its transaction must outlive that check by far (TXN_TIMEOUT_MS), not the test.
    timeout_cfg = ({"transaction.timeout.ms": TXN_TIMEOUT_MS,
                    "message.timeout.ms": TXN_TIMEOUT_MS} if end == "timeout" else {})
    txn = [b"txn-%d" % i for i in range(3)]
    p = _open_txn(bs, f"lso-{end}", topic, txn, **timeout_cfg)  # offsets 4-6
    after = [b"after-%d" % i for i in range(3)]
    _plain_produce(bs, topic, after)  # offsets 7-9: stable themselves, but behind the txn
    _assert_blocked_at(bs, topic, 4, before, () if end == "timeout" else CLIENTS)
    if end != "timeout":
        ru = consume("confluent", bs, topic, [0], "read_uncommitted", 10, quiet=0.2)
        assert [v for _, _, v in ru] == before + txn + after

    if end == "commit":
        p.commit_transaction(30)
    elif end == "abort":
        p.abort_transaction(30)
    # else: the producer just stops; the coordinator's timer aborts its transaction.
    (lso, hw), = wait_stable(bs, topic, [0], timeout=30).values()
    assert lso == hw == 11  # 10 records and the marker
    visible = before + (txn if end == "commit" else []) + after
    for client in CLIENTS:
        got = consume(client, bs, topic, [0], "read_committed", len(visible), quiet=0.5)
        assert [v for _, _, v in got] == visible, client
    if end == "timeout":
        # The timed-out producer was fenced: its transaction cannot be committed any more.
        from confluent_kafka import KafkaException

        with pytest.raises(KafkaException):
            p.produce(topic, value=b"late", partition=0)
            p.commit_transaction(30)


# -- 3. zombie fencing -----------------------------------------------------------------------
def test_kafka_python_zombie_is_fenced(broker):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    bs = broker.bootstrap_servers
    topic = "txn-fence-kp"
    ck_create_topic(bs, topic, PARTITIONS)
    old = KafkaProducer(bootstrap_servers=bs, transactional_id="zombie-kp")
    new = None
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, value=b"zombie-open", partition=0).get(timeout=30)
        new = KafkaProducer(bootstrap_servers=bs, transactional_id="zombie-kp")
        new.init_transactions()  # fences the old producer, aborts its open transaction
        new.begin_transaction()
        new.send(topic, value=b"new", partition=0)
        new.commit_transaction()
        with pytest.raises(KafkaError) as ei:
            old.send(topic, value=b"zombie-late", partition=1)
            old.commit_transaction()
        assert type(ei.value).__name__ in ("ProducerFencedError", "InvalidProducerEpochError",
                                           "KafkaError"), repr(ei.value)
    finally:
        old.close(timeout=5)
        if new is not None:
            new.close(timeout=5)
    wait_stable(bs, topic, list(range(PARTITIONS)))
    for client in CLIENTS:
        got = consume(client, bs, topic, list(range(PARTITIONS)), "read_committed", 1)
        assert [v for _, _, v in got] == [b"new"], client


def test_aiokafka_zombie_is_fenced(broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    bs = broker.bootstrap_servers
    topic = "txn-fence-aio"
    ck_create_topic(bs, topic, PARTITIONS)
    raised: list[str] = []  # names only: the exception's traceback would keep aiokafka's
    # fenced futures alive past run_async, which collects and checks them

    async def go():
        old = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="zombie-aio")
        new = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="zombie-aio")
        await old.start()
        try:
            await old.begin_transaction()
            await (await old.send(topic, value=b"zombie-open", partition=0))
            await new.start()  # InitProducerId: fences the old producer
            async with new.transaction():
                await (await new.send(topic, value=b"new", partition=0))
            try:
                await (await old.send(topic, value=b"zombie-late", partition=1))
                await old.commit_transaction()
            except KafkaError as e:
                raised.append(type(e).__name__)
        finally:
            await new.stop()
            await old.stop()

    # aiokafka's sender task dies of the fence and nobody awaits it: expected here.
    run_async(go(), timeout=90, unretrieved_ok=("ProducerFenced",))
    assert raised and raised[0] in (
        "ProducerFenced", "InvalidProducerEpoch", "KafkaError"), raised
    wait_stable(bs, topic, list(range(PARTITIONS)))
    for client in CLIENTS:
        got = consume(client, bs, topic, list(range(PARTITIONS)), "read_committed", 1)
        assert [v for _, _, v in got] == [b"new"], client
    # read_uncommitted: the zombie's first record is there (aborted), the late one never was.
    got = consume("confluent", bs, topic, list(range(PARTITIONS)), "read_uncommitted", 2,
                  quiet=0.5)
    assert sorted(v for _, _, v in got) == [b"new", b"zombie-open"]



@pytest.mark.parametrize("order", ["later-first", "earlier-first"])
def test_the_lso_waits_for_the_earliest_open_transaction(broker, order):
    """Two transactions open on one partition (A first, then B): ending one of them moves the
    LSO only as far as the other one's first offset allows."""
    bs = broker.bootstrap_servers
    topic = f"txn-lso-two-{order}"
    ck_create_topic(bs, topic, 1)
    a = _open_txn(bs, f"two-a-{order}", topic, [b"a-0", b"a-1"])  # offsets 0-1
    b = _open_txn(bs, f"two-b-{order}", topic, [b"b-0"])  # offset 2
    a.produce(topic, value=b"a-2", partition=0)  # offset 3: A interleaves with B
    assert a.flush(30) == 0
    assert stable_and_high(bs, topic, [0]) == {0: (0, 4)}
    if order == "later-first":
        b.commit_transaction(30)  # marker at 4; A still holds the LSO at 0
        assert stable_and_high(bs, topic, [0]) == {0: (0, 5)}
        _assert_blocked_at(bs, topic, 0, [], clients=("confluent",))
        a.abort_transaction(30)  # marker at 5
        visible = [b"b-0"]
    else:
        a.commit_transaction(30)  # marker at 4; B (first offset 2) now holds the LSO
        assert stable_and_high(bs, topic, [0]) == {0: (2, 5)}
        _assert_blocked_at(bs, topic, 2, [b"a-0", b"a-1"], clients=("confluent",))
        b.abort_transaction(30)
        visible = [b"a-0", b"a-1", b"a-2"]
    assert wait_stable(bs, topic, [0], timeout=10) == {0: (6, 6)}
    for client in CLIENTS:
        got = consume(client, bs, topic, [0], "read_committed", len(visible), quiet=0.5)
        assert [v for _, _, v in got] == visible, client
