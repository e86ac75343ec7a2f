"""The exactly-once sink's two-phase commit (snakka.spark.writer, option transactionalIdPrefix)
against an in-memory model of Kafka's transactions, without Spark or a broker: what a
read_committed consumer sees after every crash point of a micro-batch and its replay.

The model (``FakeKafka``) keeps, per transactional id, the newest producer epoch and its open
transaction (records and group offsets, invisible until EndTxn(commit)); InitProducerId bumps
the epoch and aborts the open transaction, a request with an older epoch is PRODUCER_FENCED,
as Kafka's coordinator does. tests/spark/test_exactly_once.py runs the same against the real
broker with Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from snakka.protocol.errors import ErrorCode
from snakka.records import iter_records, parse_header
from snakka.spark import writer as writer_mod
from snakka.spark.client import ProducerFencedError, SnakkaSparkError
from snakka.spark.options import parse_write_options
from snakka.spark.writer import TaskInfo, end_transactions, write_arrow

TOPIC = "out"
PARTITIONS = 2


class FakeKafka:
    def __init__(self) -> None:
        self.visible: list[bytes] = []  # what read_committed consumers read, in order
        self.offsets: dict[tuple[str, tuple[str, int]], tuple[int, str]] = {}
        self.epochs: dict[str, int] = {}
        self.pids: dict[str, int] = {}
        self.open: dict[str, dict] = {}
        self.requests: list[str] = []

    # the SparkKafkaClient surface the writer uses
    def client(self, _settings) -> FakeClient:
        return FakeClient(self)


class FakeClient:
    def __init__(self, kafka: FakeKafka) -> None:
        self.k = kafka

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def metadata(self, topics):
        return {t: [object()] * PARTITIONS for t in topics}

    def init_producer_id(self):
        return 9999, 0

    def _check(self, tid: str, pid: int, epoch: int) -> dict:
        if self.k.epochs.get(tid) != epoch or self.k.pids.get(tid) != pid:
            raise ProducerFencedError("fenced", ErrorCode.PRODUCER_FENCED)
        return self.k.open.setdefault(tid, {"records": [], "offsets": {}, "partitions": set()})

    def init_transactions(self, tid: str, _timeout_ms: int):
        self.k.requests.append(f"init {tid}")
        self.k.open.pop(tid, None)  # the coordinator aborts what an older producer left open
        self.k.pids.setdefault(tid, 1000 + len(self.k.pids))
        self.k.epochs[tid] = self.k.epochs.get(tid, -1) + 1
        return self.k.pids[tid], self.k.epochs[tid]

    def add_partitions_to_txn(self, tid, pid, epoch, tps):
        self._check(tid, pid, epoch)["partitions"].update(tps)

    def produce(self, tp, batch, *, acks, timeout_ms, transactional_id=None):
        assert transactional_id is not None
        recs = [r.value for r in iter_records(batch)]
        hd = parse_header(batch)
        txn = self._check(transactional_id, hd.producer_id, hd.producer_epoch)
        assert tp in txn["partitions"], "AddPartitionsToTxn before the first batch"
        assert hd.is_transactional
        txn["records"] += recs
        return 0, 0

    def add_offsets_to_txn(self, tid, pid, epoch, group):
        self._check(tid, pid, epoch)["group"] = group

    def txn_offset_commit(self, tid, pid, epoch, group, offsets):
        txn = self._check(tid, pid, epoch)
        assert txn.get("group") == group, "AddOffsetsToTxn before TxnOffsetCommit"
        for tp, v in offsets.items():
            txn["offsets"][(group, tp)] = v

    def end_txn(self, tid, pid, epoch, *, commit):
        self.k.requests.append(f"end {tid} {commit}")
        txn = self._check(tid, pid, epoch)
        del self.k.open[tid]
        if commit:
            self.k.visible += txn["records"]
            self.k.offsets.update(txn["offsets"])

    def committed_offsets(self, group, tps):
        return {tp: self.k.offsets.get((group, tp), (-1, None)) for tp in tps}


@pytest.fixture
def kafka(monkeypatch) -> FakeKafka:
    k = FakeKafka()
    monkeypatch.setattr(writer_mod, "SparkKafkaClient", k.client)
    return k


SETTINGS = parse_write_options({"kafka.bootstrap.servers": "x:1", "topic": TOPIC,
                                "transactionalIdPrefix": "q"})


def _rows(*values: bytes) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_pydict({"key": [b"k%d" % i for i in range(len(values))],
                                        "value": list(values)})]


def _task(partition: int, batch: int | None, *values: bytes):
    return write_arrow(SETTINGS, iter(_rows(*values)), TaskInfo(partition, batch))


def _batch(batch: int, crash_after_commits: int | None = None):
    """Micro-batch ``batch`` with two tasks; the driver commits (or dies after
    ``crash_after_commits`` EndTxn)."""
    msgs = [_task(0, batch, b"b%d-a" % batch, b"b%d-b" % batch),
            _task(1, batch, b"b%d-c" % batch)]
    if crash_after_commits is None:
        end_transactions(SETTINGS, msgs, commit=True, batch_id=batch)
    else:
        end_transactions(SETTINGS, msgs[:crash_after_commits], commit=True, batch_id=batch)
    return msgs


EXPECTED = sorted([b"b0-a", b"b0-b", b"b0-c", b"b1-a", b"b1-b", b"b1-c"])


def test_tasks_leave_transactions_open_for_the_driver(kafka):
    msgs = [_task(0, 0, b"x", b"y"), _task(1, 0, b"z")]
    assert kafka.visible == []  # nothing visible before the driver's commit
    assert [(m.transactional_id, m.records) for m in msgs] == [("q-0", 2), ("q-1", 1)]
    end_transactions(SETTINGS, msgs, commit=True, batch_id=0)
    assert sorted(kafka.visible) == [b"x", b"y", b"z"]
    # The marker: the sink group of each task holds the batch id for partition 0 of the topic.
    assert kafka.offsets[("q-0", (TOPIC, 0))][0] == 0


@pytest.mark.parametrize("crash_after", [0, 1, 2])
def test_a_replay_after_a_driver_crash_writes_each_record_once(kafka, crash_after):
    """The driver dies after 0, 1 or 2 of the 2 EndTxn(commit) of batch 1 (2: before Spark's
    checkpoint commit); Spark replays batch 1 with the same rows."""
    _batch(0)
    _batch(1, crash_after_commits=crash_after)
    replay = _batch(1)
    assert sorted(kafka.visible) == EXPECTED
    assert [m.already_committed for m in replay] == [crash_after >= 1, crash_after >= 2]


def test_a_zombie_driver_racing_the_replay_still_gives_each_record_once(kafka):
    """The first run's driver (a zombie) commits while the replay runs: the task the replay
    already restarted is fenced (the zombie's commit fails), the other one commits, and the
    replay's copy of that task then finds its marker and writes nothing."""
    first = _batch(1, crash_after_commits=0)
    replay0 = _task(0, 1, b"b1-a", b"b1-b")  # the replay's task 0 fences the first run's
    with pytest.raises(SnakkaSparkError, match="committing the transactions of micro-batch 1"):
        end_transactions(SETTINGS, first, commit=True, batch_id=1)
    assert kafka.visible == [b"b1-c"]
    replay1 = _task(1, 1, b"b1-c")
    assert replay1.already_committed
    end_transactions(SETTINGS, [replay0, replay1], commit=True, batch_id=1)
    assert sorted(kafka.visible) == [b"b1-a", b"b1-b", b"b1-c"]


def test_a_failing_task_aborts_its_transaction(kafka):
    def rows():
        yield from _rows(b"a")
        raise RuntimeError("the task's input failed")

    with pytest.raises(RuntimeError):
        write_arrow(SETTINGS, rows(), TaskInfo(0, 3))
    assert "end q-0 False" in kafka.requests
    assert kafka.open == {} and kafka.visible == []


def test_abort_ends_the_open_transactions(kafka):
    msgs = [_task(0, 5, b"a"), _task(1, 5, b"b")]
    end_transactions(SETTINGS, msgs + [None], commit=False, batch_id=5)
    assert kafka.open == {} and kafka.visible == []
    # ...and the batch can be written again.
    _batch(5)
    assert sorted(kafka.visible) == [b"b5-a", b"b5-b", b"b5-c"]


def test_an_empty_task_starts_no_transaction(kafka):
    msg = write_arrow(SETTINGS, iter([]), TaskInfo(3, 0))
    assert msg.transactional_id is None and kafka.requests == []
    end_transactions(SETTINGS, [msg], commit=True, batch_id=0)


def test_the_query_id_keeps_queries_apart(kafka):
    """A query restarted from a new checkpoint (a new query id) starts at batch 0 again: its
    tasks have their own transactional ids and markers, so its batch 0 is written."""
    old = write_arrow(SETTINGS, iter(_rows(b"old")), TaskInfo(0, 0, "query-a"))
    end_transactions(SETTINGS, [old], commit=True, batch_id=0)
    new = write_arrow(SETTINGS, iter(_rows(b"new")), TaskInfo(0, 0, "query-b"))
    end_transactions(SETTINGS, [new], commit=True, batch_id=0)
    assert (old.transactional_id, new.transactional_id) == ("q-query-a-0", "q-query-b-0")
    assert kafka.visible == [b"old", b"new"]


def test_without_a_batch_id_no_marker_is_kept(kafka):
    """A batch write outside a stream: transactions committed by the driver, no replay
    detection (a re-run writes again)."""
    for _ in range(2):
        end_transactions(SETTINGS, [_task(0, None, b"a")], commit=True)
    assert kafka.visible == [b"a", b"a"] and kafka.offsets == {}
