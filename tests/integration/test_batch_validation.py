"""Record-batch headers are claims, not facts (issue 9 item 9), over the wire.

Hand-built hostile batches go through snakka's protocol client as real Produce requests (the
real clients cannot be made to lie); what the broker stores is read back with Fetch, as a
consumer would. A byte-flip fuzz (hypothesis) checks the contract end to end: a mutated batch
is refused with a Kafka error code, or stored exactly as the broker's own patching (offsets,
leader epoch, true max timestamp) makes it. Real clients producing with every codec still work:
tests/integration/test_clients_roundtrip.py.
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.protocol.errors import ErrorCode
from snakka.records import (
    Record,
    assign_offsets,
    build_batch,
    iter_records,
    validate_batches,
)
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, now_ms, raw_connect, run_async

INVALID_RECORD = 87
INVALID_TIMESTAMP = 32
PRODUCE_VERSION = 9  # by topic name, with RecordErrors (v8+)


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        ck_create_topic(b.bootstrap_servers, "claims", 1)
        ck_create_topic(b.bootstrap_servers, "fuzz", 1)
        yield b


async def _produce(conn, topic: str, batch: bytes):
    from snakka.protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    resp = await conn.send(ProduceRequest(
        transactional_id=None, acks=-1, timeout_ms=5000,
        topic_data=[TopicProduceData(name=topic, partition_data=[
            PartitionProduceData(index=0, records=batch)])]), version=PRODUCE_VERSION)
    return resp.responses[0].partition_responses[0]


async def _fetch(conn, topic: str, offset: int) -> bytes:
    from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic

    resp = await conn.send(FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[FetchTopic(topic=topic, partitions=[
            FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id=""), version=11)
    p = resp.responses[0].partitions[0]
    assert p.error_code == 0, p
    return bytes(p.records or b"")


def recrc(buf: bytearray) -> bytearray:
    """Recompute the CRC of the batch in ``buf`` after a test changed a covered byte."""
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return buf


def _batch(n: int, ts: int | None = None) -> bytearray:
    ts = now_ms() if ts is None else ts
    return bytearray(build_batch([Record(timestamp=ts + i, key=b"k%d" % i, value=b"v%d" % i,
                                         headers=[("h", b"%d" % i)]) for i in range(n)]))


def _claim(buf: bytearray, count: int) -> bytearray:
    """Make the header claim ``count`` records (count and lastOffsetDelta agree), CRC valid."""
    struct.pack_into(">i", buf, 23, count - 1)
    struct.pack_into(">i", buf, 57, count)
    return recrc(buf)


def test_a_billion_claimed_records_is_refused_and_offsets_do_not_jump(broker):
    """The issue's case: 5 real records claiming 1e9. Before the fix the partition's next
    offset became 1e9."""
    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            r = await _produce(conn, "claims", bytes(_claim(_batch(5), 1_000_000_000)))
            assert r.error_code == INVALID_RECORD, r
            assert "claims" in (r.error_message or ""), r
            good = await _produce(conn, "claims", bytes(_batch(5)))
            assert good.error_code == 0, good
            follow = await _produce(conn, "claims", bytes(_batch(1)))
            assert follow.base_offset == good.base_offset + 5, (good, follow)
            assert [r.offset for r in iter_records(await _fetch(conn, "claims", 0))][-1] \
                == follow.base_offset
        finally:
            await conn.close()
    run_async(go())


def test_a_record_out_of_range_gets_invalid_timestamp_with_record_errors(broker):
    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            now = now_ms()
            recs = [Record(timestamp=now + i, key=b"k", value=b"v") for i in range(4)]
            recs[1] = recs[1]._replace(timestamp=now + 5 * 3600 * 1000)  # > after.max.ms (1 h)
            recs[3] = recs[3]._replace(timestamp=now + 6 * 3600 * 1000)
            r = await _produce(conn, "claims", build_batch(recs))
            assert r.error_code == INVALID_TIMESTAMP, r
            assert [e.batch_index for e in r.record_errors] == [1, 3], r
            assert all("should be within" in e.batch_index_error_message
                       for e in r.record_errors), r
        finally:
            await conn.close()
    run_async(go())


def _expected_stored(sent: bytes, offset: int) -> bytes:
    """What the broker should store for an accepted batch: its own patching applied."""
    buf = bytearray(sent)
    infos = validate_batches(buf, max_message_bytes=1 << 20)
    assign_offsets(buf, infos, offset, None)
    return bytes(buf)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from([0, 1, 2, 3, 4]), st.integers(1, 6), st.data())
def test_byte_flips_are_refused_with_an_error_code_or_stored_exactly(broker, codec, n, data):
    ts = now_ms()
    buf = bytearray(build_batch([Record(timestamp=ts + i, key=b"k%d" % i, value=b"v" * i)
                                 for i in range(n)], compression=codec))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(21, len(buf) - 1))  # the CRC-covered part
        buf[i] ^= data.draw(st.integers(1, 255))
    sent = bytes(recrc(buf))

    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            r = await _produce(conn, "fuzz", sent)
            if r.error_code:
                return r.error_code
            stored = await _fetch(conn, "fuzz", r.base_offset)
            length = struct.unpack_from(">i", stored, 8)[0] + 12
            assert stored[:length] == _expected_stored(sent, r.base_offset)
            got = list(iter_records(stored[:length]))
            assert [g.offset for g in got] == list(range(r.base_offset, r.base_offset + len(got)))
            return 0
        finally:
            await conn.close()

    code = run_async(go())
    assert code == 0 or code in {int(e) for e in ErrorCode}, code
