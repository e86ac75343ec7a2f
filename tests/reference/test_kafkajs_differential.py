"""KafkaJS against the reference Kafka 4.0 and snakka: the same script, the same answers.

tests/clients/kafkajs/run.js runs one sequence of admin calls, a produce (keys, headers, gzip,
an oversized record against a topic-level max.message.bytes, a topic that does not exist with
auto-creation off) and a group consume against each broker; the results, with what differs by
nature (cluster ids, ports, timestamps, member ids) left out, must be equal. This is where a
KafkaJS quirk is told apart from a snakka bug: what KafkaJS does against Kafka 4.0 is the
expected behaviour (for example resetOffsets committing the EARLIEST sentinel -2).
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from typing import Any

import pytest
from clients import kafkajs_support as kjs

pytestmark = pytest.mark.skipif(kjs.skip_reason() is not None, reason=str(kjs.skip_reason()))

RUN = uuid.uuid4().hex[:8]
# Incompressible (gzip cannot bring it under the topic's max.message.bytes of 2,000).
BIG = base64.b64encode(os.urandom(4000)).decode()


def _script(bootstrap: str, tag: str) -> dict[str, Any]:
    base = {"brokers": [bootstrap]}
    topic, group = f"kjs-diff-{tag}-{RUN}", f"kjs-diff-g-{tag}-{RUN}"
    missing = f"kjs-diff-missing-{tag}-{RUN}"
    created = kjs.run("admin", {**base, "ops": [
        ["createTopics", {"topics": [{"topic": topic, "numPartitions": 2, "configEntries": [
            {"name": "max.message.bytes", "value": "2000"},
            {"name": "retention.ms", "value": "123456"}]}]}],
        ["createTopics", {"topics": [{"topic": topic}]}],
        ["createPartitions", {"topicPartitions": [{"topic": topic, "count": 3}]}],
        ["describeConfigs", {"includeSynonyms": False, "resources": [
            {"type": 2, "name": topic, "configNames": ["max.message.bytes", "retention.ms"]}]}],
    ]})["results"]
    produced = kjs.run("produce", {**base, "compression": "gzip", "retries": 0,
                                   "allowAutoTopicCreation": False, "sends": [
        {"topic": topic, "messages": [{"key": f"k{i}", "value": f"v{i}", "partition": i % 3,
                                       "headers": {"h": str(i)}} for i in range(9)]},
        {"topic": topic, "messages": [{"value": BIG, "partition": 0}]},
        {"topic": missing, "messages": [{"value": "x"}]},
    ]})["results"]
    consumed = kjs.run("consume", {**base, "groupId": group, "topics": [topic], "count": 9})
    assert "error" not in consumed and consumed["joins"], (tag, consumed)
    after = kjs.run("admin", {**base, "ops": [
        ["fetchTopicOffsets", topic],
        ["fetchOffsets", {"groupId": group, "topics": [topic]}],
        ["resetOffsets", {"groupId": group, "topic": topic, "earliest": True}],
        ["fetchOffsets", {"groupId": group, "topics": [topic]}],
        ["describeGroups", [group]],
        ["deleteGroups", [group]],
        ["deleteTopics", {"topics": [topic]}],
    ]})["results"]
    return {"created": created, "produced": produced, "consumed": consumed, "after": after}


def _normal(out: dict[str, Any], tag: str) -> dict[str, Any]:
    """What must agree: error types, offsets, records, config values, group state (names with
    the broker's tag taken out)."""
    out = json.loads(json.dumps(out).replace(f"-{tag}-", "-"))
    created = out["created"]
    configs = {e["configName"]: (e["configValue"], e["readOnly"], e["isDefault"])
               for e in created[3]["ok"]["resources"][0]["configEntries"]}

    def result(r: dict[str, Any]) -> Any:
        if "error" in r:
            e = r["error"]
            return ("error", e["name"], e["type"], (e["cause"] or {}).get("type"))
        return ("ok", sorted((m["partition"], m["errorCode"], m["baseOffset"]) for m in r["ok"]))

    records = sorted((r["partition"], r["offset"], r["key"], r["value"], tuple(r["headers"].items()))
                     for r in out["consumed"]["records"])
    after = out["after"]
    group = after[4]["ok"]["groups"][0]
    return {
        "created": [created[0], created[1], created[2]],
        "configs": configs,
        "produced": [result(r) for r in out["produced"]],
        "records": records,
        "assignment": out["consumed"]["joins"][-1]["assignment"],
        "ends": sorted((p["partition"], p["low"], p["high"]) for p in after[0]["ok"]),
        "committed": [sorted((p["partition"], p["offset"]) for p in after[i]["ok"][0]["partitions"])
                      for i in (1, 3)],
        "reset": after[2],
        "group": (group["state"], group["protocolType"], group["errorCode"], group["members"]),
        "deleted": [after[5], after[6]],
    }


def test_kafkajs_script_same_on_both(brokers):
    ref, snakka = brokers
    want = _normal(_script(ref, "ref"), "ref")
    got = _normal(_script(snakka, "snakka"), "snakka")
    assert got == want


def _transactions(bootstrap: str, tag: str) -> dict[str, Any]:
    base = {"brokers": [bootstrap]}
    topic, group = f"kjs-diff-txn-{tag}-{RUN}", f"kjs-diff-txn-g-{tag}-{RUN}"
    kjs.run("admin", {**base, "ops": [["createTopics", {"topics": [{"topic": topic}]}]]})
    msgs = [{"key": "k", "value": f"{end}-{i}"} for end in ("c", "a") for i in range(2)]
    txns = [{"topic": topic, "messages": msgs[:2], "end": "commit", "offsets": {
                "groupId": group, "topics": [{"topic": topic, "partitions": [
                    {"partition": 0, "offset": "1"}]}]}},
            {"topic": topic, "messages": msgs[2:], "end": "abort"}]
    ended = kjs.run("transact", {**base, "transactionalId": f"kjs-diff-tid-{tag}-{RUN}",
                                 "txns": txns})["results"]
    committed = kjs.run("consume", {**base, "groupId": f"{group}-rc", "topics": [topic],
                                    "count": 2})
    everything = kjs.run("consume", {**base, "groupId": f"{group}-ru", "topics": [topic],
                                     "count": 4, "readUncommitted": True})
    for run in (committed, everything):
        assert "error" not in run, (tag, run)
    after = kjs.run("admin", {**base, "ops": [
        ["fetchTopicOffsets", topic],
        ["fetchOffsets", {"groupId": group, "topics": [topic]}],
    ]})["results"]
    return {
        "ended": ended,
        # read_committed: the committed records only; the group's offset from sendOffsets
        "committed": [(r["offset"], r["value"]) for r in committed["records"]],
        "everything": [(r["offset"], r["value"]) for r in everything["records"]],
        # the end offset counts both control records (commit and abort markers)
        "ends": [(p["partition"], p["low"], p["high"]) for p in after[0]["ok"]],
        "group": [(p["partition"], p["offset"]) for p in after[1]["ok"][0]["partitions"]],
    }


def test_kafkajs_transactions_same_on_both(brokers):
    ref, snakka = brokers
    want = _transactions(ref, "ref")
    assert want["committed"] == [(0, "c-0"), (1, "c-1")]  # what Kafka 4.0 shows KafkaJS
    assert _transactions(snakka, "snakka") == want


def _edges(bootstrap: str, tag: str) -> list[Any]:
    """Admin calls at their edges: validate-only, bad configs, things that do not exist."""
    base = {"brokers": [bootstrap], "retries": 1}
    topic = f"kjs-diff-edge-{tag}-{RUN}"
    kjs.run("admin", {**base, "ops": [["createTopics", {"topics": [
        {"topic": topic, "numPartitions": 2}]}]]})
    kjs.run("produce", {**base, "sends": [{"topic": topic, "messages": [
        {"value": f"v{i}", "partition": i % 2} for i in range(10)]}]})
    # a group first: a fresh Kafka creates __consumer_offsets on the first FindCoordinator and
    # answers COORDINATOR_NOT_AVAILABLE meanwhile, which would fail the group calls below
    kjs.run("consume", {**base, "groupId": f"kjs-diff-edge-g-{tag}-{RUN}", "topics": [topic],
                        "count": 10})
    missing = f"kjs-diff-nope-{tag}-{RUN}"
    ops = [
        # KafkaJS's deleteTopicRecords fails (KafkaJSTopicMetadataNotLoaded) unless the admin
        # has loaded the topic's metadata, against Kafka too
        ["deleteTopicRecords", {"topic": topic, "partitions": [{"partition": 0, "offset": "2"}]}],
        ["fetchTopicMetadata", {"topics": [topic]}],
        ["deleteTopicRecords", {"topic": topic, "partitions": [{"partition": 0, "offset": "2"}]}],
        ["fetchTopicOffsets", topic],
        ["listPartitionReassignments", {"topics": [{"topic": topic, "partitions": [0]}]}],
        ["alterConfigs", {"validateOnly": True, "resources": [{"type": 2, "name": topic,
            "configEntries": [{"name": "cleanup.policy", "value": "compact"}]}]}],
        ["alterConfigs", {"validateOnly": False, "resources": [{"type": 2, "name": topic,
            "configEntries": [{"name": "no.such.config", "value": "x"}]}]}],
        ["alterConfigs", {"validateOnly": False, "resources": [{"type": 2, "name": topic,
            "configEntries": [{"name": "retention.ms", "value": "abc"}]}]}],
        # validateOnly creates nothing, and KafkaJS then waits for the topic's leaders anyway
        ["createTopics", {"validateOnly": True, "topics": [{"topic": missing}]}],
        ["createTopics", {"waitForLeaders": False, "topics": [{"topic": missing,
            "configEntries": [{"name": "retention.ms", "value": "abc"}]}]}],
        ["deleteTopics", {"topics": [missing]}],
        ["fetchOffsets", {"groupId": missing}],
        ["describeGroups", [missing]],
        ["deleteGroups", [missing]],
        ["fetchTopicMetadata", {"topics": [missing]}],
    ]
    out = kjs.run("admin", {**base, "ops": ops})["results"]
    norm = json.loads(json.dumps(out).replace(f"-{tag}-", "-"))
    assert norm[0]["error"]["name"] == "KafkaJSTopicMetadataNotLoaded", norm[0]
    norm[1]["ok"]["topics"][0]["partitions"].sort(key=lambda p: p["partitionId"])
    norm[3]["ok"].sort(key=lambda p: p["partition"])  # Kafka lists partitions in any order
    for r in norm:  # messages are free text on both sides; error types and codes must agree
        e = r.get("error")
        while e:
            e.pop("message", None)
            e = e.get("cause")
        if "ok" in r and isinstance(r["ok"], dict):
            for res in r["ok"].get("resources", []):
                res.pop("errorMessage", None)
    return norm


def test_kafkajs_admin_edges_same_on_both(brokers):
    ref, snakka = brokers
    assert _edges(snakka, "snakka") == _edges(ref, "ref")


def _fencing_and_topic_rules(bootstrap: str, tag: str) -> dict[str, Any]:
    """A transactional producer fenced by a second one with its id; a LogAppendTime topic; a
    record without a key on a compacted topic."""
    base = {"brokers": [bootstrap], "retries": 2}
    t = f"kjs-diff-fence-{tag}-{RUN}"
    kjs.run("admin", {**base, "ops": [["createTopics", {"topics": [
        {"topic": t},
        {"topic": t + "-lat", "configEntries": [
            {"name": "message.timestamp.type", "value": "LogAppendTime"}]},
        {"topic": t + "-cmp", "configEntries": [{"name": "cleanup.policy", "value": "compact"}]},
    ]}]]})
    fenced = kjs.run("fence", {**base, "transactionalId": t, "topic": t})
    produced = kjs.run("produce", {**base, "sends": [
        {"topic": t + "-lat", "messages": [{"value": "x", "timestamp": 1000}]},
        {"topic": t + "-cmp", "messages": [{"value": "no key"}]}]})["results"]
    seen = kjs.run("consume", {**base, "groupId": t, "topics": [t], "count": 1})
    lat = kjs.run("consume", {**base, "groupId": t + "-l", "topics": [t + "-lat"], "count": 1})
    return {
        "fenced": {k: v if v == "ok" else (v["name"], v["type"]) for k, v in fenced.items()},
        "lat_produce": [(m["errorCode"], m["logAppendTime"] != "-1") for m in produced[0]["ok"]],
        "compacted_no_key": (produced[1]["error"]["name"], produced[1]["error"]["type"]),
        "committed": [r["value"] for r in seen["records"]],
        # LogAppendTime: the broker's clock replaces the producer's timestamp (1000)
        "lat_timestamp_replaced": [r["timestamp"] != 1000 for r in lat["records"]],
    }


def test_kafkajs_fencing_and_topic_rules_same_on_both(brokers):
    ref, snakka = brokers
    want = _fencing_and_topic_rules(ref, "ref")
    assert want["fenced"]["aCommit"] == ("KafkaJSProtocolError", "INVALID_PRODUCER_EPOCH")
    assert _fencing_and_topic_rules(snakka, "snakka") == want
