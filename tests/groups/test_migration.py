"""KIP-848 online migration between classic and consumer groups (:mod:`snakka.groups.migration`)
with both cores, a fake clock and the record log, routed as the coordinator shell routes them.

Kafka 4.0's rules (GroupMetadataManager.validateOnlineUpgrade / validateOnlineDowngrade*,
classicGroup*ToConsumerGroup): ``group.consumer.migration.policy``; the embedded protocol type
must be ``consumer``; ``group.consumer.max.size`` / ``group.max.size`` bound the converted
group; classic members inside a consumer group are served by it.
"""

from __future__ import annotations

import json
import uuid

import pytest

from snakka.groups import migration
from snakka.groups.classic import ClassicGroups, JoinResult
from snakka.groups.consumer import ConsumerGroups
from snakka.groups.migration import decode_assignment, encode_assignment
from snakka.groups.types import PENDING, ClassicState, ConsumerState, GroupConfig, GroupRecord
from snakka.protocol.errors import ErrorCode as E
from snakka.protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
    TopicPartition,
)

T = uuid.UUID(int=7)


def subscription(topics=("t",), owned: dict[str, list[int]] | None = None, version=1) -> bytes:
    sub = ConsumerProtocolSubscription(
        topics=list(topics),
        owned_partitions=[TopicPartition(topic=t, partitions=ps)
                          for t, ps in (owned or {}).items()])
    return version.to_bytes(2, "big") + sub.encode(version)


class Clock:
    now = 1_000_000

    def __call__(self) -> int:
        return self.now


class World:
    def __init__(self, **config) -> None:
        base = {"group_initial_rebalance_delay_ms": 0}
        base.update(config)
        self.config = GroupConfig(**base)
        self.clock = Clock()
        self.topics = {"t": (T, 4)}
        self.log: list[GroupRecord] = []
        self._make()

    def _make(self) -> None:
        self.classic = ClassicGroups(self.config, self.clock)
        self.consumer = ConsumerGroups(self.config, self.clock, lambda: dict(self.topics))

    def after(self) -> None:
        migration.complete_downgrades(self.consumer, self.classic)
        self.log += self.classic.drain_records() + self.consumer.drain_records()

    def restart(self) -> None:
        self._make()
        for r in self.log:
            key, value = json.loads(json.dumps([r.key, r.value]))
            rec = GroupRecord(tuple(key), value)
            self.classic.replay(rec)
            self.consumer.replay(rec)
        self.classic.loaded()
        self.consumer.loaded()
        self.after()

    # -- the shell's routing (GroupCoordinator) --
    def join(self, member_id="", protocols=None, protocol_type="consumer", **kw):
        protocols = protocols or [("range", subscription())]
        args = dict(group_id="g", member_id=member_id, group_instance_id=None,
                    protocol_type=protocol_type, protocols=protocols, session_timeout_ms=10_000,
                    rebalance_timeout_ms=30_000, client_id="c", client_host="/h",
                    require_known_member_id=False)
        args.update(kw)
        if self.consumer.has_group("g") and not self.consumer.is_empty("g"):
            result = self.consumer.classic_join(**args)
        else:
            if self.consumer.has_group("g"):
                self.consumer.delete("g")
            result = self.classic.join(object(), reason=None, **args)
        self.after()
        return result

    def sync(self, member_id, generation, assignments=None, protocol_type="consumer"):
        kw = dict(group_id="g", generation_id=generation, member_id=member_id,
                  group_instance_id=None, protocol_type=protocol_type, protocol_name="range")
        if self.consumer.has_group("g"):
            result = self.consumer.classic_sync(**kw)
        else:
            result = self.classic.sync(object(), assignments=assignments or {}, **kw)
        self.after()
        return result

    def heartbeat(self, member_id, generation):
        kw = dict(group_id="g", generation_id=generation, member_id=member_id,
                  group_instance_id=None)
        target = self.consumer if self.consumer.has_group("g") else self.classic
        err = (target.classic_heartbeat(**kw) if target is self.consumer
               else self.classic.heartbeat(**kw))
        self.after()
        return err

    def cg_heartbeat(self, member_id, epoch, owned=None):
        if self.classic.has_group("g"):
            if not self.classic.is_empty("g"):
                if epoch != 0 or not migration.try_upgrade(self.classic, self.consumer, "g"):
                    return None  # GROUP_ID_NOT_FOUND
            elif epoch == 0:
                self.classic.delete("g")
        result = self.consumer.heartbeat(
            group_id="g", member_id=member_id, member_epoch=epoch, instance_id=None,
            rack_id=None, rebalance_timeout_ms=30_000 if epoch == 0 else -1,
            subscribed_topic_names=["t"] if epoch == 0 else None, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=owned if owned is not None else (
                [] if epoch == 0 else None), api_version=1)
        self.after()
        return result

    def group_type(self) -> str | None:
        if self.consumer.has_group("g"):
            return "consumer"
        if self.classic.has_group("g"):
            return "classic"
        return None


def classic_group_of_one(w: World, protocol_type="consumer", meta=None) -> str:
    """A Stable classic group: one member owning all of t."""
    meta = meta if meta is not None else subscription()
    j = w.join(protocols=[("range", meta)], protocol_type=protocol_type)
    assert isinstance(j, JoinResult) and j.error_code == E.NONE, j
    s = w.sync(j.member_id, j.generation_id,
               {j.member_id: encode_assignment({"t": [0, 1, 2, 3]}, 1)}, protocol_type)
    assert s.error_code == E.NONE
    return j.member_id


def owned_by(w: World, member_id: str) -> set[int]:
    d = w.consumer.describe("g")
    assert d is not None
    m = {m.member_id: m for m in d.members}[member_id]
    return {p for _tid, ps in m.assignment for p in ps}


# -- upgrade ----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy,upgrades", [("bidirectional", True), ("upgrade", True),
                                             ("downgrade", False), ("disabled", False)])
def test_upgrade_follows_the_migration_policy(policy, upgrades):
    w = World(group_consumer_migration_policy=policy)
    classic_group_of_one(w)
    r = w.cg_heartbeat("new", 0)
    if upgrades:
        assert r is not None and r.error_code == E.NONE
        assert w.group_type() == "consumer"
    else:
        assert r is None  # GROUP_ID_NOT_FOUND
        assert w.group_type() == "classic"
        assert w.classic.describe("g").state == ClassicState.STABLE


def test_upgrade_refused_for_a_group_not_using_the_consumer_embedded_protocol():
    w = World()
    classic_group_of_one(w, protocol_type="connect")
    assert w.cg_heartbeat("new", 0) is None
    assert w.group_type() == "classic"


def test_upgrade_refused_above_group_consumer_max_size():
    w = World(group_consumer_max_size=1)
    a = w.join()
    b = w.join()
    assert a.error_code == E.NONE or a is PENDING
    assert b is PENDING or b.error_code == E.NONE
    assert len(w.classic.describe("g").members) == 2
    assert w.cg_heartbeat("new", 0) is None
    assert w.group_type() == "classic"


def test_upgrade_refused_for_a_malformed_embedded_protocol():
    w = World()
    classic_group_of_one(w, meta=b"\x00\x01\xff")
    assert w.cg_heartbeat("new", 0) is None
    assert w.group_type() == "classic"


def test_only_a_joining_heartbeat_upgrades():
    w = World()
    classic_group_of_one(w)
    assert w.cg_heartbeat("x", 3) is None
    assert w.group_type() == "classic"


def test_an_empty_classic_group_is_replaced():
    w = World()
    mid = classic_group_of_one(w)
    err, _ = w.classic.leave(group_id="g", members=[(mid, None, None)])
    w.after()
    assert err == E.NONE and w.classic.is_empty("g")
    r = w.cg_heartbeat("new", 0)
    assert r.error_code == E.NONE and w.group_type() == "consumer"
    assert not w.classic.has_group("g")
    assert ("classic", "g") in [r.key for r in w.log if r.value is None]


def test_upgraded_classic_member_keeps_its_assignment_then_rebalances():
    w = World()
    mid = classic_group_of_one(w)
    generation = w.classic.describe("g") and 1
    r = w.cg_heartbeat("new", 0)
    assert r.error_code == E.NONE
    # The classic member keeps what it had, at member epoch = its generation; the newcomer
    # waits for the partitions it is to get.
    d = w.consumer.describe("g")
    assert d.state == ConsumerState.RECONCILING
    assert owned_by(w, mid) == {0, 1, 2, 3} and owned_by(w, "new") == set()
    classic_member = {m.member_id: m for m in d.members}[mid]
    assert classic_member.classic and classic_member.member_epoch == generation
    # Its Heartbeat says: rejoin.
    assert w.heartbeat(mid, generation) == E.REBALANCE_IN_PROGRESS
    assert w.heartbeat(mid, generation + 5) == E.ILLEGAL_GENERATION
    # An eager client rejoins owning nothing: it is moved to its target at once.
    j = w.join(mid)
    assert j.error_code == E.NONE and j.protocol_type == "consumer" and j.leader == ""
    assert j.protocol_name == "range" and j.generation_id > generation
    s = w.sync(mid, j.generation_id)
    assert s.error_code == E.NONE
    mine = set(decode_assignment(s.assignment)["t"])
    assert len(mine) == 2
    assert w.heartbeat(mid, j.generation_id) == E.NONE
    # The consumer-protocol member picks the released partitions up.
    r = w.cg_heartbeat("new", r.member_epoch, owned=[])
    assert {p for _t, ps in r.assignment for p in ps} == {0, 1, 2, 3} - mine


def test_cooperative_classic_member_revokes_before_the_epoch_moves():
    w = World()
    mid = classic_group_of_one(w)
    w.cg_heartbeat("new", 0)
    j = w.join(mid, protocols=[("cooperative-sticky", subscription(owned={"t": [0, 1, 2, 3]}))])
    assert j.error_code == E.NONE and j.generation_id == 1  # still revoking
    s = w.consumer.classic_sync(group_id="g", generation_id=1, member_id=mid,
                                group_instance_id=None, protocol_type="consumer",
                                protocol_name="cooperative-sticky")
    assert s.error_code == E.NONE and len(decode_assignment(s.assignment)["t"]) == 2
    assert w.heartbeat(mid, 1) == E.REBALANCE_IN_PROGRESS  # unrevoked partitions
    kept = decode_assignment(s.assignment)["t"]
    j2 = w.join(mid, protocols=[("cooperative-sticky", subscription(owned={"t": kept}))])
    assert j2.error_code == E.NONE and j2.generation_id > 1


def test_classic_requests_to_a_consumer_group_are_checked():
    w = World()
    mid = classic_group_of_one(w)
    w.cg_heartbeat("new", 0)
    # A consumer-protocol member cannot use the classic APIs.
    assert w.heartbeat("new", 2) == E.UNKNOWN_MEMBER_ID
    assert w.join("new").error_code == E.UNKNOWN_MEMBER_ID
    # Only the consumer embedded protocol, with a protocol the classic members share.
    assert w.join(protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert w.join(protocols=[("roundrobin", subscription())]).error_code == \
        E.INCONSISTENT_GROUP_PROTOCOL
    # KIP-394: an unknown member is handed a member id first.
    j = w.join(require_known_member_id=True)
    assert j.error_code == E.MEMBER_ID_REQUIRED and j.member_id
    assert w.sync(mid, 99).error_code == E.ILLEGAL_GENERATION
    err, out = w.consumer.classic_leave(group_id="g", members=[("new", None, None),
                                                               ("nobody", None, None)])
    assert err == E.NONE and [e for _m, _i, e in out] == [E.UNKNOWN_MEMBER_ID] * 2


def test_group_consumer_max_size_applies_to_classic_joins():
    w = World(group_consumer_max_size=2)
    classic_group_of_one(w)
    w.cg_heartbeat("new", 0)
    assert w.join().error_code == E.GROUP_MAX_SIZE_REACHED


def test_classic_member_commits_with_its_generation():
    w = World()
    mid = classic_group_of_one(w)
    w.cg_heartbeat("new", 0)
    assert w.consumer.validate_offset_commit(group_id="g", member_id=mid, member_epoch=1) == E.NONE
    assert w.consumer.validate_offset_commit(group_id="g", member_id=mid, member_epoch=0) == \
        E.ILLEGAL_GENERATION


# -- downgrade --------------------------------------------------------------------------------


def upgraded_pair(w: World) -> tuple[str, int]:
    """A consumer group with a classic member ``mid`` and a consumer member ``new``."""
    mid = classic_group_of_one(w)
    r = w.cg_heartbeat("new", 0)
    return mid, r.member_epoch


@pytest.mark.parametrize("policy,downgrades", [("bidirectional", True), ("downgrade", True),
                                               ("upgrade", False), ("disabled", False)])
def test_downgrade_follows_the_migration_policy(policy, downgrades):
    w = World(group_consumer_migration_policy="bidirectional")
    mid, epoch = upgraded_pair(w)
    w.consumer._config = GroupConfig(group_consumer_migration_policy=policy)
    r = w.cg_heartbeat("new", -1)
    assert r.error_code == E.NONE
    if downgrades:
        assert w.group_type() == "classic"
        d = w.classic.describe("g")
        assert d.state == ClassicState.PREPARING_REBALANCE and d.protocol_type == "consumer"
        assert [m.member_id for m in d.members] == [mid]
        # The member rejoins the classic group and gets everything.
        j = w.join(mid)
        assert j.error_code == E.NONE and j.leader == mid
        s = w.sync(mid, j.generation_id, {mid: encode_assignment({"t": [0, 1, 2, 3]}, 1)})
        assert s.error_code == E.NONE and w.classic.describe("g").state == ClassicState.STABLE
    else:
        assert w.group_type() == "consumer"
        assert w.consumer.describe("g").members[0].member_id == mid


def test_no_downgrade_above_group_max_size():
    w = World()
    mid, _ = upgraded_pair(w)
    w.join()  # a second classic member
    w.consumer._config = GroupConfig(group_max_size=1)
    w.cg_heartbeat("new", -1)
    assert w.group_type() == "consumer"


def test_no_downgrade_when_a_classic_member_leaves():
    w = World()
    mid, _ = upgraded_pair(w)
    err, out = w.consumer.classic_leave(group_id="g", members=[(mid, None, None)])
    w.after()
    assert out == [(mid, None, E.NONE)]
    assert w.group_type() == "consumer"
    assert [m.member_id for m in w.consumer.describe("g").members] == ["new"]


def test_session_expiry_of_the_last_consumer_member_downgrades():
    w = World()
    mid, _ = upgraded_pair(w)
    for _ in range(10):  # the classic member keeps heartbeating, the consumer member is silent
        w.clock.now += 5_000
        w.heartbeat(mid, w.consumer.describe("g").members[0].member_epoch
                    if w.consumer.has_group("g") else 0)
        w.consumer.on_timer(w.clock.now)
        w.after()
        if w.group_type() == "classic":
            break
    assert w.group_type() == "classic"


# -- durability -------------------------------------------------------------------------------


def test_both_conversions_survive_a_restart():
    w = World()
    mid, _ = upgraded_pair(w)
    w.restart()
    assert w.group_type() == "consumer"
    members = {m.member_id: m for m in w.consumer.describe("g").members}
    assert members[mid].classic and not members["new"].classic
    assert owned_by(w, mid) == {0, 1, 2, 3}
    w.cg_heartbeat("new", -1)
    assert w.group_type() == "classic"
    w.restart()
    assert w.group_type() == "classic" and not w.consumer.has_group("g")
    assert [m.member_id for m in w.classic.describe("g").members] == [mid]


def test_classic_static_member_replacing_the_last_consumer_member_downgrades():
    w = World()
    mid, _ = upgraded_pair(w)

    def static_hb(epoch):
        r = w.consumer.heartbeat(
            group_id="g", member_id="s1", member_epoch=epoch, instance_id="i",
            rack_id=None, rebalance_timeout_ms=30_000 if epoch == 0 else -1,
            subscribed_topic_names=["t"] if epoch == 0 else None, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[] if epoch == 0 else None, api_version=1)
        w.after()
        return r

    # The consumer-protocol member "new" leaves; a static consumer member is left with mid.
    assert static_hb(0).error_code == E.NONE
    w.cg_heartbeat("new", -1)
    assert w.group_type() == "consumer"
    # Still in the group: its instance id is not released to a classic member.
    assert w.join(group_instance_id="i").error_code == E.UNRELEASED_INSTANCE_ID
    assert static_hb(-2).error_code == E.NONE
    j = w.join(group_instance_id="i")
    assert j.error_code == E.NONE
    assert w.group_type() == "classic"
    assert {m.member_id for m in w.classic.describe("g").members} == {mid, j.member_id}
