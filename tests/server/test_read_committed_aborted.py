"""Fetch's AbortedTransactions under read_committed, as a real read_committed consumer
(librdkafka) uses them to drop aborted records. Producers still cannot write transactions,
so the log state is built directly on the stopped broker's partition log (issue 11, item 2)."""

from __future__ import annotations

import asyncio
import os

from confluent_kafka import Producer
from integration.helpers import ck_read_to_end
from storage.helpers import append, batch  # tests/ is on sys.path

from snakka.client.admin import Admin
from snakka.storage import LogConfig, UnifiedLog
from snakka.testing import EmbeddedBroker

PID, PID2 = 1000, 2000


def _txn(plog, pid, n, seq, tag):
    append(plog, batch(n, producer_id=pid, producer_epoch=0, base_sequence=seq,
                       is_transactional=True, tag=tag))


def test_read_committed_consumer_skips_aborted_records():
    with EmbeddedBroker() as b:
        async def create():
            async with Admin(b.bootstrap_servers) as admin:
                await admin.create_topic("tx", 1)

        asyncio.run(create())
        p = Producer({"bootstrap.servers": b.bootstrap_servers})
        p.produce("tx", b"plain-0", partition=0)
        p.produce("tx", b"plain-1", partition=0)
        assert p.flush(30) == 0
        b.stop()
        # Build the transactional state on the stopped broker's partition log.
        plog = UnifiedLog(os.path.join(b.data_dir, "tx-0"), LogConfig(), recover=False)
        assert plog.log_end_offset == 2
        _txn(plog, PID, 2, 0, "aborted")  # 2..3
        _txn(plog, PID2, 1, 0, "committed")  # 4
        append(plog, batch(1, tag="plain-x"))  # 5 (inside PID's open transaction span)
        plog.append_control_marker(PID, 0, False, 0)  # 6
        plog.append_control_marker(PID2, 0, True, 0)  # 7
        plog.close()
        b.start()
        committed = ck_read_to_end(b.bootstrap_servers, "tx", "read_committed")
        uncommitted = ck_read_to_end(b.bootstrap_servers, "tx", "read_uncommitted")
    assert not any(v.startswith(b"aborted") for v in committed), committed
    assert [v[:5] for v in committed] == [b"plain", b"plain", b"commi", b"plain"]
    assert sum(v.startswith(b"aborted") for v in uncommitted) == 2
