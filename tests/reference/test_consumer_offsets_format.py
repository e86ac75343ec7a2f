"""snakka's ``__consumer_offsets`` segments read by Apache Kafka 4.0: its decoder and its broker (issue 17).

confluent-kafka groups of both protocols (classic, KIP-848 consumer) commit offsets against a
snakka broker, a transactional producer commits offsets in one transaction and aborts another;
``kafka-dump-log.sh --offsets-decoder`` then reads the partition's segment: every record
decodes (no "Could not deserialize" / exception lines) and shows the groups, their members and
the offsets, the transactional OffsetCommits in their producer's batches followed by the
COMMIT / ABORT markers. Then a reference Kafka 4.0 broker is started on that segment (in place
of its own ``__consumer_offsets-0``) and loads the same groups and committed offsets. Skipped
where the reference distribution or ``java`` is absent (tests/reference_kafka.py says why).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from reference_kafka import run_tool

from snakka.groups.coordinator import OFFSETS_TOPIC
from snakka.testing.embedded import EmbeddedBroker

LINE = re.compile(r"key: (\{.*\}) payload: (\{.*\}|null)$")


def _assigned(c, n: int) -> None:
    import time

    deadline = time.monotonic() + 60
    while len(c.assignment()) < n and time.monotonic() < deadline:
        c.poll(0.2)
    assert len(c.assignment()) == n, c.assignment()


@pytest.fixture(scope="module")
def snakka_segments(kafka_distribution, tmp_path_factory) -> list[Path]:
    """The scenario (module doc) against snakka; copies of its ``__consumer_offsets-0``
    segment files, taken while the members are still in their groups."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    out_dir = tmp_path_factory.mktemp("snakka-offsets")
    with EmbeddedBroker(config={"offsets.topic.num.partitions": "1", "num.partitions": "1",
                                "group.initial.rebalance.delay.ms": "0"},
                        host="127.0.0.1") as broker:
        bs = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("t", 3, 1)])["t"].result(30)
        consumers = []
        try:
            for gid, proto, base in (("cls", "classic", 10), ("kip848", "consumer", 20)):
                conf = {"bootstrap.servers": bs, "group.id": gid, "group.protocol": proto,
                        "enable.auto.commit": False, "client.id": f"{gid}-client"}
                if proto == "classic":
                    conf["partition.assignment.strategy"] = "range"
                c = Consumer(conf)
                consumers.append(c)
                c.subscribe(["t"])
                _assigned(c, 3)
                c.commit(offsets=[TopicPartition("t", q, base + q) for q in range(3)],
                         asynchronous=False)
            tp = Producer({"bootstrap.servers": bs, "transactional.id": "dump-tx"})
            tp.init_transactions(30)
            meta = Consumer({"bootstrap.servers": bs, "group.id": "txg"})
            for commit, base in ((True, 40), (False, 50)):
                tp.begin_transaction()
                tp.send_offsets_to_transaction(
                    [TopicPartition("t", q, base + q) for q in range(3)],
                    meta.consumer_group_metadata(), 30)
                tp.commit_transaction(30) if commit else tp.abort_transaction(30)
            meta.close()
            copies = []
            for seg in sorted((Path(broker.data_dir) / f"{OFFSETS_TOPIC}-0").glob("*.log")):
                copies.append(out_dir / seg.name)
                shutil.copyfile(seg, copies[-1])
        finally:
            for c in consumers:
                c.close()
    assert copies
    return copies


def test_kafka_dump_log_decodes_snakkas_consumer_offsets(snakka_segments):
    r = run_tool("kafka-dump-log.sh", "--offsets-decoder", "--files",
                 ",".join(str(s) for s in snakka_segments))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "Could not deserialize" not in out and "Exception" not in out, out[-3000:]
    assert "Unknown" not in out, out[-3000:]

    records = []  # (batch header line, key, value) in log order
    batch = ""
    markers = []
    for line in out.splitlines():
        if line.startswith("baseOffset"):
            batch = line
        elif "endTxnMarker:" in line:
            markers.append((len(records), line.split("endTxnMarker: ")[1].split()[0], batch))
        elif (m := LINE.search(line)) is not None:
            records.append((batch, json.loads(m.group(1)), json.loads(m.group(2))))
    assert records, out[-3000:]

    latest: dict[tuple, dict | None] = {}
    for _b, key, value in records:
        latest[(key["type"], json.dumps(key["data"], sort_keys=True))] = value

    def of(rtype: str, **data):
        return latest[(rtype, json.dumps(data, sort_keys=True))]

    # committed offsets (OffsetCommitValue v3, as Kafka 4.0 writes them)
    for gid, base in (("cls", 10), ("kip848", 20)):
        for q in range(3):
            v = of("1", group=gid, topic="t", partition=q)
            assert v["version"] == "3" and v["data"]["offset"] == base + q
    # the classic group: GroupMetadataValue v3 with its member, protocol and assignment
    cls = of("2", group="cls")
    assert cls["version"] == "3"
    g = cls["data"]
    assert (g["protocolType"], g["protocol"], g["generation"]) == ("consumer", "range", 1)
    (member,) = g["members"]
    assert member["clientId"] == "cls-client" and g["leader"] == member["memberId"]
    assert member["subscription"] and member["assignment"]
    # the KIP-848 group: epoch, subscription metadata, target and current assignment
    assert of("3", groupId="kip848")["data"]["epoch"] >= 1
    topics = of("4", groupId="kip848")["data"]["topics"]
    assert [(t["topicName"], t["numPartitions"]) for t in topics] == [("t", 3)]
    members = [json.loads(k[1])["memberId"] for k in latest
               if k[0] == "5" and json.loads(k[1])["groupId"] == "kip848"]
    (mid,) = members
    meta5 = of("5", groupId="kip848", memberId=mid)["data"]
    assert (meta5["clientId"], meta5["subscribedTopicNames"]) == ("kip848-client", ["t"])
    cur = of("8", groupId="kip848", memberId=mid)["data"]
    assert [p for t in cur["assignedPartitions"] for p in t["partitions"]] == [0, 1, 2]
    assert cur["state"] == 0 and cur["memberEpoch"] >= 1
    tgt = of("7", groupId="kip848", memberId=mid)["data"]
    assert [p for t in tgt["topicPartitions"] for p in t["partitions"]] == [0, 1, 2]
    assert of("6", groupId="kip848")["data"]["assignmentEpoch"] == of(
        "3", groupId="kip848")["data"]["epoch"]

    # transactional offsets: in the producer's transactional batches, then COMMIT / ABORT
    txg = [(b, k, v) for b, k, v in records if k["type"] == "1" and k["data"]["group"] == "txg"]
    assert [v["data"]["offset"] for _b, _k, v in txg] == [40, 41, 42, 50, 51, 52]
    assert all("isTransactional: true" in b for b, _k, _v in txg)
    assert [kind for _i, kind, _b in markers] == ["COMMIT", "ABORT"]
    first_abort = markers[1][0]
    assert records[first_abort - 1][2]["data"]["offset"] == 52


def _swap_in(kafka_dir: Path, segments: list[Path]) -> None:
    """Replace the reference broker's ``__consumer_offsets-0`` data with snakka's segments
    (keeping its partition.metadata, the topic id), and make it recover them from offset 0."""
    logs = kafka_dir / "kraft-logs"
    part = logs / f"{OFFSETS_TOPIC}-0"
    for f in part.iterdir():
        if f.name != "partition.metadata":
            f.unlink()
    for seg in segments:
        shutil.copyfile(seg, part / seg.name)
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        cp = logs / name
        if cp.exists():
            lines = cp.read_text().splitlines()
            cp.write_text("\n".join(
                f"{OFFSETS_TOPIC} 0 0" if ln.startswith(f"{OFFSETS_TOPIC} 0 ") else ln
                for ln in lines) + "\n")
    (logs / ".kafka_cleanshutdown").unlink(missing_ok=True)


def _kafka_ref(k, command: str) -> None:
    import subprocess

    from reference_kafka import KAFKA_REF_SH

    r = subprocess.run(["bash", str(KAFKA_REF_SH), command], env=k._env(), capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr


def test_kafka_40_loads_snakkas_consumer_offsets(snakka_segments):
    """Kafka 4.0 started on snakka's ``__consumer_offsets`` segment loads the same groups
    and committed offsets (the transaction's committed offsets, not the aborted ones)."""
    from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from reference_kafka import ReferenceKafka

    k = ReferenceKafka({"offsets.topic.num.partitions": "1"})
    try:
        k.start()
        bs = k.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("t", 3, 1)])["t"].result(30)
        seed = Consumer({"bootstrap.servers": bs, "group.id": "seed"})  # creates the topic
        for _ in range(100):
            try:
                seed.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
                break
            except Exception:  # NOT_COORDINATOR while __consumer_offsets loads
                seed.poll(0.2)
        seed.close()
        _kafka_ref(k, "stop")
        _swap_in(Path(k.dir), snakka_segments)
        _kafka_ref(k, "start")

        def committed(group: str) -> dict[int, int]:
            c = Consumer({"bootstrap.servers": bs, "group.id": group})
            try:
                got = c.committed([TopicPartition("t", q) for q in range(3)], timeout=60)
                return {tp.partition: tp.offset for tp in got}
            finally:
                c.close()

        assert committed("cls") == {0: 10, 1: 11, 2: 12}
        assert committed("kip848") == {0: 20, 1: 21, 2: 22}
        assert committed("txg") == {0: 40, 1: 41, 2: 42}
        assert committed("seed") == {0: -1001, 1: -1001, 2: -1001}  # Kafka's own, replaced
        admin = AdminClient({"bootstrap.servers": bs})
        desc = {g: f.result(60) for g, f in admin.describe_consumer_groups(
            ["cls", "kip848"], request_timeout=60).items()}
        cls = desc["cls"]
        assert cls.state == ConsumerGroupState.STABLE and cls.partition_assignor == "range"
        assert [m.client_id for m in cls.members] == ["cls-client"]
        assert sorted(p.partition for m in cls.members
                      for p in m.assignment.topic_partitions) == [0, 1, 2]
        kip = desc["kip848"]
        assert [m.client_id for m in kip.members] == ["kip848-client"]
        del admin  # before the broker goes: it would retry its connection in the background
    finally:
        k.stop()
