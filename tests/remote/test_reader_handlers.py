"""Fetch, ShareFetch and ListOffsets over a partition whose first segments are remote only.

An embedded broker (thread mode) gets records from a real producer; then, on the broker's
event loop, the partition's closed segments are "copied" to the in-test storage manager of
tests/remote/test_reader.py and deleted locally, and the log gets a remote reader (what the
RemoteLogManager does once the copier has run; the lead wires the real one). Real clients
then read from offset 0; the storage manager can be stalled to check
``remote.fetch.max.wait.ms``.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from confluent_kafka import Producer
from integration.helpers import ck_consume, raw_connect, run_async  # tests/ is on sys.path

from remote.test_reader import FakeMetadata, FakeStorage, drop_local, tier
from snakka.client.admin import Admin
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.remote.reader import RemoteReaderPool
from snakka.remote.types import TopicIdPartition
from snakka.share.manager import split_batches
from snakka.testing import EmbeddedBroker

TOPIC = "tiered"
ROUNDS, PER_ROUND = 6, 50
TS0 = 1_700_000_000_000
STEP = 1000  # ms between records: a test's own delays do not move a time onto another record


def _on_loop(b: EmbeddedBroker, fn):
    async def call():
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), b._loop).result(30)


def _value(i: int) -> bytes:
    return b"value-%06d-" % i + b"x" * (i % 97)


def _produce_tiered(b: EmbeddedBroker, partitions: int = 1, *, chunk: int = 512,
                    gate: threading.Event | None = None):
    """ROUNDS x PER_ROUND records to partition 0 (timestamps TS0 + i * STEP), a segment per round;
    every closed segment tiered and deleted locally; the remote reader installed. Returns
    (pool, storage, first local offset)."""
    async def create():
        async with Admin(b.bootstrap_servers) as admin:
            await admin.create_topic(TOPIC, partitions)

    run_async(create())
    plog = b.broker.replicas.get_log(TOPIC, 0)
    p = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0})
    i = 0
    for _ in range(ROUNDS):
        for _ in range(PER_ROUND):
            p.produce(TOPIC, _value(i), key=b"k%d" % i, partition=0, timestamp=TS0 + i * STEP)
            i += 1
        assert p.flush(30) == 0
        _on_loop(b, plog.roll)
    for q in range(1, partitions):
        p.produce(TOPIC, b"local-%d" % q, partition=q)
    assert p.flush(30) == 0
    topic_id = b.broker.replicas.metadata.topics[TOPIC].topic_id
    tp = TopicIdPartition(topic_id, TOPIC, 0)
    rsm, rlmm = FakeStorage(chunk_size=chunk), FakeMetadata()
    rsm.gate = gate
    cfg = b.broker.config

    def install():
        mds = tier(plog, tp, rsm, rlmm, upto=plog.segments[-2].base_offset)
        drop_local(plog, mds[-1].end_offset + 1)
        pool = RemoteReaderPool(
            rlmm, rsm, cache_bytes=cfg.int("snakka.remote.log.reader.cache.bytes"),
            threads=cfg.int("remote.log.reader.threads"),
            max_pending=cfg.int("remote.log.reader.max.pending.tasks"),
            index_cache_bytes=cfg.int("remote.log.index.file.cache.total.size.bytes"))
        plog.remote_log_reader = pool.reader_for(plog, tp)
        return pool, plog.local_log.base_offset

    pool, local_start = _on_loop(b, install)
    assert local_start >= 4 * PER_ROUND  # most of the data is remote only
    return pool, rsm, local_start


def _fetch(bootstrap: str, offsets: dict[int, int], *, max_wait_ms: int = 0,
           isolation: int = 0):
    """One Fetch v12 of TOPIC; returns ({partition: (error, [(base, last)], bytes)}, seconds)."""
    async def go():
        conn = await raw_connect(bootstrap)
        try:
            t0 = time.monotonic()
            resp = await conn.send(FetchRequest(
                replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                isolation_level=isolation, session_id=0, session_epoch=-1,
                topics=[FetchTopic(topic=TOPIC, partitions=[
                    FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                    for p, o in offsets.items()])]), version=12)
            took = time.monotonic() - t0
        finally:
            await conn.close()
        assert resp.error_code == 0
        out = {}
        for t in resp.responses:
            for pd in t.partitions:
                data = bytes(pd.records or b"")
                out[pd.partition_index] = (
                    pd.error_code, [(s, e) for s, e, _a, _b in split_batches(data)], data)
        return out, took

    return run_async(go())


def test_a_fetch_at_a_remote_offset_waits_for_the_remote_read_and_returns_data():
    """Fetch offset 0 (remote only) with MaxWaitMs 0: the first read is pending, the handler
    waits for it (DelayedRemoteFetch) and answers with the batches from offset 0."""
    with EmbeddedBroker() as b:
        pool, _rsm, _local = _produce_tiered(b)
        got, _took = _fetch(b.bootstrap_servers, {0: 0})
        err, batches, _data = got[0]
        assert err == 0
        assert batches and batches[0][0] == 0
        assert pool.tasks_run >= 1
        # In the middle of a remote segment too.
        got, _ = _fetch(b.bootstrap_servers, {0: PER_ROUND + 7})
        assert got[0][0] == 0 and got[0][1][0][0] <= PER_ROUND + 7 <= got[0][1][0][1]


def test_real_consumers_read_a_tiered_partition_from_offset_0():
    """confluent-kafka and kafka-python read every record from offset 0, remote then local,
    with the values, keys and timestamps produced."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    n = ROUNDS * PER_ROUND
    with EmbeddedBroker() as b:
        _pool, _rsm, local = _produce_tiered(b)
        got = ck_consume(b.bootstrap_servers, TOPIC, [0], n, timeout=60)
        assert [g.offset for g in got] == list(range(n))
        assert [g.value for g in got] == [_value(i) for i in range(n)]
        assert [g.timestamp for g in got] == [TS0 + i * STEP for i in range(n)]
        c = KafkaConsumer(bootstrap_servers=b.bootstrap_servers, enable_auto_commit=False,
                          auto_offset_reset="earliest", consumer_timeout_ms=10_000)
        try:
            c.assign([KTP(TOPIC, 0)])
            c.seek_to_beginning()
            kp = []
            deadline = time.monotonic() + 60
            while len(kp) < n and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=500).values():
                    kp.extend(recs)
        finally:
            c.close()
        assert [(r.offset, r.value, r.key) for r in kp] == \
            [(i, _value(i), b"k%d" % i) for i in range(n)]
        assert local > 0


def test_a_stalled_object_store_answers_after_remote_fetch_max_wait_ms_with_other_data():
    """The storage manager hangs: a fetch of the remote partition and a local one answers
    after about remote.fetch.max.wait.ms (not the request's MaxWaitMs, not forever): the local
    partition's records, the remote one without records and no error. Once the store
    answers, the next fetch has the remote data."""
    gate = threading.Event()
    with EmbeddedBroker(config={"remote.fetch.max.wait.ms": "300"}) as b:
        try:
            _pool, _rsm, _local = _produce_tiered(b, partitions=2, gate=gate)
            got, took = _fetch(b.bootstrap_servers, {0: 0, 1: 0}, max_wait_ms=0)
            assert got[0][0] == 0 and got[0][1] == []
            assert got[1][0] == 0 and got[1][1] == [(0, 0)]
            assert 0.25 <= took < 10, took
        finally:
            gate.set()
        got, _took = _fetch(b.bootstrap_servers, {0: 0})
        assert got[0][0] == 0 and got[0][1][0][0] == 0


def test_remote_fetch_max_wait_ms_changes_at_run_time():
    """remote.fetch.max.wait.ms is a dynamic broker config (Kafka's DynamicRemoteLogConfig):
    started with an hour, a fetch of a stalled remote partition would not answer within the
    test; set to 300 ms with a real admin client (confluent-kafka), the same fetch answers with
    the local partition's records and the remote one empty."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    gate = threading.Event()
    with EmbeddedBroker(config={"remote.fetch.max.wait.ms": "3600000"}) as b:
        try:
            _pool, _rsm, _local = _produce_tiered(b, partitions=2, gate=gate)
            admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
            res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
                ConfigEntry("remote.fetch.max.wait.ms", "300",
                            incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([res])[res].result(30)
            got, _took = _fetch(b.bootstrap_servers, {0: 0, 1: 0}, max_wait_ms=0)
            assert got[0][0] == 0 and got[0][1] == []
            assert got[1][0] == 0 and got[1][1] == [(0, 0)]
        finally:
            gate.set()


def test_a_failing_object_store_is_kafka_storage_error_for_that_partition():
    with EmbeddedBroker() as b:
        _pool, rsm, _local = _produce_tiered(b, partitions=2)
        rsm.fail = OSError("connection refused")
        got, _ = _fetch(b.bootstrap_servers, {0: 0, 1: 0})
        assert got[0][0] == 56  # KAFKA_STORAGE_ERROR
        assert got[1][0] == 0 and got[1][1] == [(0, 0)]
        rsm.fail = None
        got, _ = _fetch(b.bootstrap_servers, {0: 0})
        assert got[0][0] == 0 and got[0][1][0][0] == 0



def test_share_fetch_of_remote_records_waits_for_the_remote_read():
    """ShareFetch (MaxWaitMs 0) of a share group starting at the earliest offset, which is
    remote only: the first request waits for the remote read and acquires from offset 0;
    fetching on reads the whole partition, remote then local."""
    from integration.share_protocol import ShareMember, set_group_configs

    n = ROUNDS * PER_ROUND
    with EmbeddedBroker() as b:
        _pool, _rsm, _local = _produce_tiered(b)
        topic_id = b.broker.replicas.metadata.topics[TOPIC].topic_id
        tp = (topic_id, 0)

        async def go():
            admin = await raw_connect(b.bootstrap_servers)
            try:
                await set_group_configs(admin, "g", {"share.auto.offset.reset": "earliest"})
            finally:
                await admin.close()
            m = await ShareMember.connect(b.bootstrap_servers, "g")
            try:
                await m.join([TOPIC])
                f = await m.fetch([tp], max_wait_ms=0)
                first = f.records(*tp)
                got = list(first)
                for _ in range(100):
                    if len(got) >= n:
                        break
                    f = await m.fetch(max_wait_ms=500)
                    got += f.records(*tp)
                return first, got
            finally:
                await m.close()

        first, got = run_async(go())
        assert first and first[0][0] == 0
        assert [(o, v) for o, v, _c in got] == [(i, _value(i)) for i in range(n)]


def test_list_offsets_by_timestamp_below_the_local_start():
    """offsets_for_times (confluent-kafka and kafka-python) of timestamps held only in
    remote segments: the first record at or after each, as before tiering; a timestamp past
    every record is -1 / None."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    with EmbeddedBroker() as b:
        _pool, _rsm, local = _produce_tiered(b)
        targets = [0, 7, PER_ROUND + 3, 3 * PER_ROUND + 49, local + 2]
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "unused"})
        try:  # one partition per call: librdkafka keeps one timestamp per partition
            got = [c.offsets_for_times([CTP(TOPIC, 0, TS0 + i * STEP)], timeout=30)[0].offset
                   for i in targets + [10**7]]
        finally:
            c.close()
        assert got == targets + [-1]
        k = KafkaConsumer(bootstrap_servers=b.bootstrap_servers)
        try:
            for i in targets:
                found = k.offsets_for_times({KTP(TOPIC, 0): TS0 + i * STEP})[KTP(TOPIC, 0)]
                assert (found.offset, found.timestamp) == (i, TS0 + i * STEP)
        finally:
            k.close()


def test_list_offsets_by_timestamp_with_a_stalled_store_times_out_per_partition():
    """The store hangs: ListOffsets v10 with TimeoutMs 300 answers REQUEST_TIMED_OUT for the
    remote lookup (Kafka's DelayedRemoteListOffsets), the other partition at once-ish; the
    store fails: KAFKA_STORAGE_ERROR."""
    from snakka.protocol.messages.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    gate = threading.Event()
    with EmbeddedBroker() as b:
        try:
            _pool, rsm, _local = _produce_tiered(b, partitions=2, gate=gate)

            async def ask(timeout_ms):
                conn = await raw_connect(b.bootstrap_servers)
                try:
                    t0 = time.monotonic()
                    resp = await conn.send(ListOffsetsRequest(
                        replica_id=-1, isolation_level=0, timeout_ms=timeout_ms,
                        topics=[ListOffsetsTopic(name=TOPIC, partitions=[
                            ListOffsetsPartition(partition_index=p, current_leader_epoch=-1,
                                                 timestamp=TS0 + 5 * STEP) for p in (0, 1)])]),
                        version=10)
                    return ({pr.partition_index: (pr.error_code, pr.offset)
                             for pr in resp.topics[0].partitions}, time.monotonic() - t0)
                finally:
                    await conn.close()

            got, took = run_async(ask(300))
            assert got == {0: (7, -1), 1: (0, 0)}, got  # partition 1: local, answered
            assert 0.25 <= took < 10, took
            gate.set()
            got, _ = run_async(ask(30_000))
            assert got[0] == (0, 5)
            rsm.fail = OSError("down")
            _pool.forget_segment(_pool.rlmm.segments[0].segment_id)
            got, _ = run_async(ask(30_000))
            assert got[0] == (56, -1)
        finally:
            gate.set()


def test_remote_list_offsets_request_timeout_ms_changes_at_run_time():
    """remote.list.offsets.request.timeout.ms is a dynamic broker config: started with an hour,
    a ListOffsets (TimeoutMs 0: the broker's value) of a stalled remote partition would not
    answer within the test; set to 300 ms with confluent-kafka's admin client, it answers
    REQUEST_TIMED_OUT for the remote lookup and the local partition's offset."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    from snakka.protocol.messages.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    gate = threading.Event()
    with EmbeddedBroker(config={"remote.list.offsets.request.timeout.ms": "3600000"}) as b:
        try:
            _produce_tiered(b, partitions=2, gate=gate)
            admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
            res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
                ConfigEntry("remote.list.offsets.request.timeout.ms", "300",
                            incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([res])[res].result(30)

            async def ask():
                conn = await raw_connect(b.bootstrap_servers)
                try:
                    resp = await conn.send(ListOffsetsRequest(
                        replica_id=-1, isolation_level=0, timeout_ms=0,
                        topics=[ListOffsetsTopic(name=TOPIC, partitions=[
                            ListOffsetsPartition(partition_index=p, current_leader_epoch=-1,
                                                 timestamp=TS0 + 5 * STEP) for p in (0, 1)])]),
                        version=10)
                    return {pr.partition_index: (pr.error_code, pr.offset)
                            for pr in resp.topics[0].partitions}
                finally:
                    await conn.close()

            assert run_async(ask()) == {0: (7, -1), 1: (0, 0)}
        finally:
            gate.set()


def test_read_committed_consumer_skips_aborted_records_in_remote_segments():
    """Transactions aborted and committed in segments that are then tiered: a read_committed
    librdkafka consumer reading from offset 0 gets the aborted transactions from the remote
    txn indexes and drops those records; read_uncommitted sees them."""
    from integration.helpers import ck_read_to_end
    from storage.helpers import append, batch

    pid, pid2 = 1000, 2000
    with EmbeddedBroker() as b:
        async def create():
            async with Admin(b.bootstrap_servers) as admin:
                await admin.create_topic(TOPIC, 1)

        run_async(create())
        plog = b.broker.replicas.get_log(TOPIC, 0)
        topic_id = b.broker.replicas.metadata.topics[TOPIC].topic_id
        tp = TopicIdPartition(topic_id, TOPIC, 0)
        rsm, rlmm = FakeStorage(chunk_size=512), FakeMetadata()

        def write_and_tier():
            seq = {pid: 0, pid2: 0}
            for r in range(4):
                append(plog, batch(2, tag=f"plain{r}-"))
                append(plog, batch(2, producer_id=pid, producer_epoch=0, base_sequence=seq[pid],
                                   is_transactional=True, tag=f"aborted{r}-"))
                seq[pid] += 2
                plog.roll()  # the ABORT lands in a later segment than its records
                append(plog, batch(1, producer_id=pid2, producer_epoch=0,
                                   base_sequence=seq[pid2], is_transactional=True,
                                   tag=f"committed{r}-"))
                seq[pid2] += 1
                plog.append_control_marker(pid, 0, False, 0)
                plog.append_control_marker(pid2, 0, True, 0)
                plog.roll()
            append(plog, batch(1, tag="local-"))
            mds = tier(plog, tp, rsm, rlmm)
            drop_local(plog, mds[-1].end_offset + 1)
            pool = RemoteReaderPool(rlmm, rsm, cache_bytes=1 << 20, threads=2, max_pending=8,
                                    index_cache_bytes=1 << 20)
            plog.remote_log_reader = pool.reader_for(plog, tp)
            return mds

        mds = _on_loop(b, write_and_tier)
        assert any(not md.txn_index_empty for md in mds)
        committed = ck_read_to_end(b.bootstrap_servers, TOPIC, "read_committed")
        uncommitted = ck_read_to_end(b.bootstrap_servers, TOPIC, "read_uncommitted")
    assert not any(v.startswith(b"aborted") for v in committed), committed
    assert sum(v.startswith(b"committed") for v in committed) == 4
    assert sum(v.startswith(b"plain") for v in committed) == 8
    assert committed[-1].startswith(b"local")
    assert sum(v.startswith(b"aborted") for v in uncommitted) == 8


def test_share_by_duration_reset_into_remote_segments_starts_at_the_segment():
    """share.auto.offset.reset=by_duration whose time lies in remote segments not in memory:
    initialising cannot wait for the remote read, so the share-partition starts at the
    first remote segment whose records reach that time (from metadata): nothing newer is
    skipped, nothing from earlier segments is delivered."""
    from integration.share_protocol import ShareMember, set_group_configs

    n = ROUNDS * PER_ROUND
    with EmbeddedBroker() as b:
        _pool, _rsm, _local = _produce_tiered(b)
        topic_id = b.broker.replicas.metadata.topics[TOPIC].topic_id
        tp = (topic_id, 0)
        target = 2 * PER_ROUND + 20  # inside the third segment [100, 149]

        async def go():
            admin = await raw_connect(b.bootstrap_servers)
            try:
                ago = (time.time() * 1000 - (TS0 + target * STEP)) / 1000
                await set_group_configs(admin, "g", {
                    "share.auto.offset.reset": f"by_duration:PT{ago:.3f}S"})
            finally:
                await admin.close()
            m = await ShareMember.connect(b.bootstrap_servers, "g")
            try:
                await m.join([TOPIC])
                got = []
                for _ in range(100):
                    f = await m.fetch([tp] if not got else None, max_wait_ms=500)
                    got += f.records(*tp)
                    if got and got[-1][0] >= n - 1:
                        break
                return got
            finally:
                await m.close()

        got = run_async(go())
        assert [o for o, _v, _c in got] == list(range(2 * PER_ROUND, n))


def test_a_tiered_partition_without_its_remote_reader_answers_replica_not_available():
    """Offsets below the first local segment while the partition's remote part is not
    attached (its __remote_log_metadata partition not replayed yet): Fetch and ListOffsets
    by time answer REPLICA_NOT_AVAILABLE (retriable, as Kafka when its remote metadata is
    not initialised), never the first local segment's records in place of the remote ones
    (which is what a read below the local start returned), and never an offset guessed
    from the local part."""
    from snakka.protocol.messages.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    with EmbeddedBroker() as b:
        _pool, _rsm, local = _produce_tiered(b)
        plog = b.broker.replicas.get_log(TOPIC, 0)
        _on_loop(b, lambda: setattr(plog, "remote_log_reader", None))
        got, _ = _fetch(b.bootstrap_servers, {0: 0})
        assert got[0][0] == 9, got[0][:2]  # REPLICA_NOT_AVAILABLE, no records
        got, _ = _fetch(b.bootstrap_servers, {0: local})  # the local part still reads
        assert got[0][0] == 0 and got[0][1][0][0] == local

        async def ask():
            conn = await raw_connect(b.bootstrap_servers)
            try:
                resp = await conn.send(ListOffsetsRequest(
                    replica_id=-1, isolation_level=0, topics=[ListOffsetsTopic(
                        name=TOPIC, partitions=[ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1,
                            timestamp=TS0 + 5 * STEP)])]), version=7)
                pr = resp.topics[0].partitions[0]
                return pr.error_code, pr.offset
            finally:
                await conn.close()

        assert run_async(ask()) == (9, -1)


def test_wired_broker_serves_reads_below_the_local_start(tmp_path):
    """The broker's own tiered storage (local backend, its copier and local retention, no
    fakes): once most segments are remote only, confluent-kafka and kafka-python read every
    record from offset 0, and offsets_for_times finds a remote-only timestamp."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    cfg = {"remote.log.storage.system.enable": "true", "rsm.config.storage.backend": "local",
           "rsm.config.storage.root": str(tmp_path / "remote"),
           "remote.log.manager.task.interval.ms": "200",
           "log.retention.check.interval.ms": "200"}
    n = 3000
    with EmbeddedBroker(config=cfg) as b:
        async def create():
            async with Admin(b.bootstrap_servers) as admin:
                await admin.create_topic(TOPIC, 1, configs={
                    "remote.storage.enable": "true", "segment.bytes": "20000",
                    "local.retention.bytes": "20000",
                    "retention.ms": "-1"})  # the records' timestamps are from 2023

        run_async(create())
        # Small batches: a batch never spans segments, so segments need several.
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 5,
                      "batch.size": 4096})
        for i in range(n):
            p.produce(TOPIC, _value(i), partition=0, timestamp=TS0 + i * STEP)
        assert p.flush(30) == 0
        plog = b.broker.replicas.get_log(TOPIC, 0)
        deadline = time.monotonic() + 60
        while plog.local_log.base_offset < n // 2:
            assert time.monotonic() < deadline, "the copier and local retention did not run"
            time.sleep(0.05)
        assert plog.log_start_offset == 0
        got = ck_consume(b.bootstrap_servers, TOPIC, [0], n, timeout=60)
        assert [(g.offset, g.value) for g in got] == [(i, _value(i)) for i in range(n)]
        k = KafkaConsumer(bootstrap_servers=b.bootstrap_servers, enable_auto_commit=False,
                          auto_offset_reset="earliest")
        try:
            k.assign([KTP(TOPIC, 0)])
            k.seek_to_beginning()
            kp = []
            while len(kp) < n and time.monotonic() < deadline + 60:
                for recs in k.poll(timeout_ms=500).values():
                    kp.extend(recs)
            assert [(r.offset, r.value) for r in kp] == [(i, _value(i)) for i in range(n)]
        finally:
            k.close()
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "unused"})
        try:
            [found] = c.offsets_for_times([CTP(TOPIC, 0, TS0 + 123 * STEP)], timeout=30)
        finally:
            c.close()
        assert found.offset == 123


def test_reader_over_the_s3_backend_and_an_outage(tmp_path, s3_server, s3_bucket):
    """The same reads over the S3 backend (loopback server, 256-byte ranged reads): every
    remote offset byte-identical through the event-loop path; the server down: the read
    fails as a storage error (after the storage manager's one try), and reads work again
    once it is back."""
    from remote.test_reader import make_tiered
    from snakka.remote.reader import RemoteReadError
    from snakka.remote.storage import create_remote_storage
    from snakka.storage import RemoteFetchPending

    rsm = create_remote_storage({**s3_bucket, "rsm.config.chunk.size": 256,
                                 "rsm.config.storage.retry.max.attempts": 1})
    plog, pool, _rsm, rlmm, ref, _tp = make_tiered(tmp_path, rsm)

    async def read(off, size):
        for _ in range(4):
            try:
                return bytes(plog.read(off, size))
            except RemoteFetchPending as p:
                await asyncio.wait_for(p.ready, 30)
        raise AssertionError("no progress")

    async def run():
        local_start = plog.local_log.base_offset
        for off in range(local_start):
            for size in (150, 1 << 20):
                assert await read(off, size) == ref[(off, size, True, -1)], (off, size)
        md = rlmm.segments[0]
        pool.forget_segment(md.segment_id)
        s3_server.down()
        try:
            with pytest.raises(RemoteReadError):
                await read(md.start_offset, 150)
        finally:
            s3_server.up()
        assert await read(md.start_offset, 150) == ref[(md.start_offset, 150, True, -1)]

    try:
        asyncio.run(asyncio.wait_for(run(), 120))
    finally:
        pool.close()
        plog.close()
        rsm.close()


def test_many_fetches_of_remote_data_with_a_stalled_store_stay_bounded():
    """20 concurrent fetches of offsets in 5 different remote segments while the store
    hangs, with 2 reader threads and 2 queued tasks: at most 4 tasks ever exist (the rest
    are refused and wait for capacity), every fetch is answered after about
    remote.fetch.max.wait.ms without records and without error, and once the store answers
    every offset is served."""
    gate = threading.Event()
    cfg = {"remote.fetch.max.wait.ms": "300", "remote.log.reader.threads": "2",
           "remote.log.reader.max.pending.tasks": "2"}
    with EmbeddedBroker(config=cfg) as b:
        try:
            pool, _rsm, _local = _produce_tiered(b, gate=gate)
            offsets = [seg * PER_ROUND + k for seg in range(5) for k in (1, 9, 17, 33)]

            async def fetch_all():
                async def one(off):
                    conn = await raw_connect(b.bootstrap_servers)
                    try:
                        resp = await conn.send(FetchRequest(
                            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                            isolation_level=0, session_id=0, session_epoch=-1,
                            topics=[FetchTopic(topic=TOPIC, partitions=[FetchPartition(
                                partition=0, fetch_offset=off,
                                partition_max_bytes=1 << 20)])]), version=12)
                    finally:
                        await conn.close()
                    pd = resp.responses[0].partitions[0]
                    return pd.error_code, len(bytes(pd.records or b""))

                t0 = time.monotonic()
                got = await asyncio.gather(*(one(o) for o in offsets))
                return got, time.monotonic() - t0

            got, took = run_async(fetch_all())
            assert got == [(0, 0)] * len(offsets), got
            assert took < 15, took
            assert pool.tasks_in_flight <= 4  # none has finished: the most there were
            assert pool.refused > 0
        finally:
            gate.set()
        for off in offsets:
            data, _ = _fetch(b.bootstrap_servers, {0: off})
            assert data[0][0] == 0 and data[0][1][0][0] <= off, off


def test_share_fetch_with_a_stalled_store_answers_after_remote_fetch_max_wait_ms():
    """ShareFetch of remote-only records while the store hangs: answered after about
    remote.fetch.max.wait.ms with nothing acquired (nothing is locked for a record the
    broker could not read); once the store answers, the records are acquired from 0."""
    from integration.share_protocol import ShareMember, set_group_configs

    gate = threading.Event()
    with EmbeddedBroker(config={"remote.fetch.max.wait.ms": "300"}) as b:
        try:
            _pool, _rsm, _local = _produce_tiered(b, gate=gate)
            topic_id = b.broker.replicas.metadata.topics[TOPIC].topic_id
            tp = (topic_id, 0)

            async def go():
                admin = await raw_connect(b.bootstrap_servers)
                try:
                    await set_group_configs(admin, "g", {"share.auto.offset.reset": "earliest"})
                finally:
                    await admin.close()
                m = await ShareMember.connect(b.bootstrap_servers, "g")
                try:
                    await m.join([TOPIC])
                    t0 = time.monotonic()
                    f = await m.fetch([tp], max_wait_ms=0)
                    took = time.monotonic() - t0
                    stalled = f.records(*tp)
                    gate.set()
                    got = []
                    for _ in range(20):
                        f = await m.fetch(max_wait_ms=500)
                        got += f.records(*tp)
                        if got:
                            break
                    return stalled, took, got
                finally:
                    await m.close()

            stalled, took, got = run_async(go())
        finally:
            gate.set()
        assert stalled == []
        assert 0.25 <= took < 10, took
        assert got and got[0][0] == 0
