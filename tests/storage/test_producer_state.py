"""Idempotent producer state: the sans-I/O core and its integration in UnifiedLog."""

from __future__ import annotations

import logging
import os

import pytest

from snakka.records import parse_header
from snakka.storage import LogConfig, ProducerStateError
from snakka.txn.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
)

from .helpers import Clock, append, batch, open_log

PID = 1000


def hdr(n=1, *, pid=PID, epoch=0, seq=0, txn=False):
    return parse_header(
        batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)
    )


# ---------------------------------------------------------------- core


def test_no_producer_id_is_never_checked():
    psm = ProducerStateManager()
    assert psm.check(hdr(pid=-1, epoch=-1, seq=-1)).ok


def test_unknown_producer_accepted_with_any_sequence():
    psm = ProducerStateManager()
    assert psm.check(hdr(seq=17)).ok  # Kafka >= 2.5: no UNKNOWN_PRODUCER_ID


def test_in_order_duplicate_and_out_of_order():
    psm = ProducerStateManager()
    h0 = hdr(3, seq=0)
    psm.update(h0, 0, 2, 1)
    h1 = hdr(2, seq=3)
    assert psm.check(h1).ok
    psm.update(h1, 3, 4, 2)
    dup = psm.check(hdr(3, seq=0))
    assert dup.duplicate == BatchMetadata(0, 2, 0, 2, 1)
    assert psm.check(hdr(2, seq=3)).duplicate.first_offset == 3
    gap = psm.check(hdr(1, seq=6))
    assert gap.error_code == 45
    assert psm.check(hdr(1, seq=5)).ok
    # same first sequence but different length is not a duplicate
    assert psm.check(hdr(2, seq=0)).error_code == 45


def test_only_last_five_batches_detected_as_duplicates():
    psm = ProducerStateManager()
    for i in range(7):
        psm.update(hdr(1, seq=i), i, i, 0)
    assert psm.check(hdr(1, seq=1)).error_code == 45  # fell out of the window
    assert psm.check(hdr(1, seq=2)).duplicate is not None
    assert len(psm.last_entry(PID).batches) == 5


def test_epochs():
    psm = ProducerStateManager()
    psm.update(hdr(1, epoch=3, seq=0), 0, 0, 0)
    assert psm.check(hdr(1, epoch=2, seq=1)).error_code == 47  # fenced old epoch
    assert psm.check(hdr(1, epoch=4, seq=5)).error_code == 45  # new epoch must start at 0
    assert psm.check(hdr(1, epoch=4, seq=0)).ok
    psm.update(hdr(1, epoch=4, seq=0), 1, 1, 0)
    entry = psm.last_entry(PID)
    assert entry.producer_epoch == 4 and len(entry.batches) == 1


def test_sequence_wraps_after_int32_max():
    psm = ProducerStateManager()
    psm.update(hdr(2, seq=2**31 - 2), 0, 1, 0)
    assert psm.last_entry(PID).last_seq == 2**31 - 1
    assert psm.check(hdr(1, seq=0)).ok
    assert psm.check(hdr(1, seq=1)).error_code == 45


def test_non_transactional_write_during_transaction():
    psm = ProducerStateManager()
    psm.update(hdr(1, seq=0, txn=True), 10, 10, 0)
    assert psm.first_unstable_offset() == 10
    assert psm.check(hdr(1, seq=1)).error_code == 48
    assert psm.check(hdr(1, seq=1, txn=True)).ok


def test_first_unstable_offset_is_the_oldest_open_transaction():
    psm = ProducerStateManager()
    assert psm.first_unstable_offset() is None
    # Producers known in the order 1, 2, 3; 3 opens its transaction first (at 12).
    for pid, offset in ((1, 5), (2, 6), (3, 7)):  # not transactional: never unstable
        psm.update(hdr(1, pid=pid, seq=0), offset, offset, 0)
    assert psm.first_unstable_offset() is None
    psm.update(hdr(1, pid=3, seq=1, txn=True), 12, 12, 0)
    psm.update(hdr(1, pid=2, seq=1, txn=True), 20, 20, 0)
    psm.update(hdr(1, pid=1, seq=1, txn=True), 30, 30, 0)
    assert psm.first_unstable_offset() == 12


def test_expiry():
    psm = ProducerStateManager(producer_id_expiration_ms=1000)
    psm.update(hdr(1, pid=1, seq=0), 0, 0, 100)
    psm.update(hdr(1, pid=2, seq=0), 1, 1, 600)
    psm.update(hdr(1, pid=3, seq=0, txn=True), 2, 2, 0)  # open transaction: kept
    assert psm.remove_expired_producers(1099) == []
    assert psm.remove_expired_producers(1100) == [1]
    assert sorted(psm.producers) == [2, 3]


def test_snapshot_round_trip_and_corruption():
    entries = [
        ProducerStateEntry(1, 2, 99, None, -1, [BatchMetadata(0, 4, 10, 14, 99)]),
        ProducerStateEntry(7, 0, 4, 40, 3, [BatchMetadata(i, i, i, i, i) for i in range(5)]),
        ProducerStateEntry(9, 3, 77, None, 5, []),  # epoch bumped by a marker: no batch
        # A sequence that wrapped past Int32.MAX inside the batch.
        ProducerStateEntry(11, 0, 8, None, -1, [BatchMetadata(2**31 - 2, 1, 50, 53, 8)]),
    ]
    data = encode_snapshot(entries)
    assert decode_snapshot(data) == entries
    for bad in (data[:-1], data[:3], b"", data[:10] + bytes([data[10] ^ 1]) + data[11:],
                b"\x00\x02" + data[2:]):
        with pytest.raises(ValueError):
            decode_snapshot(bad)


# plain-0/00000000000000000104.snapshot as the reference Kafka 4.0.0 wrote it at a clean
# shutdown: an idempotent producer's batch of 100 records (pid 0) and a transactional
# producer (pid 1) after one aborted and one committed transaction.
KAFKA_SNAPSHOT = bytes.fromhex(
    "0001de5f81fa000000020000000000000000000000000063000000000000006300000063000001a226583129"
    "ffffffffffffffffffffffff0000000000000001000000000001000000000000006600000000000001a22658"
    "39c800000000ffffffffffffffff")


def test_kafka_written_snapshot_reads_and_rewrites_byte_for_byte():
    entries = decode_snapshot(KAFKA_SNAPSHOT)
    assert [(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset)
            for e in entries] == [(0, 0, -1, None), (1, 0, 0, None)]
    assert list(entries[0].batches) == [BatchMetadata(0, 99, 0, 99, 1795939643689)]
    assert list(entries[1].batches) == [BatchMetadata(1, 1, 102, 102, 1795939645896)]
    assert encode_snapshot(entries) == KAFKA_SNAPSHOT


def test_snapshot_is_kafkas_producer_snapshot_v1():
    """Kafka's reader (the generated ProducerSnapshot after the int16 version, CRC32C of the
    bytes after the CRC) and its last-entry-wins load see each producer's newest batch."""
    from crc32c import crc32c

    from snakka.protocol.internal.storage.producer_snapshot import ProducerSnapshot

    entry = ProducerStateEntry(7, 2, 500, 40, 3, [BatchMetadata(i, i + 1, 10 * i, 10 * i + 1, i)
                                                   for i in range(3)])
    data = encode_snapshot([entry])
    assert data[:2] == b"\x00\x01"
    snap = ProducerSnapshot.decode(data[2:], 1)
    assert snap.crc == crc32c(data[6:])
    newest = {pe.producer_id: pe for pe in snap.producer_entries}[7]
    assert (newest.epoch, newest.last_sequence, newest.last_offset, newest.offset_delta,
            newest.timestamp, newest.coordinator_epoch, newest.current_txn_first_offset) == (
        2, 3, 21, 1, 500, 3, 40)


def test_legacy_snakka_snapshot_still_loads():
    import struct

    from crc32c import crc32c

    body = struct.pack(">i", 1) + struct.pack(">qhqqib", 5, 1, 70, -1, -1, 1) + struct.pack(
        ">iiqqq", 0, 2, 0, 2, 70)
    data = struct.pack(">hI", 1001, crc32c(body)) + body
    assert decode_snapshot(data) == [ProducerStateEntry(5, 1, 70, None, -1,
                                                        [BatchMetadata(0, 2, 0, 2, 70)])]


# ---------------------------------------------------------------- in UnifiedLog


def idem(n, seq, *, epoch=0, pid=PID, **kw):
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)


def test_log_answers_duplicates_with_original_offsets(tmp_path):
    plog = open_log(tmp_path / "t-0")
    append(plog, batch(2))
    r1 = append(plog, idem(3, 0))
    assert (r1.base_offset, r1.last_offset) == (2, 4)
    leo = plog.log_end_offset
    r2 = append(plog, idem(3, 0))
    assert r2.duplicate and (r2.base_offset, r2.last_offset) == (2, 4)
    assert plog.log_end_offset == leo  # nothing appended
    with pytest.raises(ProducerStateError) as ei:
        append(plog, idem(1, 7))
    assert ei.value.error_code == 45
    with pytest.raises(ProducerStateError) as ei:
        append(plog, idem(1, 3, epoch=-1))  # older epoch than the known 0
    assert ei.value.error_code == 47
    assert plog.log_end_offset == leo


def test_producer_state_survives_clean_restart(tmp_path):
    path = tmp_path / "t-0"
    plog = open_log(path)
    append(plog, idem(3, 0))
    append(plog, idem(2, 3))
    plog.close()
    assert os.path.exists(path / "00000000000000000005.snapshot")
    again = open_log(path)
    assert again.append(idem(2, 3), again.validate(idem(2, 3))).duplicate
    with pytest.raises(ProducerStateError):
        append(again, idem(1, 9))
    assert append(again, idem(1, 5)).base_offset == 5


def test_producer_state_rebuilt_after_unclean_restart(tmp_path, caplog):
    path = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=400)
    plog = open_log(path, cfg, clock=Clock())
    seq = 0
    for i in range(12):
        append(plog, idem(2, seq, pid=PID + i % 3))
        if i % 3 == 2:
            seq += 2
    assert len(plog.segments) > 2
    expected = {pid: (e.producer_epoch, list(e.batches)) for pid, e in plog.producer_state.producers.items()}
    leo = plog.log_end_offset
    # crash: no close, no final snapshot
    for seg in plog.segments:
        seg.file.close()
        seg.closed = True
    plog.local_log.closed = True
    with caplog.at_level(logging.INFO, logger="snakka.storage"):
        again = open_log(path, cfg, recover=True, clock=Clock())
    assert again.log_end_offset == leo
    got = {pid: (e.producer_epoch, [b[:4] for b in e.batches]) for pid, e in again.producer_state.producers.items()}
    assert got == {pid: (ep, [b[:4] for b in bs]) for pid, (ep, bs) in expected.items()}
    assert any("rebuilt producer state" in r.getMessage() for r in caplog.records)
    # the last batch of producer PID is still recognised as a duplicate
    last = again.producer_state.last_entry(PID).batches[-1]
    dup = idem(last.last_seq - last.first_seq + 1, last.first_seq, pid=PID)
    assert again.append(dup, again.validate(dup)).duplicate


def test_replay_after_torn_tail_forgets_lost_batch(tmp_path):
    path = tmp_path / "t-0"
    plog = open_log(path)
    append(plog, idem(1, 0))
    append(plog, idem(1, 1))
    for seg in plog.segments:
        seg.file.close()
    plog.local_log.closed = True
    log_file = path / "00000000000000000000.log"
    os.truncate(log_file, os.path.getsize(log_file) - 3)
    again = open_log(path, recover=True)
    assert again.log_end_offset == 1
    # the producer retries the lost batch: accepted, not a duplicate
    r = append(again, idem(1, 1))
    assert not r.duplicate and r.base_offset == 1


def test_corrupt_snapshot_falls_back_to_replay(tmp_path, caplog):
    path = tmp_path / "t-0"
    plog = open_log(path)
    append(plog, idem(2, 0))
    plog.close()
    snap = path / "00000000000000000002.snapshot"
    snap.write_bytes(b"\x03\xe9garbage")
    with caplog.at_level(logging.WARNING, logger="snakka.storage"):
        again = open_log(path)
    assert any("ignoring producer snapshot" in r.getMessage() for r in caplog.records)
    assert again.append(idem(2, 0), again.validate(idem(2, 0))).duplicate


def test_truncate_reloads_producer_state(tmp_path):
    plog = open_log(tmp_path / "t-0")
    append(plog, idem(1, 0))
    append(plog, idem(1, 1))
    plog.truncate_to(1)
    assert plog.producer_state.last_entry(PID).last_seq == 0
    assert append(plog, idem(1, 1)).base_offset == 1


def test_expire_producers_through_log(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", LogConfig(producer_id_expiration_ms=1000), clock=clock)
    append(plog, idem(1, 0))
    clock.advance(1000)
    assert plog.expire_producers(clock()) == [PID]
    assert append(plog, idem(1, 5)).base_offset == 1  # unknown again: any sequence
