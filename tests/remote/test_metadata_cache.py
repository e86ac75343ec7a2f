"""RemoteLogMetadataCache / RemotePartitionMetadataStore (snakka.remote.metadata): Kafka's
semantics, checked against a simple model with random event sequences, and the restatement
that trims ``__remote_log_metadata`` (replaying it, alone or after the old records, changes
nothing)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.remote.metadata import (
    RemoteLogMetadataCache,
    RemotePartitionMetadataStore,
    deserialize,
    is_valid_transition,
    serialize,
)
from snakka.remote.types import (
    VALID_SEGMENT_TRANSITIONS,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

S = RemoteLogSegmentState
TP = TopicIdPartition(uuid.UUID(int=7), "t", 0)
TP2 = TopicIdPartition(uuid.UUID(int=8), "u", 1)


def seg(start: int, end: int, epochs: tuple[tuple[int, int], ...] | None = None, *,
        tp: TopicIdPartition = TP, sid: uuid.UUID | None = None, ts: int = 0,
        size: int = 10) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId(tp, sid or uuid.uuid4()), start_offset=start,
        end_offset=end, max_timestamp_ms=ts, broker_id=1, event_timestamp_ms=ts,
        segment_size_in_bytes=size,
        segment_leader_epochs=epochs if epochs is not None else ((0, start),))


def upd(md: RemoteLogSegmentMetadata, state: S, ts: int = 1,
        custom: bytes | None = None) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.segment_id, ts, state, 1, custom)


def test_kafka_transitions() -> None:
    assert is_valid_transition(None, S.COPY_SEGMENT_STARTED)
    assert not is_valid_transition(None, S.COPY_SEGMENT_FINISHED)
    for src in S:
        assert is_valid_transition(src, src)  # retries are idempotent (Kafka)
        for dst in S:
            if dst is not src:
                assert is_valid_transition(src, dst) == (dst in VALID_SEGMENT_TRANSITIONS[src])


def test_lifecycle_and_lookups() -> None:
    c = RemoteLogMetadataCache()
    a, b = seg(0, 99), seg(100, 199)
    c.add_copy_in_progress_segment(a)
    assert c.remote_log_segment_metadata(0, 5) is None  # not readable while copying
    assert c.highest_offset_for_epoch(0) is None
    c.update_remote_log_segment_metadata(upd(a, S.COPY_SEGMENT_FINISHED, custom=b"m"))
    c.add_copy_in_progress_segment(b)
    c.update_remote_log_segment_metadata(upd(b, S.COPY_SEGMENT_FINISHED))
    found = c.remote_log_segment_metadata(0, 150)
    assert found is not None and found.segment_id == b.segment_id
    found = c.remote_log_segment_metadata(0, 0)
    assert found is not None and found.custom_metadata == b"m"
    assert c.remote_log_segment_metadata(0, 200) is None
    assert c.remote_log_segment_metadata(1, 150) is None
    assert c.highest_offset_for_epoch(0) == 199
    assert c.remote_log_size() == 20
    c.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_STARTED))
    assert c.remote_log_segment_metadata(0, 5) is None
    assert [m.state for m in c.segments()] == [S.DELETE_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED]
    assert c.remote_log_size() == 10
    c.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_FINISHED))
    assert [m.segment_id for m in c.segments()] == [b.segment_id]
    assert c.highest_offset_for_epoch(0) == 199


def test_illegal_events_raise_and_change_nothing() -> None:
    c = RemoteLogMetadataCache()
    a = seg(0, 9)
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        c.add_copy_in_progress_segment(
            RemoteLogSegmentMetadata(**{**_fields(a), "state": S.COPY_SEGMENT_FINISHED}))
    with pytest.raises(ValueError, match="no remote segment"):
        c.update_remote_log_segment_metadata(upd(a, S.COPY_SEGMENT_FINISHED))
    c.add_copy_in_progress_segment(a)
    with pytest.raises(ValueError, match="cannot become"):
        c.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_FINISHED))
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        c.update_remote_log_segment_metadata(upd(a, S.COPY_SEGMENT_STARTED))
    c.update_remote_log_segment_metadata(upd(a, S.COPY_SEGMENT_FINISHED))
    with pytest.raises(ValueError, match="already COPY_SEGMENT_FINISHED"):
        c.add_copy_in_progress_segment(a)
    assert [m.state for m in c.segments()] == [S.COPY_SEGMENT_FINISHED]


def _fields(md: RemoteLogSegmentMetadata) -> dict[str, Any]:
    return {f: getattr(md, f) for f in md.__dataclass_fields__}


def test_epoch_aware_lookup() -> None:
    # One segment with epochs 0 (offsets 0-49) and 2 (50-99).
    c = RemoteLogMetadataCache()
    a = seg(0, 99, ((0, 0), (2, 50)))
    c.add_copy_in_progress_segment(a)
    c.update_remote_log_segment_metadata(upd(a, S.COPY_SEGMENT_FINISHED))
    assert c.remote_log_segment_metadata(0, 49) is not None
    assert c.remote_log_segment_metadata(0, 50) is None
    assert c.remote_log_segment_metadata(2, 50) is not None
    assert c.remote_log_segment_metadata(2, 10) is None
    assert c.highest_offset_for_epoch(0) == 49
    assert c.highest_offset_for_epoch(2) == 99
    assert c.highest_offset_for_epoch(1) is None


def test_later_superset_upload_replaces_earlier() -> None:
    # Kafka's case 2: L0 uploaded 10-90, L1 uploaded 5-100: reads of 50 go to the second,
    # the first is unreferenced (still listed, for deletion).
    c = RemoteLogMetadataCache()
    a, b = seg(10, 90), seg(5, 100)
    for md in (a, b):
        c.add_copy_in_progress_segment(md)
        c.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    found = c.remote_log_segment_metadata(0, 50)
    assert found is not None and found.segment_id == b.segment_id
    assert {m.segment_id for m in c.segments_for_epoch(0)} == {a.segment_id, b.segment_id}


def test_copies_of_the_same_offsets_read_the_last_and_fall_back() -> None:
    # Kafka's case 1 (0-100 then 0-200) reads the later copy; when it is deleted the earlier,
    # still complete, is read again (Kafka would answer nothing for the range).
    c = RemoteLogMetadataCache()
    a, b = seg(0, 100), seg(0, 200)
    for md in (a, b):
        c.add_copy_in_progress_segment(md)
        c.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    found = c.remote_log_segment_metadata(0, 50)
    assert found is not None and found.segment_id == b.segment_id
    c.update_remote_log_segment_metadata(upd(b, S.DELETE_SEGMENT_STARTED))
    found = c.remote_log_segment_metadata(0, 50)
    assert found is not None and found.segment_id == a.segment_id
    assert c.remote_log_segment_metadata(0, 150) is None
    assert c.highest_offset_for_epoch(0) == 200


def test_retried_events_are_idempotent() -> None:
    # A retry of an older copy's COPY_SEGMENT_FINISHED (its append failed after reaching the
    # log) must not displace a newer copy of the same offsets, and a retried add changes
    # nothing but the fields.
    c = RemoteLogMetadataCache()
    a, b = seg(0, 100), seg(0, 100)
    for md in (a, b):
        c.add_copy_in_progress_segment(md)
        c.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    c.update_remote_log_segment_metadata(upd(a, S.COPY_SEGMENT_FINISHED, ts=9))
    found = c.remote_log_segment_metadata(0, 50)
    assert found is not None and found.segment_id == b.segment_id
    assert c.segment(a.segment_id).event_timestamp_ms == 9  # type: ignore[union-attr]
    d = seg(200, 300)
    c.add_copy_in_progress_segment(d)
    c.add_copy_in_progress_segment(d)
    assert [m.segment_id for m in c.segments()].count(d.segment_id) == 1


def test_a_deleted_copy_holding_the_highest_offset_is_not_started_again() -> None:
    # Found by the property test: re-adding it would make the restatement lose the highest
    # copied offset (or bring the old copy back).
    c = RemoteLogMetadataCache()
    a = seg(0, 9)
    c.add_copy_in_progress_segment(a)
    for state in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
        c.update_remote_log_segment_metadata(upd(a, state))
    with pytest.raises(ValueError, match="not reused"):
        c.add_copy_in_progress_segment(a)
    assert c.highest_offset_for_epoch(0) == 9 and c.segments() == []


def test_a_partition_whose_only_copy_was_cleaned_up_has_no_metadata() -> None:
    # A copy abandoned before it finished (COPY_SEGMENT_STARTED -> DELETE_*): nothing is left
    # to say about the partition, after a restatement or not (found by the property test).
    store = RemotePartitionMetadataStore()
    a = seg(0, 9)
    store.apply(a)
    store.apply(upd(a, S.DELETE_SEGMENT_STARTED))
    assert store.partitions() == [TP]
    store.apply(upd(a, S.DELETE_SEGMENT_FINISHED))
    assert store.partitions() == [] and store.cache(TP) is None


def test_partition_delete_states() -> None:
    store = RemotePartitionMetadataStore()
    a = seg(0, 9)
    store.apply(a)
    assert store.partitions() == [TP]
    for state in (RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                  RemotePartitionDeleteState.DELETE_PARTITION_STARTED):
        store.apply(RemotePartitionDeleteMetadata(TP, state, 1, 1))
        assert store.partition_delete_state(TP) is state
    store.apply(RemotePartitionDeleteMetadata(
        TP, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, 2, 1))
    assert store.partition_delete_state(TP) is None
    assert store.cache(TP) is None
    assert store.partitions() == []


# -- model-based property tests -------------------------------------------------------------

# An event sequence: ("add", i) adds segment i (grid cell i % 6, so some cover the same
# offsets: retried copies), ("to", i, state) moves it; ("pdel", tp, state) partition deletes.
_STATES = [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED,
           S.COPY_SEGMENT_STARTED]

events_st = st.lists(
    st.one_of(
        st.tuples(st.just("next"), st.integers(0, 11)),
        st.tuples(st.just("next"), st.integers(0, 11)),
        st.tuples(st.just("abandon"), st.integers(0, 11)),
        st.tuples(st.just("add"), st.integers(0, 11)),
        st.tuples(st.just("to"), st.integers(0, 11), st.sampled_from(_STATES)),
        st.tuples(st.just("pdel"), st.sampled_from([0, 1]),
                  st.sampled_from(list(RemotePartitionDeleteState))).filter(
                      lambda e: e[2] is not RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
                      or e[1] == 1),
    ),
    max_size=60)


def _segments(n: int = 12) -> list[RemoteLogSegmentMetadata]:
    out = []
    for i in range(n):
        cell = i % 6
        tp = TP if i % 5 else TP2
        # Two epochs: cells 0-2 in epoch 0, 3-5 in epoch 1; cell 2 spans both.
        if cell == 2:
            epochs: tuple[tuple[int, int], ...] = ((0, 20), (1, 25))
        else:
            epochs = ((0 if cell < 3 else 1, cell * 10),)
        out.append(seg(cell * 10, cell * 10 + 9, epochs, tp=tp, sid=uuid.UUID(int=1000 + i),
                       ts=i, size=i + 1))
    return out


def _to_events(raw: list[tuple[Any, ...]]) -> list[Any]:
    segs = _segments()
    out: list[Any] = []
    # "next": the segment's next step on the usual path (mostly legal sequences).
    path = [S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED,
            S.DELETE_SEGMENT_FINISHED]
    step: dict[int, int] = {}
    for ev in raw:
        if ev[0] == "next":
            k = step.get(ev[1], -1) + 1
            if k >= len(path):
                continue
            step[ev[1]] = k
            out.append(segs[ev[1]] if k == 0 else upd(segs[ev[1]], path[k], ts=100 + len(out)))
        elif ev[0] == "abandon":  # a copy given up: started -> deleting -> deleted
            k = step.get(ev[1], -1)
            nxt = {0: S.DELETE_SEGMENT_STARTED, 2: S.DELETE_SEGMENT_FINISHED}.get(k)
            if nxt is not None:
                step[ev[1]] = {S.DELETE_SEGMENT_STARTED: 2, S.DELETE_SEGMENT_FINISHED: 3}[nxt]
                out.append(upd(segs[ev[1]], nxt, ts=100 + len(out)))
        elif ev[0] == "add":
            out.append(segs[ev[1]])
        elif ev[0] == "to":
            out.append(upd(segs[ev[1]], ev[2], ts=100 + len(out),
                           custom=bytes([len(out)]) if len(out) % 3 == 0 else None))
        else:
            out.append(RemotePartitionDeleteMetadata((TP, TP2)[ev[1]], ev[2], len(out), 1))
    return out


class Model:
    """The simplest statement of Kafka's rules for these sequences (single-cell overlaps)."""

    def __init__(self) -> None:
        self.segs: dict[Any, RemoteLogSegmentMetadata] = {}
        # (tp, epoch, start) -> the copies finished there, in order (the last one is read)
        self.referenced: dict[tuple[Any, int, int], list[Any]] = {}
        self.highest: dict[tuple[Any, int], int] = {}
        self.source: dict[tuple[Any, int], Any] = {}  # the copy that set (or tied) highest
        self.deletes: dict[Any, RemotePartitionDeleteState] = {}

    def apply(self, ev: Any) -> bool:
        if isinstance(ev, RemotePartitionDeleteMetadata):
            tp = ev.topic_id_partition
            if ev.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                self.deletes.pop(tp, None)
                for sid in [s for s in self.segs if s.topic_id_partition == tp]:
                    del self.segs[sid]
                self.referenced = {k: v for k, v in self.referenced.items() if k[0] != tp}
                self.highest = {k: v for k, v in self.highest.items() if k[0] != tp}
                self.source = {k: v for k, v in self.source.items() if k[0] != tp}
            else:
                self.deletes[tp] = ev.state
            return True
        if isinstance(ev, RemoteLogSegmentMetadata):
            cur = self.segs.get(ev.segment_id)
            if cur is not None and cur.state is not S.COPY_SEGMENT_STARTED:
                return False
            if cur is None and ev.segment_id in self.source.values():
                return False  # a deleted copy holding the highest offset never comes back
            self.segs[ev.segment_id] = ev  # (a retry replaces the fields)
            return True
        cur = self.segs.get(ev.segment_id)
        if cur is None or ev.state is S.COPY_SEGMENT_STARTED:
            return False
        if not (ev.state is cur.state or ev.state in VALID_SEGMENT_TRANSITIONS[cur.state]):
            return False
        md = cur.create_with_update(ev)
        if ev.state is cur.state:  # a retry: the fields change, not which copy is read
            self.segs[md.segment_id] = md
            return True
        tp = md.topic_id_partition
        for i, (epoch, start) in enumerate(md.segment_leader_epochs):
            nxt = md.segment_leader_epochs[i + 1:]
            end = nxt[0][1] - 1 if nxt else md.end_offset
            key = (tp, epoch, start)
            if md.state is S.COPY_SEGMENT_FINISHED:
                self.referenced.setdefault(key, []).append(md.segment_id)
                self.highest[(tp, epoch)] = max(self.highest.get((tp, epoch), -1), end)
                if self.highest[(tp, epoch)] == end:
                    self.source[(tp, epoch)] = md.segment_id
            elif md.state is S.DELETE_SEGMENT_STARTED and md.segment_id in self.referenced.get(
                    key, []):
                self.referenced[key].remove(md.segment_id)
        if md.state is S.DELETE_SEGMENT_FINISHED:
            del self.segs[md.segment_id]
        else:
            self.segs[md.segment_id] = md
        return True

    def lookup(self, tp: Any, epoch: int, offset: int) -> Any:
        for (t, e, start), sids in self.referenced.items():
            if t != tp or e != epoch or start > offset or not sids:
                continue
            md = self.segs[sids[-1]]
            idx = [x[0] for x in md.segment_leader_epochs].index(e)
            nxt = md.segment_leader_epochs[idx + 1:]
            end = nxt[0][1] - 1 if nxt else md.end_offset
            if offset <= end:
                return md.segment_id
        return None


def observe(store: RemotePartitionMetadataStore) -> dict[str, Any]:
    """Everything a caller can see."""
    out: dict[str, Any] = {"deletes": {tp: store.partition_delete_state(tp) for tp in (TP, TP2)}}
    for tp in (TP, TP2):
        c = store.cache(tp)
        if c is None:
            out[str(tp)] = None
            continue
        lookups = {}
        for epoch in (0, 1):
            for off in range(0, 62):
                md = c.remote_log_segment_metadata(epoch, off)
                lookups[(epoch, off)] = None if md is None else md.segment_id
        out[str(tp)] = {
            "segments": c.segments(),
            "highest": {e: c.highest_offset_for_epoch(e) for e in (0, 1)},
            "size": c.remote_log_size(),
            "lookups": lookups,
            "by_epoch": {e: [m.segment_id for m in c.segments_for_epoch(e)] for e in (0, 1)},
        }
    return out


def _store_with(events: list[Any]) -> RemotePartitionMetadataStore:
    store = RemotePartitionMetadataStore()
    for ev in events:
        store.replay(ev)
    return store


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events_st)
def test_cache_matches_model(raw: list[tuple[Any, ...]]) -> None:
    store = RemotePartitionMetadataStore()
    model = Model()
    for ev in _to_events(raw):
        before = observe(store)
        applied = store.replay(ev)
        assert applied == model.apply(ev), ev
        if not applied:
            assert observe(store) == before  # a refused event changes nothing
    for tp in (TP, TP2):
        c = store.cache(tp)
        segs = [] if c is None else c.segments()
        want = sorted((m for m in model.segs.values() if m.topic_id_partition == tp),
                      key=lambda m: (m.start_offset, m.event_timestamp_ms, m.segment_id.id.int))
        assert segs == want
        assert store.partition_delete_state(tp) == model.deletes.get(tp)
        if c is None:
            continue
        for epoch in (0, 1):
            assert c.highest_offset_for_epoch(epoch) == model.highest.get((tp, epoch))
            for off in range(0, 62):
                md = c.remote_log_segment_metadata(epoch, off)
                assert (None if md is None else md.segment_id) == model.lookup(tp, epoch, off), \
                    (tp, epoch, off)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events_st, st.data())
def test_restatement_rebuilds_the_same_state(raw: list[tuple[Any, ...]], data: Any) -> None:
    events = _to_events(raw)
    store = _store_with(events)
    state = observe(store)
    units = list(store.restate([TP, TP2]))
    # Through the serde, as they are stored.
    units = [[deserialize(serialize(ev)) for ev in unit] for unit in units]
    # 1. The restatement alone (the old records trimmed away).
    fresh = _store_with([ev for unit in units for ev in unit])
    assert observe(fresh) == state
    # ... and restating that again gives the same state too.
    again = _store_with([ev for unit in fresh.restate([TP, TP2]) for ev in unit])
    assert observe(again) == state
    # 2. A crash during the trim: the old records, then any whole-unit prefix.
    cut = data.draw(st.integers(0, len(units)))
    crashed = _store_with(events + [ev for unit in units[:cut] for ev in unit])
    assert observe(crashed) == state
    # 3. ... and its next restatement is still the same state.
    third = _store_with([ev for unit in crashed.restate([TP, TP2]) for ev in unit])
    assert observe(third) == state
