"""Durability across restarts, crashes and damaged files.

(a) Clean restart: topics (with configs and several partitions), their data, topic ids,
    partition counts and configs all come back; producing continues at the right offsets.
(b) kill -9 with strict durability (log.flush.interval.messages=1): every record whose produce
    was acknowledged before the SIGKILL is present afterwards, at the acknowledged offset.
(c) Damaged tail: a torn last batch (file truncated mid-batch), a corrupt last batch (one byte
    flipped) with the .index files deleted, and a corrupt last batch after a kill -9: the broker
    starts, earlier records are intact, the damaged batch is gone, producing continues at the
    right offset, and the broker log says it recovered/truncated.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict

import pytest

from .helpers import (
    ck_admin,
    ck_consume,
    ck_create_topic,
    ck_end_offsets,
    read_batches,
    run_async,
    segment_files,
    wait_until,
)


# -- helpers -----------------------------------------------------------------------------------
def _describe_topics(bs: str, names: list[str]) -> dict[str, tuple[str, int]]:
    """name -> (topic id as text, partition count), via confluent-kafka (Metadata v12+)."""
    from confluent_kafka import TopicCollection

    admin = ck_admin(bs)
    fs = admin.describe_topics(TopicCollection(names), request_timeout=20)
    out = {}
    for name, f in fs.items():
        d = f.result(20)
        out[name] = (str(d.topic_id), len(d.partitions))
    return out


def _topic_configs(bs: str, name: str) -> dict[str, tuple[str, str]]:
    """config name -> (value, source name), via confluent-kafka DescribeConfigs."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    res = ConfigResource(ResourceType.TOPIC, name)
    admin = ck_admin(bs)
    entries = admin.describe_configs([res], request_timeout=20)[res].result(20)
    # confluent-kafka 2.16 hands out ConfigEntry.source as a plain int.
    return {k: (e.value, ConfigSource(e.source).name) for k, e in entries.items()}


def _produce(bs: str, topic: str, items: list[tuple[int, bytes, bytes]], **cfg):
    """Produce (partition, key, value) items; returns [(partition, offset)] in order."""
    from confluent_kafka import Producer

    acked: dict[int, tuple[int, int]] = {}
    errors = []

    def cb(i):
        def f(err, msg):
            if err is not None:
                errors.append(err)
            else:
                acked[i] = (msg.partition(), msg.offset())
        return f

    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5, **cfg})
    for i, (part, k, v) in enumerate(items):
        p.produce(topic, key=k, value=v, partition=part, on_delivery=cb(i))
    assert p.flush(30) == 0
    assert not errors, errors[:5]
    return [acked[i] for i in range(len(items))]


# -- (a) clean restart -------------------------------------------------------------------------
def test_clean_restart_keeps_topics_ids_configs_and_data(snakka_broker):
    broker = snakka_broker
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "orders", 3, {"retention.ms": "86400000", "max.message.bytes": "200000",
                                      "segment.bytes": "65536"})
    ck_create_topic(bs, "audit", 1, {"cleanup.policy": "delete", "retention.bytes": "10485760"})
    items = [(i % 3, b"k%d" % i, b"order-%06d-" % i + os.urandom(40)) for i in range(3000)]
    acked = _produce(bs, "orders", items, **{"batch.size": 16384})  # batches << segment.bytes
    audit = [(0, b"a", b"audit-%d" % i) for i in range(50)]
    _produce(bs, "audit", audit)

    before_ids = _describe_topics(bs, ["orders", "audit"])
    before_cfg = {t: _topic_configs(bs, t) for t in ("orders", "audit")}
    before_ends = ck_end_offsets(bs, "orders", range(3))
    assert before_ids["orders"][1] == 3 and before_ids["audit"][1] == 1
    assert before_cfg["orders"]["retention.ms"] == ("86400000", "DYNAMIC_TOPIC_CONFIG")
    assert before_cfg["orders"]["max.message.bytes"] == ("200000", "DYNAMIC_TOPIC_CONFIG")
    assert before_cfg["audit"]["retention.bytes"] == ("10485760", "DYNAMIC_TOPIC_CONFIG")
    assert len(segment_files(broker.data_dir, "orders", 0, ".log")) > 1, \
        "segment.bytes=65536 should have rolled segments"

    broker.restart()

    assert _describe_topics(bs, ["orders", "audit"]) == before_ids
    assert {t: _topic_configs(bs, t) for t in ("orders", "audit")} == before_cfg
    assert ck_end_offsets(bs, "orders", range(3)) == before_ends
    got = ck_consume(bs, "orders", range(3), len(items), timeout=30)
    found = {(g.partition, g.offset): (g.key, g.value) for g in got}
    assert len(got) == len(items)
    for (part, k, v), loc in zip(items, acked, strict=True):
        assert loc[0] == part and found[loc] == (k, v)
    assert [g.value for g in ck_consume(bs, "audit", [0], 50)] == [v for _, _, v in audit]
    # Producing continues exactly at the old log end.
    more = _produce(bs, "orders", [(p, b"after", b"after-restart-%d" % p) for p in range(3)])
    assert more == [(p, before_ends[p][1]) for p in range(3)]
    # And the topic config is still enforced, not just reported: 200000 > max.message.bytes.
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "acks": "all", "message.max.bytes": 1_000_000})
    errs = []
    p.produce("orders", value=b"x" * 300_000, partition=0,
              on_delivery=lambda e, m: errs.append(e))
    p.flush(30)
    assert len(errs) == 1 and errs[0] is not None, errs
    assert errs[0].name() == "MSG_SIZE_TOO_LARGE", errs[0]


def test_clean_restarts_of_many_partitions_recover_nothing_and_lose_nothing(
        snakka_broker_factory, caplog):
    """Issue 15: 600 partitions, records in some, stopped and started twice (the second stop
    with nothing appended since the start): each start finds a clean directory, recovers
    nothing, and every record, end offset and the next produce offset are as before."""
    broker = snakka_broker_factory()
    bs = broker.bootstrap_servers
    topics = {f"many-{i}": 200 for i in range(3)}
    for name, n in topics.items():
        ck_create_topic(bs, name, n)
    items = [(p, b"k%d" % p, b"v-%d-" % p + os.urandom(20)) for p in range(0, 200, 7)
             for _ in range(3)]
    acked = _produce(bs, "many-1", items)
    ends = {t: ck_end_offsets(bs, t, range(n)) for t, n in topics.items()}
    assert sum(hi for _lo, hi in ends["many-1"].values()) == len(items)
    caplog.set_level(logging.INFO, logger="snakka.storage")
    for _ in range(2):
        caplog.clear()
        broker.restart()
        lines = [r.getMessage() for r in caplog.records if r.name.startswith("snakka.storage")]
        assert any("clean=True" in m for m in lines), lines
        assert not [m for m in lines if any(w in m.lower() for w in RECOVERY_WORDS)], lines
        assert {t: ck_end_offsets(bs, t, range(n)) for t, n in topics.items()} == ends
    got = ck_consume(bs, "many-1", sorted({p for p, _k, _v in items}), len(items), timeout=30)
    found = {(g.partition, g.offset): (g.key, g.value) for g in got}
    assert len(found) == len(items)
    for (part, k, v), loc in zip(items, acked, strict=True):
        assert loc[0] == part and found[loc] == (k, v)
    assert _produce(bs, "many-2", [(5, b"k", b"after")]) == [(5, 0)]


@pytest.mark.parametrize("how", ["clean", "kill-9"])
def test_admin_changes_survive_restart(snakka_broker_factory, how):
    """Acknowledged admin operations are durable: altered configs, added partitions, deleted
    records (log start offset), deleted and re-created topics, auto-created topics."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

    broker = snakka_broker_factory(mode="thread" if how == "clean" else "subprocess",
                                   config={"num.partitions": "2"})
    bs = broker.bootstrap_servers
    admin = ck_admin(bs)
    ck_create_topic(bs, "grown", 1)
    ck_create_topic(bs, "trimmed", 1)
    ck_create_topic(bs, "gone", 1)
    ck_create_topic(bs, "reborn", 3)
    _produce(bs, "trimmed", [(0, b"k", b"t%d" % i) for i in range(10)])
    _produce(bs, "reborn", [(2, b"k", b"old")])
    res = ConfigResource("TOPIC", "grown", incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(20)
    admin.create_partitions([NewPartitions("grown", 4)])["grown"].result(20)
    (f,) = admin.delete_records([TopicPartition("trimmed", 0, 6)]).values()
    assert f.result(20).low_watermark == 6
    admin.delete_topics(["gone", "reborn"])["reborn"].result(20)
    ck_create_topic(bs, "reborn", 1)
    _produce(bs, "auto", [(1, b"k", b"auto-created")])  # metadata auto-creation, 2 partitions
    ids = _describe_topics(bs, ["grown", "trimmed", "reborn", "auto"])

    if how == "clean":
        broker.restart()
    else:
        broker.kill()
        broker.start()

    assert _describe_topics(bs, ["grown", "trimmed", "reborn", "auto"]) == ids
    assert ids["grown"][1] == 4 and ids["reborn"][1] == 1 and ids["auto"][1] == 2
    md = admin.list_topics(timeout=10)
    assert "gone" not in md.topics
    assert _topic_configs(bs, "grown")["retention.ms"] == ("123456", "DYNAMIC_TOPIC_CONFIG")
    assert ck_end_offsets(bs, "trimmed", [0])[0] == (6, 10)
    assert [g.value for g in ck_consume(bs, "trimmed", [0], 4)] == [b"t6", b"t7", b"t8", b"t9"]
    assert ck_end_offsets(bs, "reborn", [0])[0] == (0, 0)
    assert [g.value for g in ck_consume(bs, "auto", [1], 1)] == [b"auto-created"]


# -- (b) kill -9 with strict durability ----------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_kill_9_loses_nothing_acknowledged(snakka_broker_factory):
    from confluent_kafka import Producer

    broker = snakka_broker_factory(mode="subprocess",
                                   config={"log.flush.interval.messages": "1"})
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "crash", 2)
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[bytes] = []

    def cb(err, msg):
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            failed.append(msg.value())

    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 1,
                  "batch.num.messages": 50, "message.timeout.ms": 60000,
                  "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
                  "retry.backoff.ms": 20})
    seq = 0
    killed_with_in_flight = None
    acked_before_kill = 0
    # Produce continuously; kill once enough is acknowledged, keep producing while the broker
    # is down, restart it, produce some more.
    deadline = time.monotonic() + 90
    phase = "before"
    while time.monotonic() < deadline:
        p.produce("crash", key=b"k%d" % (seq % 10), value=b"v%08d" % seq, on_delivery=cb)
        seq += 1
        p.poll(0)
        if phase == "before" and len(acked) >= 3000:
            killed_with_in_flight = len(p)
            acked_before_kill = len(acked)
            broker.kill()
            phase = "down"
            down_from = seq
        elif phase == "down" and seq - down_from >= 1000:
            broker.start()
            phase = "after"
            after_from = seq
        elif phase == "after" and seq - after_from >= 2000:
            break
        if seq % 500 == 0:
            p.flush(0.05)  # keep the queue short so "in flight" is meaningful
    assert phase == "after", f"never got through the crash cycle (phase {phase})"
    p.flush(60)
    assert killed_with_in_flight is not None and killed_with_in_flight > 0, \
        "the kill should interrupt in-flight produce requests"
    assert acked_before_kill >= 3000
    ends = ck_end_offsets(bs, "crash", range(2))
    got = ck_consume(bs, "crash", range(2), sum(hi - lo for lo, hi in ends.values()), timeout=60)
    at = {(g.partition, g.offset): g.value for g in got}
    per_part = defaultdict(list)
    for g in got:
        per_part[g.partition].append(g.offset)
    for part, offs in per_part.items():
        assert offs == list(range(len(offs))), f"partition {part}: holes after recovery"
    lost = [(v, loc, at.get(loc)) for v, loc in acked.items() if at.get(loc) != v]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {lost[:5]}"
    assert len(acked) > acked_before_kill, "producing did not resume after the restart"


def test_large_creations_survive_kill_9(snakka_broker_factory):
    """The large-creation path (partition logs and the metadata log batches made in a worker
    thread, full garbage collections held off, then frozen: controller, util.heap) is as
    durable as the small one: a CreateTopics of 1,200 partitions and a CreatePartitions adding
    1,100, acknowledged, are there after a SIGKILL, with their topic ids; the last partition
    of each takes records."""
    from confluent_kafka.admin import NewPartitions

    broker = snakka_broker_factory(mode="subprocess")
    bs = broker.bootstrap_servers
    admin = ck_admin(bs)
    ck_create_topic(bs, "wide", 1200)
    ck_create_topic(bs, "widened", 1)
    admin.create_partitions([NewPartitions("widened", 1101)],
                            request_timeout=60)["widened"].result(60)
    ids = _describe_topics(bs, ["wide", "widened"])
    assert ids["wide"][1] == 1200 and ids["widened"][1] == 1101

    broker.kill()
    broker.start()

    assert _describe_topics(bs, ["wide", "widened"]) == ids
    _assert_usable(bs, "wide", 1200)
    _assert_usable(bs, "widened", 1101)


def _sampled(partitions: int) -> list[int]:
    """Every 97th partition and the last: spread over the whole range, quick to check."""
    return sorted({*range(0, partitions, 97), partitions - 1})


def _assert_usable(bs: str, topic: str, partitions: int) -> None:
    """A real client produces one record to each sampled partition of an empty topic and
    reads every one back: each partition's log exists, is empty and takes records."""
    parts = _sampled(partitions)
    ends = ck_end_offsets(bs, topic, parts)
    assert all(ends[p] == (0, 0) for p in parts), {p: e for p, e in ends.items() if e != (0, 0)}
    acked = _produce(bs, topic, [(p, b"k", b"v-%d" % p) for p in parts])
    assert acked == [(p, 0) for p in parts]
    got = ck_consume(bs, topic, parts, len(parts))
    assert sorted((g.partition, g.offset, g.value) for g in got) == \
        [(p, 0, b"v-%d" % p) for p in parts]


def test_creation_killed_midway_is_absent_or_complete(snakka_broker_factory):
    """kill -9 while a creation of 3,000 partitions is making its directories (the new
    partition files are written in place, without temp files or fsync: the metadata log's one
    commit after them is the point of no return). After the restart the topic is either
    absent, and creating it again gives a
    complete, empty topic, and no directory of the killed creation is left (they were stray:
    storage.manager); or, if the kill came after the commit, complete. Either way a
    real client produces to and consumes from every sampled partition."""
    from confluent_kafka.admin import NewTopic

    broker = snakka_broker_factory(mode="subprocess")
    bs = broker.bootstrap_servers
    admin = ck_admin(bs)
    n = 3000
    fut = admin.create_topics([NewTopic("cut", n, 1)], request_timeout=120)["cut"]

    def dirs_made() -> int:
        return sum(1 for d in os.listdir(broker.data_dir) if d.startswith("cut-"))

    # Some directories exist: the creation is under way (or, on a fast machine, done).
    wait_until(lambda: dirs_made() >= 100, 120, "the creation's first directories")
    broker.kill()
    acknowledged = fut.done() and fut.exception() is None
    broker.start()

    md = ck_admin(bs).list_topics(timeout=30).topics
    if "cut" not in md:
        assert not acknowledged, "an acknowledged creation was lost"
        # The killed creation's directories (empty, of a topic the metadata does not have)
        # were stray: renamed at the start (none can be adopted), deleted in a thread.
        assert not os.path.exists(os.path.join(broker.data_dir, "cut-0"))
        wait_until(lambda: dirs_made() == 0, 120, "the stray directories' removal")
        ck_create_topic(bs, "cut", n)
    assert len(ck_admin(bs).list_topics(timeout=30).topics["cut"].partitions) == n
    _assert_usable(bs, "cut", n)
    # Killed again right after that creation was acknowledged: still complete and usable.
    ids = _describe_topics(bs, ["cut"])
    broker.kill()
    broker.start()
    assert _describe_topics(bs, ["cut"]) == ids
    ends = ck_end_offsets(bs, "cut", _sampled(n))
    assert all(e == (0, 1) for e in ends.values()), ends


def test_new_partition_files_emptied_by_a_crash_are_rewritten(snakka_broker_factory):
    """The files a creation writes in place (partition.metadata, leader-epoch-checkpoint)
    may be empty after a power loss (no fsync; a kill -9 between their create and their write
    leaves the same): the broker starts, writes the topic id back from the metadata log, and
    the partition works; a clean stop leaves both files whole, in Kafka's format."""
    from snakka.storage.checkpoint import (
        read_leader_epoch_checkpoint,
        read_partition_metadata,
    )

    broker = snakka_broker_factory(mode="subprocess")
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "emptied", 3)
    ids = _describe_topics(bs, ["emptied"])
    broker.kill()
    part = os.path.join(broker.data_dir, "emptied-1")
    for name in ("partition.metadata", "leader-epoch-checkpoint"):
        open(os.path.join(part, name), "wb").close()  # truncated to 0 bytes
    os.unlink(os.path.join(broker.data_dir, "emptied-2", "partition.metadata"))
    broker.start()
    assert _describe_topics(bs, ["emptied"]) == ids
    _assert_usable(bs, "emptied", 3)
    broker.stop()
    # confluent-kafka prints the id in standard base64, Kafka's files in base64url.
    want = ids["emptied"][0].replace("+", "-").replace("/", "_")
    for p in range(3):
        d = os.path.join(broker.data_dir, f"emptied-{p}")
        assert read_partition_metadata(d) == want, p
        assert read_leader_epoch_checkpoint(d) is not None, p


@pytest.mark.parametrize("strict", [True, False])
def test_strict_durability_acks_only_after_fsync(snakka_broker_factory, monkeypatch, strict):
    """SIGKILL cannot lose page-cache data, so (b) alone cannot tell an fsync from none.

    White box instead: an in-process broker, os.fdatasync wrapped to record how many bytes of
    which file each call made durable. With log.flush.interval.messages=1 every acknowledged
    produce must already be covered by an fdatasync of its segment. The control (group commit
    once a minute) shows the check does catch acks that precede the fsync.
    """
    synced: dict[str, int] = {}
    real = os.fdatasync

    def recording_fdatasync(fd):
        size = os.fstat(fd).st_size
        real(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        synced[path] = max(synced.get(path, 0), size)

    monkeypatch.setattr(os, "fdatasync", recording_fdatasync)
    cfg = ({"log.flush.interval.messages": "1"} if strict
           else {"log.flush.scheduler.interval.ms": "60000"})
    broker = snakka_broker_factory(config=cfg)
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "fsynced", 1)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 0})
    uncovered = []
    for i in range(20):
        p.produce("fsynced", value=b"durable-%d" % i, partition=0)
        assert p.flush(10) == 0  # acknowledged
        (seg,) = [os.path.realpath(f) for f in segment_files(broker.data_dir, "fsynced", 0, ".log")]
        if synced.get(seg, 0) < os.path.getsize(seg):
            uncovered.append(i)
    if strict:
        assert not uncovered, f"acks for records {uncovered} came before their fdatasync"
    else:
        assert len(uncovered) == 20, "control: without strict durability acks precede fsync"


# -- (c) damaged tails ---------------------------------------------------------------------------
NBATCH, PER_BATCH = 20, 5


def _fill(bs: str, topic: str) -> list[bytes]:
    """NBATCH produce requests of PER_BATCH records each (acks=all): NBATCH batches on disk.

    The batches are built here, one per Produce request, so that their boundaries are exact:
    confluent-kafka's own batching sent the first record alone on a loaded CI machine even
    with a 10 s linger.ms (what the broker recovers is the subject here, not the client)."""
    from snakka.client.connection import KafkaConnection
    from snakka.protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from snakka.records import Record, build_batch

    ck_create_topic(bs, topic, 1)
    values = [b"batch-%02d-record-%d-" % (b, r) + bytes(range(64))
              for b in range(NBATCH) for r in range(PER_BATCH)]

    async def produce() -> None:
        host, port = bs.rsplit(":", 1)
        async with KafkaConnection(host, int(port)) as c:
            for b in range(NBATCH):
                now_ms = int(time.time() * 1000)
                batch = build_batch([Record(offset=i, timestamp=now_ms, key=b"key", value=v)
                                     for i, v in enumerate(
                                         values[b * PER_BATCH:(b + 1) * PER_BATCH])])
                resp = await c.send(ProduceRequest(
                    transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
                        TopicProduceData(name=topic, partition_data=[
                            PartitionProduceData(index=0, records=batch)])]), 12)
                part = resp.responses[0].partition_responses[0]
                assert part.error_code == 0 and part.base_offset == b * PER_BATCH, part

    run_async(produce())
    return values


def _damage(data_dir: str, topic: str, how: str) -> None:
    seg = segment_files(data_dir, topic, 0, ".log")[-1]
    batches = read_batches(seg)
    assert len(batches) == NBATCH and all(b.records == PER_BATCH for b in batches), \
        f"setup: expected {NBATCH} batches of {PER_BATCH}, found {batches}"
    pos, size, base = batches[-1].position, batches[-1].size, batches[-1].base_offset
    assert base == (NBATCH - 1) * PER_BATCH
    if how == "truncate":
        os.truncate(seg, pos + size - 7)
    elif how == "flip":
        with open(seg, "r+b") as f:
            f.seek(pos + 61 + 10)  # inside the records section: only the CRC can tell
            b = f.read(1)
            f.seek(pos + 61 + 10)
            f.write(bytes([b[0] ^ 0x5A]))
    else:
        raise AssertionError(how)


def _check_recovered(bs: str, topic: str, values: list[bytes]) -> None:
    keep = (NBATCH - 1) * PER_BATCH
    assert ck_end_offsets(bs, topic, [0])[0] == (0, keep), "the damaged batch must be gone"
    got = ck_consume(bs, topic, [0], keep, timeout=20)
    assert [(g.offset, g.value) for g in got] == list(enumerate(values[:keep]))
    assert _produce(bs, topic, [(0, b"key", b"after-recovery")]) == [(0, keep)]
    got = ck_consume(bs, topic, [0], keep + 1, timeout=20)
    assert got[-1].offset == keep and got[-1].value == b"after-recovery"


RECOVERY_WORDS = ("recover", "truncat", "rebuild")


@pytest.mark.parametrize("how", ["truncate", "flip+delete-index", "truncate+delete-index"])
def test_damaged_tail_after_clean_stop(snakka_broker_factory, caplog, how):
    broker = snakka_broker_factory()
    topic = "torn"
    values = _fill(broker.bootstrap_servers, topic)
    broker.stop()
    _damage(broker.data_dir, topic, how.split("+")[0])
    if how.endswith("delete-index"):
        idx = segment_files(broker.data_dir, topic, 0, ".index")
        assert idx, "setup: expected .index files"
        for f in idx:
            f.unlink()
    caplog.set_level(logging.INFO, logger="snakka")
    broker.start()
    _check_recovered(broker.bootstrap_servers, topic, values)
    lines = [r.getMessage() for r in caplog.records
             if r.name.startswith("snakka.storage") and r.levelno >= logging.WARNING]
    assert any(topic in m and any(w in m.lower() for w in RECOVERY_WORDS) for m in lines), \
        f"no recovery warning for {topic} in the broker log: {lines}"


@pytest.mark.slow
def test_corrupt_tail_after_kill_9(snakka_broker_factory):
    broker = snakka_broker_factory(mode="subprocess", log_level="INFO",
                                   config={"log.flush.interval.messages": "1"})
    topic = "crashtorn"
    values = _fill(broker.bootstrap_servers, topic)
    broker.kill()
    _damage(broker.data_dir, topic, "flip")
    n_before = len(broker.output)
    broker.start()
    _check_recovered(broker.bootstrap_servers, topic, values)
    lines = wait_until(lambda: [ln for ln in broker.output[n_before:]
                                if topic in ln and "truncat" in ln.lower()],
                       10, "the recovery line in the broker output")
    assert "WARNING" in lines[0], lines
