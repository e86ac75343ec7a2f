"""SIGKILL during an upload (issue 12): restart resumes copying, nothing points at a partial
object, consumers from offset 0 see no gap.

A subprocess broker copies 4 MiB segments of one partition one after another. The test
polls the store and SIGKILLs the broker the moment a copy has objects but no manifest yet (the
manifest is the commit point, written last), and checks the copy is still partial with the
broker dead: the kill landed mid-upload (two such kills, each followed by a restart; up to
eight tries, as the last objects may go up between the look and the kill), then
one more at a random point of the copier's work (mostly between COPY_SEGMENT_STARTED and
COPY_SEGMENT_FINISHED, or during the metadata writes).

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
import time

import pytest

from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, wait_until
from .tiered_support import (
    LATEST_TIERED,
    TIERED_BROKER,
    MiB,
    SlowProxy,
    Workload,
    assert_clean_output,
    ck_digest,
    list_offsets,
    remote_segment_states,
    summaries,
    tiered_backend,  # noqa: F401  (fixture)
    tiered_topic_config,
    wait_tiered,
)

# The timeout is the hang guard; the waits inside bound stalls (wait_tiered), so a slow but
# progressing copier on a loaded machine may take longer than 600 s in all.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiered"), pytest.mark.timeout(1500)]

SEG = 4 * MiB
TOPIC = "tiered-crash"
MAX_KILLS = 8


def set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    from .helpers import ck_admin

    admin = ck_admin(bootstrap)  # must outlive its futures
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)


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
    configs = tiered_backend.configs()
    proxy = None
    if tiered_backend.name == "s3":
        # S3 shows an object only once it is whole: the copy's last small objects and its
        # manifest would go up within milliseconds of the log's. Uploads through a proxy that
        # delays each chunk leave a window to see.
        proxy = SlowProxy(("127.0.0.1", tiered_backend.server.port), delay=0.02)
        configs["rsm.config.storage.s3.endpoint.url"] = f"http://127.0.0.1:{proxy.port}"
    broker = EmbeddedBroker(mode="subprocess", log_level="INFO",
                            config={**TIERED_BROKER, **configs})
    broker.start()
    try:
        bs = broker.bootstrap_servers
        # Copying starts only once everything is produced (KIP-950's remote.log.copy.disable,
        # then turned off): a copier faster than the producer would leave nothing to kill in.
        ck_create_topic(bs, TOPIC, 1, tiered_topic_config(
            SEG, SEG, **{"remote.log.copy.disable": "true"}))
        workload = Workload(96 * MiB, 1, seed=7, phase_bytes=4 * MiB)
        ends = workload.produce(bs, TOPIC)
        assert list_offsets(bs, TOPIC, [0], LATEST_TIERED)[0] == -1
        set_topic_config(bs, TOPIC, "remote.log.copy.disable", "false")

        # Kill the broker the moment a copy has objects in the store but no manifest yet
        # (polling the store), i.e. mid-upload; then once more at a random point of the
        # copier's work (mostly between COPY_SEGMENT_STARTED and FINISHED).
        seen: set[str] = set()
        mid_upload = 0
        for _ in range(MAX_KILLS):
            try:
                new = wait_until(lambda seen=seen: partial_copies(tiered_backend, TOPIC) - seen,
                                 30, "an upload under way", interval=0.001)
            except AssertionError:
                break  # everything is copied: no upload left to interrupt
            broker.kill()
            # Still partial with the broker dead: the kill landed mid-upload (else the last
            # objects and the manifest went up between the look and the kill: try again).
            if new & partial_copies(tiered_backend, TOPIC):
                mid_upload += 1
            seen |= new
            broker.start()
            if mid_upload == 2:
                break
        assert mid_upload, "no kill landed mid-upload"
        n = _copied_lines(broker)
        try:
            wait_until(lambda: _copied_lines(broker) > n, 10, "a segment copied",
                       interval=0.002)
        except AssertionError:
            pass  # nothing left to copy: the last kill lands on an idle copier
        time.sleep(rnd.uniform(0, 0.05))  # a random point of the next copy, on purpose
        broker.kill()
        broker.start()
        bs = broker.bootstrap_servers

        wait_tiered(bs, broker.data_dir, TOPIC, [0], timeout=300, local_max=3 * SEG)
        wait_until(lambda: not partial_copies(tiered_backend, TOPIC), 60,
                   "partial copies deleted by the restarted broker", interval=0.2)
        # The kills left copies in COPY_SEGMENT_STARTED; the restarted broker deleted them.
        def interrupted_cleaned() -> list | None:
            states = remote_segment_states(bs, TOPIC)
            interrupted = [h.names for h in states.values()
                           if "COPY_SEGMENT_FINISHED" not in h.names]
            if all(n[-1] == "DELETE_SEGMENT_FINISHED" for n in interrupted):
                return interrupted
            return None

        interrupted = wait_until(interrupted_cleaned, 60, "interrupted copies deleted",
                                 interval=0.5)
        assert interrupted, "no kill interrupted a copy (none left COPY_SEGMENT_STARTED)"
        verify_store(tiered_backend, bs, TOPIC)
        got = ck_digest(bs, TOPIC, ends)
        assert summaries(got) == summaries(workload.expected())
        assert_clean_output(broker)
    finally:
        broker.close()
        if proxy is not None:
            proxy.close()


def verify_store(backend, bootstrap: str, topic: str) -> None:
    """No COPY_SEGMENT_FINISHED metadata points at an incomplete object: every segment whose
    last state in ``__remote_log_metadata`` is COPY_SEGMENT_FINISHED has its manifest in the
    store and reads back whole through the storage manager, which verifies each chunk's
    CRC32C against the manifest; the bytes are batches from the segment's start offset to
    its end offset."""
    from snakka.remote.storage import create_remote_storage
    from snakka.remote.types import RemoteLogSegmentState

    from .tiered_support import batch_ranges, rsm_configs

    states = remote_segment_states(bootstrap, topic)
    manifests = {o.segment_uuid for o in backend.objects(topic) if o.suffix == "manifest"}
    finished = {u: h for u, h in states.items()
                if h.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
    assert finished
    assert set(finished) <= manifests, sorted(set(finished) - manifests)
    rsm = create_remote_storage(rsm_configs(backend))
    try:
        for h in finished.values():
            md = h.metadata
            data = rsm.fetch_log_segment(md, 0, md.segment_size_in_bytes)
            assert len(data) == md.segment_size_in_bytes
            batches = batch_ranges(data)
            assert batches[0][0] == md.start_offset
            assert batches[-1][1] == md.end_offset, (batches[-1], md)
    finally:
        rsm.close()


def test_sigkill_during_remote_deletion(tiered_backend):  # noqa: F811  (the imported fixture)
    """SIGKILL while remote segments are being deleted (the manifest goes first, then the
    other objects): after the restart the interrupted deletion is finished (objects gone,
    DELETE_SEGMENT_FINISHED recorded), the log start offset stays where DeleteRecords put
    it, and the rest reads from there. S3 only: through the delaying proxy a deletion takes
    visible time; a local directory deletes six files in well under a millisecond."""
    from confluent_kafka import TopicPartition

    from .helpers import ck_admin
    from .tiered_support import EARLIEST, list_offsets, produce_numbered, read_from_earliest

    if tiered_backend.name != "s3":
        pytest.skip("a local deletion leaves no window to kill in (see the docstring)")
    proxy = SlowProxy(("127.0.0.1", tiered_backend.server.port), delay=0.02)
    configs = {**tiered_backend.configs(),
               "rsm.config.storage.s3.endpoint.url": f"http://127.0.0.1:{proxy.port}"}
    broker = EmbeddedBroker(mode="subprocess", log_level="INFO",
                            config={**TIERED_BROKER, **configs})
    broker.start()
    topic = TOPIC + "-delete"
    seg = 256 * 1024
    try:
        bs = broker.bootstrap_servers
        ck_create_topic(bs, topic, 1, tiered_topic_config(seg, seg))
        produce_numbered(bs, topic, 0, 4000)
        wait_tiered(bs, broker.data_dir, topic, [0], timeout=300, local_max=3 * seg)
        assert not partial_copies(tiered_backend, topic)
        starts = sorted(o.start_offset for o in tiered_backend.objects(topic)
                        if o.suffix == "manifest")
        target = starts[-3] + 7
        admin = ck_admin(bs)
        tp = TopicPartition(topic, 0, target)
        admin.delete_records([tp])[tp].result(30)
        # Nothing is being copied now: a segment without its manifest is being deleted.
        wait_until(lambda: partial_copies(tiered_backend, topic), 30,
                   "a deletion under way", interval=0.001)
        broker.kill()
        assert partial_copies(tiered_backend, topic), "the deletion finished first"
        broker.start()
        bs = broker.bootstrap_servers
        assert list_offsets(bs, topic, [0], EARLIEST)[0] == target
        wait_until(lambda: not partial_copies(tiered_backend, topic)
                   and min(o.start_offset for o in tiered_backend.objects(topic)) == starts[-3],
                   60, "the interrupted deletion finished", interval=0.2)
        states = remote_segment_states(bs, topic)
        below = [h.names for h in states.values() if h.metadata.end_offset < target]
        assert below and all(n[-1] == "DELETE_SEGMENT_FINISHED" for n in below), below
        assert read_from_earliest(bs, topic, 4000) == list(range(target, 4000))
        assert any("a deletion that did not finish" in line for line in broker.output)
        assert_clean_output(broker)
    finally:
        broker.close()
        proxy.close()
