"""The replica manager on its own (no server, no handlers): the append rules, the durability
decision, reads with the high watermark / last stable offset / leader epochs, and wake-ups."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from storage.helpers import Clock, batch  # tests/ is on sys.path (rootdir-relative packages)

from snakka.metadata.core import ClusterMetadata
from snakka.protocol.errors import ErrorCode
from snakka.records import iter_records
from snakka.replica.manager import LEADER_EPOCH, ReplicaManager
from snakka.storage import LogConfig, LogManager
from snakka.storage.flush import FlushScheduler


def _replicas(tmp_path, *, strict: bool = False, topics: dict[str, dict] | None = None):
    clock = Clock()
    metadata = ClusterMetadata()
    logs = LogManager([str(tmp_path)], time_ms=clock)
    for name, configs in (topics or {"t": {}}).items():
        metadata.apply_all([metadata.topic_record(name, 1, configs)])
        ti = metadata.topics[name]
        cfg = LogConfig.from_dict({k: v for k, v in configs.items() if v is not None})
        logs.get_or_create_log(name, 0, cfg, ti.topic_id)
    flusher = FlushScheduler(logs, strict=strict, time_ms=clock)
    return ReplicaManager(metadata, logs, flusher, node_id=7, time_ms=clock,
                          log_dir=str(tmp_path), max_uncompressed_bytes=1 << 20)


def test_append_rules(tmp_path):
    rm = _replicas(tmp_path, topics={"t": {}, "__consumer_offsets": {},
                                     "isr2": {"min.insync.replicas": "2"}})
    assert rm.append_records("__consumer_offsets", 0, batch(1), 1).error_code == \
        ErrorCode.INVALID_TOPIC_EXCEPTION
    assert rm.append_records("nope", 0, batch(1), 1).error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert rm.append_records("t", 1, batch(1), 1).error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert rm.append_records("t", 0, b"", 1).error_code == ErrorCode.INVALID_RECORD
    assert rm.append_records("isr2", 0, batch(1), -1).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert rm.append_records("isr2", 0, batch(1), 1).error_code == ErrorCode.NONE
    two = batch(1) + batch(1)
    assert rm.append_records("t", 0, two, 1).error_code == ErrorCode.INVALID_RECORD
    ok = rm.append_records("t", 0, batch(3), 1)
    assert (ok.error_code, ok.base_offset, ok.log_start_offset) == (0, 0, 0)
    assert rm.append_records("t", 0, batch(2), 1).base_offset == 3


@pytest.mark.parametrize(("strict", "acks", "flush_messages", "waits"), [
    (False, -1, None, False),   # background group commit answers at once
    (True, -1, None, True),     # log.flush.strict: acks=all waits for fsync
    (True, 1, None, False),     # ... acks=1 does not
    (False, 1, "1", True),      # the topic's flush.messages reached: any acknowledged write
    (False, 0, "1", False),     # acks=0 has no answer to hold back
])
def test_the_one_durability_rule(tmp_path, strict, acks, flush_messages, waits):
    configs = {} if flush_messages is None else {"flush.messages": flush_messages}
    rm = _replicas(tmp_path, strict=strict, topics={"t": configs})

    async def go():  # on a loop: flush.messages schedules an urgent background flush
        r = rm.append_records("t", 0, batch(2), acks)
        assert r.error_code == 0
        assert (r.mark is not None) is waits
        if waits:
            assert r.mark == (rm.get_log("t", 0), 2)
            await rm.durable([r.mark])
            assert rm.get_log("t", 0).unflushed_messages == 0
        await rm.flusher.close()
    asyncio.run(go())
    # Coordinators' writes follow the same flag.
    assert rm.strict_durability is strict


def test_reads_stop_at_the_last_stable_offset_under_read_committed(tmp_path):
    rm = _replicas(tmp_path)
    rm.append_records("t", 0, batch(2), 1)
    pl = rm.get_log("t", 0)
    # An open transaction (written by the log directly: Produce refuses transactional batches
    # until issue 11) holds the LSO at its first offset.
    txn = batch(3, producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    pl.append(txn, pl.validate(txn))
    rm.append_records("t", 0, batch(1), 1)
    uncommitted = rm.read("t", 0, 0, 1 << 20)
    committed = rm.read("t", 0, 0, 1 << 20, read_committed=True)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (6, 2)
    assert committed.error_code == uncommitted.error_code == ErrorCode.NONE
    assert len(committed.records) < len(uncommitted.records)
    assert [r.offset for r in iter_records(bytes(committed.records))] == [0, 1]
    assert [r.offset for r in iter_records(bytes(uncommitted.records))] == list(range(6))


def test_read_errors_and_leader_epochs(tmp_path):
    rm = _replicas(tmp_path)
    rm.append_records("t", 0, batch(2), 1)
    assert rm.leader_id("t", 0) == 7 and rm.leader_epoch("t", 0) == LEADER_EPOCH
    assert rm.read(None, 0, 0, 100, unknown=ErrorCode.UNKNOWN_TOPIC_ID).error_code == \
        ErrorCode.UNKNOWN_TOPIC_ID
    missing = rm.read("nope", 0, 0, 100)
    assert (missing.error_code, missing.found) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, False)
    newer = rm.read("t", 0, 0, 100, current_leader_epoch=LEADER_EPOCH + 1)
    assert (newer.error_code, newer.found, newer.records) == (
        ErrorCode.UNKNOWN_LEADER_EPOCH, True, b"")
    assert rm.check_leader_epoch(-1) == ErrorCode.NONE
    assert rm.read("t", 0, 5, 100).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert rm.read("t", 0, 2, 100).records == b""  # at the end: nothing yet, no error
    # Kafka's segment read refuses a negative size where there is data, not where there is none.
    assert rm.read("t", 0, 0, -1).error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert rm.read("t", 0, 2, -1).error_code == ErrorCode.NONE
    assert rm.read("t", 0, 0, 0, min_one_message=False).records == b""
    assert rm.read("t", 0, 0, 0).records != b""  # KIP-74: the first batch whole


def test_appends_and_detaching_wake_long_polls(tmp_path):
    rm = _replicas(tmp_path)

    async def go():
        woken = asyncio.ensure_future(rm.wait_for_append([("t", 0)], 5))
        await asyncio.sleep(0)
        rm.append_records("t", 0, batch(1), 1)
        assert await woken is True
        detached = asyncio.ensure_future(rm.wait_for_append([("t", 0)], 5))
        await asyncio.sleep(0)
        pl = rm.detach_log("t", 0)
        assert await detached is True and pl is not None
        assert rm.get_log("t", 0) is None
        assert await rm.wait_for_append([("t", 0)], 0.01) is False  # nothing else wakes it
    asyncio.run(go())


def test_lookup_by_topic_id(tmp_path):
    rm = _replicas(tmp_path)
    tid = rm.metadata.topics["t"].topic_id
    assert rm.lookup_by_id(tid, 0)[1] == ErrorCode.NONE
    assert rm.lookup_by_id(uuid.uuid4(), 0) == (None, ErrorCode.UNKNOWN_TOPIC_ID)
    assert rm.lookup_by_id(tid, 3) == (None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
