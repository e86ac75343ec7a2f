"""Hostile clients beside a healthy one (issue 9, items 11 and 12; item 10 is in
test_hostile_metadata.py).

Each case runs a subprocess broker (so its RSS is measurable), puts a bounded hostile load on it
from another loopback address (127.0.0.2 / 127.0.0.3: all of 127/8 is loopback on Linux), and
meanwhile drives an unmodified confluent-kafka producer + consumer through produce -> consume
round trips. The healthy client must succeed with a generous latency bound, the hostile
connections must be closed where a bound says so, and (slow readers) the broker's RSS must stay
within what queued.max.response.bytes allows.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
import uuid

import pytest

from snakka.protocol import encode_request
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.testing import EmbeddedBroker

from .helpers import wait_until

ck = pytest.importorskip("confluent_kafka")

# A round trip (produce, flush, consume the record back) on a loaded 2-core machine.
ROUND_TRIP_BOUND_S = 2.0
# The first one also connects, fetches metadata and positions the consumer.
FIRST_ROUND_TRIP_BOUND_S = 5.0
ROUND_TRIPS = 5

def broker_side_connections(port: int, client_ip: str) -> int:
    """Established connections the broker's side holds to ``client_ip`` (from /proc/net/tcp).

    Asked of the kernel, not of the client's socket: a broker that aborts a connection whose
    client never reads sends an RST the client's kernel ignores (it lies beyond a zero receive
    window), so the client side would look open forever."""
    def hexaddr(ip: str) -> str:
        return f"{struct.unpack('<I', socket.inet_aton(ip))[0]:08X}"

    want = f"{hexaddr('127.0.0.1')}:{port:04X}"
    peer = hexaddr(client_ip)
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[1] == want and fields[2].startswith(peer + ":") and fields[3] == "01":
                n += 1
    return n


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def connect_from(port: int, source_ip: str, *, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.bind((source_ip, 0))
    s.connect(("127.0.0.1", port))
    return s


class HealthyClient:
    """confluent-kafka producer + consumer doing produce -> consume round trips."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                                     "acks": "all", "message.timeout.ms": 10000})
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "healthy",
                                     "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                                     "auto.offset.reset": "earliest"})
        self.consumer.assign([ck.TopicPartition(topic, 0, 0)])
        self.latencies: list[float] = []

    def round_trip(self) -> float:
        value = uuid.uuid4().bytes
        t0 = time.monotonic()
        errors: list = []
        self.producer.produce(self.topic, value, on_delivery=lambda e, m: e and errors.append(e))
        assert self.producer.flush(10) == 0 and not errors, errors
        deadline = t0 + 10
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            if msg.value() == value:
                elapsed = time.monotonic() - t0
                self.latencies.append(elapsed)
                return elapsed
        raise AssertionError("the healthy client's record did not come back within 10 s")

    def check(self, n: int = ROUND_TRIPS) -> None:
        for i in range(n):
            took = self.round_trip()
            bound = FIRST_ROUND_TRIP_BOUND_S if not self.latencies[:-1] else ROUND_TRIP_BOUND_S
            assert took < bound, f"round trip {i} took {took:.2f} s (bound {bound} s)"

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(5)


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(10)


def assert_clean_log(broker: EmbeddedBroker) -> None:
    bad = [line for line in broker.output if " ERROR " in line or "Traceback" in line]
    assert not bad, "\n".join(bad[:10])


@pytest.fixture
def make_broker():
    brokers: list[EmbeddedBroker] = []

    def make(config: dict[str, str]) -> EmbeddedBroker:
        b = EmbeddedBroker(mode="subprocess", config=config, log_level="INFO").start()
        brokers.append(b)
        return b

    yield make
    for b in brokers:
        b.close()


# -- item 11: slow readers ---------------------------------------------------------------
SLOW_READERS = 40
TOPIC_MB = 24
BUDGET_MB = 16
BATCH_BYTES = 1_000_000


def _fill_topic(bootstrap: str, topic: str, megabytes: int) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                     "batch.size": BATCH_BYTES, "compression.type": "none"})
    value = os.urandom(1000)
    for _ in range(megabytes * 1000):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def _fetch_everything(topic: str) -> bytes:
    return encode_request(1, "slow-reader", 11, FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[FetchTopic(topic=topic, partitions=[
            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=64 << 20)])],
        forgotten_topics_data=[], rack_id=""))


def test_slow_readers_cannot_pin_memory(make_broker):
    b = make_broker({"queued.max.response.bytes": str(BUDGET_MB << 20),
                     "connections.max.idle.ms": "4000"})
    create_topic(b.bootstrap_servers, "big")
    create_topic(b.bootstrap_servers, "healthy")
    _fill_topic(b.bootstrap_servers, "big", TOPIC_MB)
    healthy = HealthyClient(b.bootstrap_servers, "healthy")
    try:
        healthy.check(2)
        base = rss_mb(b.pid)
        readers = []
        for _ in range(SLOW_READERS):  # each asks for the whole topic and never reads
            s = connect_from(b.port, "127.0.0.2", rcvbuf=4096)
            s.sendall(_fetch_everything("big"))
            readers.append(s)
        peak = base
        for _ in range(ROUND_TRIPS):
            healthy.check(1)
            peak = max(peak, rss_mb(b.pid))
        # What the limit allows: the budget, one first-batch response per slow reader, and
        # slack for the interpreter's own churn. Without the bound this is 40 x 24 MB.
        bound = base + BUDGET_MB + SLOW_READERS * BATCH_BYTES / 2**20 + 48
        assert peak < bound, f"broker RSS {peak:.0f} MB (base {base:.0f} MB, bound {bound:.0f})"
        # They never read: aborted after connections.max.idle.ms, their memory dropped; the
        # healthy client keeps going meanwhile (and so stays active itself).
        deadline = time.monotonic() + 30
        while broker_side_connections(b.port, "127.0.0.2") > 0:
            assert time.monotonic() < deadline, "the slow readers were not closed as idle"
            healthy.check(1)
        healthy.check(2)
        for s in readers:
            s.close()
        print(f"slow readers: RSS base {base:.0f} MB, peak {peak:.0f} MB (bound {bound:.0f}); "
              f"healthy round trips {[round(x, 3) for x in healthy.latencies]}")
    finally:
        healthy.close()
    assert_clean_log(b)


# -- item 12: many sockets from one IP ---------------------------------------------------
PER_IP = 50
HOARDED = 60


def test_one_address_cannot_take_every_connection(make_broker):
    b = make_broker({"max.connections.per.ip": str(PER_IP)})
    create_topic(b.bootstrap_servers, "healthy")
    hoard = [connect_from(b.port, "127.0.0.2") for _ in range(HOARDED)]
    healthy = None
    try:
        # Each connection beyond the limit is accepted by the kernel and reset by the broker.
        wait_until(lambda: broker_side_connections(b.port, "127.0.0.2") == PER_IP, 15,
                   f"{PER_IP} connections from 127.0.0.2")
        healthy = HealthyClient(b.bootstrap_servers, "healthy")  # a new client gets in
        healthy.check()
    finally:
        if healthy is not None:
            healthy.close()
        for s in hoard:
            s.close()
    refusals = [line for line in b.output if "rejected" in line and "127.0.0.2" in line]
    assert 1 <= len(refusals) <= 2, refusals  # logged once, not once per refusal
    assert_clean_log(b)


# -- item 12: slowloris ------------------------------------------------------------------
LORIS = 200
ARRIVAL_MS = 2000


def test_slowloris_connections_are_closed(make_broker):
    b = make_broker({"socket.request.arrival.timeout.ms": str(ARRIVAL_MS)})
    create_topic(b.bootstrap_servers, "healthy")
    healthy = HealthyClient(b.bootstrap_servers, "healthy")
    loris = [connect_from(b.port, "127.0.0.3") for _ in range(LORIS)]
    stop = threading.Event()

    def dribble() -> None:  # a length prefix, then one byte per second
        for s in loris:
            s.sendall(struct.pack(">i", 1000))
        while not stop.wait(1.0):
            for s in loris:
                try:
                    s.sendall(b"\x00")
                except OSError:
                    pass

    t = threading.Thread(target=dribble, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        healthy.check()
        wait_until(lambda: broker_side_connections(b.port, "127.0.0.3") == 0, 30,
                   "the slowloris connections to be closed")
        took = time.monotonic() - t0
        # Closed by the arrival bound (the sweep runs every ARRIVAL_MS / 2), not by idleness.
        assert took < ARRIVAL_MS / 1000 * 5, took
        healthy.check(2)
    finally:
        stop.set()
        t.join(5)
        healthy.close()
        for s in loris:
            s.close()
    closes = [line for line in b.output if "socket.request.arrival.timeout.ms" in line]
    assert closes and len(closes) < 10, closes  # one line per sweep, not per connection
    assert_clean_log(b)
