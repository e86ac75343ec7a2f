"""The share groups' simple assignor (:func:`snakka.groups.share_group.simple_assign`): properties
checked with hypothesis — every partition of a subscribed topic has a member, only subscribers
get a topic's partitions, homogeneous groups are balanced (counts differ by at most one, each
partition shared by ceil(M/P) members), and a balanced assignment is kept as it is."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from snakka.groups.share_group import simple_assign

T = [uuid.UUID(int=i + 1) for i in range(3)]


def flat(assignment):
    return {m: {(t, p) for t, ps in a.items() for p in ps} for m, a in assignment.items()}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.integers(0, 40))
def test_homogeneous_balance(n_members, n_parts):
    members = {f"m{i:02d}": {T[0]} for i in range(n_members)}
    got = flat(simple_assign(members, {T[0]: n_parts}, {}))
    counts = [len(s) for s in got.values()]
    if n_parts == 0:
        assert counts == [0] * n_members
        return
    sharing = -(-n_members // n_parts)
    assert max(counts) - min(counts) <= 1
    for p in range(n_parts):
        assert sum((T[0], p) in s for s in got.values()) == sharing


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(1, 24), st.integers(0, 6))
def test_homogeneous_is_sticky_when_balanced_and_minimal_when_members_change(
        n_members, n_parts, extra):
    members = {f"m{i:02d}": {T[0]} for i in range(n_members)}
    first = simple_assign(members, {T[0]: n_parts}, {})
    # Recomputing from a balanced assignment changes nothing.
    assert simple_assign(members, {T[0]: n_parts}, first) == first
    # Members joining: existing members only lose partitions, never swap them.
    more = dict(members, **{f"x{i}": {T[0]} for i in range(extra)})
    second = flat(simple_assign(more, {T[0]: n_parts}, first))
    before = flat(first)
    if -(-len(more) // n_parts) == -(-n_members // n_parts):  # same sharing factor
        for m in members:
            assert second[m] <= before[m]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([f"m{i}" for i in range(8)]),
                       st.sets(st.sampled_from(T), min_size=0, max_size=3), min_size=1),
       st.lists(st.integers(0, 9), min_size=3, max_size=3))
def test_heterogeneous_every_partition_to_a_subscriber(subs, sizes):
    topics = dict(zip(T, sizes, strict=True))
    got = flat(simple_assign(subs, topics, {}))
    assert set(got) == set(subs)
    for m, tps in got.items():
        assert all(t in subs[m] for t, _p in tps), "a member got a topic it does not subscribe"
    for t in T:
        if any(t in s for s in subs.values()):
            for p in range(topics[t]):
                assert any((t, p) in s for s in got.values())


def test_heterogeneous_spreads_load():
    subs = {"x": {T[0]}, "y": {T[0], T[1]}, "z": {T[1]}}
    got = flat(simple_assign(subs, {T[0]: 4, T[1]: 2}, {}))
    assert {len(s) for s in got.values()} <= {2, 3}
    assert sum(len(s) for s in got.values()) == 6
