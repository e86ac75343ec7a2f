"""Transaction markers in the log: COMMIT/ABORT control batches, the last stable offset
they move, the aborted-transaction index (``.txnindex``, Kafka's byte format) and its life
with its segment (roll, retention, truncation, recovery), and what a read_committed reader
is told (collect_aborted_transactions)."""

from __future__ import annotations

import os
import struct

import pytest

from snakka.records.batch import parse_header
from snakka.records.control import build_control_batch, read_end_txn_marker
from snakka.records.record import batch_records
from snakka.storage import LogConfig
from snakka.storage.index import AbortedTxn, TransactionIndex
from snakka.txn.producer_state import (
    INVALID_PRODUCER_EPOCH,
    TRANSACTION_COORDINATOR_FENCED,
    ProducerStateError,
)
from storage.helpers import Clock, append, batch, open_log  # tests/ is on sys.path

PID, PID2 = 1000, 2000


def txn(plog, pid=PID, n=1, *, seq=0, epoch=0):
    return append(plog, batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                              is_transactional=True))


def plain(plog, n=1):
    return append(plog, batch(n))


def txnindex_path(seg):
    return os.path.join(seg.dir_path, f"{seg.base_offset:020d}.txnindex")


def entry_bytes(pid, first, last, lso):
    # Hand-built: version int16 0 | producerId int64 | firstOffset int64 | lastOffset int64 |
    # lastStableOffset int64, big endian (Kafka's AbortedTxn).
    return (b"\x00\x00" + pid.to_bytes(8, "big") + first.to_bytes(8, "big")
            + last.to_bytes(8, "big") + lso.to_bytes(8, "big"))


def test_control_batch_format():
    buf = build_control_batch(PID, 3, False, 7, 1_700_000_000_000)
    h = parse_header(buf)
    assert h.is_control and h.is_transactional
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta) == (PID, 3, -1, 0)
    [rec] = list(batch_records(buf, 0))
    assert rec.key == b"\x00\x00\x00\x00"  # version 0, type 0 = ABORT
    assert rec.value == b"\x00\x00\x00\x00\x00\x07"  # version 0, coordinator epoch 7
    assert read_end_txn_marker(buf) == (False, 7)
    assert read_end_txn_marker(build_control_batch(PID, 3, True, 1, 0)) == (True, 1)
    assert read_end_txn_marker(batch(1)) is None


def test_commit_marker_advances_the_lso(tmp_path):
    plog = open_log(tmp_path / "t-0")
    plain(plog)
    txn(plog, n=2)  # offsets 1..2
    plain(plog)  # 3
    assert (plog.high_watermark, plog.last_stable_offset) == (4, 1)
    res = plog.append_control_marker(PID, 0, True, 0)
    assert res.base_offset == res.last_offset == 4
    assert (plog.high_watermark, plog.last_stable_offset) == (5, 5)
    assert plog.collect_aborted_transactions(0, 5) == []
    assert plog.active_segment.txn_index.txns == []
    plog.close()
    assert not os.path.exists(txnindex_path(plog.active_segment))  # as Kafka: lazily created


def test_abort_marker_index_entry_and_bytes(tmp_path):
    plog = open_log(tmp_path / "t-0")
    plain(plog)  # 0
    txn(plog, PID, 2)  # 1..2
    txn(plog, PID2, 1)  # 3: another producer's open transaction
    txn(plog, PID, 1, seq=2)  # 4
    assert plog.last_stable_offset == 1
    plog.append_control_marker(PID, 0, False, 5)  # ABORT at 5
    # The LSO it leaves is PID2's open transaction at 3.
    assert plog.last_stable_offset == 3
    assert plog.active_segment.txn_index.txns == [AbortedTxn(PID, 1, 5, 3)]
    plog.append_control_marker(PID2, 0, False, 5)  # ABORT at 6, no other open txn
    assert plog.last_stable_offset == plog.high_watermark == 7
    plog.flush()
    with open(txnindex_path(plog.active_segment), "rb") as f:
        data = f.read()
    assert len(data) == 68
    assert data == entry_bytes(PID, 1, 5, 3) + entry_bytes(PID2, 3, 6, 7)
    assert [(t.producer_id, t.first_offset) for t in plog.collect_aborted_transactions(0, 7)] \
        == [(PID, 1), (PID2, 3)]
    # Only the transactions overlapping [start, upper bound).
    assert plog.collect_aborted_transactions(6, 7) == [AbortedTxn(PID2, 3, 6, 7)]
    assert plog.collect_aborted_transactions(0, 2) == [AbortedTxn(PID, 1, 5, 3)]
    # The marker batch in the log is a control batch with an ABORT record.
    hs = [h for h, _seg, _pos in plog.read_batch_headers(5, 7)]
    assert all(h.is_control for h in hs)
    plog.close()
    # Our file reads back through an independent decoder of Kafka's format.
    assert [struct.unpack(">hqqqq", data[i:i + 34]) for i in (0, 34)] == \
        [(0, PID, 1, 5, 3), (0, PID2, 3, 6, 7)]


def test_empty_transaction_marker_is_not_indexed(tmp_path):
    """As Kafka: a marker for a producer with no ongoing transaction completes nothing (no
    index entry, the LSO does not move), but still updates the producer's epochs."""
    plog = open_log(tmp_path / "t-0")
    plain(plog)
    plog.append_control_marker(PID, 2, False, 4)
    assert plog.active_segment.txn_index.txns == []
    assert plog.last_stable_offset == plog.high_watermark == 2
    entry = plog.producer_state.producers[PID]
    assert (entry.producer_epoch, entry.coordinator_epoch) == (2, 4)
    plog.close()


def test_marker_epoch_checks(tmp_path):
    plog = open_log(tmp_path / "t-0")
    txn(plog, epoch=3)
    with pytest.raises(ProducerStateError) as exc:
        plog.append_control_marker(PID, 2, True, 0)
    assert exc.value.error_code == INVALID_PRODUCER_EPOCH
    plog.append_control_marker(PID, 3, False, 4)
    with pytest.raises(ProducerStateError) as exc:
        plog.append_control_marker(PID, 3, False, 3)  # a zombie coordinator
    assert exc.value.error_code == TRANSACTION_COORDINATOR_FENCED
    assert plog.log_end_offset == 2  # the refused markers were not written
    # A marker with a newer epoch bumps the producer's epoch (fencing its old batches).
    plog.append_control_marker(PID, 4, False, 4)
    assert plog.producer_state.producers[PID].producer_epoch == 4
    plog.close()


def test_collect_across_segments(tmp_path):
    plog = open_log(tmp_path / "t-0")
    txn(plog, PID, 2)  # 0..1 in segment 0
    plain(plog)  # 2
    plog.roll()
    plain(plog)  # 3 in segment 3
    plog.roll()
    plog.append_control_marker(PID, 0, False, 0)  # 4 in segment 4
    assert [s.base_offset for s in plog.segments] == [0, 3, 4]
    assert plog.segments[0].txn_index.txns == []
    assert plog.segments[2].txn_index.txns == [AbortedTxn(PID, 0, 4, 5)]
    # A reader of the first segment learns of the abort written two segments later.
    assert plog.collect_aborted_transactions(0, 3) == [AbortedTxn(PID, 0, 4, 5)]
    # [3, 4) lies inside the transaction's range [0, 4]: still listed (Kafka's overlap rule).
    assert plog.collect_aborted_transactions(3, 4) == [AbortedTxn(PID, 0, 4, 5)]
    plain(plog)  # 5
    assert plog.collect_aborted_transactions(5, 6) == []
    plog.close()


def test_restart_with_an_open_transaction_keeps_the_lso(tmp_path):
    path = tmp_path / "t-0"
    clock = Clock()
    plog = open_log(path, clock=clock)
    plain(plog, 2)  # 0..1
    txn(plog, PID, 2)  # 2..3, open
    plain(plog)  # 4
    assert plog.last_stable_offset == 2
    plog.close()  # snapshot at the log end carries the open transaction's first offset
    plog = open_log(path, clock=clock)
    assert plog.load_result.producer_batches_replayed == 0  # from the snapshot alone
    assert (plog.high_watermark, plog.last_stable_offset) == (5, 2)
    plog.append_control_marker(PID, 0, True, 0)
    assert plog.last_stable_offset == 6
    plog.close()
    # Unclean: no snapshot at the end; recovery replays the log and finds the same state.
    plog = open_log(path, clock=clock)
    txn(plog, PID2, 1)  # 6, open
    plog.flush()
    plog.local_log.close()  # no producer snapshot
    plog = open_log(path, clock=clock, recover=True)
    assert plog.last_stable_offset == 6
    plog.close()


def _aborted_log(path, clock):
    """Two segments: an abort in each, a commit between; returns the expected entries."""
    plog = open_log(path, clock=clock)
    txn(plog, PID, 2)  # 0..1
    txn(plog, PID2, 1)  # 2
    plog.append_control_marker(PID, 0, False, 0)  # 3: LSO left = 2 (PID2 open)
    plog.append_control_marker(PID2, 0, True, 0)  # 4
    plog.roll()
    txn(plog, PID, 1, seq=2)  # 5
    plog.append_control_marker(PID, 0, False, 0)  # 6
    plain(plog)  # 7
    return plog, [[AbortedTxn(PID, 0, 3, 2)], [AbortedTxn(PID, 5, 6, 7)]]


def test_deleted_txnindex_is_rebuilt_by_recovery(tmp_path):
    path = tmp_path / "t-0"
    clock = Clock()
    plog, expected = _aborted_log(path, clock)
    plog.close()
    files = [txnindex_path(s) for s in plog.segments]
    original = [open(f, "rb").read() for f in files]
    for f in files:
        os.unlink(f)
    # Below the recovery point a missing .txnindex cannot be told from "no aborts" (Kafka
    # neither); recovery (unclean shutdown: recovery point 0) rebuilds it from the markers.
    plog = open_log(path, clock=clock, recover=True, recovery_point=0)
    assert [s.txn_index.txns for s in plog.segments] == expected
    assert plog.collect_aborted_transactions(0, 8) == expected[0] + expected[1]
    plog.close()
    assert [open(f, "rb").read() for f in files] == original


def test_a_txnindex_missing_its_last_entries_is_completed_by_recovery(tmp_path):
    """A crash after the ABORT reached the .log but before the .txnindex write: the file
    is a prefix of the truth; recovery appends what it lacks."""
    path = tmp_path / "t-0"
    clock = Clock()
    plog = open_log(path, clock=clock)
    txn(plog, PID, 1)  # 0
    plog.append_control_marker(PID, 0, False, 0)  # 1
    txn(plog, PID2, 1)  # 2
    plog.append_control_marker(PID2, 0, False, 0)  # 3
    plog.close()
    f = txnindex_path(plog.active_segment)
    with open(f, "rb") as fh:
        original = fh.read()
    assert len(original) == 68
    with open(f, "r+b") as fh:
        fh.truncate(34)
    plog = open_log(path, clock=clock, recover=True, recovery_point=0)
    assert plog.active_segment.txn_index.txns == [AbortedTxn(PID, 0, 1, 2), AbortedTxn(PID2, 2, 3, 4)]
    plog.close()
    with open(f, "rb") as fh:
        assert fh.read() == original


def test_torn_tail_truncates_and_rebuilds_the_txnindex(tmp_path):
    path = tmp_path / "t-0"
    clock = Clock()
    plog, expected = _aborted_log(path, clock)
    plog.close()
    last = plog.segments[-1]
    # Tear the last segment inside the batch at offset 7 and corrupt its .txnindex tail.
    size = os.path.getsize(last.path)
    with open(last.path, "r+b") as f:
        f.truncate(size - 5)
    with open(txnindex_path(last), "ab") as f:
        f.write(b"\x01\x02\x03")
    plog = open_log(path, clock=clock, recover=True, recovery_point=0)
    assert plog.log_end_offset == 7
    assert [s.txn_index.txns for s in plog.segments] == expected
    # Tear inside the ABORT marker at 6: its entry goes with it; the open txn is open again.
    plog.close()
    seg = plog.segments[-1]
    pos = seg.find_batch(6)[0]
    with open(seg.path, "r+b") as f:
        f.truncate(pos + 10)
    plog = open_log(path, clock=clock, recover=True, recovery_point=0)
    assert plog.log_end_offset == 6
    assert [s.txn_index.txns for s in plog.segments] == [expected[0], []]
    assert plog.last_stable_offset == 5
    plog.close()


def test_retention_deletes_the_txnindex_with_its_segment(tmp_path):
    path = tmp_path / "t-0"
    plog, _expected = _aborted_log(path, Clock())
    plog.flush()
    first = plog.segments[0]
    assert os.path.exists(txnindex_path(first))
    plog.delete_records_before(5)
    assert plog.segments[0].base_offset == 5
    assert not os.path.exists(txnindex_path(first))
    assert plog.collect_aborted_transactions(5, 8) == [AbortedTxn(PID, 5, 6, 7)]
    plog.close()


def test_truncation_truncates_the_txnindex(tmp_path):
    path = tmp_path / "t-0"
    plog, expected = _aborted_log(path, Clock())
    plog.flush()
    last = plog.segments[-1]
    plog.truncate_to(6)  # removes the ABORT at 6
    assert last.txn_index.txns == []
    assert plog.segments[0].txn_index.txns == expected[0]
    assert plog.last_stable_offset == 5  # PID's transaction at 5 is open again
    plog.flush()
    assert os.path.getsize(txnindex_path(last)) == 0
    plog.truncate_to(3)  # into the first segment: its entry goes too
    assert plog.segments[0].txn_index.txns == []
    assert plog.last_stable_offset == 0
    plog.close()


def test_marker_rolls_like_any_append(tmp_path):
    # segment.bytes small enough that the marker itself rolls: its entry goes to the new
    # active segment, the one that holds it.
    plog = open_log(tmp_path / "t-0", LogConfig.from_dict({"segment.bytes": "200"}))
    txn(plog, PID, 1, seq=0)
    txn(plog, PID, 1, seq=1)
    plog.append_control_marker(PID, 0, False, 0)
    holder = [s for s in plog.segments if s.base_offset <= 2 < s.next_offset]
    assert holder[0].txn_index.txns == [AbortedTxn(PID, 0, 2, 3)]
    plog.close()


def test_transaction_index_load_rejects_garbage(tmp_path):
    idx = TransactionIndex(str(tmp_path / "0.txnindex"), 0)
    idx.append(AbortedTxn(1, 0, 5, 6))
    idx.flush()
    assert TransactionIndex.load(idx.path, 0, 10).txns == [AbortedTxn(1, 0, 5, 6)]
    from snakka.storage.index import CorruptIndexError
    with pytest.raises(CorruptIndexError):
        TransactionIndex.load(idx.path, 0, 5)  # marker beyond the segment's end
    with open(idx.path, "ab") as f:
        f.write(b"\x00")
    with pytest.raises(CorruptIndexError):
        TransactionIndex.load(idx.path, 0, 10)
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(1, 0, 5, 6))  # not after the last marker


def test_collect_stops_once_an_entrys_lso_reaches_the_bound(tmp_path):
    idx = TransactionIndex(str(tmp_path / "0.txnindex"), 0)
    idx.append(AbortedTxn(1, 0, 5, 6))
    idx.append(AbortedTxn(2, 7, 9, 10))
    # Entry 1's LSO (6) reaches the bound 6: nothing later can start below it; complete.
    assert idx.collect_aborted_txns(0, 6) == ([AbortedTxn(1, 0, 5, 6)], True)
    assert idx.collect_aborted_txns(6, 8) == ([AbortedTxn(2, 7, 9, 10)], True)
    assert idx.collect_aborted_txns(0, 11) == ([AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 7, 9, 10)],
                                               False)
