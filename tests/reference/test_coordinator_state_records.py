"""Issue 17: ``__transaction_state`` and ``__share_group_state`` records, byte for byte Kafka 4.0's.

* snakka -> Kafka: after real-client work on snakka (a committed and an open transaction with
  confluent-kafka, a share group with released / accepted / rejected / in-flight records), the
  reference ``kafka-dump-log.sh`` reads snakka's segments with ``--transaction-log-decoder`` and
  ``--share-group-state-decoder`` without an error, and what it decodes is, record by record,
  the fact snakka wrote (ids, producer id/epoch, state, partitions; group/topic/partition, epochs,
  start offset, state batches).
* Kafka -> snakka: the reference Kafka 4.0 (share groups enabled, early access) writes its own
  records (confluent-kafka transactions, ``kafka-console-share-consumer.sh`` accepting and
  rejecting); snakka decodes every one and re-encodes it to the same bytes, and snakka's loaders
  reach the state Kafka reports (``kafka-transactions.sh describe``) or the clients caused.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pytest
from integration.coordinator_state_work import (
    ACCEPTED,
    REJECTED,
    RELEASED,
    do_share_work,
    do_transactions,
    segment_paths,
    stored,
)
from integration.helpers import ck_create_topic
from reference_kafka import run_tool

from snakka.protocol.primitives import base64_to_uuid
from snakka.share.persister import SHARE_STATE_TOPIC, SharePersister
from snakka.share.records import SHARE_STATE_SERDE
from snakka.share.types import SharePartitionState, StateBatch
from snakka.testing.embedded import EmbeddedBroker
from snakka.txn.coordinator import (
    TRANSACTION_STATE_TOPIC,
    TransactionCoordinator,
    TxnConfig,
    TxnLogRecord,
    TxnState,
    partition_for,
    value_from_dict,
)
from snakka.txn.records import TransactionLogSerde

pytestmark = pytest.mark.timeout(300)

_LINE = re.compile(r"^\| offset: (\d+) .* key: (.*) payload: (.*)$")
# Kafka's TransactionState names, as its decoder prints them.
_STATE_NAMES = {s: "".join(w.capitalize() for w in s.name.split("_")) for s in TxnState}


def _dump(decoder: str, paths: list[str]) -> list[tuple[str, str]]:
    """(key, payload) of every record kafka-dump-log.sh prints; no decoding error allowed."""
    assert paths
    r = run_tool("kafka-dump-log.sh", decoder, "--files", ",".join(paths))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for bad in ("Exception", "Could not", "Unknown", "error"):
        assert bad not in out, out
    rows = [m.groups()[1:] for ln in r.stdout.splitlines() if (m := _LINE.match(ln))]
    assert rows, out
    return rows


def _kafka_share_fact(key: str, payload: str) -> tuple[tuple, dict]:
    """A share state record as Kafka's decoder printed it, in snakka's fact shape."""
    k, v = json.loads(key), json.loads(payload)
    kd, vd = k["data"], v["data"]
    assert v["type"] == "0"  # value version 0
    fact = {"type": "ShareSnapshot" if k["type"] == "0" else "ShareUpdate",
            "snapshot_epoch": vd["snapshotEpoch"], "leader_epoch": vd["leaderEpoch"],
            "start_offset": vd["startOffset"],
            "batches": [[b["firstOffset"], b["lastOffset"], b["deliveryState"],
                         b["deliveryCount"]] for b in vd["stateBatches"]]}
    if "stateEpoch" in vd:
        fact["state_epoch"] = vd["stateEpoch"]
    return ("ShareState", kd["groupId"], str(base64_to_uuid(kd["topicId"])), kd["partition"]), fact


def _kafka_txn_fact(key: str, payload: str) -> tuple[str, dict[str, str]]:
    tid = key.removeprefix("transaction_metadata::transactionalId=")
    fields = dict(re.findall(r"(\w+)[:=](\[[^\]]*\]|[^,]+)", payload))
    return tid, fields


def _snakka_facts(data_dir: str | Path, topic: str, serde) -> list[tuple[tuple, dict | None]]:
    """Every record of ``topic`` decoded by snakka, in the order kafka-dump-log.sh prints them
    (partition directories by name, then offset)."""
    out = []
    for _p, r in stored(data_dir, topic):
        assert r.key is not None
        fact = serde.deserialize(r.key, r.value)
        assert fact is not None
        out.append(fact)
    return out


def test_kafka_dump_log_reads_snakkas_state_topics(kafka_distribution, tmp_path):
    data_dir = str(tmp_path / "data")
    with EmbeddedBroker(data_dir=data_dir) as b:
        bs = b.bootstrap_servers
        open_producer = do_transactions(bs)
        do_share_work(bs)
        shares = {k: b.broker.shares.persister.read(k) for k in b.broker.shares.persister.keys()}
        c = b.broker.txns.coordinator
        txns = {t: c.get(t) for t in ("tx-commit", "tx-open")}
        del open_producer

    # __share_group_state: Kafka's decoder prints what snakka meant, record by record.
    rows = _dump("--share-group-state-decoder", segment_paths(data_dir, SHARE_STATE_TOPIC))
    kafka = [_kafka_share_fact(k, v) for k, v in rows]
    assert kafka == _snakka_facts(data_dir, SHARE_STATE_TOPIC, SHARE_STATE_SERDE)
    [(key, state)] = shares.items()
    assert state is not None
    mine = [v for k, v in kafka if k == ("ShareState", key[0], str(key[1]), key[2])]
    assert mine[0]["type"] == "ShareSnapshot" and mine[0]["snapshot_epoch"] == 0
    # The acknowledgements reached the log as Kafka's delivery states (2 Acked, 4 Archived).
    states = {(f, last): s for v in mine for f, last, s, _c in v["batches"]}
    assert states[(ACCEPTED[0], ACCEPTED[-1])] == 2 and states[(REJECTED[0], REJECTED[0])] == 4
    assert states[(RELEASED[0], RELEASED[-1])] == 0

    # __transaction_state: ids, producer ids/epochs, states and partitions as snakka holds them.
    rows = _dump("--transaction-log-decoder", segment_paths(data_dir, TRANSACTION_STATE_TOPIC))
    last: dict[str, dict[str, str]] = {}
    for k, v in rows:
        tid, fields = _kafka_txn_fact(k, v)
        last[tid] = fields
    for tid, m in txns.items():
        assert m is not None
        f = last[tid]
        assert (int(f["producerId"]), int(f["producerEpoch"])) == (m.producer_id,
                                                                   m.producer_epoch)
        assert f["state"] == _STATE_NAMES[m.state]
        assert int(f["txnTimeoutMs"]) == m.txn_timeout_ms
        assert int(f["txnLastUpdateTimestamp"]) == m.txn_last_update_timestamp_ms
    assert last["tx-commit"]["state"] == "CompleteCommit"
    assert last["tx-commit"]["partitions"] == "[]"
    assert last["tx-open"]["state"] == "Ongoing"
    assert last["tx-open"]["partitions"] == "[tx-out-0]"


def _kafka_log_dir(reference_kafka) -> Path:
    d = getattr(reference_kafka, "dir", None)
    if d is None:
        pytest.skip("the reference Kafka runs outside this test run: its log dir is unknown")
    return Path(d) / "kraft-logs"


def _reencodes(data_dir: Path, topic: str, serde_for) -> list[tuple[tuple, dict | None]]:
    """Every record of ``topic`` decoded by snakka; each must re-encode to Kafka's own bytes."""
    facts = []
    for _p, r in stored(data_dir, topic):
        assert r.key is not None
        serde = serde_for(r.value)
        fact = serde.deserialize(r.key, r.value)
        assert fact is not None, r.key
        assert serde.serialize(*fact) == (r.key, r.value), fact
        facts.append(fact)
    return facts


def test_snakka_loads_kafkas_transaction_records(reference_kafka):
    log_dir = _kafka_log_dir(reference_kafka)
    bs = reference_kafka.bootstrap_servers
    prefix = f"cs{int(time.time() * 1000)}-"
    open_producer = do_transactions(bs, prefix)

    def serde_for(value: bytes | None) -> TransactionLogSerde:
        return TransactionLogSerde(0 if value is None else int.from_bytes(value[:2], "big"))

    facts = _reencodes(log_dir, TRANSACTION_STATE_TOPIC, serde_for)
    core = TransactionCoordinator(TxnConfig(), lambda: 0, lambda: 0)
    n = core.config.transaction_state_log_num_partitions
    for p in range(n):
        core.load(p, 0, [TxnLogRecord(p, k[1], None if v is None else value_from_dict(v))
                         for k, v in facts if partition_for(k[1], n) == p])
    committed, open_ = core.get(prefix + "tx-commit"), core.get(prefix + "tx-open")
    assert committed is not None and committed.state == TxnState.COMPLETE_COMMIT
    assert open_ is not None and open_.state == TxnState.ONGOING
    assert open_.partitions == {(prefix + "tx-out", 0)}
    r = run_tool("kafka-transactions.sh", "--bootstrap-server", bs, "describe",
                 "--transactional-id", prefix + "tx-open")
    assert r.returncode == 0, r.stderr
    header, row = (ln.split() for ln in r.stdout.strip().splitlines()[:2])
    kafka = dict(zip(header, row, strict=False))
    assert int(kafka["ProducerId"]) == open_.producer_id
    assert int(kafka["ProducerEpoch"]) == open_.producer_epoch
    assert kafka["TransactionState"] == "Ongoing"
    assert kafka["TopicPartitions"] == f"{prefix}tx-out-0"
    del open_producer


class _Replayed:
    """What SharePersister.load replays: the facts read from Kafka's segments."""

    def __init__(self, facts: list[tuple[tuple, dict | None]]) -> None:
        self.facts = facts
        self.legacy_partitions: set[int] = set()
        self.num_partitions = 50

    async def open(self) -> None:
        pass

    def replay(self):
        return ((0, k, v) for k, v in self.facts)

    def partition_for(self, key: str) -> int:
        return 0


def test_snakka_loads_kafkas_share_state_records(reference_kafka):
    """Kafka's console share consumer accepts three records, then rejects one; the other two
    come back when each consumer closes: the share-partition starts at offset 4, and offsets
    4-5 are Available, delivered twice."""
    import asyncio

    log_dir = _kafka_log_dir(reference_kafka)
    bs = reference_kafka.bootstrap_servers
    suffix = str(int(time.time() * 1000))
    topic, group = f"cs-share-{suffix}", f"cs-group-{suffix}"
    ck_create_topic(bs, topic, 1)
    from confluent_kafka import Producer

    pr = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(6):
        pr.produce(topic, b"v%d" % i)
    pr.flush(30)
    r = run_tool("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "groups",
                 "--entity-name", group, "--alter", "--add-config",
                 "share.auto.offset.reset=earliest")
    assert r.returncode == 0, r.stderr
    for extra in ([], ["--reject"]):
        n = "1" if extra else "3"
        r = run_tool("kafka-console-share-consumer.sh", "--bootstrap-server", bs, "--topic",
                     topic, "--group", group, "--max-messages", n, "--timeout-ms", "30000",
                     *extra)
        assert r.returncode == 0 and f"Processed a total of {n} messages" in r.stderr, r.stderr

    facts = _reencodes(log_dir, SHARE_STATE_TOPIC, lambda _v: SHARE_STATE_SERDE)
    mine = [(k, v) for k, v in facts if k[1] == group]
    assert mine and mine[0][1] is not None and mine[0][1]["type"] == "ShareSnapshot"
    persister = SharePersister(None, None, lambda: 0)  # type: ignore[arg-type]
    persister.log = _Replayed(mine)  # type: ignore[assignment]
    asyncio.run(persister.load())
    [key] = persister.keys()
    assert key[0] == group and isinstance(key[1], uuid.UUID) and key[2] == 0
    assert persister.read(key) == SharePartitionState(4, 0, (StateBatch(4, 5, 0, 2),))
