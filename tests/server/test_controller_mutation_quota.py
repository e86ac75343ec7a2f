"""``controller_mutation_rate`` (KIP-599) on CreateTopics, CreatePartitions and DeleteTopics:
strict for the versions that know THROTTLING_QUOTA_EXCEEDED (v6+, v3+, v5+: a topic that finds
its client's token bucket in debt is refused, the request that overdrew it is not), permissive
for older ones (the mutation happens, the response carries a throttle time); other clients are
not affected. Real clients: confluent-kafka's admin (permissive versions: it is throttled and
told so through throttle_cb) and kafka-python's admin (v7, strict: its typed error).

The bucket: rate 2 partitions/s, burst rate x controller.quota.window.num (11) x 1 s = 22.
"""

from __future__ import annotations

import pytest
from integration.helpers import run_async  # tests/ is on sys.path

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.alter_client_quotas_request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from snakka.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from snakka.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from snakka.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from snakka.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(120)

RATE = 2.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(str(tmp_path_factory.mktemp("mutation"))) as b:
        yield b


async def _conn(bs: str, client_id: str) -> KafkaConnection:
    host, port = parse_bootstrap(bs)
    return await KafkaConnection(host, port, client_id=client_id).connect()


def _limit(bs: str, client_id: str) -> None:
    async def go():
        conn = await _conn(bs, "admin")
        try:
            r = await conn.send(AlterClientQuotasRequest(validate_only=False, entries=[EntryData(
                entity=[EntityData(entity_type="client-id", entity_name=client_id)],
                ops=[OpData(key="controller_mutation_rate", value=RATE, remove=False)])]))
            assert r.entries[0].error_code == 0
        finally:
            await conn.close()
    run_async(go())


def _topics(*spec: tuple[str, int]):
    return CreateTopicsRequest(topics=[CreatableTopic(name=n, num_partitions=p,
                                                      replication_factor=1, assignments=[],
                                                      configs=[]) for n, p in spec],
                               timeout_ms=30000, validate_only=False)


def test_strict_create_topics_refuses_once_the_bucket_is_in_debt(broker):
    bs = broker.bootstrap_servers
    _limit(bs, "strict-create")

    async def go():
        conn = await _conn(bs, "strict-create")
        try:
            # 30 partitions overdraw the 22-token burst: created; the next topic is refused.
            r = await conn.send(_topics(("sc-a", 30), ("sc-b", 1)), 7)
            codes = {t.name: (t.error_code, t.error_message) for t in r.topics}
            assert codes["sc-a"] == (0, None)
            # no message: Kafka drops the error's default one (ApiError.fromThrowable)
            assert codes["sc-b"] == (ErrorCode.THROTTLING_QUOTA_EXCEEDED, None)
            # the debt (8 tokens at 2/s): ~4 s, less the time since
            assert 3000 < r.throttle_time_ms <= 4000, r.throttle_time_ms
        finally:
            await conn.close()
        # A new connection of the same client: still in debt, refused, and told how long.
        conn = await _conn(bs, "strict-create")
        try:
            r = await conn.send(_topics(("sc-c", 1)), 6)
            assert r.topics[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
            assert r.throttle_time_ms > 0
        finally:
            await conn.close()
        # Another client is not limited.
        other = await _conn(bs, "free-client")
        try:
            r = await other.send(_topics(("sc-free", 40)), 7)
            assert r.topics[0].error_code == 0 and r.throttle_time_ms == 0
        finally:
            await other.close()
        return await _exists(bs, ["sc-a", "sc-b", "sc-c", "sc-free"])
    assert run_async(go()) == {"sc-a": True, "sc-b": False, "sc-c": False, "sc-free": True}


async def _exists(bs: str, names: list[str]) -> dict[str, bool]:
    from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic

    conn = await _conn(bs, "probe")
    try:
        r = await conn.send(MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in names],
                                            allow_auto_topic_creation=False))
        return {t.name: t.error_code == 0 for t in r.topics}
    finally:
        await conn.close()


def test_permissive_versions_are_throttled_not_refused(broker):
    bs = broker.bootstrap_servers
    _limit(bs, "permissive")

    async def go():
        throttles = []
        for i in range(2):
            conn = await _conn(bs, "permissive")
            try:
                r = await conn.send(_topics((f"perm-{i}", 30)), 5)  # v5: permissive
                assert r.topics[0].error_code == 0, r.topics[0]
                throttles.append(r.throttle_time_ms)
            finally:
                await conn.close()
        return throttles
    first, second = run_async(go())
    assert 3000 < first <= 4000  # 8 tokens of debt at 2/s
    assert second > first  # deeper in debt


def test_strict_delete_topics_and_create_partitions(broker):
    bs = broker.bootstrap_servers
    _limit(bs, "strict-delete")

    async def go():
        free = await _conn(bs, "setup")
        try:
            r = await free.send(_topics(("sd-a", 25), ("sd-b", 1), ("sp-a", 1)), 7)
            assert all(t.error_code == 0 for t in r.topics)
        finally:
            await free.close()
        conn = await _conn(bs, "strict-delete")
        try:
            r = await conn.send(DeleteTopicsRequest(topics=[
                DeleteTopicState(name="sd-a"), DeleteTopicState(name="sd-b")], timeout_ms=30000), 6)
            codes = {t.name: t.error_code for t in r.responses}
            assert codes == {"sd-a": 0, "sd-b": ErrorCode.THROTTLING_QUOTA_EXCEEDED}
            assert r.throttle_time_ms > 0
        finally:
            await conn.close()
        conn = await _conn(bs, "strict-delete")
        try:
            r = await conn.send(CreatePartitionsRequest(topics=[CreatePartitionsTopic(
                name="sp-a", count=3, assignments=None)], timeout_ms=30000,
                validate_only=False), 3)
            assert r.results[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
            assert r.results[0].error_message is None
            # v2 (permissive): grown, throttled
            r = await conn.send(CreatePartitionsRequest(topics=[CreatePartitionsTopic(
                name="sp-a", count=3, assignments=None)], timeout_ms=30000,
                validate_only=False), 2)
            assert r.results[0].error_code == 0 and r.throttle_time_ms > 0
        finally:
            await conn.close()
    run_async(go())


def test_confluent_kafka_admin_is_throttled(broker):
    """librdkafka's admin (permissive CreateTopics versions): created, and throttle_cb
    reports the broker's throttle time."""
    from confluent_kafka.admin import AdminClient, NewTopic

    bs = broker.bootstrap_servers
    _limit(bs, "ck-admin")
    events = []
    admin = AdminClient({"bootstrap.servers": bs, "client.id": "ck-admin",
                         "throttle_cb": lambda ev: events.append(ev.throttle_time)})
    for name, parts in (("ck-a", 30), ("ck-b", 2)):
        fut = admin.create_topics([NewTopic(name, parts, 1)])[name]
        try:
            fut.result(30)
        except Exception as e:  # a client on a strict version would see the refusal
            assert "THROTTLING_QUOTA_EXCEEDED" in str(e) or "quota" in str(e).lower(), e
    deadline = 50
    while not events and deadline:
        admin.poll(0.1)
        deadline -= 1
    assert events and max(events) > 1.0, events  # seconds


def test_kafka_python_admin_sees_the_refusal(broker):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import ThrottlingQuotaExceededError

    bs = broker.bootstrap_servers
    _limit(bs, "kp-admin")
    admin = KafkaAdminClient(bootstrap_servers=bs, client_id="kp-admin")
    try:
        admin.create_topics([NewTopic("kp-a", 30, 1)])
        # kafka-python sends CreateTopics v7: strict, the refusal is its typed error
        with pytest.raises(ThrottlingQuotaExceededError):
            admin.create_topics([NewTopic("kp-b", 1, 1)])
    finally:
        admin.close()
    assert run_async(_exists(bs, ["kp-a", "kp-b"])) == {"kp-a": True, "kp-b": False}
