"""UnifiedLog over its LocalLog: the offsets it owns (log start, high watermark, last stable
offset), their invariants, validation through its LogValidator, and the tiered-storage seam
(issue 10: the storage split)."""

from __future__ import annotations

import pytest

from snakka.records import RecordValidationError, iter_records
from snakka.storage import LogConfig, RemoteLogReader

from .helpers import Clock, append, batch, open_log


def test_high_watermark_follows_appends_and_truncation(tmp_path):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=500))
    for _ in range(10):
        append(plog, batch(3))
        assert plog.high_watermark == plog.log_end_offset
    assert len(plog.segments) > 1
    plog.truncate_to(13)
    assert plog.log_end_offset == 12 and plog.high_watermark == 12
    plog.delete_records_before(7)
    assert plog.log_start_offset == 7 <= plog.high_watermark
    plog.truncate_to(4)  # below the log start: the log restarts empty at its end
    assert plog.log_start_offset == plog.high_watermark == plog.log_end_offset == 3


def test_last_stable_offset_stops_at_an_open_transaction(tmp_path):
    plog = open_log(tmp_path / "t-0")
    append(plog, batch(3))
    append(plog, batch(2, producer_id=5, producer_epoch=0, base_sequence=0,
                       is_transactional=True))
    append(plog, batch(2))
    assert plog.high_watermark == 7
    assert plog.last_stable_offset == 3  # the first offset of the open transaction
    plog.truncate_to(3)  # the transaction's batch is gone; producer state is rebuilt
    assert plog.last_stable_offset == plog.high_watermark == 3


def test_offset_invariants_are_checked(tmp_path):
    plog = open_log(tmp_path / "t-0")
    append(plog, batch(3))
    plog._check_offsets()
    plog._high_watermark = 4  # beyond the log end
    with pytest.raises(AssertionError, match="high watermark 4, log end 3"):
        plog._check_offsets()
    plog._high_watermark = 3
    plog._log_start_offset = 4  # beyond the high watermark
    with pytest.raises(AssertionError, match="log start 4, high watermark 3"):
        plog._check_offsets()


def test_validation_uses_the_topic_configs_and_follows_set_config(tmp_path):
    clock = Clock()
    plog = open_log(tmp_path / "t-0", LogConfig(max_message_bytes=10_000), clock=clock)
    big = batch(5, value_size=400)
    assert plog.validate(big)
    plog.set_config(LogConfig(max_message_bytes=500))
    with pytest.raises(RecordValidationError) as e:
        plog.validate(big)
    assert e.value.error_code == 10  # MESSAGE_TOO_LARGE
    old = batch(1, ts=clock() - 10_000)
    plog.set_config(LogConfig(message_timestamp_before_max_ms=1_000))
    with pytest.raises(RecordValidationError) as e:
        plog.validate(old)
    assert e.value.error_code == 32  # INVALID_TIMESTAMP
    # LogAppendTime: the broker overwrites timestamps, so they are not checked.
    plog.set_config(LogConfig(message_timestamp_before_max_ms=1_000,
                              message_timestamp_type="LogAppendTime"))
    assert plog.validate(old)


class _RecordingRemote:
    """A stand-in for the remote part of a tiered log: records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def read(self, fetch_offset, max_bytes, *, max_offset, min_one_message):
        self.asked.append(fetch_offset)
        return b"remote"


def test_reads_below_the_local_part_fall_through_to_the_remote_reader(tmp_path):
    """The seam tiered storage plugs into: with a remote part the log start offset lies
    below the first local segment, and reads in between go to the RemoteLogReader."""
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300))
    for _ in range(6):
        append(plog, batch(3))
    assert plog.remote_log_reader is None
    plog.delete_records_before(plog.segments[1].base_offset)
    local_start = plog.local_log.base_offset
    assert local_start > 0
    assert plog.local_log_start_offset == plog.log_start_offset == local_start
    with pytest.raises(Exception, match="out of range"):
        plog.read(0, 1 << 20)  # no remote part: below the log start is out of range
    remote = _RecordingRemote()
    reader: RemoteLogReader = remote
    plog.remote_log_reader = reader
    plog._log_start_offset = 0  # what a tiered log's loader keeps: the remote start
    plog._check_offsets()  # legal with a remote part
    assert plog.local_log_start_offset == local_start
    assert plog.read(1, 1 << 20) == b"remote"
    assert remote.asked == [1]
    local = plog.read(local_start, 1 << 20)
    assert [r.offset for r in iter_records(bytes(local))][0] == local_start
    assert remote.asked == [1]
