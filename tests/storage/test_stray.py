"""Stray partition dirs at start-up (LogManager.load_all with the metadata's topics): which
dirs are stray, Kafka's stray name, kept with records, deleted without, never adopted."""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass

from snakka.storage import LogConfig, UnifiedLog, topic_id_to_str
from snakka.storage.checkpoint import PARTITION_METADATA_FILE
from snakka.storage.manager import (
    MAX_DIR_NAME_LENGTH,
    MAX_STRAY_LINES,
    stray_dir_name,
    stray_reason,
)

from .helpers import append, batch, crash, manager

STRAY_NAME = re.compile(r"^(?P<tp>.+)\.[0-9a-f]{32}-stray$")


@dataclass
class Topic:  # the two fields of metadata.core.TopicInfo the check reads
    topic_id: uuid.UUID
    partitions: int


def strays(tmp_path) -> dict[str, list[str]]:
    """``<topic>-<partition>`` -> sorted file names, of every ``*-stray`` dir."""
    data = tmp_path / "data"
    out = {}
    for name in os.listdir(data):
        m = STRAY_NAME.match(name)
        if m:
            out[m["tp"]] = sorted(os.listdir(data / name))
    return out


def test_stray_dir_name_is_kafkas():
    assert STRAY_NAME.match(stray_dir_name("orders", 3))["tp"] == "orders-3"
    assert stray_dir_name("t", 0) != stray_dir_name("t", 0)  # a fresh uuid each time
    long = stray_dir_name("x" * 249, 12345)  # a legal topic name of the longest length
    assert len(long) == MAX_DIR_NAME_LENGTH
    assert re.fullmatch(r"x+-12345\.[0-9a-f]{32}-stray", long)


def test_stray_reason():
    tid = uuid.uuid4()
    known = Topic(tid, 2)
    assert stray_reason("t", 0, None, known) is None  # no partition.metadata: adopted
    assert stray_reason("t", 1, topic_id_to_str(tid), known) is None
    assert "not in the metadata" in stray_reason("u", 0, None, None)
    assert "2 partition(s)" in stray_reason("t", 2, None, known)
    other = topic_id_to_str(uuid.uuid4())
    assert other in stray_reason("t", 0, other, known)


def test_unknown_topic_with_records_is_renamed_and_kept_never_loaded(tmp_path, caplog):
    tid = uuid.uuid4()
    lm = manager(tmp_path)
    append(lm.get_or_create_log("t", 0, topic_id=tid), batch(3))
    lm.close()
    shutil.copytree(tmp_path / "data" / "t-0", tmp_path / "data" / "u-0")
    before = sorted(os.listdir(tmp_path / "data" / "u-0"))
    lm = manager(tmp_path)
    with caplog.at_level(logging.INFO, logger="snakka.storage"):
        loaded = lm.load_all(topics={"t": Topic(tid, 1)})
    assert [(p.topic, p.partition) for p in loaded] == [("t", 0)]
    assert lm.get_log("u", 0) is None
    assert not (tmp_path / "data" / "u-0").exists()
    assert strays(tmp_path) == {"u-0": before}  # every file kept, untouched
    assert "topic u is not in the metadata" in caplog.text
    assert "1 kept" in caplog.text
    lm.close()
    # The next start keeps it again (Kafka never deletes a stray log), and says so.
    lm = manager(tmp_path)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="snakka.storage"):
        assert [p.topic for p in lm.load_all(topics={"t": Topic(tid, 1)})] == ["t"]
    assert strays(tmp_path) == {"u-0": before}
    assert "holds records: kept" in caplog.text
    lm.close()


def test_partition_beyond_the_count_and_empty_strays_are_deleted(tmp_path):
    tid = uuid.uuid4()
    lm = manager(tmp_path)
    for p in range(3):
        append(lm.get_or_create_log("t", p, topic_id=tid), batch(1))
    lm.get_or_create_log("gone", 0, topic_id=uuid.uuid4())  # created, never committed
    lm.close()
    lm = manager(tmp_path)
    loaded = lm.load_all(topics={"t": Topic(tid, 2)})
    assert sorted(p.partition for p in loaded) == [0, 1]
    assert lm.join_stray_deletion(30)
    assert set(strays(tmp_path)) == {"t-2"}  # holds a record: kept
    assert not any(n.startswith("gone") for n in os.listdir(tmp_path / "data"))  # empty: gone
    lm.close()


def test_other_topic_id_after_a_crash_is_stray_missing_id_is_adopted(tmp_path):
    old, new = uuid.uuid4(), uuid.uuid4()
    lm = manager(tmp_path)
    append(lm.get_or_create_log("t", 0, topic_id=old), batch(2))
    append(lm.get_or_create_log("t", 1, topic_id=new), batch(2))
    append(lm.get_or_create_log("t", 2, topic_id=new), batch(2))
    crash(lm)
    os.unlink(tmp_path / "data" / "t-2" / PARTITION_METADATA_FILE)
    lm = manager(tmp_path)
    loaded = lm.load_all(topics={"t": Topic(new, 3)})
    assert sorted(p.partition for p in loaded) == [1, 2]
    assert lm.get_log("t", 2).log_end_offset == 2  # adopted with its data
    assert set(strays(tmp_path)) == {"t-0"}
    lm.close()


def test_stray_dirs_left_by_a_crash(tmp_path):
    data = tmp_path / "data"
    kept = data / f"t-0.{uuid.uuid4().hex}-stray"
    emptied = data / f"t-1.{uuid.uuid4().hex}-stray"
    for d in (kept, emptied):
        d.mkdir(parents=True)
        (d / "00000000000000000000.index").write_bytes(b"")
    (kept / "00000000000000000000.log").write_bytes(b"x" * 10)
    (emptied / "00000000000000000000.log").write_bytes(b"")
    lm = manager(tmp_path)
    assert lm.load_all(topics={}) == []
    assert lm.join_stray_deletion(30)
    assert sorted(os.listdir(data)) == [".lock", kept.name]
    lm.close()


def test_metadata_log_and_no_topics_mapping_untouched(tmp_path):
    meta = UnifiedLog(str(tmp_path / "data" / "__cluster_metadata-0"), LogConfig(), recover=False)
    append(meta, batch(1))
    lm = manager(tmp_path)
    append(lm.get_or_create_log("t", 0), batch(1))
    lm.close()
    lm = manager(tmp_path)
    assert [p.topic for p in lm.load_all()] == ["t"]  # no metadata given: adopts all
    lm.close()
    lm = manager(tmp_path)
    assert lm.load_all(topics={}) == []
    assert (tmp_path / "data" / "__cluster_metadata-0").is_dir()
    lm.close()
    meta.close()


def test_many_empty_strays_log_a_bounded_number_of_lines(tmp_path, caplog):
    lm = manager(tmp_path)
    n = MAX_STRAY_LINES + 30
    for p in range(n):
        lm.get_or_create_log("cut", p, topic_id=uuid.uuid4())
    crash(lm)
    lm = manager(tmp_path)
    with caplog.at_level(logging.INFO, logger="snakka.storage"):
        assert lm.load_all(topics={}) == []
    lines = [r for r in caplog.records if "holds no records: deleting it" in r.getMessage()]
    assert len(lines) == MAX_STRAY_LINES
    assert f"{n} being deleted (no records), 0 kept" in caplog.text
    assert lm.join_stray_deletion(30)
    assert sorted(os.listdir(tmp_path / "data")) == [".lock"]
    lm.close()


def test_close_stops_the_stray_deletion_the_next_start_finishes_it(tmp_path):
    lm = manager(tmp_path)
    for p in range(200):
        lm.get_or_create_log("cut", p, topic_id=uuid.uuid4())
    crash(lm)
    lm = manager(tmp_path)
    assert lm.load_all(topics={}) == []
    lm.close()  # at once: the deletion is cut short between two directories, or done
    assert lm.join_stray_deletion(0)
    assert not any(n.startswith("cut-") and not STRAY_NAME.match(n)
                   for n in os.listdir(tmp_path / "data"))  # every one renamed before
    lm = manager(tmp_path)
    assert lm.load_all(topics={}) == []
    assert lm.join_stray_deletion(30)
    assert not [n for n in os.listdir(tmp_path / "data") if (tmp_path / "data" / n).is_dir()]
    lm.close()
