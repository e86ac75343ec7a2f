"""Classic consumer groups: the JoinGroup/SyncGroup/Heartbeat/LeaveGroup rebalance protocol.

Owns every classic group of one coordinator: membership, generations, leader election, protocol
selection, static membership (KIP-345), server-assigned member ids (KIP-394), the leader's
``skip_assignment`` (KIP-814), session / rebalance / sync timers, and the ``("classic", group)``
records that let a group survive a restart. It follows the sans-I/O contract of
:mod:`snakka.groups.types` (deferred replies by token, timers by ``next_deadline``/``on_timer``,
persistence by records). Offsets, KIP-848 groups and the wire format are other modules' business;
:meth:`ClassicGroups.validate_offset_commit` only answers "may this member commit now?".

The state machine (Kafka's ``ClassicGroupState``)::

      Empty ──a member joins──► PreparingRebalance ──join phase──► CompletingRebalance
        ▲                          │   ▲              completes          │
        └──join phase completes────┘   │                               leader's SyncGroup
           with no members             │                                 ▼
                                       └── member joins / leaves / ── Stable (and Completing-
                                           expires / changes metadata;    Rebalance likewise)
                                           leader rejoins

      Dead: a deleted group is forgotten (DescribeGroups answers "Dead" for unknown ids).

* **PreparingRebalance** (the join phase): every member must send JoinGroup. The phase completes
  when all known members are waiting and no KIP-394 pending member is outstanding, or when the
  rebalance timeout (max of the members' ``rebalance_timeout_ms``) fires; dynamic members that
  did not rejoin are then removed (static ones stay: their session timeout governs them). The
  first rebalance of an Empty group waits ``group.initial.rebalance.delay.ms`` instead, extended
  by the same delay while new members keep arriving, bounded by the rebalance timeout (Kafka's
  InitialDelayedJoin); a delay of 0 completes it at once.
* Completing the join phase bumps the generation, selects the protocol (most votes among the
  protocols every member supports), answers every waiting JoinGroup (the leader also gets every
  member's metadata) and enters **CompletingRebalance**, where members send SyncGroup. Followers
  wait until the leader's SyncGroup brings the assignments; then everyone is answered, the group
  is **Stable** and a record is emitted. Members that do not sync within the rebalance timeout
  are removed and the group rebalances again (Kafka's pending-sync timer).
* Sessions: every valid heartbeat, JoinGroup and SyncGroup pushes a member's session deadline to
  ``now + session_timeout_ms``; at expiry the member is removed and the group rebalances (or
  becomes Empty). Members waiting for a JoinGroup/SyncGroup answer are not expired (they cannot
  heartbeat meanwhile), except brand-new members, which get :data:`NEW_MEMBER_JOIN_TIMEOUT_MS`.

Ordering: the shell must persist the records a call emitted before it sends the replies that call
produced (a SyncGroup answered before its Stable record is written could be lost in a crash).

Deliberate differences from Apache Kafka are marked ``DEVIATION`` in the code.
"""

from __future__ import annotations

import base64
import heapq
import itertools
import logging
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar, cast

from snakka.groups.migration import MigratingGroup, MigratingMember
from snakka.groups.types import (
    PENDING,
    ClassicState,
    Clock,
    GroupConfig,
    GroupRecord,
    _Pending,
)
from snakka.limits import MAX_PENDING_MEMBERS_PER_GROUP, NEW_MEMBER_JOIN_TIMEOUT_MS
from snakka.protocol.errors import ErrorCode

__all__ = [
    "MAX_PENDING_MEMBERS_PER_GROUP",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "ClassicGroups",
    "GroupDescription",
    "JoinMember",
    "JoinResult",
    "MemberDescription",
    "SyncResult",
]

log = logging.getLogger("snakka.groups.classic")

#: Version of the ``("classic", group)`` record values this module writes.
RECORD_VERSION = 0

UNKNOWN_GENERATION_ID = -1
_NONE = ErrorCode.NONE

_EMPTY = ClassicState.EMPTY
_PREPARING = ClassicState.PREPARING_REBALANCE
_COMPLETING = ClassicState.COMPLETING_REBALANCE
_STABLE = ClassicState.STABLE


# -- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinMember:
    """One member as the leader sees it in its JoinGroup answer."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """The JoinGroup answer. ``members`` is filled for the leader only."""

    error_code: int
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: list[JoinMember]
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    """The SyncGroup answer: this member's assignment bytes (empty on error)."""

    error_code: int
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # subscription for the chosen protocol; empty unless the group is Stable
    assignment: bytes  # empty unless the group is Stable


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """DescribeGroups' view. As in Kafka, ``protocol`` and the members' metadata/assignment are
    only given for a Stable group (``""`` / ``b""`` otherwise)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]


_R = TypeVar("_R", JoinResult, SyncResult)


def _join_error(code: int, member_id: str) -> JoinResult:
    return JoinResult(code, UNKNOWN_GENERATION_ID, None, None, "", member_id, [])


def _sync_error(code: int) -> SyncResult:
    return SyncResult(code, None, None, b"")


def _default_member_id(prefix: str | None) -> str:
    # Kafka: "<client id or group instance id>-<random UUID>".
    return f"{prefix or ''}-{uuid.uuid4()}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unique_names(protocols: list[tuple[str, bytes]]) -> list[str]:
    # A member supports a protocol once however often it lists it (Kafka keys them by name).
    return list(dict.fromkeys(name for name, _ in protocols))


def _metadata_of(protocols: list[tuple[str, bytes]], name: str | None) -> bytes:
    for n, meta in protocols:
        if n == name:
            return meta
    return b""


# -- internal state -----------------------------------------------------------------------------


class _Member:
    __slots__ = (
        "member_id", "instance_id", "client_id", "client_host", "rebalance_timeout_ms",
        "session_timeout_ms", "protocol_type", "protocols", "assignment", "is_new", "deadline",
    )  # fmt: skip

    def __init__(self, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]], assignment: bytes = b"",
                 is_new: bool = False) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols  # in the member's order of preference
        self.assignment = assignment
        self.is_new = is_new  # added by a JoinGroup whose join phase has not completed yet
        self.deadline: int | None = None  # session expiry; None until loaded() after a replay

    def names(self) -> list[str]:
        return _unique_names(self.protocols)

    def metadata(self, protocol: str | None) -> bytes:
        return _metadata_of(self.protocols, protocol)

    def vote(self, candidates: set[str]) -> str | None:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        return None


class _Group:
    __slots__ = (
        "group_id", "state", "previous_state", "state_timestamp", "generation_id",
        "protocol_type", "protocol_name", "leader_id", "members", "static_members",
        "pending_members", "pending_sync", "supported", "join_waiters", "sync_waiters",
        "new_member_added", "initial_delay", "join_deadline", "sync_deadline", "persisted",
    )  # fmt: skip

    def __init__(self, group_id: str, now: int) -> None:
        self.group_id = group_id
        self.state: str = _EMPTY
        self.previous_state: str = ClassicState.DEAD
        self.state_timestamp = now
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, _Member] = {}  # insertion order = join order (leader fallback)
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_members: dict[str, int] = {}  # KIP-394 member id -> expiry deadline
        self.pending_sync: set[str] = set()  # members yet to send SyncGroup this generation
        self.supported: dict[str, int] = {}  # protocol name -> number of members supporting it
        self.join_waiters: dict[str, Hashable] = {}  # member id -> token of its JoinGroup
        self.sync_waiters: dict[str, Hashable] = {}  # member id -> token of its SyncGroup
        self.new_member_added = False  # a member arrived during the initial delay
        self.initial_delay: tuple[int, int] | None = None  # (delay, remaining) while it runs
        self.join_deadline: int | None = None
        self.sync_deadline: int | None = None
        self.persisted = False  # a record of this group exists (so it must not be forgotten)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return len(self.join_waiters) == len(self.members) and not self.pending_members


@dataclass(frozen=True, slots=True)
class _JoinRequest:
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool
    supports_skip_assignment: bool


# -- the core -----------------------------------------------------------------------------------


class ClassicGroups:
    """All classic groups of one coordinator (sans-I/O; see the module docstring)."""

    def __init__(self, config: GroupConfig, clock: Clock, *,
                 new_member_id: Callable[[str | None], str] | None = None) -> None:
        self._config = config
        self._clock = clock
        # Called with the group instance id for static members, else the client id (Kafka).
        self._new_member_id = new_member_id or _default_member_id
        self._groups: dict[str, _Group] = {}
        self._waiting: dict[Hashable, tuple[str, str, str]] = {}  # token -> (group, member, kind)
        self._completions: list[tuple[Hashable, JoinResult | SyncResult]] = []
        self._records: list[GroupRecord] = []
        # Timers: a lazy min-heap of (deadline, seq, key). An entry is live only while the state
        # it names still holds exactly that deadline (see _live_deadline), so re-arming is a push
        # and cancelling is free; stale entries are dropped when they surface or on compaction.
        self._heap: list[tuple[int, int, tuple[str, ...]]] = []
        self._seq = itertools.count()
        self._compact_at = 1024

    # -- JoinGroup ------------------------------------------------------------------------------

    def join(self, token: Hashable, *, group_id: str, member_id: str,
             group_instance_id: str | None, protocol_type: str,
             protocols: list[tuple[str, bytes]], session_timeout_ms: int,
             rebalance_timeout_ms: int, client_id: str, client_host: str, reason: str | None,
             require_known_member_id: bool,
             supports_skip_assignment: bool = False) -> JoinResult | _Pending:
        """Handle a JoinGroup. ``require_known_member_id`` is true for JoinGroup v4+ (KIP-394),
        ``supports_skip_assignment`` for v9+ (KIP-814)."""
        now = self._clock()
        if not group_id:
            return _join_error(ErrorCode.INVALID_GROUP_ID, member_id)
        cfg = self._config
        if not (cfg.group_min_session_timeout_ms <= session_timeout_ms
                <= cfg.group_max_session_timeout_ms):
            return _join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        self._check_token(token)
        req = _JoinRequest(member_id, group_instance_id, protocol_type,
                           [(name, bytes(meta)) for name, meta in protocols], session_timeout_ms,
                           rebalance_timeout_ms, client_id, client_host, require_known_member_id,
                           supports_skip_assignment)
        is_unknown = member_id == ""
        group = self._groups.get(group_id)
        if group is None:
            if not is_unknown:  # a member id for a group we do not know: let it start over
                return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            group = self._groups[group_id] = _Group(group_id, now)
        mark = len(self._completions)
        result: JoinResult | _Pending
        # DEVIATION: a known static instance coming back is not a new member (it replaces its
        # old member id), so group.max.size does not apply; Kafka would refuse it when full.
        returning_static = is_unknown and group_instance_id in group.static_members
        if not returning_static and not self._accept_joining_member(group, member_id):
            # Kafka also drops an existing member that is refused (the group shrank its limit).
            self._remove_member(group, member_id)
            result = _join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, "")
        elif is_unknown:
            result = self._join_new_member(group, token, req, now)
        else:
            result = self._join_existing_member(group, token, req, now)
        if reason:
            log.debug("group %s: JoinGroup from %r (reason: %s)", group_id, member_id, reason)
        self._maybe_complete_join_phase(group, now)
        self._maybe_forget(group)
        return self._own_result(token, mark, result)

    def _accept_joining_member(self, group: _Group, member_id: str) -> bool:
        """group.max.size, as Kafka counts it per state."""
        limit = self._config.group_max_size
        if group.state == _EMPTY:
            return True
        if group.state == _PREPARING:
            # Counting the members already waiting (not the group size, which may exceed a
            # lowered limit) lets the last members to rejoin be the ones turned away.
            return member_id in group.join_waiters or len(group.join_waiters) < limit
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(self, group: _Group, token: Hashable, req: _JoinRequest,
                         now: int) -> JoinResult | _Pending:
        if not self._supports_protocols(group, req.protocol_type, _unique_names(req.protocols)):
            return _join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        static = req.group_instance_id is not None
        new_id = self._new_member_id(req.group_instance_id if static else req.client_id)
        if new_id in group.members or new_id in group.pending_members:
            raise RuntimeError(f"member id generator returned a duplicate: {new_id!r}")
        if req.group_instance_id is not None:
            existing = group.static_members.get(req.group_instance_id)
            if existing is not None:
                return self._replace_static_member(group, existing, new_id, token, req, now)
            return self._add_member_and_rebalance(group, new_id, token, req, now)
        if req.require_known_member_id:
            # KIP-394: hand out the id and make the client come back with it, so that a client
            # whose first JoinGroup times out does not leave an orphan member behind.
            if len(group.pending_members) >= MAX_PENDING_MEMBERS_PER_GROUP:
                return _join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, "")
            deadline = now + max(1, req.session_timeout_ms)
            group.pending_members[new_id] = deadline
            self._schedule(deadline, ("pending", group.group_id, new_id))
            return _join_error(ErrorCode.MEMBER_ID_REQUIRED, new_id)
        return self._add_member_and_rebalance(group, new_id, token, req, now)

    def _join_existing_member(self, group: _Group, token: Hashable, req: _JoinRequest,
                              now: int) -> JoinResult | _Pending:
        member_id = req.member_id
        if not self._supports_protocols(group, req.protocol_type, _unique_names(req.protocols)):
            return _join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in group.pending_members and req.group_instance_id is None:
            return self._add_member_and_rebalance(group, member_id, token, req, now)
        # (A pending id sent together with an instance id is not something Kafka expects; it
        # fails validation below instead of raising as Kafka does.)
        err = self._validate_member(group, member_id, req.group_instance_id)
        if err:
            return _join_error(err, member_id)
        member = group.members[member_id]
        if group.state == _PREPARING:
            return self._update_member_and_rebalance(group, member, token, req, now)
        if group.state == _COMPLETING:
            if member.protocols == req.protocols:
                # Same metadata: most likely it lost the first answer. Repeat it.
                self._refresh_session(group, member, now)
                return self._current_generation(group, member_id,
                                                with_members=member_id == group.leader_id)
            return self._update_member_and_rebalance(group, member, token, req, now)
        if group.state == _STABLE:
            # A rejoining leader always rebalances: that is how a client asks for one when
            # something its assignment depends on changed (e.g. a topic's partition count).
            if member_id == group.leader_id or member.protocols != req.protocols:
                return self._update_member_and_rebalance(group, member, token, req, now)
            self._refresh_session(group, member, now)
            return self._current_generation(group, member_id, with_members=False)
        return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)  # Empty: no members to match

    def _current_generation(self, group: _Group, member_id: str, *,
                            with_members: bool) -> JoinResult:
        return JoinResult(_NONE, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id or "", member_id,
                          self._leader_view(group) if with_members else [])

    def _leader_view(self, group: _Group) -> list[JoinMember]:
        p = group.protocol_name
        return [JoinMember(m.member_id, m.instance_id, m.metadata(p))
                for m in group.members.values()]

    def _add_member_and_rebalance(self, group: _Group, member_id: str, token: Hashable,
                                  req: _JoinRequest, now: int) -> _Pending:
        member = _Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                         req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type,
                         req.protocols, is_new=True)
        if group.state == _PREPARING and group.previous_state == _EMPTY:
            group.new_member_added = True  # lets the initial delay be extended once more
        self._add(group, member)
        self._await_join(group, member_id, token)
        member.deadline = now + NEW_MEMBER_JOIN_TIMEOUT_MS
        self._schedule(member.deadline, ("session", group.group_id, member_id))
        self._maybe_prepare_rebalance_or_complete_join(group, now)
        return PENDING

    def _update_member_and_rebalance(self, group: _Group, member: _Member, token: Hashable,
                                     req: _JoinRequest, now: int) -> _Pending:
        self._update_member(group, member, req)
        self._await_join(group, member.member_id, token)
        self._maybe_prepare_rebalance_or_complete_join(group, now)
        return PENDING

    def _replace_static_member(self, group: _Group, old_id: str, new_id: str, token: Hashable,
                               req: _JoinRequest, now: int) -> JoinResult | _Pending:
        """KIP-345: a known group instance id joins with an unknown member id (the instance
        restarted). The new member id takes the old one's place; the old id is fenced."""
        current_leader = group.leader_id
        member = group.members[old_id]
        old_protocols = member.protocols
        # Anyone still waiting under the old id is a duplicate instance: fence it now.
        t = group.join_waiters.pop(old_id, None)
        if t is not None:
            self._complete(t, _join_error(ErrorCode.FENCED_INSTANCE_ID, old_id))
        t = group.sync_waiters.pop(old_id, None)
        if t is not None:
            self._complete(t, _sync_error(ErrorCode.FENCED_INSTANCE_ID))
        # Rename in place, keeping the join order (the leader fallback order).
        group.members = {(new_id if k == old_id else k): v for k, v in group.members.items()}
        member.member_id = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        assert req.group_instance_id is not None
        group.static_members[req.group_instance_id] = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        self._update_member(group, member, req)
        self._refresh_session(group, member, now)
        log.info("group %s: static member %s rejoined as %s (was %s)", group.group_id,
                 req.group_instance_id, new_id, old_id)
        if group.state == _STABLE:
            selected = self._select_protocol(group)
            # Kafka skips the rebalance when the selected protocol does not change.
            # DEVIATION: we also require this member's metadata for that protocol to be
            # unchanged; Kafka would hand a restarted instance with a new subscription its old
            # assignment and never assign the new topics until some other rebalance.
            if (selected == group.protocol_name
                    and _metadata_of(old_protocols, selected) == member.metadata(selected)):
                self._emit_group(group)  # persist the new member id
                if req.supports_skip_assignment:
                    # KIP-814: a leader gets the members (to keep watching metadata) but must
                    # not compute a new assignment.
                    is_leader = group.leader_id == new_id
                    return JoinResult(_NONE, group.generation_id, group.protocol_type,
                                      group.protocol_name, group.leader_id or "", new_id,
                                      self._leader_view(group) if is_leader else [],
                                      skip_assignment=is_leader)
                # Older clients are told the previous leader id, so that a restarted leader
                # believes it is a follower and does not trigger a rebalance.
                return JoinResult(_NONE, group.generation_id, group.protocol_type,
                                  group.protocol_name, current_leader or "", new_id, [])
            self._await_join(group, new_id, token)
            self._prepare_rebalance(group, now, "static member rejoined with new metadata")
            return PENDING
        if group.state == _COMPLETING:
            # The leader may already be assigning under the old member id: start over.
            self._await_join(group, new_id, token)
            self._prepare_rebalance(group, now, "static member rejoined during sync")
            return PENDING
        if group.state == _PREPARING:
            self._await_join(group, new_id, token)
            return PENDING
        raise RuntimeError(f"static member in group {group.group_id} in state {group.state}")

    # -- SyncGroup ------------------------------------------------------------------------------

    def sync(self, token: Hashable, *, group_id: str, generation_id: int, member_id: str,
             group_instance_id: str | None, protocol_type: str | None,
             protocol_name: str | None, assignments: dict[str, bytes]) -> SyncResult | _Pending:
        """Handle a SyncGroup. ``protocol_type``/``protocol_name`` are None before v5."""
        now = self._clock()
        if not group_id:
            return _sync_error(ErrorCode.INVALID_GROUP_ID)
        group = self._groups.get(group_id)
        if group is None or group.state == _EMPTY:
            return _sync_error(ErrorCode.UNKNOWN_MEMBER_ID)
        err = self._validate_member(group, member_id, group_instance_id)
        if err:
            return _sync_error(err)
        if generation_id != group.generation_id:
            return _sync_error(ErrorCode.ILLEGAL_GENERATION)
        if (_inconsistent(protocol_type, group.protocol_type)
                or _inconsistent(protocol_name, group.protocol_name)):
            return _sync_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.state == _PREPARING:
            return _sync_error(ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.members[member_id]
        if group.state == _STABLE:
            self._remove_pending_sync(group, member_id)
            self._refresh_session(group, member, now)
            return SyncResult(_NONE, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: wait for the leader's assignment.
        self._check_token(token)
        mark = len(self._completions)
        self._await_sync(group, member_id, token)
        self._remove_pending_sync(group, member_id)
        if member_id == group.leader_id:
            missing = 0
            for mid, m in group.members.items():
                a = assignments.get(mid)
                missing += a is None
                m.assignment = b"" if a is None else bytes(a)
            if missing:
                log.warning("group %s generation %d: leader gave no assignment to %d member(s)",
                            group_id, group.generation_id, missing)
            self._transition(group, _STABLE, now)
            self._emit_group(group)
            for mid, t in list(group.sync_waiters.items()):
                m = group.members[mid]
                self._complete(t, SyncResult(_NONE, group.protocol_type, group.protocol_name,
                                             m.assignment))
                self._refresh_session(group, m, now)
            group.sync_waiters.clear()
            log.info("group %s: stable at generation %d with %d member(s)", group_id,
                     group.generation_id, len(group.members))
        pending: SyncResult | _Pending = PENDING
        return self._own_result(token, mark, pending)

    # -- Heartbeat / LeaveGroup -----------------------------------------------------------------

    def heartbeat(self, *, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> int:
        """Handle a Heartbeat; returns its error code."""
        now = self._clock()
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        err = self._validate_member(group, member_id, group_instance_id)
        if err:
            return err
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        # (An Empty group has no members, so validation already answered UNKNOWN_MEMBER_ID.)
        self._refresh_session(group, group.members[member_id], now)
        # CompletingRebalance answers NONE: a member may heartbeat between its JoinGroup answer
        # and its SyncGroup.
        return ErrorCode.REBALANCE_IN_PROGRESS if group.state == _PREPARING else _NONE

    def leave(self, *, group_id: str, members: list[tuple[str, str | None, str | None]]
              ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """Handle a LeaveGroup of ``(member_id, group_instance_id, reason)`` entries (v0-2 send
        one with no instance id). Returns the top-level error and one error per entry.

        An empty member id with an instance id removes that static member (the admin path,
        ``kafka-consumer-groups --delete ... --members``)."""
        now = self._clock()
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        group = self._groups.get(group_id)
        if group is None:
            return _NONE, [(mid, iid, ErrorCode.UNKNOWN_MEMBER_ID) for mid, iid, _ in members]
        out: list[tuple[str, str | None, int]] = []
        removed = pending_removed = False
        for mid, iid, reason in members:
            err: int = _NONE
            if mid == "":
                current = group.static_members.get(iid) if iid is not None else None
                if current is None:
                    err = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    self._remove_member(group, current)
                    removed = True
            elif mid in group.pending_members:
                del group.pending_members[mid]
                pending_removed = True
            else:
                err = self._validate_member(group, mid, iid)
                if not err:
                    self._remove_member(group, mid)
                    removed = True
            if not err:
                log.info("group %s: member %s (instance %s) left (reason: %s)", group_id, mid,
                         iid, reason or "not provided")
            out.append((mid, iid, err))
        # One rebalance for the whole batch. A pending member leaving never was in the group, so
        # it only matters to a join phase waiting for it (Kafka would rebalance a Stable group).
        if removed and group.state in (_STABLE, _COMPLETING):
            self._prepare_rebalance(group, now, "members left")
        elif removed or pending_removed:
            self._maybe_complete_join_phase(group, now)
        self._maybe_forget(group)
        return _NONE, out

    # -- offsets, admin -------------------------------------------------------------------------

    def validate_offset_commit(self, *, group_id: str, member_id: str, generation_id: int,
                               group_instance_id: str | None,
                               transactional: bool = False) -> int:
        """May this committer store offsets for the group now? (Kafka's
        ``ClassicGroup.validateOffsetCommit``; ``transactional`` for TxnOffsetCommit.)

        An unknown group accepts ``generation_id < 0`` commits (standalone consumers, admin
        tools; the offsets core then holds the group) and answers ILLEGAL_GENERATION otherwise,
        as Kafka does for OffsetCommit < v9 (v9+ expects GROUP_ID_NOT_FOUND: the handler can
        tell the case apart with :meth:`has_group`)."""
        group = self._groups.get(group_id)
        if group is None:
            return _NONE if generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        if generation_id < 0 and group.state == _EMPTY:
            return _NONE
        if generation_id >= 0 or member_id or group_instance_id is not None:
            err = self._validate_member(group, member_id, group_instance_id)
            if err:
                return err
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not transactional and group.state != _EMPTY:
            # No member id and no generation (OffsetCommit v0, or a standalone consumer reusing
            # the id of a live group): only the group's members may commit.
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and group.state == _COMPLETING:
            # The member holds the new generation but not yet its assignment.
            return ErrorCode.REBALANCE_IN_PROGRESS
        return _NONE

    def describe(self, group_id: str) -> GroupDescription | None:
        group = self._groups.get(group_id)
        if group is None:
            return None
        stable = group.state == _STABLE
        protocol = group.protocol_name if stable else None
        members = [MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host,
                                     m.metadata(protocol) if stable else b"",
                                     m.assignment if stable else b"")
                   for m in group.members.values()]
        return GroupDescription(group_id, group.state, group.protocol_type or "",
                                protocol or "", members)

    def list_groups(self) -> list[tuple[str, str, str]]:
        return [(g.group_id, g.protocol_type or "", g.state) for g in self._groups.values()]

    def delete(self, group_id: str) -> int:
        """DeleteGroups: only an Empty group may go (its offsets are the shell's to delete)."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state != _EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        # An Empty group has no waiting requests; KIP-394 pending ids simply become unknown.
        del self._groups[group_id]
        self._records.append(GroupRecord(("classic", group_id), None))
        log.info("group %s: deleted", group_id)
        return _NONE

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def is_empty(self, group_id: str) -> bool:
        """True for an unknown group or one in the Empty state (no members, no rebalance)."""
        group = self._groups.get(group_id)
        return group is None or group.state == _EMPTY

    # -- online migration (KIP-848; see snakka.groups.migration) --------------------------------

    def snapshot(self, group_id: str) -> MigratingGroup | None:
        """The group as the consumer core would take it over (``None``: no such group)."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        return MigratingGroup(
            group_id, group.generation_id, group.protocol_type or "", group.protocol_name,
            group.leader_id,
            tuple(MigratingMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                                  m.rebalance_timeout_ms, m.session_timeout_ms,
                                  tuple(m.protocols), m.assignment)
                  for m in group.members.values()))

    def convert_out(self, group_id: str) -> None:
        """The group became a consumer group (Kafka's ``convertToConsumerGroup``): its waiting
        JoinGroup/SyncGroup requests are answered REBALANCE_IN_PROGRESS (the members rejoin the
        consumer group) and the group is forgotten with a tombstone."""
        group = self._groups.pop(group_id, None)
        if group is None:
            return
        for mid, t in list(group.join_waiters.items()):
            self._complete(t, _join_error(ErrorCode.REBALANCE_IN_PROGRESS, mid))
        for t in list(group.sync_waiters.values()):
            self._complete(t, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
        group.join_waiters.clear()
        group.sync_waiters.clear()
        self._records.append(GroupRecord(("classic", group_id), None))
        log.info("group %s: upgraded to a consumer group at generation %d", group_id,
                 group.generation_id)

    def adopt(self, snapshot: MigratingGroup) -> None:
        """Take over a consumer group whose members all use the classic protocol (Kafka's
        ``ClassicGroup.fromConsumerGroup`` + ``convertToClassicGroup``): generation = its group
        epoch, each member's current assignment kept, then a rebalance so that the members
        rejoin and the leader assigns."""
        now = self._clock()
        group = _Group(snapshot.group_id, now)
        group.generation_id = snapshot.generation
        group.protocol_type = snapshot.protocol_type
        for sm in snapshot.members:
            member = _Member(sm.member_id, sm.instance_id, sm.client_id, sm.client_host,
                             sm.rebalance_timeout_ms, sm.session_timeout_ms,
                             snapshot.protocol_type, list(sm.protocols), sm.assignment)
            self._add(group, member)
        group.state = _STABLE
        group.previous_state = _EMPTY
        group.protocol_name = self._select_protocol(group)
        self._groups[group.group_id] = group
        for member in group.members.values():
            self._refresh_session(group, member, now)
        self._emit_group(group)
        self._prepare_rebalance(group, now, "downgraded from a consumer group")

    # -- deferred replies -----------------------------------------------------------------------

    def cancel(self, token: Hashable) -> None:
        """The connection that sent ``token``'s request went away: treat the member as if it had
        never sent that request."""
        entry = self._waiting.pop(token, None)
        if entry is None:
            return
        group_id, member_id, kind = entry
        group = self._groups.get(group_id)
        if group is None:
            return
        now = self._clock()
        member = group.members.get(member_id)
        if kind == "join":
            if group.join_waiters.get(member_id) == token:
                del group.join_waiters[member_id]
            if member is not None and member.is_new and member.instance_id is None:
                # Nobody learned this id through a JoinGroup answer; keeping it would only make
                # the leader assign partitions to a ghost. (A new static member stays: its
                # instance will rejoin and take the place back.)
                self._remove_member(group, member_id)
            self._maybe_complete_join_phase(group, now)
            self._maybe_forget(group)
        else:
            if group.sync_waiters.get(member_id) == token:
                del group.sync_waiters[member_id]
            if member is not None and group.state == _COMPLETING:
                # It owes a SyncGroup again; the pending-sync timer is armed (the leader, whose
                # SyncGroup never waits, has not synced yet or we would be Stable).
                group.pending_sync.add(member_id)
                if group.sync_deadline is None:
                    self._set_sync_deadline(group, now + max(1, group.rebalance_timeout_ms()))

    def drain_completions(self) -> list[tuple[Hashable, JoinResult | SyncResult]]:
        out, self._completions = self._completions, []
        return out

    def drain_records(self) -> list[GroupRecord]:
        out, self._records = self._records, []
        return out

    # -- timers ---------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            deadline, _, key = heap[0]
            if self._live_deadline(key) == deadline:
                return deadline
            heapq.heappop(heap)
        return None

    def on_timer(self, now_ms: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            deadline, _, key = heapq.heappop(heap)
            if self._live_deadline(key) != deadline:
                continue
            group = self._groups[key[1]]
            kind = key[0]
            if kind == "join":
                self._on_join_timer(group, now_ms)
            elif kind == "sync":
                self._on_sync_timer(group, now_ms)
            elif kind == "session":
                self._on_session_timer(group, key[2], now_ms)
            else:
                self._on_pending_timer(group, key[2], now_ms)

    def _on_join_timer(self, group: _Group, now: int) -> None:
        group.join_deadline = None
        if group.initial_delay is not None:
            delay, remaining = group.initial_delay
            if group.new_member_added and remaining != 0:
                # Kafka's InitialDelayedJoin: someone arrived during the delay, wait once more.
                group.new_member_added = False
                new_delay = min(self._config.group_initial_rebalance_delay_ms, remaining)
                group.initial_delay = (new_delay, max(remaining - delay, 0))
                self._set_join_deadline(group, now + new_delay)
                return
        self._complete_join(group, now)

    def _on_sync_timer(self, group: _Group, now: int) -> None:
        group.sync_deadline = None
        if group.state in (_COMPLETING, _STABLE) and group.pending_sync:
            gone = sorted(group.pending_sync)
            for mid in gone:
                self._remove_member(group, mid)
            log.info("group %s: removed %s (no SyncGroup within the rebalance timeout)",
                     group.group_id, gone)
            self._prepare_rebalance(group, now, "members did not sync")

    def _on_session_timer(self, group: _Group, member_id: str, now: int) -> None:
        member = group.members[member_id]
        awaiting = member_id in group.join_waiters or member_id in group.sync_waiters
        if awaiting and not member.is_new:
            # It cannot heartbeat while its request is parked; look again a session later (the
            # completion of that request re-arms the session anyway).
            self._refresh_session(group, member, now)
            return
        log.info("group %s: member %s session expired", group.group_id, member_id)
        self._remove_member_and_update_group(group, member_id, now)

    def _on_pending_timer(self, group: _Group, member_id: str, now: int) -> None:
        del group.pending_members[member_id]
        self._maybe_complete_join_phase(group, now)
        self._maybe_forget(group)

    # -- persistence ----------------------------------------------------------------------------

    def replay(self, record: GroupRecord) -> None:
        """Rebuild a group from its latest ``("classic", group)`` record (others are ignored)."""
        if not record.key or record.key[0] != "classic":
            return
        group_id = record.key[1]
        value = record.value
        if value is None:
            self._groups.pop(group_id, None)
            return
        members = value.get("members") or []
        protocol = value.get("protocol") or ""
        if members and not protocol:
            raise ValueError(f"classic group record for {group_id!r} has members but no protocol")
        group = _Group(group_id, int(value.get("current_state_timestamp", -1)))
        group.state = _STABLE if members else _EMPTY
        group.generation_id = int(value["generation"])
        group.protocol_type = value.get("protocol_type") or None
        group.protocol_name = protocol if members else None  # Kafka: no protocol when Empty
        group.persisted = True
        for m in members:
            member = _Member(
                m["member_id"], m.get("group_instance_id"), m.get("client_id", ""),
                m.get("client_host", ""), int(m["rebalance_timeout_ms"]),
                int(m["session_timeout_ms"]), group.protocol_type or "",
                # Kafka stores only the chosen protocol's subscription.
                [(protocol, base64.b64decode(m.get("subscription", "")))],
                base64.b64decode(m.get("assignment", "")))
            self._add(group, member)
        leader = value.get("leader")
        if leader in group.members:
            group.leader_id = leader
        self._groups[group_id] = group

    def loaded(self) -> None:
        """Replay is over: start the sessions of replayed members from now (members that went
        away while the broker was down then expire normally)."""
        now = self._clock()
        for group in list(self._groups.values()):
            for member in group.members.values():
                if member.deadline is None:
                    self._refresh_session(group, member, now)
            if group.state == _STABLE and len(group.members) > self._config.group_max_size:
                # group.max.size was lowered: rebalance so the excess members get turned away.
                self._prepare_rebalance(group, now, "group is over group.max.size")

    def _emit_group(self, group: _Group) -> None:
        protocol = group.protocol_name
        value = {
            "version": RECORD_VERSION,
            "protocol_type": group.protocol_type or "",
            "generation": group.generation_id,
            "protocol": protocol,
            "leader": group.leader_id if group.members else None,
            "current_state_timestamp": group.state_timestamp,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "session_timeout_ms": m.session_timeout_ms,
                    "subscription": _b64(m.metadata(protocol)),
                    "assignment": _b64(m.assignment),
                }
                for m in group.members.values()
            ],
        }
        group.persisted = True
        self._records.append(GroupRecord(("classic", group.group_id), value))

    # -- the rebalance machinery ----------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: _Group, now: int) -> None:
        if group.state in (_STABLE, _COMPLETING, _EMPTY):
            self._prepare_rebalance(group, now, "membership changed")
        else:
            self._maybe_complete_join_phase(group, now)

    def _prepare_rebalance(self, group: _Group, now: int, reason: str) -> None:
        if group.state == _COMPLETING:
            # Members waiting for the leader's assignment must rejoin instead.
            for m in group.members.values():
                m.assignment = b""
            for mid, t in list(group.sync_waiters.items()):
                self._complete(t, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
                self._refresh_session(group, group.members[mid], now)
            group.sync_waiters.clear()
        group.pending_sync.clear()
        group.sync_deadline = None
        initial = group.state == _EMPTY
        self._transition(group, _PREPARING, now)
        log.info("group %s: preparing to rebalance (generation %d; %s)", group.group_id,
                 group.generation_id, reason)
        if not initial:
            if group.all_joined():
                self._complete_join(group, now)
            else:
                self._set_join_deadline(group, now + max(1, group.rebalance_timeout_ms()))
            return
        delay = self._config.group_initial_rebalance_delay_ms
        group.new_member_added = False
        if delay <= 0:
            self._complete_join(group, now)
            return
        group.initial_delay = (delay, max(group.rebalance_timeout_ms() - delay, 0))
        self._set_join_deadline(group, now + delay)

    def _maybe_complete_join_phase(self, group: _Group, now: int) -> None:
        # The initial rebalance of an Empty group only ends by its timer (its purpose is to wait
        # for more members than the ones already there).
        if (group.state == _PREPARING and group.previous_state != _EMPTY
                and group.all_joined()):
            self._complete_join(group, now)

    def _complete_join(self, group: _Group, now: int) -> None:
        group.join_deadline = None
        group.initial_delay = None
        for mid, m in list(group.members.items()):
            if mid not in group.join_waiters and m.instance_id is None:
                self._remove_member(group, mid)  # did not rejoin in time
        if not self._maybe_elect_new_joined_leader(group) and group.members:
            # Only static members that have not rejoined are left: wait another round; their
            # sessions will remove them if they are really gone.
            self._set_join_deadline(group, now + max(1, group.rebalance_timeout_ms()))
            return
        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            self._transition(group, _EMPTY, now)
            self._emit_group(group)
            log.info("group %s: empty at generation %d", group.group_id, group.generation_id)
            return
        group.protocol_name = self._select_protocol(group)
        self._transition(group, _COMPLETING, now)
        leader_view = self._leader_view(group)
        for mid, m in group.members.items():
            t = group.join_waiters.pop(mid, None)
            if t is not None:
                self._complete(t, JoinResult(
                    _NONE, group.generation_id, group.protocol_type, group.protocol_name,
                    group.leader_id or "", mid, leader_view if mid == group.leader_id else []))
            m.is_new = False
            self._refresh_session(group, m, now)
            group.pending_sync.add(mid)
        self._set_sync_deadline(group, now + max(1, group.rebalance_timeout_ms()))
        log.info("group %s: generation %d with %d member(s), protocol %s, leader %s",
                 group.group_id, group.generation_id, len(group.members), group.protocol_name,
                 group.leader_id)

    def _maybe_elect_new_joined_leader(self, group: _Group) -> bool:
        if group.leader_id is None:
            return False
        if group.leader_id in group.join_waiters:
            return True
        for mid in group.members:
            if mid in group.join_waiters:
                group.leader_id = mid
                return True
        return False

    def _select_protocol(self, group: _Group) -> str:
        """Kafka's selectProtocol: each member votes for its most preferred protocol among those
        every member supports; most votes wins. Ties (Kafka: hash order) go to the protocol voted
        for first in join order, so the result is deterministic."""
        n = len(group.members)
        candidates = {p for p, count in group.supported.items() if count == n}
        votes: dict[str, int] = {}
        for m in group.members.values():
            choice = m.vote(candidates)
            if choice is None:
                raise RuntimeError(f"group {group.group_id}: member {m.member_id} supports none "
                                   f"of the common protocols {sorted(candidates)}")
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=votes.__getitem__)

    def _supports_protocols(self, group: _Group, protocol_type: str, names: list[str]) -> bool:
        if group.state == _EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(group.members)
        return (group.protocol_type == protocol_type
                and any(group.supported.get(name, 0) == n for name in names))

    # -- membership bookkeeping -----------------------------------------------------------------

    def _add(self, group: _Group, member: _Member) -> None:
        mid = member.member_id
        if member.instance_id is not None:
            group.static_members[member.instance_id] = mid
        if not group.members:
            group.protocol_type = member.protocol_type
        if group.leader_id is None:
            group.leader_id = mid
        group.members[mid] = member
        for name in member.names():
            group.supported[name] = group.supported.get(name, 0) + 1
        group.pending_members.pop(mid, None)

    def _update_member(self, group: _Group, member: _Member, req: _JoinRequest) -> None:
        for name in member.names():
            self._dec_supported(group, name)
        member.protocols = req.protocols
        for name in member.names():
            group.supported[name] = group.supported.get(name, 0) + 1
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms

    @staticmethod
    def _dec_supported(group: _Group, name: str) -> None:
        count = group.supported.get(name, 0) - 1
        if count > 0:
            group.supported[name] = count
        else:
            group.supported.pop(name, None)

    def _remove_member(self, group: _Group, member_id: str) -> None:
        """Drop a member (no rebalance decision here). Its parked requests are answered with
        UNKNOWN_MEMBER_ID so that a live client rejoins from scratch."""
        member = group.members.pop(member_id, None)
        if member is not None:
            for name in member.names():
                self._dec_supported(group, name)
            t = group.join_waiters.pop(member_id, None)
            if t is not None:
                self._complete(t, _join_error(ErrorCode.UNKNOWN_MEMBER_ID, ""))
            t = group.sync_waiters.pop(member_id, None)
            if t is not None:
                self._complete(t, _sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
            iid = member.instance_id
            if iid is not None and group.static_members.get(iid) == member_id:
                del group.static_members[iid]
        if group.leader_id == member_id:
            group.leader_id = next(iter(group.members), None)
        group.pending_members.pop(member_id, None)
        group.pending_sync.discard(member_id)

    def _remove_member_and_update_group(self, group: _Group, member_id: str, now: int) -> None:
        self._remove_member(group, member_id)
        if group.state in (_STABLE, _COMPLETING):
            self._prepare_rebalance(group, now, f"member {member_id} removed")
        else:
            self._maybe_complete_join_phase(group, now)

    def _validate_member(self, group: _Group, member_id: str,
                         instance_id: str | None) -> int:
        """Kafka's validateMember: a given instance id must map to exactly this member id."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return _NONE

    def _remove_pending_sync(self, group: _Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline = None

    def _transition(self, group: _Group, state: str, now: int) -> None:
        group.previous_state = group.state
        group.state = state
        group.state_timestamp = now

    def _maybe_forget(self, group: _Group) -> None:
        """Drop a group that only ever existed for a failed or abandoned first join: nothing was
        persisted and nobody is in it (Kafka keeps such shells until its offsets cleanup)."""
        if (not group.persisted and group.state == _EMPTY and group.generation_id == 0
                and not group.members and not group.pending_members
                and self._groups.get(group.group_id) is group):
            del self._groups[group.group_id]

    # -- tokens ---------------------------------------------------------------------------------

    def _check_token(self, token: Hashable) -> None:
        if token in self._waiting:
            raise ValueError(f"token {token!r} is already waiting for an answer")

    def _await_join(self, group: _Group, member_id: str, token: Hashable) -> None:
        old = group.join_waiters.get(member_id)
        if old is not None:
            # A second JoinGroup for the same member (a retry on a new connection): the older
            # request will never be the one answered. Kafka drops it silently; answer it.
            self._complete(old, _join_error(ErrorCode.REBALANCE_IN_PROGRESS, member_id))
        group.join_waiters[member_id] = token
        self._waiting[token] = (group.group_id, member_id, "join")

    def _await_sync(self, group: _Group, member_id: str, token: Hashable) -> None:
        old = group.sync_waiters.get(member_id)
        if old is not None:
            self._complete(old, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
        group.sync_waiters[member_id] = token
        self._waiting[token] = (group.group_id, member_id, "sync")

    def _complete(self, token: Hashable, result: JoinResult | SyncResult) -> None:
        self._waiting.pop(token, None)
        self._completions.append((token, result))

    def _own_result(self, token: Hashable, mark: int, result: _R | _Pending) -> _R | _Pending:
        """If the caller's own request was answered during this call, return that answer now
        rather than through drain_completions."""
        if result is not PENDING:
            return result
        for i in range(mark, len(self._completions)):
            if self._completions[i][0] == token:
                return cast(_R, self._completions.pop(i)[1])
        return PENDING

    # -- timer bookkeeping ----------------------------------------------------------------------

    def _refresh_session(self, group: _Group, member: _Member, now: int) -> None:
        member.deadline = now + max(1, member.session_timeout_ms)
        self._schedule(member.deadline, ("session", group.group_id, member.member_id))

    def _set_join_deadline(self, group: _Group, deadline: int) -> None:
        group.join_deadline = deadline
        self._schedule(deadline, ("join", group.group_id))

    def _set_sync_deadline(self, group: _Group, deadline: int) -> None:
        group.sync_deadline = deadline
        self._schedule(deadline, ("sync", group.group_id))

    def _schedule(self, deadline: int, key: tuple[str, ...]) -> None:
        heapq.heappush(self._heap, (deadline, next(self._seq), key))
        if len(self._heap) > self._compact_at:
            self._compact()

    def _compact(self) -> None:
        """Rebuild the heap from the live deadlines (heartbeats leave stale entries behind)."""
        live: list[tuple[int, int, tuple[str, ...]]] = []
        for gid, g in self._groups.items():
            if g.join_deadline is not None:
                live.append((g.join_deadline, next(self._seq), ("join", gid)))
            if g.sync_deadline is not None:
                live.append((g.sync_deadline, next(self._seq), ("sync", gid)))
            for mid, m in g.members.items():
                if m.deadline is not None:
                    live.append((m.deadline, next(self._seq), ("session", gid, mid)))
            for mid, d in g.pending_members.items():
                live.append((d, next(self._seq), ("pending", gid, mid)))
        heapq.heapify(live)
        self._heap = live
        self._compact_at = max(1024, 4 * len(live))

    def _live_deadline(self, key: tuple[str, ...]) -> int | None:
        group = self._groups.get(key[1])
        if group is None:
            return None
        kind = key[0]
        if kind == "join":
            return group.join_deadline
        if kind == "sync":
            return group.sync_deadline
        if kind == "session":
            member = group.members.get(key[2])
            return None if member is None else member.deadline
        return group.pending_members.get(key[2])


def _inconsistent(given: str | None, current: str | None) -> bool:
    # SyncGroup v5+ names the protocol; earlier versions send null (never inconsistent).
    return given is not None and current is not None and given != current
