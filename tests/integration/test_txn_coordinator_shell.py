"""The transaction coordinator's I/O shell (snakka.txn.manager) in a real broker: what happens
when a write fails, when the broker restarts between Prepare and Complete, and what its timers
do. Raw protocol requests, so each step is exact; white-box looks at the coordinator's state and
the partition's last stable offset."""

from __future__ import annotations

import errno
import time

import pytest

from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from snakka.protocol.messages.end_txn_request import EndTxnRequest
from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.records import Record, build_batch
from snakka.testing import EmbeddedBroker
from snakka.txn.coordinator import TxnState

from .helpers import ck_create_topic, now_ms, raw_connect, run_async

TOPIC = "shell"


class Txn:
    """One transactional producer on a raw connection."""

    def __init__(self, conn, tid: str) -> None:
        self.conn, self.tid = conn, tid
        self.pid = self.epoch = -1
        self.seq: dict[int, int] = {}

    async def init(self, timeout_ms: int = 60000) -> int:
        r = await self.conn.send(InitProducerIdRequest(transactional_id=self.tid,
                                                       transaction_timeout_ms=timeout_ms))
        if r.error_code == 0:
            self.pid, self.epoch, self.seq = r.producer_id, r.producer_epoch, {}
        return r.error_code

    async def write(self, partition: int, n: int = 3) -> int:
        r = await self.conn.send(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch, v3_and_below_topics=[
                AddPartitionsToTxnTopic(name=TOPIC, partitions=[partition])]), version=3)
        err = r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        if err:
            return err
        seq = self.seq.get(partition, 0)
        batch = build_batch([Record(timestamp=now_ms(), value=b"v%d" % i) for i in range(n)],
                            producer_id=self.pid, producer_epoch=self.epoch, base_sequence=seq,
                            is_transactional=True)
        self.seq[partition] = seq + n
        r = await self.conn.send(ProduceRequest(
            transactional_id=self.tid, acks=-1, timeout_ms=5000, topic_data=[TopicProduceData(
                name=TOPIC, partition_data=[PartitionProduceData(index=partition,
                                                                 records=batch)])]),
            version=9)
        return r.responses[0].partition_responses[0].error_code

    async def end(self, commit: bool) -> int:
        r = await self.conn.send(EndTxnRequest(transactional_id=self.tid, producer_id=self.pid,
                                               producer_epoch=self.epoch, committed=commit),
                                 version=3)
        return r.error_code


def _log(b: EmbeddedBroker, p: int = 0):
    return b.broker.replicas.get_log(TOPIC, p)


def _state(b: EmbeddedBroker, tid: str):
    t = b.broker.txns.coordinator.get(tid)
    return None if t is None else t.state


def _until(pred, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_markers_that_cannot_be_written_are_retried_then_completed(monkeypatch):
    """A disk error on a marker: EndTxn is still answered (the Prepare record is durable), the
    transaction stays in PrepareCommit (CONCURRENT_TRANSACTIONS for its next request) and the
    partition stays unstable until the retry loop writes the marker."""
    with EmbeddedBroker() as b:
        ck_create_topic(b.bootstrap_servers, TOPIC, 2)
        replicas = b.broker.replicas
        real = replicas.write_txn_marker
        failing = {"on": True}

        def flaky(*args):
            if failing["on"]:
                return ErrorCode.KAFKA_STORAGE_ERROR, None
            return real(*args)

        monkeypatch.setattr(replicas, "write_txn_marker", flaky)

        async def go():
            conn = await raw_connect(b.bootstrap_servers)
            try:
                t = Txn(conn, "retry")
                assert await t.init() == 0
                assert await t.write(0) == 0
                assert await t.end(True) == 0
                assert _state(b, "retry") == TxnState.PREPARE_COMMIT
                assert _log(b).last_stable_offset < _log(b).high_watermark
                assert await t.write(1) == ErrorCode.CONCURRENT_TRANSACTIONS
                failing["on"] = False
                _until(lambda: _state(b, "retry") == TxnState.COMPLETE_COMMIT)
                assert _log(b).last_stable_offset == _log(b).high_watermark
                assert await t.write(1) == 0  # the next transaction starts
            finally:
                await conn.close()
        run_async(go())


def test_a_restart_between_prepare_and_complete_completes_the_transaction(tmp_path,
                                                                         monkeypatch):
    """The broker stops with a transaction in PrepareAbort and its marker unwritten: at start-up
    the coordinator writes the marker and completes it, so the partition is not blocked."""
    with EmbeddedBroker(str(tmp_path)) as b:
        ck_create_topic(b.bootstrap_servers, TOPIC, 1)
        monkeypatch.setattr(b.broker.replicas, "write_txn_marker",
                            lambda *a: (ErrorCode.KAFKA_STORAGE_ERROR, None))

        async def go():
            conn = await raw_connect(b.bootstrap_servers)
            try:
                t = Txn(conn, "restart")
                assert await t.init() == 0
                assert await t.write(0) == 0
                assert await t.end(False) == 0
            finally:
                await conn.close()
        run_async(go())
        assert _state(b, "restart") == TxnState.PREPARE_ABORT
        assert _log(b).last_stable_offset == 0
    monkeypatch.undo()
    with EmbeddedBroker(str(tmp_path)) as b:
        assert _state(b, "restart") == TxnState.COMPLETE_ABORT
        assert _log(b).last_stable_offset == _log(b).high_watermark == 4  # 3 records + marker


def test_a_failed_state_write_answers_not_coordinator_and_leaves_no_trace(monkeypatch, caplog):
    """ENOSPC on __transaction_state: NOT_COORDINATOR, and the in-memory state is the durable
    one (a retry bumps the epoch once, not twice)."""
    with EmbeddedBroker() as b:
        log = b.broker.txns.log
        real = log.append
        fail = {"n": 0}

        def append(p, records):
            if fail["n"]:
                fail["n"] -= 1
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(p, records)

        monkeypatch.setattr(log, "append", append)

        async def go():
            conn = await raw_connect(b.bootstrap_servers)
            try:
                t = Txn(conn, "enospc")
                assert await t.init() == 0
                first = t.epoch
                fail["n"] = 1
                assert await t.init() == ErrorCode.NOT_COORDINATOR
                assert b.broker.txns.coordinator.get("enospc").producer_epoch == first
                assert await t.init() == 0
                assert t.epoch == first + 1
            finally:
                await conn.close()
        run_async(go())
        partition = b.broker.txns.coordinator.partition_for("enospc")
    # The failure was logged once (the one expected ERROR of this test).
    assert [r.getMessage() for r in caplog.records
            if r.levelname == "ERROR" and r.name.startswith("snakka")] == [
        f"__transaction_state-{partition}: cannot write 1 transaction record(s), reloading the "
        "durable state: [Errno 28] No space left on device"]
    caplog.clear()


@pytest.mark.parametrize("commit_after_timeout", [True, False])
def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(commit_after_timeout):
    config = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "50"}
    with EmbeddedBroker(config=config) as b:
        ck_create_topic(b.bootstrap_servers, TOPIC, 1)

        async def go():
            conn = await raw_connect(b.bootstrap_servers)
            try:
                t = Txn(conn, "slow")
                assert await t.init(timeout_ms=300) == 0
                assert await t.write(0) == 0
                assert _log(b).last_stable_offset == 0
                _until(lambda: _state(b, "slow") == TxnState.COMPLETE_ABORT)
                assert _log(b).last_stable_offset == _log(b).high_watermark
                # The abort bumped the epoch: the producer is fenced.
                if commit_after_timeout:
                    assert await t.end(True) == ErrorCode.PRODUCER_FENCED
                else:
                    assert await t.write(0) == ErrorCode.PRODUCER_FENCED
                assert await t.init() == 0  # it may start again with a new epoch
                assert await t.write(0) == 0 and await t.end(True) == 0
            finally:
                await conn.close()
        run_async(go())


def test_idle_transactional_ids_expire_and_stay_expired_after_a_restart(tmp_path):
    config = {"transactional.id.expiration.ms": "200",
              "transaction.remove.expired.transaction.cleanup.interval.ms": "50"}
    with EmbeddedBroker(str(tmp_path), config=config) as b:
        async def go():
            conn = await raw_connect(b.bootstrap_servers)
            try:
                assert await Txn(conn, "idle").init() == 0
            finally:
                await conn.close()
        run_async(go())
        _until(lambda: b.broker.txns.coordinator.get("idle") is None)
    with EmbeddedBroker(str(tmp_path), config=config) as b:
        assert b.broker.txns.coordinator.get("idle") is None
