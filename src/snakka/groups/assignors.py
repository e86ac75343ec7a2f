"""Server-side partition assignors of the KIP-848 consumer protocol: ``uniform`` and ``range``.

An assignor is a pure function from the group's members (their subscriptions and their
*previous target* assignment, which is what Kafka feeds its assignors for stickiness) and the
subscribed topics' metadata to a new target assignment. It knows nothing about epochs or
reconciliation: :mod:`snakka.groups.consumer` moves members towards the target safely.

Input::

    members: {member_id: (subscribed topic names, current {topic_id: partitions}, rack_id)}
    topics:  {topic_id: (topic name, partition count)}

Output: ``{member_id: {topic_id: set(partitions)}}`` with every member present (possibly with an
empty dict). Every partition of a topic that at least one member subscribes to is assigned to
exactly one member that subscribes to it. Subscribed names that are not in ``topics`` are
ignored (the topic does not exist yet). Current ownership that is no longer valid (topic gone,
partition out of range, member no longer subscribed, or claimed twice) is dropped. Everything
is iterated in sorted order, so the result is a deterministic function of the input.

* ``uniform`` (Kafka's ``UniformAssignor``, the default): balanced and sticky. Valid current
  ownership is kept; unowned partitions go, most-constrained topic first, to the eligible
  member with the fewest partitions; then single partitions move from a member with at least
  two more partitions than an eligible member until no such move exists. With identical
  subscriptions that makes partition counts differ by at most one, and a joining member takes
  partitions only from the members with the most (no partition moves between old members).
  Each move strictly lowers the sum of squared counts, so the loop terminates. Racks are not
  used: Kafka only uses them when partitions have rack information, which our metadata lacks.
* ``range`` (Kafka's server-side ``RangeAssignor``): per topic, the subscribed members sorted by
  member id share the partitions as ranges of ``n // m`` partitions, the first ``n % m`` members
  taking one more; sticky like Kafka's: a member keeps its lowest current partitions up to the
  quota (and one extra while extra slots remain), and the released or new partitions are handed
  out in ascending ranges to the members below quota in member-id order. Kafka iterates members
  in hash-map order; we sort them, which is what the classic range assignor does and what
  makes co-partitioned topics line up.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Iterable, Mapping
from typing import Protocol

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "Assignor",
    "MemberSpec",
    "RangeAssignor",
    "TopicSpec",
    "UniformAssignor",
    "get_assignor",
]

#: (subscribed topic names, current assignment {topic_id: partitions}, rack id or None)
MemberSpec = tuple[Iterable[str], Mapping[uuid.UUID, Iterable[int]], str | None]
#: (topic name, partition count)
TopicSpec = tuple[str, int]
#: {member_id: {topic_id: partitions}}
Assignment = dict[str, dict[uuid.UUID, set[int]]]


class Assignor(Protocol):
    name: str

    def assign(
        self, members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]
    ) -> Assignment: ...


def _subscribed_topic_ids(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]
) -> dict[str, frozenset[uuid.UUID]]:
    by_name: dict[str, uuid.UUID] = {name: tid for tid, (name, _n) in topics.items()}
    return {
        mid: frozenset(by_name[n] for n in spec[0] if n in by_name) for mid, spec in members.items()
    }


def _topic_order(topics: Mapping[uuid.UUID, TopicSpec]) -> dict[uuid.UUID, tuple[str, str]]:
    """Sort key of a topic: its name, then its id (names are unique, ids break no ties)."""
    return {tid: (name, str(tid)) for tid, (name, _n) in topics.items()}


class UniformAssignor:
    """Kafka's ``uniform`` assignor: balanced, sticky, any mix of subscriptions."""

    name = "uniform"

    def assign(
        self, members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]
    ) -> Assignment:
        subs = _subscribed_topic_ids(members, topics)
        order = _topic_order(topics)
        member_ids = sorted(members)
        result: Assignment = {mid: {} for mid in member_ids}
        count = dict.fromkeys(member_ids, 0)
        owned: set[tuple[uuid.UUID, int]] = set()

        # 1. Keep valid current ownership (first claimant in member-id order wins).
        for mid in member_ids:
            current = members[mid][1]
            for tid in sorted(current, key=lambda t: order.get(t, ("", str(t)))):
                if tid not in subs[mid]:
                    continue
                n = topics[tid][1]
                for p in sorted(current[tid]):
                    if 0 <= p < n and (tid, p) not in owned:
                        owned.add((tid, p))
                        result[mid].setdefault(tid, set()).add(p)
                        count[mid] += 1

        # 2. Hand out unowned partitions to the least-loaded eligible member. Members with the
        #    same subscription form one heap; the least-loaded member of the eligible heaps wins.
        groups: dict[frozenset[uuid.UUID], list[tuple[int, str]]] = {}
        for mid in member_ids:
            if subs[mid]:
                groups.setdefault(subs[mid], []).append((count[mid], mid))
        for heap in groups.values():
            heapq.heapify(heap)
        eligible: dict[uuid.UUID, list[list[tuple[int, str]]]] = {}
        for sub, heap in groups.items():
            for tid in sub:
                eligible.setdefault(tid, []).append(heap)
        # Most constrained topics first (fewest eligible members), then by name.
        topic_ids = sorted(eligible, key=lambda t: (sum(len(h) for h in eligible[t]), order[t]))
        for tid in topic_ids:
            heaps = eligible[tid]
            for p in range(topics[tid][1]):
                if (tid, p) in owned:
                    continue
                best = min(heaps, key=lambda h: h[0])
                c, mid = heapq.heappop(best)
                heapq.heappush(best, (c + 1, mid))
                owned.add((tid, p))
                result[mid].setdefault(tid, set()).add(p)
                count[mid] += 1

        # 3. Balance: move one partition at a time from a member with at least two more
        #    partitions than an eligible receiver, receivers with fewest first, donors with
        #    most first.
        while True:
            moved = False
            receivers = sorted((m for m in member_ids if subs[m]), key=lambda m: (count[m], m))
            donors = sorted(member_ids, key=lambda m: (-count[m], m))
            for r in receivers:
                for d in donors:
                    if count[d] < count[r] + 2:
                        break
                    candidates = [t for t in result[d] if t in subs[r]]
                    if not candidates:
                        continue
                    # Spread topics: prefer the topic the receiver holds least of.
                    tid = min(candidates, key=lambda t: (len(result[r].get(t, ())), order[t]))
                    p = max(result[d][tid])
                    result[d][tid].discard(p)
                    if not result[d][tid]:
                        del result[d][tid]
                    result[r].setdefault(tid, set()).add(p)
                    count[d] -= 1
                    count[r] += 1
                    moved = True
                    break
                if moved:
                    break
            if not moved:
                return result


class RangeAssignor:
    """Kafka's server-side ``range`` assignor: per-topic ranges in member-id order, sticky."""

    name = "range"

    def assign(
        self, members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]
    ) -> Assignment:
        subs = _subscribed_topic_ids(members, topics)
        order = _topic_order(topics)
        member_ids = sorted(members)
        result: Assignment = {mid: {} for mid in member_ids}
        subscribed = sorted({t for s in subs.values() for t in s}, key=lambda t: order[t])
        for tid in subscribed:
            n = topics[tid][1]
            topic_members = [m for m in member_ids if tid in subs[m]]
            quota, extra = divmod(n, len(topic_members))
            taken: set[int] = set()
            unfilled: list[tuple[str, int]] = []
            for mid in topic_members:
                current = sorted(
                    p for p in members[mid][1].get(tid, ()) if 0 <= p < n and p not in taken
                )
                if len(current) > quota and extra > 0:
                    keep = current[: quota + 1]
                    extra -= 1
                else:
                    keep = current[:quota]
                    unfilled.append((mid, quota - len(keep)))
                if keep:
                    taken.update(keep)
                    result[mid][tid] = set(keep)
            free = [p for p in range(n) if p not in taken]
            start = 0
            for mid, remaining in unfilled:
                if extra > 0:
                    remaining += 1
                    extra -= 1
                if remaining > 0:
                    result[mid].setdefault(tid, set()).update(free[start : start + remaining])
                    start += remaining
        return result


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}


def get_assignor(name: str) -> Assignor | None:
    """The assignor called ``name``, or ``None`` if there is no such assignor."""
    return ASSIGNORS.get(name)
