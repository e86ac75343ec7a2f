"""Properties of the server-side assignors (``uniform``, ``range``)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.groups.assignors import ASSIGNORS, RangeAssignor, UniformAssignor, get_assignor

T = {name: uuid.UUID(int=i + 1) for i, name in enumerate("abcdef")}


def topics_of(counts: dict[str, int]) -> dict[uuid.UUID, tuple[str, int]]:
    return {T[name]: (name, n) for name, n in counts.items()}


def spec(subs, current=None, rack=None):
    return (set(subs), current or {}, rack)


def owners(result):
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for mid, assignment in result.items():
        for tid, parts in assignment.items():
            for p in parts:
                assert (tid, p) not in seen, f"{(tid, p)} assigned to {seen[(tid, p)]} and {mid}"
                seen[(tid, p)] = mid
    return seen


def check_valid(members, topics, result):
    """Every subscribed partition exactly once, only to members subscribed to its topic."""
    assert set(result) == set(members)
    seen = owners(result)
    names = {tid: name for tid, (name, _n) in topics.items()}
    expected = {
        (tid, p)
        for tid, (name, n) in topics.items()
        if any(name in m[0] for m in members.values())
        for p in range(n)
    }
    assert set(seen) == expected
    for (tid, _p), mid in seen.items():
        assert names[tid] in members[mid][0]


def counts(result):
    return {mid: sum(len(p) for p in a.values()) for mid, a in result.items()}


def as_current(result):
    return {mid: {t: set(p) for t, p in a.items()} for mid, a in result.items()}


# -- strategies ------------------------------------------------------------------------------

topic_counts = st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 12), min_size=1)
member_ids = st.lists(
    st.text(alphabet="mnopqrstuvwxyz0123456789", min_size=1, max_size=6),
    min_size=1,
    max_size=8,
    unique=True,
)


@st.composite
def groups(draw, identical: bool = False):
    tc = draw(topic_counts)
    topics = topics_of(tc)
    ids = draw(member_ids)
    names = sorted(tc) + ["nosuch"]
    if identical:
        sub = draw(st.sets(st.sampled_from(names), min_size=1))
        subs = {m: sub for m in ids}
    else:
        subs = {m: draw(st.sets(st.sampled_from(names))) for m in ids}
    # Arbitrary (possibly overlapping, out-of-range, stale) current assignments.
    members = {}
    for m in ids:
        cur = draw(
            st.dictionaries(
                st.sampled_from(sorted(T.values())),
                st.sets(st.integers(-1, 14), max_size=5),
                max_size=3,
            )
        )
        members[m] = spec(subs[m], cur)
    return members, topics


both = pytest.mark.parametrize(
    "assignor", [UniformAssignor(), RangeAssignor()], ids=lambda a: a.name
)

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- properties shared by both assignors -----------------------------------------------------


@both
@FAST
@given(groups())
def test_every_subscribed_partition_assigned_once_to_a_subscriber(assignor, group):
    members, topics = group
    check_valid(members, topics, assignor.assign(members, topics))


@both
@FAST
@given(groups())
def test_deterministic_and_independent_of_input_order(assignor, group):
    members, topics = group
    first = assignor.assign(members, topics)
    reversed_members = dict(reversed(list(members.items())))
    reversed_topics = dict(reversed(list(topics.items())))
    assert assignor.assign(reversed_members, reversed_topics) == first
    assert assignor.assign(members, topics) == first


@both
@FAST
@given(groups())
def test_stable_when_nothing_changes(assignor, group):
    """Feeding the result back (as Kafka feeds the previous target) changes nothing."""
    members, topics = group
    first = assignor.assign(members, topics)
    again = {m: (s[0], first[m], s[2]) for m, s in members.items()}
    assert assignor.assign(again, topics) == first


# -- uniform ---------------------------------------------------------------------------------


@FAST
@given(groups(identical=True))
def test_uniform_balanced_with_identical_subscriptions(group):
    members, topics = group
    result = UniformAssignor().assign(members, topics)
    c = counts(result).values()
    assert max(c) - min(c) <= 1


@FAST
@given(groups())
def test_uniform_locally_balanced_with_mixed_subscriptions(group):
    """No partition could move to an eligible member with two fewer partitions."""
    members, topics = group
    result = UniformAssignor().assign(members, topics)
    c = counts(result)
    names = {tid: name for tid, (name, _n) in topics.items()}
    for (tid, _p), owner in owners(result).items():
        for other, s in members.items():
            if names[tid] in s[0]:
                assert c[other] >= c[owner] - 1


@FAST
@given(groups(identical=True), st.text(alphabet="xyz", min_size=7, max_size=7))
def test_uniform_join_moves_only_what_must_move(group, newcomer):
    members, topics = group
    before = UniformAssignor().assign(members, topics)
    sub = next(iter(members.values()))[0]
    grown = {m: (s[0], before[m], None) for m, s in members.items()}
    grown[newcomer] = (sub, {}, None)
    after = UniformAssignor().assign(grown, topics)
    check_valid(grown, topics, after)
    c = counts(after).values()
    assert max(c) - min(c) <= 1
    # Old members only lose partitions, never gain or swap: everything that moved went to
    # the newcomer, and it got exactly its fair share.
    for m in members:
        for tid, parts in after[m].items():
            assert parts <= before[m].get(tid, set())
    total = sum(counts(before).values())
    assert counts(after)[newcomer] == total // len(grown) or counts(after)[newcomer] == -(
        -total // len(grown)
    )
    moved = sum(counts(before).values()) - sum(
        len(after[m].get(t, set()) & p) for m in members for t, p in before[m].items()
    )
    assert moved == counts(after)[newcomer]


@FAST
@given(groups(identical=True), st.data())
def test_uniform_leave_keeps_survivors_partitions(group, data):
    members, topics = group
    if len(members) < 2:
        return
    before = UniformAssignor().assign(members, topics)
    gone = data.draw(st.sampled_from(sorted(members)))
    rest = {m: (s[0], before[m], None) for m, s in members.items() if m != gone}
    after = UniformAssignor().assign(rest, topics)
    check_valid(rest, topics, after)
    for m in rest:
        for tid, parts in before[m].items():
            assert parts <= after[m].get(tid, set())


def test_uniform_fresh_assignment_examples():
    topics = topics_of({"a": 4, "b": 2})
    members = {"m1": spec("ab"), "m2": spec("ab"), "m3": spec("ab")}
    result = UniformAssignor().assign(members, topics)
    assert sorted(counts(result).values()) == [2, 2, 2]
    # A member subscribed to nothing, and a topic nobody subscribes to.
    members = {"m1": spec("a"), "m2": spec("")}
    result = UniformAssignor().assign(members, topics_of({"a": 3, "c": 5}))
    assert result == {"m1": {T["a"]: {0, 1, 2}}, "m2": {}}


def test_uniform_mixed_subscriptions_balance_where_possible():
    # m1 alone can take b; a is shared, so a's partitions go to m2 to compensate.
    topics = topics_of({"a": 4, "b": 4})
    members = {"m1": spec("ab"), "m2": spec("a")}
    result = UniformAssignor().assign(members, topics)
    assert result["m1"] == {T["b"]: {0, 1, 2, 3}}
    assert result["m2"] == {T["a"]: {0, 1, 2, 3}}


def test_uniform_drops_invalid_current_ownership():
    topics = topics_of({"a": 2})
    members = {
        "m1": spec("a", {T["a"]: {0, 1, 7}, T["b"]: {0}}),  # 7 out of range, b not subscribed
        "m2": spec("a", {T["a"]: {0, 1}}),  # double claim: m1 (first in order) keeps them
    }
    result = UniformAssignor().assign(members, topics)
    check_valid(members, topics, result)
    assert counts(result) == {"m1": 1, "m2": 1}


# -- range -----------------------------------------------------------------------------------


def test_range_fresh_is_classic_range_in_member_id_order():
    topics = topics_of({"a": 7, "b": 3})
    members = {"c": spec("ab"), "a": spec("ab"), "b": spec("ab")}
    result = RangeAssignor().assign(members, topics)
    assert result["a"] == {T["a"]: {0, 1, 2}, T["b"]: {0}}
    assert result["b"] == {T["a"]: {3, 4}, T["b"]: {1}}
    assert result["c"] == {T["a"]: {5, 6}, T["b"]: {2}}


def test_range_co_partitioned_topics_line_up():
    topics = topics_of({"a": 6, "b": 6})
    members = {m: spec("ab") for m in ("m1", "m2", "m3", "m4")}
    result = RangeAssignor().assign(members, topics)
    for m in members:
        assert result[m][T["a"]] == result[m][T["b"]]


def test_range_sticky_when_member_joins():
    topics = topics_of({"a": 6})
    first = RangeAssignor().assign({"m1": spec("a"), "m3": spec("a")}, topics)
    assert first == {"m1": {T["a"]: {0, 1, 2}}, "m3": {T["a"]: {3, 4, 5}}}
    members = {"m1": spec("a", first["m1"]), "m3": spec("a", first["m3"]), "m2": spec("a")}
    second = RangeAssignor().assign(members, topics)
    # Each old member keeps its lowest partitions up to the quota of 2; the newcomer gets the
    # released ones (Kafka's sticky range), rather than a full reshuffle.
    assert second == {"m1": {T["a"]: {0, 1}}, "m2": {T["a"]: {2, 5}}, "m3": {T["a"]: {3, 4}}}


@FAST
@given(groups(identical=True))
def test_range_per_topic_quota(group):
    members, topics = group
    result = RangeAssignor().assign(members, topics)
    for tid, (name, n) in topics.items():
        subscribers = [m for m, s in members.items() if name in s[0]]
        if not subscribers:
            continue
        per = [len(result[m].get(tid, ())) for m in subscribers]
        assert max(per) - min(per) <= 1 and sum(per) == n


def test_registry():
    assert set(ASSIGNORS) == {"uniform", "range"}
    assert get_assignor("uniform").name == "uniform"
    assert get_assignor("sticky") is None
