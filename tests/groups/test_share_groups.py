"""Share groups (:mod:`snakka.groups.share_group`) driven with a fake clock: ShareGroupHeartbeat
semantics (join, rejoin, leave, fencing, session expiry, max size), assignments sent only when
they change, reaction to topic changes, the events the share side is told about, and
persistence (every state survives a replay of the records the core wrote); then a hypothesis
state machine mixing all of them checks the invariants after every step."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from snakka.groups.share_group import (
    GroupDeleted,
    MemberLeft,
    PartitionsAssigned,
    ShareGroups,
    ShareHeartbeatResult,
)
from snakka.groups.types import GroupConfig, GroupRecord, ShareGroupState
from snakka.protocol.errors import ErrorCode as E

A, B = uuid.UUID(int=1), uuid.UUID(int=2)
SESSION = GroupConfig().group_share_session_timeout_ms


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class World:
    def __init__(self, config: GroupConfig | None = None, **topics: tuple[uuid.UUID, int]):
        self.clock = Clock()
        self.topics: dict[str, tuple[uuid.UUID, int]] = topics or {"a": (A, 4)}
        self.config = config or GroupConfig()
        self.log: list[GroupRecord] = []
        self.events: list = []
        self.sg = self._new()

    def _new(self) -> ShareGroups:
        return ShareGroups(self.config, self.clock, lambda: dict(self.topics))

    def drain(self) -> None:
        # Records go through JSON as the shell stores them.
        for r in self.sg.drain_records():
            self.log.append(GroupRecord(tuple(json.loads(json.dumps(list(r.key)))),
                                        None if r.value is None
                                        else json.loads(json.dumps(r.value))))
        self.events.extend(self.sg.drain_events())

    def hb(self, member: str, epoch: int, topics: list[str] | None = None, *,
           group: str = "g", rack: str | None = None) -> ShareHeartbeatResult:
        r = self.sg.heartbeat(group_id=group, member_id=member, member_epoch=epoch,
                              rack_id=rack, subscribed_topic_names=topics, client_id="cid",
                              client_host="/127.0.0.1")
        self.drain()
        return r

    def join(self, member: str, topics: list[str] | None = None, **kw) -> ShareHeartbeatResult:
        r = self.hb(member, 0, topics or ["a"], **kw)
        assert r.error_code == E.NONE, r
        return r

    def advance(self, ms: int) -> None:
        self.clock.now += ms
        self.sg.on_timer(self.clock.now)
        self.drain()

    def restart(self) -> ShareGroups:
        self.sg = self._new()
        for r in self.log:
            self.sg.replay(r)
        self.sg.loaded()
        self.drain()
        return self.sg


def parts(assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment for p in ps}


def test_first_member_gets_every_partition_and_the_share_side_is_told():
    w = World()
    r = w.join("m1")
    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms) == ("m1", 1, 5000)
    assert parts(r.assignment) == {(A, p) for p in range(4)}
    assert w.events == [PartitionsAssigned("g", [(A, p) for p in range(4)])]
    d = w.sg.describe("g")
    assert (d.state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        ShareGroupState.STABLE, 1, 1, "simple")
    assert d.members[0].subscribed_topic_names == ["a"]
    assert d.members[0].client_host == "/127.0.0.1"


def test_second_member_splits_partitions_and_assignment_is_sent_only_when_changed():
    w = World()
    w.join("m1")
    r2 = w.join("m2")
    assert r2.member_epoch == 2
    # m1 heartbeats with its epoch: it learns the new epoch and its smaller assignment.
    r1 = w.hb("m1", 1)
    assert r1.error_code == E.NONE and r1.member_epoch == 2
    assert parts(r1.assignment) | parts(r2.assignment) == {(A, p) for p in range(4)}
    assert len(parts(r1.assignment)) == len(parts(r2.assignment)) == 2
    assert not parts(r1.assignment) & parts(r2.assignment)
    # Nothing changed: no assignment in the response.
    assert w.hb("m1", 2).assignment is None
    assert w.hb("m2", 2).assignment is None
    # No new partitions were announced by the second join.
    assert [e for e in w.events if isinstance(e, PartitionsAssigned)] == [
        PartitionsAssigned("g", [(A, p) for p in range(4)])]
    assert w.sg.assignment("g", "m1") == parts(r1.assignment)
    assert w.sg.members("g") == {"m1", "m2"}


def test_more_members_than_partitions_share_partitions():
    w = World(a=(A, 2))
    for i in range(5):
        w.join(f"m{i}")
    got = {f"m{i}": parts(w.hb(f"m{i}", 0, ["a"]).assignment) for i in range(5)}
    holders = {(A, p): sum((A, p) in s for s in got.values()) for p in range(2)}
    assert holders == {(A, 0): 3, (A, 1): 3}  # ceil(5 / 2) members per partition
    assert all(len(s) in (1, 2) for s in got.values())


def test_request_validation_follows_kafka():
    w = World()
    assert w.hb("", 0, ["a"]).error_code == E.INVALID_REQUEST
    assert w.hb("m", 0, ["a"], group="").error_code == E.INVALID_REQUEST
    assert w.hb("m", 0, ["a"], rack=" ").error_code == E.INVALID_REQUEST
    r = w.hb("m", 0, None)
    assert (r.error_code, r.error_message) == (
        E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    assert w.hb("m", 0, []).error_code == E.INVALID_REQUEST
    assert w.hb("m", -2).error_code == E.INVALID_REQUEST
    assert w.hb("m", 3).error_code == E.GROUP_ID_NOT_FOUND
    assert w.hb("m", -1).error_code == E.GROUP_ID_NOT_FOUND
    w.join("m1")
    assert w.hb("other", 1).error_code == E.UNKNOWN_MEMBER_ID
    assert w.hb("other", -1).error_code == E.UNKNOWN_MEMBER_ID
    assert not w.sg.has_group("")


def test_epoch_fencing_accepts_the_previous_epoch_only():
    w = World()
    w.join("m1")
    w.join("m2")            # group epoch 2
    assert w.hb("m1", 1).member_epoch == 2   # m1 moves 1 -> 2 (previous = 1)
    assert w.hb("m1", 1).error_code == E.NONE  # lost response: the previous epoch is accepted
    assert w.hb("m1", 3).error_code == E.FENCED_MEMBER_EPOCH
    w.join("m3")            # group epoch 3
    assert w.hb("m1", 2).member_epoch == 3
    r = w.hb("m1", 1)       # neither current (3) nor previous (2)
    assert r.error_code == E.FENCED_MEMBER_EPOCH and "previous member epoch" in r.error_message
    # A fenced member rejoins with epoch 0 under its own id and gets its full state back.
    r = w.hb("m1", 0, ["a"])
    assert r.error_code == E.NONE and r.member_epoch == 3 and r.assignment is not None
    assert w.sg.members("g") == {"m1", "m2", "m3"}


def test_leave_removes_member_reassigns_and_tells_share_side():
    w = World()
    w.join("m1")
    w.join("m2")
    r = w.hb("m2", -1)
    assert (r.error_code, r.member_id, r.member_epoch, r.assignment) == (E.NONE, "m2", -1, None)
    assert MemberLeft("g", "m2") in w.events
    # m1 never reconciled to epoch 2 (half the partitions): its assignment is unchanged.
    r1 = w.hb("m1", 1)
    assert r1.member_epoch == 3 and r1.assignment is None
    assert w.sg.assignment("g", "m1") == {(A, p) for p in range(4)}
    w.hb("m1", -1)
    assert w.sg.describe("g").state == ShareGroupState.EMPTY
    assert w.sg.is_empty("g") and w.sg.has_group("g")
    assert w.sg.assignment("g", "m1") is None


def test_session_expiry_fences_silent_member():
    w = World()
    w.join("m1")
    w.join("m2")
    w.advance(SESSION - 1)
    w.hb("m1", 1)
    assert w.sg.next_deadline() == w.clock.now - (SESSION - 1) + SESSION  # m2's
    w.advance(1)
    assert w.sg.members("g") == {"m1"}
    assert MemberLeft("g", "m2") in w.events
    w.advance(SESSION - 1)
    assert w.sg.members("g") == set()
    assert w.sg.next_deadline() is None


def test_group_session_timeout_and_heartbeat_interval_overrides():
    clock = Clock()
    sg = ShareGroups(GroupConfig(), clock, lambda: {"a": (A, 1)},
                     session_timeout_ms=lambda g: 50_000 if g == "slow" else 45_000,
                     heartbeat_interval_ms=lambda g: 7_000 if g == "slow" else 5_000)
    r = sg.heartbeat(group_id="slow", member_id="m", member_epoch=0, rack_id=None,
                     subscribed_topic_names=["a"])
    assert r.heartbeat_interval_ms == 7_000
    assert sg.next_deadline() == clock.now + 50_000


def test_group_max_size():
    w = World(GroupConfig(group_share_max_size=2))
    w.join("m1")
    w.join("m2")
    r = w.hb("m3", 0, ["a"])
    assert r.error_code == E.GROUP_MAX_SIZE_REACHED
    assert "maximum capacity of 2" in r.error_message
    assert w.hb("m1", 0, ["a"]).error_code == E.NONE  # known members may rejoin


def test_subscription_change_and_null_means_unchanged():
    w = World(a=(A, 2), b=(B, 3))
    w.join("m1", ["a"])
    assert w.hb("m1", 1, None).assignment is None
    r = w.hb("m1", 1, ["a", "b"])
    assert r.member_epoch == 2
    assert parts(r.assignment) == {(A, 0), (A, 1), (B, 0), (B, 1), (B, 2)}
    assert PartitionsAssigned("g", [(B, 0), (B, 1), (B, 2)]) in w.events
    r = w.hb("m1", 2, ["b"])
    assert parts(r.assignment) == {(B, 0), (B, 1), (B, 2)}


def test_topic_created_later_deleted_and_grown():
    w = World(a=(A, 1))
    r = w.join("m1", ["a", "late"])
    assert parts(r.assignment) == {(A, 0)}
    w.topics["late"] = (B, 2)
    w.sg.on_metadata_change()
    w.drain()
    r = w.hb("m1", 1)
    assert r.member_epoch == 2 and parts(r.assignment) == {(A, 0), (B, 0), (B, 1)}
    assert PartitionsAssigned("g", [(B, 0), (B, 1)]) in w.events
    w.topics["late"] = (B, 3)
    w.sg.on_metadata_change()
    w.drain()
    assert parts(w.hb("m1", 2).assignment) == {(A, 0), (B, 0), (B, 1), (B, 2)}
    assert PartitionsAssigned("g", [(B, 2)]) in w.events
    del w.topics["late"]
    w.sg.on_metadata_change()
    w.drain()
    assert parts(w.hb("m1", 3).assignment) == {(A, 0)}
    # Unchanged metadata: no bump.
    w.sg.on_metadata_change()
    assert w.hb("m1", 4).assignment is None and w.sg.describe("g").group_epoch == 4


def test_delete_group():
    w = World()
    w.join("m1")
    assert w.sg.delete("g") == E.NON_EMPTY_GROUP
    assert w.sg.delete("nope") == E.GROUP_ID_NOT_FOUND
    w.hb("m1", -1)
    assert w.sg.delete("g") == E.NONE
    w.drain()
    assert w.events[-1] == GroupDeleted("g")
    assert not w.sg.has_group("g") and w.sg.describe("g") is None
    assert w.restart().list_groups() == []


def test_state_survives_replay():
    w = World(a=(A, 3), b=(B, 2))
    w.join("m1", ["a"], rack="r1")
    w.join("m2", ["a", "b"])
    w.hb("m1", 1)
    w.join("m3", ["b"])
    w.hb("m3", -1)
    before = w.sg.describe("g")
    sg = w.restart()
    after = sg.describe("g")
    assert after == before
    assert sg.assignment("g", "m2") == w.sg.assignment("g", "m2")
    # Sessions restart from the load time; members keep heartbeating with their epochs.
    assert sg.next_deadline() == w.clock.now + SESSION
    w.advance(1000)
    r = w.hb("m2", before.members[1].member_epoch)
    assert r.error_code == E.NONE and r.member_epoch == before.group_epoch
    w.advance(SESSION - 1000)
    assert sg.members("g") == {"m2"}


def test_topic_change_while_away_bumps_epoch_at_load():
    w = World(a=(A, 2))
    w.join("m1")
    w.topics["a"] = (A, 3)
    sg = w.restart()
    assert sg.describe("g").group_epoch == 2
    r = w.hb("m1", 1)
    assert parts(r.assignment) == {(A, 0), (A, 1), (A, 2)}


@pytest.mark.parametrize("n_members,n_parts", [(1, 1), (3, 10), (10, 3), (7, 7), (4, 0)])
def test_every_partition_always_has_a_member(n_members, n_parts):
    w = World(a=(A, n_parts))
    for i in range(n_members):
        w.join(f"m{i}")
    assigned = set()
    for i in range(n_members):
        assigned |= w.sg.assignment("g", f"m{i}") or set()
        assigned |= parts(w.hb(f"m{i}", 0, ["a"]).assignment)
    assert assigned == {(A, p) for p in range(n_parts)}


# -- stateful: random joins, heartbeats, leaves, expiries, topic changes and restarts ----------

MEMBERS = [f"m{i}" for i in range(5)]
TOPICS = {"a": A, "b": B}


class ShareGroupMachine(RuleBasedStateMachine):
    """Members behave like real clients (adopt the epoch and assignment they are sent, rejoin
    with epoch 0 after FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID); the invariants hold after
    every step, and a replay of the records always rebuilds the same groups."""

    def __init__(self) -> None:
        super().__init__()
        self.w = World(a=(A, 3))
        self.epoch: dict[str, int] = {}          # member -> epoch it believes in (absent: out)
        self.view: dict[str, set] = {}           # member -> assignment it was last sent

    def _apply(self, m: str, r: ShareHeartbeatResult) -> None:
        if r.error_code in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID, E.GROUP_ID_NOT_FOUND):
            self.epoch.pop(m, None)
            self.view.pop(m, None)
            return
        assert r.error_code == E.NONE, r
        if r.member_epoch == -1:
            self.epoch.pop(m, None)
            self.view.pop(m, None)
            return
        self.epoch[m] = r.member_epoch
        if r.assignment is not None:
            self.view[m] = parts(r.assignment)

    @rule(m=st.sampled_from(MEMBERS), topics=st.sets(st.sampled_from(["a", "b", "c"]),
                                                      min_size=1))
    def join(self, m, topics):
        self._apply(m, self.w.hb(m, 0, sorted(topics)))

    @rule(m=st.sampled_from(MEMBERS))
    def heartbeat(self, m):
        if m in self.epoch:
            self._apply(m, self.w.hb(m, self.epoch[m]))

    @rule(m=st.sampled_from(MEMBERS))
    def leave(self, m):
        if m in self.epoch:
            self._apply(m, self.w.hb(m, -1))

    @rule(ms=st.integers(1, SESSION))
    def time_passes(self, ms):
        self.w.advance(ms)
        for m in list(self.epoch):
            if m not in self.w.sg.members("g"):
                self.epoch.pop(m)
                self.view.pop(m, None)

    @rule(name=st.sampled_from(["a", "b"]), n=st.integers(0, 4))
    def topic_changes(self, name, n):
        if n == 0:
            self.w.topics.pop(name, None)
        else:
            self.w.topics[name] = (TOPICS[name], n)
        self.w.sg.on_metadata_change()
        self.w.drain()

    @rule()
    def restart(self):
        before = self.w.sg.describe("g")
        self.w.restart()
        after = self.w.sg.describe("g")
        assert after == before

    @invariant()
    def consistent(self):
        sg = self.w.sg
        d = sg.describe("g")
        if d is None:
            return
        assert d.group_epoch == d.assignment_epoch
        assert {m.member_id for m in d.members} == sg.members("g")
        existing = {tid: n for tid, n in self.w.topics.values()}
        wanted = set()
        for m in d.members:
            assert m.member_epoch <= d.group_epoch
            subs = {self.w.topics[t][0] for t in m.subscribed_topic_names if t in self.w.topics}
            wanted |= {(t, p) for t in subs for p in range(existing[t])}
            # What a member was told is what the coordinator says it has.
            if m.member_id in self.view:
                assert sg.assignment("g", m.member_id) == self.view[m.member_id] or \
                    self.epoch.get(m.member_id) != m.member_epoch
        # The target covers every partition of every subscribed topic.
        assert sg.assigned_partitions("g") == wanted


TestShareGroupMachine = ShareGroupMachine.TestCase
TestShareGroupMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
