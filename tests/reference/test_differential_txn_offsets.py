"""Differential: transactional offset commits against the reference Kafka 4.0 (issue 11 item 3).

The TxnOffsetCommit answers before and after AddOffsetsToTxn (INVALID_TXN_STATE below v4,
TRANSACTION_ABORTABLE from v4), a fenced epoch (INVALID_PRODUCER_EPOCH), unknown topics and
partitions, an empty group id, a generation in a group that only has offsets (UNKNOWN_MEMBER_ID);
OffsetFetch while offsets are pending (RequireStable: UNSTABLE_OFFSET_COMMIT, offset -1;
without it the last committed offset; all partitions: only committed ones); the group APIs on a
group that only has pending offsets (listed and described Empty, DeleteGroups drops them); and
the offsets after EndTxn. Needs the transaction coordinator's shell on snakka's side.
"""

from __future__ import annotations

from snakka.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from snakka.protocol.messages.delete_groups_request import DeleteGroupsRequest
from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest
from snakka.protocol.messages.end_txn_request import EndTxnRequest
from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest
from snakka.protocol.messages.list_groups_request import ListGroupsRequest
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

from .differential import Peer, assert_same_shape, run_both
from .test_differential import coordinator_ready, name, wait_group_coordinator


def test_txn_offset_commit(brokers, versions):
    g, g2, t, tid = name("txo-g"), name("txo-g2"), name("txo-t"), name("txo-tx")

    def commit(pid: int, epoch: int, parts: dict[int, int], *, group: str = g, topic: str = t,
               generation: int = -1, member: str = "") -> TxnOffsetCommitRequest:
        return TxnOffsetCommitRequest(
            transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
            generation_id_or_member_epoch=generation, member_id=member,
            topics=[TxnOffsetCommitRequestTopic(name=topic, partitions=[
                TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                committed_metadata="m")
                for p, o in parts.items()])])

    def fetch(group: str, stable: bool) -> OffsetFetchRequest:
        return OffsetFetchRequest(group_id=group, require_stable=stable, topics=[
            OffsetFetchRequestTopic(name=t, partition_indexes=[0, 1])])

    async def commit_and_fetch(p: Peer, pid: int, epoch: int, group: str, suffix: str) -> None:
        """EndTxn(commit), then the group's offsets once nothing is pending (Kafka writes its
        markers after answering)."""
        await p.ask("end_commit" + suffix, EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True),
            version=3)
        await p.until("fetch_after_commit" + suffix, lambda: fetch(group, True),
                      lambda r: all(x.error_code == 0 for x in r.topics[0].partitions),
                      version=7)

    async def scenario(p: Peer):
        await p.create_topic(t, partitions=2)
        for group in (g, g2):
            await p.until(None, lambda group=group: FindCoordinatorRequest(
                key=group, key_type=0), coordinator_ready, version=3)
            await wait_group_coordinator(p, group)
        await p.until(None, lambda: FindCoordinatorRequest(key=tid, key_type=1),
                      coordinator_ready, version=3)
        init = await p.ask_ready("init", InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=60000), version=4)
        pid, epoch = init.producer_id, init.producer_epoch
        await p.ask("before_add_v3", commit(pid, epoch, {0: 5}), version=3)
        await p.ask("before_add_v4", commit(pid, epoch, {0: 5}), version=4)
        await p.ask("fenced_epoch", commit(pid, epoch + 1, {0: 5}), version=3)
        await p.ask("add_offsets", AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=g), version=3)
        await p.ask("commit", commit(pid, epoch, {0: 7, 1: 8}), version=3)
        await p.ask("unknown_partition", commit(pid, epoch, {0: 7, 9: 1}), version=3)
        await p.ask("unknown_topic", commit(pid, epoch, {0: 7}, topic=name("txo-nope")),
                    version=3)
        await p.ask("empty_group", commit(pid, epoch, {0: 7}, group=""), version=3)
        await p.ask("generation_in_simple_group", commit(
            pid, epoch, {0: 7}, generation=3, member="m"), version=3)
        await p.ask("fetch_v5", fetch(g, False), version=5)
        await p.ask("fetch_stable_v7", fetch(g, True), version=7)
        await p.ask("fetch_stable_all", OffsetFetchRequest(require_stable=True, groups=[
            OffsetFetchRequestGroup(group_id=g, topics=None)]), version=8)
        await p.ask("fetch_stable_v8", OffsetFetchRequest(require_stable=True, groups=[
            OffsetFetchRequestGroup(group_id=g, topics=[
                OffsetFetchRequestTopics(name=t, partition_indexes=[0, 1])])]), version=8)
        listed = await p.send(ListGroupsRequest(), version=4)
        listed.groups = [x for x in listed.groups if x.group_id == g]
        p.responses["list"] = listed
        await p.ask("describe", DescribeGroupsRequest(groups=[g]), version=5)
        await commit_and_fetch(p, pid, epoch, g, "")
        # A second transaction whose group is deleted before it commits.
        await p.until(None, lambda: AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=g2),
            lambda r: r.error_code == 0, version=3)
        await p.ask("commit_g2", commit(pid, epoch, {0: 1}, group=g2), version=3)
        await p.ask("delete_g2", DeleteGroupsRequest(groups_names=[g2]), version=2)
        await commit_and_fetch(p, pid, epoch, g2, "_g2")

    assert_same_shape(*run_both(brokers, versions, scenario))
