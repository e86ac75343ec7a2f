"""Transactions across crashes: a SIGKILLed broker, and a consume-transform-produce processor
killed with os._exit (issue 11's acceptance criteria).

- **Broker SIGKILL mid-transaction.** Transactions open with records written on several
  partitions when the broker process is killed. After the restart, one transactional id is
  re-initialised at once (InitProducerId fences and aborts the open transaction), the other is
  left alone (the coordinator's timer aborts it after its transaction.timeout.ms, which counts
  from its durable start time). No partition stays blocked: the LSO reaches the high watermark;
  read_committed sees what was committed before the crash and nothing of the open
  transactions nor of those aborted before the crash (small segments: their .txnindex entries
  span segments the crash recovery rebuilds); both ids commit again.
- **Broker SIGKILL mid-commit.** A raw connection (every other transaction as a Transactions V2
  producer: Produce v12, EndTxn v5) sends EndTxn(commit) for a transaction over many partitions and the broker is killed right after, at delays of 0-10 ms, so the kill lands
  before the PrepareCommit record, among the markers (under strict durability the fsync waits
  open that window: a start-up then completes the transaction), or after them. After every restart each
  transaction is atomic (read_committed sees all of its records or none, according to what was
  durable), no partition stays blocked, and the producer can init again and commit.
- **Consume-transform-produce.** A processor (a subprocess; confluent-kafka, kafka-python) reads an input
  topic read_committed and writes each record transformed to an output topic, in transactions
  that carry its consumed offsets (send_offsets_to_transaction: TxnOffsetCommit). It calls
  os._exit at random points (after consuming, after producing, after sending the offsets, after
  committing) and is restarted each time; at the end the output holds each input exactly once.
  The same processor also runs while the broker is SIGKILLed and restarted under it.
- **SIGKILL after __transaction_state was snapshotted and trimmed**: the coordinator's state
  replays to the same producer ids and epochs; the open transaction is aborted.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest

from snakka.protocol.errors import ErrorCode
from snakka.records import Record
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, now_ms, raw_connect, run_async, segment_files
from .txn_clients import CLIENTS, consume, fill_topic, wait_stable

TXN_TIMEOUT_MS = 4000
BROKER_CONFIG = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
                 "transaction.state.log.num.partitions": "5"}


def _subprocess_broker(factory, **extra) -> EmbeddedBroker:
    # INFO: the coordinator's start-up line says how many transactions it completes.
    return factory(mode="subprocess", config={**BROKER_CONFIG, **extra}, log_level="INFO")


def _completed_at_startup(broker: EmbeddedBroker) -> list[int]:
    """Per start-up so far: how many transactions the coordinator found in PrepareCommit /
    PrepareAbort (a kill between the Prepare record and the Complete record)."""
    return [int(line.split("transactional id(s), ")[1].split()[0]) for line in broker.output
            if "transaction(s) to complete" in line]


def _assert_no_broker_errors(broker: EmbeddedBroker) -> None:
    bad = [line for line in broker.output if " ERROR " in line or "Traceback" in line]
    assert not bad, "\n".join(bad[:20])


# -- SIGKILL mid-transaction -----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigkill_mid_transaction(snakka_broker_factory):
    from confluent_kafka import Producer

    broker = _subprocess_broker(snakka_broker_factory)
    bs = broker.bootstrap_servers
    topic = "crash-open"
    # Small segments: the aborted transactions' index entries (.txnindex) span several
    # segments, and the crash recovery must rebuild them from the log.
    ck_create_topic(bs, topic, 3, {"segment.bytes": "2048"})
    cfg = {"bootstrap.servers": bs, "linger.ms": 0,
           "transaction.timeout.ms": TXN_TIMEOUT_MS, "message.timeout.ms": TXN_TIMEOUT_MS}
    producers = {}
    pad = "x" * 200
    for tid in ("reinit", "left-alone"):
        p = Producer({**cfg, "transactional.id": tid})
        p.init_transactions(30)
        p.begin_transaction()
        for k in range(6):
            p.produce(topic, value=f"{tid}-committed-{k}".encode(), partition=k % 3)
        p.commit_transaction(30)
        for r in range(3):  # aborted before the crash: read_committed must never see them
            p.begin_transaction()
            for k in range(12):
                p.produce(topic, value=f"{tid}-aborted-{r}-{k}-{pad}".encode(), partition=k % 3)
            assert p.flush(30) == 0
            p.abort_transaction(30)
        p.begin_transaction()
        for k in range(6):
            p.produce(topic, value=f"{tid}-open-{k}".encode(), partition=k % 3)
        assert p.flush(30) == 0
        producers[tid] = p
    broker.kill()
    for p in producers.values():  # librdkafka objects of a dead broker: dropped, never used
        p.purge()
    producers.clear()
    broker.start()
    bs = broker.bootstrap_servers

    again = Producer({**cfg, "transactional.id": "reinit"})
    again.init_transactions(30)  # aborts "reinit"'s open transaction at once
    # "left-alone" ends by the coordinator's timer (its start time survived the crash).
    wait_stable(bs, topic, [0, 1, 2], timeout=60)
    for tid in ("reinit", "left-alone"):
        p = again if tid == "reinit" else Producer({**cfg, "transactional.id": tid})
        if tid != "reinit":
            p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, value=f"{tid}-after".encode(), partition=0)
        p.commit_transaction(30)
    expected = sorted(f"{tid}-{what}".encode() for tid in ("reinit", "left-alone")
                      for what in [*(f"committed-{k}" for k in range(6)), "after"])
    for client in CLIENTS:
        got = consume(client, bs, topic, [0, 1, 2], "read_committed", len(expected))
        assert sorted(v for _, _, v in got) == expected, client
    assert len(segment_files(broker.data_dir, topic, 0, ".log")) > 2
    offs = wait_stable(bs, topic, [0, 1, 2])
    assert all(lso == hw for lso, hw in offs.values())
    _assert_no_broker_errors(broker)


# -- SIGKILL mid-commit (raw protocol) -------------------------------------------------------
TOPICS = [f"crash-commit-{i}" for i in range(3)]
PARTS = 8  # 24 partitions: 24 markers to write after the PrepareCommit record


async def _open_and_commit(bs: str, tid: str, value: bytes, kill, delay: float,
                           tv2: bool) -> None:
    """InitProducerId, AddPartitionsToTxn and Produce on every partition, then EndTxn(commit)
    sent without waiting for its answer, then ``kill()`` after ``delay`` seconds. ``tv2``: as
    a Transactions V2 producer (no AddPartitionsToTxn: Produce v12 adds; EndTxn v5)."""
    from snakka.protocol.messages.add_partitions_to_txn_request import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
    )
    from snakka.protocol.messages.end_txn_request import EndTxnRequest
    from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
    from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest
    from snakka.protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from snakka.records import build_batch

    conn = await raw_connect(bs)
    try:
        r = await conn.send(FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]))
        assert r.coordinators[0].error_code == 0, r
        init = await conn.send(InitProducerIdRequest(transactional_id=tid,
                                                     transaction_timeout_ms=TXN_TIMEOUT_MS))
        assert init.error_code == 0, init
        pid, epoch = init.producer_id, init.producer_epoch
        if not tv2:
            r = await conn.send(AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                    AddPartitionsToTxnTopic(name=t, partitions=list(range(PARTS)))
                    for t in TOPICS]), version=3)
            assert all(p.partition_error_code == 0 for t in r.results_by_topic_v3_and_below
                       for p in t.results_by_partition), r
        batch = build_batch([Record(timestamp=now_ms(), key=b"k", value=value)],
                            producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            is_transactional=True)
        resp = await conn.send(ProduceRequest(
            transactional_id=tid, acks=-1, timeout_ms=10000, topic_data=[
                TopicProduceData(name=t, partition_data=[
                    PartitionProduceData(index=p, records=batch) for p in range(PARTS)])
                for t in TOPICS]), version=12 if tv2 else 9)
        assert all(p.error_code == 0 for t in resp.responses
                   for p in t.partition_responses), resp
        await conn.send_no_response(EndTxnRequest(transactional_id=tid, producer_id=pid,
                                                  producer_epoch=epoch, committed=True),
                                    version=5 if tv2 else 3)
        if delay:
            await asyncio.sleep(delay)
        kill()
    finally:
        await conn.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict-durability"])
def test_sigkill_mid_commit(snakka_broker_factory, strict):
    from confluent_kafka import Producer

    extra = {"log.flush.interval.messages": "1"} if strict else {}
    broker = _subprocess_broker(snakka_broker_factory, **extra)
    for t in TOPICS:
        ck_create_topic(broker.bootstrap_servers, t, PARTS)
    every = [(t, p) for t in TOPICS for p in range(PARTS)]
    outcomes = {}
    for i, delay in enumerate((0, 0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.01)):
        tid = f"mid-commit-{i}"
        value = tid.encode()
        run_async(_open_and_commit(broker.bootstrap_servers, tid, value, broker.kill, delay,
                                   tv2=i % 2 == 1))
        broker.start()
        bs = broker.bootstrap_servers
        for t in TOPICS:  # no partition stays blocked (an Ongoing one aborts on its timeout)
            wait_stable(bs, t, list(range(PARTS)), timeout=60)
        seen = 0
        for t in TOPICS:
            got = consume("confluent", bs, t, list(range(PARTS)), "read_committed", 0,
                          quiet=0.3)
            seen += sum(1 for _, _, v in got if v == value)
        # Atomic: committed on every partition, or on none.
        assert seen in (0, len(every)), f"{tid}: visible on {seen} of {len(every)} partitions"
        outcomes[tid] = "committed" if seen else "aborted"
        # The producer can init again and commit.
        p = Producer({"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 0})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(TOPICS[0], value=value + b"-after", partition=0)
        p.commit_transaction(30)
        got = consume("confluent", bs, TOPICS[0], [0], "read_committed", 1, quiet=0.3)
        assert [v for _, _, v in got if v == value + b"-after"] == [value + b"-after"]
    # How the kills landed (timing: reported, not asserted): "aborted" = before the
    # PrepareCommit record was durable; a start-up completing transactions = among the markers.
    print("mid-commit outcomes:", outcomes, "completed at start-up:",
          _completed_at_startup(broker))
    _assert_no_broker_errors(broker)


# -- consume-transform-produce with os._exit -------------------------------------------------
PROCESSOR = textwrap.dedent('''
    """A consume-transform-produce processor that dies at random points (os._exit)."""
    import os, random, sys
    from confluent_kafka import Consumer, Producer, TopicPartition

    bs, src, dst, parts, seed, crash_p = sys.argv[1:7]
    parts, crash_p = int(parts), float(crash_p)
    per_txn = int(sys.argv[7]) if len(sys.argv) > 7 else 50
    rnd = random.Random(int(seed))

    def maybe_die(where):
        if rnd.random() < crash_p:
            print("dying", where, flush=True)
            os._exit(17)

    c = Consumer({"bootstrap.servers": bs, "group.id": "ctp", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "enable.partition.eof": False, "fetch.wait.max.ms": 100})
    p = Producer({"bootstrap.servers": bs, "transactional.id": "ctp-processor", "linger.ms": 5})
    p.init_transactions(30)  # fences the previous incarnation, aborts its open transaction
    tps = [TopicPartition(src, i) for i in range(parts)]
    # Manual assignment (no rebalance to wait for after a crash), from the committed offsets:
    # stable ones, since a read_committed consumer asks with RequireStable.
    nxt = {t.partition: max(t.offset, 0) for t in c.committed(tps, timeout=30)}
    print("starting at", nxt, flush=True)
    c.assign([TopicPartition(src, i, o) for i, o in nxt.items()])
    ends = {i: c.get_watermark_offsets(TopicPartition(src, i), timeout=10)[1]
            for i in range(parts)}
    while any(nxt[i] < ends[i] for i in range(parts)):
        msgs = c.consume(per_txn, 0.5)
        for m in msgs:
            if m.error():
                raise SystemExit(f"consumer error: {m.error()}")
        if not msgs:
            continue
        maybe_die("after consume")
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, value=b"out:" + m.value(), partition=m.partition())
            nxt[m.partition()] = m.offset() + 1
        maybe_die("after produce")
        p.send_offsets_to_transaction([TopicPartition(src, i, o) for i, o in nxt.items()],
                                      c.consumer_group_metadata(), 30)
        maybe_die("after send_offsets")
        p.commit_transaction(30)
        print("committed", nxt, flush=True)
        maybe_die("after commit")
    print("done", flush=True)
''')


KAFKA_PYTHON_PROCESSOR = textwrap.dedent('''
    """The same processor with kafka-python."""
    import os, random, sys
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    bs, src, dst, parts, seed, crash_p = sys.argv[1:7]
    parts, crash_p = int(parts), float(crash_p)
    rnd = random.Random(int(seed))

    def maybe_die(where):
        if rnd.random() < crash_p:
            print("dying", where, flush=True)
            os._exit(17)

    c = KafkaConsumer(bootstrap_servers=bs, group_id="ctp-kp", isolation_level="read_committed",
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      fetch_max_wait_ms=100)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id="ctp-kp-processor", linger_ms=5)
    p.init_transactions()
    tps = [TopicPartition(src, i) for i in range(parts)]
    c.assign(tps)
    nxt = {}
    for tp in tps:
        nxt[tp.partition] = c.committed(tp) or 0
        c.seek(tp, nxt[tp.partition])
    print("starting at", nxt, flush=True)
    ends = {tp.partition: o for tp, o in c.end_offsets(tps).items()}
    while any(nxt[i] < ends[i] for i in range(parts)):
        msgs = [m for batch in c.poll(timeout_ms=500, max_records=50).values() for m in batch]
        if not msgs:
            continue
        maybe_die("after consume")
        p.begin_transaction()
        for m in msgs:
            p.send(dst, value=b"out:" + m.value, partition=m.partition)
            nxt[m.partition] = m.offset + 1
        maybe_die("after produce")
        p.send_offsets_to_transaction(
            {TopicPartition(src, i): OffsetAndMetadata(o, "", -1) for i, o in nxt.items()},
            "ctp-kp")
        maybe_die("after send_offsets")
        p.commit_transaction()
        print("committed", nxt, flush=True)
        maybe_die("after commit")
    print("done", flush=True)
''')


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_consume_transform_produce_survives_os_exit(tmp_path, client):

    n, parts = 400, 3
    script = tmp_path / "processor.py"
    script.write_text(PROCESSOR if client == "confluent" else KAFKA_PYTHON_PROCESSOR)
    with EmbeddedBroker(config=BROKER_CONFIG) as b:
        bs = b.bootstrap_servers
        ck_create_topic(bs, "ctp-in", parts)
        ck_create_topic(bs, "ctp-out", parts)
        fill_topic(bs, "ctp-in", n, parts)
        deaths, runs = 0, 0
        deadline = time.monotonic() + 300
        while True:
            assert time.monotonic() < deadline, f"processor never finished ({runs} runs)"
            runs += 1
            r = subprocess.Popen([sys.executable, str(script), bs, "ctp-in", "ctp-out",
                                  str(parts), str(runs), "0.08"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            try:
                out, _ = r.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                r.kill()
                out, _ = r.communicate()
                raise AssertionError(f"processor run {runs} hung:\n{out[-4000:]}") from None
            if r.returncode == 0:
                break
            assert r.returncode == 17, f"processor run {runs} failed:\n{out[-4000:]}"
            deaths += 1
        assert deaths >= 5, f"only {deaths} crashes: raise the crash probability"
        wait_stable(bs, "ctp-out", list(range(parts)))
        got = consume("confluent", bs, "ctp-out", list(range(parts)), "read_committed", n)
        values = sorted(v for _, _, v in got)
        assert len(values) == len(set(values)), (
            f"duplicates in the output after {deaths} crashes: "
            f"{len(values) - len(set(values))}")
        assert values == [b"out:%05d" % i for i in range(n)], f"{deaths} crashes"


STALL_S = 15.0  # a processor silent this long (it prints every commit) is killed


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_consume_transform_produce_survives_a_broker_sigkill(tmp_path, snakka_broker_factory):
    """The confluent-kafka processor (small transactions, rare os._exit) runs while the broker
    is SIGKILLed and restarted under it; a processor that fails on the outage is restarted.
    The output still holds each input exactly once."""

    from .txn_clients import stable_and_high

    n, parts = 1500, 3
    script = tmp_path / "processor.py"
    script.write_text(PROCESSOR)
    broker = _subprocess_broker(snakka_broker_factory)
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "ctp-in", parts)
    ck_create_topic(bs, "ctp-out", parts)
    fill_topic(bs, "ctp-in", n, parts)
    runs, killed, exits = 0, False, []
    proc = None
    deadline = time.monotonic() + 240
    try:
        while True:
            assert time.monotonic() < deadline, (
                f"never finished: {runs} runs, exits {exits}; the last run's output:\n"
                + (tmp_path / f"processor-{runs}.log").read_text()[-5000:])
            if proc is None:
                runs += 1
                last_size, quiet_since = -1, time.monotonic()
                log = tmp_path / f"processor-{runs}.log"
                with log.open("w") as out:
                    proc = subprocess.Popen(
                        [sys.executable, str(script), bs, "ctp-in", "ctp-out", str(parts),
                         str(1000 + runs), "0.01", "5"], stdout=out, stderr=subprocess.STDOUT)
            rc = proc.poll()
            if rc is not None:
                exits.append(rc)
                proc = None
                if rc == 0:
                    break
                continue
            size = log.stat().st_size
            if size != last_size:
                last_size, quiet_since = size, time.monotonic()
            elif time.monotonic() - quiet_since > STALL_S:
                # librdkafka can stay blocked in send_offsets_to_transaction after the broker
                # came back (its 30 s timeout not honoured; the protocol log shows it never
                # sends the group's FindCoordinator / TxnOffsetCommit after AddOffsetsToTxn):
                # the client's hang, not the broker's. An operator would restart it; so does
                # this watchdog (a SIGKILL: one more crash for the exactly-once check).
                proc.kill()
                proc.wait()
                exits.append("stalled")
                proc = None
                continue
            if not killed:
                written = sum(hw for _, hw in stable_and_high(bs, "ctp-out",
                                                             list(range(parts))).values())
                if written >= n // 3:
                    broker.kill()  # the processor is mid-stream: SIGKILL the broker under it
                    broker.start()
                    killed = True
            time.sleep(0.05)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    print("processor exits:", exits)  # how the runs ended (timing dependent: not asserted)
    assert killed, "the processor finished before the broker could be killed"
    wait_stable(bs, "ctp-out", list(range(parts)))
    got = consume("confluent", bs, "ctp-out", list(range(parts)), "read_committed", n)
    values = sorted(v for _, _, v in got)
    assert len(values) == len(set(values)), (
        f"{len(values) - len(set(values))} duplicates after the broker crash (exits {exits})")
    assert values == [b"out:%05d" % i for i in range(n)], f"exits {exits}"
    _assert_no_broker_errors(broker)


# -- SIGKILL after __transaction_state was compacted -----------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkill_after_the_transaction_log_was_compacted(snakka_broker_factory):
    """Transactions until the log cleaner has compacted the one ``__transaction_state``
    partition (twice: the second pass cleans what the first left, over records whose earlier
    values are gone), then a SIGKILL with one transaction open: after the restart every
    transactional id continues at its producer id with the next epoch, the open transaction
    is aborted, and every committed record is there."""
    from .test_txn_hostile import add_partitions, batch, end_txn, init_pid, produce

    broker = _subprocess_broker(snakka_broker_factory, **{
        "transaction.state.log.num.partitions": "1", "log.roll.ms": "200",
        "log.cleaner.backoff.ms": "50", "log.cleaner.min.cleanable.ratio": "0.01"})
    ck_create_topic(broker.bootstrap_servers, "txn-hostile", 3)  # the raw helpers' topic
    tids = [f"trim-{i}" for i in range(3)]
    deadline = time.monotonic() + 200

    def passes() -> int:
        return sum("Cleaned log __transaction_state-0 " in line for line in list(broker.output))

    async def drive():
        conn = await raw_connect(broker.bootstrap_servers)
        ids = {}
        rounds = 0
        try:
            for tid in tids:
                r = await init_pid(conn, tid, TXN_TIMEOUT_MS)
                assert r.error_code == 0, r
                ids[tid] = (r.producer_id, r.producer_epoch)
            while True:
                last_round = passes() >= 2 or time.monotonic() > deadline
                n = rounds
                for i, tid in enumerate(tids):
                    pid, epoch = ids[tid]
                    assert await add_partitions(conn, tid, pid, epoch, [i]) == {i: 0}
                    got = await produce(conn, tid, {i: batch(pid, epoch, n)})
                    assert got[i][0] == 0, got
                    if not (last_round and i == 0):  # trim-0's last transaction stays open
                        assert await end_txn(conn, tid, pid, epoch, True) == 0
                rounds += 1
                if last_round:
                    return ids, rounds
        finally:
            await conn.close()

    ids, rounds = run_async(drive(), timeout=240)
    assert passes() >= 2, "the cleaner never compacted __transaction_state twice"
    broker.kill()
    broker.start()
    bs = broker.bootstrap_servers

    async def after():
        conn = await raw_connect(bs)
        try:
            for tid in tids:
                r = await init_pid(conn, tid, TXN_TIMEOUT_MS)
                for _ in range(100):  # trim-0's open transaction is being aborted
                    if r.error_code != ErrorCode.CONCURRENT_TRANSACTIONS:
                        break
                    await asyncio.sleep(0.05)
                    r = await init_pid(conn, tid, TXN_TIMEOUT_MS)
                assert r.error_code == 0, r
                # The next epoch; trim-0's open transaction was first fenced (one more bump,
                # as Kafka's InitProducerId does to abort an ongoing transaction).
                bumps = 2 if tid == "trim-0" else 1
                assert (r.producer_id, r.producer_epoch) == (ids[tid][0], ids[tid][1] + bumps), \
                    tid
        finally:
            await conn.close()

    run_async(after())
    offs = wait_stable(bs, "txn-hostile", [0, 1, 2], timeout=30)
    # Partition i: `rounds` records and `rounds` markers (trim-0's last one an abort).
    assert offs == {i: (2 * rounds, 2 * rounds) for i in range(3)}, offs
    got = consume("confluent", bs, "txn-hostile", [0, 1, 2], "read_committed",
                  3 * rounds - 1, quiet=0.5)
    assert len(got) == 3 * rounds - 1
    _assert_no_broker_errors(broker)
