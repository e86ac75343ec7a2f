"""Protocol-level helpers for the share-group integration tests (KIP-932): a share member that
speaks ShareGroupHeartbeat / ShareFetch / ShareAcknowledge with snakka's generated requests over
snakka.client.connection.KafkaConnection, nothing snakka-specific on the wire."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from snakka.protocol.errors import ErrorCode
from snakka.records import Record, build_batch, iter_records

from .helpers import now_ms, raw_connect

ACCEPT, RELEASE, REJECT, RENEW, GAP = 1, 2, 3, 4, 0
GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP


async def set_group_configs(conn, group: str, configs: dict[str, str]) -> None:
    from snakka.protocol.messages.incremental_alter_configs_request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )

    resp = await conn.send(IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
        resource_type=GROUP_RESOURCE, resource_name=group,
        configs=[AlterableConfig(name=k, config_operation=0, value=v)
                 for k, v in configs.items()])], validate_only=False))
    for r in resp.responses:
        assert r.error_code == 0, r


async def create_topic(conn, name: str, partitions: int) -> uuid.UUID:
    from snakka.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest

    resp = await conn.send(CreateTopicsRequest(topics=[CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=10_000, validate_only=False))
    t = resp.topics[0]
    assert t.error_code == 0, t
    return t.topic_id


async def produce(conn, topic: str, partition: int, values: list[bytes]) -> int:
    """One batch of ``values``; returns its base offset."""
    from snakka.protocol.messages.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    ts = now_ms()
    batch = build_batch([Record(timestamp=ts, key=b"k", value=v) for v in values])
    resp = await conn.send(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000,
                                          topic_data=[TopicProduceData(name=topic, partition_data=[
                                              PartitionProduceData(index=partition,
                                                                   records=batch)])]),
                           version=9)
    r = resp.responses[0].partition_responses[0]
    assert r.error_code == 0, r
    return r.base_offset


def acks(*batches: tuple[int, int, int | list[int]]):
    """AcknowledgementBatch list from (first, last, type or [types])."""
    from snakka.protocol.messages.share_fetch_request import AcknowledgementBatch

    return [AcknowledgementBatch(first_offset=f, last_offset=la,
                                 acknowledge_types=[t] if isinstance(t, int) else list(t))
            for f, la, t in batches]


@dataclass
class Fetched:
    """A ShareFetch response, flattened per (topic id, partition)."""

    error_code: int
    lock_ms: int
    partitions: dict = field(default_factory=dict)  # (tid, p) -> PartitionData

    def records(self, tid, p) -> list[tuple[int, bytes, int]]:
        """(offset, value, delivery count) of the acquired records of a partition."""
        pd = self.partitions.get((tid, p))
        if pd is None:
            return []
        counts = {}
        for a in pd.acquired_records:
            for o in range(a.first_offset, a.last_offset + 1):
                counts[o] = a.delivery_count
        return [(r.offset, r.value, counts[r.offset])
                for r in iter_records(bytes(pd.records or b"")) if r.offset in counts]

    def all_records(self):
        out = []
        for (tid, p) in self.partitions:
            out += [(p, *r) for r in self.records(tid, p)]
        return sorted(out)


class ShareMember:
    """One share consumer's member + session state."""

    def __init__(self, conn, group: str, member_id: str | None = None) -> None:
        self.conn = conn
        self.group = group
        self.member_id = member_id or str(uuid.uuid4())
        self.member_epoch = 0
        self.session_epoch = 0
        self.assignment: set = set()

    @classmethod
    async def connect(cls, bootstrap: str, group: str, **kw) -> ShareMember:
        return cls(await raw_connect(bootstrap), group, **kw)

    async def heartbeat(self, topics: list[str] | None = None, epoch: int | None = None):
        from snakka.protocol.messages.share_group_heartbeat_request import (
            ShareGroupHeartbeatRequest,
        )

        resp = await self.conn.send(ShareGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id,
            member_epoch=self.member_epoch if epoch is None else epoch,
            rack_id=None, subscribed_topic_names=topics))
        if resp.error_code == 0:
            self.member_epoch = resp.member_epoch
            if resp.assignment is not None:
                self.assignment = {(tp.topic_id, p) for tp in resp.assignment.topic_partitions
                                   for p in tp.partitions}
        return resp

    async def join(self, topics: list[str]):
        resp = await self.heartbeat(topics, epoch=0)
        assert resp.error_code == 0, resp
        return resp

    async def fetch(self, partitions=None, *, ack=None, forget=None, max_wait_ms=0,
                    min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500,
                    epoch: int | None = None, version: int = 2, mode: int = 0,
                    renew: bool = False, expect_error: int = 0) -> Fetched:
        """ShareFetch of ``partitions`` ([(tid, p)]; default: none beyond the session) with
        acknowledgements ``ack`` ({(tid, p): acks(...)})."""
        from snakka.protocol.messages.share_fetch_request import (
            FetchPartition,
            FetchTopic,
            ForgottenTopic,
            ShareFetchRequest,
        )

        ack = ack or {}
        parts: dict = {}
        for tp in list(partitions or []) + [tp for tp in ack if tp not in (partitions or [])]:
            parts.setdefault(tp[0], []).append(FetchPartition(
                partition_index=tp[1], partition_max_bytes=0,
                acknowledgement_batches=ack.get(tp, [])))
        forgotten: dict = {}
        for tid, p in forget or []:
            forgotten.setdefault(tid, []).append(p)
        sent_epoch = self.session_epoch if epoch is None else epoch
        resp = await self.conn.send(ShareFetchRequest(
            group_id=self.group, member_id=self.member_id, share_session_epoch=sent_epoch,
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
            max_records=max_records, batch_size=batch_size, share_acquire_mode=mode,
            is_renew_ack=renew,
            topics=[FetchTopic(topic_id=t, partitions=ps) for t, ps in parts.items()],
            forgotten_topics_data=[ForgottenTopic(topic_id=t, partitions=ps)
                                   for t, ps in forgotten.items()]), version=version)
        assert resp.error_code == expect_error, (resp.error_code, resp.error_message)
        if resp.error_code == 0 and epoch is None:
            self.session_epoch = -1 if sent_epoch == -1 else (
                1 if sent_epoch == 2**31 - 1 else sent_epoch + 1)
        out = Fetched(resp.error_code, resp.acquisition_lock_timeout_ms)
        for t in resp.responses:
            for p in t.partitions:
                out.partitions[(t.topic_id, p.partition_index)] = p
        return out

    async def acknowledge(self, ack: dict, *, epoch: int | None = None, version: int = 2,
                          renew: bool = False, expect_error: int = 0):
        from snakka.protocol.messages.share_acknowledge_request import (
            AcknowledgementBatch,
            AcknowledgePartition,
            AcknowledgeTopic,
            ShareAcknowledgeRequest,
        )

        topics: dict = {}
        for (tid, p), batches in ack.items():
            topics.setdefault(tid, []).append(AcknowledgePartition(
                partition_index=p, acknowledgement_batches=[
                    AcknowledgementBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                         acknowledge_types=b.acknowledge_types)
                    for b in batches]))
        sent_epoch = self.session_epoch if epoch is None else epoch
        resp = await self.conn.send(ShareAcknowledgeRequest(
            group_id=self.group, member_id=self.member_id, share_session_epoch=sent_epoch,
            is_renew_ack=renew,
            topics=[AcknowledgeTopic(topic_id=t, partitions=ps) for t, ps in topics.items()]),
            version=version)
        assert resp.error_code == expect_error, (resp.error_code, resp.error_message)
        if resp.error_code == 0 and epoch is None and sent_epoch > 0:
            self.session_epoch = 1 if sent_epoch == 2**31 - 1 else sent_epoch + 1
        return {(t.topic_id, p.partition_index): p.error_code
                for t in resp.responses for p in t.partitions}

    async def close(self) -> None:
        await self.conn.close()


def ack_errors(f: Fetched) -> dict:
    return {tp: pd.acknowledge_error_code for tp, pd in f.partitions.items()}


NONE = ErrorCode.NONE
