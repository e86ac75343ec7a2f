"""Issue 17: ``__transaction_state`` and ``__share_group_state`` hold Kafka 4.0's records, and a
data directory of an older snakka (JSON records) is migrated at start-up, once, crash-safely.

The old format is made for real: a broker whose two owners are given snakka's JSON serde
(monkeypatched) does transactional and share-group work with real clients
(tests/integration/coordinator_state_work.py); a normal restart must load the same state, log
the migration, leave only Kafka-format records in the segment files, and serve the state to
clients (the open transaction is aborted by its successor, the released and in-flight share
records are delivered again, the accepted and rejected ones are not). A crash between the
rewrite and the log start move (simulated by a restart whose DeleteRecords does nothing) is
migrated again on the next start and converges to the same state.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from snakka.coordinator_log import JSON_SERDE
from snakka.replica.manager import ReplicaManager
from snakka.share.persister import SHARE_STATE_TOPIC
from snakka.share.records import SHARE_STATE_SERDE
from snakka.testing.embedded import EmbeddedBroker
from snakka.txn.coordinator import TRANSACTION_STATE_TOPIC
from snakka.txn.records import TransactionLogSerde

from .coordinator_state_work import (
    ACCEPTED,
    GROUP,
    IN_FLIGHT,
    REJECTED,
    RELEASED,
    SHARE_TOPIC,
    TXN_TOPIC,
    do_share_work,
    do_transactions,
    stored,
)
from .helpers import ck_read_to_end, wait_until

pytestmark = pytest.mark.timeout(240)

MIGRATED = "rewriting them in Kafka's record format"
TXN_SERDE = TransactionLogSerde(2)


def _json_owners(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make both owners write snakka's old JSON records (a data directory of an older snakka)."""
    monkeypatch.setattr("snakka.txn.manager.TransactionLogSerde", lambda _level: JSON_SERDE)
    monkeypatch.setattr("snakka.share.persister.SHARE_STATE_SERDE", JSON_SERDE)


def _state(b: EmbeddedBroker) -> tuple[dict, dict]:
    """(share-partition states, transactional id -> TransactionLogValue) of the broker."""
    shares = {k: b.broker.shares.persister.read(k) for k in b.broker.shares.persister.keys()}
    c = b.broker.txns.coordinator
    txns = {t: m.to_log_value() for t in c.transactional_ids() if (m := c.get(t)) is not None}
    return shares, txns


def _formats(data_dir: str) -> dict[str, set[str]]:
    """topic -> the formats of its stored records ("json" / "kafka"); every Kafka-format record
    must decode."""
    out: dict[str, set[str]] = {}
    for topic, serde in ((SHARE_STATE_TOPIC, SHARE_STATE_SERDE),
                         (TRANSACTION_STATE_TOPIC, TXN_SERDE)):
        kinds = out.setdefault(topic, set())
        for _p, r in stored(data_dir, topic):
            assert r.key is not None
            if JSON_SERDE.recognizes(r.key):
                kinds.add("json")
            else:
                assert serde.deserialize(r.key, r.value) is not None
                kinds.add("kafka")
    return out


def _make_json_dir(data_dir: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    _json_owners(monkeypatch)
    with EmbeddedBroker(data_dir=data_dir) as b:
        bs = b.bootstrap_servers
        open_producer = do_transactions(bs)
        do_share_work(bs)
        before = _state(b)
        del open_producer
    monkeypatch.undo()
    assert _formats(data_dir) == {SHARE_STATE_TOPIC: {"json"}, TRANSACTION_STATE_TOPIC: {"json"}}
    return before


def _check_clients(bs: str) -> None:
    """The migrated state, as clients see it."""
    from confluent_kafka import Producer

    from snakka.client import ShareConsumer

    p = Producer({"bootstrap.servers": bs, "transactional.id": "tx-open", "linger.ms": 0})
    p.init_transactions(30)  # the open transaction is aborted before this returns
    assert ck_read_to_end(bs, TXN_TOPIC, "read_committed") == [b"committed"]
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": GROUP, "fetch.max.wait.ms": 200})
    want = set(RELEASED) | set(IN_FLIGHT)
    got: dict[int, int] = {}
    try:
        c.subscribe([SHARE_TOPIC])

        def poll() -> bool:
            for r in c.poll(0.5):
                got[r.offset] = r.delivery_count
            return set(got) >= want

        wait_until(poll, 30, "the released and in-flight records again")
    finally:
        c.close()
    assert not set(got) & (set(ACCEPTED) | set(REJECTED)), got
    assert all(got[o] == 2 for o in RELEASED), got  # delivered once before the restart


def test_json_data_dir_is_migrated_to_kafka_records(tmp_path: Path, monkeypatch, caplog):
    data_dir = str(tmp_path / "data")
    before = _make_json_dir(data_dir, monkeypatch)
    caplog.set_level(logging.INFO, logger="snakka")
    with EmbeddedBroker(data_dir=data_dir) as b:
        assert _state(b) == before
        migrated = [r.getMessage() for r in caplog.records if MIGRATED in r.getMessage()]
        assert len(migrated) == 2, migrated  # one line per topic
        assert _formats(data_dir) == {SHARE_STATE_TOPIC: {"kafka"},
                                      TRANSACTION_STATE_TOPIC: {"kafka"}}
        caplog.clear()
        b.restart()  # once: nothing left to migrate
        assert not [r for r in caplog.records if MIGRATED in r.getMessage()]
        assert _state(b) == before
        _check_clients(b.bootstrap_servers)


def test_crash_mid_migration_converges(tmp_path: Path, monkeypatch, caplog):
    """The new records are written but the log start never moved (a crash before
    DeleteRecords): both formats are on disk; the next start migrates again."""
    data_dir = str(tmp_path / "data")
    before = _make_json_dir(data_dir, monkeypatch)
    monkeypatch.setattr(ReplicaManager, "delete_records_before", lambda *a, **k: None)
    with EmbeddedBroker(data_dir=data_dir) as b:
        assert _state(b) == before
    monkeypatch.undo()
    assert _formats(data_dir) == {SHARE_STATE_TOPIC: {"json", "kafka"},
                                  TRANSACTION_STATE_TOPIC: {"json", "kafka"}}
    caplog.set_level(logging.INFO, logger="snakka")
    with EmbeddedBroker(data_dir=data_dir) as b:
        assert _state(b) == before
        assert len([r for r in caplog.records if MIGRATED in r.getMessage()]) == 2
        assert _formats(data_dir) == {SHARE_STATE_TOPIC: {"kafka"},
                                      TRANSACTION_STATE_TOPIC: {"kafka"}}
        _check_clients(b.bootstrap_servers)
