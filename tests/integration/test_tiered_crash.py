"""SIGKILL during an upload (issue 12): restart resumes copying, nothing points at a partial
object, consumers from offset 0 see no gap.

A subprocess broker copies 4 MiB segments of one partition one after another (the copier
logs ``copied segment A..B`` after each COPY_SEGMENT_FINISHED). Right after such a line the
next copy is under way: the broker is SIGKILLed a few milliseconds later, and the store is
inspected at once: a segment copy with objects but no manifest (the manifest is the commit
point, written last) proves the kill landed mid-upload. This repeats (several kills, each
followed by a restart) until such a partial copy has been seen at least once.

After the last restart, within a bounded time:
- the copier has caught up (ListOffsets -5 reaches the end of the closed segments) and the
  local size shrank: copying resumed;
- the partial copies are gone from the store (the remote log manager deletes a copy whose
  COPY_SEGMENT_STARTED never finished);
- every stored segment with a manifest verifies: the storage manager reads it whole,
  CRC32C-checking every chunk against the manifest;
- confluent-kafka reads the whole partition from offset 0 byte-identically, no gap.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, wait_until
from .tiered_support import (
    TIERED_BROKER,
    MiB,
    Workload,
    assert_clean_output,
    ck_digest,
    summaries,
    tiered_backend,  # noqa: F401  (fixture)
    tiered_topic_config,
    wait_tiered,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiered"), pytest.mark.timeout(600)]

SEG = 4 * MiB
TOPIC = "tiered-crash"
MAX_KILLS = 8


def partial_copies(backend, topic: str) -> set[str]:
    """Segment copies (uuids) with objects in the store but no manifest."""
    by_uuid: dict[str, set[str]] = {}
    for o in backend.objects(topic):
        by_uuid.setdefault(o.segment_uuid, set()).add(o.suffix)
    return {u for u, suffixes in by_uuid.items() if "manifest" not in suffixes}


def _copied_lines(broker: EmbeddedBroker) -> int:
    return sum(1 for line in broker.output if "copied segment" in line)


def test_sigkill_during_upload(tiered_backend):  # noqa: F811  (the imported fixture)
    rnd = random.Random(405)
    broker = EmbeddedBroker(mode="subprocess", log_level="INFO",
                            config={**TIERED_BROKER, **tiered_backend.configs()})
    broker.start()
    try:
        bs = broker.bootstrap_servers
        ck_create_topic(bs, TOPIC, 1, tiered_topic_config(SEG, SEG))
        workload = Workload(64 * MiB, 1, seed=7, phase_bytes=4 * MiB)
        # Produce in a thread: the copier starts while records still arrive.
        produced: list[dict[int, int]] = []
        producer = threading.Thread(target=lambda: produced.append(workload.produce(bs, TOPIC)))
        producer.start()
        producer.join(300)
        assert produced, "produce did not finish"
        ends = produced[0]

        seen_partial = 0
        kills = 0
        while kills < MAX_KILLS and seen_partial == 0:
            n = _copied_lines(broker)
            # Wait for a copy to finish: the next one starts right after it.
            try:
                wait_until(lambda n=n: _copied_lines(broker) > n, 30, "a segment copied",
                           interval=0.002)
            except AssertionError:
                break  # nothing left to copy
            time.sleep(rnd.uniform(0, 0.03))  # a point inside the next upload, on purpose
            broker.kill()
            kills += 1
            if partial_copies(tiered_backend, TOPIC):
                seen_partial += 1
            broker.start()
        assert seen_partial, (f"{kills} kills, none landed mid-upload (no partial copy in "
                              f"the store); make the segments bigger")
        bs = broker.bootstrap_servers

        wait_tiered(bs, broker.data_dir, TOPIC, [0], timeout=120, local_max=3 * SEG)
        wait_until(lambda: not partial_copies(tiered_backend, TOPIC), 60,
                   "partial copies deleted by the restarted broker", interval=0.2)
        verify_store(tiered_backend, broker, TOPIC)
        got = ck_digest(bs, TOPIC, ends)
        assert summaries(got) == summaries(workload.expected())
        assert_clean_output(broker)
    finally:
        broker.close()


def topic_uuid(text: str):
    """A topic id as the object keys spell it (Kafka's base64 or a UUID string)."""
    import base64
    import uuid

    try:
        return uuid.UUID(text)
    except ValueError:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def verify_store(backend, broker: EmbeddedBroker, topic: str) -> None:
    """Every stored segment with a manifest reads back whole through the storage manager,
    which verifies each chunk's CRC32C against the manifest."""
    import uuid

    from snakka.remote.storage import create_remote_storage

    from snakka.remote.types import (
        RemoteLogSegmentId,
        RemoteLogSegmentMetadata,
        TopicIdPartition,
    )

    from .tiered_support import rsm_configs

    rsm = create_remote_storage(rsm_configs(backend))
    try:
        complete = [o for o in backend.objects(topic) if o.suffix == "manifest"]
        assert complete
        for o in complete:
            part = o.partition_of(topic)
            assert part is not None
            tp = TopicIdPartition(topic_uuid(o.topic_id(topic)), topic, part)
            md = RemoteLogSegmentMetadata(
                segment_id=RemoteLogSegmentId(tp, uuid.UUID(o.segment_uuid)),
                start_offset=o.start_offset, end_offset=o.start_offset, max_timestamp_ms=0,
                broker_id=0, event_timestamp_ms=0, segment_size_in_bytes=0,
                segment_leader_epochs=((0, o.start_offset),))
            data = rsm.fetch_log_segment(md, 0, 1 << 40)
            assert len(data) > 0
            # The bytes are whole batches starting at the segment's base offset.
            assert int.from_bytes(data[:8], "big") == o.start_offset
    finally:
        rsm.close()
