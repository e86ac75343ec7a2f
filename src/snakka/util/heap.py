"""Long-lived allocations and CPython's cyclic garbage collector.

Owns how the broker keeps a full (generation-2) garbage collection from stalling the event loop
while it builds objects that live as long as the process: the partition logs, segments, indexes
and metadata of many new topics.

Why: a full collection scans every tracked object that is not frozen, in one step, on whichever
thread allocates when it triggers (here: the event loop). CPython runs one each time the
objects that survived younger collections grow by a quarter of the old generation, so while a
request creates 10,000 topics (~28 tracked objects each) it runs several, each proportional to
the whole heap: measured 120-200 ms of CPU in one event-loop step at 10,000 topics, 0.4-1.0 s
of wall time on a loaded 2-core machine, for snakka before and after its metadata log became
KRaft's (docs/benchmarks.md). No other step of such a creation holds the loop over ~35 ms.

How (:func:`long_lived`, for a build of at least ``GC_LONG_LIVED_MIN_PARTITIONS`` partitions:
fewer make little to scan, and each freeze keeps some garbage for good): while one or more such
builds run, full collections are held off (generation 2's threshold raised to
``GC_FULL_COLLECTION_HOLD_THRESHOLD``); young collections run as usual, so short-lived cyclic
garbage is still reclaimed. When the last build ends, what is alive is frozen (``gc.freeze()``:
moved to the permanent generation, which no collection scans, as ``snakka serve`` does after
start-up) and the threshold is restored. The next full collections scan only what was made
since; a freeze is O(1).

Trade-off, the same as the freeze after start-up: garbage that is cyclic, unreachable and
already old at that moment is never reclaimed, nor are frozen objects that later become cyclic
garbage (a deleted topic's objects that reference each other in a cycle); objects freed by
their reference count, nearly all, still are. So that this does not grow with every large
topic created and deleted again (a client can repeat that), a deletion of at least
``GC_LONG_LIVED_MIN_PARTITIONS`` partitions (:func:`reclaim_frozen`) unfreezes, runs one full
collection and freezes again: one full-heap step per large deletion (deferred to the end of a
large creation still running), against garbage that would otherwise stay for good.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from snakka.limits import GC_FULL_COLLECTION_HOLD_THRESHOLD, GC_LONG_LIVED_MIN_PARTITIONS

_depth = 0  # builds running (the event loop interleaves them)
_saved: tuple[int, int, int] | None = None  # the thresholds to restore
_reclaim_pending = False  # a large deletion happened while a build ran


@contextmanager
def long_lived(partitions: int) -> Iterator[None]:
    """Hold off full collections while the block builds long-lived objects for ``partitions``
    partitions; freeze what is alive when the last such block ends (see the module docstring).
    Below ``GC_LONG_LIVED_MIN_PARTITIONS`` partitions this does nothing."""
    global _depth, _saved
    if partitions < GC_LONG_LIVED_MIN_PARTITIONS:
        yield
        return
    if _depth == 0:
        _saved = gc.get_threshold()
        gc.set_threshold(_saved[0], _saved[1], GC_FULL_COLLECTION_HOLD_THRESHOLD)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            global _reclaim_pending
            if _reclaim_pending:
                _reclaim_pending = False
                gc.unfreeze()
                gc.collect()
            gc.freeze()
            if _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None


def reclaim_frozen(partitions: int) -> None:
    """After a deletion of ``partitions`` partitions: at or above
    ``GC_LONG_LIVED_MIN_PARTITIONS``, collect the frozen heap once (unfreeze, one full
    collection, freeze again) so that the deleted topics' cyclic garbage is reclaimed; while a
    large build runs, at its end instead (module docstring)."""
    global _reclaim_pending
    if partitions < GC_LONG_LIVED_MIN_PARTITIONS:
        return
    if _depth > 0:
        _reclaim_pending = True
        return
    gc.unfreeze()
    gc.collect()
    gc.freeze()
