"""Transaction administration (issue 11, item 5) against an in-process broker: DescribeProducers
after real clients' idempotent produce, and the abort of a hanging transaction with
WriteTxnMarkers (snakka's client and CLI), which ends it for read_committed consumers
(confluent-kafka) and moves the last stable offset.

A hanging transaction is one no coordinator will ever finish: here transactional batches of a
producer id no coordinator knows, written straight into the partition log of the stopped broker
(what data recovered from another cluster, or a coordinator bug, leaves behind).
"""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Producer
from storage.helpers import append, batch  # tests/ is on sys.path

from snakka.client.admin import Admin, AdminError
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_producers_request import (
    DescribeProducersRequest,
    TopicRequest,
)
from snakka.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from snakka.protocol.messages.list_transactions_request import ListTransactionsRequest
from snakka.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from snakka.storage import LogConfig, UnifiedLog
from snakka.testing import EmbeddedBroker

from .helpers import SNAKKA, ck_read_to_end, raw_connect, run, run_async, wait_until

pytestmark = pytest.mark.timeout(120)
ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
HANGING_PID, HANGING_EPOCH = 4242, 3


def cli(*args: str, check: bool = True):
    return run([SNAKKA, *args], env=ENV, check=check, timeout=60)


def rows(out: bytes) -> list[list[str]]:
    """The body rows of a table as the CLI prints it to a pipe (tab-separated, header first)."""
    return [ln.split("\t") for ln in out.decode().splitlines()[1:]]


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    async def go():
        async with Admin(bootstrap) as admin:
            await admin.create_topic(name, partitions)

    run_async(go(), timeout=None)


def last_stable_offset(bootstrap: str, topic: str, partition: int) -> int:
    async def go():
        conn = await raw_connect(bootstrap)
        try:
            resp = await conn.send(ListOffsetsRequest(
                replica_id=-1, isolation_level=1, topics=[ListOffsetsTopic(name=topic, partitions=[
                    ListOffsetsPartition(partition_index=partition, timestamp=-1)])]))
            p = resp.topics[0].partitions[0]
            assert p.error_code == 0
            return p.offset
        finally:
            await conn.close()

    return run_async(go())


@pytest.fixture
def broker():
    b = EmbeddedBroker()
    b.start()
    yield b
    b.close()


def test_describe_producers_after_idempotent_produce(broker):
    from kafka import KafkaProducer

    bs = broker.bootstrap_servers
    create_topic(bs, "idem", 3)
    t0 = time.time_ns() // 1_000_000
    ck = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 0})
    for i in range(5):
        ck.produce("idem", f"ck-{i}".encode(), partition=0)
        ck.flush(30)  # one batch per record: sequences 0..4
    assert ck.flush(30) == 0
    kp = KafkaProducer(bootstrap_servers=bs, enable_idempotence=True, linger_ms=0)
    try:
        for i in range(3):
            kp.send("idem", f"kp-{i}".encode(), partition=1).get(timeout=30)
    finally:
        kp.close()
    t1 = time.time_ns() // 1_000_000

    async def describe():
        async with Admin(bs) as admin:
            return await admin.describe_producers("idem", [0, 1, 2])

    got = run_async(describe())
    assert got[2] == []
    [p0], [p1] = got[0], got[1]
    assert p0.producer_id != p1.producer_id and min(p0.producer_id, p1.producer_id) >= 0
    for p, last_seq in ((p0, 4), (p1, 2)):
        assert (p.producer_epoch, p.last_sequence) == (0, last_seq)
        # No transaction: no marker seen (coordinator epoch -1), no open transaction (-1).
        assert (p.coordinator_epoch, p.current_txn_start_offset) == (-1, -1)
        assert t0 - 1000 <= p.last_timestamp <= t1 + 1000

    # The CLI shows the same, with kafka-transactions.sh's columns.
    out = cli("transactions", "describe-producers", "--topic", "idem", "--partition", "0",
              "-b", bs).stdout
    assert out.decode().splitlines()[0].split("\t") == [
        "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
        "LastTimestamp", "CurrentTransactionStartOffset"]
    assert rows(out) == [[str(p0.producer_id), "0", "-1", "4", str(p0.last_timestamp), "None"]]


def test_describe_producers_errors(broker):
    bs = broker.bootstrap_servers
    create_topic(bs, "idem", 1)

    async def go():
        conn = await raw_connect(bs)
        try:
            return await conn.send(DescribeProducersRequest(topics=[
                TopicRequest(name="idem", partition_indexes=[0, 5]),
                TopicRequest(name="nope", partition_indexes=[0]),
                TopicRequest(name="bad/name", partition_indexes=[0, 1]),
            ]))
        finally:
            await conn.close()

    resp = run_async(go())
    got = {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}
    assert got == {("idem", 0): 0, ("idem", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   ("bad/name", 0): ErrorCode.INVALID_TOPIC_EXCEPTION,
                   ("bad/name", 1): ErrorCode.INVALID_TOPIC_EXCEPTION}
    r = cli("transactions", "describe-producers", "--topic", "idem", "--partition", "5", "-b",
            bs, check=False)
    assert r.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in r.stderr


@pytest.fixture
def hanging(broker):
    """Topic ``hang``: plain-0, plain-1 (0-1), an open transaction of HANGING_PID (2-4) no
    coordinator knows, plain-x (5) behind it. Returns the broker."""
    bs = broker.bootstrap_servers
    create_topic(bs, "hang", 1)
    p = Producer({"bootstrap.servers": bs})
    p.produce("hang", b"plain-0", partition=0)
    p.produce("hang", b"plain-1", partition=0)
    assert p.flush(30) == 0
    del p  # no client left reconnecting to the stopped broker
    broker.stop()
    plog = UnifiedLog(os.path.join(broker.data_dir, "hang-0"), LogConfig(), recover=False)
    assert plog.log_end_offset == 2
    append(plog, batch(3, producer_id=HANGING_PID, producer_epoch=HANGING_EPOCH,
                       base_sequence=0, is_transactional=True, tag="txn"))
    append(plog, batch(1, tag="plain-x"))
    plog.close()
    broker.start()
    return broker


def test_abort_a_hanging_transaction(hanging):
    bs = hanging.bootstrap_servers
    # The open transaction holds the LSO at its first offset: read_committed sees 2 records.
    assert last_stable_offset(bs, "hang", 0) == 2
    assert ck_read_to_end(bs, "hang", "read_committed") == [b"plain-0", b"plain-1"]
    out = cli("transactions", "describe-producers", "--topic", "hang", "--partition", "0",
              "-b", bs).stdout
    assert [r for r in rows(out) if r[0] == str(HANGING_PID)] == [
        [str(HANGING_PID), str(HANGING_EPOCH), "-1", "2", rows(out)[0][4], "2"]]

    out = cli("transactions", "abort", "--topic", "hang", "--partition", "0",
              "--start-offset", "2", "-b", bs).stdout
    assert f"producer {HANGING_PID} (epoch {HANGING_EPOCH}, coordinator epoch 0)".encode() in out
    # The ABORT marker is at offset 6: the LSO is the log end, the aborted records are
    # filtered for read_committed consumers and still there for the others.
    assert last_stable_offset(bs, "hang", 0) == 7
    assert ck_read_to_end(bs, "hang", "read_committed") == [b"plain-0", b"plain-1", b"plain-xv0."]
    uncommitted = ck_read_to_end(bs, "hang", "read_uncommitted")
    assert len(uncommitted) == 6 and sum(v.startswith(b"txn") for v in uncommitted) == 3
    assert rows(cli("transactions", "describe-producers", "--topic", "hang", "--partition",
                    "0", "-b", bs).stdout)[0][5] == "None"

    # Nothing is open at offset 2 any more.
    r = cli("transactions", "abort", "--topic", "hang", "--partition", "0", "--start-offset",
            "2", "-b", bs, check=False)
    assert r.returncode == 1 and b"no open transaction starts at offset 2" in r.stderr
    # A stale epoch is refused by the partition's producer state; nothing is written.
    r = cli("transactions", "abort", "--topic", "hang", "--partition", "0", "--producer-id",
            str(HANGING_PID), "--producer-epoch", str(HANGING_EPOCH - 1),
            "--coordinator-epoch", "-1", "-b", bs, check=False)
    assert r.returncode == 1 and b"INVALID_PRODUCER_EPOCH" in r.stderr
    assert last_stable_offset(bs, "hang", 0) == 7


def test_abort_with_explicit_producer_and_client_api(hanging):
    bs = hanging.bootstrap_servers

    async def go():
        async with Admin(bs) as admin:
            spec = await admin.abort_spec("hang", 0, 2)
            assert spec == (HANGING_PID, HANGING_EPOCH, 0)
            await admin.abort_transaction("hang", 0, *spec)
            with pytest.raises(AdminError, match="no open transaction"):
                await admin.abort_spec("hang", 0, 2)

    run_async(go())
    assert ck_read_to_end(bs, "hang", "read_committed")[-1] == b"plain-xv0."


def test_write_txn_markers_per_partition_errors(hanging):
    bs = hanging.bootstrap_servers

    def marker(pid: int, epoch: int, *tps: tuple[str, list[int]]) -> WritableTxnMarker:
        return WritableTxnMarker(producer_id=pid, producer_epoch=epoch, transaction_result=False,
                                 coordinator_epoch=0, topics=[
                                     WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                                     for t, ps in tps])

    async def go(req):
        conn = await raw_connect(bs)
        try:
            return await conn.send(req)
        finally:
            await conn.close()

    assert run_async(go(WriteTxnMarkersRequest(markers=[]))).markers == []
    resp = run_async(go(WriteTxnMarkersRequest(markers=[
        marker(HANGING_PID, HANGING_EPOCH - 1, ("hang", [0])),          # stale epoch
        marker(77, 0, ("nope", [0]), ("hang", [3])),                   # unknown
        marker(78, 0, ("__transaction_state", [0])),                   # a coordinator's log
        marker(-1, 0, ("hang", [0])),                                  # no producer
        marker(79, -1, ("hang", [0])),                                 # no epoch
        marker(HANGING_PID, HANGING_EPOCH, ("hang", [0])),              # the real abort
    ])))
    got = {m.producer_id: {(t.name, p.partition_index): p.error_code for t in m.topics
                           for p in t.partitions} for m in resp.markers}
    # One result per producer id (Kafka merges a producer's markers): the later marker's.
    assert got == {
        HANGING_PID: {("hang", 0): ErrorCode.NONE},
        77: {("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
             ("hang", 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
        78: {("__transaction_state", 0): ErrorCode.INVALID_TOPIC_EXCEPTION},
        -1: {("hang", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING},
        79: {("hang", 0): ErrorCode.INVALID_PRODUCER_EPOCH},
    }
    assert last_stable_offset(bs, "hang", 0) == 7


# -- kafka-transactions.sh (Apache Kafka 4.0's tool, the Java admin client) -----------------
def kafka_transactions(bs: str, *args: str) -> str:
    from reference_kafka import run_tool, skip_reason

    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    r = run_tool("kafka-transactions.sh", "--bootstrap-server", bs, *args)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"kafka-transactions.sh {' '.join(args)} exited {r.returncode}:\n" \
                              f"{out[-3000:]}"
    assert "Exception" not in out, out[-3000:]
    return r.stdout


def table(out: str) -> list[list[str]]:
    """kafka-transactions.sh's table (ToolsUtils.prettyPrintTable: columns split by spaces),
    header first."""
    return [ln.split() for ln in out.splitlines() if ln.strip()]


def test_kafka_transactions_describe_producers_and_abort(hanging):
    bs = hanging.bootstrap_servers
    t = table(kafka_transactions(bs, "describe-producers", "--topic", "hang", "--partition",
                                 "0"))
    assert t[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                    "LastTimestamp", "CurrentTransactionStartOffset"]
    assert [r for r in t[1:] if r[0] == str(HANGING_PID)] == [
        [str(HANGING_PID), str(HANGING_EPOCH), "-1", "2", t[1][4], "2"]]
    # abort --start-offset: DescribeProducers, then WriteTxnMarkers v1 to the leader.
    kafka_transactions(bs, "abort", "--topic", "hang", "--partition", "0", "--start-offset", "2")
    assert last_stable_offset(bs, "hang", 0) == 7
    assert ck_read_to_end(bs, "hang", "read_committed") == [b"plain-0", b"plain-1", b"plain-xv0."]
    t = table(kafka_transactions(bs, "describe-producers", "--topic", "hang", "--partition",
                                 "0"))
    assert [r[5] for r in t[1:] if r[0] == str(HANGING_PID)] == ["None"]


# -- transactions the coordinator knows (a real transactional producer) ----------------------
@pytest.fixture
def ongoing(broker):
    """A confluent-kafka transactional producer (``adm-tx``) with a transaction open on
    ``txa`` partitions 0 and 1. Yields (broker, producer)."""
    bs = broker.bootstrap_servers
    create_topic(bs, "txa", 2)
    p = Producer({"bootstrap.servers": bs, "transactional.id": "adm-tx", "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("txa", b"a", partition=0)
    p.produce("txa", b"b", partition=1)
    assert p.flush(30) == 0
    yield broker, p
    del p


def test_list_and_describe_a_transaction(ongoing):
    broker, producer = ongoing
    bs = broker.bootstrap_servers
    listed = rows(cli("transactions", "list", "-b", bs).stdout)
    [[tid, coordinator, pid, state]] = [r for r in listed if r[0] == "adm-tx"]
    assert (coordinator, state) == (str(broker.broker.node_id), "Ongoing")
    out = cli("transactions", "describe", "--transactional-id", "adm-tx", "-b", bs).stdout
    [d] = rows(out)
    assert d[:3] == [coordinator, "adm-tx", pid] and d[4:6] == ["Ongoing", "60000"]
    assert d[8] == "txa-0,txa-1" and int(d[7]) >= 0
    # The duration filter (ListTransactions v1): not running longer than an hour.
    assert not [r for r in rows(cli("transactions", "list", "--duration-filter", "3600000",
                                    "-b", bs).stdout) if r[0] == "adm-tx"]
    assert [r[0] for r in rows(cli("transactions", "list", "--state", "Ongoing",
                                   "--producer-id", pid, "-b", bs).stdout)] == ["adm-tx"]
    r = cli("transactions", "list", "--state", "ongoing", "-b", bs, check=False)
    assert r.returncode == 1 and b"unknown transaction state(s): ongoing" in r.stderr
    # Its open transaction is the coordinator's to finish: not hanging.
    out = cli("transactions", "find-hanging", "--topic", "txa", "--max-transaction-timeout",
              "0", "-b", bs).stdout
    assert rows(out) == []
    producer.commit_transaction(30)
    listed = rows(cli("transactions", "list", "-b", bs).stdout)
    assert [r[3] for r in listed if r[0] == "adm-tx"] == ["CompleteCommit"]
    d = rows(cli("transactions", "describe", "--transactional-id", "adm-tx", "-b", bs).stdout)[0]
    assert d[4] == "CompleteCommit" and d[8] == ""
    producers = rows(cli("transactions", "describe-producers", "--topic", "txa", "--partition",
                         "0", "-b", bs).stdout)
    # The COMMIT marker: no open transaction, the coordinator epoch it carried.
    assert [(r[0], r[2] != "-1", r[5]) for r in producers] == [(pid, True, "None")]
    r = cli("transactions", "describe", "--transactional-id", "nope", "-b", bs, check=False)
    assert r.returncode == 1 and b"TRANSACTIONAL_ID_NOT_FOUND" in r.stderr


def test_find_hanging(hanging):
    bs = hanging.bootstrap_servers
    out = cli("transactions", "find-hanging", "--topic", "hang", "--max-transaction-timeout",
              "0", "-b", bs).stdout
    assert [r[:6] for r in rows(out)] == [
        ["hang", "0", str(HANGING_PID), str(HANGING_EPOCH), "-1", "2"]]
    # Not open for 15 minutes (the default scope) yet.
    assert rows(cli("transactions", "find-hanging", "--topic", "hang", "-b", bs).stdout) == []
    assert rows(cli("transactions", "find-hanging", "--broker-id",
                    str(hanging.broker.node_id), "--max-transaction-timeout", "0", "-b",
                    bs).stdout)[0][:3] == ["hang", "0", str(HANGING_PID)]
    r = cli("transactions", "find-hanging", "-b", bs, check=False)
    assert r.returncode != 0 and b"--topic or --broker-id" in r.stderr


def test_kafka_transactions_list_describe_find_hanging(ongoing):
    broker, producer = ongoing
    bs = broker.bootstrap_servers
    t = table(kafka_transactions(bs, "list"))
    assert t[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [row] = [r for r in t[1:] if r[0] == "adm-tx"]
    assert row[1] == str(broker.broker.node_id) and row[3] == "Ongoing"
    t = table(kafka_transactions(bs, "describe", "--transactional-id", "adm-tx"))
    assert t[0][:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                        "TransactionState"]
    assert t[1][1:5] == ["adm-tx", row[2], t[1][3], "Ongoing"]
    assert set(t[1][-1].split(",")) == {"txa-0", "txa-1"}  # the Java tool prints a HashSet
    t = table(kafka_transactions(bs, "find-hanging", "--topic", "txa",
                                 "--max-transaction-timeout", "0"))
    assert t[1:] == []
    producer.abort_transaction(30)
    t = table(kafka_transactions(bs, "list"))
    assert [r[3] for r in t[1:] if r[0] == "adm-tx"] == ["CompleteAbort"]


def test_kafka_transactions_find_hanging(hanging):
    bs = hanging.bootstrap_servers
    t = table(kafka_transactions(bs, "find-hanging", "--topic", "hang",
                                 "--max-transaction-timeout", "0"))
    assert t[0][:6] == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                        "CoordinatorEpoch", "StartOffset"]
    assert [r[:6] for r in t[1:]] == [["hang", "0", str(HANGING_PID), str(HANGING_EPOCH), "-1",
                                       "2"]]
    # By broker: every partition with a replica on it, the internal topics included.
    t = table(kafka_transactions(bs, "find-hanging", "--broker-id",
                                 str(hanging.broker.node_id), "--max-transaction-timeout", "0"))
    assert [r[:3] for r in t[1:]] == [["hang", "0", str(HANGING_PID)]]


# -- differential: the same requests to the reference Kafka 4.0 and to snakka ----------------
def _admin_answers(bs: str, topic: str) -> dict[str, object]:
    """What a client reads from the transaction admin APIs for the same requests."""
    async def go() -> dict[str, object]:
        conn = await raw_connect(bs)
        try:
            dp = await conn.send(DescribeProducersRequest(topics=[
                TopicRequest(name=topic, partition_indexes=[0, 5]),
                TopicRequest(name=f"{topic}-missing", partition_indexes=[0]),
                TopicRequest(name="bad/name", partition_indexes=[0])]))
            lt = await conn.send(ListTransactionsRequest(
                state_filters=["Ongoing", "Bogus"], producer_id_filters=[987654321],
                duration_filter=-1), version=1)
            wm = await conn.send(WriteTxnMarkersRequest(markers=[WritableTxnMarker(
                producer_id=987654321, producer_epoch=0, transaction_result=False,
                coordinator_epoch=0, topics=[
                    WritableTxnMarkerTopic(name=topic, partition_indexes=[0, 9]),
                    WritableTxnMarkerTopic(name=f"{topic}-missing", partition_indexes=[0])])]),
                version=1)
        finally:
            await conn.close()
        async with Admin(bs) as admin:
            try:
                await admin.describe_transaction(f"{topic}-never-used")
                described: object = 0
            except AdminError as e:
                described = e.code
            producers = await admin.describe_producers(topic, [0])
        return {
            "describe_producers": {
                (t.name.replace(topic, "T"), p.partition_index): (p.error_code,
                                                                  len(p.active_producers))
                for t in dp.topics for p in t.partitions},
            "list_transactions": (lt.error_code, lt.unknown_state_filters,
                                  lt.transaction_states),
            "write_txn_markers": {(t.name.replace(topic, "T"), p.partition_index): p.error_code
                                  for m in wm.markers for t in m.topics for p in t.partitions},
            "describe_transactions": described,
            # The marker of a producer the partition never saw: written, and the producer is
            # known afterwards with no open transaction and the marker's coordinator epoch.
            "producer_after_marker": [(p.producer_id, p.producer_epoch, p.coordinator_epoch,
                                       p.current_txn_start_offset) for p in producers[0]],
        }

    return run_async(go())


def _leads(bs: str, topic: str) -> bool:
    """Kafka answers NOT_LEADER_OR_FOLLOWER until a new partition's leadership is applied."""
    async def go() -> bool:
        conn = await raw_connect(bs)
        try:
            resp = await conn.send(DescribeProducersRequest(topics=[
                TopicRequest(name=topic, partition_indexes=[0])]))
            return resp.topics[0].partitions[0].error_code == 0
        finally:
            await conn.close()

    return run_async(go())


def test_admin_answers_match_the_reference_kafka(reference_kafka, broker):
    topic = f"dtx-{os.getpid()}-{time.monotonic_ns() % 100000}"
    for bs in (reference_kafka.bootstrap_servers, broker.bootstrap_servers):
        create_topic(bs, topic, 1)
        wait_until(lambda bs=bs: _leads(bs, topic), 30, f"a leader for {topic}-0 on {bs}")
    kafka = _admin_answers(reference_kafka.bootstrap_servers, topic)
    ours = _admin_answers(broker.bootstrap_servers, topic)
    assert ours == kafka
    assert kafka["describe_transactions"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
