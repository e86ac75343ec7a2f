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
