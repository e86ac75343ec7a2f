"""Issue 4 acceptance: share groups (KIP-932) with real share consumers against snakka.

Both confluent-kafka's ``ShareConsumer`` (librdkafka 2.16 share-consumer preview) and snakka's
own ``ShareConsumer`` (snakka.client) are driven through one small adapter, so every behaviour is
checked with the client kinds it matters for:

* 5 consumers on a 2-partition topic with 100,000 records: every record is acknowledged exactly
  once across the group (nothing lost: the share-partition start offsets reach the log end and a
  new member gets nothing), none processed twice (no releases, no lock expiries in that run);
  one test per client kind, plus a mixed group;
* Release -> redelivered to a member with delivery count + 1; Reject -> never delivered again;
* a consumer that stops acknowledging -> its records come back after the acquisition lock
  (``share.record.lock.duration.ms`` = 1000, the smallest Kafka's validation allows once
  ``group.share.min.record.lock.duration.ms`` is lowered to its minimum, 1000);
* a poison record is archived after ``share.delivery.count.limit`` deliveries (default 5);
* broker restart in the middle: acknowledged records never come back, in-flight ones do (with
  their delivery count kept);
* admin: share groups start at ``latest``; reset the start offset to earliest / a timestamp and
  describe the lag (snakka.client.share_admin).

Group configs go through IncrementalAlterConfigs on resource type GROUP, as a user would do.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from snakka.client.share_admin import ShareAdmin
from snakka.client.share_consumer import AcknowledgeType, ShareConsumer
from snakka.protocol.errors import ErrorCode

from .helpers import ck_create_topic, now_ms, run_async

pytestmark = pytest.mark.timeout(180)

N_RECORDS = 100_000
N_CONSUMERS = 5
LOCK_MS = 1000
CONFIG = {
    # Allow the smallest lock duration Kafka's config validation accepts (1 s).
    "group.share.min.record.lock.duration.ms": "1000",
    # Members learn assignment changes at the next heartbeat; keep that short for the test.
    "group.share.min.heartbeat.interval.ms": "200",
    "group.share.heartbeat.interval.ms": "500",
}


# -- clients -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Got:
    topic: str
    partition: int
    offset: int
    delivery_count: int
    value: bytes | None
    raw: Any = None


class SnakkaShare:
    kind = "snakka"

    def __init__(self, bs: str, group: str, *, explicit: bool = False, **extra: Any) -> None:
        self.c = ShareConsumer({"bootstrap.servers": bs, "group.id": group,
                                "share.acknowledgement.mode":
                                    "explicit" if explicit else "implicit",
                                "fetch.max.wait.ms": 200, **extra})

    def subscribe(self, topics: list[str]) -> None:
        self.c.subscribe(topics)

    def poll(self, timeout: float) -> list[Got]:
        return [Got(r.topic, r.partition, r.offset, r.delivery_count, r.value, r)
                for r in self.c.poll(timeout)]

    def ack(self, g: Got, t: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        self.c.acknowledge(g.raw, t)

    def commit(self) -> dict:
        return {(tp.topic, tp.partition): (e.code if e is not None else 0)
                for tp, e in self.c.commit_sync(10).items()}

    def close(self) -> None:
        self.c.close(10)


class ConfluentShare:
    kind = "confluent"

    def __init__(self, bs: str, group: str, *, explicit: bool = False, **extra: Any) -> None:
        from confluent_kafka import ShareConsumer as CkShareConsumer

        self.c = CkShareConsumer({"bootstrap.servers": bs, "group.id": group,
                                  "share.acknowledgement.mode":
                                      "explicit" if explicit else "implicit", **extra})

    def subscribe(self, topics: list[str]) -> None:
        self.c.subscribe(topics)

    def poll(self, timeout: float) -> list[Got]:
        out = []
        for m in self.c.poll(timeout):
            if m.error() is not None:
                continue  # informational events (e.g. partition EOF) carry no record
            out.append(Got(m.topic(), m.partition(), m.offset(), m.delivery_count(), m.value(),
                           m))
        return out

    def ack(self, g: Got, t: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        from confluent_kafka import AcknowledgeType as CkAck

        self.c.acknowledge(g.raw, CkAck(int(t)))

    def commit(self) -> dict:
        out = {}
        for tp, e in (self.c.commit_sync(10) or {}).items():
            out[(tp.topic, tp.partition)] = 0 if e is None else e.args[0].code()
        return out

    def close(self) -> None:
        self.c.close()


KINDS = {"snakka": SnakkaShare, "confluent": ConfluentShare}


# -- helpers -------------------------------------------------------------------------------------
def admin(bs: str, fn):
    async def go():
        async with ShareAdmin(bs) as a:
            return await fn(a)
    return run_async(go(), timeout=30)


def group_configs(bs: str, group: str, **configs: str) -> None:
    admin(bs, lambda a: a.alter_group_configs(
        group, {k.replace("_", "."): v for k, v in configs.items()}))


def produce(bs: str, topic: str, n: int, partitions: int, *, start: int = 0,
            timestamp: int | None = None) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": max(100_000, n)})
    for i in range(start, start + n):
        kw = {"timestamp": timestamp} if timestamp is not None else {}
        p.produce(topic, value=b"%d" % i, partition=i % partitions, **kw)
    assert p.flush(30) == 0


def topic_with_records(bs: str, topic: str, group: str, n: int, partitions: int = 1,
                       **configs: str) -> None:
    """A topic with ``n`` records and a group that starts at the earliest offset."""
    ck_create_topic(bs, topic, partitions)
    group_configs(bs, group, share_auto_offset_reset="earliest", **configs)
    produce(bs, topic, n, partitions)


def member(kind: str, bs: str, group: str, topic: str, **cfg: Any):
    """An explicit-mode share consumer of ``kind`` subscribed to ``topic``."""
    c = KINDS[kind](bs, group, explicit=True, **cfg)
    c.subscribe([topic])
    return c


def poll_until(c, pred, timeout: float, what: str, step: float = 0.2) -> list[Got]:
    got: list[Got] = []
    deadline = time.monotonic() + timeout
    while not pred(got):
        assert time.monotonic() < deadline, f"timed out waiting for {what}: got {got[:20]}"
        got += c.poll(step)
    return got


def drain_nothing(c, seconds: float) -> list[Got]:
    """Poll for ``seconds``; returns whatever arrived (expected: nothing)."""
    got: list[Got] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += c.poll(0.2)
    return got


def spso_and_lag(bs: str, group: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    offs = admin(bs, lambda a: a.describe_share_group_offsets(
        group, {topic: list(range(partitions))}))
    return {p: (o.start_offset, o.lag) for (t, p), o in offs.items() if t == topic}


# -- 5 consumers x 100,000 records -----------------------------------------------------------
def consume_with_group(bs: str, group: str, topic: str, kinds: list[str]) -> list[Got]:
    consumers = [KINDS[k](bs, group) for k in kinds]
    for c in consumers:
        c.subscribe([topic])
    seen: list[Got] = []
    lock = threading.Lock()
    distinct: set[tuple[int, int]] = set()
    done = threading.Event()
    errors: list[BaseException] = []

    def work(c) -> None:
        try:
            while not done.is_set():
                batch = c.poll(0.2)
                if not batch:
                    continue
                with lock:
                    seen.extend(Got(g.topic, g.partition, g.offset, g.delivery_count, None)
                                for g in batch)
                    distinct.update((g.partition, g.offset) for g in batch)
                    if len(distinct) >= N_RECORDS:
                        done.set()
        except BaseException as e:  # surfaced in the test thread
            errors.append(e)
            done.set()

    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()
    done.wait(120)
    for t in threads:
        t.join(10)
    for c in consumers:
        # Implicit mode accepts the last poll's records on the next poll or commit, not on
        # close (Kafka's and librdkafka's rule): commit first.
        assert set(c.commit().values()) <= {0}
        c.close()
    assert not errors, errors
    return seen


@pytest.mark.parametrize("kinds", [
    ["snakka"] * N_CONSUMERS,
    ["confluent"] * N_CONSUMERS,
    ["snakka", "confluent", "snakka", "confluent", "snakka"],
], ids=["snakka", "confluent", "mixed"])
def test_five_consumers_share_100k_records_exactly_once(snakka_broker_factory, kinds):
    b = snakka_broker_factory(config=CONFIG)
    bs = b.bootstrap_servers
    topic_with_records(bs, "work", "workers", N_RECORDS, 2)
    seen = consume_with_group(bs, "workers", "work", kinds)
    counts = Counter((g.partition, g.offset) for g in seen)
    expected = {(i % 2, i // 2) for i in range(N_RECORDS)}
    assert set(counts) == expected, "records lost"
    twice = {k: n for k, n in counts.items() if n > 1}
    assert not twice, f"{len(twice)} records processed twice, e.g. {list(twice.items())[:5]}"
    # (A delivery count above 1 is fine: a member gives back records it fetched but had not
    # returned when the coordinator moved their partition to a newcomer.)
    # Every record is acknowledged: the start offsets reached the log end, nothing is left.
    assert spso_and_lag(bs, "workers", "work", 2) == {0: (N_RECORDS // 2, 0),
                                                     1: (N_RECORDS // 2, 0)}
    late = KINDS[kinds[0]](bs, "workers")
    late.subscribe(["work"])
    assert drain_nothing(late, 1.0) == []
    late.close()


# -- acknowledgement types -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["snakka", "confluent"])
def test_release_redelivers_with_a_higher_count_and_reject_archives(snakka_broker, kind):
    bs = snakka_broker.bootstrap_servers
    topic_with_records(bs, "acks", "g-acks", 10)
    a = member(kind, bs, "g-acks", "acks")
    got = poll_until(a, lambda g: len(g) >= 10, 20, "10 records")
    assert [(g.offset, g.delivery_count) for g in got] == [(i, 1) for i in range(10)]
    for g in got:
        a.ack(g, AcknowledgeType.RELEASE if g.offset == 3 else
              AcknowledgeType.REJECT if g.offset == 4 else AcknowledgeType.ACCEPT)
    assert a.commit() == {("acks", 0): 0}
    # A second member joins; the released record goes to someone, delivery count 2.
    b = member(kind, bs, "g-acks", "acks")
    redelivered: list[Got] = []
    deadline = time.monotonic() + 20
    while not redelivered:
        assert time.monotonic() < deadline, "released record never came back"
        for c in (a, b):
            for g in c.poll(0.2):
                redelivered.append(g)
                c.ack(g, AcknowledgeType.ACCEPT)
            c.commit()
    assert [(g.offset, g.delivery_count, g.value) for g in redelivered] == [(3, 2, b"3")]
    # The rejected record (and everything accepted) never comes back.
    assert drain_nothing(a, 0.6) + drain_nothing(b, 0.6) == []
    assert spso_and_lag(bs, "g-acks", "acks", 1) == {0: (10, 0)}
    a.close()
    b.close()


@pytest.mark.parametrize("kind", ["snakka", "confluent"])
def test_unacknowledged_records_come_back_after_the_lock(snakka_broker_factory, kind):
    b = snakka_broker_factory(config=CONFIG)
    bs = b.bootstrap_servers
    topic_with_records(bs, "locks", "g-locks", 5, share_record_lock_duration_ms=str(LOCK_MS))
    stuck = member(kind, bs, "g-locks", "locks")
    held = poll_until(stuck, lambda g: len(g) >= 5, 20, "5 records")
    if kind == "snakka":
        assert stuck.c.acquisition_lock_timeout_ms == LOCK_MS
    t0 = time.monotonic()
    other = member(kind, bs, "g-locks", "locks")
    back = poll_until(other, lambda g: len(g) >= 5, 20, "the records after the lock")
    assert time.monotonic() - t0 >= LOCK_MS / 1000 * 0.8
    assert [(g.offset, g.delivery_count) for g in back] == [(i, 2) for i in range(5)]
    # The stuck member's late acknowledgements are refused: the records are another member's.
    for g in held:
        stuck.ack(g)
    assert stuck.commit() == {("locks", 0): ErrorCode.INVALID_RECORD_STATE}
    for g in back:
        other.ack(g)
    assert other.commit() == {("locks", 0): 0}
    assert spso_and_lag(bs, "g-locks", "locks", 1) == {0: (5, 0)}
    stuck.close()
    other.close()


@pytest.mark.parametrize("kind", ["snakka", "confluent"])
def test_poison_record_is_archived_after_the_delivery_count_limit(snakka_broker, kind):
    bs = snakka_broker.bootstrap_servers
    topic_with_records(bs, "poison", "g-poison", 1)
    c = member(kind, bs, "g-poison", "poison")
    counts = []
    deadline = time.monotonic() + 30
    while len(counts) < 5:
        assert time.monotonic() < deadline, f"deliveries so far: {counts}"
        for g in c.poll(0.2):
            counts.append(g.delivery_count)
            c.ack(g, AcknowledgeType.RELEASE)  # processing fails every time
        c.commit()
    assert counts == [1, 2, 3, 4, 5]  # share.delivery.count.limit defaults to 5
    assert drain_nothing(c, 1.0) == []  # archived
    assert spso_and_lag(bs, "g-poison", "poison", 1) == {0: (1, 0)}
    c.close()


# -- broker restart --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["snakka", "confluent"])
def test_broker_restart_keeps_acknowledged_and_returns_in_flight(snakka_broker_factory, kind):
    b = snakka_broker_factory(config=CONFIG)
    bs = b.bootstrap_servers
    topic_with_records(bs, "restart", "g-restart", 40)
    c = member(kind, bs, "g-restart", "restart",
               **({"max.poll.records": 10} if kind == "snakka" else {}))
    got = poll_until(c, lambda g: len(g) >= 10, 20, "records")
    acked = {g.offset for g in got[:len(got) // 2]}
    for g in got:
        if g.offset in acked:
            c.ack(g)
    assert c.commit() == {("restart", 0): 0}
    in_flight = {g.offset for g in got} - acked  # returned by poll, held, not acknowledged
    b.restart()  # while the member holds them
    c.close()  # its session died with the connection; it cannot give anything back
    d = member(kind, bs, "g-restart", "restart")
    rest: list[Got] = []

    def all_back(gs: list[Got]) -> bool:
        for g in gs[len(rest):]:
            d.ack(g)
        rest[:] = gs
        return {g.offset for g in gs} >= set(range(40)) - acked
    poll_until(d, all_back, 30, "every unacknowledged record after the restart")
    assert d.commit() == {("restart", 0): 0}
    offsets = Counter(g.offset for g in rest)
    assert not (set(offsets) & acked), "acknowledged records came back after the restart"
    assert set(offsets) == set(range(40)) - acked and max(offsets.values()) == 1
    # The held records kept their delivery count across the restart: this is at least their
    # second delivery (records the client had fetched but not returned count as in flight too).
    assert all(g.delivery_count >= 2 for g in rest if g.offset in in_flight)
    assert spso_and_lag(bs, "g-restart", "restart", 1) == {0: (40, 0)}
    d.close()


# -- admin: start offsets and lag ---------------------------------------------------------------------
def test_admin_start_offsets_and_lag(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "adm", 1)
    t_old = now_ms() - 60_000
    produce(bs, "adm", 20, 1, timestamp=t_old)
    t_new = now_ms()
    produce(bs, "adm", 10, 1, start=20, timestamp=t_new)
    # A share group starts at the log end by default (share.auto.offset.reset=latest).
    c = SnakkaShare(bs, "g-adm")
    c.subscribe(["adm"])
    assert drain_nothing(c, 1.0) == []
    produce(bs, "adm", 5, 1, start=30)
    got = poll_until(c, lambda g: len(g) >= 5, 20, "records produced after joining")
    assert [g.offset for g in got] == [30, 31, 32, 33, 34]
    assert c.commit() == {("adm", 0): 0}  # implicit mode: accepts what poll returned
    c.close()
    assert spso_and_lag(bs, "g-adm", "adm", 1) == {0: (35, 0)}
    info = admin(bs, lambda a: a.describe_share_groups(["g-adm"]))["g-adm"]
    assert info.state == "Empty" and info.members == []
    assert ("g-adm", "Empty") in admin(bs, lambda a: a.list_share_groups())
    # Reset to earliest: everything is lag again and is delivered again.
    plan = admin(bs, lambda a: a.reset_share_group_offsets("g-adm", "adm", to="earliest"))
    assert plan == {("adm", 0): 0}
    assert spso_and_lag(bs, "g-adm", "adm", 1) == {0: (0, 35)}
    c = SnakkaShare(bs, "g-adm")
    c.subscribe(["adm"])
    got = poll_until(c, lambda g: len(g) >= 35, 20, "all 35 records")
    assert sorted(g.offset for g in got) == list(range(35))
    assert c.commit() == {("adm", 0): 0}
    c.close()
    # Reset to a timestamp: the first record at or after it.
    plan = admin(bs, lambda a: a.reset_share_group_offsets("g-adm", "adm", to="timestamp",
                                                          value=t_new))
    assert plan == {("adm", 0): 20}
    assert spso_and_lag(bs, "g-adm", "adm", 1) == {0: (20, 15)}
    c = SnakkaShare(bs, "g-adm")
    c.subscribe(["adm"])
    got = poll_until(c, lambda g: len(g) >= 15, 20, "records from the timestamp on")
    assert sorted(g.offset for g in got) == list(range(20, 35))
    # A group with members refuses an offset change.
    with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
        admin(bs, lambda a: a.reset_share_group_offsets("g-adm", "adm", to="earliest"))
    c.close()
