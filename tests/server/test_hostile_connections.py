"""Hostile connections (issue 9, items 11 and 12), bounded and loopback only.

- max.connections.per.ip (+ overrides): one address cannot take every slot; other addresses
  (127.0.0.1 vs 127.0.0.2: both loopback on Linux) are still served.
- socket.request.arrival.timeout.ms: a request that dribbles in (slowloris) is closed, even
  though its bytes keep the connection "active".
- queued.max.response.bytes: Fetch responses for clients that never read are bounded broker-wide;
  a reading client is still served; a non-reader is aborted after connections.max.idle.ms and its
  memory comes back.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time

import pytest

from snakka.config import BrokerConfig, ConfigError
from snakka.protocol import encode_request
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.fetch_response import FetchResponse
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.protocol.messages.produce_response import ProduceResponse
from snakka.records import Record, build_batch
from snakka.testing import EmbeddedBroker

from .test_connection_limits import healthy, is_closed_by_peer, recv_frame

TIMEOUT = 15.0


def connect_from(broker: EmbeddedBroker, source_ip: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT)
    s.bind((source_ip, 0))
    s.connect(("127.0.0.1", broker.port))
    return s


def wait_for(pred, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def registered(broker: EmbeddedBroker, ip: str) -> int:
    return sum(1 for c in list(broker.broker.connections) if c.peer.startswith(ip + ":"))


# -- max.connections.per.ip --------------------------------------------------------------
def test_per_ip_limit_refuses_only_that_address():
    cfg = {"max.connections.per.ip": "5", "max.connections.per.ip.overrides": "127.0.0.3:2"}
    with EmbeddedBroker(config=cfg) as b:
        held = [connect_from(b, "127.0.0.2") for _ in range(5)]
        try:
            wait_for(lambda: registered(b, "127.0.0.2") == 5, "5 registered connections")
            extra = connect_from(b, "127.0.0.2")
            assert is_closed_by_peer(extra)
            extra.close()
            # The override: two from 127.0.0.3, the third refused.
            over = [connect_from(b, "127.0.0.3") for _ in range(2)]
            wait_for(lambda: registered(b, "127.0.0.3") == 2, "2 from 127.0.0.3")
            third = connect_from(b, "127.0.0.3")
            assert is_closed_by_peer(third)
            third.close()
            for s in over:
                s.close()
            assert healthy(b)  # 127.0.0.1 is another address: served
            assert registered(b, "127.0.0.2") == 5
        finally:
            for s in held:
                s.close()
        # Closed connections give their slots back.
        wait_for(lambda: registered(b, "127.0.0.2") == 0, "slots freed")
        again = [connect_from(b, "127.0.0.2") for _ in range(5)]
        try:
            wait_for(lambda: registered(b, "127.0.0.2") == 5, "5 again")
        finally:
            for s in again:
                s.close()


def test_refusals_are_logged_rate_limited(caplog):
    from snakka.server.quotas import ConnectionQuotas

    t = [0.0]
    quotas = ConnectionQuotas(BrokerConfig({"max.connections.per.ip": "1"}), clock=lambda: t[0])
    assert quotas.inc("10.0.0.1")
    with caplog.at_level(logging.INFO, logger="snakka.server"):
        for _ in range(1000):
            assert not quotas.inc("10.0.0.1")
        t[0] = 11.0
        assert not quotas.inc("10.0.0.1")
    lines = [r.getMessage() for r in caplog.records if r.name == "snakka.server"]
    assert len(lines) == 2, lines
    assert "rejected connection from 10.0.0.1" in lines[0]
    assert "rejected 1000 more connection(s) from 10.0.0.1" in lines[1]
    assert quotas.total == 1 and quotas.counts == {"10.0.0.1": 1}
    quotas.dec("10.0.0.1")
    assert quotas.total == 0 and quotas.counts == {}


def test_per_ip_configs_are_validated():
    from snakka.server.quotas import ConnectionQuotas

    with pytest.raises(ConfigError, match="zero only if"):
        BrokerConfig({"max.connections.per.ip": "0"})
    BrokerConfig({"max.connections.per.ip": "0",
                  "max.connections.per.ip.overrides": "127.0.0.1:10"})
    for bad in ("127.0.0.1", "127.0.0.1:x", "127.0.0.1:-1", ":5"):
        with pytest.raises(ConfigError):
            BrokerConfig({"max.connections.per.ip.overrides": bad})
    quotas = ConnectionQuotas(BrokerConfig({
        "max.connections.per.ip": "0",
        "max.connections.per.ip.overrides": "localhost:7, ::1:3 ,10.1.2.3:0"}))
    assert quotas.max_for("127.0.0.1") == 7  # a hostname: every address it resolves to
    assert quotas.max_for("::1") == 3
    assert quotas.max_for("10.1.2.3") == 0
    assert quotas.max_for("10.9.9.9") == 0


# -- socket.request.arrival.timeout.ms ---------------------------------------------------
def test_slowloris_request_is_closed_but_a_slow_complete_one_is_served():
    cfg = {"socket.request.arrival.timeout.ms": "600", "connections.max.idle.ms": "600000"}
    with EmbeddedBroker(config=cfg) as b:
        loris = [connect_from(b, "127.0.0.2") for _ in range(20)]
        for s in loris:
            s.sendall(struct.pack(">i", 500) + b"\x00")
        t0 = time.monotonic()
        closed = 0
        while time.monotonic() - t0 < TIMEOUT and closed < len(loris):
            closed = 0
            for s in loris:  # a byte every 50 ms keeps the connection "active"
                try:
                    s.sendall(b"\x00")
                except OSError:
                    closed += 1
            time.sleep(0.05)
        assert closed == len(loris), f"only {closed} slowloris connections were closed"
        for s in loris:
            s.close()
        # A request that arrives in pieces but within the bound is answered.
        with connect_from(b, "127.0.0.1") as s:
            frame = encode_request(1, "slow", 0, _api_versions())
            for i in range(0, len(frame), 3):
                s.sendall(frame[i:i + 3])
                time.sleep(0.01)
            assert struct.unpack_from(">i", recv_frame(s), 0)[0] == 1
        assert healthy(b)


def _api_versions():
    from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
    return ApiVersionsRequest()


# -- queued.max.response.bytes -----------------------------------------------------------
BATCH_RECORDS = 100
VALUE = 1000


def _produce(sock: socket.socket, topic: str, batches: int) -> None:
    sock.sendall(encode_request(99, "p", 5, MetadataRequest(
        topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True)))
    recv_frame(sock)
    corr = 100
    for _ in range(batches):
        now = int(time.time() * 1000)
        batch = build_batch([Record(timestamp=now, key=None, value=os.urandom(VALUE))
                             for _ in range(BATCH_RECORDS)])
        req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
            TopicProduceData(name=topic, partition_data=[
                PartitionProduceData(index=0, records=batch)])])
        sock.sendall(encode_request(corr, "p", 8, req))
        resp = ProduceResponse.decode(recv_frame(sock)[4:], 8)
        assert resp.responses[0].partition_responses[0].error_code == 0
        corr += 1


def _fetch(topic: str, max_bytes: int, max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                        isolation_level=0, session_id=0, session_epoch=-1,
                        topics=[FetchTopic(topic=topic, partitions=[FetchPartition(
                            partition=0, fetch_offset=0, partition_max_bytes=max_bytes)])],
                        forgotten_topics_data=[], rack_id="")


def _records_len(frame: bytes) -> int:
    resp = FetchResponse.decode(frame[4:], 11)
    return len(resp.responses[0].partitions[0].records or b"")


def test_unread_fetch_responses_are_bounded_and_readers_still_served():
    budget = 2 * 1024 * 1024
    cfg = {"queued.max.response.bytes": str(budget), "auto.create.topics.enable": "true",
           "queued.max.response.bytes.per.connection": str(256 * 1024),
           "connections.max.idle.ms": "600000"}
    with EmbeddedBroker(config=cfg) as b:
        pool = b.broker.response_memory
        with connect_from(b, "127.0.0.1") as s:
            _produce(s, "big", 80)  # 80 batches of ~100 KB: ~8 MB
        batch_size = BATCH_RECORDS * (VALUE + 50)  # an upper bound of one stored batch
        hostile = []
        for _ in range(10):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", b.port))
            # Pipelined fetches, never read: each asks for everything.
            s.sendall(b"".join(encode_request(c, "h", 11, _fetch("big", 64 << 20))
                               for c in range(20)))
            hostile.append(s)
        wait_for(lambda: registered(b, "127.0.0.2") == 10, "hostile connections")
        # The kernel's socket buffers absorb a few MB per connection first; then the budget
        # holds what is left. Sample it while the broker answers the pipelined fetches.
        wait_for(lambda: pool.used >= budget // 2, "response bytes to be held")
        peak = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            peak = max(peak, pool.used)
            time.sleep(0.005)
        # Bound: the budget plus at most one "first batch only" response per connection.
        assert peak <= budget + 10 * batch_size, peak
        # A client that reads is served, batch by batch, while the budget is spent.
        with connect_from(b, "127.0.0.1") as s:
            for corr in range(3):
                s.sendall(encode_request(corr, "healthy", 11, _fetch("big", 64 << 20)))
                assert _records_len(recv_frame(s)) >= BATCH_RECORDS * VALUE  # a whole batch
        for s in hostile:
            s.close()
        wait_for(lambda: pool.used == 0, "all response memory released")


def test_non_reader_is_aborted_when_idle_and_its_memory_released():
    cfg = {"queued.max.response.bytes": str(1 << 20), "connections.max.idle.ms": "400"}
    with EmbeddedBroker(config=cfg) as b:
        with connect_from(b, "127.0.0.1") as s:
            _produce(s, "t", 40)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", b.port))
        # Enough pipelined fetches to fill the kernel's socket buffers too.
        s.sendall(b"".join(encode_request(c, "h", 11, _fetch("t", 64 << 20)) for c in range(20)))
        wait_for(lambda: any(c.write_buffer_size() > 0
                             for c in list(b.broker.connections)), "a held response")
        # Never read: closed as idle (aborted, not a graceful close that waits for the reader).
        wait_for(lambda: registered(b, "127.0.0.2") == 0, "the non-reader to be closed")
        assert b.broker.response_memory.used == 0
        s.close()


def test_closing_for_a_bad_frame_does_not_wait_for_a_non_reader():
    """A protocol error closes at once even when unread responses are queued (a graceful close
    would wait for the client to read them: the slot and the memory would be held forever)."""
    cfg = {"connections.max.idle.ms": "600000",
           "queued.max.response.bytes.per.connection": str(256 << 20)}  # keep reading it
    with EmbeddedBroker(config=cfg) as b:
        with connect_from(b, "127.0.0.1") as s:
            _produce(s, "t", 40)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", b.port))
        s.sendall(b"".join(encode_request(c, "h", 11, _fetch("t", 64 << 20)) for c in range(20))
                  + struct.pack(">i", -1))  # then an invalid frame size: the broker closes
        wait_for(lambda: registered(b, "127.0.0.2") == 0, "the connection to be closed")
        assert b.broker.response_memory.used == 0
        s.close()


def test_fetch_without_response_memory_answers_by_max_wait_without_records():
    """A long-poll woken while the budget is spent and its connection holds bytes (here: the
    response queued behind it) cannot reserve: it answers at its max_wait_ms without records
    instead of waiting for bytes that can only be written after it."""
    cfg = {"queued.max.response.bytes": str(50 * 1024)}  # less than one batch
    with EmbeddedBroker(config=cfg) as b:
        with connect_from(b, "127.0.0.1") as s:
            _produce(s, "big", 4)
            _produce(s, "lp", 0)  # creates the empty topic
        with connect_from(b, "127.0.0.1") as s:
            long_poll = FetchRequest(
                replica_id=-1, max_wait_ms=1500, min_bytes=1, max_bytes=1 << 20,
                isolation_level=0, session_id=0, session_epoch=-1,
                topics=[FetchTopic(topic="lp", partitions=[FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[], rack_id="")
            s.sendall(encode_request(1, "c", 11, long_poll)
                      + encode_request(2, "c", 11, _fetch("big", 64 << 20)))
            # The second fetch took (more than) the whole budget; wake the long poll.
            wait_for(lambda: b.broker.response_memory.exhausted, "the budget to be spent")
            with connect_from(b, "127.0.0.1") as p:
                _produce(p, "lp", 1)
            first = FetchResponse.decode(recv_frame(s)[4:], 11)
            part = first.responses[0].partitions[0]
            assert struct.unpack_from(">i", recv_frame(s), 0)[0] == 2
        assert part.error_code == 0 and part.high_watermark == BATCH_RECORDS
        assert not part.records  # no memory for them: the client fetches again
        wait_for(lambda: b.broker.response_memory.used == 0, "memory released")
