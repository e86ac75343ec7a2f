"""Golden bytes from real clients: every request frame that confluent-kafka (librdkafka),
kafka-python and aiokafka send during a real session is captured by a recording proxy, then
decoded with snakka's generated codecs and re-encoded: the bytes must be identical.

This checks the codecs against what clients really put on the wire (tagged fields such as
librdkafka's ApiVersions client software name, nullable arrays, records), not only against
our own encoder.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading

import pytest
from integration.helpers import run_async

from snakka.protocol import decode_request_header
from snakka.testing import EmbeddedBroker


class RecordingProxy:
    """TCP proxy on an ephemeral port that records every client→broker frame."""

    def __init__(self) -> None:
        self.target_port: int | None = None  # set once the broker is up
        self.frames: list[bytes] = []
        self._loop = asyncio.new_event_loop()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, sock=self._sock))
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        br, bw = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def client_to_broker() -> None:
            try:
                while True:
                    head = await cr.readexactly(4)
                    body = await cr.readexactly(struct.unpack(">i", head)[0])
                    self.frames.append(body)
                    bw.write(head + body)
                    await bw.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                bw.close()

        async def broker_to_client() -> None:
            try:
                while data := await br.read(65536):
                    cw.write(data)
                    await cw.drain()
            except ConnectionError:
                pass
            cw.close()

        await asyncio.gather(client_to_broker(), broker_to_client())

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def captured() -> list[bytes]:
    proxy = RecordingProxy()
    # The broker advertises the proxy, or clients would bypass it after bootstrapping.
    broker = EmbeddedBroker(config={
        "num.partitions": "2",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}).start()
    proxy.target_port = broker.port
    proxy_port = proxy.port
    bs = f"127.0.0.1:{proxy_port}"
    try:
        with proxy:
            _confluent_session(bs)
            _kafka_python_session(bs)
            run_async(_aiokafka_session(bs), timeout=None)
        return list(proxy.frames)
    finally:
        broker.close()


def _confluent_session(bs: str) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("golden-ck", 2)]).values():
        f.result()
    for f in admin.describe_configs([ConfigResource("topic", "golden-ck")]).values():
        f.result()
    for codec in ("none", "zstd"):
        p = Producer({"bootstrap.servers": bs, "compression.type": codec,
                      "enable.idempotence": True})
        for i in range(50):
            p.produce("golden-ck", key=b"k%d" % i, value=b"v" * i, headers=[("h", b"x")])
        assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition("golden-ck", p, OFFSET_BEGINNING) for p in range(2)])
    got = 0
    for _ in range(50):
        got += len(c.consume(100, timeout=0.2))
        if got >= 100:
            break
    c.close()
    assert got == 100


def _kafka_python_session(bs: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bs)
    admin.create_topics([NewTopic("golden-kp", 1, 1)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=bs, compression_type="gzip")
    for i in range(20):
        p.send("golden-kp", key=b"k", value=b"%d" % i, headers=[("h", b"1")])
    p.flush()
    p.close()
    c = KafkaConsumer(bootstrap_servers=bs, group_id=None, consumer_timeout_ms=2000)
    c.assign([TopicPartition("golden-kp", 0)])
    c.seek_to_beginning()
    assert sum(1 for _ in c) == 20
    c.close()


async def _aiokafka_session(bs: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    p = AIOKafkaProducer(bootstrap_servers=bs, compression_type="lz4")
    await p.start()
    for i in range(20):
        await p.send("golden-ak", b"%d" % i, key=b"k")
    await p.flush()
    await p.stop()
    c = AIOKafkaConsumer(bootstrap_servers=bs, group_id=None)
    await c.start()
    c.assign([TopicPartition("golden-ak", 0)])
    await c.seek_to_beginning()
    got = 0
    while got < 20:
        batch = await c.getmany(timeout_ms=2000)
        assert batch, "aiokafka consumer got nothing"
        got += sum(len(v) for v in batch.values())
    await c.stop()


def test_every_captured_request_re_encodes_identically(captured):
    seen: set[tuple[int, int]] = set()
    for frame in captured:
        header, pos, spec = decode_request_header(frame)
        assert spec is not None
        v = header.request_api_version
        req = spec.request_class.read(frame, pos, v)[0]
        again = bytearray()
        header.write(again, spec.request_header_version(v))
        req.write(again, v)
        assert bytes(again) == bytes(frame), (spec.name, v)
        seen.add((header.request_api_key, v))
    keys = {k for k, _ in seen}
    # The sessions really exercised the main APIs (ApiVersions, Metadata, Produce, Fetch,
    # ListOffsets, CreateTopics, DescribeConfigs, InitProducerId).
    assert {18, 3, 0, 1, 2, 19, 32, 22} <= keys, sorted(seen)
    assert len(captured) > 50
