"""LogConfig: Kafka names, defaults, validation (broker synonyms: tests/unit/test_config_resolution)."""

from __future__ import annotations

import pytest

from snakka.storage import TOPIC_CONFIG_NAMES, LogConfig


def test_kafka_defaults():
    c = LogConfig()
    assert c.segment_bytes == 1073741824
    assert c.segment_ms == 604800000
    assert c.retention_ms == 604800000 and c.retention_bytes == -1
    assert c.max_message_bytes == 1048588
    assert c.message_timestamp_type == "CreateTime" and not c.log_append_time
    assert c.index_interval_bytes == 4096 and c.segment_index_bytes == 10485760
    assert c.flush_messages == c.flush_ms == 2**63 - 1
    assert c.file_delete_delay_ms == 60000
    assert c.cleanup_policy == ("delete",) and c.delete_enabled


def test_from_dict_parses_kafka_names():
    c = LogConfig.from_dict(
        {
            "segment.bytes": "1048576",
            "retention.ms": "-1",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.25",
            "preallocate": "TRUE",
        }
    )
    assert c.segment_bytes == 1048576 and c.retention_ms == -1
    assert c.log_append_time
    assert c.cleanup_policy == ("compact", "delete")
    assert c.min_cleanable_dirty_ratio == 0.25 and c.preallocate


@pytest.mark.parametrize(
    "name,value",
    [
        ("segment.bytes", "abc"),
        ("segment.bytes", "13"),
        ("segment.bytes", str(2**31)),
        ("retention.ms", "-2"),
        ("segment.ms", "0"),
        ("message.timestamp.type", "Whenever"),
        ("cleanup.policy", "delete,shred"),
        ("preallocate", "yes"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("flush.messages", "0"),
    ],
)
def test_invalid_values_name_the_config(name, value):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        LogConfig.from_dict({name: value})


def test_unknown_name():
    with pytest.raises(ValueError, match="Unknown topic config name: segment.size"):
        LogConfig.from_dict({"segment.size": "1"})


def test_overrides_and_to_dict_round_trip():
    broker = LogConfig(retention_ms=1000)
    topic = broker.with_overrides({"segment.bytes": "2048"})
    assert (topic.retention_ms, topic.segment_bytes) == (1000, 2048)
    rendered = topic.to_dict()
    assert set(rendered) == TOPIC_CONFIG_NAMES
    assert rendered["cleanup.policy"] == "delete" and rendered["preallocate"] == "false"
    assert LogConfig.from_dict(rendered) == topic


def test_defaults_equal_the_config_table():
    """LogConfig's attribute defaults and snakka.config's table must never drift apart."""
    from snakka.config import TOPIC_CONFIGS

    table = LogConfig.from_dict({n: d.default for n, d in TOPIC_CONFIGS.items()})
    assert table == LogConfig()
