"""``snakka.fetch.response.target.bytes`` (handlers/fetch.py): a Fetch response holds at most
this many record bytes whatever the client's fetch.max.bytes, except that the first whole
batch always comes (KIP-74).

Proved on the wire: the clients connect through a frame-counting TCP proxy (the broker
advertises the proxy's address, so every connection goes through it) that records the size of
every Fetch response. Real clients (confluent-kafka, kafka-python) asking for 50 MiB read every
record in order across many capped responses, and a batch larger than the cap still arrives.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic

FETCH = 1
CAP = 256 * 1024
VALUE = 20 * 1024
RECORDS = 150           # 3 MB: a dozen or more responses at the cap
# A Fetch response's bytes beyond its record sets: the header, one topic, one partition.
RESPONSE_OVERHEAD = 1024
TIMEOUT = 30.0


class FetchSizeProxy:
    """Forwards Kafka frames between clients and the broker; records the size of every Fetch
    response (the frame's 4-byte size prefix excluded), matched to requests by correlation id.
    One thread per direction per connection; ``close()`` ends them all."""

    def __init__(self) -> None:
        self.upstream: tuple[str, int] | None = None
        self.fetch_sizes: list[int] = []
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    def start(self) -> FetchSizeProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def close(self) -> None:
        for s in [self.sock, *self._socks]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            assert self.upstream is not None
            server = socket.create_connection(self.upstream)
            self._socks += [client, server]
            apis: dict[int, int] = {}
            threading.Thread(target=self._pump, args=(client, server, apis, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, apis, False),
                             daemon=True).start()

    @staticmethod
    def _recv(sock: socket.socket, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return bytes(buf)

    def _pump(self, src: socket.socket, dst: socket.socket, apis: dict[int, int],
              requests: bool) -> None:
        try:
            while True:
                head = self._recv(src, 4)
                (size,) = struct.unpack(">i", head)
                body = self._recv(src, size)
                if requests:  # api key, api version, correlation id
                    api_key, _ver, corr = struct.unpack(">hhi", body[:8])
                    apis[corr] = api_key
                else:
                    (corr,) = struct.unpack(">i", body[:4])
                    if apis.pop(corr, None) == FETCH:
                        with self._lock:
                            self.fetch_sizes.append(size)
                dst.sendall(head + body)
        except (OSError, ConnectionError, struct.error):
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.fixture
def proxied():
    """(bootstrap through the proxy, proxy) of a broker with a 256 KiB response target."""
    proxy = FetchSizeProxy()
    cfg = {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
           "snakka.fetch.response.target.bytes": str(CAP)}
    with EmbeddedBroker(config=cfg) as eb:
        proxy.upstream = ("127.0.0.1", eb.port)
        proxy.start()
        try:
            yield f"127.0.0.1:{proxy.port}", proxy
        finally:
            proxy.close()


def _value(i: int, size: int = VALUE) -> bytes:
    head = b"r%06d-" % i
    return head + bytes((i * 7 + k) % 251 for k in range(size - len(head)))


def _produce(bs: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    ck_create_topic(bs, topic, 1)
    # batches of about 100 KB: several per capped response
    p = Producer({"bootstrap.servers": bs, "linger.ms": 50, "batch.size": 100_000,
                  "compression.type": "none"})
    failures: list[object] = []
    for v in values:
        p.produce(topic, v, partition=0,
                  on_delivery=lambda err, _m: err and failures.append(err))
    assert p.flush(TIMEOUT) == 0
    assert not failures, failures


def _ck_read(bs: str, topic: str, n: int) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "target-ck", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 50 << 20,
                  "receive.message.max.bytes": 51 << 20})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                assert not m.error(), m.error()
                got.append(m.value())
    finally:
        c.close()
    return got


def test_confluent_kafka_reads_everything_in_order_across_capped_responses(proxied):
    bs, proxy = proxied
    values = [_value(i) for i in range(RECORDS)]
    _produce(bs, "capped", values)
    proxy.fetch_sizes.clear()
    assert _ck_read(bs, "capped", RECORDS) == values
    with_data = [s for s in proxy.fetch_sizes if s > RESPONSE_OVERHEAD]
    assert max(proxy.fetch_sizes) <= CAP + RESPONSE_OVERHEAD, sorted(proxy.fetch_sizes)[-5:]
    # 3 MB in responses of at most 256 KiB: the cap, not the client's 50 MiB, shaped them
    assert len(with_data) >= RECORDS * VALUE // CAP, proxy.fetch_sizes


def test_kafka_python_reads_everything_in_order_across_capped_responses(proxied):
    from kafka import KafkaConsumer, TopicPartition

    bs, proxy = proxied
    values = [_value(i) for i in range(RECORDS)]
    _produce(bs, "capped-kp", values)
    proxy.fetch_sizes.clear()
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, group_id=None,
                      fetch_max_bytes=50 << 20, max_partition_fetch_bytes=50 << 20,
                      auto_offset_reset="earliest")
    got: list[bytes] = []
    try:
        tp = TopicPartition("capped-kp", 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + TIMEOUT
        while len(got) < RECORDS and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                got.extend(r.value for r in recs)
    finally:
        c.close()
    assert got == values
    assert max(proxy.fetch_sizes) <= CAP + RESPONSE_OVERHEAD, sorted(proxy.fetch_sizes)[-5:]
    assert len([s for s in proxy.fetch_sizes if s > RESPONSE_OVERHEAD]) >= \
        RECORDS * VALUE // CAP


def test_a_batch_larger_than_the_cap_still_arrives_whole(proxied):
    """KIP-74: the first batch of a response comes whole even when it alone exceeds the cap;
    the records around it come in capped responses as before."""
    bs, proxy = proxied
    big = _value(10_000, 3 * CAP // 2)  # 384 KiB: one record, one batch above the cap
    values = [_value(i) for i in range(20)] + [big] + [_value(i) for i in range(20, 40)]
    _produce(bs, "kip74", values)
    proxy.fetch_sizes.clear()
    assert _ck_read(bs, "kip74", len(values)) == values
    over = [s for s in proxy.fetch_sizes if s > CAP + RESPONSE_OVERHEAD]
    # exactly the big batch's responses exceed the cap, by no more than that batch
    assert over and all(s <= len(big) + 2 * RESPONSE_OVERHEAD for s in over), over


def test_java_consumer_reads_everything_in_order_across_capped_responses(proxied):
    """The Java consumer (kafka-console-consumer.sh of the reference distribution) with
    fetch.max.bytes and max.partition.fetch.bytes at 50 MiB: every record, in order, in
    capped responses."""
    reference_kafka = pytest.importorskip("reference_kafka",
                                          reason="tests/reference_kafka.py is not present")
    reason = reference_kafka.skip_reason()
    if reason:
        pytest.skip(reason)
    bs, proxy = proxied
    values = [_value(i) for i in range(RECORDS)]
    _produce(bs, "capped-java", values)
    proxy.fetch_sizes.clear()
    r = reference_kafka.run_tool(
        "kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", "capped-java",
        "--from-beginning", "--max-messages", str(RECORDS), "--timeout-ms", "20000",
        "--consumer-property", f"fetch.max.bytes={50 << 20}",
        "--consumer-property", f"max.partition.fetch.bytes={50 << 20}",
        "--property", "print.value=false", "--property", "print.offset=true", timeout=120)
    offsets = [int(line.split(":", 1)[1].split()[0]) for line in r.stdout.splitlines()
               if line.startswith("Offset:")]
    assert offsets == list(range(RECORDS)), (r.stdout[-2000:], r.stderr[-2000:])
    assert max(proxy.fetch_sizes) <= CAP + RESPONSE_OVERHEAD, sorted(proxy.fetch_sizes)[-5:]
    assert len([s for s in proxy.fetch_sizes if s > RESPONSE_OVERHEAD]) >= \
        RECORDS * VALUE // CAP
