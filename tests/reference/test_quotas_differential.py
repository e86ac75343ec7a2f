"""Client quotas against the reference Kafka 4.0: the same quota config, set with Kafka's own
``kafka-configs.sh`` on both brokers, and the same requests; the answers compared field by field
(shape.py) plus the values shape.py leaves out that a quota decides (throttle time's sign or
value, the fetch session id).

- ``consumer_byte_rate``: a Fetch that would take the client over its rate is answered empty
  (no partitions, error NONE) with the same throttle time (the whole response counted, its
  records filled to the byte limit as Kafka's read fills them); a full fetch's new session is
  dropped (session id 0), an incremental one keeps its id. A fetch whose MinBytes exceeds the
  quota span (or its MaxBytes, without a quota) is answered at once (Kafka's min(MinBytes,
  fetch max bytes)).
- ``request_percentage``: a Fetch it throttles is answered empty too.
- ``controller_mutation_rate`` (KIP-599): strict for CreateTopics v6+, CreatePartitions v3+,
  DeleteTopics v5+ (THROTTLING_QUOTA_EXCEEDED per topic, message null, once the bucket is in
  debt; the overdrawing topic itself succeeds; validate-only requests are charged and refused
  too), permissive before (done, throttle time set).
- ``connection_creation_rate`` of an ``ips`` entity (KIP-612): connections over the address's
  rate are held, then closed unanswered; the first ones (the burst) are served; other
  addresses are not affected. The address is 127.0.0.2 (any 127/8 source reaches a listener on
  127.0.0.1), so the shared reference broker's other clients (127.0.0.1) are not throttled.

Fields that legitimately differ are the ones shape.py leaves out by name (throttle_time_ms,
session_id: compared here by sign and by relation instead) and the fetched record bytes'
length (Kafka cuts the last batch at the byte limit, snakka returns whole batches; both are
"bytes"). Uses the package's shared
reference broker and snakka broker (tests/reference/conftest.py); every entity and topic name
is fresh per run (the reference broker may outlive a run)."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from snakka.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from snakka.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from snakka.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.records.record import Record, build_batch
from snakka.testing.embedded import EmbeddedBroker

from .conftest import SNAKKA_CONFIG
from .differential import Peer, assert_same_shape, run_both
from .test_java_tools import tool

RUN = uuid.uuid4().hex[:8]
THROTTLING_QUOTA_EXCEEDED = 89


def set_quota(brokers: tuple[str, str], config: str, *entity: str) -> None:
    """``kafka-configs.sh --alter --add-config`` on both brokers (two JVMs at once)."""
    def run(bs: str) -> str:
        return tool("kafka-configs.sh", "--bootstrap-server", bs, "--alter", "--add-config",
                    config, *entity)

    with ThreadPoolExecutor(2) as pool:
        for out in pool.map(run, brokers):
            assert "Completed updating config" in out, out


def throttled(kafka: Peer, snakka: Peer) -> dict[str, tuple[bool, bool]]:
    """label -> (Kafka throttled it, snakka throttled it): the throttle time's sign (its value
    depends on each broker's clock and on what it counts, shape.py ignores it)."""
    return {label: (kafka.responses[label].throttle_time_ms > 0,
                    snakka.responses[label].throttle_time_ms > 0) for label in kafka.responses}


# -- consumer_byte_rate ------------------------------------------------------------------------

@pytest.mark.parametrize("version,entity", [
    (None, "clients"),
    (11, "users+clients"),  # librdkafka's Fetch version; the (user, client-id) entity
])
def test_fetch_throttled_by_consumer_byte_rate(brokers, versions, version, entity):
    client = f"fetch-quota-{entity.replace('+', '-')}-{RUN}"
    t = f"quota-fetch-{entity.replace('+', '-')}-{RUN}"
    user = ("--entity-type", "users", "--entity-name", "ANONYMOUS") if "users" in entity else ()
    # 2000 B/s: a quota span (10 windows of 1 s) holds 20,000 bytes.
    set_quota(brokers, "consumer_byte_rate=2000", *user, "--entity-type", "clients",
              "--entity-name", client)
    value = b"x" * 7900  # one ~7,970-byte batch per produce
    muted: dict[str, tuple[int, float]] = {}  # broker -> (throttle ms, next answer after, s)

    async def scenario(p: Peer):
        # Created after the quota: once Kafka's broker serves the topic, its metadata publishers
        # have applied the earlier quota record too.
        await p.create_topic(t)
        for _ in range(4):
            now = int(time.time() * 1000)
            resp = await p.send(ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[
                TopicProduceData(name=t, partition_data=[PartitionProduceData(
                    index=0, records=build_batch([Record(timestamp=now, value=value)]))])]))
            assert resp.responses[0].partition_responses[0].error_code == 0, resp
        md = await p.send(MetadataRequest(topics=[MetadataRequestTopic(name=t)]), version=12)
        tid = md.topics[0].topic_id

        def fetch(offset: int, max_bytes: int, session_id: int, epoch: int) -> FetchRequest:
            return FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
                isolation_level=0, session_id=session_id, session_epoch=epoch,
                topics=[FetchTopic(topic=t, topic_id=tid, partitions=[FetchPartition(
                    partition=0, fetch_offset=offset, partition_max_bytes=max_bytes,
                    current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)])],
                forgotten_topics_data=[], rack_id="")

        # ~9,000 bytes: under the quota (a new full session).
        first = await p.ask("under_quota", fetch(0, 9000, 0, 0), version)
        # Three more batches (Kafka: 20,000 bytes, the last one cut; snakka: the whole batches
        # sent, 20,000 bytes counted as Kafka counts them): over the quota by the same amount.
        # Incremental: the session is kept.
        throttled_at = await p.ask("throttled_incremental",
                                   fetch(1, 20000, first.session_id, 1), version)
        since = time.monotonic()
        # A new full session, throttled too (its bytes were taken back, the rate is unchanged);
        # read only once the connection's mute (KIP-219) ends.
        await p.ask("throttled_full", fetch(1, 20000, 0, 0), version)
        muted[p.name] = (throttled_at.throttle_time_ms, time.monotonic() - since)
        await p.ask("throttled_sessionless", fetch(1, 20000, 0, -1), version)
        p.responses["session"] = first.session_id

    kafka, snakka = run_both(brokers, versions, scenario, client_id=client)
    sessions = {peer.name: (peer.responses.pop("session"),
                            peer.responses["throttled_incremental"].session_id,
                            peer.responses["throttled_full"].session_id,
                            peer.responses["throttled_sessionless"].session_id)
                for peer in (kafka, snakka)}
    for name, (created, incremental, full, sessionless) in sessions.items():
        assert created != 0, (name, "the first full fetch opens a session")
        assert incremental == created, (name, "a throttled incremental fetch keeps its session")
        assert full == 0, (name, "a throttled full fetch's new session is not kept")
        assert sessionless == 0, name
    assert_same_shape(kafka, snakka)
    assert throttled(kafka, snakka) == {"under_quota": (False, False),
                                        "throttled_incremental": (True, True),
                                        "throttled_full": (True, True),
                                        "throttled_sessionless": (True, True)}
    for peer in (kafka, snakka):
        for label in ("throttled_incremental", "throttled_full", "throttled_sessionless"):
            resp = peer.responses[label]
            assert resp.error_code == 0 and resp.responses == [], (peer.name, label, resp)
        # Muted: the next request waited for (most of) the throttle time. A lower bound only
        # (the broker's clock started before ours; a slow machine only makes it longer).
        throttle_ms, waited = muted[peer.name]
        assert waited >= throttle_ms / 2000, (peer.name, throttle_ms, waited)
    # The same throttle time: both count the whole response, records filled to the byte limit
    # as Kafka's read fills it (measured: Kafka 4553/3996/3998 ms, snakka 4566/3996/3999 ms).
    # Each is (counted bytes / quota - the sampled span), and the span grows with the time
    # since the client's first fetch, which the two runs see a little apart: within 10%.
    for label in ("throttled_incremental", "throttled_full", "throttled_sessionless"):
        k, s = kafka.responses[label].throttle_time_ms, snakka.responses[label].throttle_time_ms
        assert abs(k - s) <= k / 10, (label, k, s)


def whole_batches(records: bytes) -> list[int]:
    """The base offsets of the whole batches in a record set (Kafka may end it with a batch
    cut at the byte limit, which clients drop: not counted)."""
    out, pos = [], 0
    while pos + 12 <= len(records):
        length = struct.unpack_from(">i", records, pos + 8)[0]
        if pos + 12 + length > len(records):
            break
        out.append(struct.unpack_from(">q", records, pos)[0])
        pos += 12 + length
    return out


async def produce_batches(p: Peer, topic: str, count: int, value: bytes,
                          partition: int = 0) -> None:
    for _ in range(count):
        now = int(time.time() * 1000)
        resp = await p.send(ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[
            TopicProduceData(name=topic, partition_data=[PartitionProduceData(
                index=partition, records=build_batch([Record(timestamp=now, value=value)]))])]))
        assert resp.responses[0].partition_responses[0].error_code == 0, resp


def one_partition_fetch(topic: str, tid: uuid.UUID, offset: int, *, max_bytes: int,
                        min_bytes: int = 0, max_wait_ms: int = 0,
                        partitions: int = 1) -> FetchRequest:
    """A sessionless fetch of partitions 0..partitions-1 of ``topic``, each from ``offset``."""
    return FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[FetchTopic(topic=topic, topic_id=tid, partitions=[FetchPartition(
            partition=p, fetch_offset=offset, partition_max_bytes=max_bytes,
            current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)
            for p in range(partitions)])],
        forgotten_topics_data=[], rack_id="")


def test_fetch_min_bytes_lowered_to_the_quota_span(brokers, versions):
    """Kafka's fetchMinBytes is min(MinBytes, the fetch's byte limit), and a consumer's limit
    is its quota span (consumer_byte_rate x 10 s): a fetch whose MinBytes exceeds the span is
    answered as soon as a span's worth is readable, not after MaxWaitMs. Both brokers answer
    the first such fetch at once (throttled or not: a full span plus the response's own bytes
    is just over the quota for a new client, Kafka throttles it for a few ms), and the first
    unthrottled answer carries the same whole batches (Kafka adds the next one cut short):
    partition 0's first two, and nothing of partition 1, since Kafka's cut batch filled the
    span (snakka counts it the same way)."""
    client = f"fetch-minbytes-{RUN}"
    t = f"quota-minbytes-{RUN}"
    set_quota(brokers, "consumer_byte_rate=2000", "--entity-type", "clients",
              "--entity-name", client)
    max_wait_ms = 30000
    answered: dict[str, list[tuple[float, int, list[list[int]]]]] = {}

    async def scenario(p: Peer):
        await p.create_topic(t, partitions=2)
        for partition in (0, 1):  # ~7,970-byte batches: 31,880 > 20,000 in each
            await produce_batches(p, t, 4, b"x" * 7900, partition)
        md = await p.send(MetadataRequest(topics=[MetadataRequestTopic(name=t)]), version=12)
        tid = md.topics[0].topic_id
        got = answered[p.name] = []
        # Each throttled answer is followed by the next fetch, read once the mute ends; a few
        # tries at most (the throttle only covers the response's own bytes over the span).
        for _ in range(5):
            since = time.monotonic()
            resp = await p.send(one_partition_fetch(t, tid, 0, max_bytes=1 << 20,
                                                    min_bytes=1_000_000,
                                                    max_wait_ms=max_wait_ms, partitions=2))
            parts = sorted(resp.responses[0].partitions,
                           key=lambda pd: pd.partition_index) if resp.responses else []
            got.append((time.monotonic() - since, resp.throttle_time_ms,
                        [whole_batches(bytes(pd.records or b"")) for pd in parts]))
            if resp.throttle_time_ms == 0:
                break

    run_both(brokers, versions, scenario, client_id=client)
    for name, got in answered.items():
        waited, throttle_ms, batches = got[-1]
        assert throttle_ms == 0, (name, got)
        # Both answer with the two whole batches that fit the 20,000-byte span, and partition
        # 1 listed without records (what was left after partition 0: nothing).
        assert batches == [[0, 1], []], (name, got)
        # At once, not after MaxWaitMs (30 s); each try waits at most the previous throttle.
        assert all(w < max_wait_ms / 2000 for w, _t, _b in got), (name, got)


def test_fetch_min_bytes_lowered_to_max_bytes(brokers, versions):
    """The same rule without a quota: a fetch whose MinBytes exceeds its MaxBytes is answered
    as soon as MaxBytes are readable (Kafka fills them with a cut batch; snakka counts the
    whole batches that fit as filled), not after MaxWaitMs, with the same whole batches."""
    t = f"minbytes-maxbytes-{RUN}"
    max_wait_ms = 30000
    answered: dict[str, tuple[float, list[int]]] = {}

    async def scenario(p: Peer):
        await p.create_topic(t)
        await produce_batches(p, t, 4, b"z" * 7900)  # ~7,970-byte batches
        md = await p.send(MetadataRequest(topics=[MetadataRequestTopic(name=t)]), version=12)
        since = time.monotonic()
        resp = await p.ask("fetch", one_partition_fetch(
            t, md.topics[0].topic_id, 0, max_bytes=20000, min_bytes=1_000_000,
            max_wait_ms=max_wait_ms))
        answered[p.name] = (time.monotonic() - since, whole_batches(
            bytes(resp.responses[0].partitions[0].records or b"")))

    kafka, snakka = run_both(brokers, versions, scenario)
    assert_same_shape(kafka, snakka)
    for name, (waited, batches) in answered.items():
        assert batches == [0, 1], (name, answered)
        assert waited < max_wait_ms / 2000, (name, answered)  # at once, not after 30 s


def test_fetch_throttled_by_request_percentage_is_empty(brokers, versions):
    """Kafka records a consumer Fetch's handler time against request_percentage before it
    makes the response, and a fetch that takes the client over it is answered empty (no
    partitions, error NONE) with the throttle time (at most one quota window), its session
    not kept, as a byte-rate-throttled one."""
    client = f"fetch-reqpct-{RUN}"
    t = f"quota-reqpct-{RUN}"
    # A millionth of a percent of a thread: any fetch's handler time is over it.
    set_quota(brokers, "request_percentage=0.000001", "--entity-type", "clients",
              "--entity-name", client)

    async def scenario(p: Peer):
        await p.create_topic(t)
        await produce_batches(p, t, 2, b"y" * 1000)
        md = await p.send(MetadataRequest(topics=[MetadataRequestTopic(name=t)]), version=12)
        tid = md.topics[0].topic_id
        # The quota'd client id on a connection of its own (the scenario's own requests are
        # not throttled); it sends this Fetch only.
        host, port = parse_bootstrap(p.bootstrap)
        conn = await KafkaConnection(host, port, client_id=client).connect()
        try:
            req = one_partition_fetch(t, tid, 0, max_bytes=1 << 20)
            req.session_epoch = 0  # a full fetch asking for a new session
            await p.ask("fetch", req, conn=conn)
        finally:
            await conn.close()

    kafka, snakka = run_both(brokers, versions, scenario)
    assert_same_shape(kafka, snakka)
    for peer in (kafka, snakka):
        resp = peer.responses["fetch"]
        assert resp.error_code == 0 and resp.responses == [], (peer.name, resp)
        assert resp.session_id == 0, (peer.name, "a throttled full fetch's session is not kept")
        assert 0 < resp.throttle_time_ms <= 1000, (peer.name, resp.throttle_time_ms)


# -- controller_mutation_rate ------------------------------------------------------------------

def test_controller_mutation_rate_strict_and_permissive(brokers, versions):
    client = f"mutations-{RUN}"
    # 1 partition/s: the bucket holds 11 (controller.quota.window.num 11 x 1 s) and refills at 1/s.
    set_quota(brokers, "controller_mutation_rate=1", "--entity-type", "clients", "--entity-name",
              client)
    sentinel, big, small, loose = (f"quota-mut-{w}-{RUN}" for w in ("s", "a", "b", "c"))

    def topic(name: str, partitions: int) -> CreatableTopic:
        return CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                              assignments=[], configs=[])

    async def scenario(p: Peer):
        # Takes 1 token; once Kafka serves it, its controller has applied the quota as well.
        await p.create_topic(sentinel)
        # Each request on a new connection: a throttled one's connection is muted (KIP-219).
        async def ask(label: str, request, version: int):
            conn = await p.connect()
            try:
                return await p.ask(label, request, version=version, conn=conn)
            finally:
                await conn.close()

        # strict: the first topic overdraws the bucket (10 - 40: a debt of 30 s at 1/s, which
        # outlasts the scenario) and is created; the next one is refused.
        await ask("create_strict", CreateTopicsRequest(
            topics=[topic(big, 40), topic(small, 1)], timeout_ms=30000, validate_only=False),
            p.version(19))
        await ask("create_partitions_strict", CreatePartitionsRequest(
            topics=[CreatePartitionsTopic(name=big, count=41, assignments=None)],
            timeout_ms=30000, validate_only=False), p.version(37))
        await ask("delete_strict", DeleteTopicsRequest(
            topics=[DeleteTopicState(name=big)], topic_names=[big], timeout_ms=30000),
            p.version(20))
        # validate-only is charged and refused as well (Kafka's controller applies the quota
        # before it knows the request only validates)
        await ask("create_validate_only", CreateTopicsRequest(
            topics=[topic(small, 1)], timeout_ms=30000, validate_only=True), p.version(19))
        # permissive (older versions): done, with a throttle time
        await ask("create_permissive", CreateTopicsRequest(
            topics=[topic(loose, 1)], timeout_ms=30000, validate_only=False), 5)
        await p.wait_topic(loose, 1)
        await ask("create_partitions_permissive", CreatePartitionsRequest(
            topics=[CreatePartitionsTopic(name=loose, count=2, assignments=None)],
            timeout_ms=30000, validate_only=False), 2)
        await ask("delete_permissive", DeleteTopicsRequest(
            topic_names=[loose, big, sentinel], timeout_ms=30000), 4)

    kafka, snakka = run_both(brokers, versions, scenario, client_id=client)
    assert_same_shape(kafka, snakka)
    for peer in (kafka, snakka):
        errors = {t.name: t.error_code for t in peer.responses["create_strict"].topics}
        assert errors == {big: 0, small: THROTTLING_QUOTA_EXCEEDED}, (peer.name, errors)
        for label, results in (("create_partitions_strict", "results"),
                               ("delete_strict", "responses"),
                               ("create_validate_only", "topics")):
            got = [(r.error_code, r.error_message)
                   for r in getattr(peer.responses[label], results)]
            assert got == [(THROTTLING_QUOTA_EXCEEDED, None)], (peer.name, label, got)
        assert all(r.error_code == 0 for r in peer.responses["delete_permissive"].responses), \
            peer.name
    assert throttled(kafka, snakka) == {
        "create_strict": (True, True), "create_partitions_strict": (True, True),
        "delete_strict": (True, True), "create_validate_only": (True, True),
        "create_permissive": (True, True), "create_partitions_permissive": (True, True),
        "delete_permissive": (True, True)}


def test_controller_mutation_rate_other_errors_come_first(brokers, versions):
    """Under debt, a topic with another error gets that error (it never reaches the quota);
    validate-only CreatePartitions is charged as well; DeleteTopics by id names the refused
    topic."""
    client = f"mutations-errors-{RUN}"
    set_quota(brokers, "controller_mutation_rate=1", "--entity-type", "clients", "--entity-name",
              client)
    sentinel, big, fresh = (f"quota-err-{w}-{RUN}" for w in ("s", "a", "b"))

    def topic(name: str, partitions: int, replication: int = 1) -> CreatableTopic:
        return CreatableTopic(name=name, num_partitions=partitions,
                              replication_factor=replication, assignments=[], configs=[])

    async def scenario(p: Peer):
        await p.create_topic(sentinel)  # 1 token; the quota is applied once it is served
        async def ask(label: str, request, version: int):
            conn = await p.connect()
            try:
                return await p.ask(label, request, version=version, conn=conn)
            finally:
                await conn.close()

        created = await ask("overdraw", CreateTopicsRequest(
            topics=[topic(big, 40)], timeout_ms=30000, validate_only=False), p.version(19))
        big_id = created.topics[0].topic_id
        await p.wait_topic(big, 40)
        await ask("create_errors_first", CreateTopicsRequest(
            topics=[topic(big, 1), topic(f"quota-err-rf-{RUN}", 1, replication=5),
                    topic(fresh, 1)], timeout_ms=30000, validate_only=False), p.version(19))
        await ask("create_partitions_errors_first", CreatePartitionsRequest(
            topics=[CreatePartitionsTopic(name=big, count=5, assignments=None),
                    CreatePartitionsTopic(name=f"quota-err-none-{RUN}", count=2,
                                          assignments=None)],
            timeout_ms=30000, validate_only=False), p.version(37))
        await ask("create_partitions_validate_only", CreatePartitionsRequest(
            topics=[CreatePartitionsTopic(name=big, count=41, assignments=None)],
            timeout_ms=30000, validate_only=True), p.version(37))
        await ask("delete_by_id", DeleteTopicsRequest(
            topics=[DeleteTopicState(name=None, topic_id=big_id),
                    DeleteTopicState(name=None, topic_id=uuid.uuid4())], timeout_ms=30000),
            p.version(20))
        await ask("delete_unknown", DeleteTopicsRequest(
            topics=[DeleteTopicState(name=f"quota-err-none-{RUN}")],
            topic_names=[f"quota-err-none-{RUN}"], timeout_ms=30000), p.version(20))
        p.responses["big_id"] = big_id
        # clean up (permissive: done whatever the debt)
        conn = await p.connect()
        try:
            r = await p.send(DeleteTopicsRequest(topic_names=[big, sentinel], timeout_ms=30000),
                             4, conn)
            assert all(t.error_code == 0 for t in r.responses), r
        finally:
            await conn.close()

    kafka, snakka = run_both(brokers, versions, scenario, client_id=client)
    ids = {peer.name: peer.responses.pop("big_id") for peer in (kafka, snakka)}
    assert_same_shape(kafka, snakka, {
        "create_partitions_errors_first.results['quota-err-none-*'].error_message":
            "snakka names the missing topic; Kafka sends null (test_differential's too)"})
    def by_name(peer: Peer, label: str, results: str) -> dict:
        return {r.name: r.error_code for r in getattr(peer.responses[label], results)}

    for peer in (kafka, snakka):
        assert by_name(peer, "create_errors_first", "topics") == {
            big: 36, f"quota-err-rf-{RUN}": 38, fresh: THROTTLING_QUOTA_EXCEEDED}, peer.name
        assert by_name(peer, "create_partitions_errors_first", "results") == {
            big: 37, f"quota-err-none-{RUN}": 3}, peer.name
        assert by_name(peer, "create_partitions_validate_only", "results") == {
            big: THROTTLING_QUOTA_EXCEEDED}, peer.name
        by_id = {r.topic_id: (r.name, r.error_code)
                 for r in peer.responses["delete_by_id"].responses}
        assert by_id[ids[peer.name]] == (big, THROTTLING_QUOTA_EXCEEDED), (peer.name, by_id)
        assert by_name(peer, "delete_unknown", "responses") == {f"quota-err-none-{RUN}": 3}, peer.name


# -- connection_creation_rate (ips) ------------------------------------------------------------

THROTTLED_IP = "127.0.0.2"
OTHER_IP = "127.0.0.3"
# ApiVersions v0 (header v1, client id "ip-quota"): the smallest request every broker answers.
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 8) + b"ip-quota"
API_VERSIONS_V0 = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0


async def connection_outcome(bootstrap: str, source_ip: str) -> str:
    """Connect from ``source_ip``, send ApiVersions: "served" (a response), or "closed" (end of
    stream or reset before any response: the broker did not serve the connection)."""
    host, port = parse_bootstrap(bootstrap)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(
        host, int(port), local_addr=(source_ip, 0)), 30)
    try:
        writer.write(API_VERSIONS_V0)
        await writer.drain()
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 30))[0]
        corr = struct.unpack(">i", await reader.readexactly(4))[0]
        assert corr == 7 and size > 4
        return "served"
    except (asyncio.IncompleteReadError, ConnectionResetError):
        return "closed"
    finally:
        writer.close()


def test_connection_creation_rate_per_ip(brokers):
    # 1 connection/s: a new address may open 10 at once (quota.window.num 11 - 1 windows of
    # 1 s); the next ones, opened within those 10 s, take the rate above 1.
    set_quota(brokers, "connection_creation_rate=1", "--entity-type", "ips", "--entity-name",
              THROTTLED_IP)
    attempts = 14

    async def one(bootstrap: str) -> tuple[list[str], str]:
        seen = [await connection_outcome(bootstrap, THROTTLED_IP) for _ in range(attempts)]
        return seen, await connection_outcome(bootstrap, OTHER_IP)

    async def both():
        return await asyncio.gather(one(brokers[0]), one(brokers[1]))

    (kafka, kafka_other), (snakka, snakka_other) = asyncio.run(both())
    assert kafka == ["served"] * 10 + ["closed"] * (attempts - 10), kafka
    assert snakka == kafka
    assert kafka_other == snakka_other == "served"


# -- max.connection.creation.rate (broker-wide) ------------------------------------------------

BROKER_RATE = "max.connection.creation.rate"
BROKER_RESOURCE = 4


async def broker_config(bootstrap: str, name: str) -> str | None:
    """The broker's current value of ``name`` as DescribeConfigs reports it (Kafka: once its
    dynamic config is applied), or None when it is the default."""
    host, port = parse_bootstrap(bootstrap)
    async with KafkaConnection(host, port) as conn:
        md = await conn.send(MetadataRequest(topics=[]), version=12)
        resp = await conn.send(DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=BROKER_RESOURCE, resource_name=str(md.brokers[0].node_id),
            configuration_keys=[name])], include_synonyms=False,
            include_documentation=False), version=4)
    entries = resp.results[0].configs
    return entries[0].value if entries and entries[0].config_source != 5 else None  # DEFAULT


def wait_broker_config(bootstrap: str, name: str, value: str | None) -> None:
    deadline = time.monotonic() + 60
    while asyncio.run(broker_config(bootstrap, name)) != value:
        assert time.monotonic() < deadline, f"{name} never became {value} on {bootstrap}"
        time.sleep(0.2)


@pytest.fixture
def rate_limited(brokers) -> Iterator[tuple[str, str]]:
    """(the reference broker with the cluster-wide dynamic default max.connection.creation.rate
    = 2, a snakka broker with it set statically: snakka's is static, docs/quotas.md). The
    reference broker is shared: the default is removed again, and that awaited."""
    kafka = brokers[0]

    def configs(*args: str) -> str:
        return tool("kafka-configs.sh", "--bootstrap-server", kafka, "--alter",
                    "--entity-type", "brokers", "--entity-default", *args)

    configs("--add-config", f"{BROKER_RATE}=2")
    try:
        wait_broker_config(kafka, BROKER_RATE, "2")
        with EmbeddedBroker(config={**SNAKKA_CONFIG, BROKER_RATE: "2"},
                            host="127.0.0.1") as snakka:
            yield kafka, snakka.bootstrap_servers
    finally:
        configs("--delete-config", BROKER_RATE)
        wait_broker_config(kafka, BROKER_RATE, None)


def test_max_connection_creation_rate_delays_accepts(rate_limited):
    # 2 connections/s: 20 at once (10 windows of 1 s), then each accept above the rate makes
    # the acceptor wait (rate - 2) / 2 x 10 s (>= 0.5 s) before the next one.
    attempts = 26

    async def one(bootstrap: str) -> tuple[list[str], list[float]]:
        seen, at = [], []
        for _ in range(attempts):
            seen.append(await connection_outcome(bootstrap, "127.0.0.1"))
            at.append(time.monotonic())
        return seen, at

    async def both():
        return await asyncio.gather(one(rate_limited[0]), one(rate_limited[1]))

    (kafka, kafka_at), (snakka, snakka_at) = asyncio.run(both())
    # Never refused: every connection is served, late.
    assert kafka == snakka == ["served"] * attempts
    # Throttling happened (a lower bound only: a slow machine makes it longer, never shorter).
    for name, at in (("kafka", kafka_at), ("snakka", snakka_at)):
        gaps = [round(b - a, 2) for a, b in zip(at, at[1:], strict=False)]
        assert at[-1] - at[-6] >= 1.0, (name, gaps)
