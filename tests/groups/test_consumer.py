"""KIP-848 consumer groups (:mod:`snakka.groups.consumer`) driven with a fake clock.

Most tests drive :class:`Client`, a well-behaved consumer that follows the responses the way
librdkafka and the Java client do (send owned partitions when they change, adopt the
assignment when one is sent, rejoin with epoch 0 after FENCED_MEMBER_EPOCH/UNKNOWN_MEMBER_ID),
and check after every step that no partition is ever owned by two members.
"""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from snakka.groups.consumer import (
    ConsumerGroups,
    HeartbeatResult,
    MemberState,
)
from snakka.groups.types import ConsumerState, GroupConfig, GroupRecord
from snakka.protocol.errors import ErrorCode as E

A, B, C, R1, R2 = (uuid.UUID(int=i) for i in (1, 2, 3, 4, 5))
SESSION = GroupConfig().group_consumer_session_timeout_ms
INTERVAL = GroupConfig().group_consumer_heartbeat_interval_ms


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class World:
    """A coordinator, its clock and topic metadata, and the record log it wrote."""

    def __init__(self, config: GroupConfig | None = None, **topics: tuple[uuid.UUID, int]):
        self.clock = Clock()
        self.topics: dict[str, tuple[uuid.UUID, int]] = topics or {"a": (A, 6)}
        self.config = config or GroupConfig()
        self.log: list[GroupRecord] = []
        self.cg = ConsumerGroups(self.config, self.clock, lambda: dict(self.topics))

    def drain(self) -> list[GroupRecord]:
        records = self.cg.drain_records()
        self.log.extend(records)
        return records

    def advance(self, ms: int) -> None:
        self.clock.now += ms
        self.cg.on_timer(self.clock.now)
        self.drain()

    def restart(self) -> list[GroupRecord]:
        """A new coordinator replays the log (through JSON, as the shell stores it); returns
        the records written at load."""
        self.drain()
        self.cg = ConsumerGroups(self.config, self.clock, lambda: dict(self.topics))
        for record in self.log:
            key, value = json.loads(json.dumps([record.key, record.value]))
            self.cg.replay(GroupRecord(tuple(key), value))
        self.cg.loaded()
        return self.drain()

    def hb(self, **kw) -> HeartbeatResult:
        args = dict(
            group_id="g",
            member_id="m",
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            rebalance_timeout_ms=-1,
            subscribed_topic_names=None,
            subscribed_topic_regex=None,
            server_assignor=None,
            topic_partitions=None,
            api_version=1,
        )
        args.update(kw)
        result = self.cg.heartbeat(**args)
        self.drain()
        return result

    def join(self, member_id: str, topics=("a",), **kw) -> HeartbeatResult:
        kw.setdefault("rebalance_timeout_ms", 60_000)
        kw.setdefault("subscribed_topic_names", list(topics))
        kw.setdefault("topic_partitions", [])
        return self.hb(member_id=member_id, member_epoch=0, **kw)

    def members(self, group: str = "g"):
        d = self.cg.describe(group)
        return {} if d is None else {m.member_id: m for m in d.members}


def parts(assignment) -> dict[uuid.UUID, set[int]]:
    """Wire or described assignment -> {topic_id: partitions}."""
    out: dict[uuid.UUID, set[int]] = {}
    for tid, ps in assignment:
        out.setdefault(tid, set()).update(ps)
    return out


class Client:
    """A well-behaved KIP-848 consumer."""

    def __init__(
        self,
        world: World,
        member_id: str,
        topics=("a",),
        regex: str | None = None,
        instance_id: str | None = None,
        rebalance_timeout_ms: int = 60_000,
        assignor: str | None = None,
    ) -> None:
        self.w = world
        self.member_id = member_id
        self.topics = list(topics)
        self.regex = regex
        self.instance_id = instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.assignor = assignor
        self.epoch = 0
        self.owned: dict[uuid.UUID, set[int]] = {}
        self.sent_owned: dict[uuid.UUID, set[int]] | None = None
        self.full = True
        self.epochs_seen: list[int] = []

    def _owned_wire(self):
        return [(t, sorted(p)) for t, p in sorted(self.owned.items()) if p]

    def heartbeat(self, lose_response: bool = False) -> HeartbeatResult:
        joining = self.epoch == 0
        send_owned = joining or self.full or self.owned != self.sent_owned
        full = joining or self.full
        result = self.w.hb(
            member_id=self.member_id,
            member_epoch=self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=self.topics if full else None,
            subscribed_topic_regex=self.regex if full else None,
            server_assignor=self.assignor if full else None,
            topic_partitions=([] if joining else self._owned_wire()) if send_owned else None,
        )
        if send_owned:
            self.sent_owned = {t: set(p) for t, p in self.owned.items()}
        if lose_response:
            self.full = True  # Kafka clients resend everything after a failed heartbeat
            return result
        if result.error_code in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
            self.owned, self.epoch, self.full, self.epochs_seen = {}, 0, True, []
            return result
        assert result.error_code == E.NONE, result
        assert result.member_id == self.member_id
        self.epoch = result.member_epoch
        self.epochs_seen.append(result.member_epoch)
        self.full = False
        if result.assignment is not None:
            self.owned = parts(result.assignment)
        return result

    def leave(self) -> HeartbeatResult:
        epoch = -2 if self.instance_id else -1
        result = self.w.hb(
            member_id=self.member_id, member_epoch=epoch, instance_id=self.instance_id
        )
        self.owned = {}
        return result


def check_no_double_ownership(world: World, clients, group: str = "g") -> None:
    """Server: assigned ∪ pending-revocation sets are disjoint. Clients: a client whose
    member still exists owns only partitions the server attributes to it."""
    server = world.members(group)
    holder: dict[tuple[uuid.UUID, int], str] = {}
    for mid, m in server.items():
        for tid, ps in parts(m.assignment + m.pending_revocation).items():
            for p in ps:
                assert (tid, p) not in holder, f"{tid}-{p}: {holder[(tid, p)]} and {mid}"
                holder[(tid, p)] = mid
    for c in clients:
        if c.member_id in server:
            for tid, ps in c.owned.items():
                for p in ps:
                    assert holder.get((tid, p)) == c.member_id, (c.member_id, tid, p, holder)


def settle(world: World, clients, rounds: int = 20, group: str = "g") -> None:
    """Heartbeat every client in turn (checking the invariant each step) until stable."""
    for _ in range(rounds):
        for c in clients:
            c.heartbeat()
            check_no_double_ownership(world, clients, group)
        if converged(world, clients, group):
            return
        world.advance(100)
    raise AssertionError(f"no convergence: {world.cg.describe(group)}")


def converged(world: World, clients, group: str = "g") -> bool:
    d = world.cg.describe(group)
    if d is None or d.state != ConsumerState.STABLE:
        return False
    server = {m.member_id: m for m in d.members}
    if set(server) != {c.member_id for c in clients}:
        return False
    return all(
        c.owned == parts(server[c.member_id].target_assignment) and c.epoch == d.assignment_epoch
        for c in clients
    )


def counts(clients):
    return sorted(sum(len(p) for p in c.owned.values()) for c in clients)


# -- joining and reconciliation ---------------------------------------------------------------


def test_first_member_creates_group_and_gets_everything():
    w = World()
    r = w.join("m1")
    assert r.error_code == E.NONE and r.member_id == "m1" and r.member_epoch == 1
    assert r.heartbeat_interval_ms == INTERVAL
    assert r.assignment == [(A, [0, 1, 2, 3, 4, 5])]
    d = w.cg.describe("g")
    assert (d.state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        ConsumerState.STABLE, 1, 1, "uniform",
    )  # fmt: skip
    # Nothing changed: the next heartbeat carries no assignment and writes no record.
    r = w.hb(member_id="m1", member_epoch=1)
    assert r.assignment is None and r.member_epoch == 1
    assert w.drain() == []


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7])
def test_n_members_join_and_balance(n):
    w = World(a=(A, 6), b=(B, 5))
    clients: list[Client] = []
    for i in range(n):
        clients.append(Client(w, f"m{i}", topics=("a", "b")))
        settle(w, clients)
    c = counts(clients)
    assert sum(c) == 11 and c[-1] - c[0] <= 1
    assert w.cg.describe("g").group_epoch == n


def test_join_revokes_before_assigning():
    w = World()
    m1 = Client(w, "m1")
    m1.heartbeat()
    assert m1.owned == {A: {0, 1, 2, 3, 4, 5}} and m1.epoch == 1
    m2 = Client(w, "m2")
    r = m2.heartbeat()
    # m2 is at the new epoch but gets nothing yet: all of its target is still owned by m1.
    assert r.member_epoch == 2 and r.assignment == []
    assert w.members()["m2"].state == MemberState.UNRELEASED_PARTITIONS
    # m1 is asked to revoke (its epoch stays at 1 until it acknowledges).
    r = m1.heartbeat()
    assert r.member_epoch == 1 and len(m1.owned[A]) == 3
    m1_members = w.members()["m1"]
    assert m1_members.state == MemberState.UNREVOKED_PARTITIONS
    revoked = parts(m1_members.pending_revocation)[A]
    assert revoked == {0, 1, 2, 3, 4, 5} - m1.owned[A]
    # m2 still gets nothing while m1 holds the partitions.
    assert m2.heartbeat().assignment is None and m2.owned == {}
    check_no_double_ownership(w, [m1, m2])
    # m1 acknowledges by reporting its owned partitions: it moves to epoch 2.
    r = m1.heartbeat()
    assert r.member_epoch == 2 and r.assignment is None
    # Now m2 gets the released partitions.
    r = m2.heartbeat()
    assert parts(r.assignment) == {A: revoked}
    assert converged(w, [m1, m2])


def test_revocation_not_acknowledged_without_owned_partitions():
    """A heartbeat without topic_partitions does not count as acknowledging a revocation."""
    w = World()
    m1, m2 = Client(w, "m1"), Client(w, "m2")
    m1.heartbeat()
    m2.heartbeat()
    m1.heartbeat()  # revocation requested
    for _ in range(3):
        r = w.hb(member_id="m1", member_epoch=1)  # topic_partitions=None
        assert r.member_epoch == 1
    assert w.members()["m1"].state == MemberState.UNREVOKED_PARTITIONS


def test_full_request_gets_assignment():
    w = World()
    w.join("m1")
    r = w.hb(
        member_id="m1",
        member_epoch=1,
        rebalance_timeout_ms=1000,
        subscribed_topic_names=["a"],
        topic_partitions=[(A, [0, 1, 2, 3, 4, 5])],
    )
    assert r.assignment == [(A, [0, 1, 2, 3, 4, 5])]


def test_v0_server_generates_member_id():
    w = World()
    r = w.join("", api_version=0)
    assert r.error_code == E.NONE and len(r.member_id) == 22 and not r.member_id.startswith("-")
    r2 = w.hb(member_id=r.member_id, member_epoch=1, api_version=0)
    assert r2.error_code == E.NONE
    # v1 requires the client to bring its own id.
    r = w.join("", api_version=1)
    assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, "MemberId can't be empty.")


def test_subscription_change_and_mixed_subscriptions():
    w = World(a=(A, 4), b=(B, 4))
    m1 = Client(w, "m1", topics=("a", "b"))
    m2 = Client(w, "m2", topics=("a",))
    settle(w, [m1, m2])
    assert set(m2.owned) <= {A}
    m2.topics, m2.full = ["b"], True  # the Java client resends the subscription
    settle(w, [m1, m2])
    assert set(m2.owned) == {B}


# -- leaving -----------------------------------------------------------------------------------


def test_dynamic_leave_releases_partitions_at_once():
    w = World()
    m1, m2 = Client(w, "m1"), Client(w, "m2")
    settle(w, [m1, m2])
    epoch = w.cg.describe("g").group_epoch
    r = m2.leave()
    assert (r.error_code, r.member_id, r.member_epoch) == (E.NONE, "m2", -1)
    assert set(w.members()) == {"m1"}
    assert w.cg.describe("g").group_epoch == epoch + 1
    assert any(rec.key == ("consumer_member", "g", "m2") and rec.value is None for rec in w.log)
    settle(w, [m1])
    assert m1.owned == {A: {0, 1, 2, 3, 4, 5}}
    # Leaving again: the member is gone.
    assert m2.leave().error_code == E.UNKNOWN_MEMBER_ID
    assert w.hb(group_id="nope", member_id="x", member_epoch=-1).error_code == (
        E.GROUP_ID_NOT_FOUND
    )


def test_static_member_temporary_leave_and_rejoin_keeps_partitions():
    w = World()
    s = Client(w, "s1", instance_id="i1")
    d = Client(w, "d1")
    settle(w, [s, d])
    kept = s.owned
    epoch = w.cg.describe("g").group_epoch
    r = s.leave()
    assert (r.error_code, r.member_epoch) == (E.NONE, -2)
    # The group epoch does not move and nobody else gets the partitions.
    assert w.cg.describe("g").group_epoch == epoch
    assert w.members()["s1"].member_epoch == -2
    for _ in range(3):
        d.heartbeat()
    assert not (d.owned.get(A, set()) & kept[A])
    # Another process with the same instance id but a new member id takes over.
    s2 = Client(w, "s2", instance_id="i1")
    r = s2.heartbeat()
    assert r.error_code == E.NONE and parts(r.assignment) == kept
    assert set(w.members()) == {"s2", "d1"}
    assert w.cg.describe("g").group_epoch == epoch
    settle(w, [s2, d])
    assert s2.owned == kept


def test_static_instance_id_held_by_active_member_is_unreleased():
    w = World()
    s = Client(w, "s1", instance_id="i1")
    s.heartbeat()
    r = w.join("s2", instance_id="i1")
    assert r.error_code == E.UNRELEASED_INSTANCE_ID
    # A heartbeat for the instance from another member id is fenced.
    r = w.hb(member_id="s2", member_epoch=1, instance_id="i1")
    assert r.error_code == E.FENCED_INSTANCE_ID
    r = w.hb(member_id="s2", member_epoch=1, instance_id="nope")
    assert r.error_code == E.UNKNOWN_MEMBER_ID
    # The holder rejoining under its own member id gets its state back (no error).
    s.epoch, s.owned = 0, {}
    r = s.heartbeat()
    assert r.error_code == E.NONE and s.owned == {A: {0, 1, 2, 3, 4, 5}}


def test_static_member_rejoins_under_own_id_after_leaving():
    w = World()
    s = Client(w, "s1", instance_id="i1")
    s.heartbeat()
    s.leave()
    s.epoch = 0
    r = s.heartbeat()
    assert r.error_code == E.NONE and r.member_epoch == 1 and s.owned[A] == set(range(6))


def test_static_member_session_expiry_after_leave_releases_partitions():
    w = World()
    s, d = Client(w, "s1", instance_id="i1"), Client(w, "d1")
    settle(w, [s, d])
    s.leave()
    for _ in range(SESSION // INTERVAL + 2):
        w.advance(INTERVAL)
        d.heartbeat()
    assert set(w.members()) == {"d1"}
    settle(w, [d])
    assert d.owned == {A: set(range(6))}
    # The instance id is free again.
    assert w.join("s9", instance_id="i1").error_code == E.NONE


def test_static_leave_validation():
    w = World()
    Client(w, "s1", instance_id="i1").heartbeat()
    r = w.hb(member_id="x", member_epoch=-2, instance_id="i1")
    assert r.error_code == E.FENCED_INSTANCE_ID
    r = w.hb(member_id="s1", member_epoch=-2, instance_id="i2")
    assert r.error_code == E.UNKNOWN_MEMBER_ID
    r = w.hb(member_id="s1", member_epoch=-2, instance_id=None)
    assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, "InstanceId can't be null.")


# -- fencing -----------------------------------------------------------------------------------


def test_epoch_fencing():
    w = World()
    m1, m2 = Client(w, "m1"), Client(w, "m2")
    settle(w, [m1, m2])
    epoch = m1.epoch  # 2; m1's previous epoch is 1
    r = w.hb(member_id="m1", member_epoch=epoch + 1)
    assert r.error_code == E.FENCED_MEMBER_EPOCH and "greater" in r.error_message
    # Previous epoch with owned partitions ⊆ assignment: accepted (lost response).
    r = w.hb(member_id="m1", member_epoch=epoch - 1, topic_partitions=m1._owned_wire())
    assert r.error_code == E.NONE and r.member_epoch == epoch
    # Previous epoch without owned partitions, or owning more: fenced.
    r = w.hb(member_id="m1", member_epoch=epoch - 1)
    assert r.error_code == E.FENCED_MEMBER_EPOCH and "smaller" in r.error_message
    r = w.hb(member_id="m1", member_epoch=epoch - 1, topic_partitions=[(A, list(range(6)))])
    assert r.error_code == E.FENCED_MEMBER_EPOCH
    # Older than the previous epoch: fenced.
    w.join("m3")
    settle(w, [m1, m2, Client(w, "m3")])
    r = w.hb(member_id="m1", member_epoch=epoch - 1, topic_partitions=m1._owned_wire())
    assert r.error_code == E.FENCED_MEMBER_EPOCH
    # Fenced members rejoin with epoch 0 and the same id, and get their partitions back.
    owned = m1.owned
    m1.epoch, m1.owned = 0, {}
    r = m1.heartbeat()
    assert r.error_code == E.NONE and m1.owned == owned


def test_unknown_member_and_group():
    w = World()
    w.join("m1")
    r = w.hb(member_id="ghost", member_epoch=3)
    assert r.error_code == E.UNKNOWN_MEMBER_ID
    r = w.hb(group_id="nogroup", member_id="m1", member_epoch=1)
    assert r.error_code == E.GROUP_ID_NOT_FOUND
    assert not w.cg.has_group("nogroup")


def test_session_expiry_fences_member():
    w = World()
    m1, m2 = Client(w, "m1"), Client(w, "m2")
    settle(w, [m1, m2])
    assert w.cg.next_deadline() == w.clock.now + SESSION
    w.advance(SESSION - 1)
    m1.heartbeat()
    assert set(w.members()) == {"m1", "m2"}
    w.advance(1)  # m2's session ends now
    assert set(w.members()) == {"m1"}
    assert w.cg.next_deadline() == w.clock.now - 1 + SESSION
    settle(w, [m1])
    assert m1.owned == {A: set(range(6))}
    # The fenced client learns it on its next heartbeat and rejoins.
    assert m2.heartbeat().error_code == E.UNKNOWN_MEMBER_ID and m2.owned == {}
    settle(w, [m1, m2])


def test_rebalance_timeout_fences_member_that_does_not_revoke():
    w = World()
    m1 = Client(w, "m1", rebalance_timeout_ms=10_000)
    m1.heartbeat()
    m2 = Client(w, "m2")
    m2.heartbeat()
    r = w.hb(member_id="m1", member_epoch=1)  # revocation requested, never acknowledged
    assert w.members()["m1"].state == MemberState.UNREVOKED_PARTITIONS
    assert r.member_epoch == 1
    assert w.cg.next_deadline() == w.clock.now + 10_000
    for _ in range(4):
        w.advance(2_500)
        w.hb(member_id="m1", member_epoch=1)  # heartbeats keep the session, not the epoch
    assert set(w.members()) == {"m2"}
    settle(w, [m2])
    assert m2.owned == {A: set(range(6))}


def test_rebalance_timer_cancelled_when_revocation_acknowledged():
    w = World()
    m1 = Client(w, "m1", rebalance_timeout_ms=10_000)
    m2 = Client(w, "m2")
    settle(w, [m1, m2])
    for _ in range(10):
        w.advance(2_000)
        m1.heartbeat()
        m2.heartbeat()
    assert set(w.members()) == {"m1", "m2"}


def test_timer_heap_stays_small_under_fast_heartbeats():
    w = World()
    clients = [Client(w, f"m{i}") for i in range(3)]
    settle(w, clients)
    for _ in range(500):
        w.clock.now += 1
        for c in clients:
            c.heartbeat()
    assert w.cg.next_deadline() == w.clock.now + SESSION
    assert len(w.cg._timers) <= 2 * len(clients)


def test_known_member_cannot_change_instance_id():
    w = World()
    Client(w, "s1", instance_id="i1").heartbeat()
    r = w.join("s1", instance_id="i2")
    assert r.error_code == E.INVALID_REQUEST
    # A dynamic member cannot claim an instance id another member holds.
    Client(w, "d1").heartbeat()
    assert w.join("d1", instance_id="i1").error_code == E.UNRELEASED_INSTANCE_ID


def test_group_max_size():
    w = World(GroupConfig(group_consumer_max_size=2))
    w.join("m1")
    w.join("m2")
    r = w.join("m3")
    assert r.error_code == E.GROUP_MAX_SIZE_REACHED and "capacity of 2" in r.error_message
    assert w.join("m1").error_code == E.NONE  # known members may rejoin


# -- bad requests ------------------------------------------------------------------------------

BAD = [
    (dict(group_id=""), E.INVALID_REQUEST, "GroupId can't be empty."),
    (dict(member_id="", member_epoch=5, api_version=0), E.INVALID_REQUEST, "MemberId can't be empty."),
    (dict(instance_id=""), E.INVALID_REQUEST, "InstanceId can't be empty."),
    (dict(rack_id=""), E.INVALID_REQUEST, "RackId can't be empty."),
    (
        dict(rebalance_timeout_ms=-1),
        E.INVALID_REQUEST,
        "RebalanceTimeoutMs must be provided in first request.",
    ),
    (dict(topic_partitions=None), E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
    (dict(topic_partitions=[(A, [0])]), E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
    (
        dict(subscribed_topic_names=None),
        E.INVALID_REQUEST,
        "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
    ),
    (dict(member_epoch=-3), E.INVALID_REQUEST, "MemberEpoch is invalid."),
    (
        dict(server_assignor="sticky"),
        E.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
    ),
    (dict(subscribed_topic_regex="a(b"), E.INVALID_REGULAR_EXPRESSION, None),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "code", "message"), BAD)
def test_bad_requests(overrides, code, message):
    w = World()
    args = dict(
        member_id="m1",
        member_epoch=0,
        rebalance_timeout_ms=1000,
        subscribed_topic_names=["a"],
        topic_partitions=[],
    )
    args.update(overrides)
    r = w.hb(**args)
    assert r.error_code == code
    assert r.error_message == message if message else r.error_message
    assert (r.member_id, r.assignment) == (None, None)
    # A rejected request leaves no trace.
    assert not w.cg.has_group(args.get("group_id", "g")) and w.log == []


# -- assignors ---------------------------------------------------------------------------------


def test_range_assignor_chosen_by_members():
    w = World(a=(A, 4), b=(B, 4))
    m1 = Client(w, "m1", topics=("a", "b"), assignor="range")
    m2 = Client(w, "m2", topics=("a", "b"), assignor="range")
    settle(w, [m1, m2])
    assert w.cg.describe("g").assignor_name == "range"
    assert m1.owned == {A: {0, 1}, B: {0, 1}} and m2.owned == {A: {2, 3}, B: {2, 3}}


def test_default_assignor_is_first_configured():
    w = World(GroupConfig(group_consumer_assignors=("range", "uniform")), a=(A, 4), b=(B, 4))
    clients = [Client(w, "m1", topics=("a", "b")), Client(w, "m2", topics=("a", "b"))]
    settle(w, clients)
    assert w.cg.describe("g").assignor_name == "range"
    with pytest.raises(ValueError):
        ConsumerGroups(GroupConfig(group_consumer_assignors=("nope",)), Clock(), dict)


# -- metadata changes and regexes --------------------------------------------------------------


def test_partitions_added_bump_epoch_and_assign():
    w = World(a=(A, 2))
    m1, m2 = Client(w, "m1"), Client(w, "m2")
    settle(w, [m1, m2])
    epoch = w.cg.describe("g").group_epoch
    w.topics["a"] = (A, 6)
    w.cg.on_metadata_change()
    w.drain()
    assert w.cg.describe("g").group_epoch == epoch + 1
    settle(w, [m1, m2])
    assert counts([m1, m2]) == [3, 3]
    # Unrelated topics do not disturb the group.
    w.topics["zzz"] = (C, 3)
    w.cg.on_metadata_change()
    assert w.cg.describe("g").group_epoch == epoch + 1 and w.drain() == []


def test_subscribed_topic_created_later_and_deleted():
    w = World(a=(A, 2))
    m1 = Client(w, "m1", topics=("a", "b"))
    settle(w, [m1])
    assert m1.owned == {A: {0, 1}}
    w.topics["b"] = (B, 2)
    w.cg.on_metadata_change()
    settle(w, [m1])
    assert m1.owned == {A: {0, 1}, B: {0, 1}}
    del w.topics["a"]
    w.cg.on_metadata_change()
    settle(w, [m1])
    assert m1.owned == {B: {0, 1}}


def test_regex_subscription_follows_new_topics():
    w = World(**{"orders-1": (R1, 2), "audit": (A, 2), "__internal-orders": (C, 1)})
    m1 = Client(w, "m1", topics=(), regex="orders-.*")
    m2 = Client(w, "m2", topics=(), regex=".*orders.*")
    settle(w, [m1, m2])
    d = w.cg.describe("g")
    assert {tuple(m.subscribed_topic_names) for m in d.members} == {()}
    owned = {t for c in (m1, m2) for t in c.owned}
    assert owned == {R1}  # full match; internal topics never match
    w.topics["orders-2"] = (R2, 2)
    w.cg.on_metadata_change()
    settle(w, [m1, m2])
    assert {t for c in (m1, m2) for t in c.owned} == {R1, R2}
    assert counts([m1, m2]) == [2, 2]
    # Names and regex combine.
    m3 = Client(w, "m3", topics=("audit",), regex="nomatch")
    settle(w, [m1, m2, m3])
    assert m3.owned.get(A) == {0, 1}


def test_regex_and_names_can_be_cleared():
    w = World(a=(A, 2), b=(B, 2))
    w.join("m1", topics=(), subscribed_topic_regex="a")
    r = w.hb(
        member_id="m1", member_epoch=1, subscribed_topic_regex="", subscribed_topic_names=["b"]
    )
    assert r.error_code == E.NONE
    m = w.members()["m1"]
    assert m.subscribed_topic_regex is None and m.subscribed_topic_names == ["b"]


# -- persistence -------------------------------------------------------------------------------


def test_restart_members_keep_epochs_and_assignments():
    w = World(a=(A, 6), b=(B, 3))
    clients = [
        Client(w, "m1", topics=("a", "b")),
        Client(w, "m2", topics=("a",), instance_id="i2", assignor="range"),
        Client(w, "m3", topics=(), regex="b"),
    ]
    settle(w, clients)
    before = w.cg.describe("g")
    w.advance(10_000)
    assert w.restart() == []  # nothing to write at load
    assert w.cg.describe("g") == before
    # Members carry on with their epochs; nothing is reassigned.
    for c in clients:
        r = c.heartbeat()
        assert r.error_code == E.NONE and r.assignment is None
    assert converged(w, clients)
    # Session timers restart from the load time.
    assert w.cg.next_deadline() == w.clock.now + SESSION


def test_restart_mid_rebalance_and_while_topics_changed():
    w = World()
    m1, m2 = Client(w, "m1"), Client(w, "m2")
    m1.heartbeat()
    m2.heartbeat()
    m1.heartbeat()  # m1 revoking, m2 waiting
    w.topics["a"] = (A, 8)  # grows while the coordinator is down
    w.restart()
    assert w.cg.describe("g").group_epoch == 3  # the change was noticed at load
    check_no_double_ownership(w, [m1, m2])
    settle(w, [m1, m2])
    assert counts([m1, m2]) == [4, 4]


def test_restart_expires_silent_members_from_load_time():
    w = World()
    m1, m2 = Client(w, "m1"), Client(w, "m2")
    settle(w, [m1, m2])
    w.clock.now += 10 * SESSION  # down for a long time
    w.restart()
    assert set(w.members()) == {"m1", "m2"}
    w.advance(SESSION // 2)
    m1.heartbeat()
    w.advance(SESSION // 2)
    assert set(w.members()) == {"m1"}


def test_tombstones_delete_on_replay():
    w = World()
    a, b = Client(w, "m1"), Client(w, "m2")
    settle(w, [a, b])
    a.leave()
    b.leave()
    assert w.cg.delete("g") == E.NONE
    w.restart()
    assert not w.cg.has_group("g") and w.cg.list_groups() == []


# -- offsets, listing, deleting ----------------------------------------------------------------


def test_validate_offset_commit():
    w = World()
    v = w.cg.validate_offset_commit
    assert v(group_id="g", member_id="", member_epoch=-1) == E.NONE  # no group yet
    assert v(group_id="g", member_id="m1", member_epoch=1) == E.GROUP_ID_NOT_FOUND
    m1 = Client(w, "m1")
    m1.heartbeat()
    assert v(group_id="g", member_id="", member_epoch=-1) == E.UNKNOWN_MEMBER_ID
    assert v(group_id="g", member_id="zz", member_epoch=1) == E.UNKNOWN_MEMBER_ID
    assert v(group_id="g", member_id="m1", member_epoch=1) == E.NONE
    assert v(group_id="g", member_id="m1", member_epoch=0) == E.STALE_MEMBER_EPOCH
    assert v(group_id="g", member_id="m1", member_epoch=2) == E.STALE_MEMBER_EPOCH
    m1.leave()
    assert v(group_id="g", member_id="", member_epoch=-1) == E.NONE  # empty again
    f = w.cg.validate_offset_fetch
    assert f(group_id="g", member_id=None, member_epoch=-1) == E.NONE
    assert f(group_id="g", member_id="m1", member_epoch=1) == E.UNKNOWN_MEMBER_ID


def test_list_delete_describe():
    w = World()
    assert w.cg.describe("g") is None and w.cg.is_empty("g")
    assert w.cg.delete("g") == E.GROUP_ID_NOT_FOUND
    w.join("m1", instance_id="i1", rack_id="r1", client_id="cid", client_host="/10.0.0.1")
    w.join("m2", group_id="h")
    assert w.cg.list_groups() == [("g", ConsumerState.STABLE), ("h", ConsumerState.STABLE)]
    d = w.cg.describe("g")
    m = d.members[0]
    assert (m.member_id, m.instance_id, m.rack_id, m.client_id, m.client_host) == (
        "m1", "i1", "r1", "cid", "/10.0.0.1",
    )  # fmt: skip
    assert m.assignment == m.target_assignment == [(A, [0, 1, 2, 3, 4, 5])]
    assert w.cg.delete("g") == E.NON_EMPTY_GROUP and not w.cg.is_empty("g")
    w.hb(member_id="m1", member_epoch=-1)
    assert w.cg.list_groups()[0] == ("g", ConsumerState.EMPTY) and w.cg.is_empty("g")
    d = w.cg.describe("g")
    assert d.group_epoch == d.assignment_epoch == 2
    assert w.cg.delete("g") == E.NONE and not w.cg.has_group("g")
    assert w.drain() == [GroupRecord(("consumer", "g"), None)]


def test_group_state_reconciling_while_revoking():
    w = World()
    m1, m2 = Client(w, "m1"), Client(w, "m2")
    m1.heartbeat()
    m2.heartbeat()
    assert w.cg.describe("g").state == ConsumerState.RECONCILING
    settle(w, [m1, m2])
    assert w.cg.describe("g").state == ConsumerState.STABLE


# -- a randomized model of well-behaved clients, crashes and time jumps -------------------------


class ConsumerGroupMachine(RuleBasedStateMachine):
    """Clients heartbeat (sometimes losing responses), crash, leave, join, restart the
    coordinator; time jumps; topics grow. After every step nobody owns a partition another
    live member owns, epochs never go backwards, and once the chaos stops the group converges
    to its target."""

    def __init__(self) -> None:
        super().__init__()
        self.w = World(a=(A, 5), b=(B, 3))
        self.clients: list[Client] = []
        self.n = 0
        self.group_epoch = 0
        self.member_epochs: dict[str, int] = {}

    @precondition(lambda self: len(self.clients) < 6)
    @rule(
        topics=st.sampled_from([("a",), ("a", "b"), ("b",)]),
        static=st.booleans(),
        timeout=st.sampled_from([15_000, 60_000]),
    )
    def join(self, topics, static, timeout):
        self.n += 1
        instance = f"i{self.n}" if static else None
        c = Client(self.w, f"m{self.n}", topics=topics, instance_id=instance,
                   rebalance_timeout_ms=timeout)  # fmt: skip
        self.clients.append(c)
        c.heartbeat()

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5), lose=st.integers(0, 9))
    def heartbeat(self, i, lose):
        c = self.clients[i % len(self.clients)]
        c.heartbeat(lose_response=lose == 0)

    @precondition(lambda self: self.clients)
    @rule()
    def everyone_heartbeats(self):
        for c in self.clients:
            c.heartbeat()

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def crash(self, i):
        self.clients.pop(i % len(self.clients))  # stops heartbeating, never says goodbye

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def leave(self, i):
        c = self.clients.pop(i % len(self.clients))
        if c.epoch != 0:
            c.leave()

    @rule(ms=st.sampled_from([100, 5_000, 20_000, 50_000]))
    def time_passes(self, ms):
        self.w.advance(ms)

    @rule(topic=st.sampled_from(["a", "b"]))
    def partitions_added(self, topic):
        tid, n = self.w.topics[topic]
        if n < 9:
            self.w.topics[topic] = (tid, n + 1)
            self.w.cg.on_metadata_change()
            self.w.drain()

    @rule()
    def coordinator_restarts(self):
        self.w.restart()

    @invariant()
    def no_double_ownership(self):
        check_no_double_ownership(self.w, self.clients)

    @invariant()
    def epochs_monotonic(self):
        d = self.w.cg.describe("g")
        if d is None:
            return
        assert d.group_epoch >= self.group_epoch
        assert d.assignment_epoch == d.group_epoch
        self.group_epoch = d.group_epoch
        for m in d.members:
            if m.member_epoch >= 0:
                # A member epoch only grows (a rejoin keeps the member's epoch).
                assert m.member_epoch >= self.member_epochs.get(m.member_id, 0)
                assert m.member_epoch <= d.assignment_epoch
                self.member_epochs[m.member_id] = m.member_epoch
        for c in self.clients:
            assert c.epochs_seen == sorted(c.epochs_seen)

    def teardown(self):
        # The chaos stops: live clients keep heartbeating; crashed members time out.
        for _ in range(SESSION // INTERVAL + 20):
            for c in self.clients:
                c.heartbeat()
                check_no_double_ownership(self.w, self.clients)
            if converged(self.w, self.clients) or (not self.clients and self.w.cg.is_empty("g")):
                break
            self.w.advance(INTERVAL)
        else:
            raise AssertionError(f"no convergence: {self.w.cg.describe('g')}")
        if self.clients:
            # Every subscribed partition is owned by exactly one client.
            subscribed = {t for c in self.clients for t in c.topics}
            expected = {
                (tid, p)
                for name in subscribed
                for tid, n in [self.w.topics[name]]
                for p in range(n)
            }
            owned = [(t, p) for c in self.clients for t, ps in c.owned.items() for p in ps]
            assert sorted(owned) == sorted(expected)


ConsumerGroupMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_consumer_group_model = ConsumerGroupMachine.TestCase
