"""read_committed reads carry the aborted transactions of what they return (the replica
manager's ReadResult; tests/server/test_read_committed_aborted.py checks what a real
consumer makes of them). Producers still cannot write transactions, so the log state is
built directly on the partition's UnifiedLog."""

from __future__ import annotations

from storage.helpers import append, batch

from replica.test_manager import _replicas  # tests/ is on sys.path
from snakka.protocol.errors import ErrorCode
from snakka.records import iter_records

PID, PID2 = 1000, 2000


def _txn(plog, pid, n, seq, tag):
    append(plog, batch(n, producer_id=pid, producer_epoch=0, base_sequence=seq,
                       is_transactional=True, tag=tag))


def test_replica_manager_read_returns_the_aborted_list(tmp_path):
    rm = _replicas(tmp_path)
    plog = rm.get_log("t", 0)
    append(plog, batch(1))  # 0
    _txn(plog, PID, 2, 0, "a")  # 1..2, aborted below
    _txn(plog, PID2, 1, 0, "c")  # 3, committed below
    plog.append_control_marker(PID, 0, False, 0)  # 4
    plog.append_control_marker(PID2, 0, True, 0)  # 5
    append(plog, batch(1))  # 6
    committed = rm.read("t", 0, 0, 1 << 20, read_committed=True)
    assert committed.error_code == ErrorCode.NONE
    assert committed.aborted_transactions == [(PID, 1)]
    assert committed.last_stable_offset == 7
    assert rm.read("t", 0, 0, 1 << 20).aborted_transactions == []  # read_uncommitted
    # A read starting after the aborted transaction's marker is not told about it.
    assert rm.read("t", 0, 5, 1 << 20, read_committed=True).aborted_transactions == []
    # An open transaction stops a read_committed read at its first offset.
    _txn(plog, PID, 1, 2, "o")  # 7, open
    append(plog, batch(1))  # 8
    r = rm.read("t", 0, 6, 1 << 20, read_committed=True)
    assert (r.last_stable_offset, [rec.offset for rec in iter_records(r.records)]) == (7, [6])
    assert r.aborted_transactions == []


def test_the_aborted_list_is_bounded_by_the_returned_records(tmp_path):
    """Only transactions that start before the end of the returned batches are listed (a
    small max_bytes returns one batch; a transaction starting after it is not)."""
    rm = _replicas(tmp_path)
    plog = rm.get_log("t", 0)
    _txn(plog, PID, 1, 0, "a")  # 0
    append(plog, batch(1, value_size=2000))  # 1
    _txn(plog, PID2, 1, 0, "b")  # 2
    plog.append_control_marker(PID, 0, False, 0)  # 3
    plog.append_control_marker(PID2, 0, False, 0)  # 4
    one = rm.read("t", 0, 0, 10, read_committed=True)  # first batch only (min one message)
    assert [r.offset for r in iter_records(one.records)] == [0]
    assert one.aborted_transactions == [(PID, 0)]
    every = rm.read("t", 0, 0, 1 << 20, read_committed=True)
    assert every.aborted_transactions == [(PID, 0), (PID2, 2)]


def test_write_txn_marker_ends_the_transaction_and_refuses_stale_markers(tmp_path):
    """ReplicaManager.write_txn_marker: the one path for markers (the transaction coordinator
    and the WriteTxnMarkers API): it moves the LSO, refuses an older epoch or coordinator
    epoch without writing, and answers an unknown partition UNKNOWN_TOPIC_OR_PARTITION."""
    rm = _replicas(tmp_path)
    plog = rm.get_log("t", 0)
    append(plog, batch(2, producer_id=PID, producer_epoch=3, base_sequence=0,
                       is_transactional=True, tag="x"))  # 0..1
    assert plog.last_stable_offset == 0
    assert rm.write_txn_marker("t", 0, PID, 3, True, 5) == (ErrorCode.NONE, None)
    assert (plog.last_stable_offset, plog.log_end_offset) == (3, 3)
    leo = plog.log_end_offset
    assert rm.write_txn_marker("t", 0, PID, 2, False, 5)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert rm.write_txn_marker("t", 0, PID, 3, False, 4)[0] == \
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert plog.log_end_offset == leo
    assert rm.write_txn_marker("nope", 0, PID, 3, True, 5)[0] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert rm.write_txn_marker("t", 99, PID, 3, True, 5)[0] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
