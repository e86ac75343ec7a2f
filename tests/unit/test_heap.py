"""util.heap.long_lived: full collections held off while a large creation builds, what is alive
frozen when the last one ends, thresholds restored; small builds untouched."""

from __future__ import annotations

import gc
import weakref

import pytest

from snakka.limits import GC_FULL_COLLECTION_HOLD_THRESHOLD, GC_LONG_LIVED_MIN_PARTITIONS
from snakka.util.heap import long_lived, reclaim_frozen


@pytest.fixture
def gc_state():
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    yield before
    gc.set_threshold(*before)
    if frozen == 0:
        gc.unfreeze()  # what this test froze goes back to the collector


def test_small_build_changes_nothing(gc_state):
    frozen = gc.get_freeze_count()
    with long_lived(GC_LONG_LIVED_MIN_PARTITIONS - 1):
        assert gc.get_threshold() == gc_state
        kept = [[] for _ in range(100)]
    assert gc.get_threshold() == gc_state
    assert kept and gc.get_freeze_count() == frozen


def test_large_builds_hold_full_collections_then_freeze(gc_state):
    gc.unfreeze()
    with long_lived(GC_LONG_LIVED_MIN_PARTITIONS):
        assert gc.get_threshold() == (*gc_state[:2], GC_FULL_COLLECTION_HOLD_THRESHOLD)
        with long_lived(GC_LONG_LIVED_MIN_PARTITIONS * 10):  # interleaved builds
            kept = [[i] for i in range(1000)]  # tracked, long-lived
        # The outer build still runs: still held, nothing frozen yet.
        assert gc.get_threshold()[2] == GC_FULL_COLLECTION_HOLD_THRESHOLD
        assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == gc_state
    assert gc.get_freeze_count() >= len(kept)


def test_large_build_that_fails_restores_and_freezes(gc_state):
    gc.unfreeze()
    with pytest.raises(RuntimeError), long_lived(GC_LONG_LIVED_MIN_PARTITIONS):
        raise RuntimeError("logs could not be made")
    assert gc.get_threshold() == gc_state
    assert gc.get_freeze_count() > 0


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def _frozen_cycle() -> weakref.ref:
    """A cyclic object built by a large creation and frozen with it, then dropped (a deleted
    topic's objects)."""
    with long_lived(GC_LONG_LIVED_MIN_PARTITIONS):
        node = _Node()
    ref = weakref.ref(node)
    del node
    gc.collect()
    return ref


def test_a_large_deletion_reclaims_frozen_cycles(gc_state):
    gc.unfreeze()
    ref = _frozen_cycle()
    assert ref() is not None  # frozen: no collection sees it
    reclaim_frozen(GC_LONG_LIVED_MIN_PARTITIONS - 1)  # a small deletion: left frozen
    assert ref() is not None
    reclaim_frozen(GC_LONG_LIVED_MIN_PARTITIONS)
    assert ref() is None
    assert gc.get_freeze_count() > 0  # what lives is frozen again


def test_a_large_deletion_during_a_build_reclaims_at_its_end(gc_state):
    gc.unfreeze()
    ref = _frozen_cycle()
    with long_lived(GC_LONG_LIVED_MIN_PARTITIONS):
        reclaim_frozen(GC_LONG_LIVED_MIN_PARTITIONS)
        assert ref() is not None  # no full-heap step in the middle of a build
    assert ref() is None
