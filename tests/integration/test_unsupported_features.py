"""Features that do not exist fail fast and clearly, never silently (issue 9 item 7).

- Configs that imply an absent feature stop `snakka serve` at once with one line naming the
  config (a TLS/SASL listener, broker-level compaction, several log dirs, tiered storage, an
  authorizer); the dynamic broker config `log.cleanup.policy=compact` is INVALID_CONFIG.
- A transactional producer gets a prompt, fatal TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) from
  every client (confluent-kafka, kafka-python, aiokafka, the Java producer), where it used to
  wait for its whole timeout (librdkafka retried INVALID_REQUEST until then). Kafka gives 53 to a
  producer not authorized for its transactional id; snakka has no transaction coordinator, so no
  id is usable. Produce requests carrying transactional batches get 53 on every partition, as
  in Kafka; a control batch from a client gets INVALID_RECORD (87).
"""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest

from snakka.protocol.errors import ErrorCode
from snakka.records import Record, build_batch
from snakka.testing import EmbeddedBroker

from .helpers import SNAKKA, ck_create_topic, now_ms, raw_connect, run_async

try:  # the reference Kafka's Java tools (tests/reference_kafka.py; absent in a user's clone)
    from reference_kafka import run_tool, skip_reason
except ImportError:  # pragma: no cover
    run_tool = None

    def skip_reason() -> str:
        return "tests/reference_kafka.py is not present"

TXN_AUTH_FAILED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)  # 53
FAST = 10.0  # seconds: "promptly", with a generous margin for a loaded 2-core machine


# -- configs that imply an absent feature ---------------------------------------------------
@pytest.mark.parametrize("override, names", [
    ("listeners=SSL://localhost:0", "SSL://localhost:0"),
    ("listeners=SASL_SSL://localhost:0", "SASL_SSL://localhost:0"),
    ("listeners=SASL_PLAINTEXT://localhost:0", "SASL_PLAINTEXT://localhost:0"),
    ("listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT", "PLAINTEXT://localhost:0"),
    ("log.cleanup.policy=compact", "log.cleanup.policy"),
    ("log.dirs={tmp}/a,{tmp}/b", "log.dirs"),
    ("remote.log.storage.system.enable=true", "remote.log.storage.system.enable"),
    ("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
     "authorizer.class.name"),
])
def test_serve_refuses_a_config_for_an_absent_feature_in_one_line(tmp_path, override, names):
    """Before: an SSL or SASL listener served plaintext, compaction was reported as every
    topic's policy, extra log dirs and the other keys were silently ignored."""
    args = [SNAKKA, "serve", "--ready-line"]
    if not override.startswith("log.dirs="):  # --data-dir would win over -o log.dirs
        args += ["--data-dir", str(tmp_path / "data")]
    if not override.startswith("listeners="):
        args += ["-o", "listeners=PLAINTEXT://localhost:0"]
    args += ["-o", override.format(tmp=tmp_path)]
    t0 = time.monotonic()
    r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "SNAKKA_READY" not in out and "Traceback" not in out, out
    errors = [ln for ln in out.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and names in errors[0], out
    assert time.monotonic() - t0 < 30


def test_dynamic_broker_compaction_policy_is_invalid_config():
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    from snakka.protocol.messages.incremental_alter_configs_request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )

    with EmbeddedBroker() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        res = ConfigResource(ResourceType.BROKER, str(b.broker.node_id), incremental_configs=[
            ConfigEntry("log.cleanup.policy", "compact",
                        incremental_operation=AlterConfigOpType.SET)])
        fut = admin.incremental_alter_configs([res])[res]
        with pytest.raises(Exception) as ei:
            fut.result(timeout=20)
        err = ei.value.args[0]
        assert err.code() == ErrorCode.INVALID_CONFIG, err
        assert "compaction" in err.str(), err

        async def cluster_default():  # the "" entity (kafka-configs.sh --entity-default)
            conn = await raw_connect(b.bootstrap_servers)
            try:
                r = await conn.send(IncrementalAlterConfigsRequest(resources=[
                    AlterConfigsResource(resource_type=4, resource_name="", configs=[
                        AlterableConfig(name="log.cleanup.policy", config_operation=0,
                                        value="delete,compact")])]))
                return r.responses[0]
            finally:
                await conn.close()

        r = run_async(cluster_default())
        assert r.error_code == ErrorCode.INVALID_CONFIG and "compaction" in r.error_message, r
        # The topics' policy is still what it is: delete.
        ck_create_topic(b.bootstrap_servers, "t", 1)
        t = ConfigResource(ResourceType.TOPIC, "t")
        cfg = admin.describe_configs([t])[t].result(timeout=20)
        assert cfg["cleanup.policy"].value == "delete"


# -- transactional producers: prompt, fatal, and the same code everywhere --------------------
@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        ck_create_topic(b.bootstrap_servers, "txn", 2)
        yield b


def test_confluent_kafka_init_transactions_fails_fast(broker):
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "tx-ck"})
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as ei:
        p.init_transactions(60)
    elapsed = time.monotonic() - t0
    err = ei.value.args[0]
    assert err.code() == TXN_AUTH_FAILED and err.fatal(), err
    assert "Transactions are not supported" in err.str(), err
    assert elapsed < FAST, elapsed


def test_kafka_python_init_transactions_fails_fast(broker):
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    p = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id="tx-kp",
                      max_block_ms=60000)
    try:
        t0 = time.monotonic()
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            p.init_transactions()
        assert time.monotonic() - t0 < FAST
    finally:
        p.close(timeout=5)


def test_aiokafka_transactional_producer_fails_fast(broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TransactionalIdAuthorizationFailed

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                             transactional_id="tx-aio", request_timeout_ms=60000)
        t0 = time.monotonic()
        try:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                await p.start()
        finally:
            await p.stop()
        return time.monotonic() - t0

    assert asyncio.run(asyncio.wait_for(go(), 60)) < FAST


@pytest.mark.skipif(run_tool is None or skip_reason() is not None,
                    reason=f"reference Kafka / java: {skip_reason()}")
def test_java_producer_init_transactions_fails_fast(broker):
    """kafka-producer-perf-test.sh calls initTransactions() when given a transactional id
    (kafka-console-producer never does: its send() fails locally first)."""
    t0 = time.monotonic()
    r = run_tool("kafka-producer-perf-test.sh", "--topic", "txn", "--num-records", "1",
                 "--record-size", "10", "--throughput", "-1", "--transactional-id", "tx-java",
                 "--producer-props", f"bootstrap.servers={broker.bootstrap_servers}",
                 "max.block.ms=60000", timeout=120)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0
    assert "TransactionalIdAuthorizationException" in r.stderr, r.stderr[-2000:]
    assert elapsed < 30, elapsed  # includes the JVM's start (2-5 s on this machine)


async def _produce(conn, batches: dict[int, bytes], transactional_id=None):
    from snakka.protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    resp = await conn.send(ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout_ms=5000,
        topic_data=[TopicProduceData(name="txn", partition_data=[
            PartitionProduceData(index=p, records=b) for p, b in batches.items()])]), version=9)
    return {r.index: r for r in resp.responses[0].partition_responses}


def _batch(**kw) -> bytes:
    return build_batch([Record(timestamp=now_ms(), key=b"k", value=b"v")], **kw)


def test_produce_with_transactional_batches_and_control_batches_gets_kafkas_codes(broker):
    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            txn = _batch(producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
            # A transactional batch fails the whole request, the innocent partition too (Kafka
            # answers the request before looking at partitions), with or without a txn id.
            for tid in (None, "tx-raw"):
                out = await _produce(conn, {0: txn, 1: _batch()}, tid)
                assert {p: r.error_code for p, r in out.items()} == \
                    {0: TXN_AUTH_FAILED, 1: TXN_AUTH_FAILED}, out
                assert "not supported" in out[0].error_message
            # A control batch (not transactional) from a client: INVALID_RECORD.
            out = await _produce(conn, {0: _batch(is_control=True)})
            assert out[0].error_code == ErrorCode.INVALID_RECORD, out
            # Nothing was written by any of these.
            ok = await _produce(conn, {0: _batch()})
            assert (ok[0].error_code, ok[0].base_offset) == (0, 0), ok
        finally:
            await conn.close()
    run_async(go())


def test_init_producer_id_and_find_coordinator_with_a_transactional_id_get_53(broker):
    from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
    from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest

    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            r = await conn.send(InitProducerIdRequest(transactional_id="tx",
                                                      transaction_timeout_ms=60000))
            assert r.error_code == TXN_AUTH_FAILED, r
            r = await conn.send(InitProducerIdRequest(transactional_id=None,
                                                      transaction_timeout_ms=-1))
            assert r.error_code == 0 and r.producer_id >= 0, r  # idempotence is unaffected
            r = await conn.send(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]))
            c = r.coordinators[0]
            assert c.error_code == TXN_AUTH_FAILED and "not supported" in c.error_message, c
        finally:
            await conn.close()
    run_async(go())


def test_transaction_apis_are_not_advertised_and_closing_is_the_answer(broker):
    """Until transactions exist, AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26) and
    TxnOffsetCommit (28) are not in ApiVersions; a client that sends one anyway has its
    connection closed, as Kafka does for an API it has not enabled."""
    from snakka.client.connection import ConnectionClosed
    from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
    from snakka.protocol.messages.txn_offset_commit_request import TxnOffsetCommitRequest

    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            r = await conn.send(ApiVersionsRequest(client_software_name="t",
                                                   client_software_version="1"))
            keys = {k.api_key for k in r.api_keys}
            assert not keys & {24, 25, 26, 28}, sorted(keys)
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(conn.send(TxnOffsetCommitRequest(
                    transactional_id="tx", group_id="g", producer_id=1, producer_epoch=0,
                    topics=[]), version=3), 10)
        finally:
            await conn.close()
    run_async(go())
