"""A data directory of an earlier snakka (JSON metadata records) is converted to KRaft's format
at start-up, once, losing nothing; a crash between any two steps of the conversion leaves the
old log or the new one, and the next start finishes the job."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from snakka.metadata import kraft
from snakka.metadata import store as store_mod
from snakka.metadata.store import METADATA_DIR, MIGRATION_NEW, MIGRATION_OLD
from snakka.records import Record, build_batch, validate_batches
from snakka.records.record import batch_records, iter_batches
from snakka.storage import LogConfig, UnifiedLog
from snakka.testing import EmbeddedBroker

TID = uuid.UUID("5bd3b4ee-029e-4461-a940-e9f36f350d40")
ACL_ID = uuid.uuid4().hex
LEGACY = [
    {"type": "cluster", "cluster_id": "legacyClusterIdAAAAAAA"},
    {"type": "topic", "name": "orders", "topic_id": TID.hex, "partitions": 2,
     "configs": {"retention.ms": "12345"}},
    {"type": "partitions", "topic_id": TID.hex, "partitions": 3},
    {"type": "topic", "name": "gone", "topic_id": uuid.uuid4().hex, "partitions": 1,
     "configs": {}},
    {"type": "config", "resource_type": 4, "resource_name": "", "configs":
     {"log.cleaner.threads": "2"}},
    {"type": "config", "resource_type": 32, "resource_name": "g1", "configs":
     {"consumer.session.timeout.ms": "50000"}},
    {"type": "producer_ids", "next": 2000},
    {"type": "acl", "id": ACL_ID, "resource_type": 2, "resource_name": "orders",
     "pattern_type": 3, "principal": "User:alice", "host": "*", "operation": 3,
     "permission_type": 3},
    {"type": "user_scram_credential", "name": "alice", "mechanism": 1, "salt": "00ff",
     "stored_key": "aa" * 32, "server_key": "bb" * 32, "iterations": 4096},
    {"type": "client_quota", "entity": [["user", "alice"]], "key": "producer_byte_rate",
     "value": 1024.0, "remove": False},
]


def write_legacy_dir(data_dir: str) -> None:
    """The metadata log as earlier snakka versions wrote it: JSON values in v2 batches."""
    log = UnifiedLog(os.path.join(data_dir, METADATA_DIR),
                     LogConfig.from_dict({"retention.ms": "-1"}), recover=True)
    for recs in (LEGACY, [{"type": "remove_topic", "topic_id": LEGACY[3]["topic_id"]}]):
        batch = bytearray(build_batch([Record(timestamp=1, value=json.dumps(r).encode())
                                       for r in recs]))
        log.append(batch, validate_batches(batch, max_message_bytes=1 << 20),
                   log_append_time_ms=None)
    log.flush()
    log.close()


def check_state(b: EmbeddedBroker) -> None:
    md = b.broker.controller.metadata
    assert md.cluster_id == "legacyClusterIdAAAAAAA"
    assert {n: (t.topic_id, t.partitions, t.configs) for n, t in md.topics.items()} == {
        "orders": (TID, 3, {"retention.ms": "12345"})}
    assert md.dynamic_configs == {(4, ""): {"log.cleaner.threads": "2"},
                                  (32, "g1"): {"consumer.session.timeout.ms": "50000"}}
    assert md.next_producer_id_block == 2000
    assert [i for i, _ in md.acls.acls(__import__(
        "snakka.security.acl_authorizer", fromlist=["x"]).AclBindingFilter())] == [ACL_ID]
    assert list(md.scram.users) == ["alice"]
    assert md.client_quotas.quotas == {(("user", "alice"),): {"producer_byte_rate": 1024.0}}
    assert md.features["metadata.version"] == kraft.METADATA_VERSION_LEVEL


def all_values_are_kraft(data_dir: str) -> bool:
    path = os.path.join(data_dir, METADATA_DIR)
    for name in sorted(os.listdir(path)):
        if name.endswith(".log"):
            with open(os.path.join(path, name), "rb") as f:
                data = f.read()
            for h, pos in iter_batches(data):
                for rec in batch_records(data, pos, h):
                    if not h.is_control:
                        kraft.decode_message(rec.value)  # raises if not KRaft
    return True


def test_json_metadata_is_converted_once_and_nothing_is_lost(tmp_path, caplog):
    write_legacy_dir(str(tmp_path))
    with EmbeddedBroker(str(tmp_path)) as b:
        check_state(b)
    assert any("converting" in r.getMessage() for r in caplog.records)
    assert all_values_are_kraft(str(tmp_path))
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(METADATA_DIR)) == [METADATA_DIR]
    caplog.clear()
    with EmbeddedBroker(str(tmp_path)) as b:  # the second start reads KRaft, converts nothing
        check_state(b)
    assert not any("converting" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("crash_after", ["written", "old-moved", "new-moved"])
def test_a_crash_during_conversion_leaves_old_or_new_and_the_next_start_finishes(
        tmp_path, monkeypatch, crash_after):
    write_legacy_dir(str(tmp_path))

    def crash(step: str) -> None:
        if step == crash_after:
            raise OSError(f"injected crash after {step}")

    monkeypatch.setattr(store_mod, "_step", crash)
    with pytest.raises(OSError, match="injected crash"):
        EmbeddedBroker(str(tmp_path)).start()
    present = sorted(p for p in os.listdir(tmp_path) if p.startswith(METADATA_DIR))
    assert present == {
        "written": [METADATA_DIR, MIGRATION_NEW],
        "old-moved": sorted([MIGRATION_NEW, MIGRATION_OLD]),
        "new-moved": [METADATA_DIR, MIGRATION_OLD],
    }[crash_after]
    monkeypatch.setattr(store_mod, "_step", lambda step: None)
    with EmbeddedBroker(str(tmp_path)) as b:
        check_state(b)
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(METADATA_DIR)) == [METADATA_DIR]
    assert all_values_are_kraft(str(tmp_path))
