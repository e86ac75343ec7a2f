"""Stray partition directories at start-up (storage.manager, "Stray partition directories").

A partition dir the metadata does not own (a topic it does not have, an index past the topic's
partition count, another topic id after a crash) is never adopted: a topic created later under
that name starts empty, as a real client sees. A stray holding records is renamed to Kafka
4.0's ``<topic>-<partition>.<32 hex>-stray`` and kept (as Kafka keeps stray logs); an empty
one, and an empty ``*-stray`` dir a crash left, is deleted (in a thread, while the
broker serves). A committed partition whose
``partition.metadata`` a crash removed keeps its records. (The kill -9 in the middle of a
creation: tests/integration/test_restart_durability.py.)
"""

from __future__ import annotations

import os
import re
import shutil
import uuid

from .helpers import ck_admin, ck_consume, ck_create_topic, ck_end_offsets, wait_until

STRAY = re.compile(r"^(?P<tp>.+)\.[0-9a-f]{32}-stray$")


def _produce(bs: str, topic: str, partition: int, values: list[bytes]) -> list[int]:
    """Produce to one partition with confluent-kafka; returns the acknowledged offsets."""
    from confluent_kafka import Producer

    offsets: list[int] = []
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v, partition=partition, on_delivery=cb)
    assert p.flush(30) == 0
    assert not errors, errors
    return offsets


def _strays(data_dir: str) -> dict[str, list[str]]:
    """``<topic>-<partition>`` -> sorted file names, of every ``*-stray`` dir."""
    out = {}
    for name in os.listdir(data_dir):
        m = STRAY.match(name)
        if m:
            out[m["tp"]] = sorted(os.listdir(os.path.join(data_dir, name)))
    return out


def _values(bs: str, topic: str, partition: int, count: int) -> list[tuple[int, bytes]]:
    return [(g.offset, g.value) for g in ck_consume(bs, topic, [partition], count)]


def test_copied_and_out_of_range_partition_dirs_are_not_adopted(snakka_broker_factory):
    """Regression: a copy of topic ``t``'s partition (records, ``t``'s topic id) as ``u-0``,
    and as ``t-1`` of the one-partition ``t``, were adopted: topic ``u`` created afterwards,
    and ``t``'s new partition 1, served ``t``'s records. Now both are empty, the copies are
    set aside as Kafka's stray dirs with every file, and an empty stray dir is removed."""
    broker = snakka_broker_factory()
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "t", 1)
    old = [b"old-%d" % i for i in range(5)]
    assert _produce(bs, "t", 0, old) == list(range(5))
    broker.stop()
    data = broker.data_dir
    for copy in ("u-0", "t-1"):
        shutil.copytree(os.path.join(data, "t-0"), os.path.join(data, copy))
    files = sorted(os.listdir(os.path.join(data, "t-0")))
    leftover = os.path.join(data, f"v-0.{uuid.uuid4().hex}-stray")  # an earlier removal, cut short
    os.mkdir(leftover)
    open(os.path.join(leftover, "00000000000000000000.log"), "wb").close()

    broker.start()
    ck_create_topic(bs, "u", 1)
    from confluent_kafka.admin import NewPartitions

    admin = ck_admin(bs)  # must outlive its futures
    admin.create_partitions([NewPartitions("t", 2)], request_timeout=30)["t"].result(30)
    assert ck_end_offsets(bs, "u", [0]) == {0: (0, 0)}
    assert ck_end_offsets(bs, "t", [0, 1]) == {0: (0, 5), 1: (0, 0)}
    assert _produce(bs, "u", 0, [b"new-u"]) == [0]
    assert _produce(bs, "t", 1, [b"new-t1"]) == [0]
    assert _values(bs, "u", 0, 1) == [(0, b"new-u")]
    assert _values(bs, "t", 1, 1) == [(0, b"new-t1")]
    assert _values(bs, "t", 0, 5) == list(enumerate(old))
    assert _strays(data) == {"u-0": files, "t-1": files}
    wait_until(lambda: not os.path.exists(leftover), 60, "the empty stray dir's removal")
    # Kept at the next start too (Kafka never deletes a stray log), still not adopted.
    broker.restart()
    assert set(_strays(data)) == {"u-0", "t-1"}
    assert ck_end_offsets(bs, "u", [0]) == {0: (0, 1)}


def test_crash_recreated_topic_old_id_is_stray_missing_id_is_adopted(snakka_broker_factory):
    """After a kill -9 (the topic ids are read at start-up): ``t-0`` holding the records of
    an earlier topic ``t`` (deleted, then created again: another topic id) is stray, so the
    new ``t`` starts empty; ``t-1`` of the new ``t``, whose ``partition.metadata`` the crash
    lost, is adopted with its records (Kafka would call it stray: snakka writes that file
    without fsync, the metadata commit is the durability point)."""
    broker = snakka_broker_factory(mode="subprocess")
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "t", 2)
    assert _produce(bs, "t", 0, [b"first-%d" % i for i in range(3)]) == [0, 1, 2]
    broker.stop()
    data = broker.data_dir
    saved = data.rstrip(os.sep) + "-saved-t-0"
    shutil.copytree(os.path.join(data, "t-0"), saved)
    try:
        broker.start()
        admin = ck_admin(bs)  # must outlive its futures
        admin.delete_topics(["t"], operation_timeout=30)["t"].result(30)
        ck_create_topic(bs, "t", 2)
        second = [b"second-%d" % i for i in range(4)]
        assert _produce(bs, "t", 1, second) == [0, 1, 2, 3]
        broker.kill()
        shutil.rmtree(os.path.join(data, "t-0"))
        shutil.copytree(saved, os.path.join(data, "t-0"))
        os.unlink(os.path.join(data, "t-1", "partition.metadata"))
    finally:
        shutil.rmtree(saved, ignore_errors=True)

    broker.start()
    assert ck_end_offsets(bs, "t", [0, 1]) == {0: (0, 0), 1: (0, 4)}
    assert _values(bs, "t", 1, 4) == list(enumerate(second))
    assert _produce(bs, "t", 0, [b"second-t0"]) == [0]
    assert _values(bs, "t", 0, 1) == [(0, b"second-t0")]
    assert set(_strays(data)) == {"t-0"}
