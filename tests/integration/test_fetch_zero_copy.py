"""Zero-copy Fetch (server/connection.py, storage/local_log.py ``_read_region``): on a
plaintext listener large record sets go from the segment file to the socket with
``os.sendfile``, never through memory.

Proved with real clients (confluent-kafka, kafka-python, aiokafka, kcat) reading large records
from several partitions per response, with pipelined requests on one connection (responses
stay in request order around a response being sent from a file), with a segment deleted by
retention while its bytes wait to be sent, and with read_committed over aborted transactions.
Each test checks that sendfile really carried the bytes (a counting wrapper around
``os.sendfile``: the broker runs in this process).
"""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from snakka.protocol import encode_request
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.api_versions_response import ApiVersionsResponse
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.fetch_response import FetchResponse
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.messages.metadata_response import MetadataResponse
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.protocol.messages.produce_response import ProduceResponse
from snakka.records import Record, build_batch
from snakka.records.record import batch_records, iter_batches
from snakka.testing import EmbeddedBroker

from .helpers import KCAT, ck_create_topic, run, run_async, wait_until

VALUE = 20 * 1024
PER_PARTITION = 60
PARTITIONS = 3
TIMEOUT = 30.0


class SendfileCounter:
    """Counts the bytes ``os.sendfile`` sent (the broker runs in this process)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        real = os.sendfile

        def counting(out_fd, in_fd, offset, count):  # type: ignore[no-untyped-def]
            n = real(out_fd, in_fd, offset, count)
            self.bytes += n
            return n

        monkeypatch.setattr(os, "sendfile", counting)


@pytest.fixture
def sendfile(monkeypatch):
    return SendfileCounter(monkeypatch)


def _value(p: int, i: int) -> bytes:
    head = f"p{p}-r{i}-".encode()
    return head + bytes((p * 31 + i * 7 + k) % 251 for k in range(VALUE - len(head)))


def _produce_large(bootstrap: str, topic: str, partitions: int = PARTITIONS,
                   per_partition: int = PER_PARTITION, **config) -> None:
    from confluent_kafka import Producer

    ck_create_topic(bootstrap, topic, partitions, config)
    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                     "batch.size": 1 << 20, "compression.type": "none"})
    failures: list[object] = []
    for i in range(per_partition):
        for p in range(partitions):
            prod.produce(topic, _value(p, i), key=f"{p}-{i}".encode(), partition=p,
                         on_delivery=lambda err, _m: err and failures.append(err))
        prod.poll(0)
    assert prod.flush(TIMEOUT) == 0
    assert not failures, failures


def _expected(partitions: int = PARTITIONS, per_partition: int = PER_PARTITION):
    return {(p, i): _value(p, i) for p in range(partitions) for i in range(per_partition)}


@pytest.fixture
def broker():
    with EmbeddedBroker(config={"log.retention.check.interval.ms": "100"}) as b:
        yield b


# -- real clients ------------------------------------------------------------------------
def test_confluent_kafka_reads_large_records_sent_from_the_file(broker, sendfile):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    bs = broker.bootstrap_servers
    _produce_large(bs, "zc")
    c = Consumer({"bootstrap.servers": bs, "group.id": "zc-ck", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 1 << 20})
    got = {}
    try:
        c.assign([TopicPartition("zc", p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert not m.error(), m.error()
                got[(m.partition(), m.offset())] = m.value()
    finally:
        c.close()
    assert got == _expected()
    # Nearly every byte went by sendfile (the last, small reads of a partition may not).
    assert sendfile.bytes >= PARTITIONS * PER_PARTITION * VALUE // 2


def test_kafka_python_and_aiokafka_read_large_records_sent_from_the_file(broker, sendfile):
    from kafka import KafkaConsumer, TopicPartition

    bs = broker.bootstrap_servers
    _produce_large(bs, "zc2")
    want = _expected()
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False,
                      auto_offset_reset="earliest", fetch_max_bytes=50 << 20,
                      max_partition_fetch_bytes=1 << 20, consumer_timeout_ms=int(TIMEOUT * 1000))
    got = {}
    try:
        c.assign([TopicPartition("zc2", p) for p in range(PARTITIONS)])
        c.seek_to_beginning()
        for m in c:
            got[(m.partition, m.offset)] = m.value
            if len(got) == len(want):
                break
    finally:
        c.close()
    assert got == want
    after_kafka_python = sendfile.bytes
    assert after_kafka_python >= len(want) * VALUE // 2

    async def aiokafka_read():
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as ATP

        ac = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False,
                              auto_offset_reset="earliest", fetch_max_bytes=50 << 20,
                              max_partition_fetch_bytes=1 << 20)
        await ac.start()
        out = {}
        try:
            ac.assign([ATP("zc2", p) for p in range(PARTITIONS)])
            await ac.seek_to_beginning()
            while len(out) < len(want):
                batches = await ac.getmany(timeout_ms=500)
                for msgs in batches.values():
                    for m in msgs:
                        out[(m.partition, m.offset)] = m.value
        finally:
            await ac.stop()
        return out

    assert run_async(aiokafka_read(), TIMEOUT) == want
    assert sendfile.bytes - after_kafka_python >= len(want) * VALUE // 2


def test_kcat_reads_large_records_sent_from_the_file(broker, sendfile):
    if not os.path.exists(KCAT):
        pytest.skip("kcat is not installed")
    bs = broker.bootstrap_servers
    _produce_large(bs, "zc3", partitions=1)
    p = run([KCAT, "-C", "-b", bs, "-t", "zc3", "-p", "0", "-o", "beginning", "-e", "-q",
             "-f", "%o %S\n", "-X", "fetch.max.bytes=52428800"], timeout=TIMEOUT)
    lines = p.stdout.decode().split()
    got = dict(zip(lines[0::2], lines[1::2], strict=True))
    assert got == {str(i): str(VALUE) for i in range(PER_PARTITION)}
    assert sendfile.bytes >= PER_PARTITION * VALUE // 2


# -- one connection, pipelined ------------------------------------------------------------
def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        assert chunk, "connection closed by the broker"
        buf += chunk
    return bytes(buf)


def _recv_frame(s: socket.socket) -> bytes:
    return _recv_exact(s, struct.unpack(">i", _recv_exact(s, 4))[0])


def _fetch(topic: str, partitions: list[int], max_bytes: int, offset: int = 0) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes,
                        isolation_level=0, session_id=0, session_epoch=-1,
                        topics=[FetchTopic(topic=topic, partitions=[
                            FetchPartition(partition=p, fetch_offset=offset,
                                           partition_max_bytes=max_bytes, log_start_offset=-1)
                            for p in partitions])],
                        forgotten_topics_data=[], rack_id="")


def _values(records) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of whole batches, checking each batch's CRC."""
    out = []
    for h, pos in iter_batches(records, verify_crc=True):
        for r in batch_records(records, pos, h):
            out.append((r.offset, bytes(r.value or b"")))
    return out


def _check_fetch(frame: bytes, version: int, want: dict, *, out_of_range_ok: bool = False
                 ) -> int:
    """Every partition's records are the produced ones from offset 0, in order; returns how
    many records the response held (``out_of_range_ok``: a partition may also answer
    OFFSET_OUT_OF_RANGE, without records)."""
    # Fetch v12+ has a flexible response header: one more byte (no tagged fields).
    resp = FetchResponse.decode(frame[5:] if version >= 12 else frame[4:], version)
    n = 0
    for t in resp.responses:
        for pd in t.partitions:
            if out_of_range_ok and pd.error_code == 1:
                continue
            assert pd.error_code == 0, pd
            vals = _values(pd.records or b"")
            assert vals, f"partition {pd.partition_index}: no records"
            assert [o for o, _ in vals] == list(range(len(vals)))
            for o, v in vals:
                assert v == want[(pd.partition_index, o)]
            n += len(vals)
    return n


def test_pipelined_responses_stay_in_request_order_around_sendfile(broker, sendfile):
    """A slow reader (tiny receive buffer) pipelines fetches sent from files with Metadata,
    Produce and ApiVersions on one connection: every response comes back whole and in
    request order, the fetches' records intact."""
    bs = broker.bootstrap_servers
    _produce_large(bs, "zc4")
    want = _expected()
    want[(0, PER_PARTITION)] = b"small"  # produced in the pipeline, after the first fetch
    batch = build_batch([Record(timestamp=int(time.time() * 1000), key=b"k", value=b"small")])
    requests = [
        (1, 11, _fetch("zc4", [0], 4 << 20)),
        (2, 8, MetadataRequest(topics=[MetadataRequestTopic(name="zc4")],
                               allow_auto_topic_creation=False)),
        (3, 8, ProduceRequest(transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
            TopicProduceData(name="zc4", partition_data=[
                PartitionProduceData(index=0, records=batch)])])),
        (4, 11, _fetch("zc4", [0, 1, 2], 8 << 20)),  # several partitions in one response
        (5, 3, ApiVersionsRequest(client_software_name="zc", client_software_version="1")),
        # Room for both partitions whole: a response's max_bytes is shared in request order,
        # and a later partition whose next batch does not fit in what is left gets no records
        # (as in Kafka); how the producer batched (linger) decides whether 2 MiB would do.
        (6, 12, _fetch("zc4", [2, 1], 8 << 20)),
    ]
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the broker's sends block often
    s.settimeout(TIMEOUT)
    try:
        s.connect(("127.0.0.1", broker.port))
        s.sendall(b"".join(encode_request(c, "zc", v, req) for c, v, req in requests))
        frames = [_recv_frame(s) for _ in requests]
    finally:
        s.close()
    assert [struct.unpack_from(">i", f)[0] for f in frames] == [c for c, _, _ in requests]
    assert _check_fetch(frames[0], 11, want) > 0
    md = MetadataResponse.decode(frames[1][4:], 8)
    assert md.topics[0].name == "zc4" and len(md.topics[0].partitions) == PARTITIONS
    pr = ProduceResponse.decode(frames[2][4:], 8)
    assert pr.responses[0].partition_responses[0].error_code == 0
    assert _check_fetch(frames[3], 11, want) >= PARTITIONS
    # ApiVersions responses have a v0 response header whatever the version.
    assert ApiVersionsResponse.decode(frames[4][4:], 3).error_code == 0
    assert _check_fetch(frames[5], 12, want) >= 2
    assert sendfile.bytes >= 3 * (1 << 20)


# -- retention deletes the segment being sent ---------------------------------------------
def test_segment_deleted_while_its_bytes_wait_to_be_sent(broker, sendfile):
    """The response's file region holds its own descriptor (as Kafka keeps a deleted
    segment's channel open): the segment is deleted by DeleteRecords + retention while the
    client has not read the response, and the client still gets every byte."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    bs = broker.bootstrap_servers
    _produce_large(bs, "zc5", partitions=1, per_partition=120, **{"segment.bytes": str(1 << 20)})
    want = _expected(1, 120)
    log0 = os.path.join(broker.data_dir, "zc5-0", "00000000000000000000.log")
    assert os.path.exists(log0)
    fetches = 12  # 12 x ~1 MiB from the first segment: more than the kernel's buffers hold
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(TIMEOUT)
    try:
        s.connect(("127.0.0.1", broker.port))
        s.sendall(b"".join(encode_request(c, "zc", 11, _fetch("zc5", [0], 4 << 20))
                           for c in range(fetches)))
        # Responses are waiting: the socket is full, regions not yet sent.
        wait_until(lambda: any(c.write_buffer_size() > 0 for c in list(broker.broker.connections)),
                   TIMEOUT, "a response waiting to be sent")
        admin = AdminClient({"bootstrap.servers": bs})
        fs = admin.delete_records([TopicPartition("zc5", 0, 100)], request_timeout=30)
        for f in fs.values():
            f.result(timeout=30)
        wait_until(lambda: not os.path.exists(log0), TIMEOUT, "the first segment deleted")
        sent_before_delete = sendfile.bytes
        frames = [_recv_frame(s) for _ in range(fetches)]
    finally:
        s.close()
    # Fetches read before the deletion carry the deleted segment's records, intact; those
    # read after it are OFFSET_OUT_OF_RANGE (offset 0 is below the new log start).
    with_records = [_check_fetch(f, 11, want, out_of_range_ok=True) for f in frames]
    assert with_records[0] > 0 and sum(1 for n in with_records if n) >= 2, with_records
    assert sendfile.bytes > sent_before_delete  # sent from the deleted file


# -- read_committed ------------------------------------------------------------------------
def test_read_committed_skips_large_aborted_transactions(broker, sendfile):
    from confluent_kafka import Producer

    from .helpers import ck_read_to_end

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "zc6", 1)
    prod = Producer({"bootstrap.servers": bs, "transactional.id": "zc6-txn", "linger.ms": 20,
                     "batch.size": 1 << 20})
    prod.init_transactions(TIMEOUT)
    committed, aborted = [], []
    for round_ in range(4):
        prod.begin_transaction()
        abort = round_ % 2 == 0
        for i in range(12):
            v = _value(round_, i)
            (aborted if abort else committed).append(v)
            prod.produce("zc6", v, partition=0)
        assert prod.flush(TIMEOUT) == 0  # abort_transaction purges what is not yet sent
        if abort:
            prod.abort_transaction(TIMEOUT)
        else:
            prod.commit_transaction(TIMEOUT)
    before = sendfile.bytes
    assert ck_read_to_end(bs, "zc6", "read_committed") == committed
    assert sendfile.bytes - before >= len(committed) * VALUE // 2
    assert ck_read_to_end(bs, "zc6", "read_uncommitted") == (
        aborted[:12] + committed[:12] + aborted[12:] + committed[12:])
