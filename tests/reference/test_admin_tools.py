"""The reference Kafka 4.0 admin tools against snakka (issue 16 item 5): leader election,
partition reassignment, the metadata quorum, features and log dirs, answered as a single
combined Kafka node answers them. Skipped, with the reason, where the reference distribution or
java is absent (tests/reference/conftest.py)."""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from .test_java_tools import tool

RUN = uuid.uuid4().hex[:6]


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"admtool-{RUN}-{uuid.uuid4().hex[:4]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def test_leader_election_tool(snakka_beside_reference):
    bs = snakka_beside_reference.bootstrap_servers
    t = _topic(bs)
    out = tool("kafka-leader-election.sh", "--bootstrap-server", bs, "--election-type",
               "preferred", "--topic", t, "--partition", "0")
    assert f"Valid replica already elected for partitions {t}-0" in out, out
    out = tool("kafka-leader-election.sh", "--bootstrap-server", bs, "--election-type",
               "preferred", "--all-topic-partitions")
    assert "Valid replica already elected" in out or out.strip() == "", out


def test_reassign_partitions_tool(snakka_beside_reference):
    bs = snakka_beside_reference.bootstrap_servers
    node = snakka_beside_reference.broker.services.node_id
    t = _topic(bs)
    plan = {"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": [node], "log_dirs": ["any"]} for p in (0, 1)]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(plan, f)
    try:
        out = tool("kafka-reassign-partitions.sh", "--bootstrap-server", bs,
                   "--reassignment-json-file", f.name, "--execute")
        assert "Successfully started partition reassignments" in out, out
        # --verify reports completion, then clears the broker-level replication throttles
        # (leader.replication.throttled.rate & co.: accepted, no effect on one broker).
        out = tool("kafka-reassign-partitions.sh", "--bootstrap-server", bs,
                   "--reassignment-json-file", f.name, "--verify")
        assert f"Reassignment of partition {t}-0 is completed" in out, out
        assert "Clearing broker-level throttles" in out, out
    finally:
        os.unlink(f.name)
    out = tool("kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--list")
    assert "No partition reassignments found." in out, out


def test_metadata_quorum_tool(snakka_beside_reference):
    bs = snakka_beside_reference.bootstrap_servers
    node = snakka_beside_reference.broker.services.node_id
    out = tool("kafka-metadata-quorum.sh", "--bootstrap-server", bs, "describe", "--status")
    fields = dict(re.findall(r"^(\w+):\s*(.*)$", out, re.M))
    assert fields["LeaderId"] == str(node), out
    assert fields["LeaderEpoch"] == "1", out
    assert int(fields["HighWatermark"]) > 0, out
    assert fields["MaxFollowerLag"] == "0", out
    assert f'"id": {node}' in fields["CurrentVoters"], out
    assert fields["CurrentObservers"] == "[]", out
    out = tool("kafka-metadata-quorum.sh", "--bootstrap-server", bs, "describe",
               "--replication")
    assert re.search(rf"^{node}\s+\S+\s+\d+\s+0\s+\S+\s+\S+\s+Leader\s*$", out, re.M), out


def test_features_tool(snakka_beside_reference):
    bs = snakka_beside_reference.bootstrap_servers
    out = tool("kafka-features.sh", "--bootstrap-server", bs, "describe")
    assert re.search(r"Feature: transaction\.version\s+SupportedMinVersion: 0\s+"
                     r"SupportedMaxVersion: 2\s+FinalizedVersionLevel: 2", out), out
    assert re.search(r"Feature: group\.version\s+SupportedMinVersion: 0\s+"
                     r"SupportedMaxVersion: 1\s+FinalizedVersionLevel: 1", out), out
    out = tool("kafka-features.sh", "--bootstrap-server", bs, "upgrade", "--feature",
               "transaction.version=2", "--dry-run")
    assert "transaction.version can be upgraded to 2." in out, out


def test_log_dirs_tool(snakka_beside_reference):
    bs = snakka_beside_reference.bootstrap_servers
    t = _topic(bs, 1)
    out = tool("kafka-log-dirs.sh", "--bootstrap-server", bs, "--describe", "--topic-list", t)
    data = json.loads(out.strip().splitlines()[-1])
    [b] = data["brokers"]
    [d] = b["logDirs"]
    assert [p["partition"] for p in d["partitions"]] == [f"{t}-0"], out
