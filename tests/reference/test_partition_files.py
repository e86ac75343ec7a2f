"""snakka's data directory in Kafka 4.0's formats (issue 17): the files a stopped broker leaves.

The same workload (idempotent keyed records with headers over several segments, an aborted and
a committed transaction, a consumer group's commit) runs against snakka and against a reference
Kafka 4.0 broker started for this module and stopped before its directory is read. Then:

* the layout is Kafka's: the same top-level files and the same files in a partition directory;
* snakka's readers take Kafka's files: offset checkpoints, ``leader-epoch-checkpoint``,
  ``partition.metadata`` and producer ``.snapshot`` files (rewritten byte for byte), and
  snakka's LogManager opens Kafka's partitions, trusting their indexes (none rebuilt), and
  reads every record back;
* Kafka's tools take snakka's files: ``kafka-dump-log.sh`` decodes each ``.snapshot`` to
  snakka's producer state, passes every ``.index``/``.timeindex`` in ``--index-sanity-check``
  and ``--verify-index-only`` (no mismatch), reads the ``.txnindex``'s aborted transaction,
  and prints every record of the ``.log`` files with its key and headers.

The cluster metadata log (``__cluster_metadata-0``, ``bootstrap.checkpoint``) is the metadata
log's business and is left out here. Skipped where the reference distribution or ``java`` is
absent; the Kafka broker of this module is its own (the shared one never stops).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from reference_kafka import KAFKA_REF_SH, ReferenceKafka, run_tool

from snakka.storage import LogManager, read_offset_checkpoint, read_partition_metadata
from snakka.storage.checkpoint import read_leader_epoch_checkpoint
from snakka.storage.config import LogConfig
from snakka.testing.embedded import EmbeddedBroker
from snakka.txn.producer_state import decode_snapshot, encode_snapshot

from .conftest import SNAKKA_CONFIG

pytestmark = pytest.mark.xdist_group("reference-kafka")

TOPIC = "files"
RECORDS = 3000
# Small segments and a dense offset index, so each log has several segments with index entries.
TOPIC_CONFIGS = {"segment.bytes": "65536", "index.interval.bytes": "512"}
# Files the KRaft metadata log owns (another part of issue 17), and the process lock Kafka
# deletes at shutdown while snakka keeps it (see docs/migrating.md).
NOT_COMPARED = {"__cluster_metadata-0", "bootstrap.checkpoint", ".lock"}


def workload(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(TOPIC, 2, 1, config=TOPIC_CONFIGS)]).values():
        fut.result(30)
    # Batches below segment.bytes: Kafka refuses a larger one (RecordBatchTooLargeException).
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "batch.size": 16384})
    failed: list[object] = []
    for i in range(RECORDS):
        p.produce(TOPIC, key=b"key-%d" % (i % 13), value=b"value %d " % i + b"x" * 40,
                  headers=[("trace", b"t%d" % i)], partition=i % 2,
                  on_delivery=lambda err, _m: err is None or failed.append(err))
    assert p.flush(30) == 0
    assert failed == []
    t = Producer({"bootstrap.servers": bootstrap, "transactional.id": "files-tx"})
    t.init_transactions(30)
    t.begin_transaction()
    t.produce(TOPIC, key=b"gone", value=b"aborted", partition=0)
    t.flush(30)
    t.abort_transaction(30)
    t.begin_transaction()
    t.produce(TOPIC, key=b"kept", value=b"committed", partition=0)
    t.flush(30)
    t.commit_transaction(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "files-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])  # no group join: a commit is all we need
        seen = 0
        while seen < 10:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                seen += 1
        # A fresh group coordinator may still be loading or moving: retry what Kafka's Java
        # client retries (librdkafka flags NOT_COORDINATOR as not retriable on a commit).
        coordinator_moving = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                              KafkaError.COORDINATOR_NOT_AVAILABLE}
        deadline = time.monotonic() + 120
        while True:
            try:
                c.commit(asynchronous=False)
                break
            except KafkaException as exc:
                err = exc.args[0]
                if not (err.retriable() or err.code() in coordinator_moving) \
                        or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


@pytest.fixture(scope="module")
def kafka_dir(kafka_distribution, tmp_path_factory) -> Iterator[Path]:
    """The log dir of a reference Kafka 4.0 that ran the workload and was stopped."""
    k = ReferenceKafka().start()
    try:
        workload(k.bootstrap_servers)
        subprocess.run(["bash", str(KAFKA_REF_SH), "stop"], env=k._env(), check=True,
                       capture_output=True, timeout=120)
        out = tmp_path_factory.mktemp("kafka") / "logs"
        shutil.copytree(Path(k.dir) / "kraft-logs", out)
    finally:
        k.stop()
    yield out


@pytest.fixture(scope="module")
def snakka_dir(kafka_distribution, tmp_path_factory) -> Path:
    """The data dir of a snakka broker that ran the workload and was stopped."""
    d = tmp_path_factory.mktemp("snakka") / "data"
    b = EmbeddedBroker(str(d), config=SNAKKA_CONFIG, host="127.0.0.1").start()
    try:
        workload(b.bootstrap_servers)
    finally:
        b.stop()
    return d


def layout(d: Path) -> tuple[set[str], set[str]]:
    """(top-level names other than partition dirs, file kinds in TOPIC-0: offsets as N)."""
    top = {n for n in os.listdir(d) if not (d / n).is_dir()} - NOT_COMPARED
    kinds = {re.sub(r"^\d{20}", "N", n) for n in os.listdir(d / f"{TOPIC}-0")}
    return top, kinds


def test_layout_is_kafkas(kafka_dir, snakka_dir):
    assert layout(snakka_dir) == layout(kafka_dir)
    assert layout(kafka_dir)[0] == {
        ".kafka_cleanshutdown", "meta.properties", "cleaner-offset-checkpoint",
        "log-start-offset-checkpoint", "recovery-point-offset-checkpoint",
        "replication-offset-checkpoint"}
    for d in (kafka_dir, snakka_dir):
        parts = {n for n in os.listdir(d) if (d / n).is_dir()} - NOT_COMPARED
        assert {f"{TOPIC}-0", f"{TOPIC}-1", "__consumer_offsets-0",
                "__transaction_state-0"} <= parts
        # Each partition directory has what Kafka keeps for it.
        for name in parts:
            files = set(os.listdir(d / name))
            assert {"partition.metadata", "leader-epoch-checkpoint",
                    "00000000000000000000.log"} <= files, (d, name, files)
    # Kafka's top-level files, byte for byte where they hold no ids or times.
    for name in (".kafka_cleanshutdown", "cleaner-offset-checkpoint",
                 "log-start-offset-checkpoint"):
        if name == ".kafka_cleanshutdown":  # the broker epoch differs: same JSON shape
            assert re.fullmatch(rb'\{"version":0,"brokerEpoch":-?\d+\}',
                                (snakka_dir / name).read_bytes())
        else:
            assert (snakka_dir / name).read_bytes() == (kafka_dir / name).read_bytes(), name
    for p in range(2):
        for name in ("leader-epoch-checkpoint",):
            assert ((snakka_dir / f"{TOPIC}-{p}" / name).read_bytes()
                    == (kafka_dir / f"{TOPIC}-{p}" / name).read_bytes())
        # partition.metadata differs in the topic id only.
        shape = [re.sub(rb"topic_id: \S+", b"topic_id: X", (d / f"{TOPIC}-{p}" /
                                                            "partition.metadata").read_bytes())
                 for d in (kafka_dir, snakka_dir)]
        assert shape[0] == shape[1] == b"version: 0\ntopic_id: X"


def test_snakka_reads_kafkas_files(kafka_dir):
    ends = {}
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        ends[name] = read_offset_checkpoint(str(kafka_dir / name))
        assert ends[name][(TOPIC, 0)] + ends[name][(TOPIC, 1)] == RECORDS + 4  # 2 markers
    assert read_offset_checkpoint(str(kafka_dir / "cleaner-offset-checkpoint")) == {}
    snapshots = 0
    for part in (kafka_dir / f"{TOPIC}-0", kafka_dir / f"{TOPIC}-1"):
        assert read_leader_epoch_checkpoint(str(part)) == [(0, 0)]
        assert read_partition_metadata(str(part))
        for snap in part.glob("*.snapshot"):
            data = snap.read_bytes()
            assert encode_snapshot(decode_snapshot(data)) == data
            snapshots += 1
    assert snapshots >= 2

    # snakka's LogManager opens Kafka's partitions (a clean shutdown: indexes trusted).
    data = kafka_dir.parent / "opened-by-snakka"
    shutil.copytree(kafka_dir, data)
    shutil.rmtree(data / "__cluster_metadata-0")
    lm = LogManager([str(data)], LogConfig())
    try:
        logs = {(p.topic, p.partition): p for p in lm.load_all()}
        for p in range(2):
            plog = logs[(TOPIC, p)]
            assert plog.load_result.indexes_rebuilt == 0
            assert plog.load_result.segments_recovered == 0
            assert plog.log_end_offset == ends["recovery-point-offset-checkpoint"][(TOPIC, p)]
            assert len(plog.segments) > 1
            assert plog.producer_state.producers  # loaded from Kafka's snapshot
        assert logs[(TOPIC, 0)].collect_aborted_transactions(0, 10**9)
    finally:
        lm.close()


def dump(*args: str) -> str:
    r = run_tool("kafka-dump-log.sh", *args, timeout=180)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Exception" not in out, out[-3000:]
    return r.stdout


def test_kafka_tools_read_snakkas_files(snakka_dir):
    parts = [snakka_dir / f"{TOPIC}-{p}" for p in range(2)]
    snaps = sorted(str(f) for p in parts for f in p.glob("*.snapshot"))
    indexes = sorted(str(f) for p in parts for f in p.glob("*.index"))
    timeindexes = sorted(str(f) for p in parts for f in p.glob("*.timeindex"))
    logs = sorted(str(f) for p in parts for f in p.glob("*.log"))
    assert len(logs) >= 4  # several segments per partition

    # Producer snapshots: Kafka decodes each to what snakka's reader sees.
    out = dump("--files", ",".join(snaps))
    for chunk in out.split("Dumping ")[1:]:
        path, _, body = chunk.partition("\n")
        expected = decode_snapshot(Path(path.strip()).read_bytes())
        lines = [ln for ln in body.splitlines() if ln.startswith("producerId:")]
        assert len(lines) == sum(max(1, len(e.batches)) for e in expected), chunk
        for e in expected:
            got = [ln for ln in lines if ln.startswith(f"producerId: {e.producer_id} ")]
            assert got and f"lastSequence: {e.last_seq} lastOffset: {e.last_offset} " in got[-1]
            assert f"producerEpoch: {e.producer_epoch} " in got[-1]

    # Offset and time indexes: Kafka's sanity check, and every entry against the log.
    out = dump("--index-sanity-check", "--files", ",".join(indexes + timeindexes))
    for f in indexes + timeindexes:
        assert (f"{f} passed sanity check." in out or f"{f} is empty." in out), out[-2000:]
    out = dump("--verify-index-only", "--files", ",".join(indexes + timeindexes))
    assert "Mismatches" not in out and "failed" not in out.lower(), out[-2000:]
    assert any(os.path.getsize(f) for f in indexes)  # entries were verified, not just none

    # The aborted transaction's index entry.
    txn = sorted(str(f) for f in parts[0].glob("*.txnindex"))
    out = dump("--files", ",".join(txn))
    assert re.search(r"producerId: \d+ firstOffset: \d+ lastOffset: \d+ lastStableOffset", out)

    # Every record, with its key and headers.
    out = dump("--deep-iteration", "--print-data-log", "--files", ",".join(logs))
    records = re.findall(r"\| offset: \d+ .*?headerKeys: \[(.*?)\] key: (\S+) payload: (.*)", out)
    data = [(k, h, v) for h, k, v in records if k.startswith("key-")]
    assert len(data) == RECORDS
    assert all(h == "trace" for _k, h, _v in data)
    assert ("key-5", "trace", "value 5 " + "x" * 40) in data
    assert "isvalid: true" in out and "isvalid: false" not in out
    assert re.search(r"endTxnMarker: ABORT", out) and re.search(r"endTxnMarker: COMMIT", out)
