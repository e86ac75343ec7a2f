"""Tiered storage acceptance (issue 12): 200 MB through tiny segments, read back from offset 0.

For each backend (a local directory; an S3 API server on loopback) through the SAME tests:

- a subprocess broker with tiered storage, a 2-partition topic of 1 MiB segments keeping about
  one segment locally (``local.retention.bytes``), the copier running every 200 ms;
- 200 MB (``SNAKKA_TIERED_MB`` to change it while iterating) of mixed records produced by
  confluent-kafka in uncompressed, lz4 and zstd phases;
- wait (polling, with a deadline) until ListOffsets -5 (latest tiered) reaches the end of the
  closed segments and the partitions' local ``.log`` bytes shrank to about one segment;
- then: ListOffsets -2 = 0, -4 = the first local offset (> 0), -5 = the last remote offset;
  DescribeLogDirs reports the local size only (as Kafka does); every closed segment has its
  manifest in the store;
- confluent-kafka, kafka-python and the reference Kafka's console consumer read everything
  from offset 0, byte-identically (digests of offset, key, value and headers per partition,
  with a check that offsets run from 0 without a gap);
- a clean restart and a SIGKILL: the remote metadata is rebuilt from ``__remote_log_metadata``
  (-5 unchanged) and offset 0 is still readable, byte-identically.

The tests of one backend share one produced topic (a module-scoped fixture): producing 200 MB
twice per test would cost minutes each. They run in file order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from snakka.testing import EmbeddedBroker

from .helpers import SNAKKA, ck_create_topic, run, segment_files
from .tiered_support import (
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    SEGMENT_BYTES,
    TIERED_BROKER,
    MiB,
    Workload,
    active_segment_base,
    assert_clean_output,
    ck_digest,
    describe_log_dirs,
    java_digest,
    kp_digest,
    list_offsets,
    local_log_bytes,
    summaries,
    tiered_backend,  # noqa: F401  (fixture)
    tiered_topic_config,
    wait_tiered,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiered"), pytest.mark.timeout(1500)]

TOTAL_MB = int(os.environ.get("SNAKKA_TIERED_MB", "200"))
PARTITIONS = 2
TOPIC = "tiered-accept"
# What stays local once the copier caught up: local.retention.bytes (one segment) plus the
# active segment plus the segment being closed, per partition.
LOCAL_MAX = 3 * SEGMENT_BYTES


@dataclass
class Tiered:
    broker: EmbeddedBroker
    backend: object
    topic: str
    expected: dict
    ends: dict[int, int]
    tiered: dict[int, int]


@pytest.fixture(scope="module")
def tiered(tiered_backend):  # noqa: F811  (the imported fixture)
    broker = EmbeddedBroker(mode="subprocess", log_level="INFO",
                            config={**TIERED_BROKER, **tiered_backend.configs()})
    broker.start()
    try:
        bs = broker.bootstrap_servers
        ck_create_topic(bs, TOPIC, PARTITIONS, tiered_topic_config())
        workload = Workload(TOTAL_MB * MiB, PARTITIONS, seed=12)
        ends = workload.produce(bs, TOPIC)
        expected = summaries(workload.expected())
        assert {p: c for p, (c, _, _) in expected.items()} == ends
        tiered = wait_tiered(bs, broker.data_dir, TOPIC, range(PARTITIONS),
                             timeout=60 + TOTAL_MB * 2, local_max=LOCAL_MAX)
        yield Tiered(broker, tiered_backend, TOPIC, expected, ends, tiered)
        assert_clean_output(broker)
    finally:
        broker.close()


def test_local_disk_shrinks_and_list_offsets(tiered):
    bs, data_dir, topic = tiered.broker.bootstrap_servers, tiered.broker.data_dir, tiered.topic
    parts = range(PARTITIONS)
    assert list_offsets(bs, topic, parts, EARLIEST) == dict.fromkeys(parts, 0)
    assert list_offsets(bs, topic, parts, LATEST) == tiered.ends
    local_start = list_offsets(bs, topic, parts, EARLIEST_LOCAL)
    remote_end = list_offsets(bs, topic, parts, LATEST_TIERED)
    for p in parts:
        first_local = min(int(f.name.split(".")[0]) for f in segment_files(data_dir, topic, p, ".log"))
        assert 0 < local_start[p] == first_local, (p, local_start, first_local)
        # -5 is inclusive: the last offset held remotely, just below the active segment.
        assert remote_end[p] == active_segment_base(data_dir, topic, p) - 1
        assert remote_end[p] >= local_start[p] - 1
        assert local_log_bytes(data_dir, topic, p) <= LOCAL_MAX
    # Kafka's DescribeLogDirs reports the local size only.
    sizes = describe_log_dirs(bs, topic)
    assert set(sizes) == set(parts)
    assert all(0 < sizes[p] <= LOCAL_MAX for p in parts), sizes
    # Every segment below the local start is in the store, with its manifest (the commit
    # point of a copy).
    for p in parts:
        segs = tiered.backend.segments(topic, p)
        assert 0 in segs, sorted(segs)[:5]
        complete = sorted(s for s, suffixes in segs.items() if "manifest" in suffixes)
        assert complete and complete[0] == 0
        assert len(complete) >= (TOTAL_MB * MiB // PARTITIONS) // SEGMENT_BYTES // 2


def test_java_and_cli_tools_see_both_tiers(tiered):
    """The reference Kafka's kafka-get-offsets.sh (the Java admin client's ListOffsets with
    earliest-local / latest-tiered, KIP-1005) agrees with the wire answers, and `snakka
    topics describe` shows the local start and the latest tiered offset per partition."""
    bs, topic = tiered.broker.bootstrap_servers, tiered.topic
    parts = range(PARTITIONS)
    local_start = list_offsets(bs, topic, parts, EARLIEST_LOCAL)
    remote_end = list_offsets(bs, topic, parts, LATEST_TIERED)
    out = run([SNAKKA, "topics", "describe", topic, "-b", bs]).stdout.decode()
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["1"])]
    assert "local start" in out and "latest tiered" in out, out
    for row in rows:
        p = int(row[0])
        # partition leader replicas "log start" "log end" records "local start" "latest tiered"
        assert row[3:8] == [str(0), str(tiered.ends[p]), str(tiered.ends[p]),
                            str(local_start[p]), str(remote_end[p])], (row, out)
    assert len(rows) == PARTITIONS, out
    from reference_kafka import run_tool, skip_reason

    if skip_reason():
        pytest.skip(skip_reason())
    for spec, want in (("earliest-local", local_start), ("latest-tiered", remote_end),
                       ("earliest", dict.fromkeys(parts, 0))):
        r = run_tool("kafka-get-offsets.sh", "--bootstrap-server", bs, "--topic", topic,
                     "--time", spec)
        assert r.returncode == 0, r.stderr[-2000:]
        got = {int(line.split(":")[1]): int(line.split(":")[2])
               for line in r.stdout.split() if line.startswith(topic + ":")}
        assert got == want, (spec, r.stdout)


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "console-consumer"])
def test_read_everything_from_offset_zero(tiered, client):
    bs = tiered.broker.bootstrap_servers
    if client == "confluent-kafka":
        got = ck_digest(bs, tiered.topic, tiered.ends)
    elif client == "kafka-python":
        got = kp_digest(bs, tiered.topic, tiered.ends)
    else:
        from reference_kafka import skip_reason

        reason = skip_reason()
        if reason:
            pytest.skip(reason)
        got = java_digest(bs, tiered.topic, tiered.ends)
    assert summaries(got) == tiered.expected


@pytest.mark.parametrize("how", ["clean", "sigkill"])
def test_restart_rebuilds_remote_metadata(tiered, how):
    broker = tiered.broker
    parts = range(PARTITIONS)
    if how == "clean":
        broker.stop()
    else:
        broker.kill()
    broker.start()
    bs = broker.bootstrap_servers
    # The remote part is known again only through __remote_log_metadata: the local segments
    # below the local start are gone. The start-up line says what the replay found.
    replays = [line for line in broker.output
               if "of __remote_log_metadata replayed" in line]
    assert f"replayed, {PARTITIONS} user partition(s) with remote metadata" in replays[-1], \
        replays[-1]
    assert list_offsets(bs, tiered.topic, parts, EARLIEST) == dict.fromkeys(parts, 0)
    assert list_offsets(bs, tiered.topic, parts, LATEST_TIERED) == tiered.tiered
    got = ck_digest(bs, tiered.topic, tiered.ends)
    assert summaries(got) == tiered.expected
