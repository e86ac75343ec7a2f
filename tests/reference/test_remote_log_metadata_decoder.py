"""Issue 17: ``__remote_log_metadata`` holds Kafka's records (KIP-405's
RemoteLogSegmentMetadata{,Update}Record and RemotePartitionDeleteMetadataRecord, framed as
Kafka's RemoteLogMetadataSerde frames them), so the reference ``kafka-dump-log.sh
--remote-log-metadata-decoder`` reads snakka's segments: every segment snakka copied appears as
COPY_SEGMENT_STARTED then COPY_SEGMENT_FINISHED for the right topic, with its offsets."""

from __future__ import annotations

import os
import re
import shutil
import tempfile

import pytest
from integration.helpers import ck_create_topic
from integration.tiered_support import (
    TIERED_BROKER,
    LocalBackend,
    produce_numbered,
    tiered_topic_config,
    wait_tiered,
)
from reference_kafka import run_tool

from snakka.testing import EmbeddedBroker

pytestmark = pytest.mark.xdist_group("reference-kafka")

SEG = 256 * 1024


def test_dump_log_decodes_snakkas_remote_log_metadata(kafka_distribution):
    root = tempfile.mkdtemp(prefix="snakka-rlmd-")
    backend = LocalBackend(os.path.join(root, "store"))
    os.makedirs(backend.root)
    data = os.path.join(root, "data")
    try:
        with EmbeddedBroker(data, config={**TIERED_BROKER, **backend.configs()}) as b:
            bs = b.bootstrap_servers
            ck_create_topic(bs, "tiered", 1, tiered_topic_config(SEG, SEG))
            produce_numbered(bs, "tiered", 0, 1200)  # ~1.2 MB: four closed segments
            tiered = wait_tiered(bs, data, "tiered", [0], timeout=60, local_max=2 * SEG)
        copied = sum(1 for _ in backend.segments("tiered", 0))
        assert copied >= 3 and tiered[0] > 0
        files = [os.path.join(d, f) for d in
                 sorted(os.path.join(data, x) for x in os.listdir(data)
                        if x.startswith("__remote_log_metadata-"))
                 for f in sorted(os.listdir(d)) if f.endswith(".log")
                 and os.path.getsize(os.path.join(d, f))]
        assert files
        dump = run_tool("kafka-dump-log.sh", "--remote-log-metadata-decoder", "--print-data-log",
                        "--files", *files)
        out = dump.stdout + dump.stderr
        assert dump.returncode == 0 and "Exception" not in out and "Error" not in out, out[-3000:]
        payloads = [ln for ln in dump.stdout.splitlines() if "payload:" in ln]
        started = [ln for ln in payloads if "COPY_SEGMENT_STARTED" in ln]
        finished = [ln for ln in payloads if "COPY_SEGMENT_FINISHED" in ln]
        assert len(started) == copied and len(finished) == copied, dump.stdout[-3000:]
        assert all("tiered-0" in ln for ln in started), started[:2]
        # The copied segments' start offsets, as Kafka's decoder prints them, are the store's.
        starts = sorted(int(m) for ln in started
                        for m in re.findall(r"startOffset=(\d+)", ln))
        assert starts == sorted(backend.segments("tiered", 0))
    finally:
        backend.close()
        shutil.rmtree(root, ignore_errors=True)
