"""The group coordinator's transactional offsets with a real broker in-process (issue 11 item 3):
the TxnOffsetCommit handler against a stand-in transaction coordinator (its verification answers
are chosen by the test, to reach every error mapping), OffsetFetch RequireStable over the wire,
restart with pending offsets and then the marker, a failed write rolled back, and the group APIs
on groups with pending offsets.

The coordinator's methods run on the broker's event loop (``on_loop``), as the handlers and the
transaction coordinator call them."""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
import threading
from types import SimpleNamespace

import pytest

from snakka.client.admin import Admin
from snakka.client.connection import KafkaConnection
from snakka.groups.coordinator import OFFSETS_TOPIC
from snakka.handlers import txn_offset_commit
from snakka.handlers.context import RequestContext
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.messages.delete_groups_request import DeleteGroupsRequest
from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest
from snakka.protocol.messages.list_groups_request import ListGroupsRequest
from snakka.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from snakka.protocol.messages.offset_delete_request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from snakka.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from snakka.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from snakka.security.authorizer import AuthorizationResult, ResourceType
from snakka.testing import EmbeddedBroker

PID = 4000
UNSTABLE = ErrorCode.UNSTABLE_OFFSET_COMMIT


@pytest.fixture
def broker():
    with EmbeddedBroker(config={"num.partitions": "3", "offsets.topic.num.partitions": "4",
                                "group.initial.rebalance.delay.ms": "0"}) as b:
        asyncio.run(_create_topic(b.bootstrap_servers))
        yield b


async def _create_topic(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic("t", 3)


def on_loop(b: EmbeddedBroker, fn, *args, **kw):
    """Call ``fn`` on the broker's event loop (awaiting it if it returns an awaitable)."""
    async def call():
        r = fn(*args, **kw)
        return await r if inspect.isawaitable(r) else r
    return asyncio.run_coroutine_threadsafe(call(), b._loop).result(30)


class FakeTxns:
    """Stands in for the transaction coordinator's TransactionManager: ``verify_or_add``
    answers ``error``; its core's ``verify_partitions`` (the handler's synchronous check right
    before storing) answers ``guard_error``, as if the transaction had ended during the first."""

    def __init__(self, error: int = ErrorCode.NONE, guard_error: int = ErrorCode.NONE) -> None:
        self.error = error
        self.guard_error = guard_error
        self.calls: list[tuple] = []
        self.coordinator = SimpleNamespace(verify_partitions=self._verify_partitions)

    async def verify_or_add(self, transactional_id, producer_id, producer_epoch, partitions, *,
                            add):
        self.calls.append((transactional_id, producer_id, producer_epoch, list(partitions), add))
        return {tp: ErrorCode(self.error) for tp in partitions}

    def _verify_partitions(self, transactional_id, producer_id, producer_epoch, partitions):
        return ErrorCode.NONE, {tp: ErrorCode(self.guard_error) for tp in partitions}


class Ctx:
    """What the handler reads of its RequestContext; ``deny`` names resource types to refuse."""

    def __init__(self, b: EmbeddedBroker, version: int, txns: FakeTxns, deny=()) -> None:
        services = b.broker.services
        self.api_version = version
        self.services = SimpleNamespace(metadata=services.metadata, groups=services.groups,
                                        txns=txns)
        self.deny = set(deny)
        self.asked: list = []

    # the real helpers, over this stub's authorize() (any authorizer but the allow-all one)
    _authorizer = object()
    denied = RequestContext.denied
    is_allowed = RequestContext.is_allowed

    def authorize(self, actions):
        self.asked += actions
        return [AuthorizationResult.DENIED if a.resource_pattern.resource_type in self.deny
                else AuthorizationResult.ALLOWED for a in actions]


def txn_commit(b, offsets: dict, *, group="g", version=3, txns=None, pid=PID, epoch=0,
               generation=-1, member="", instance=None, topic="t", deny=()):
    txns = txns if txns is not None else FakeTxns()
    req = TxnOffsetCommitRequest(
        transactional_id="tx", group_id=group, producer_id=pid, producer_epoch=epoch,
        generation_id_or_member_epoch=generation, member_id=member,
        group_instance_id=instance, topics=[TxnOffsetCommitRequestTopic(name=topic, partitions=[
            TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                            committed_metadata=f"m{o}")
            for p, o in offsets.items()])])
    ctx = Ctx(b, version, txns, deny)
    resp = on_loop(b, txn_offset_commit.handle, ctx, req)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def errors_of(result: dict) -> set:
    return set(result.values())


async def _send(port: int, req, version: int):
    async with KafkaConnection("127.0.0.1", port) as conn:
        return await conn.send(req, version=version)


def send(b, req, version):
    return asyncio.run(_send(b.port, req, version))


def fetch(b, group="g", *, stable=False, version=7, parts=(0, 1, 2)):
    """{partition: (offset, leader epoch, metadata, error)} through the wire."""
    if version < 8:
        resp = send(b, OffsetFetchRequest(group_id=group, require_stable=stable, topics=[
            OffsetFetchRequestTopic(name="t", partition_indexes=list(parts))]), version)
        topics = resp.topics
    else:
        resp = send(b, OffsetFetchRequest(require_stable=stable, groups=[
            OffsetFetchRequestGroup(group_id=group, topics=[
                OffsetFetchRequestTopics(name="t", partition_indexes=list(parts))])]), version)
        topics = resp.groups[0].topics
    return {p.partition_index: (p.committed_offset, p.committed_leader_epoch, p.metadata,
                                p.error_code) for t in topics for p in t.partitions}


def committed(b, group="g"):
    return {p: row[0] for p, row in fetch(b, group).items() if row[0] >= 0}


def plain_commit(b, offsets: dict, group="g"):
    resp = send(b, OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1,
                                       member_id="", topics=[OffsetCommitRequestTopic(
                                           name="t", partitions=[
                                               OffsetCommitRequestPartition(
                                                   partition_index=p, committed_offset=o)
                                               for p, o in offsets.items()])]), 8)
    assert all(p.error_code == 0 for t in resp.topics for p in t.partitions)


def marker(b, commit: bool, group="g", pid=PID):
    groups = b.broker.groups
    on_loop(b, groups.complete_transaction, groups.partition_for(group), pid, 0, commit)


def offsets_log_end(b, group="g") -> int:
    groups = b.broker.groups
    return b.broker.replicas.get_log(OFFSETS_TOPIC, groups.partition_for(group)).log_end_offset


# -- the happy paths ------------------------------------------------------------------------

def test_pending_until_commit_marker_and_require_stable(broker):
    b = broker
    plain_commit(b, {2: 7})
    txns = FakeTxns()
    assert errors_of(txn_commit(b, {0: 10, 1: 11}, txns=txns)) == {0}
    # verified (not added: v3) in the transaction for the group's offsets partition
    assert txns.calls == [("tx", PID, 0, [(OFFSETS_TOPIC, b.broker.groups.partition_for("g"))],
                           False)]
    # invisible without RequireStable; with it, UNSTABLE_OFFSET_COMMIT at once (KAFKA-FACTS)
    assert fetch(b) == {0: (-1, -1, "", 0), 1: (-1, -1, "", 0), 2: (7, -1, "", 0)}
    for version in (7, 8, 9):
        assert fetch(b, stable=True, version=version) == {
            0: (-1, -1, "", UNSTABLE), 1: (-1, -1, "", UNSTABLE), 2: (7, -1, "", 0)}
    marker(b, commit=True)
    assert fetch(b, stable=True) == {0: (10, -1, "m10", 0), 1: (11, -1, "m11", 0),
                                     2: (7, -1, "", 0)}


def test_abort_marker_drops_pending(broker):
    b = broker
    plain_commit(b, {0: 5})
    txn_commit(b, {0: 10, 1: 11})
    marker(b, commit=False)
    assert committed(b) == {0: 5}
    assert fetch(b, stable=True)[1] == (-1, -1, "", 0)


def test_restart_with_pending_offsets_then_marker(broker):
    b = broker
    txn_commit(b, {0: 10, 1: 11})
    txn_commit(b, {0: 20}, group="other", pid=PID + 1)
    b.restart()
    assert fetch(b, stable=True)[0][3] == UNSTABLE  # still pending after the replay
    assert committed(b) == {}
    marker(b, commit=True)
    assert committed(b) == {0: 10, 1: 11}
    end = offsets_log_end(b)
    marker(b, commit=True)  # repeated (the coordinator retries after a restart): a no-op
    assert offsets_log_end(b) == end
    b.restart()
    assert committed(b) == {0: 10, 1: 11}
    assert fetch(b, "other", stable=True)[0][3] == UNSTABLE  # another producer's: untouched
    marker(b, commit=False, group="other", pid=PID + 1)
    b.restart()
    assert committed(b, "other") == {} and fetch(b, "other", stable=True)[0][3] == 0


# -- a failed write -----------------------------------------------------------------------

class DiskFull:
    """ENOSPC for this process's file writes while active (tests/server/test_disk_full.py)."""

    def __init__(self, monkeypatch) -> None:
        self.full = threading.Event()
        for name in ("pwrite", "write", "fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name)))

    def _wrap(self, real):
        def call(*args, **kw):
            if self.full.is_set():
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(*args, **kw)
        return call


def test_failed_marker_write_rolls_back_and_the_retry_applies(broker, monkeypatch):
    b = broker
    plain_commit(b, {0: 5})
    txn_commit(b, {0: 10, 1: 11})
    disk = DiskFull(monkeypatch)
    disk.full.set()
    try:
        with pytest.raises(KafkaError) as e:
            marker(b, commit=True)
        assert e.value.code == ErrorCode.NOT_COORDINATOR
    finally:
        disk.full.clear()
    # memory is what is durable: still pending, the old committed offset served
    assert fetch(b, stable=True)[0][3] == UNSTABLE and committed(b) == {0: 5}
    marker(b, commit=True)  # the transaction coordinator retries
    assert committed(b) == {0: 10, 1: 11}
    b.restart()
    assert committed(b) == {0: 10, 1: 11} and fetch(b, stable=True)[0][3] == 0


def test_failed_txn_offset_commit_write_is_not_coordinator_and_not_pending(broker, monkeypatch):
    b = broker
    plain_commit(b, {0: 5})  # creates __consumer_offsets
    disk = DiskFull(monkeypatch)
    disk.full.set()
    try:
        assert errors_of(txn_commit(b, {0: 10})) == {ErrorCode.NOT_COORDINATOR}
    finally:
        disk.full.clear()
    assert fetch(b, stable=True)[0] == (5, -1, "", 0)


# -- the handler's checks and error mapping -------------------------------------------------

@pytest.mark.parametrize("version", range(6))
def test_verification_errors_mapped_per_version(broker, version):
    b = broker
    expected = {
        ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTION_ABORTABLE:
            ErrorCode.TRANSACTION_ABORTABLE if version >= 4 else ErrorCode.INVALID_TXN_STATE,
        ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING: ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if version >= 2
            else ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    }
    for raw, answer in expected.items():
        txns = FakeTxns(raw)
        assert errors_of(txn_commit(b, {0: 1}, version=version, txns=txns)) == {answer}, raw
        assert txns.calls[0][4] is (version >= 5)  # v5 adds the partition (KIP-890 TV2)
    assert fetch(b, stable=True)[0] == (-1, -1, "", 0)  # nothing pending after refusals


@pytest.mark.parametrize("version", [3, 5])
def test_transaction_ended_during_verification_stores_nothing(broker, version):
    """The verification waited (v5 adds the partition with a state write) and the transaction
    ended meanwhile: the offsets are refused, not left pending for the next transaction."""
    b = broker
    txns = FakeTxns(guard_error=ErrorCode.TRANSACTION_ABORTABLE)
    assert errors_of(txn_commit(b, {0: 1}, version=version, txns=txns)) == {
        ErrorCode.TRANSACTION_ABORTABLE if version >= 4 else ErrorCode.INVALID_TXN_STATE}
    assert fetch(b, stable=True)[0] == (-1, -1, "", 0)
    assert b.broker.groups.offsets.pending("g") == {}


def test_unknown_topics_partitions_and_group_id(broker):
    b = broker
    out = txn_commit(b, {0: 1, 7: 1})
    assert out == {("t", 0): 0, ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    # Kafka's order: the partitions refused up front, then those the coordinator answered
    req = TxnOffsetCommitRequest(transactional_id="tx", group_id="g", producer_id=PID, topics=[
        TxnOffsetCommitRequestTopic(name="t", partitions=[
            TxnOffsetCommitRequestPartition(partition_index=p) for p in (0, 7, 1)]),
        TxnOffsetCommitRequestTopic(name="nope", partitions=[
            TxnOffsetCommitRequestPartition(partition_index=0)]),
        TxnOffsetCommitRequestTopic(name="t", partitions=[])])
    resp = on_loop(b, txn_offset_commit.handle, Ctx(b, 3, FakeTxns()), req)
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in resp.topics] == [("t", [(7, 3), (0, 0), (1, 0)]), ("nope", [(0, 3)])]
    txns = FakeTxns()
    assert txn_commit(b, {0: 1}, topic="nope", txns=txns) == {
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert txns.calls == []  # nothing left to commit: answered without the coordinator
    assert errors_of(txn_commit(b, {0: 1}, group="")) == {ErrorCode.INVALID_GROUP_ID}


def test_authorization_as_kafka(broker):
    b = broker
    assert errors_of(txn_commit(b, {0: 1}, deny={ResourceType.TRANSACTIONAL_ID})) == {
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    assert errors_of(txn_commit(b, {0: 1}, deny={ResourceType.GROUP})) == {
        ErrorCode.GROUP_AUTHORIZATION_FAILED}
    assert errors_of(txn_commit(b, {0: 1}, deny={ResourceType.TOPIC})) == {
        ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert fetch(b, stable=True)[0][3] == 0


def _join_classic(b, group: str, instance: str | None = None):
    groups = b.broker.groups
    kw = dict(group_id=group, group_instance_id=instance, protocol_type="consumer",
              protocols=[("range", b"")], session_timeout_ms=30000, rebalance_timeout_ms=30000,
              client_id="c", client_host="h", reason=None, require_known_member_id=False)
    joined = on_loop(b, groups.join, member_id="", **kw)
    sync = on_loop(b, groups.sync, group_id=group, generation_id=joined.generation_id,
                   member_id=joined.member_id, group_instance_id=instance, protocol_type=None,
                   protocol_name=None, assignments={joined.member_id: b""})
    assert joined.error_code == 0 and sync.error_code == 0
    return joined.member_id, joined.generation_id


def test_classic_group_checks_member_generation_and_instance(broker):
    b = broker
    member, gen = _join_classic(b, "cg", instance="i1")
    assert errors_of(txn_commit(b, {0: 1}, group="cg", generation=gen + 1, member=member,
                                instance="i1")) == {ErrorCode.ILLEGAL_GENERATION}
    assert errors_of(txn_commit(b, {0: 1}, group="cg", generation=gen, member="stranger")) == {
        ErrorCode.UNKNOWN_MEMBER_ID}
    assert errors_of(txn_commit(b, {0: 1}, group="cg", generation=gen, member="stranger",
                                instance="i1")) == {ErrorCode.FENCED_INSTANCE_ID}
    # v0-2 carry no member: accepted even while the group has members (Kafka)
    assert errors_of(txn_commit(b, {0: 1}, group="cg", version=2)) == {0}
    assert errors_of(txn_commit(b, {0: 2}, group="cg", generation=gen, member=member,
                                instance="i1")) == {0}
    # an unknown group: generation -1 is fine, a generation is ILLEGAL_GENERATION (Kafka)
    assert errors_of(txn_commit(b, {0: 1}, group="fresh", generation=3, member="m")) == {
        ErrorCode.ILLEGAL_GENERATION}
    assert errors_of(txn_commit(b, {0: 1}, group="fresh2")) == {0}
    # a group that exists only through offsets is Kafka's empty "simple" group: no members
    assert errors_of(txn_commit(b, {0: 1}, group="fresh2", generation=3, member="m")) == {
        ErrorCode.UNKNOWN_MEMBER_ID}


def test_kip848_group_checks_member_and_epoch(broker):
    b = broker
    groups = b.broker.groups
    hb = on_loop(b, groups.consumer_heartbeat, group_id="ng", member_id="m1", member_epoch=0,
                 instance_id=None, rack_id=None, rebalance_timeout_ms=30000,
                 subscribed_topic_names=["t"], subscribed_topic_regex=None,
                 server_assignor=None, topic_partitions=[], api_version=0)
    assert hb.error_code == 0
    epoch = hb.member_epoch
    assert errors_of(txn_commit(b, {0: 1}, group="ng", generation=epoch + 5, member="m1")) == {
        ErrorCode.ILLEGAL_GENERATION}  # a stale epoch is ILLEGAL_GENERATION for TxnOffsetCommit
    assert errors_of(txn_commit(b, {0: 1}, group="ng", generation=epoch, member="nobody")) == {
        ErrorCode.UNKNOWN_MEMBER_ID}
    assert errors_of(txn_commit(b, {0: 1}, group="ng", generation=epoch, member="m1")) == {0}
    marker(b, commit=True, group="ng")
    assert committed(b, "ng") == {0: 1}


def test_offset_commit_naming_a_generation_in_a_simple_group(broker):
    """A group that only has offsets is Kafka's empty "simple" group: an OffsetCommit naming a
    generation gets UNKNOWN_MEMBER_ID at every version (the reference Kafka 4.0 answers 25 at
    v7-v9), where a group that does not exist gets ILLEGAL_GENERATION (v9+: GROUP_ID_NOT_FOUND)."""
    b = broker
    plain_commit(b, {0: 1}, group="simple")
    txn_commit(b, {0: 1}, group="pending-only")

    def commit(group, version):
        resp = send(b, OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=5, member_id="m",
            topics=[OffsetCommitRequestTopic(name="t", partitions=[
                OffsetCommitRequestPartition(partition_index=0, committed_offset=3)])]), version)
        return resp.topics[0].partitions[0].error_code

    for version in (7, 8, 9):
        assert commit("simple", version) == ErrorCode.UNKNOWN_MEMBER_ID, version
        assert commit("pending-only", version) == ErrorCode.UNKNOWN_MEMBER_ID, version
    assert commit("nosuch", 8) == ErrorCode.ILLEGAL_GENERATION
    assert commit("nosuch", 9) == ErrorCode.GROUP_ID_NOT_FOUND


# -- the group APIs with pending offsets ---------------------------------------------------

def test_group_apis_with_pending_offsets(broker):
    b = broker
    txn_commit(b, {0: 10, 1: 11}, group="pg")
    # A group with only pending offsets exists (Kafka's simple group): listed, described Empty.
    listed = {g.group_id: g for g in send(b, ListGroupsRequest(), 4).groups}
    assert listed["pg"].group_state == "Empty" and listed["pg"].protocol_type == ""
    described = send(b, DescribeGroupsRequest(groups=["pg"]), 5).groups[0]
    assert (described.error_code, described.group_state) == (0, "Empty")
    # OffsetDelete drops the pending offset of the partition too (Kafka writes the tombstone).
    resp = send(b, OffsetDeleteRequest(group_id="pg", topics=[OffsetDeleteRequestTopic(
        name="t", partitions=[OffsetDeleteRequestPartition(partition_index=0)])]), 0)
    assert resp.error_code == 0 and resp.topics[0].partitions[0].error_code == 0
    assert fetch(b, "pg", stable=True)[0][3] == 0 and fetch(b, "pg", stable=True)[1][3] == UNSTABLE
    # DeleteGroups: an empty group goes, pending offsets with it; the COMMIT finds nothing.
    resp = send(b, DeleteGroupsRequest(groups_names=["pg"]), 2)
    assert resp.results[0].error_code == 0
    marker(b, commit=True, group="pg")
    assert committed(b, "pg") == {}
    b.restart()
    assert committed(b, "pg") == {} and fetch(b, "pg", stable=True)[1][3] == 0
    assert "pg" not in {g.group_id for g in send(b, ListGroupsRequest(), 4).groups}


def test_topic_deletion_drops_pending_offsets(broker):
    b = broker
    txn_commit(b, {0: 10})

    async def delete():
        async with Admin(b.bootstrap_servers) as admin:
            await admin.delete_topics(["t"])
            await admin.create_topic("t", 3)
    asyncio.run(delete())
    assert fetch(b, stable=True)[0] == (-1, -1, "", 0)
    marker(b, commit=True)
    assert committed(b) == {}
