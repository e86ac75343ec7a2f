"""Real-client work that leaves state in ``__transaction_state`` and ``__share_group_state``
(issue 17's format tests: tests/integration/test_coordinator_state_format.py and
tests/reference/test_coordinator_state_records.py), and readers of what a data directory holds.

The work: a committed transaction (``tx-commit``) and an open one (``tx-open``, its record in
the log, never ended) by confluent-kafka producers on ``tx-out``; ten records on ``sh`` taken by
one share consumer of group ``sg`` (snakka's ShareConsumer, explicit acknowledgement):
offsets 0-1 released, 2-4 accepted, 5 rejected, 6-9 left in flight when it closes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from snakka.records import Record
from snakka.records.record import iter_records

from .helpers import ck_create_topic, run_async, wait_until

SHARE_TOPIC, TXN_TOPIC, GROUP = "sh", "tx-out", "sg"
RELEASED, ACCEPTED, REJECTED, IN_FLIGHT = range(0, 2), range(2, 5), range(5, 6), range(6, 10)


def do_transactions(bs: str, prefix: str = "") -> object:
    """One committed and one open transaction (ids and topic behind ``prefix``); returns the
    open one's producer (keep it referenced until the broker stops)."""
    from confluent_kafka import Producer

    ck_create_topic(bs, prefix + TXN_TOPIC, 1)
    p = Producer({"bootstrap.servers": bs, "transactional.id": prefix + "tx-commit",
                  "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(prefix + TXN_TOPIC, b"committed")
    p.commit_transaction(30)
    q = Producer({"bootstrap.servers": bs, "transactional.id": prefix + "tx-open",
                  "linger.ms": 0})
    q.init_transactions(30)
    q.begin_transaction()
    q.produce(prefix + TXN_TOPIC, b"open")
    q.flush(30)
    return q


def do_share_work(bs: str) -> None:
    from confluent_kafka import Producer

    from snakka.client import AcknowledgeType, ShareAdmin, ShareConsumer

    ck_create_topic(bs, SHARE_TOPIC, 1)
    pr = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(10):
        pr.produce(SHARE_TOPIC, b"v%d" % i)
    pr.flush(30)

    async def earliest() -> None:
        async with ShareAdmin(bs) as a:
            await a.alter_group_configs(GROUP, {"share.auto.offset.reset": "earliest"})

    run_async(earliest(), timeout=30)
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": GROUP,
                       "share.acknowledgement.mode": "explicit", "fetch.max.wait.ms": 200})
    try:
        c.subscribe([SHARE_TOPIC])
        got: list = []
        wait_until(lambda: got.extend(c.poll(0.5)) or len(got) >= 10, 30, "10 share records")
        for r in got:
            if r.offset in RELEASED:
                c.acknowledge(r, AcknowledgeType.RELEASE)
            elif r.offset in ACCEPTED:
                c.acknowledge(r, AcknowledgeType.ACCEPT)
            elif r.offset in REJECTED:
                c.acknowledge(r, AcknowledgeType.REJECT)
        c.commit_sync()
    finally:
        c.close()


def stored(data_dir: str | Path, topic: str) -> Iterator[tuple[int, Record]]:
    """(partition, record) of every record in the topic's segment files."""
    for d in sorted(Path(data_dir).glob(f"{topic}-*")):
        p = int(d.name.rsplit("-", 1)[1])
        for f in sorted(d.glob("*.log")):
            yield from ((p, r) for r in iter_records(f.read_bytes()))


def segment_paths(data_dir: str | Path, topic: str) -> list[str]:
    """The non-empty segment files of ``topic`` (what kafka-dump-log.sh is given)."""
    return [str(f) for f in sorted(Path(data_dir).glob(f"{topic}-*/*.log")) if f.stat().st_size]
