"""``__consumer_offsets`` and ``__transaction_state`` are compacted topics, as in Kafka (issue 13).

- A data directory written before compaction existed (topics created with ``retention.ms=-1``
  and no policy, kept small by snapshot-and-trim: a restatement of the live records followed by
  DeleteRecords) is read as it is, and the topics get ``cleanup.policy=compact`` at start-up
  through the controller, logged once. The old data is generated here by appending exactly
  what the old code appended (same records, same restatement, same DeleteRecords).
- Offsets committed by real clients, and transactional ids, survive a restart after the log
  cleaner compacted the topics (records removed, gaps in offsets, tombstones whose earlier
  records are gone).
"""

from __future__ import annotations

import asyncio
import logging

from snakka.client.admin import Admin
from snakka.groups.coordinator import OFFSETS_TOPIC
from snakka.groups.partitioning import offsets_partition
from snakka.testing import EmbeddedBroker
from snakka.txn.coordinator import TRANSACTION_STATE_TOPIC

from .helpers import ck_create_topic, raw_connect, run_async

# What the old CoordinatorLog created both topics with (no cleanup.policy).
LEGACY_CONFIGS = {"retention.ms": "-1", "retention.bytes": "-1",
                  "segment.bytes": str(16 * 1024 * 1024)}
ADOPTED = "cleanup.policy=compact set on the existing topic"


def on_loop(b: EmbeddedBroker, coro):
    """Run ``coro`` on the embedded broker's event loop (its objects are not thread-safe)."""
    return asyncio.run_coroutine_threadsafe(coro, b._loop).result(30)


async def _overrides(bootstrap: str, topic: str) -> dict[str, str]:
    async with Admin(bootstrap) as admin:
        return await admin.topic_overrides(topic)


def _commit(bootstrap: str, group: str, offsets: dict[int, int], topic: str = "t") -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                 asynchronous=False)
    finally:
        c.close()


def _committed(bootstrap: str, group: str, partitions, topic: str = "t") -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


async def _init_pid(bootstrap: str, tid: str) -> tuple[int, int]:
    from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest

    conn = await raw_connect(bootstrap)
    try:
        r = await conn.send(InitProducerIdRequest(transactional_id=tid,
                                                  transaction_timeout_ms=30_000))
    finally:
        await conn.close()
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def test_a_data_dir_kept_by_snapshot_and_trim_is_read_and_its_topics_become_compacted(caplog):
    caplog.set_level(logging.INFO, logger="snakka.coordinator")
    config = {"offsets.topic.num.partitions": "4", "transaction.state.log.num.partitions": "2",
              "log.cleaner.enable": "false"}
    with EmbeddedBroker(config=config) as b:
        bs = b.bootstrap_servers
        ck_create_topic(bs, "t", 3)

        async def legacy_topics():
            c = b.broker.controller
            for name, n in ((OFFSETS_TOPIC, 4), (TRANSACTION_STATE_TOPIC, 2)):
                _ti, recs = c.create_topic_now(name, n, dict(LEGACY_CONFIGS))
                await c.commit_metadata(recs)

        on_loop(b, legacy_topics())
        for i in range(20):
            _commit(bs, "g", {p: 10 * i + p for p in range(3)})
        _commit(bs, "gone", {0: 5})
        pid, epoch = run_async(_init_pid(bs, "tx"))
        p = offsets_partition("g", 4)

        async def old_trim():
            # The old CoordinatorLog.maybe_trim: restate the live records, then DeleteRecords.
            groups = b.broker.groups
            pl = b.broker.replicas.get_log(OFFSETS_TOPIC, p)
            start = pl.log_end_offset
            live = [(gr.key, gr.value) for gr in groups._live[p].values()]
            groups.log.append(p, live)
            b.broker.replicas.delete_records_before(pl, start, checkpoint=False)
            return start

        start = on_loop(b, old_trim())
        assert start > 0
        # DeleteGroups after the trim: tombstones whose earlier records may be gone.
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bs})
        admin.delete_consumer_groups(["gone"], request_timeout=30)["gone"].result(30)
        assert all("cleanup.policy" not in run_async(_overrides(bs, t))
                   for t in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC))

        caplog.clear()
        b.restart()
        adopted = [r.getMessage() for r in caplog.records if ADOPTED in r.getMessage()]
        assert sorted(m.split(":")[0] for m in adopted) == sorted(
            [OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC]), adopted
        for t in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            assert run_async(_overrides(bs, t)) == dict(LEGACY_CONFIGS,
                                                        **{"cleanup.policy": "compact"})
        for t, n in ((OFFSETS_TOPIC, 4), (TRANSACTION_STATE_TOPIC, 2)):
            for q in range(n):  # the partition logs follow the new config (the cleaner reads it)
                assert b.broker.replicas.get_log(t, q).config.cleanup_policy == ("compact",)
        assert b.broker.replicas.get_log(OFFSETS_TOPIC, p).log_start_offset == start
        assert _committed(bs, "g", range(3)) == {q: 190 + q for q in range(3)}
        assert _committed(bs, "gone", [0]) == {0: -1001}  # OFFSET_INVALID: deleted
        assert run_async(_init_pid(bs, "tx")) == (pid, epoch + 1)

        caplog.clear()
        b.restart()  # the policy is set once
        assert not [r for r in caplog.records if ADOPTED in r.getMessage()]
        assert _committed(bs, "g", range(3)) == {q: 190 + q for q in range(3)}
