"""MetadataStore.prepare / append_prepared: a large change's batches encoded in a worker thread
and appended later on the loop replay exactly as an ``append`` on the loop would, in append
order, one metadata transaction when they need several batches."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from snakka.metadata import kraft
from snakka.metadata.core import ClusterMetadata
from snakka.metadata.store import MetadataStore


def _replay(path: str) -> list[dict]:
    store = MetadataStore(path)
    try:
        return [r for _offset, r in store.replay()]
    finally:
        store.close()


def test_prepared_in_a_thread_replays_as_append(tmp_path):
    md = ClusterMetadata()
    big = md.topic_record("big", kraft.MAX_RECORDS_PER_BATCH + 5, {}, None)
    small = md.topic_record("small", 1, {}, None)
    direct, prepared = str(tmp_path / "direct"), str(tmp_path / "prepared")

    store = MetadataStore(direct)
    store.begin_epoch([])
    store.append([big])
    store.append([small])
    store.close()

    store = MetadataStore(prepared)
    store.begin_epoch([])
    with ThreadPoolExecutor(1) as pool:
        batches = pool.submit(store.prepare, [big]).result()
    assert store.prepare([]) == b""
    store.append_prepared(batches, sync=False)
    store.append([small])
    store.close()

    replayed = _replay(prepared)
    assert replayed == _replay(direct)
    topics = [r["name"] for r in replayed if r["type"] == "topic"]
    assert topics == ["big", "small"]
    assert sum(1 for r in replayed if r["type"] == "partition") >= 1
    # More records than one batch holds: framed as one metadata transaction.
    values = store.codec.transaction(store.codec.encode([big]), "snakka")
    assert len(values) == kraft.MAX_RECORDS_PER_BATCH + 5 + 1 + 2
