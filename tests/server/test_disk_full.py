"""Disk full (issue 9 item 14): every write path answers an error code while the disk is full,
never a dropped connection, keeps memory equal to what is durable, and recovers when space
returns.

ENOSPC is simulated without filling a disk: while ``disk_full`` is active, ``os.pwrite``,
``os.write``, ``os.fsync`` and ``os.fdatasync`` raise ENOSPC in this process, where an in-process
broker runs (client sockets do not use them: librdkafka is C, kafka-python uses ``send``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import threading

import pytest

from snakka.protocol import decode_response_header, encode_request
from snakka.protocol.apis import api_spec
from snakka.testing import EmbeddedBroker

from .rawsock import recv_exact

RECV_TIMEOUT = 15.0
_PATCHED = ("pwrite", "write", "fsync", "fdatasync")


class DiskFull:
    """Switchable ENOSPC for the broker's writes (module doc)."""

    def __init__(self, monkeypatch) -> None:
        self.full = threading.Event()
        self.hits = 0
        for name in _PATCHED:
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(real))

    def _wrap(self, real):
        def call(*args, **kw):
            if self.full.is_set():
                self.hits += 1
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(*args, **kw)
        return call

    @contextlib.contextmanager
    def active(self):
        self.full.set()
        try:
            yield self
        finally:
            self.full.clear()


@pytest.fixture
def broker():
    with EmbeddedBroker(config={"group.initial.rebalance.delay.ms": "0",
                                "offsets.topic.num.partitions": "3"}) as b:
        yield b


@pytest.fixture
def disk(monkeypatch):
    return DiskFull(monkeypatch)


def ck_create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=30)[name].result(timeout=30)


class Raw:
    """One connection, one request at a time, decoded responses (to read exact codes)."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=RECV_TIMEOUT)
        self.corr = 0

    def call(self, version: int, request):
        self.corr += 1
        self.sock.sendall(encode_request(self.corr, "disk-full-test", version, request))
        frame = recv_exact(self.sock, struct.unpack(">i", recv_exact(self.sock, 4))[0])
        key = request.API_KEY
        header, pos = decode_response_header(frame, key, version)
        assert header.correlation_id == self.corr
        return api_spec(key).response_class.read(frame, pos, version)[0]

    def close(self) -> None:
        self.sock.close()


def offset_commit(raw: Raw, group: str, topic: str, offset: int):
    from snakka.protocol.messages.offset_commit_request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                              topics=[OffsetCommitRequestTopic(name=topic, partitions=[
                                  OffsetCommitRequestPartition(partition_index=0,
                                                               committed_offset=offset)])])
    resp = raw.call(8, req)
    return [p.error_code for t in resp.topics for p in t.partitions]


def offset_fetch(raw: Raw, group: str, topic: str) -> int:
    from snakka.protocol.messages.offset_fetch_request import (
        OffsetFetchRequest,
        OffsetFetchRequestTopic,
    )
    resp = raw.call(5, OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]))
    assert resp.error_code == 0
    return resp.topics[0].partitions[0].committed_offset


def test_produce_gets_storage_error_and_recovers(broker, disk):
    from kafka import KafkaProducer
    from kafka.errors import KafkaStorageError

    ck_create_topic(broker.bootstrap_servers, "full", 1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, retries=0, acks=1)
    try:
        p.send("full", b"before").get(timeout=30)
        with disk.active():
            with pytest.raises(KafkaStorageError):
                p.send("full", b"during").get(timeout=30)
        assert p.send("full", b"after").get(timeout=30).offset == 1
    finally:
        p.close()


def test_create_topics_answers_an_error_code_and_recovers(broker, disk):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaStorageError

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        with disk.active():
            with pytest.raises(KafkaStorageError):
                admin.create_topics({"made-while-full": {"num_partitions": 2}})
        assert disk.hits
        # Space is back: the broker serves on the same connection, and creates topics again.
        admin.create_topics({"made-after": {"num_partitions": 1}})
        assert "made-after" in admin.list_topics()
    finally:
        admin.close()


def test_offset_commit_is_not_served_unless_durable(broker, disk):
    ck_create_topic(broker.bootstrap_servers, "t", 1)
    raw = Raw(broker)
    try:
        assert offset_commit(raw, "g", "t", 5) == [0]  # creates __consumer_offsets too
        with disk.active():
            codes = offset_commit(raw, "g", "t", 9)
        assert codes == [16], codes  # NOT_COORDINATOR, as Kafka's coordinator maps it
        # The commit that was not written is not served, on the same connection.
        assert offset_fetch(raw, "g", "t") == 5
        assert offset_commit(raw, "g", "t", 9) == [0]
        assert offset_fetch(raw, "g", "t") == 9
    finally:
        raw.close()
    broker.restart()  # and what is served is what a restart replays
    raw = Raw(broker)
    try:
        assert offset_fetch(raw, "g", "t") == 9
    finally:
        raw.close()


def test_first_offset_commit_on_a_full_disk(broker, disk):
    """The very first commit also creates __consumer_offsets: nothing half-made is served."""
    ck_create_topic(broker.bootstrap_servers, "t", 1)
    raw = Raw(broker)
    try:
        with disk.active():
            codes = offset_commit(raw, "first", "t", 3)
        assert codes and all(c != 0 for c in codes), codes
        assert offset_fetch(raw, "first", "t") == -1
        assert offset_commit(raw, "first", "t", 4) == [0]
        assert offset_fetch(raw, "first", "t") == 4
    finally:
        raw.close()


def test_join_and_sync_group_on_a_full_disk(broker, disk):
    from snakka.protocol.messages.join_group_request import (
        JoinGroupRequest,
        JoinGroupRequestProtocol,
    )
    from snakka.protocol.messages.sync_group_request import (
        SyncGroupRequest,
        SyncGroupRequestAssignment,
    )

    raw = Raw(broker)

    def join():
        return raw.call(1, JoinGroupRequest(
            group_id="jg", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="range", metadata=b"m")]))

    def sync(j):
        return raw.call(0, SyncGroupRequest(
            group_id="jg", generation_id=j.generation_id, member_id=j.member_id,
            assignments=[SyncGroupRequestAssignment(member_id=j.member_id, assignment=b"a")]))

    try:
        j = join()
        assert j.error_code == 0
        with disk.active():
            s = sync(j)  # the leader's assignment is the group's first durable record
        assert s.error_code == 16, s.error_code
        # Space is back: the client re-joins (as Kafka clients do on NOT_COORDINATOR) and syncs.
        j = join()
        assert j.error_code == 0
        s = sync(j)
        assert s.error_code == 0 and s.assignment == b"a"
    finally:
        raw.close()


def test_share_acknowledgements_on_a_full_disk(broker, disk):
    """Acknowledgements that cannot be written get an error code, are not applied in memory
    (the records come back, as after a restart), and succeed once space returns."""
    import asyncio

    from snakka.client.share_admin import ShareAdmin
    from snakka.client.share_consumer import ShareConsumer
    bs = broker.bootstrap_servers
    ck_create_topic(bs, "jobs", 1)

    async def earliest():
        async with ShareAdmin(bs) as a:
            await a.alter_group_configs("workers", {"share.auto.offset.reset": "earliest"})
    asyncio.run(asyncio.wait_for(earliest(), 30))
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bs})
    for i in range(5):
        p.produce("jobs", value=b"job%d" % i, partition=0)
    assert p.flush(30) == 0

    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "workers", "fetch.max.wait.ms": 200,
                       "share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe(["jobs"])
        got: list = []
        while len(got) < 5:
            got += c.poll(0.5)
        assert [r.offset for r in got] == list(range(5))
        with disk.active():
            for r in got:
                c.acknowledge(r)
            results = c.commit_sync(15)
        assert results and all(e is not None for e in results.values()), results
        assert "COORDINATOR_NOT_AVAILABLE" in repr(list(results.values())), results
        # Space is back: the unacknowledged records are delivered again and can be acked.
        again: list = []
        while len(again) < 5:
            again += c.poll(0.5)
        assert sorted(r.offset for r in again) == list(range(5))
        for r in again:
            c.acknowledge(r)
        assert all(e is None for e in c.commit_sync(15).values())
    finally:
        c.close()


def test_consumer_group_heartbeat_on_a_full_disk_leaves_no_ghost_member(broker, disk):
    """KIP-848: a join whose records cannot be written is rolled back (no member that a restart
    would not know), answered NOT_COORDINATOR, and the retry after space returns joins."""
    import uuid

    from snakka.protocol.messages.consumer_group_describe_request import (
        ConsumerGroupDescribeRequest,
    )
    from snakka.protocol.messages.consumer_group_heartbeat_request import (
        ConsumerGroupHeartbeatRequest,
    )
    ck_create_topic(broker.bootstrap_servers, "cg-topic", 2)
    raw = Raw(broker)

    def heartbeat(member_id: str):
        return raw.call(1, ConsumerGroupHeartbeatRequest(
            group_id="cg", member_id=member_id, member_epoch=0, rebalance_timeout_ms=10000,
            subscribed_topic_names=["cg-topic"], topic_partitions=[]))

    try:
        with disk.active():
            r = heartbeat(str(uuid.uuid4()))
        assert r.error_code == 16, r.error_code
        d = raw.call(0, ConsumerGroupDescribeRequest(group_ids=["cg"])).groups[0]
        assert not d.members, [m.member_id for m in d.members]
        member = str(uuid.uuid4())
        r = heartbeat(member)
        assert r.error_code == 0 and r.member_epoch >= 1
        d = raw.call(0, ConsumerGroupDescribeRequest(group_ids=["cg"])).groups[0]
        assert [m.member_id for m in d.members] == [member]
    finally:
        raw.close()
