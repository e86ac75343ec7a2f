"""Regenerate kafka40_consumer_offsets.log: a ``__consumer_offsets`` segment written by the
reference Apache Kafka 4.0 (tests/reference_kafka.py), which tests/groups/test_records.py
replays. Run from the project root: ``.venv/bin/python tests/groups/data/gen_kafka40_offsets.py``.

What the segment holds (one partition: offsets.topic.num.partitions=1): a classic group ``cls``
with one member and committed offsets; KIP-848 groups ``kip848`` (topic names) and ``rx`` (a
regular expression), one member each, with committed offsets; transactional offsets of group
``txg``, one transaction committed and one aborted. Kafka is stopped while the members are
still in their groups, so their records are the last ones.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/, for reference_kafka

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from reference_kafka import ReferenceKafka  # noqa: E402


def _consume_until_assigned(c: Consumer, n: int) -> None:
    deadline = time.monotonic() + 60
    while len(c.assignment()) < n and time.monotonic() < deadline:
        c.poll(0.2)
    assert len(c.assignment()) == n, c.assignment()


def main() -> None:
    k = ReferenceKafka({"offsets.topic.num.partitions": "1"}).start()
    consumers = []
    try:
        bs = k.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("t", 3, 1)])["t"].result(30)
        p = Producer({"bootstrap.servers": bs})
        for i in range(30):
            p.produce("t", value=b"v%d" % i, partition=i % 3)
        p.flush(30)
        for gid, proto, sub in (("cls", "classic", "t"), ("kip848", "consumer", "t"),
                                ("rx", "consumer", "^t.*")):
            conf = {"bootstrap.servers": bs, "group.id": gid, "group.protocol": proto,
                    "enable.auto.commit": False, "auto.offset.reset": "earliest",
                    "client.id": f"{gid}-client"}
            if proto == "classic":
                conf["partition.assignment.strategy"] = "range"
            c = Consumer(conf)
            c.subscribe([sub])
            _consume_until_assigned(c, 3)
            base = {"cls": 10, "kip848": 20, "rx": 30}[gid]
            c.commit(offsets=[TopicPartition("t", q, base + q) for q in range(3)],
                     asynchronous=False)
            consumers.append(c)
        tp = Producer({"bootstrap.servers": bs, "transactional.id": "tx"})
        tp.init_transactions(30)
        for commit, base in ((True, 40), (False, 50)):
            tp.begin_transaction()
            tp.produce("t", b"x", partition=0)
            c = Consumer({"bootstrap.servers": bs, "group.id": "txg"})
            tp.send_offsets_to_transaction(
                [TopicPartition("t", q, base + q) for q in range(3)],
                c.consumer_group_metadata(), 30)
            c.close()
            if commit:
                tp.commit_transaction(30)
            else:
                tp.abort_transaction(30)
        time.sleep(1)  # let the markers reach __consumer_offsets-0 before the broker stops
    finally:
        seg_dir = Path(k.dir) / "kraft-logs" / "__consumer_offsets-0"
        k_dir = k.dir
        subprocess_stop(k)
        segs = sorted(seg_dir.glob("*.log"))
        out = HERE / "kafka40_consumer_offsets.log"
        with out.open("wb") as f:
            for s in segs:
                f.write(s.read_bytes())
        print(f"wrote {out} ({out.stat().st_size} bytes from {len(segs)} segment(s))")
        shutil.rmtree(k_dir, ignore_errors=True)
        for c in consumers:
            try:
                c.close()
            except Exception:
                pass


def subprocess_stop(k: ReferenceKafka) -> None:
    """Stop the broker but keep its data directory (ReferenceKafka.stop deletes it)."""
    import subprocess

    from reference_kafka import KAFKA_REF_SH
    subprocess.run(["bash", str(KAFKA_REF_SH), "stop"], env=k._env(), capture_output=True,
                   text=True, timeout=120)


if __name__ == "__main__":
    main()
