"""The Java client's transactions against snakka, through the reference Kafka 4.0's own tools.

- ``kafka-producer-perf-test.sh --transactional-id X --transaction-duration-ms 100`` (a Java
  KafkaProducer committing a transaction every 100 ms) succeeds against snakka, and a
  read_committed ``kafka-console-consumer.sh --isolation-level read_committed`` reads every
  record it wrote.
- Fencing: a second perf-test run with the same transactional id starts while the first one's
  transaction is open in snakka (a raw InitProducerId + AddPartitions + Produce holds one open):
  its InitProducerId fences and aborts it, and the Java producer commits its own records; the
  raw transaction's record is never visible to read_committed.

Skipped with the reason when the reference distribution or java is absent.
"""

from __future__ import annotations

import pytest

from snakka.protocol.errors import ErrorCode

from .helpers import ck_create_topic, raw_connect, run_async
from .test_txn_hostile import add_partitions, batch, init_pid
from .txn_clients import wait_stable

reference_kafka = pytest.importorskip("reference_kafka",
                                      reason="tests/reference_kafka.py is not present")
if reference_kafka.skip_reason():
    pytest.skip(reference_kafka.skip_reason(), allow_module_level=True)

N = 5000


def _perf_test(bs: str, topic: str, tid: str, n: int):
    r = reference_kafka.run_tool(
        "kafka-producer-perf-test.sh", "--topic", topic, "--num-records", str(n),
        "--record-size", "100", "--throughput", "-1", "--transactional-id", tid,
        "--transaction-duration-ms", "100", "--producer-props", f"bootstrap.servers={bs}",
        "linger.ms=5", timeout=180)
    assert r.returncode == 0, f"perf test failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert f"{n} records sent" in r.stdout, r.stdout[-2000:]
    return r


def _read_committed_count(bs: str, topic: str, expected: int) -> int:
    r = reference_kafka.run_tool(
        "kafka-console-consumer.sh", "--bootstrap-server", bs, "--topic", topic,
        "--from-beginning", "--isolation-level", "read_committed",
        "--max-messages", str(expected + 1), "--timeout-ms", "15000",
        "--property", "print.value=false", "--property", "print.offset=true", timeout=120)
    # The consumer ends on its idle timeout (exit code 0 or 1 depending on the version) once
    # nothing more arrives; every consumed record is one output line.
    return sum(1 for line in r.stdout.splitlines() if line.startswith("Offset:"))


@pytest.mark.timeout(400)
def test_java_transactional_perf_test_and_read_committed_console_consumer(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    topic = "java-txn"
    ck_create_topic(bs, topic, 3)
    _perf_test(bs, topic, "java-perf", N)
    wait_stable(bs, topic, [0, 1, 2])
    assert _read_committed_count(bs, topic, N) == N


@pytest.mark.timeout(400)
def test_java_producer_fences_an_open_transaction(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    topic = "java-fence"
    ck_create_topic(bs, topic, 1)

    async def open_txn():
        from snakka.protocol.messages.produce_request import (
            PartitionProduceData,
            ProduceRequest,
            TopicProduceData,
        )

        conn = await raw_connect(bs)
        try:
            init = await init_pid(conn, "java-zombie", 60_000)
            pid, epoch = init.producer_id, init.producer_epoch
            assert await add_partitions(conn, "java-zombie", pid, epoch, [0], topic=topic) == {
                0: ErrorCode.NONE}
            resp = await conn.send(ProduceRequest(
                transactional_id="java-zombie", acks=-1, timeout_ms=5000, topic_data=[
                    TopicProduceData(name=topic, partition_data=[
                        PartitionProduceData(index=0, records=batch(pid, epoch, 0))])]),
                version=9)
            assert resp.responses[0].partition_responses[0].error_code == 0
        finally:
            await conn.close()

    run_async(open_txn())
    _perf_test(bs, topic, "java-zombie", 500)  # its InitProducerId fences the open one
    wait_stable(bs, topic, [0])
    assert _read_committed_count(bs, topic, 500) == 500
