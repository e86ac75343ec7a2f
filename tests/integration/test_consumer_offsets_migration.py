"""A data directory of an older snakka (``__consumer_offsets`` as JSON records) is migrated to
Kafka's record format at start-up, once, logged, with nothing lost, even when a crash
interrupts the migration (issue 17).

The old directory is made by a broker whose group coordinator writes JSON (``GroupCoordinator
.SERDE = JSON_SERDE``): confluent-kafka groups of both protocols commit offsets, one classic
member stays in its group, a transactional producer leaves offsets pending. A crash between
writing the restated records and moving the log start is simulated by a restart where the log
start does not move (``delete_records_before`` does nothing): the next start replays both
formats, restates again and converges.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, Producer, TopicPartition

from snakka.coordinator_log import JSON_SERDE
from snakka.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator
from snakka.groups.records import KAFKA_SERDE
from snakka.replica.manager import ReplicaManager
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, wait_until

MIGRATED = "migrated from snakka's JSON records"
CONFIG = {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
          "log.cleaner.enable": "false"}


def _committed(bs: str, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition("t", q) for q in range(3)], timeout=30)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
    finally:
        c.close()


def _assigned(c: Consumer) -> bool:
    c.poll(0.1)
    return len(c.assignment()) == 3


def _keys(b: EmbeddedBroker) -> list[bytes]:
    pl = b.broker.replicas.get_log(OFFSETS_TOPIC, 0)
    return [r.key for r in pl.iter_records() if r.key is not None]


def _write_json_directory(b: EmbeddedBroker) -> Consumer:
    bs = b.bootstrap_servers
    ck_create_topic(bs, "t", 3)
    for gid, proto, base in (("kip848", "consumer", 20), ("cls", "classic", 10)):
        c = Consumer({"bootstrap.servers": bs, "group.id": gid, "group.protocol": proto,
                      "enable.auto.commit": False})
        c.subscribe(["t"])
        wait_until(lambda c=c: _assigned(c), 60, f"{gid} assigned")
        c.commit(offsets=[TopicPartition("t", q, base + q) for q in range(3)],
                 asynchronous=False)
        if gid == "kip848":
            c.close()
    tp = Producer({"bootstrap.servers": bs, "transactional.id": "mig-tx"})
    tp.init_transactions(30)
    tp.begin_transaction()
    meta = Consumer({"bootstrap.servers": bs, "group.id": "txg"})
    tp.send_offsets_to_transaction([TopicPartition("t", 0, 77)], meta.consumer_group_metadata(),
                                   30)
    meta.close()
    # left open: its offset stays pending across the migration; the restarted transaction
    # coordinator aborts it later (or the test ends first)
    return c  # the classic member, still in its group


def test_json_directory_migrates_once_and_survives_a_crash_mid_migration(caplog, monkeypatch):
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(GroupCoordinator, "SERDE", JSON_SERDE)
    with EmbeddedBroker(config=CONFIG) as b:
        member = _write_json_directory(b)
        try:
            keys = _keys(b)
            assert keys and all(k.startswith(b"[") for k in keys)  # the old format
            pending = b.broker.groups.offsets.pending("txg")
            assert [tp for by_tp in pending.values() for tp in by_tp] == [("t", 0)]
            before = b.broker.groups.classic.describe("cls")

            # 1. a crash mid-migration: the restated records are written, the log start
            #    does not move past the JSON records
            monkeypatch.setattr(GroupCoordinator, "SERDE", KAFKA_SERDE)
            monkeypatch.setattr(ReplicaManager, "delete_records_before",
                                lambda *a, **k: None)
            caplog.clear()
            b.restart()
            assert any(MIGRATED in r.getMessage() for r in caplog.records)
            keys = _keys(b)
            assert any(k.startswith(b"[") for k in keys) and any(
                KAFKA_SERDE.recognizes(k) for k in keys)

            # 2. the next start replays both formats, restates again and converges
            monkeypatch.undo()
            monkeypatch.setattr(GroupCoordinator, "SERDE", KAFKA_SERDE)
            caplog.clear()
            b.restart()
            assert sum(MIGRATED in r.getMessage() for r in caplog.records) == 1
            keys = _keys(b)
            assert keys and all(KAFKA_SERDE.recognizes(k) for k in keys), "JSON left"
            bs = b.bootstrap_servers
            assert _committed(bs, "cls") == {0: 10, 1: 11, 2: 12}
            assert _committed(bs, "kip848") == {0: 20, 1: 21, 2: 22}
            groups = b.broker.groups
            after = groups.classic.describe("cls")
            assert (after.state, after.protocol, [m.member_id for m in after.members]) == (
                before.state, before.protocol, [m.member_id for m in before.members])
            assert groups.consumer.describe("kip848").group_epoch >= 1
            pending = groups.offsets.pending("txg")  # still pending, in a transactional batch
            assert [tp for by_tp in pending.values() for tp in by_tp] == [("t", 0)]

            # 3. once: a later start has nothing to migrate
            caplog.clear()
            b.restart()
            assert not any(MIGRATED in r.getMessage() for r in caplog.records)
            assert _committed(b.bootstrap_servers, "cls") == {0: 10, 1: 11, 2: 12}
        finally:
            member.close()


# -- transactional offsets in Kafka's format under the log cleaner ---------------------------
CLEANING = {"offsets.topic.num.partitions": "1", "log.roll.ms": "200",
            "log.cleaner.backoff.ms": "50", "log.cleaner.min.cleanable.ratio": "0.01",
            "log.cleaner.delete.retention.ms": "100"}


def _offset_records(b: EmbeddedBroker, group: str) -> list[int]:
    """The offsets of ``group``'s OffsetCommit records still stored (the cleaner's view)."""
    import asyncio

    async def read() -> list[int]:
        pl = b.broker.replicas.get_log(OFFSETS_TOPIC, 0)
        out = []
        for r in pl.iter_records(1 << 20):
            fact = KAFKA_SERDE.deserialize(r.key, r.value)
            if fact and fact[0][0] == 1 and fact[0][1] == group and fact[1] is not None:
                out.append(fact[1]["message"].offset)
        return out

    return asyncio.run_coroutine_threadsafe(read(), b._loop).result(30)


def test_aborted_transactional_offsets_are_compacted_away_and_committed_ones_kept():
    """An aborted TxnOffsetCommit is an OffsetCommit record of the same key written after the
    committed offset: the cleaner drops the aborted data (Kafka's cleaner does), never the
    committed record before it; a committed transaction's offset replaces the older one."""
    with EmbeddedBroker(config=CLEANING) as b:
        if getattr(b.broker, "log_cleaner", None) is None:
            import pytest
            pytest.skip("no log cleaner in this build")
        bs = b.bootstrap_servers
        ck_create_topic(bs, "t", 3)
        c = Consumer({"bootstrap.servers": bs, "group.id": "g", "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("t", 0, 5)], asynchronous=False)
        c.close()
        tp = Producer({"bootstrap.servers": bs, "transactional.id": "cmp-tx"})
        tp.init_transactions(30)
        meta = Consumer({"bootstrap.servers": bs, "group.id": "g"})
        for commit, offset in ((False, 99), (True, 7), (False, 98)):
            tp.begin_transaction()
            tp.send_offsets_to_transaction([TopicPartition("t", 1 if commit else 0, offset)],
                                           meta.consumer_group_metadata(), 30)
            tp.commit_transaction(30) if commit else tp.abort_transaction(30)
        meta.close()
        assert sorted(_offset_records(b, "g")) == [5, 7, 98, 99]  # before the cleaner
        filler = Consumer({"bootstrap.servers": bs, "group.id": "filler",
                           "enable.auto.commit": False})
        n = {"i": 0}

        def compacted() -> bool:
            n["i"] += 1
            filler.commit(offsets=[TopicPartition("t", 0, n["i"])], asynchronous=False)
            return sorted(_offset_records(b, "g")) == [5, 7]

        try:
            wait_until(compacted, 120, "aborted offsets cleaned", interval=0.05)
        finally:
            filler.close()
        assert n["i"] > 1
        assert _committed(bs, "g") == {0: 5, 1: 7}
        b.restart()
        assert _committed(bs, "g") == {0: 5, 1: 7}
