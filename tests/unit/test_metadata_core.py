"""ClusterMetadata: operations validate like Kafka, and a replay of the records rebuilds the state."""

import uuid

import pytest

from snakka.metadata.core import (
    PRODUCER_ID_BLOCK_SIZE,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    ClusterMetadata,
    random_topic_id,
)
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.primitives import base64_to_uuid, uuid_to_base64


def replay(records):
    md = ClusterMetadata()
    for r in records:
        md.apply(r)
    return md


def test_create_alter_delete_replays_to_same_state():
    md = ClusterMetadata()
    log = []
    log += md.set_cluster_id("abc")
    log += md.create_topic("orders", 3, {"retention.ms": "1000"})
    log += md.create_topic("payments", 1, {})
    log += md.create_partitions("payments", 4)
    log += md.alter_configs(RESOURCE_TOPIC, "orders", {"segment.bytes": "1048576"})
    log += md.alter_configs(RESOURCE_TOPIC, "orders", {"retention.ms": None})
    log += md.alter_configs(RESOURCE_BROKER, "", {"log.retention.ms": "5000"})
    log += md.delete_topic("payments")
    recs, first = md.allocate_producer_id_block()
    log += recs
    again = replay(log)
    assert again.cluster_id == "abc"
    assert set(again.topics) == {"orders"}
    assert again.topics["orders"].configs == {"segment.bytes": "1048576"}
    assert again.topics["orders"].topic_id == md.topics["orders"].topic_id
    assert again.topics_by_id[md.topics["orders"].topic_id].name == "orders"
    assert again.dynamic_configs[(RESOURCE_BROKER, "")] == {"log.retention.ms": "5000"}
    assert first == 0 and again.next_producer_id_block == PRODUCER_ID_BLOCK_SIZE


@pytest.mark.parametrize("name,code", [
    ("", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("..", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("a" * 250, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("spaces are bad", ErrorCode.INVALID_TOPIC_EXCEPTION),
])
def test_invalid_topic_names(name, code):
    with pytest.raises(KafkaError) as e:
        ClusterMetadata().create_topic(name, 1, {})
    assert e.value.code == code


def test_create_errors():
    md = ClusterMetadata()
    md.create_topic("a.b", 1, {})
    for args, code in [
        (("a.b", 1, 1, {}), ErrorCode.TOPIC_ALREADY_EXISTS),
        (("a_b", 1, 1, {}), ErrorCode.INVALID_TOPIC_EXCEPTION),  # collides with a.b
        (("x", 0, 1, {}), ErrorCode.INVALID_PARTITIONS),
        (("x", 1, 3, {}), ErrorCode.INVALID_REPLICATION_FACTOR),
        (("x", 1, 1, {"retention.ms": "soon"}), ErrorCode.INVALID_CONFIG),
        (("x", 1, 1, {"no.such.config": "1"}), ErrorCode.INVALID_CONFIG),
    ]:
        with pytest.raises(KafkaError) as e:
            md.check_create_topic(*args)
        assert e.value.code == code, args


def test_create_partitions_rules():
    md = ClusterMetadata()
    md.create_topic("t", 2, {})
    with pytest.raises(KafkaError) as e:
        md.create_partitions("t", 2)
    assert e.value.code == ErrorCode.INVALID_PARTITIONS
    with pytest.raises(KafkaError) as e:
        md.create_partitions("t", 1)
    assert e.value.code == ErrorCode.INVALID_PARTITIONS
    with pytest.raises(KafkaError) as e:
        md.create_partitions("nope", 5)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    md.create_partitions("t", 5)
    assert md.topics["t"].partitions == 5


@pytest.mark.parametrize("resource,changes,code,message", [
    # Kafka 4.0's answers (tests/reference/test_dynamic_broker_configs.py compares them live).
    ("1", {"log.dirs": "/x"}, ErrorCode.INVALID_REQUEST,
     "Cannot update these configs dynamically: Set(log.dirs)"),
    ("", {"num.partitions": "4"}, ErrorCode.INVALID_REQUEST,
     "Cannot update these configs dynamically: Set(num.partitions)"),
    ("1", {"replica.lag.time.max.ms": "4"}, ErrorCode.INVALID_REQUEST,  # Kafka's, not snakka's
     "Cannot update these configs dynamically: Set(replica.lag.time.max.ms)"),
    ("1", {"log.retention.bytes": "lots"}, ErrorCode.INVALID_REQUEST,
     "Invalid value lots for configuration log.retention.bytes: Not a number of type LONG"),
    ("1", {"message.max.bytes": "-1"}, ErrorCode.INVALID_REQUEST,
     "Invalid value -1 for configuration message.max.bytes: Value must be at least 0"),
    ("1", {"message.max.bytes": "3000000000"}, ErrorCode.INVALID_REQUEST,
     "Invalid value 3000000000 for configuration message.max.bytes: Not a number of type INT"),
    ("", {"listeners": "PLAINTEXT://:1"}, ErrorCode.INVALID_REQUEST,
     "Cannot update these configs at default cluster level, broker id must be specified: "
     "Set(listeners)"),
    ("1", {"listeners": "PLAINTEXT://:1"}, ErrorCode.INVALID_REQUEST,
     "snakka cannot update these configs at run time (set them in server.properties and "
     "restart): Set(listeners)"),
    ("", {"num.io.threads": "10"}, ErrorCode.INVALID_REQUEST,
     "snakka cannot update these configs at run time (set them in server.properties and "
     "restart): Set(num.io.threads)"),
    ("1", {"ssl.keystore.location": "/k"}, ErrorCode.INVALID_REQUEST,
     "These security configs can be dynamically updated only per-listener using the listener "
     "prefix: HashSet(ssl.keystore.location)"),
])
def test_broker_config_change_refused_as_kafka(resource, changes, code, message):
    md = ClusterMetadata()
    with pytest.raises(KafkaError) as e:
        md.alter_configs(RESOURCE_BROKER, resource, changes)
    assert (e.value.code, e.value.message) == (code, message)
    assert (RESOURCE_BROKER, resource) not in md.dynamic_configs


def test_broker_config_change_accepted_as_kafka():
    md = ClusterMetadata()
    # A dynamic config, a custom (plugin) config and the DELETE of a static one: Kafka accepts
    # all three (a DELETE only removes a stored key).
    md.alter_configs(RESOURCE_BROKER, "1", {"log.retention.ms": "1000", "foo.bar.custom": "1",
                                           "log.dirs": None})
    assert md.dynamic_configs[(RESOURCE_BROKER, "1")] == {"log.retention.ms": "1000",
                                                          "foo.bar.custom": "1"}
    md.alter_configs(RESOURCE_BROKER, "", {"foo.bar.custom": "2", "max.connections": "10"})
    assert md.dynamic_configs[(RESOURCE_BROKER, "")] == {"foo.bar.custom": "2",
                                                         "max.connections": "10"}


def test_replace_semantics_of_legacy_alter_configs():
    md = ClusterMetadata()
    md.create_topic("t", 1, {"retention.ms": "1", "segment.bytes": "1048576"})
    md.alter_configs(RESOURCE_TOPIC, "t", {"max.message.bytes": "2000"}, replace=True)
    assert md.topics["t"].configs == {"max.message.bytes": "2000"}


def test_topic_id_text_form_round_trips():
    for _ in range(200):
        u = random_topic_id()
        s = uuid_to_base64(u)
        assert len(s) == 22 and not s.startswith("-")
        assert base64_to_uuid(s) == u
    assert random_topic_id() != uuid.UUID(int=0)


def test_reserved_names_are_refused_to_clients_but_not_to_coordinators():
    from snakka.metadata.core import RESERVED_TOPICS
    md = ClusterMetadata()
    for name in sorted(RESERVED_TOPICS):
        with pytest.raises(KafkaError) as e:
            md.create_topic(name, 1, {})
        assert e.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KafkaError) as e:  # collides with a reserved name not yet created
        md.create_topic("__consumer.offsets", 1, {})
    assert e.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    md.create_topic("__consumer_offsets", 50, {}, internal=True)
    assert md.topics["__consumer_offsets"].is_internal
    with pytest.raises(KafkaError) as e:
        md.create_partitions("__consumer_offsets", 60)
    assert e.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KafkaError) as e:
        md.alter_configs(2, "__consumer_offsets", {"retention.ms": "1"})
    assert e.value.code == ErrorCode.INVALID_REQUEST
    # Its coordinator may (a topic created before compaction gets cleanup.policy=compact),
    # with validated values, on existing internal topics only.
    recs = md.set_internal_topic_configs("__consumer_offsets", {"cleanup.policy": "compact"})
    assert md.topics["__consumer_offsets"].configs == {"cleanup.policy": "compact"}
    assert [r["type"] for r in recs] == ["config"]  # a metadata record, replayed at start-up
    for name, cfg, code in (
            ("__consumer_offsets", {"cleanup.policy": "shred"}, ErrorCode.INVALID_CONFIG),
            ("__transaction_state", {"cleanup.policy": "compact"}, ErrorCode.INVALID_REQUEST),
            ("orders", {"cleanup.policy": "compact"}, ErrorCode.INVALID_REQUEST)):
        with pytest.raises(KafkaError) as e:
            md.set_internal_topic_configs(name, cfg)
        assert e.value.code == code, name


def test_a_creation_in_flight_reserves_its_name_and_collisions():
    md = ClusterMetadata()
    md.check_create_topic("a.b", 1, 1, {})
    md.reserve("a.b")
    for name, code in (("a.b", ErrorCode.TOPIC_ALREADY_EXISTS),
                       ("a_b", ErrorCode.INVALID_TOPIC_EXCEPTION)):
        with pytest.raises(KafkaError) as e:
            md.check_create_topic(name, 1, 1, {})
        assert e.value.code == code
    md.release("a.b")
    md.create_topic("a_b", 1, {})  # free again
