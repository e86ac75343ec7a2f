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
    remote_segment_states,
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
        ends = workload.produce(bs, TOPIC)

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
