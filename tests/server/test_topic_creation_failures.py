"""Metadata never commits what failed, and start-up refuses a metadata log it cannot replay.

Issue 9 item 13 (CreateTopics part): when a partition log cannot be created (EMFILE, ENOSPC,
EACCES), CreateTopics and Metadata auto-creation answer KAFKA_STORAGE_ERROR for that topic, the
topic is not in metadata (not now, not after a restart), its partial directories are gone, and the
other topics of the request are created. The failure is injected in the embedded broker by making
the partition log's loader raise EMFILE for one topic's directories (below both the small,
on-the-loop path and the large, worker-thread path).

Issue 9 item 8 (start-up part): a metadata log record that cannot be decoded stops start-up with
one error naming the segment file and offset, never a JSONDecodeError traceback; a record of the
old bug (a topic named ``__cluster_metadata``) is skipped with a warning.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os

import pytest

from snakka.client.connection import KafkaConnection
from snakka.metadata.store import MetadataStore
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from snakka.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.records import Record, build_batch, validate_batches
from snakka.storage import unified_log as storage_log
from snakka.testing import EmbeddedBroker


@pytest.fixture
def failing_logs(monkeypatch):
    """Partition directories of topics named ``doomed*`` fail to open with EMFILE, at their
    third partition (so some partitions were made before the failure)."""
    real = storage_log.UnifiedLog._load

    def load(self, *a, **kw):
        if self.topic.startswith("doomed") and self.partition >= 2 or \
                self.topic.startswith("doomed-1p"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real(self, *a, **kw)

    monkeypatch.setattr(storage_log.UnifiedLog, "_load", load)


def _send(b: EmbeddedBroker, *requests):
    async def go():
        host, port = b.bootstrap_servers.rsplit(":", 1)
        async with KafkaConnection(host, int(port)) as c:
            return [await c.send(r) for r in requests]
    return asyncio.run(go())


def _create(*topics: tuple[str, int]) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[CreatableTopic(
        name=n, num_partitions=p, replication_factor=1, assignments=[], configs=[])
        for n, p in topics], timeout_ms=30000, validate_only=False)


def _all_topics(b: EmbeddedBroker) -> set[str]:
    (md,) = _send(b, MetadataRequest(topics=None, allow_auto_topic_creation=False))
    return {t.name for t in md.topics}


@pytest.mark.parametrize("partitions", [3, 40], ids=["on-loop", "worker-thread"])
def test_create_topics_commits_nothing_for_a_topic_whose_logs_failed(failing_logs, partitions):
    with EmbeddedBroker() as b:
        (resp,) = _send(b, _create(("fine", partitions), ("doomed", partitions)))
        by_name = {t.name: t for t in resp.topics}
        assert by_name["fine"].error_code == 0
        assert by_name["doomed"].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "doomed-2" in by_name["doomed"].error_message
        assert "Too many open files" in by_name["doomed"].error_message
        assert _all_topics(b) >= {"fine"} and "doomed" not in _all_topics(b)
        assert not [d for d in os.listdir(b.data_dir) if d.startswith("doomed")], \
            "the partial partition directories must be removed"
        b.restart()
        assert "fine" in _all_topics(b) and "doomed" not in _all_topics(b)
        # The failed name was released: a retry is refused for the same storage reason, not
        # as TOPIC_ALREADY_EXISTS.
        (resp,) = _send(b, _create(("doomed", partitions)))
        assert resp.topics[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR


def test_auto_create_answers_storage_error_and_commits_nothing(failing_logs):
    with EmbeddedBroker(config={"auto.create.topics.enable": "true"}) as b:
        (md,) = _send(b, MetadataRequest(topics=[MetadataRequestTopic(name="doomed-1p"),
                                                 MetadataRequestTopic(name="ok")],
                                         allow_auto_topic_creation=True))
        assert [(t.name, t.error_code) for t in md.topics] == \
            [("doomed-1p", ErrorCode.KAFKA_STORAGE_ERROR), ("ok", 0)]
        assert "doomed-1p" not in _all_topics(b)
        b.restart()
        assert "doomed-1p" not in _all_topics(b) and "ok" in _all_topics(b)


@pytest.mark.parametrize("count", [4, 30], ids=["on-loop", "worker-thread"])
def test_create_partitions_keeps_the_old_count_when_a_log_fails(failing_logs, count):
    with EmbeddedBroker() as b:
        (resp,) = _send(b, _create(("doomed-grow", 2)))  # partitions 0 and 1 open fine
        assert resp.topics[0].error_code == 0
        (resp,) = _send(b, CreatePartitionsRequest(topics=[CreatePartitionsTopic(
            name="doomed-grow", count=count, assignments=None)], timeout_ms=30000))
        assert resp.results[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        (md,) = _send(b, MetadataRequest(topics=[MetadataRequestTopic(name="doomed-grow")],
                                         allow_auto_topic_creation=False))
        assert len(md.topics[0].partitions) == 2
        assert sorted(d for d in os.listdir(b.data_dir) if d.startswith("doomed-grow")) == \
            ["doomed-grow-0", "doomed-grow-1"]


def _append_raw(log_dir: str, value: bytes) -> None:
    store = MetadataStore(log_dir)
    batch = bytearray(build_batch([Record(value=value)]))
    store.log.append(batch, validate_batches(batch, max_message_bytes=1 << 20),
                     log_append_time_ms=None)
    store.close()


def test_undecodable_metadata_record_fails_start_up_with_file_and_offset(tmp_path):
    b = EmbeddedBroker(str(tmp_path))
    b.start()
    _send(b, _create(("orders", 1)))
    b.stop()
    _append_raw(str(tmp_path), b"\x00not json")
    with pytest.raises(RuntimeError) as e:
        b.start()
    msg = str(e.value)
    assert type(e.value).__name__ == "MetadataLogError"
    assert "__cluster_metadata-0" in msg and "00000000000000000000.log" in msg
    end = MetadataStore(str(tmp_path)).log.log_end_offset  # the bad record is the last one
    assert f"offset {end - 1}" in msg and "not a KRaft metadata record" in msg
    assert "\n" not in msg


def test_topic_record_named_cluster_metadata_is_skipped(tmp_path, caplog):
    """A (JSON) log written before names were reserved: the bogus topic is dropped, the broker
    starts and keeps its real topics."""
    for rec in ({"type": "topic", "name": "orders", "topic_id": "22" * 16, "partitions": 1,
                 "configs": {}},
                {"type": "topic", "name": "__cluster_metadata", "topic_id": "11" * 16,
                 "partitions": 1, "configs": {}}):
        _append_raw(str(tmp_path), json.dumps(rec).encode())
    b = EmbeddedBroker(str(tmp_path))
    b.start()
    try:
        names = _all_topics(b)
        assert "orders" in names and "__cluster_metadata" not in names
        assert any("skipped topic record for __cluster_metadata" in r.getMessage()
                   for r in caplog.records)
    finally:
        b.close()
