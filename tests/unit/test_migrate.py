"""``snakka migrate`` (issue 17): the data-dir check, Kafka's server.properties and the MM2 file.

Data directories are built with snakka's storage on a temporary directory (no broker); the verbs
run in-process through click. Whether Kafka 4.0 and MirrorMaker 2 accept what they write is
proved in tests/reference (test_partition_files.py, test_mirror_maker.py).
"""

from __future__ import annotations

import fcntl
import os
import struct
import uuid

from click.testing import CliRunner
from crc32c import crc32c

from snakka.cli import main
from snakka.migrate import (
    SNAKKA_ONLY_CONFIGS,
    check_data_dir,
    kafka_server_properties,
    mirror_maker_properties,
)
from snakka.records import Record, build_batch
from snakka.storage import LogConfig, LogManager
from snakka.storage.manager import LOCK_FILE

CLUSTER = "dAO7rjN3QIuzbwtkB7gdQA"


def records(*pairs: tuple[bytes | None, bytes | None]) -> bytearray:
    return bytearray(build_batch([Record(timestamp=1, key=k, value=v) for k, v in pairs]))


def data_dir(tmp_path, *, json_offsets: bool = False, json_metadata: bool = False,
             close: bool = True) -> tuple[str, LogManager]:
    """A stopped snakka-like data dir: a topic, __consumer_offsets, a metadata log."""
    d = str(tmp_path / "data")
    lm = LogManager([d], LogConfig())
    lm.ensure_meta_properties(cluster_id=CLUSTER, node_id=3)
    t = lm.get_or_create_log("orders", 0, topic_id=uuid.uuid4())
    buf = records((b"k", b"v"))
    t.append(buf, t.validate(buf))
    for p in range(3):
        lm.get_or_create_log("__consumer_offsets", p, topic_id=uuid.uuid4())
    co = lm.get_log("__consumer_offsets", 0)
    key = b'["offset","g","orders",0]' if json_offsets else b"\x00\x01\x00\x01g"
    buf = records((key, b"x"))
    co.append(buf, co.validate(buf))
    # The metadata log: not LogManager's, written as a plain segment here.
    md = os.path.join(d, "__cluster_metadata-0")
    os.makedirs(md)
    value = b'{"type":"topic","name":"orders"}' if json_metadata else b"\x01\x02\x00\x00"
    with open(os.path.join(md, "00000000000000000000.log"), "wb") as f:
        f.write(records((None, value)))
    if close:
        lm.close()
    return d, lm


def test_check_passes_a_clean_dir_in_kafkas_formats(tmp_path):
    d, _ = data_dir(tmp_path)
    report = check_data_dir(d)
    assert report.errors == [] and report.warnings == []
    assert (report.node_id, report.cluster_id) == ("3", CLUSTER)
    assert report.partitions == 4 and report.internal_partitions == {"__consumer_offsets": 3}
    r = CliRunner().invoke(main, ["migrate", "check", "--data-dir", d])
    assert r.exit_code == 0, r.output
    assert "Ready for Kafka 4.0." in r.output and "kafka-config" in r.output


def test_check_names_json_records_and_a_running_broker(tmp_path):
    d, lm = data_dir(tmp_path, json_offsets=True, json_metadata=True, close=False)
    try:
        report = check_data_dir(d)
        assert any("running" in e for e in report.errors)
        assert any(e.startswith("__consumer_offsets-0: 1 records are snakka's JSON")
                   for e in report.errors)
        assert any(e.startswith("__cluster_metadata-0: 1 metadata records are snakka's JSON")
                   for e in report.errors)
        assert any(".kafka_cleanshutdown" in w for w in report.warnings)  # not closed
        r = CliRunner().invoke(main, ["migrate", "check", "--data-dir", d])
        assert r.exit_code == 1 and "Not ready for Kafka." in r.output
    finally:
        lm.close()
    assert not any("running" in e for e in check_data_dir(d).errors)


def test_check_flags_legacy_snapshots_and_stray_dirs(tmp_path):
    d, _ = data_dir(tmp_path)
    body = struct.pack(">i", 0)
    with open(os.path.join(d, "orders-0", "00000000000000000001.snapshot"), "wb") as f:
        f.write(struct.pack(">hI", 1001, crc32c(body)) + body)
    os.makedirs(os.path.join(d, "backup"))
    os.remove(os.path.join(d, "orders-0", "partition.metadata"))
    report = check_data_dir(d)
    assert any("snakka's former producer snapshot" in w for w in report.warnings)
    assert any(e.startswith("backup: not a <topic>-<partition>") for e in report.errors)
    assert any(e.startswith("orders-0: no readable partition.metadata") for e in report.errors)


def test_lock_detection_is_the_brokers_flock(tmp_path):
    d, _ = data_dir(tmp_path)
    fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert any("running" in e for e in check_data_dir(d).errors)
    finally:
        os.close(fd)


def test_kafka_config_for_the_dir(tmp_path):
    d, _ = data_dir(tmp_path)
    cfg = kafka_server_properties(d, {
        "listeners": "SASL_SSL://broker1:9094", "num.partitions": "6",
        "offsets.topic.num.partitions": "50", "log.retention.hours": "72",
        "log.max.open.files": "4096", "snakka.ssl.handshake.timeout.ms": "1000",
        "cluster.id": CLUSTER, "metrics.port": "9404"})
    p = cfg.properties
    assert p["process.roles"] == "broker,controller"
    assert p["node.id"] == "3"
    assert p["listeners"] == "SASL_SSL://broker1:9094,CONTROLLER://broker1:9093"
    assert p["advertised.listeners"] == "SASL_SSL://broker1:9094,CONTROLLER://broker1:9093"
    assert p["inter.broker.listener.name"] == "SASL_SSL"
    assert p["controller.listener.names"] == "CONTROLLER"
    assert p["controller.quorum.voters"] == "3@broker1:9093"  # no voter set in the log
    assert "CONTROLLER:PLAINTEXT" in p["listener.security.protocol.map"]
    assert p["log.dirs"] == d
    # The directory's internal topic partition count wins over the configured one.
    assert p["offsets.topic.num.partitions"] == "3"
    assert any("offsets.topic.num.partitions" in n for n in cfg.notes)
    assert p["num.partitions"] == "6" and p["log.retention.hours"] == "72"
    assert p["offsets.topic.replication.factor"] == "1"
    assert "cluster.id" not in p and "metrics.port" not in p
    assert cfg.dropped == {"log.max.open.files": "4096", "snakka.ssl.handshake.timeout.ms": "1000",
                           "metrics.port": "9404"}
    assert "# log.max.open.files=4096" in cfg.render()

    dyn = kafka_server_properties(d, {}, quorum="dynamic", log_dirs="/var/lib/kafka",
                                  controller_listener="CONTROLLER://ctl:19093")
    assert dyn.properties["controller.quorum.bootstrap.servers"] == "ctl:19093"
    assert "controller.quorum.voters" not in dyn.properties
    assert dyn.properties["log.dirs"] == "/var/lib/kafka"
    assert dyn.properties["listeners"] == "PLAINTEXT://localhost:9092,CONTROLLER://ctl:19093"


def test_kafka_config_cli_writes_the_file(tmp_path):
    d, _ = data_dir(tmp_path)
    conf = tmp_path / "snakka.properties"
    conf.write_text("listeners=PLAINTEXT://0.0.0.0:9092\nlog.flush.strict=true\n")
    out = tmp_path / "server.properties"
    r = CliRunner().invoke(main, ["migrate", "kafka-config", "--data-dir", d, "-c", str(conf),
                                  "-o", "num.partitions=4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    lines = dict(ln.split("=", 1) for ln in out.read_text().splitlines()
                 if ln and not ln.startswith("#"))
    assert lines["listeners"] == "PLAINTEXT://0.0.0.0:9092,CONTROLLER://localhost:9093"
    assert lines["advertised.listeners"] == ("PLAINTEXT://localhost:9092,"
                                             "CONTROLLER://localhost:9093")
    assert lines["num.partitions"] == "4" and "log.flush.strict" not in lines
    r = CliRunner().invoke(main, ["migrate", "kafka-config", "--data-dir", d,
                                  "--listeners", "CONTROLLER://x:1"])
    assert r.exit_code != 0 and "controller" in r.output


def test_snakka_only_configs_are_snakkas():
    from snakka.config import BROKER_CONFIGS

    assert SNAKKA_ONLY_CONFIGS <= set(BROKER_CONFIGS)


def test_mirror_config():
    p = mirror_maker_properties("snakka:9092", "k1:9092,k2:9092", replication_factor=3)
    assert p["clusters"] == "snakka, kafka"
    assert p["snakka->kafka.enabled"] == "true" and p["kafka->snakka.enabled"] == "false"
    assert p["kafka->snakka.emit.heartbeats.enabled"] == "false"
    assert p["replication.policy.class"].endswith("IdentityReplicationPolicy")
    assert p["sync.group.offsets.enabled"] == "true"
    assert p["emit.checkpoints.interval.seconds"] == "5"
    # The held-back offset syncs go out at each offset commit: every interval, not every 60 s.
    assert p["kafka.offset.flush.interval.ms"] == "5000"
    assert p["offset-syncs.topic.location"] == "target"
    assert p["replication.factor"] == p["offset.storage.replication.factor"] == "3"
    r = CliRunner().invoke(main, ["migrate", "mirror-config", "--source", "localhost:9092",
                                  "--target", "k1:9092,k2:9092", "--topics", "orders.*"])
    assert r.exit_code == 0, r.output
    assert "snakka->kafka.topics=orders.*" in r.output
    assert "kafka.bootstrap.servers=k1:9092,k2:9092" in r.output
    r = CliRunner().invoke(main, ["migrate", "mirror-config", "--source", "localhost",
                                  "--target", "k:9092"])
    assert r.exit_code != 0
