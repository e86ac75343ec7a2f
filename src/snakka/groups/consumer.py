"""KIP-848 consumer groups (the ``consumer`` rebalance protocol, ConsumerGroupHeartbeat API 68).

:class:`ConsumerGroups` owns every consumer-protocol group of this coordinator: membership,
group/member epochs, the target assignment computed by a server-side assignor
(:mod:`snakka.groups.assignors`) and each member's reconciliation towards it. It is a sans-I/O
core following :mod:`snakka.groups.types`: time comes from the injected clock, timers are
reported through ``next_deadline``/``on_timer``, persistence through ``drain_records`` /
``replay`` / ``loaded``. A heartbeat is always answered at once (no deferred completions).

Epochs (Kafka's vocabulary). The *group epoch* is bumped whenever membership, a member's
subscription or the metadata of subscribed topics changes; the target assignment is then
recomputed at once (so the *assignment epoch* always catches up with the group epoch and the
``Assigning`` state is never observable). Each member has a *member epoch*: the assignment epoch
it has reconciled to.

Reconciliation (Kafka's ``CurrentAssignmentBuilder``), done for the heartbeating member only:

* ``STABLE`` and member epoch == assignment epoch: nothing to do.
* Otherwise the member's new assignment is ``current ∩ target``. Partitions in ``current -
  target`` must be revoked first: if the client still reports owning any of them (or does not
  report its owned partitions at all) the member goes to ``UNREVOKED_PARTITIONS``, keeps its
  epoch, and is sent the shrunk assignment; a rebalance timer (its ``rebalance_timeout_ms``)
  fences it if it does not acknowledge in time by heartbeating with ``topic_partitions``
  without them.
* Once nothing is left to revoke, the member moves to the assignment epoch and is given the
  partitions of its target that no other member still owns (a partition is owned by the member
  whose assigned or pending-revocation set holds it). If some are still owned elsewhere it is
  ``UNRELEASED_PARTITIONS`` and picks them up on a later heartbeat once released; otherwise
  ``STABLE``. Hence a partition is never owned by two members at once.

The response carries the member's assignment only when it changed, or when the request was a
full one (epoch 0, or rebalance timeout + subscription + owned partitions all present), as
Kafka does. Heartbeats with the member's *previous* epoch are accepted when the reported owned
partitions are a subset of the current assignment (the response carrying the new epoch may
have been lost); any other stale or future epoch is ``FENCED_MEMBER_EPOCH``. A known member that
rejoins with epoch 0 is accepted and given its current state back (KAFKA-19233); so is a static
member rejoining under its own member id (as proposed in apache/kafka#23542; older brokers
answer UNRELEASED_INSTANCE_ID), which after a ``-2`` leave has its epoch reset and is
reconciled again. A join that changes a known member's instance id is INVALID_REQUEST (same
proposal).

Static membership: epoch ``-2`` marks the member as temporarily gone; it keeps its partitions
and target until its session times out, and a new member id joining with the same instance
id replaces it and inherits its assignment. Epoch ``-1`` removes a member at once.

Regular expressions (``subscribed_topic_regex``) use Python's :mod:`re` with full-match
semantics; Kafka uses RE2/J, whose syntax agrees on the patterns consumers use but not on
every construct, and which runs in linear time (Python's engine can backtrack). Internal
topics (``__`` prefix) never match. Kafka resolves regexes asynchronously in batches; here they
are resolved synchronously on the heartbeat that introduces them and on every
:meth:`ConsumerGroups.on_metadata_change`.

Records: ``("consumer", group)`` holds the group epoch, assignment epoch, assignor,
subscription metadata and resolved regexes; ``("consumer_member", group, member_id)`` holds one
member's
subscription, epochs, reconciliation state, current and target assignment. Removal writes
tombstones. After ``replay``/``loaded`` members keep heartbeating with their epochs; session
(and pending rebalance) timers restart from the load time, and topic changes made while the
coordinator was away bump the epoch at load.

Timers: one heap entry per member and timer kind, the earliest deadline queued; a deadline that
moves later (every heartbeat) is requeued lazily when its entry reaches the top, so the heap
holds about one entry per member however fast clients heartbeat.

Classic-protocol members (KIP-848 online migration, :mod:`snakka.groups.migration`): a member
that joined with JoinGroup (or came with an upgraded classic group) carries its classic
metadata (session timeout, supported protocols). Its subscription and owned partitions are read
from the embedded consumer protocol on every JoinGroup, where it is reconciled exactly like a
heartbeating member; JoinGroup is answered at once with generation = its member epoch and no
leader (nobody assigns client-side), SyncGroup returns its current assignment encoded in the
consumer protocol, and Heartbeat answers REBALANCE_IN_PROGRESS when it must rejoin to make
progress (a newer group epoch, partitions to revoke, or released partitions to pick up), as
Kafka's ``classicGroup*ToConsumerGroup`` methods do. Its session is its own
``session_timeout_ms``. When the last consumer-protocol member leaves and classic members
remain, the group is handed to the classic core (see :meth:`ConsumerGroups.drain_downgrades`).

Out of scope: classic/consumer group id conflicts (the coordinator shell resolves those),
authorization, dynamic per-group configs.
"""

from __future__ import annotations

import base64
import heapq
import itertools
import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from snakka.groups.assignors import ASSIGNORS
from snakka.groups.classic import JoinResult, SyncResult
from snakka.groups.membership import (
    LEAVE_GROUP_MEMBER_EPOCH,
    GroupRejected,
    HeartbeatResult,
    Partitions,
    TopicPartitions,
    decode_partitions,
    encode_partitions,
    partitions_to_wire,
)
from snakka.groups.migration import (
    CONSUMER_PROTOCOL_TYPE,
    MigratingGroup,
    MigratingMember,
    assignment_version,
    decode_assignment,
    encode_assignment,
)
from snakka.groups.types import Clock, ConsumerState, GroupConfig, GroupRecord
from snakka.limits import REGEX_CACHE_SIZE
from snakka.protocol import consumer_protocol
from snakka.protocol.errors import ErrorCode
from snakka.protocol.primitives import random_uuid, uuid_to_base64

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "ClassicMemberMetadata",
    "ConsumerGroupDescription",
    "ConsumerGroups",
    "HeartbeatResult",
    "MemberDescription",
    "MemberState",
]

log = logging.getLogger(__name__)

LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
#: From this ConsumerGroupHeartbeat version on the client generates its member id (KIP-1082).
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1



class MemberState:
    """Reconciliation state of a member (Kafka's ``MemberState``)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: TopicPartitions
    target_assignment: TopicPartitions
    # Not on the wire (for tools and tests): reconciliation state (MemberState) and the
    # partitions the member was asked to revoke and has not yet acknowledged.
    state: str
    pending_revocation: TopicPartitions
    #: True for a member that uses the classic protocol (JoinGroup/SyncGroup/Heartbeat).
    classic: bool = False


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """One group of a ConsumerGroupDescribe response. Assignments are ``(topic_id,
    partitions)`` like the heartbeat's (the handler adds topic names); topics that no longer
    exist are left out, as Kafka does."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: list[MemberDescription]


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a classic-protocol member of a consumer group keeps of its JoinGroup (Kafka's
    ``ConsumerGroupMemberMetadataValue.ClassicMemberMetadata``)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    def names(self) -> list[str]:
        return list(dict.fromkeys(n for n, _m in self.protocols))


@dataclass(slots=True, eq=False)
class _Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: str = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None  # set for a classic-protocol member
    # Soft state, rebuilt at load.
    session_deadline: int | None = None
    rebalance_deadline: int | None = None
    rebalance_epoch: int = 0
    queued: dict[str, int] = field(default_factory=dict)  # timer kind -> earliest heap entry
    persisted: dict[str, Any] | None = None  # last value written (to skip no-op records)


@dataclass(slots=True, eq=False)
class _Group:
    group_id: str
    assignor: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, _Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Partitions] = field(default_factory=dict)
    owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    # topic name -> (topic id, partitions) of the existing topics the group subscribes to
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    resolved_regex: dict[str, frozenset[str]] = field(default_factory=dict)
    persisted: dict[str, Any] | None = None
    dirty: set[str] = field(default_factory=set)  # members whose record may be out of date

    @property
    def state(self) -> str:
        if not self.members:
            return ConsumerState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerState.ASSIGNING
        for m in self.members.values():
            if m.state != MemberState.STABLE or m.member_epoch != self.assignment_epoch:
                return ConsumerState.RECONCILING
        return ConsumerState.STABLE


def _new_member_id() -> str:
    """Kafka's ``Uuid.randomUuid().toString()``: URL-safe base64 without padding, never
    starting with '-'."""
    return uuid_to_base64(random_uuid())


@lru_cache(maxsize=REGEX_CACHE_SIZE)
def _compile(regex: str) -> re.Pattern[str] | str:
    """The compiled pattern, or the error text if ``regex`` is invalid."""
    try:
        return re.compile(regex)
    except (re.error, RecursionError, OverflowError) as e:
        return str(e)


def _classic_from_value(v: dict[str, Any] | None) -> ClassicMemberMetadata | None:
    if not v:
        return None
    return ClassicMemberMetadata(
        int(v["session_timeout_ms"]),
        tuple((str(n), base64.b64decode(meta)) for n, meta in v["protocols"]))


def _to_partitions(tps: TopicPartitions | None) -> dict[uuid.UUID, set[int]] | None:
    if tps is None:
        return None
    out: dict[uuid.UUID, set[int]] = {}
    for tid, parts in tps:
        out.setdefault(tid, set()).update(parts)
    return out


def _owns_any(owned: dict[uuid.UUID, set[int]] | None, parts: Partitions) -> bool:
    """Kafka's ``ownsRevokedPartitions``: unknown ownership (not reported) counts as owning."""
    if owned is None:
        return True
    return any(owned[tid] & ps for tid, ps in parts.items() if tid in owned)


def _is_subset(owned: dict[uuid.UUID, set[int]] | None, assigned: Partitions) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(tid, frozenset()) for tid, ps in owned.items())


class ConsumerGroups:
    """All KIP-848 consumer groups of this coordinator (sans-I/O)."""

    def __init__(
        self,
        config: GroupConfig,
        clock: Clock,
        topics: Callable[[], dict[str, tuple[uuid.UUID, int]]],
    ) -> None:
        self._config = config
        self._clock = clock
        self._topics = topics
        self._assignors = [n for n in config.group_consumer_assignors if n in ASSIGNORS]
        if not self._assignors:
            raise ValueError(
                f"group.consumer.assignors names no known assignor: "
                f"{list(config.group_consumer_assignors)} (known: {sorted(ASSIGNORS)})"
            )
        self._groups: dict[str, _Group] = {}
        self._records: list[GroupRecord] = []
        self._timers: list[tuple[int, int, str, str, str]] = []  # (deadline, seq, kind, g, m)
        self._seq = itertools.count()
        self._downgrades: list[MigratingGroup] = []

    # -- the API -------------------------------------------------------------------------------

    def heartbeat(
        self,
        *,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: list[str] | None,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
        topic_partitions: TopicPartitions | None,
        api_version: int,
        client_id: str = "",
        client_host: str = "",
    ) -> HeartbeatResult:
        """Handle one ConsumerGroupHeartbeat request (join, heartbeat, or leave)."""
        try:
            self._validate(
                group_id=group_id,
                member_id=member_id,
                member_epoch=member_epoch,
                instance_id=instance_id,
                rack_id=rack_id,
                rebalance_timeout_ms=rebalance_timeout_ms,
                subscribed_topic_names=subscribed_topic_names,
                subscribed_topic_regex=subscribed_topic_regex,
                server_assignor=server_assignor,
                topic_partitions=topic_partitions,
                api_version=api_version,
            )
            if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(group_id, member_id, member_epoch, instance_id)
            return self._heartbeat(
                group_id=group_id,
                member_id=member_id,
                member_epoch=member_epoch,
                instance_id=instance_id,
                rack_id=rack_id,
                rebalance_timeout_ms=rebalance_timeout_ms,
                subscribed_topic_names=subscribed_topic_names,
                subscribed_topic_regex=subscribed_topic_regex,
                server_assignor=server_assignor,
                owned=_to_partitions(topic_partitions),
                client_id=client_id,
                client_host=client_host,
            )
        except GroupRejected as e:
            return HeartbeatResult(error_code=e.code, error_message=e.message)

    def describe(self, group_id: str) -> ConsumerGroupDescription | None:
        """The group as ConsumerGroupDescribe reports it, or ``None`` if there is none."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        existing = {tid for tid, _n in self._topics().values()}

        def described(parts: Partitions) -> TopicPartitions:
            return [(tid, ps) for tid, ps in partitions_to_wire(parts) if tid in existing]

        members = [
            MemberDescription(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=described(m.assigned),
                target_assignment=described(group.target.get(m.member_id, {})),
                state=m.state,
                pending_revocation=described(m.pending_revocation),
                classic=m.classic is not None,
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ]
        return ConsumerGroupDescription(
            group_id=group_id,
            state=group.state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.assignor,
            members=members,
        )

    def validate_offset_commit(self, *, group_id: str, member_id: str, member_epoch: int) -> int:
        """Kafka's ``ConsumerGroup.validateOffsetCommit`` for OffsetCommit v9+.

        A negative epoch (admin client, manual assignment) may commit only while the group has
        no members; otherwise the member must exist (``UNKNOWN_MEMBER_ID``) and send its current
        epoch (``STALE_MEMBER_EPOCH``). An unknown group accepts negative epochs and answers
        ``GROUP_ID_NOT_FOUND`` otherwise (Kafka answers ``ILLEGAL_GENERATION`` below v9)."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.NONE if member_epoch < 0 else ErrorCode.GROUP_ID_NOT_FOUND
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            # Kafka: a classic-protocol member is told in classic terms.
            return (ErrorCode.ILLEGAL_GENERATION if member.classic is not None
                    else ErrorCode.STALE_MEMBER_EPOCH)
        return ErrorCode.NONE

    def validate_offset_fetch(
        self, *, group_id: str, member_id: str | None, member_epoch: int
    ) -> int:
        """Kafka's ``ConsumerGroup.validateOffsetFetch`` (OffsetFetch v9+): no member id and a
        negative epoch (admin client) always pass; otherwise as for commits."""
        group = self._groups.get(group_id)
        if (member_id is None or member_id == "") and member_epoch < 0:
            return ErrorCode.NONE
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def list_groups(self) -> list[tuple[str, str]]:
        """``(group_id, state)`` of every consumer group, sorted by id."""
        return [(gid, self._groups[gid].state) for gid in sorted(self._groups)]

    def delete(self, group_id: str) -> int:
        """DeleteGroups: ``GROUP_ID_NOT_FOUND``, ``NON_EMPTY_GROUP`` or ``NONE``."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self._groups[group_id]
        self._records.append(GroupRecord(("consumer", group_id), None))
        return ErrorCode.NONE

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def is_empty(self, group_id: str) -> bool:
        """True if the group has no members (an unknown group is empty)."""
        group = self._groups.get(group_id)
        return group is None or not group.members

    def on_metadata_change(self) -> None:
        """Topics were created/deleted or gained partitions: every group whose subscribed
        topics' metadata (or regex matches) changed bumps its epoch and gets a new target."""
        topics = self._topics()
        for group in list(self._groups.values()):
            if self._refresh_subscriptions(group, topics):
                log.info("[GroupId %s] subscribed topic metadata changed", group.group_id)
                self._bump(group)
                self._flush(group)

    # -- classic-protocol members and online migration (KIP-848) ------------------------------

    def classic_join(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
    ) -> JoinResult:
        """A classic JoinGroup to this (non-empty) consumer group (Kafka's
        ``classicGroupJoinToConsumerGroup``); always answered at once."""
        def error(code: int, mid: str = member_id) -> JoinResult:
            return JoinResult(code, -1, None, None, "", mid, [])

        group = self._groups.get(group_id)
        if group is None:
            return error(ErrorCode.UNKNOWN_MEMBER_ID)
        cfg = self._config
        if not (cfg.group_min_session_timeout_ms <= session_timeout_ms
                <= cfg.group_max_session_timeout_ms):
            return error(ErrorCode.INVALID_SESSION_TIMEOUT)
        unknown = member_id == ""
        new_id = _new_member_id() if unknown else member_id
        existing = group.members.get(new_id)
        max_size = cfg.group_consumer_max_size
        if existing is None and len(group.members) >= max_size and not (
                group_instance_id is not None and group_instance_id in group.static_members):
            return error(ErrorCode.GROUP_MAX_SIZE_REACHED, "")
        if existing is not None and existing.classic is None:
            return error(ErrorCode.UNKNOWN_MEMBER_ID)  # it uses the consumer protocol
        names = list(dict.fromkeys(n for n, _m in protocols))
        if not self._supports_classic_protocols(group, protocol_type, names, new_id):
            return error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if unknown and group_instance_id is None and require_known_member_id:
            # KIP-394: hand out the member id and ask for a second JoinGroup with it.
            return error(ErrorCode.MEMBER_ID_REQUIRED, new_id)
        try:
            subscription = consumer_protocol.decode_subscription(protocols[0][1])
        except ValueError:
            return error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        replaced: _Member | None = None
        if group_instance_id is not None:
            holder_id = group.static_members.get(group_instance_id)
            if unknown:
                if holder_id is not None:
                    replaced = group.members[holder_id]
                    if (replaced.classic is None
                            and replaced.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                        # A consumer-protocol static member still in the group keeps it.
                        return error(ErrorCode.UNRELEASED_INSTANCE_ID)
            elif holder_id is None:
                return error(ErrorCode.UNKNOWN_MEMBER_ID)
            elif holder_id != new_id:
                return error(ErrorCode.FENCED_INSTANCE_ID)
        # A dynamic member with a member id we do not know (the one MEMBER_ID_REQUIRED handed
        # out, which is not remembered) is created, as Kafka's
        # getOrMaybeSubscribeDynamicConsumerGroupMember does for JoinGroup.

        # Accepted.
        now = self._clock()
        topics = self._topics()
        if replaced is not None:
            log.info("[GroupId %s] classic static member %s (instance %s) replaces %s",
                     group_id, new_id, group_instance_id, replaced.member_id)
            member = self._replace_static_member(group, replaced, new_id)
        elif existing is None:
            log.info("[GroupId %s] classic member %s joins", group_id, new_id)
            member = _Member(member_id=new_id)
            group.members[new_id] = member
            group.target.setdefault(new_id, {})
        else:
            member = existing
        if group_instance_id is not None:
            member.instance_id = group_instance_id
            group.static_members[group_instance_id] = new_id
        if subscription.rack_id:
            member.rack_id = subscription.rack_id
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        member.server_assignor = None
        member.client_id = client_id
        member.client_host = client_host
        member.classic = ClassicMemberMetadata(
            session_timeout_ms, tuple((n, bytes(m)) for n, m in protocols))
        group.dirty.add(new_id)
        subscribed = tuple(sorted(set(subscription.topics)))
        if (existing is None or subscribed != member.subscribed_topic_names
                or member.subscribed_topic_regex is not None):
            member.subscribed_topic_names = subscribed
            member.subscribed_topic_regex = None
            self._refresh_subscriptions(group, topics)
            self._bump(group)
        owned: dict[uuid.UUID, set[int]] = {}
        for tp in subscription.owned_partitions:
            meta = topics.get(tp.topic)
            if meta is not None:
                owned.setdefault(meta[0], set()).update(tp.partitions)
        self._reconcile(group, member, owned, now)
        member.session_deadline = now + session_timeout_ms
        self._arm(group_id, member, "session")
        self._flush(group)
        if (replaced is not None and replaced.classic is None
                and self._can_downgrade(group, None)):
            # The last consumer-protocol member was a static member this classic member
            # replaced (Kafka's validateOnlineDowngradeWithReplacedMemberId).
            self._convert_to_classic(group)
        return JoinResult(ErrorCode.NONE, member.member_epoch, CONSUMER_PROTOCOL_TYPE,
                          member.classic.protocols[0][0], "", new_id, [])

    def _supports_classic_protocols(self, group: _Group, protocol_type: str,
                                    names: list[str], member_id: str) -> bool:
        """Kafka's ``ConsumerGroup.supportsClassicProtocols``: the consumer protocol type, and a
        protocol every other classic member supports too."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
            return False
        others = [m.classic for mid, m in group.members.items()
                  if m.classic is not None and mid != member_id]
        return not others or any(all(n in c.names() for c in others) for n in names)

    def _classic_member(self, group_id: str, member_id: str,
                        instance_id: str | None) -> tuple[_Group, _Member] | int:
        """Kafka's ``validateConsumerGroupMember`` + ``throwIfMemberDoesNotUseClassicProtocol``."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if instance_id is not None:
            holder = group.static_members.get(instance_id)
            if holder is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if holder != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return group, member

    def classic_sync(self, *, group_id: str, generation_id: int, member_id: str,
                     group_instance_id: str | None, protocol_type: str | None,
                     protocol_name: str | None) -> SyncResult:
        """A classic SyncGroup to this consumer group: the member's current assignment
        (Kafka's ``classicGroupSyncToConsumerGroup``). Assignments a leader sends are ignored:
        the coordinator assigns."""
        found = self._classic_member(group_id, member_id, group_instance_id)
        if isinstance(found, int):
            return SyncResult(found, None, None, b"")
        group, member = found
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION, None, None, b"")
        if ((protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE)
                or (protocol_name is not None and protocol_name not in member.classic.names())):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, None, None, b"")
        if (group.group_epoch > member.member_epoch
                and member.state != MemberState.UNREVOKED_PARTITIONS):
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS, None, None, b"")
        member.session_deadline = self._clock() + member.classic.session_timeout_ms
        self._arm(group_id, member, "session")
        return SyncResult(ErrorCode.NONE, CONSUMER_PROTOCOL_TYPE,
                          protocol_name or member.classic.protocols[0][0],
                          self._encode_member_assignment(member))

    def classic_heartbeat(self, *, group_id: str, generation_id: int, member_id: str,
                          group_instance_id: str | None) -> int:
        """A classic Heartbeat to this consumer group (Kafka's
        ``classicGroupHeartbeatToConsumerGroup``): REBALANCE_IN_PROGRESS when the member must
        rejoin to catch up with the group epoch, to revoke, or to collect released partitions."""
        found = self._classic_member(group_id, member_id, group_instance_id)
        if isinstance(found, int):
            return found
        group, member = found
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        member.session_deadline = self._clock() + member.classic.session_timeout_ms
        self._arm(group_id, member, "session")
        if (member.member_epoch < group.group_epoch
                or member.state == MemberState.UNREVOKED_PARTITIONS
                or (member.state == MemberState.UNRELEASED_PARTITIONS
                    and not self._waiting_on_unreleased(group, member))):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def classic_leave(self, *, group_id: str,
                      members: list[tuple[str, str | None, str | None]]
                      ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """A classic LeaveGroup to this consumer group (Kafka's
        ``classicGroupLeaveToConsumerGroup``): per-member outcomes; only classic-protocol
        members may leave this way."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        out: list[tuple[str, str | None, int]] = []
        for mid, iid, _reason in members:
            if iid is not None:
                holder = group.static_members.get(iid)
                if holder is None:
                    out.append((mid, iid, ErrorCode.UNKNOWN_MEMBER_ID))
                    continue
                if mid and mid != holder:
                    out.append((mid, iid, ErrorCode.FENCED_INSTANCE_ID))
                    continue
                mid = holder
            member = group.members.get(mid)
            if member is None or member.classic is None:
                out.append((mid, iid, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            log.info("[GroupId %s] classic member %s left the group", group_id, mid)
            self._remove_member(group, member)
            out.append((mid, iid, ErrorCode.NONE))
        self._flush(group)
        return ErrorCode.NONE, out

    def _waiting_on_unreleased(self, group: _Group, member: _Member) -> bool:
        """Kafka's ``waitingOnUnreleasedPartition``: a target partition it lacks is still
        owned by another member."""
        for tid, ps in group.target.get(member.member_id, {}).items():
            have = member.assigned.get(tid, frozenset())
            for p in ps - have:
                holder = group.owners.get((tid, p))
                if holder is not None and holder != member.member_id:
                    return True
        return False

    def _encode_member_assignment(self, member: _Member) -> bytes:
        assert member.classic is not None
        names = {tid: n for n, (tid, _c) in self._topics().items()}
        parts = {names[tid]: sorted(ps) for tid, ps in member.assigned.items() if tid in names}
        return encode_assignment(parts, assignment_version(member.classic.protocols))

    def _session_timeout(self, member: _Member) -> int:
        if member.classic is not None:
            return member.classic.session_timeout_ms
        return self._config.group_consumer_session_timeout_ms

    def _fence(self, group: _Group, member: _Member) -> None:
        """Remove a member that left or was fenced, then downgrade the group to a classic
        group if that was its last consumer-protocol member (Kafka's
        ``validateOnlineDowngradeWithFencedMember``)."""
        downgrade = self._can_downgrade(group, member)
        self._remove_member(group, member)
        self._flush(group)
        if downgrade:
            self._convert_to_classic(group)

    def _can_downgrade(self, group: _Group, leaving: _Member | None) -> bool:
        """May the group become a classic group once ``leaving`` (a consumer-protocol member;
        ``None``: one already replaced) is gone?"""
        remaining = len(group.members) - (leaving is not None)
        if (leaving is not None and leaving.classic is not None) or remaining < 1:
            return False
        if any(m.classic is None for m in group.members.values() if m is not leaving):
            return False
        if not self._config.downgrade_enabled:
            log.info("[GroupId %s] cannot downgrade to a classic group: "
                     "group.consumer.migration.policy=%s", group.group_id,
                     self._config.group_consumer_migration_policy)
            return False
        if remaining > self._config.group_max_size:
            log.info("[GroupId %s] cannot downgrade to a classic group: %d members exceed "
                     "group.max.size", group.group_id, remaining)
            return False
        return True

    def _convert_to_classic(self, group: _Group) -> None:
        """Hand the group to the classic core: tombstones here, a snapshot for the shell."""
        gid = group.group_id
        members = []
        for m in group.members.values():
            assert m.classic is not None
            members.append(MigratingMember(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.classic.session_timeout_ms, m.classic.protocols,
                self._encode_member_assignment(m)))
            self._records.append(GroupRecord(("consumer_member", gid, m.member_id), None))
            m.session_deadline = m.rebalance_deadline = None
        self._records.append(GroupRecord(("consumer", gid), None))
        del self._groups[gid]
        log.info("[GroupId %s] downgraded to a classic group at generation %d with %d "
                 "member(s)", gid, group.group_epoch, len(members))
        self._downgrades.append(MigratingGroup(
            gid, group.group_epoch, CONSUMER_PROTOCOL_TYPE, None, None, tuple(members)))

    def drain_downgrades(self) -> list[MigratingGroup]:
        """Groups converted to classic groups since the last call; the shell hands each to
        :meth:`snakka.groups.classic.ClassicGroups.adopt`."""
        out, self._downgrades = self._downgrades, []
        return out

    def can_upgrade(self, classic: MigratingGroup) -> bool:
        """Kafka's ``validateOnlineUpgrade`` (policy, embedded protocol, group size) plus a
        well-formed embedded consumer protocol (Kafka's SchemaException case)."""
        gid = classic.group_id
        if not self._config.upgrade_enabled:
            log.info("[GroupId %s] cannot upgrade to a consumer group: "
                     "group.consumer.migration.policy=%s", gid,
                     self._config.group_consumer_migration_policy)
            return False
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            log.info("[GroupId %s] cannot upgrade to a consumer group: the group does not use "
                     "the consumer embedded protocol", gid)
            return False
        if len(classic.members) > self._config.group_consumer_max_size:
            log.info("[GroupId %s] cannot upgrade to a consumer group: %d members exceed "
                     "group.consumer.max.size", gid, len(classic.members))
            return False
        try:
            for m in classic.members:
                consumer_protocol.decode_subscription(dict(m.protocols).get(
                    classic.protocol_name or "", m.protocols[0][1] if m.protocols else b""))
                decode_assignment(m.assignment)
        except (ValueError, IndexError):
            log.warning("[GroupId %s] cannot upgrade to a consumer group: malformed embedded "
                        "consumer protocol", gid)
            return False
        return True

    def upgrade(self, classic: MigratingGroup) -> None:
        """Build a consumer group from a classic group (Kafka's
        ``ConsumerGroup.fromClassicGroup``); :meth:`can_upgrade` must have said yes. Members
        keep their last assignment as current and target, at member epoch = generation."""
        gid = classic.group_id
        group = self._groups[gid] = self._new_group(gid)
        group.group_epoch = group.assignment_epoch = classic.generation
        topics = self._topics()
        now = self._clock()
        for cm in classic.members:
            meta = dict(cm.protocols).get(classic.protocol_name or "", cm.protocols[0][1])
            sub = consumer_protocol.decode_subscription(meta)
            assigned: dict[uuid.UUID, frozenset[int]] = {}
            for name, ps in decode_assignment(cm.assignment).items():
                if name in topics:
                    tid, count = topics[name]
                    valid = frozenset(p for p in ps if 0 <= p < count)
                    if valid:
                        assigned[tid] = assigned.get(tid, frozenset()) | valid
            m = _Member(
                member_id=cm.member_id, instance_id=cm.instance_id,
                rack_id=sub.rack_id or None, client_id=cm.client_id,
                client_host=cm.client_host, rebalance_timeout_ms=cm.rebalance_timeout_ms,
                subscribed_topic_names=tuple(sorted(set(sub.topics))),
                member_epoch=classic.generation, previous_member_epoch=classic.generation,
                classic=ClassicMemberMetadata(cm.session_timeout_ms, cm.protocols))
            group.members[cm.member_id] = m
            if cm.instance_id:
                group.static_members[cm.instance_id] = cm.member_id
            group.target[cm.member_id] = dict(assigned)
            for tid, held in assigned.items():
                for p in held:
                    group.owners.setdefault((tid, p), cm.member_id)
            # Two members claiming a partition (a leader's bad assignment): the first keeps it.
            m.assigned = {tid: frozenset(p for p in held if group.owners[(tid, p)] == cm.member_id)
                          for tid, held in assigned.items()}
            m.session_deadline = now + cm.session_timeout_ms
            self._arm(gid, m, "session")
        self._refresh_subscriptions(group, topics)
        group.dirty.update(group.members)
        log.info("[GroupId %s] upgraded from a classic group at generation %d with %d "
                 "member(s)", gid, classic.generation, len(classic.members))
        self._flush(group)

    # -- timers --------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """Earliest absolute time (ms) at which :meth:`on_timer` has work, or ``None``."""
        while self._timers:
            deadline, _seq, kind, gid, mid = self._timers[0]
            member = self._timer_member(gid, mid)
            if member is None or member.queued.get(kind) != deadline:
                heapq.heappop(self._timers)  # stale wake-up
                continue
            actual = self._deadline(member, kind)
            if actual is None:
                heapq.heappop(self._timers)
                member.queued.pop(kind, None)
                continue
            if actual != deadline:  # the deadline moved: requeue it exactly
                heapq.heappop(self._timers)
                member.queued.pop(kind, None)
                self._arm(gid, member, kind)
                continue
            return deadline
        return None

    def on_timer(self, now_ms: int) -> None:
        """Expire sessions and rebalance timeouts due at ``now_ms``."""
        while True:
            deadline = self.next_deadline()
            if deadline is None or deadline > now_ms:
                return
            _d, _seq, kind, gid, mid = heapq.heappop(self._timers)
            group = self._groups[gid]
            member = group.members[mid]
            member.queued.pop(kind, None)
            if kind == "session":
                log.info("[GroupId %s] member %s fenced: session expired", gid, mid)
                self._fence(group, member)
            elif (
                member.state == MemberState.UNREVOKED_PARTITIONS
                and member.member_epoch == member.rebalance_epoch
            ):
                log.info(
                    "[GroupId %s] member %s fenced: did not revoke within %d ms (epoch %d)",
                    gid, mid, member.rebalance_timeout_ms, member.member_epoch,
                )  # fmt: skip
                self._fence(group, member)
            else:
                member.rebalance_deadline = None

    # -- persistence ---------------------------------------------------------------------------

    def drain_records(self) -> list[GroupRecord]:
        out, self._records = self._records, []
        return out

    def replay(self, record: GroupRecord) -> None:
        """Apply one stored record (log order; latest per key wins; ``None`` = tombstone).
        Records of other kinds are ignored."""
        kind = record.key[0]
        if kind == "consumer":
            gid = record.key[1]
            if record.value is None:
                self._groups.pop(gid, None)
                return
            group = self._groups.get(gid)
            if group is None:
                group = self._groups[gid] = self._new_group(gid)
            v = record.value
            group.group_epoch = v["group_epoch"]
            group.assignment_epoch = v["assignment_epoch"]
            group.assignor = v["assignor"] if v["assignor"] in ASSIGNORS else self._assignors[0]
            group.subscription_metadata = {
                name: (uuid.UUID(tid), n) for name, (tid, n) in v["subscription_metadata"].items()
            }
            group.resolved_regex = {r: frozenset(ns) for r, ns in v["resolved_regex"].items()}
            group.persisted = v
        elif kind == "consumer_member":
            gid, mid = record.key[1], record.key[2]
            group = self._groups.get(gid)
            if record.value is None:
                if group is not None:
                    group.members.pop(mid, None)
                    group.target.pop(mid, None)
                return
            if group is None:
                group = self._groups[gid] = self._new_group(gid)
            v = record.value
            group.members[mid] = _Member(
                member_id=mid,
                instance_id=v["instance_id"],
                rack_id=v["rack_id"],
                client_id=v["client_id"],
                client_host=v["client_host"],
                rebalance_timeout_ms=v["rebalance_timeout_ms"],
                subscribed_topic_names=tuple(v["subscribed_topic_names"]),
                subscribed_topic_regex=v["subscribed_topic_regex"],
                server_assignor=v["server_assignor"],
                member_epoch=v["member_epoch"],
                previous_member_epoch=v["previous_member_epoch"],
                state=v["state"],
                assigned=decode_partitions(v["assigned"]),
                pending_revocation=decode_partitions(v["pending_revocation"]),
                classic=_classic_from_value(v.get("classic")),
                persisted=v,
            )
            group.target[mid] = decode_partitions(v["target"])

    def loaded(self) -> None:
        """All records replayed: rebuild derived state, restart timers from now, and catch up
        with topic changes that happened while the coordinator was away."""
        now = self._clock()
        self._timers.clear()
        topics = self._topics()
        for group in list(self._groups.values()):
            group.static_members = {
                m.instance_id: m.member_id for m in group.members.values() if m.instance_id
            }
            group.owners = {}
            for m in sorted(group.members.values(), key=lambda m: m.member_id):
                for tid, ps in itertools.chain(m.assigned.items(), m.pending_revocation.items()):
                    for p in ps:
                        if group.owners.setdefault((tid, p), m.member_id) != m.member_id:
                            log.warning(
                                "[GroupId %s] partition %s-%d owned by %s and %s in the log",
                                group.group_id, tid, p, group.owners[(tid, p)], m.member_id,
                            )  # fmt: skip
                m.queued.clear()
                m.session_deadline = now + self._session_timeout(m)
                self._arm(group.group_id, m, "session")
                m.rebalance_deadline = None
                if m.state == MemberState.UNREVOKED_PARTITIONS and m.member_epoch >= 0:
                    m.rebalance_epoch = m.member_epoch
                    m.rebalance_deadline = now + m.rebalance_timeout_ms
                    self._arm(group.group_id, m, "rebalance")
            if self._refresh_subscriptions(group, topics) or (
                group.group_epoch > group.assignment_epoch
            ):
                self._bump(group)
            self._flush(group)

    # -- request handling ----------------------------------------------------------------------

    def _validate(
        self,
        *,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: list[str] | None,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
        topic_partitions: TopicPartitions | None,
        api_version: int,
    ) -> None:
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid`` (same order, messages)."""
        bad = ErrorCode.INVALID_REQUEST
        if (
            api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION
            or member_epoch > 0
            or member_epoch == LEAVE_GROUP_MEMBER_EPOCH
        ) and member_id == "":
            raise GroupRejected(bad, "MemberId can't be empty.")
        if group_id == "":
            raise GroupRejected(bad, "GroupId can't be empty.")
        if instance_id == "":
            raise GroupRejected(bad, "InstanceId can't be empty.")
        if rack_id == "":
            raise GroupRejected(bad, "RackId can't be empty.")
        if member_epoch == 0:
            if rebalance_timeout_ms == -1:
                raise GroupRejected(bad, "RebalanceTimeoutMs must be provided in first request.")
            if topic_partitions is None or topic_partitions:
                raise GroupRejected(bad, "TopicPartitions must be empty when (re-)joining.")
            if subscribed_topic_names is None and subscribed_topic_regex is None:
                raise GroupRejected(
                    bad,
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                    "when (re-)joining.",
                )
        elif member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if instance_id is None:
                raise GroupRejected(bad, "InstanceId can't be null.")
        elif member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise GroupRejected(bad, "MemberEpoch is invalid.")
        if server_assignor is not None and server_assignor not in self._assignors:
            raise GroupRejected(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self._assignors)}.",
            )
        if subscribed_topic_regex:
            compiled = _compile(subscribed_topic_regex)
            if isinstance(compiled, str):
                raise GroupRejected(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{subscribed_topic_regex}` is not a valid regular "
                    f"expression: {compiled}.",
                )

    def _leave(
        self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None
    ) -> HeartbeatResult:
        group = self._groups.get(group_id)
        if group is None:
            raise GroupRejected(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise GroupRejected(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {group_id}.",
                )
        else:
            member = self._static_member(group, instance_id, member_id)
        if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # The static member keeps its partitions (and the group its target) until it
            # comes back or its session expires; partitions it was revoking are released.
            log.info("[GroupId %s] static member %s left temporarily", group_id, member.member_id)
            self._set_partitions(group, member, member.assigned, {})
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            member.rebalance_deadline = None
            group.dirty.add(member.member_id)
        else:
            log.info("[GroupId %s] member %s left the group", group_id, member.member_id)
            self._fence(group, member)
            return HeartbeatResult(ErrorCode.NONE, None, member.member_id, member_epoch, 0, None)
        self._flush(group)
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, member_epoch, 0, None)

    def _static_member(self, group: _Group, instance_id: str, member_id: str) -> _Member:
        """The static member holding ``instance_id``, which must be ``member_id``."""
        mid = group.static_members.get(instance_id)
        if mid is None:
            raise GroupRejected(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if mid != member_id:
            raise GroupRejected(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {mid}.",
            )
        return group.members[mid]

    @staticmethod
    def _check_epoch(member: _Member, epoch: int, owned: dict[uuid.UUID, set[int]] | None) -> None:
        """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid`` (epoch 0 always passes)."""
        if epoch == 0:
            return
        if epoch > member.member_epoch:
            raise GroupRejected(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                f"abandon all its partitions and rejoin.",
            )
        if epoch < member.member_epoch and (
            epoch != member.previous_member_epoch or not _is_subset(owned, member.assigned)
        ):
            raise GroupRejected(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                f"abandon all its partitions and rejoin.",
            )

    def _heartbeat(
        self,
        *,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: list[str] | None,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
        owned: dict[uuid.UUID, set[int]] | None,
        client_id: str,
        client_host: str,
    ) -> HeartbeatResult:
        joining = member_epoch == 0
        group = self._groups.get(group_id)
        if group is None and not joining:
            raise GroupRejected(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        members = group.members if group is not None else {}
        max_size = self._config.group_consumer_max_size
        if len(members) >= max_size and (member_id == "" or member_id not in members):
            raise GroupRejected(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {max_size} members.",
            )
        if member_id == "":
            member_id = _new_member_id()

        # Find or create the member; every check happens before any state changes.
        member = members.get(member_id)
        replaced: _Member | None = None
        if instance_id is None or (group is not None and member is not None and joining):
            # Dynamic member, or a static member rejoining under its own member id.
            if member is None and not joining:
                raise GroupRejected(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {group_id}.",
                )
            if member is not None:
                if instance_id is not None and member.instance_id not in (None, instance_id):
                    raise GroupRejected(
                        ErrorCode.INVALID_REQUEST,
                        f"Member {member_id} cannot change its instance id from "
                        f"{member.instance_id} to {instance_id}.",
                    )
                if instance_id is not None and member.instance_id is None:
                    owner_id = group.static_members.get(instance_id) if group else None
                    if owner_id is not None:
                        raise GroupRejected(
                            ErrorCode.UNRELEASED_INSTANCE_ID,
                            f"Static member {member_id} with instance id {instance_id} cannot "
                            f"join the group because the instance id is owned by {owner_id} "
                            f"member.",
                        )
                self._check_epoch(member, member_epoch, owned)
        elif joining:
            holder_id = group.static_members.get(instance_id) if group else None
            if holder_id is not None:
                static = members[holder_id]
                if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    raise GroupRejected(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {instance_id} cannot join "
                        f"the group because the instance id is owned by {holder_id} member.",
                    )
                replaced = static
        else:
            assert group is not None
            member = self._static_member(group, instance_id, member_id)
            self._check_epoch(member, member_epoch, owned)

        # From here on the request is accepted.
        now = self._clock()
        created = group is None
        if group is None:
            group = self._groups[group_id] = self._new_group(group_id)
        bump = created
        if replaced is not None:
            log.info(
                "[GroupId %s] static member %s (instance %s) replaces %s",
                group_id, member_id, instance_id, replaced.member_id,
            )  # fmt: skip
            member = self._replace_static_member(group, replaced, member_id)
        elif member is None:
            log.info("[GroupId %s] member %s joins", group_id, member_id)
            member = _Member(member_id=member_id)
            group.members[member_id] = member
            group.target.setdefault(member_id, {})
        elif member.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # The static member is back under its own id: reset its epoch, reconcile again.
            member.member_epoch = member.previous_member_epoch = 0

        old_subscription = (member.subscribed_topic_names, member.subscribed_topic_regex)
        old_assigned = member.assigned
        if instance_id is not None:
            member.instance_id = instance_id
            group.static_members[instance_id] = member_id
        if rack_id is not None:
            member.rack_id = rack_id
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if server_assignor is not None:
            member.server_assignor = server_assignor
        if subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(sorted(set(subscribed_topic_names)))
        if subscribed_topic_regex is not None:
            member.subscribed_topic_regex = subscribed_topic_regex or None
        member.client_id = client_id
        member.client_host = client_host
        group.dirty.add(member_id)

        if (member.subscribed_topic_names, member.subscribed_topic_regex) != old_subscription:
            log.info(
                "[GroupId %s] member %s subscribes to %s regex=%r",
                group_id, member_id, list(member.subscribed_topic_names),
                member.subscribed_topic_regex,
            )  # fmt: skip
            self._refresh_subscriptions(group, self._topics())
            bump = True
        if bump:
            self._bump(group)

        self._reconcile(group, member, owned, now)
        member.session_deadline = now + self._session_timeout(member)
        self._arm(group_id, member, "session")
        self._flush(group)

        full = joining or (
            rebalance_timeout_ms != -1
            and (subscribed_topic_names is not None or subscribed_topic_regex is not None)
            and owned is not None
        )
        return HeartbeatResult(
            error_code=ErrorCode.NONE,
            error_message=None,
            member_id=member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self._config.group_consumer_heartbeat_interval_ms,
            assignment=partitions_to_wire(member.assigned)
            if full or member.assigned != old_assigned
            else None,
        )

    # -- group state changes -------------------------------------------------------------------

    def _new_group(self, group_id: str) -> _Group:
        return _Group(group_id=group_id, assignor=self._assignors[0])

    def _replace_static_member(self, group: _Group, old: _Member, member_id: str) -> _Member:
        """A new member id takes over a static member that left with epoch -2: it inherits
        its subscription, assignment and target (Kafka's ``replaceMember``)."""
        new = _Member(
            member_id=member_id,
            instance_id=old.instance_id,
            rack_id=old.rack_id,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            subscribed_topic_names=old.subscribed_topic_names,
            subscribed_topic_regex=old.subscribed_topic_regex,
            server_assignor=old.server_assignor,
            member_epoch=0,
            previous_member_epoch=0,
            state=old.state,
        )
        assigned = old.assigned
        self._set_partitions(group, old, {}, {})
        del group.members[old.member_id]
        self._records.append(GroupRecord(("consumer_member", group.group_id, old.member_id), None))
        group.members[member_id] = new
        group.target[member_id] = group.target.pop(old.member_id, {})
        self._set_partitions(group, new, assigned, {})
        return new

    def _remove_member(self, group: _Group, member: _Member) -> None:
        """Fence/remove a member: free its partitions, bump the group epoch, reassign."""
        self._set_partitions(group, member, {}, {})
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        if member.instance_id and group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]
        member.session_deadline = member.rebalance_deadline = None
        self._records.append(
            GroupRecord(("consumer_member", group.group_id, member.member_id), None)
        )
        self._refresh_subscriptions(group, self._topics())
        self._bump(group)

    def _subscribed_names(self, group: _Group, member: _Member) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names |= group.resolved_regex.get(member.subscribed_topic_regex, frozenset())
        return names

    def _refresh_subscriptions(
        self, group: _Group, topics: dict[str, tuple[uuid.UUID, int]]
    ) -> bool:
        """Re-resolve the group's regexes and subscribed topics' metadata; True if changed."""
        resolved: dict[str, frozenset[str]] = {}
        for m in group.members.values():
            regex = m.subscribed_topic_regex
            if regex and regex not in resolved:
                pattern = _compile(regex)
                resolved[regex] = (
                    frozenset()
                    if isinstance(pattern, str)
                    else frozenset(
                        n for n in topics if not n.startswith("__") and pattern.fullmatch(n)
                    )
                )
        metadata: dict[str, tuple[uuid.UUID, int]] = {}
        for m in group.members.values():
            names = set(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                names |= resolved[m.subscribed_topic_regex]
            for n in names:
                if n in topics:
                    metadata[n] = topics[n]
        changed = resolved != group.resolved_regex or metadata != group.subscription_metadata
        group.resolved_regex = resolved
        group.subscription_metadata = metadata
        return changed

    def _preferred_assignor(self, group: _Group) -> str:
        """The assignor most members ask for (config order breaks ties), else the default."""
        votes = Counter(
            m.server_assignor for m in group.members.values() if m.server_assignor in ASSIGNORS
        )
        if not votes:
            return self._assignors[0]
        rank = {n: i for i, n in enumerate(self._assignors)}
        return min(votes, key=lambda n: (-votes[n], rank.get(n, len(rank)), n))

    def _bump(self, group: _Group) -> None:
        """Bump the group epoch and compute the new target assignment at once."""
        group.group_epoch += 1
        name = self._preferred_assignor(group)
        topics = {tid: (n, count) for n, (tid, count) in group.subscription_metadata.items()}
        specs = {
            mid: (self._subscribed_names(group, m), group.target.get(mid, {}), m.rack_id)
            for mid, m in group.members.items()
        }
        result = ASSIGNORS[name].assign(specs, topics)
        group.target = {
            mid: {tid: frozenset(ps) for tid, ps in result.get(mid, {}).items() if ps}
            for mid in group.members
        }
        group.assignment_epoch = group.group_epoch
        group.assignor = name
        group.dirty.update(group.members)
        log.info(
            "[GroupId %s] epoch %d: new target assignment with the %r assignor",
            group.group_id, group.group_epoch, name,
        )  # fmt: skip

    def _set_partitions(
        self, group: _Group, member: _Member, assigned: Partitions, pending: Partitions
    ) -> None:
        """Replace a member's assigned and pending-revocation sets, keeping ``owners``."""
        for parts in (member.assigned, member.pending_revocation):
            for tid, ps in parts.items():
                for p in ps:
                    if group.owners.get((tid, p)) == member.member_id:
                        del group.owners[(tid, p)]
        for parts in (assigned, pending):
            for tid, ps in parts.items():
                for p in ps:
                    holder = group.owners.setdefault((tid, p), member.member_id)
                    if holder != member.member_id:
                        raise AssertionError(
                            f"partition {tid}-{p} given to {member.member_id} while owned by "
                            f"{holder}"
                        )
        member.assigned = assigned
        member.pending_revocation = pending
        group.dirty.add(member.member_id)

    def _reconcile(
        self,
        group: _Group,
        member: _Member,
        owned: dict[uuid.UUID, set[int]] | None,
        now: int,
    ) -> None:
        """Move ``member`` towards its target (Kafka's ``CurrentAssignmentBuilder``)."""
        target_epoch = group.assignment_epoch
        if member.state == MemberState.STABLE and member.member_epoch == target_epoch:
            return
        if member.state == MemberState.UNREVOKED_PARTITIONS and _owns_any(
            owned, member.pending_revocation
        ):
            return
        target = group.target.get(member.member_id, {})
        keep: dict[uuid.UUID, frozenset[int]] = {}
        revoke: dict[uuid.UUID, frozenset[int]] = {}
        add: dict[uuid.UUID, frozenset[int]] = {}
        unreleased = False
        for tid in set(target) | set(member.assigned):
            want = target.get(tid, frozenset())
            have = member.assigned.get(tid, frozenset())
            if have & want:
                keep[tid] = have & want
            if have - want:
                revoke[tid] = have - want
            free = set()
            for p in want - have:
                holder = group.owners.get((tid, p))
                if holder is None or holder == member.member_id:
                    free.add(p)
                else:
                    unreleased = True
            if free:
                add[tid] = frozenset(free)

        before = (member.state, member.member_epoch, member.assigned, member.pending_revocation)
        if revoke and _owns_any(owned, revoke):
            # Revoke first; the epoch stays until the client acknowledges.
            self._set_partitions(group, member, keep, revoke)
            self._set_epoch(member, member.member_epoch)
            member.state = MemberState.UNREVOKED_PARTITIONS
        else:
            assigned = dict(keep)
            for tid, ps in add.items():
                assigned[tid] = assigned.get(tid, frozenset()) | ps
            self._set_partitions(group, member, assigned, {})
            self._set_epoch(member, target_epoch)
            member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        after = (member.state, member.member_epoch, member.assigned, member.pending_revocation)
        if after == before:
            return
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            member.rebalance_epoch = member.member_epoch
            member.rebalance_deadline = now + member.rebalance_timeout_ms
            self._arm(group.group_id, member, "rebalance")
        else:
            member.rebalance_deadline = None

    @staticmethod
    def _set_epoch(member: _Member, epoch: int) -> None:
        """Kafka's ``updateMemberEpoch``: the previous epoch is the one being replaced."""
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = epoch

    # -- timers and records --------------------------------------------------------------------

    def _timer_member(self, gid: str, mid: str) -> _Member | None:
        group = self._groups.get(gid)
        return None if group is None else group.members.get(mid)

    @staticmethod
    def _deadline(member: _Member, kind: str) -> int | None:
        return member.session_deadline if kind == "session" else member.rebalance_deadline

    def _arm(self, gid: str, member: _Member, kind: str) -> None:
        """Make sure a heap entry wakes us no later than the member's ``kind`` deadline. A
        deadline that moves later keeps its old entry; ``next_deadline`` requeues it."""
        deadline = self._deadline(member, kind)
        if deadline is None:
            return
        queued = member.queued.get(kind)
        if queued is None or deadline < queued:
            member.queued[kind] = deadline
            heapq.heappush(self._timers, (deadline, next(self._seq), kind, gid, member.member_id))

    def _group_value(self, group: _Group) -> dict[str, Any]:
        return {
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor": group.assignor,
            "subscription_metadata": {
                n: [str(tid), count]
                for n, (tid, count) in sorted(group.subscription_metadata.items())
            },
            "resolved_regex": {r: sorted(ns) for r, ns in sorted(group.resolved_regex.items())},
        }

    def _member_value(self, group: _Group, m: _Member) -> dict[str, Any]:
        return {
            "instance_id": m.instance_id,
            "rack_id": m.rack_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "subscribed_topic_names": list(m.subscribed_topic_names),
            "subscribed_topic_regex": m.subscribed_topic_regex,
            "server_assignor": m.server_assignor,
            "member_epoch": m.member_epoch,
            "previous_member_epoch": m.previous_member_epoch,
            "state": m.state,
            "assigned": encode_partitions(m.assigned),
            "pending_revocation": encode_partitions(m.pending_revocation),
            "target": encode_partitions(group.target.get(m.member_id, {})),
            "classic": None if m.classic is None else {
                "session_timeout_ms": m.classic.session_timeout_ms,
                "protocols": [[n, base64.b64encode(meta).decode("ascii")]
                              for n, meta in m.classic.protocols],
            },
        }

    def _flush(self, group: _Group) -> None:
        """Emit records for whatever changed in ``group`` since its last records."""
        if group.group_id not in self._groups:
            return
        value = self._group_value(group)
        if value != group.persisted:
            group.persisted = value
            self._records.append(GroupRecord(("consumer", group.group_id), value))
        for mid in sorted(group.dirty):
            m = group.members.get(mid)
            if m is None:
                continue
            mv = self._member_value(group, m)
            if mv != m.persisted:
                m.persisted = mv
                self._records.append(GroupRecord(("consumer_member", group.group_id, mid), mv))
        group.dirty.clear()
