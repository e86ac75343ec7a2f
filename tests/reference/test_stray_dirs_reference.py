"""Stray partition directories, as the reference Kafka 4.0 treats them on a snakka data dir.

A stopped snakka's directory gets two partition dirs whose topic id the metadata does not know
(``gone-0`` holding records, ``cut-0`` empty: what a creation killed before its commit
leaves). Kafka 4.0 started on it renames both to ``<topic>-<partition>.<32 hex>-stray`` and
keeps them, records and all (it never deletes a stray log); the topic the metadata has is
served as before. snakka then started on Kafka's directory keeps the stray holding records and
deletes the empty one (storage.manager, "Stray partition directories"; docs/data-directory.md).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import pytest
from integration.helpers import ck_consume, ck_create_topic, ck_end_offsets, wait_until
from reference_kafka import KafkaOnDir

from snakka.storage.checkpoint import write_partition_metadata
from snakka.testing.embedded import EmbeddedBroker

pytestmark = pytest.mark.xdist_group("reference-kafka")

STRAY = re.compile(r"^(?P<tp>.+)\.[0-9a-f]{32}-stray$")


@pytest.fixture
def tmp_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="snakka-stray-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _strays(data_dir: str) -> dict[str, list[str]]:
    """``<topic>-<partition>`` -> names of the ``.log`` files, of every ``*-stray`` dir."""
    out = {}
    for name in os.listdir(data_dir):
        m = STRAY.match(name)
        if m:
            out[m["tp"]] = sorted(n for n in os.listdir(os.path.join(data_dir, name))
                                  if n.endswith(".log"))
    return out


def _produce(bs: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=b"v-%d" % i, partition=0)
    assert p.flush(30) == 0


def test_kafka_keeps_stray_logs_snakka_keeps_those_with_records(kafka_distribution, tmp_dir):
    data = os.path.join(tmp_dir, "snakka")
    with EmbeddedBroker(data, config={"node.id": "1"}, host="127.0.0.1") as b:
        bs = b.bootstrap_servers
        ck_create_topic(bs, "t", 1)
        ck_create_topic(bs, "e", 1)
        _produce(bs, "t", 10)
    for src, stray in (("t-0", "gone-0"), ("e-0", "cut-0")):
        shutil.copytree(os.path.join(data, src), os.path.join(data, stray))
        write_partition_metadata(os.path.join(data, stray), uuid.uuid4())  # unknown id
    segment = "00000000000000000000.log"
    assert os.path.getsize(os.path.join(data, "gone-0", segment)) > 0
    assert os.path.getsize(os.path.join(data, "cut-0", segment)) == 0

    kafka = KafkaOnDir(data)
    try:
        kafka.start()
        kdir = os.path.join(kafka.dir, "kraft-logs")
        # Kafka renames them while it loads the logs, before it serves; polled all the same.
        wait_until(lambda: set(_strays(kdir)) == {"gone-0", "cut-0"}, 60, "Kafka's stray dirs")
        assert _strays(kdir) == {"gone-0": [segment], "cut-0": [segment]}  # both kept
        assert os.path.getsize(os.path.join(
            kdir, next(n for n in os.listdir(kdir) if n.startswith("gone-0.")), segment)) > 0
        assert not os.path.exists(os.path.join(kdir, "gone-0"))
        assert ck_end_offsets(kafka.bootstrap_servers, "t", [0]) == {0: (0, 10)}
        copy = os.path.join(tmp_dir, "from-kafka")
        shutil.copytree(kafka.stop_keeping_data(), copy)
    finally:
        kafka.stop()

    with EmbeddedBroker(copy, config={"node.id": "1"}, host="127.0.0.1") as b:
        # The empty one is deleted (in a thread, while snakka serves), the other kept.
        wait_until(lambda: set(_strays(copy)) == {"gone-0"}, 60, "the empty stray's removal")
        assert _strays(copy) == {"gone-0": [segment]}
        got = ck_consume(b.bootstrap_servers, "t", [0], 10)
        assert [g.value for g in got] == [b"v-%d" % i for i in range(10)]
