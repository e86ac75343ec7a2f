"""SIGKILL during log cleaning, many times (issue 13's acceptance): every restart recovers,
no record that must survive is lost, no ``.cleaned``/``.swap`` file is left behind.

A ``snakka serve`` subprocess holds one compacted partition with small segments; the cleaner
backs off 50 ms between passes and is throttled (``log.cleaner.io.max.bytes.per.second``) so
that a pass over the log takes long enough to be interrupted. Each round writes keyed values
and tombstones with confluent-kafka (acks=all, idempotent: the model keeps the latest
acknowledged value per key), then waits for the cleaner to be mid-pass and SIGKILLs the
broker, then restarts it (the restart must come back ready) and carries on writing.

How the test knows a kill landed mid-clean: the cleaner writes its output to ``.cleaned``
files and renames them ``.swap`` before the swap (Kafka's protocol); such a file present in
the partition directory with the broker dead was left by a clean the kill interrupted. The
test waits for one to appear, kills after a random few milliseconds, and counts the kills
that left one; it asserts at least one did (most do). A ``.swap`` file left by a kill must be
finished by the restart, which says so in its log.

At the end, once the cleaner has caught up: the partition read from offset 0 by confluent-kafka and kafka-python gives exactly the latest acknowledged
value per key (offsets strictly increasing, tombstoned keys absent), and far fewer records
than were written (cleaning happened); after a clean stop no ``.cleaned``/``.swap`` file is
left.
"""

from __future__ import annotations

import random
import time

import pytest

from snakka.testing import EmbeddedBroker

from .compaction_support import (
    KeyedWriter,
    check_offsets,
    ck_read_all,
    compacted_topic_config,
    end_offset,
    kp_read_all,
    latest_per_key,
    leftover_swap_files,
)
from .helpers import ck_create_topic, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TOPIC = "compacted-crash"
KEYS = 300
ROUNDS = 10
WRITES_PER_ROUND = 3000
VALUE_BYTES = 600
SEGMENT_BYTES = 256 * 1024
BROKER = {
    "log.cleaner.backoff.ms": "50",
    # About two seconds per pass over the ~4-8 MB log: a window the kill can hit.
    "log.cleaner.io.max.bytes.per.second": str(3 * 1024 * 1024),
    "num.partitions": "1",
}


def write_round(w: KeyedWriter, rnd: random.Random, n: int, tag: int) -> None:
    for i in range(n):
        key = f"key-{rnd.randrange(KEYS):04d}".encode()
        if rnd.random() < 0.05:
            w.write(key, None)  # a tombstone
        else:
            w.write(key, f"{tag}:{i}:".encode().ljust(VALUE_BYTES, b"x"))
    w.flush()


def test_sigkill_during_cleaning():
    rnd = random.Random(13)
    broker = EmbeddedBroker(mode="subprocess", log_level="INFO", config=BROKER)
    broker.start()
    try:
        ck_create_topic(broker.bootstrap_servers, TOPIC, 1,
                        compacted_topic_config(SEGMENT_BYTES))
        w = KeyedWriter(broker.bootstrap_servers, TOPIC)
        mid_clean = 0
        swaps_left = 0
        for round_no in range(ROUNDS):
            write_round(w, rnd, WRITES_PER_ROUND, round_no)
            try:  # the cleaner writing its output: a clean under way
                wait_until(lambda: leftover_swap_files(broker.data_dir, TOPIC), 15,
                           "a clean under way", interval=0.001)
                time.sleep(rnd.uniform(0, 0.03))  # a random point of that clean, on purpose
            except AssertionError:
                pass  # kill anyway: an idle cleaner must survive a kill just as well
            broker.kill()
            left = leftover_swap_files(broker.data_dir, TOPIC)
            if left:
                mid_clean += 1
            swap = any(p.name.endswith(".swap") for p in left)
            swaps_left += swap
            lines_before = len(broker.output)
            broker.start()  # raises unless the broker comes back ready
            if swap:
                after = broker.output[lines_before:]
                assert any("swap" in line.lower() for line in after), (
                    "the restart finished an interrupted swap without a log line:\n"
                    + "\n".join(after[-30:]))
            w.producer.flush(0)  # the producer reconnects on its own (same port)
        assert mid_clean > 0, "no kill landed during a clean"

        # One last round without kills; then let the cleaner catch up.
        write_round(w, rnd, WRITES_PER_ROUND // 3, ROUNDS)
        assert not w.uncertain, f"unacknowledged writes for {sorted(w.uncertain)[:5]}"
        expected = w.expected()
        bs = broker.bootstrap_servers
        end = end_offset(bs, TOPIC)
        written = w.sent

        def caught_up() -> bool:
            if leftover_swap_files(broker.data_dir, TOPIC):
                return False
            # One live record per key plus what the uncleaned active segment holds.
            return len(ck_read_all(bs, TOPIC, end)) <= KEYS + 2 * SEGMENT_BYTES // VALUE_BYTES

        wait_until(caught_up, 180, "the cleaner to catch up", interval=1.0)
        for name, reader in (("confluent-kafka", ck_read_all), ("kafka-python", kp_read_all)):
            seen = reader(bs, TOPIC, end)
            check_offsets(seen, end)
            assert latest_per_key(seen) == expected, f"{name} reads other values"
            assert len(seen) < written / 4, (name, len(seen), written)
        # A clean stop: a pass under way is abandoned and its files removed, a swap is never
        # half done (while the broker runs, a pass may be under way whenever one looks).
        broker.stop()
        assert not leftover_swap_files(broker.data_dir, TOPIC)
        print(f"kills mid-clean: {mid_clean}/{ROUNDS}, with a .swap left: {swaps_left}")
        bad = [line for line in broker.output if "Traceback" in line or " ERROR " in line]
        assert not bad, "\n".join(bad[:20])
    finally:
        broker.close()
