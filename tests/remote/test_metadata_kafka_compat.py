"""``__remote_log_metadata`` between snakka and Apache Kafka 4.0, both ways.

Kafka -> snakka: the reference broker tiers a topic through a tiny RemoteStorageManager of ours
(Java, compiled here: it keeps nothing and returns custom metadata), we read its metadata topic
with kafka-python, and snakka's serde must decode every record, re-encode it to the same bytes,
find it in the partition our partitioner names, and rebuild the state Kafka's events describe
(copies, then the deletion of the topic).

snakka -> Kafka: Kafka's own RemoteLogMetadataFormatter (kafka-console-consumer.sh) reads the
``__remote_log_metadata`` a snakka broker wrote, every kind of record included."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import reference_kafka as ref

from snakka.remote.metadata import (
    RemotePartitionMetadataStore,
    deserialize,
    metadata_partition,
    serialize,
)
from snakka.remote.types import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(ref.skip_reason() is not None,
                                                    reason=ref.skip_reason() or "")]
needs_javac = pytest.mark.skipif(shutil.which("javac") is None,
                                 reason="no `javac` on PATH (needed to build the test's Java RSM)")

S = RemoteLogSegmentState
TOPIC = "tiered"

RSM_JAVA = """
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

/** Keeps nothing: enough for Kafka to copy segments and write their metadata. */
public class RecordingRemoteStorageManager implements RemoteStorageManager {
    @Override public void configure(Map<String, ?> configs) { }
    @Override public Optional<RemoteLogSegmentMetadata.CustomMetadata> copyLogSegmentData(
            RemoteLogSegmentMetadata md, LogSegmentData data) {
        return Optional.of(new RemoteLogSegmentMetadata.CustomMetadata(
            ("snakka-" + md.startOffset()).getBytes(StandardCharsets.UTF_8)));
    }
    @Override public InputStream fetchLogSegment(RemoteLogSegmentMetadata md, int start)
            throws RemoteResourceNotFoundException {
        throw new RemoteResourceNotFoundException("not kept");
    }
    @Override public InputStream fetchLogSegment(RemoteLogSegmentMetadata md, int start, int end)
            throws RemoteResourceNotFoundException {
        throw new RemoteResourceNotFoundException("not kept");
    }
    @Override public InputStream fetchIndex(RemoteLogSegmentMetadata md, IndexType type)
            throws RemoteResourceNotFoundException {
        throw new RemoteResourceNotFoundException("not kept");
    }
    @Override public void deleteLogSegmentData(RemoteLogSegmentMetadata md) { }
    @Override public void close() { }
}
"""


def _build_rsm(tmp_path: Path) -> Path:
    src = tmp_path / "RecordingRemoteStorageManager.java"
    src.write_text(RSM_JAVA)
    classes = tmp_path / "classes"
    libs = ref.KAFKA_HOME / "libs"
    cp = f"{libs / 'kafka-storage-api-4.0.0.jar'}:{libs / 'kafka-clients-4.0.0.jar'}"
    subprocess.run(["javac", "-d", str(classes), "-cp", cp, str(src)], check=True, timeout=120)
    return classes


def _tp_of(event: Any) -> TopicIdPartition:
    if isinstance(event, RemoteLogSegmentMetadata):
        return event.topic_id_partition
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return event.segment_id.topic_id_partition
    assert isinstance(event, RemotePartitionDeleteMetadata)
    return event.topic_id_partition


@needs_javac
def test_kafka_written_remote_log_metadata(tmp_path: Path) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    classes = _build_rsm(tmp_path)
    kafka = ref.ReferenceKafka({
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "RecordingRemoteStorageManager",
        "remote.log.storage.manager.class.path": str(classes),
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "remote.log.manager.task.interval.ms": "500",
    }).start()
    try:
        bootstrap = kafka.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs={
            "remote.storage.enable": "true", "segment.bytes": "1048576"})])
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        for _ in range(350):  # ~3.5 MB: three closed 1 MiB segments to copy
            producer.send(TOPIC, b"x" * 10_000)
        producer.flush(60)
        producer.close()
        topic_id = None
        for t in admin.describe_topics([TOPIC]):
            topic_id = t.get("topic_id")
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        deadline = time.monotonic() + 90
        while True:  # the metadata topic appears once Kafka's manager has created it
            parts = consumer.partitions_for_topic("__remote_log_metadata")
            if parts:
                break
            assert time.monotonic() < deadline, "Kafka never created __remote_log_metadata"
            time.sleep(0.5)
        assert len(parts) == 50
        consumer.assign([TopicPartition("__remote_log_metadata", p) for p in parts])
        consumer.seek_to_beginning()
        got: list[tuple[int, bytes | None, bytes]] = []

        def poll_until(done: Any, what: str) -> None:
            while not done():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                for tp, recs in consumer.poll(500).items():
                    got.extend((tp.partition, r.key, r.value) for r in recs)

        def finished() -> int:
            return sum(1 for _p, _k, v in got if v[1] == 1 and isinstance(
                deserialize(v), RemoteLogSegmentMetadataUpdate)
                and deserialize(v).state is S.COPY_SEGMENT_FINISHED)
        poll_until(lambda: finished() >= 3, "three copied segments")
        copied = len(got)
        admin.delete_topics([TOPIC])
        poll_until(lambda: sum(1 for _p, _k, v in got if deserialize(v) is not None and
                               isinstance(deserialize(v), RemoteLogSegmentMetadataUpdate)
                               and deserialize(v).state is S.DELETE_SEGMENT_FINISHED)
                   >= finished(), "the deletion of every copied segment")
        # A little longer for the partition-delete records that follow (best effort).
        end = time.monotonic() + 3
        while time.monotonic() < end:
            for tp, recs in consumer.poll(500).items():
                got.extend((tp.partition, r.key, r.value) for r in recs)
        consumer.close()
        admin.close()
    finally:
        kafka.stop()

    store = RemotePartitionMetadataStore()
    kinds = set()
    for i, (partition, key, value) in enumerate(got):
        assert key is None  # Kafka's records are unkeyed
        event = deserialize(value)
        assert serialize(event) == value, f"re-encoding differs from Kafka's bytes: {event}"
        tp = _tp_of(event)
        assert tp.topic == TOPIC and tp.partition == 0
        if topic_id is not None:
            assert str(tp.topic_id).replace("-", "") == str(topic_id).replace("-", "")
        assert partition == metadata_partition(tp, 50)
        kinds.add((type(event).__name__, getattr(event, "state", None)))
        assert store.replay(event), event
        if i == copied - 1:  # Kafka's state after the copies
            cache = store.cache(tp)
            assert cache is not None
            segs = [m for m in cache.segments() if m.state is S.COPY_SEGMENT_FINISHED]
            assert len(segs) >= 3
            for m in segs:
                assert m.custom_metadata == f"snakka-{m.start_offset}".encode()
                found = cache.remote_log_segment_metadata(0, m.end_offset)
                assert found is not None and found.segment_id == m.segment_id
            assert cache.highest_offset_for_epoch(0) == max(m.end_offset for m in segs)
    assert ("RemoteLogSegmentMetadataUpdate", S.DELETE_SEGMENT_STARTED) in kinds
    tp = _tp_of(deserialize(got[0][2]))
    cache = store.cache(tp)
    assert cache is None or not [m for m in cache.segments()
                                 if m.state is not S.COPY_SEGMENT_STARTED]


def test_kafka_reads_what_snakka_writes(tmp_path: Path) -> None:
    import asyncio
    import uuid

    from snakka.protocol.primitives import uuid_to_base64
    from snakka.remote.metadata_manager import TopicBasedRemoteLogMetadataManager
    from snakka.remote.types import (
        RemoteLogSegmentId,
        RemotePartitionDeleteState,
    )
    from snakka.testing import EmbeddedBroker

    tp = TopicIdPartition(uuid.UUID("6d2a8c5e-1f0b-4c1a-9b7e-3a4f5e6d7c8b"), "orders", 2)
    sid = RemoteLogSegmentId(tp, uuid.UUID("11111111-2222-4333-8444-555555555555"))
    events: list[Any] = [
        RemoteLogSegmentMetadata(sid, 100, 199, 1_700_000_000_000, 0, 1_700_000_001_000, 4096,
                                 ((0, 100), (3, 150)), txn_index_empty=True),
        RemoteLogSegmentMetadataUpdate(sid, 1_700_000_002_000, S.COPY_SEGMENT_FINISHED, 0,
                                       b"manifest-crc"),
        RemoteLogSegmentMetadataUpdate(sid, 1_700_000_003_000, S.DELETE_SEGMENT_STARTED, 0,
                                       b"manifest-crc"),
        RemoteLogSegmentMetadataUpdate(sid, 1_700_000_004_000, S.DELETE_SEGMENT_FINISHED, 0,
                                       b"manifest-crc"),
        RemotePartitionDeleteMetadata(tp, RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                                      1_700_000_005_000, 0),
        RemotePartitionDeleteMetadata(tp, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
                                      1_700_000_006_000, 0),
    ]
    config = {"remote.log.storage.system.enable": "true",
              "rlmm.config.remote.log.metadata.topic.num.partitions": "3"}
    with EmbeddedBroker(str(tmp_path), config=config) as b:
        br = b.broker
        m = TopicBasedRemoteLogMetadataManager(br.controller, br.replicas, br.config,
                                               broker_id=0, time_ms=br.time_ms)

        async def write() -> None:
            await m.start()
            await m.add_remote_log_segment_metadata(events[0])
            for ev in events[1:4]:
                await m.update_remote_log_segment_metadata(ev)
            for ev in events[4:]:
                await m.put_remote_partition_delete_metadata(ev)
        assert b._loop is not None
        asyncio.run_coroutine_threadsafe(write(), b._loop).result(30)
        out = ref.run_tool(
            "kafka-console-consumer.sh", "--bootstrap-server", b.bootstrap_servers,
            "--topic", "__remote_log_metadata", "--from-beginning", "--max-messages", "6",
            "--timeout-ms", "30000", "--formatter",
            "org.apache.kafka.server.log.remote.metadata.storage.serialization."
            "RemoteLogMetadataSerde$RemoteLogMetadataFormatter")
    lines = [x for x in out.stdout.splitlines() if x.startswith("partition: ")]
    assert len(lines) == 6, out.stdout + out.stderr
    want_partition = metadata_partition(tp, 3)
    assert all(x.startswith(f"partition: {want_partition}, offset: {i},")
               for i, x in enumerate(lines)), lines
    text = "\n".join(lines)
    # What Kafka's toString() of each decoded event says.
    for needle in ("startOffset=100", "endOffset=199", "segmentSizeInBytes=4096",
                   "segmentLeaderEpochs={0=100, 3=150}", "txnIdxEmpty=true",
                   "COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_STARTED",
                   "DELETE_SEGMENT_FINISHED", "DELETE_PARTITION_MARKED",
                   "DELETE_PARTITION_FINISHED", f"id={uuid_to_base64(sid.id)}",
                   f"{uuid_to_base64(tp.topic_id)}:orders-2",
                   "CustomMetadata{12 bytes}"):
        assert needle in text, (needle, text)
