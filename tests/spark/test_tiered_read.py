"""The Spark data source reads a fully tiered topic from offset 0 (issue 12, item 5).

No change in the data source: the broker serves offsets below the local log start from remote
storage transparently, so a batch read from ``earliest`` returns every row. The topic keeps no
local copy of copied segments (``local.retention.ms=0``): every closed segment is read from
the remote store (the local-directory backend), only the active segment is local. A read
starting at a timestamp (ListOffsets by timestamp, answered from the remote time indexes)
starts at the right offset too.
"""

from __future__ import annotations

import tempfile

import pytest
from integration.helpers import ck_create_topic
from integration.tiered_support import (
    EARLIEST,
    EARLIEST_LOCAL,
    TIERED_BROKER,
    LocalBackend,
    active_segment_base,
    list_offsets,
    wait_tiered,
)
from test_batch_read import produce, read_df, rows_by_tp  # the same directory (rootdir import mode)

from snakka.testing import EmbeddedBroker

PARTITIONS = 2
N = 20_000
BASE_TS = 1_700_000_000_000
SEG = 128 * 1024


@pytest.fixture(scope="module")
def tiered_broker():
    backend = LocalBackend(tempfile.mkdtemp(prefix="snakka-remote-spark-"))
    broker = EmbeddedBroker(config={**TIERED_BROKER, **backend.configs()})
    broker.start()
    try:
        yield broker
    finally:
        broker.close()
        backend.close()


def test_batch_read_of_a_fully_tiered_topic(spark, tiered_broker):
    bs = tiered_broker.bootstrap_servers
    topic = "spark-tiered"
    ck_create_topic(bs, topic, PARTITIONS, {"remote.storage.enable": "true",
                                            "segment.bytes": str(SEG),
                                            "local.retention.ms": "0",
                                            # the records are stamped in 2023
                                            "retention.ms": "-1"})
    records = [(i % PARTITIONS, b"key-%d" % i, b"value-%d-" % i + bytes(i % 251) * 2,
                BASE_TS + i, [("h", b"%d" % i)] if i % 3 == 0 else None) for i in range(N)]
    # Batches well under the 128 KiB segments (librdkafka's default batch.size is 1 MB).
    produce(bs, topic, records, **{"compression.type": "zstd", "batch.size": 32 * 1024})
    wait_tiered(bs, tiered_broker.data_dir, topic, range(PARTITIONS), timeout=120,
                local_max=2 * SEG)
    # Fully tiered: the log starts at 0, the local part at the active segment.
    local_start = list_offsets(bs, topic, range(PARTITIONS), EARLIEST_LOCAL)
    assert list_offsets(bs, topic, range(PARTITIONS), EARLIEST) == {0: 0, 1: 0}
    assert local_start == {p: active_segment_base(tiered_broker.data_dir, topic, p)
                           for p in range(PARTITIONS)}
    assert all(off > 0 for off in local_start.values()), local_start

    table = read_df(spark, bs, subscribe=topic, includeHeaders="true").toArrow()
    assert table.num_rows == N
    got = rows_by_tp(table)
    nxt = [0] * PARTITIONS
    for part, key, value, ts, headers in records:
        row = got[(topic, part, nxt[part])]
        nxt[part] += 1
        assert (row["key"], row["value"]) == (key, value)
        assert int(row["timestamp"].timestamp() * 1000) == ts
        assert row["headers"] == [{"key": k, "value": v} for k, v in headers or []]

    # From a timestamp inside the remote part: ListOffsets by timestamp on remote segments.
    start_ts = BASE_TS + 1000
    df = read_df(spark, bs, subscribe=topic, startingTimestamp=str(start_ts))
    firsts = {r["partition"]: r["min(offset)"]
              for r in df.groupBy("partition").min("offset").collect()}
    assert firsts == {0: 500, 1: 500}
    assert df.count() == N - 1000
