"""Share groups (KIP-932): membership and assignment (ShareGroupHeartbeat, API 76).

:class:`ShareGroups` owns every share group of this coordinator: members, group/member epochs,
the subscription metadata of the subscribed topics and the target assignment computed by the
``simple`` assignor. Which *records* a member holds is not decided here: that is the
share-partition leader's business (``snakka.share``); this core only says which members may
fetch from which partitions, and tells the share side (through :meth:`drain_events`) when
partitions enter a group's assignment, when a member goes away and when a group is deleted.

It is a sans-I/O core following :mod:`snakka.groups.types`: time comes from the injected clock,
timers are reported through ``next_deadline``/``on_timer``, persistence through
``drain_records``/``replay``/``loaded``. A heartbeat is always answered at once.

Protocol (Kafka 4.1+, ShareGroupHeartbeat v1). The client generates its member id (a UUID
string; an empty one is INVALID_REQUEST). Epoch 0 joins, -1 leaves; any other epoch must be
the member's current epoch or its previous one (the response carrying the new epoch may have
been lost), else FENCED_MEMBER_EPOCH; an unknown member is UNKNOWN_MEMBER_ID and a non-joining
heartbeat for an unknown group GROUP_ID_NOT_FOUND. ``SubscribedTopicNames`` null means
unchanged. A known member that sends epoch 0 again is accepted as a rejoin and gets its current
state back (Kafka fences such a rejoin unless its previous epoch is 0, which makes a client
that lost its epoch wait for its session to expire; snakka follows the consumer-group rule of
KAFKA-19233 instead).

Epochs. The *group epoch* is bumped whenever membership, a member's subscription or the
metadata of subscribed topics changes; the target assignment is recomputed at once, so the
*assignment epoch* always equals the group epoch. Share groups have no revocation handshake
(records are never owned exclusively by a member), so a member reconciles on its next
heartbeat: its assignment becomes its target and its epoch the assignment epoch. The response
carries the assignment when the member (re)joined or its assignment changed, otherwise null.

The simple assignor (Kafka's ``SimpleAssignor`` since 4.1, our own implementation of its
rules). With P partitions and M members every partition is shared by ``ceil(M / P)`` members
and the ``ceil(M / P) * P`` (partition, member) slots are spread so that members' counts
differ by at most one: many partitions → each member gets a disjoint slice; many members →
each partition is fetched by several members. Balance first, then stickiness: a member keeps
what it had as far as the balance allows. When members subscribe to different topic sets each
topic is spread over its own subscribers, preferring the least-loaded members.

States (Kafka's ShareGroupState): Empty (no members) and Stable (a deleted group is gone: it
is not listed, and describing it answers GROUP_ID_NOT_FOUND).

Records: ``("share", group)`` holds the group and assignment epochs and the subscription
metadata; ``("share_member", group, member_id)`` one member's subscription, epochs, current
and target assignment. Removal writes tombstones. After ``replay``/``loaded`` session timers
restart from the load time and topic changes made while the coordinator was away bump the
epoch.

Bounds: ``group.share.max.size`` members per group (GROUP_MAX_SIZE_REACHED beyond it); one
heap entry per member for session timers.

Out of scope: authorization; rack-aware assignment (the rack id is stored and described only);
telling the share side when partitions *leave* a group's assignment (Kafka deletes the
share-partition state of topics no group member subscribes to any more; here that state stays
until the group is deleted, and a re-subscription continues from it).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# The response shape, wire/record encodings of assignments and the rejection carrier are the
# KIP-848 core's too (groups.membership): the two heartbeat APIs answer alike.
from snakka.groups.membership import (
    LEAVE_GROUP_MEMBER_EPOCH,
    GroupRejected,
    Partitions,
    TopicPartitions,
    decode_partitions,
    encode_partitions,
    partitions_to_wire,
)
from snakka.groups.membership import HeartbeatResult as ShareHeartbeatResult
from snakka.groups.types import Clock, GroupConfig, GroupRecord, ShareGroupState
from snakka.protocol.errors import ErrorCode

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "SHARE_PROTOCOL_TYPE",
    "ShareGroupDescription",
    "ShareGroups",
    "ShareHeartbeatResult",
    "ShareMemberDescription",
    "simple_assign",
]

log = logging.getLogger(__name__)

#: The protocol type ListGroups reports for share groups.
SHARE_PROTOCOL_TYPE = "share"
#: The only assignor (Kafka's built-in share assignor name).
SIMPLE_ASSIGNOR = "simple"

@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    assignment: TopicPartitions


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    """One group of a ShareGroupDescribe response; topics that no longer exist are left out."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: list[ShareMemberDescription]


# Events for the share-partition side (ShareGroupListener), drained by the shell.
@dataclass(frozen=True, slots=True)
class PartitionsAssigned:
    group_id: str
    partitions: list[tuple[uuid.UUID, int]]


@dataclass(frozen=True, slots=True)
class MemberLeft:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class GroupDeleted:
    group_id: str


ShareEvent = PartitionsAssigned | MemberLeft | GroupDeleted


@dataclass(slots=True, eq=False)
class _Member:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Partitions = field(default_factory=dict)
    # Soft state, rebuilt at load.
    session_deadline: int | None = None
    queued: int | None = None  # deadline of this member's earliest heap entry
    persisted: dict[str, Any] | None = None


@dataclass(slots=True, eq=False)
class _Group:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, _Member] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    # topic name -> (topic id, partitions) of the existing topics the group subscribes to
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    # Partitions already announced to the share side (PartitionsAssigned); derived state.
    announced: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    persisted: dict[str, Any] | None = None
    dirty: set[str] = field(default_factory=set)

    @property
    def state(self) -> str:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY


def _flat(parts: Partitions) -> set[tuple[uuid.UUID, int]]:
    return {(tid, p) for tid, ps in parts.items() for p in ps}


def _group_by_topic(pairs: Iterable[tuple[uuid.UUID, int]]) -> Partitions:
    out: dict[uuid.UUID, set[int]] = {}
    for tid, p in pairs:
        out.setdefault(tid, set()).add(p)
    return {tid: frozenset(ps) for tid, ps in out.items()}


# -- the simple assignor --------------------------------------------------------------------


def _spread(
    members: list[str],
    partitions: list[tuple[uuid.UUID, int]],
    current: dict[str, set[tuple[uuid.UUID, int]]],
    load: dict[str, int],
    out: dict[str, set[tuple[uuid.UUID, int]]],
    cap: int | None = None,
) -> None:
    """Spread ``partitions`` over ``members`` (all subscribed to all of them): each partition
    gets ``ceil(M / P)`` members. ``current`` assignments are kept where the balance allows.

    Without ``cap`` (a homogeneous group) members' counts differ by at most one. With ``cap``
    (one topic of a heterogeneous group) ``load`` — what members got for other topics — is
    balanced instead: a member keeps its current partitions while its total stays within
    ``cap``, and every other slot goes to the least-loaded subscriber. ``load`` is updated."""
    if not members or not partitions:
        return
    n_members, n_parts = len(members), len(partitions)
    sharing = -(-n_members // n_parts)
    # Partitions are handled as their index in ``partitions`` (hashing ints is much cheaper
    # than hashing (UUID, int) tuples, which matters with thousands of partitions).
    index = {tp: i for i, tp in enumerate(partitions)}
    kept = {m: sorted(i for tp in current.get(m, ()) if (i := index.get(tp)) is not None)
            for m in members}
    if cap is None:
        base, extra = divmod(sharing * n_parts, n_members)
        # The +1 quotas go to the members that already hold the most (stickiness), then by
        # member id (determinism).
        order = sorted(members, key=lambda m: (-len(kept[m]), m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    else:
        quota = {m: max(0, cap - load.get(m, 0)) for m in members}
    holders: list[set[str]] = [set() for _ in range(n_parts)]
    given: dict[str, list[int]] = {m: [] for m in members}
    for m in sorted(members):
        for i in kept[m]:
            if len(given[m]) < quota[m] and len(holders[i]) < sharing:
                given[m].append(i)
                holders[i].add(m)
    # Fill: every partition up to the desired sharing, least-loaded member with room first
    # (with a cap, everyone has room: the cap only limits what is kept).
    heap = [(len(given[m]) + load.get(m, 0), m) for m in members
            if cap is not None or len(given[m]) < quota[m]]
    heapq.heapify(heap)
    for i in range(n_parts):
        held = holders[i]
        skipped = []
        while len(held) < sharing and heap:
            count, m = heapq.heappop(heap)
            if m in held:
                skipped.append((count, m))
                continue
            given[m].append(i)
            held.add(m)
            if cap is not None or len(given[m]) < quota[m]:
                heapq.heappush(heap, (count + 1, m))
        for item in skipped:
            heapq.heappush(heap, item)
        if not held:
            # Guard: no partition is ever left without a member.
            m = min(members, key=lambda x: (len(given[x]) + load.get(x, 0), x))
            given[m].append(i)
            held.add(m)
    for m in members:
        out.setdefault(m, set()).update(partitions[i] for i in given[m])
        load[m] = load.get(m, 0) + len(given[m])


def simple_assign(
    subscriptions: dict[str, set[uuid.UUID]],
    topics: dict[uuid.UUID, int],
    current: dict[str, Partitions],
) -> dict[str, Partitions]:
    """The target assignment of a share group.

    ``subscriptions``: member id → ids of the existing topics it subscribes to; ``topics``:
    topic id → partition count; ``current``: the previous target (for stickiness). Every
    partition of a subscribed topic is assigned to at least one of its subscribers."""
    members = sorted(subscriptions)
    if not members:
        return {}
    out: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    cur = {m: _flat(current.get(m, {})) for m in members}
    load: dict[str, int] = {}
    subscription_sets = {frozenset(s) for s in subscriptions.values()}
    if len(subscription_sets) == 1:
        tids = sorted(next(iter(subscription_sets)), key=str)
        parts = [(tid, p) for tid in tids for p in range(topics.get(tid, 0))]
        _spread(members, parts, cur, load, out)
    else:
        all_tids = sorted({t for s in subscriptions.values() for t in s}, key=str)
        subscribers = {t: [m for m in members if t in subscriptions[m]] for t in all_tids}
        slots = sum(-(-len(subscribers[t]) // n) * n
                    for t in all_tids if (n := topics.get(t, 0)) > 0)
        cap = -(-slots // len(members))
        # Larger topics first, so that the small ones even out the members' loads.
        for tid in sorted(all_tids, key=lambda t: (-topics.get(t, 0), str(t))):
            parts = [(tid, p) for p in range(topics.get(tid, 0))]
            _spread(subscribers[tid], parts, cur, load, out, cap)
    return {m: _group_by_topic(out[m]) for m in members}


# -- the core -------------------------------------------------------------------------------


class ShareGroups:
    """All share groups of this coordinator (sans-I/O).

    ``topics()`` returns name → (topic id, partitions) of the existing non-internal topics.
    ``session_timeout_ms(group)`` / ``heartbeat_interval_ms(group)`` give a group's effective
    values (group config ``share.session.timeout.ms`` / ``share.heartbeat.interval.ms`` over
    the broker's ``group.share.*``); by default the broker values of ``config``."""

    def __init__(
        self,
        config: GroupConfig,
        clock: Clock,
        topics: Callable[[], dict[str, tuple[uuid.UUID, int]]],
        *,
        session_timeout_ms: Callable[[str], int] | None = None,
        heartbeat_interval_ms: Callable[[str], int] | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._topics = topics
        self._session_timeout_ms = session_timeout_ms or (
            lambda _g: config.group_share_session_timeout_ms)
        self._heartbeat_interval_ms = heartbeat_interval_ms or (
            lambda _g: config.group_share_heartbeat_interval_ms)
        self._groups: dict[str, _Group] = {}
        self._records: list[GroupRecord] = []
        self._events: list[ShareEvent] = []
        self._timers: list[tuple[int, int, str, str]] = []  # (deadline, seq, group, member)
        self._seq = itertools.count()

    # -- the API -------------------------------------------------------------------------------

    def heartbeat(
        self,
        *,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed_topic_names: list[str] | None,
        client_id: str = "",
        client_host: str = "",
    ) -> ShareHeartbeatResult:
        """Handle one ShareGroupHeartbeat request (join, heartbeat or leave)."""
        try:
            self._validate(group_id, member_id, member_epoch, rack_id, subscribed_topic_names)
            if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(group_id, member_id)
            return self._heartbeat(group_id, member_id, member_epoch, rack_id,
                                   subscribed_topic_names, client_id, client_host)
        except GroupRejected as e:
            return ShareHeartbeatResult(error_code=e.code, error_message=e.message)

    def describe(self, group_id: str) -> ShareGroupDescription | None:
        group = self._groups.get(group_id)
        if group is None:
            return None
        existing = {tid for tid, _n in self._topics().values()}
        members = [
            ShareMemberDescription(
                member_id=m.member_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                assignment=[(t, ps) for t, ps in partitions_to_wire(m.assigned) if t in existing],
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ]
        return ShareGroupDescription(
            group_id=group_id,
            state=group.state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=SIMPLE_ASSIGNOR,
            members=members,
        )

    def list_groups(self) -> list[tuple[str, str]]:
        """``(group_id, state)`` of every share group, sorted by id."""
        return [(gid, self._groups[gid].state) for gid in sorted(self._groups)]

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def is_empty(self, group_id: str) -> bool:
        """True if the group has no members (an unknown group is empty)."""
        group = self._groups.get(group_id)
        return group is None or not group.members

    def members(self, group_id: str) -> set[str]:
        group = self._groups.get(group_id)
        return set(group.members) if group is not None else set()

    def assignment(self, group_id: str, member_id: str) -> set[tuple[uuid.UUID, int]] | None:
        """The partitions the member was last given, or ``None`` if it is not a member."""
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        return None if member is None else _flat(member.assigned)

    def assigned_partitions(self, group_id: str) -> set[tuple[uuid.UUID, int]]:
        """Every partition in the group's target assignment."""
        group = self._groups.get(group_id)
        out: set[tuple[uuid.UUID, int]] = set()
        for parts in (group.target.values() if group is not None else ()):
            out |= _flat(parts)
        return out

    def delete(self, group_id: str) -> int:
        """DeleteGroups: ``GROUP_ID_NOT_FOUND``, ``NON_EMPTY_GROUP`` or ``NONE``."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self._groups[group_id]
        self._records.append(GroupRecord(("share", group_id), None))
        self._events.append(GroupDeleted(group_id))
        log.info("[GroupId %s] share group deleted", group_id)
        return ErrorCode.NONE

    def on_metadata_change(self) -> None:
        """Topics were created/deleted or gained partitions: every group whose subscribed
        topics' metadata changed bumps its epoch and gets a new target assignment."""
        topics = self._topics()
        for group in list(self._groups.values()):
            if self._refresh_subscriptions(group, topics):
                log.info("[GroupId %s] subscribed topic metadata changed", group.group_id)
                self._bump(group)
                self._flush(group)

    def drain_events(self) -> list[ShareEvent]:
        out, self._events = self._events, []
        return out

    # -- timers --------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        while self._timers:
            deadline, _seq, gid, mid = self._timers[0]
            group = self._groups.get(gid)
            member = group.members.get(mid) if group is not None else None
            if member is None or member.queued != deadline:
                heapq.heappop(self._timers)  # stale wake-up
                continue
            if member.session_deadline is None:
                heapq.heappop(self._timers)
                member.queued = None
                continue
            if member.session_deadline != deadline:  # moved later: requeue exactly
                heapq.heappop(self._timers)
                member.queued = None
                self._arm(gid, member)
                continue
            return deadline
        return None

    def on_timer(self, now_ms: int) -> None:
        """Expire the sessions due at ``now_ms``."""
        while True:
            deadline = self.next_deadline()
            if deadline is None or deadline > now_ms:
                return
            _d, _seq, gid, mid = heapq.heappop(self._timers)
            group = self._groups[gid]
            member = group.members[mid]
            member.queued = None
            log.info("[GroupId %s] share member %s fenced: session expired", gid, mid)
            self._remove_member(group, member)
            self._flush(group)

    # -- persistence ---------------------------------------------------------------------------

    def drain_records(self) -> list[GroupRecord]:
        out, self._records = self._records, []
        return out

    def replay(self, record: GroupRecord) -> None:
        """Apply one stored record; records of other kinds are ignored."""
        kind = record.key[0]
        if kind == "share":
            gid = record.key[1]
            if record.value is None:
                self._groups.pop(gid, None)
                return
            group = self._groups.setdefault(gid, _Group(gid))
            v = record.value
            group.group_epoch = v["group_epoch"]
            group.assignment_epoch = v["assignment_epoch"]
            group.subscription_metadata = {
                name: (uuid.UUID(tid), n) for name, (tid, n) in v["subscription_metadata"].items()
            }
            group.persisted = v
        elif kind == "share_member":
            gid, mid = record.key[1], record.key[2]
            if record.value is None:
                known = self._groups.get(gid)
                if known is not None:
                    known.members.pop(mid, None)
                    known.target.pop(mid, None)
                return
            group = self._groups.setdefault(gid, _Group(gid))
            v = record.value
            group.members[mid] = _Member(
                member_id=mid,
                rack_id=v["rack_id"],
                client_id=v["client_id"],
                client_host=v["client_host"],
                subscribed_topic_names=tuple(v["subscribed_topic_names"]),
                member_epoch=v["member_epoch"],
                previous_member_epoch=v["previous_member_epoch"],
                assigned=decode_partitions(v["assigned"]),
                persisted=v,
            )
            group.target[mid] = decode_partitions(v["target"])

    def loaded(self) -> None:
        """All records replayed: restart session timers from now and catch up with topic
        changes made while the coordinator was away."""
        now = self._clock()
        self._timers.clear()
        topics = self._topics()
        for group in list(self._groups.values()):
            for m in group.members.values():
                m.queued = None
                m.session_deadline = now + self._session_timeout_ms(group.group_id)
                self._arm(group.group_id, m)
            group.announced = set()
            for parts in group.target.values():
                group.announced |= _flat(parts)
            if self._refresh_subscriptions(group, topics) or (
                group.group_epoch > group.assignment_epoch
            ):
                self._bump(group)
            self._flush(group)
        self._events.clear()  # the shell announces the loaded state when listeners register

    # -- request handling ----------------------------------------------------------------------

    @staticmethod
    def _validate(group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed_topic_names: list[str] | None) -> None:
        """Kafka's ``throwIfShareGroupHeartbeatRequestIsInvalid`` (same order, messages)."""
        bad = ErrorCode.INVALID_REQUEST
        if not member_id.strip():
            raise GroupRejected(bad, "MemberId can't be empty.")
        if not group_id.strip():
            raise GroupRejected(bad, "GroupId can't be empty.")
        if rack_id is not None and not rack_id.strip():
            raise GroupRejected(bad, "RackId can't be empty.")
        if member_epoch == 0:
            if not subscribed_topic_names:
                raise GroupRejected(bad, "SubscribedTopicNames must be set in first request.")
        elif member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
            raise GroupRejected(bad, "MemberEpoch is invalid.")

    def _leave(self, group_id: str, member_id: str) -> ShareHeartbeatResult:
        group = self._groups.get(group_id)
        if group is None:
            raise GroupRejected(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
        member = group.members.get(member_id)
        if member is None:
            raise GroupRejected(ErrorCode.UNKNOWN_MEMBER_ID,
                          f"Member {member_id} is not a member of group {group_id}.")
        log.info("[GroupId %s] member %s left the share group", group_id, member_id)
        self._remove_member(group, member)
        self._flush(group)
        return ShareHeartbeatResult(ErrorCode.NONE, None, member_id, LEAVE_GROUP_MEMBER_EPOCH,
                                    0, None)

    def _heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                   subscribed_topic_names: list[str] | None, client_id: str,
                   client_host: str) -> ShareHeartbeatResult:
        joining = member_epoch == 0
        group = self._groups.get(group_id)
        if group is None and not joining:
            raise GroupRejected(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
        members = group.members if group is not None else {}
        max_size = self._config.group_share_max_size
        if len(members) >= max_size and member_id not in members:
            raise GroupRejected(ErrorCode.GROUP_MAX_SIZE_REACHED,
                          f"The share group has reached its maximum capacity of {max_size} "
                          f"members.")
        member = members.get(member_id)
        if member is None and not joining:
            raise GroupRejected(ErrorCode.UNKNOWN_MEMBER_ID,
                          f"Member {member_id} is not a member of group {group_id}.")
        if member is not None and not joining:
            self._check_epoch(member, member_epoch)

        # Accepted from here on.
        now = self._clock()
        if group is None:
            group = self._groups[group_id] = _Group(group_id)
            bump = True
        else:
            bump = False
        if member is None:
            log.info("[GroupId %s] member %s joins the share group", group_id, member_id)
            member = group.members[member_id] = _Member(member_id=member_id)
            group.target.setdefault(member_id, {})
            bump = True
        old_assigned = member.assigned
        if rack_id is not None and rack_id != member.rack_id:
            member.rack_id = rack_id
            group.dirty.add(member_id)
        if subscribed_topic_names is not None:
            names = tuple(sorted(set(subscribed_topic_names)))
            if names != member.subscribed_topic_names:
                log.info("[GroupId %s] member %s subscribes to %s", group_id, member_id,
                         list(names))
                member.subscribed_topic_names = names
                bump = True
        if (client_id, client_host) != (member.client_id, member.client_host):
            member.client_id = client_id
            member.client_host = client_host
            group.dirty.add(member_id)
        if bump:
            self._refresh_subscriptions(group, self._topics())
            self._bump(group)
        self._reconcile(group, member)
        member.session_deadline = now + self._session_timeout_ms(group_id)
        self._arm(group_id, member)
        self._flush(group)
        return ShareHeartbeatResult(
            error_code=ErrorCode.NONE,
            member_id=member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self._heartbeat_interval_ms(group_id),
            assignment=partitions_to_wire(member.assigned)
            if joining or member.assigned != old_assigned else None,
        )

    @staticmethod
    def _check_epoch(member: _Member, epoch: int) -> None:
        """Kafka's ``throwIfShareGroupMemberEpochIsInvalid``."""
        if epoch > member.member_epoch:
            raise GroupRejected(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The share group member has a greater member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                f"abandon all its partitions and rejoin.")
        if epoch < member.member_epoch and epoch != member.previous_member_epoch:
            raise GroupRejected(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The share group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}), and it does not "
                f"match the previous member epoch ({member.previous_member_epoch}). The "
                f"member must abandon all its partitions and rejoin.")

    # -- group state changes -------------------------------------------------------------------

    def _reconcile(self, group: _Group, member: _Member) -> None:
        """No revocation step for share groups: adopt the target and the assignment epoch."""
        if member.member_epoch == group.assignment_epoch:
            return
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = group.assignment_epoch
        member.assigned = dict(group.target.get(member.member_id, {}))
        group.dirty.add(member.member_id)

    def _remove_member(self, group: _Group, member: _Member) -> None:
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        member.session_deadline = None
        self._records.append(GroupRecord(("share_member", group.group_id, member.member_id),
                                         None))
        self._events.append(MemberLeft(group.group_id, member.member_id))
        self._refresh_subscriptions(group, self._topics())
        self._bump(group)

    def _refresh_subscriptions(self, group: _Group,
                               topics: dict[str, tuple[uuid.UUID, int]]) -> bool:
        metadata = {n: topics[n] for m in group.members.values()
                    for n in m.subscribed_topic_names if n in topics}
        changed = metadata != group.subscription_metadata
        group.subscription_metadata = metadata
        return changed

    def _bump(self, group: _Group) -> None:
        """Bump the group epoch and compute the new target assignment at once."""
        group.group_epoch += 1
        meta = group.subscription_metadata
        subscriptions = {
            mid: {meta[n][0] for n in m.subscribed_topic_names if n in meta}
            for mid, m in group.members.items()
        }
        topics = {tid: count for tid, count in meta.values()}
        group.target = simple_assign(subscriptions, topics, group.target)
        group.assignment_epoch = group.group_epoch
        group.dirty.update(group.members)
        assigned = set()
        for parts in group.target.values():
            assigned |= _flat(parts)
        new = assigned - group.announced
        # Partitions that left the assignment are forgotten, so that a later return (topic
        # re-subscribed) is announced again; the share side's initialisation is idempotent.
        group.announced = assigned
        if new:
            self._events.append(PartitionsAssigned(
                group.group_id, sorted(new, key=lambda tp: (str(tp[0]), tp[1]))))
        log.info("[GroupId %s] share group epoch %d: %d member(s), %d partition(s) assigned",
                 group.group_id, group.group_epoch, len(group.members), len(assigned))

    def _arm(self, gid: str, member: _Member) -> None:
        deadline = member.session_deadline
        if deadline is None:
            return
        if member.queued is None or deadline < member.queued:
            member.queued = deadline
            heapq.heappush(self._timers, (deadline, next(self._seq), gid, member.member_id))

    def _flush(self, group: _Group) -> None:
        """Emit records for whatever changed in ``group`` since its last records (a steady
        heartbeat changes nothing and writes nothing)."""
        if group.group_id not in self._groups:
            return
        if group.assignment_epoch == (group.persisted or {}).get("assignment_epoch") and \
                not group.dirty:
            return
        value = {
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "subscription_metadata": {
                n: [str(tid), count]
                for n, (tid, count) in sorted(group.subscription_metadata.items())
            },
        }
        if value != group.persisted:
            group.persisted = value
            self._records.append(GroupRecord(("share", group.group_id), value))
        for mid in sorted(group.dirty):
            m = group.members.get(mid)
            if m is None:
                continue
            mv = {
                "rack_id": m.rack_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "member_epoch": m.member_epoch,
                "previous_member_epoch": m.previous_member_epoch,
                "assigned": encode_partitions(m.assigned),
                "target": encode_partitions(group.target.get(mid, {})),
            }
            if mv != m.persisted:
                m.persisted = mv
                self._records.append(GroupRecord(("share_member", group.group_id, mid), mv))
        group.dirty.clear()
