"""Admin operations for the CLI, on one connection to the bootstrap broker.

Speaks only the public Kafka protocol (Metadata, CreateTopics, DeleteTopics, DescribeConfigs,
ListOffsets, Produce, Fetch), so the CLI works against Apache Kafka too. Single-broker oriented:
requests go to the bootstrap connection; against a multi-broker cluster, produce/consume of
partitions led elsewhere report NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from snakka.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from snakka.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from snakka.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from snakka.protocol.primitives import uuid_to_base64
from snakka.records import Record, build_batch, iter_records
from snakka.util.murmur2 import murmur2_partition

_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# Records per produce request of the CLI's produce verb.
PRODUCE_CHUNK = 1000
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 * 1024 * 1024


class AdminError(RuntimeError):
    """A request was refused; ``code`` is the Kafka error code (0 when not from the broker)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


def _check(code: int, what: str, message: str | None = None) -> None:
    if code:
        _fail(code, what, message)


def _fail(code: int, what: str, message: str | None = None) -> NoReturn:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    raise AdminError(f"{what}: {name}" + (f" ({message})" if message else ""), code)


class Admin:
    def __init__(self, bootstrap: str, *, client_id: str = "snakka-cli") -> None:
        host, port = parse_bootstrap(bootstrap)
        self.conn = KafkaConnection(host, port, client_id=client_id)
        # Connections to other brokers (partition leaders, group coordinators), opened on demand.
        self._extra: dict[tuple[str, int], KafkaConnection] = {}

    async def __aenter__(self) -> Admin:
        await self.conn.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for c in self._extra.values():
            await c.close()
        self._extra.clear()
        await self.conn.close()

    async def _conn_to(self, host: str, port: int) -> KafkaConnection:
        """The bootstrap connection if it is that broker, else a pooled connection to it."""
        if (host, port) == (self.conn.host, self.conn.port):
            return self.conn
        c = self._extra.get((host, port))
        if c is None:
            c = await KafkaConnection(host, port, client_id=self.conn.client_id).connect()
            self._extra[(host, port)] = c
        return c

    # -- topics --------------------------------------------------------------------------
    async def list_topics(self, names: list[str] | None = None):
        req = MetadataRequest(topics=None if names is None else
                              [MetadataRequestTopic(name=n) for n in names],
                              allow_auto_topic_creation=False)
        resp = await self.conn.send(req)
        return [t for t in resp.topics if not t.name.startswith("__") or names]

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None) -> str:
        req = CreateTopicsRequest(topics=[CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication_factor,
            assignments=[], configs=[CreatableTopicConfig(name=k, value=v)
                                     for k, v in (configs or {}).items()])],
            timeout_ms=30000, validate_only=False)
        resp = await self.conn.send(req)
        r = resp.topics[0]
        _check(r.error_code, f"create topic {name}", r.error_message)
        return uuid_to_base64(r.topic_id)

    async def delete_topics(self, names: list[str]) -> None:
        req = DeleteTopicsRequest(topics=[DeleteTopicState(name=n) for n in names],
                                  topic_names=names, timeout_ms=30000)
        resp = await self.conn.send(req)
        for r in resp.responses:
            _check(r.error_code, f"delete topic {r.name}", r.error_message)

    async def topic_overrides(self, name: str) -> dict[str, str]:
        req = DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=2, resource_name=name, configuration_keys=None)])
        resp = await self.conn.send(req)
        r = resp.results[0]
        _check(r.error_code, f"describe configs of {name}", r.error_message)
        return {c.name: c.value for c in r.configs if c.config_source == 1}

    async def partition_offsets(self, topic: str, n: int) -> dict[int, tuple[int, int]]:
        lo = await self.list_offsets(topic, range(n), -2)
        hi = await self.list_offsets(topic, range(n), -1)
        return {p: (lo[p], hi[p]) for p in range(n)}

    async def list_offsets(self, topic: str, partitions, timestamp: int) -> dict[int, int]:
        """ListOffsets for ``partitions`` of ``topic``, each asked of its leader (Metadata), as
        a Kafka cluster requires: any broker but the leader answers NOT_LEADER_OR_FOLLOWER."""
        partitions = list(partitions)
        resp = await self.conn.send(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                                                    allow_auto_topic_creation=False))
        t = resp.topics[0]
        _check(t.error_code, f"metadata of {topic}")
        brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        leaders = {p.partition_index: p.leader_id for p in t.partitions}
        by_leader: dict[tuple[str, int], list[int]] = {}
        for p in partitions:
            if p not in leaders:
                _check(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"list offsets of {topic}-{p}")
            addr = brokers.get(leaders[p])
            if addr is None:
                _fail(ErrorCode.LEADER_NOT_AVAILABLE, f"list offsets of {topic}-{p}")
            by_leader.setdefault(addr, []).append(p)
        out = {}
        for (host, port), parts in by_leader.items():
            req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsTopic(
                name=topic, partitions=[ListOffsetsPartition(partition_index=p,
                                                             timestamp=timestamp)
                                        for p in parts])])
            lresp = await (await self._conn_to(host, port)).send(req)
            for lp in lresp.topics[0].partitions:
                _check(lp.error_code, f"list offsets of {topic}-{lp.partition_index}")
                out[lp.partition_index] = lp.offset
        return out

    async def _topic_metadata(self, topic: str):
        resp = await self.conn.send(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                                                    allow_auto_topic_creation=True))
        t = resp.topics[0]
        _check(t.error_code, f"metadata of {topic}")
        return t

    async def _partition_count(self, topic: str) -> int:
        return len((await self._topic_metadata(topic)).partitions)

    # -- produce / consume ---------------------------------------------------------------
    async def produce_lines(self, topic: str, lines: list[str], *, key_separator: str | None,
                            headers: list[tuple[str, bytes]], partition: int | None, acks: int,
                            compression: str) -> int:
        meta = await self._topic_metadata(topic)
        n_parts = len(meta.partitions)
        rr = itertools.count()
        now = time.time_ns() // 1_000_000
        by_partition: dict[int, list] = {}
        for line in lines:
            key = None
            value = line
            if key_separator is not None and key_separator in line:
                k, value = line.split(key_separator, 1)
                key = k.encode()
            if partition is not None:
                p = partition
            elif key is not None:
                p = murmur2_partition(key, n_parts)
            else:
                p = next(rr) % n_parts
            by_partition.setdefault(p, []).append(
                Record(timestamp=now, key=key, value=value.encode(), headers=tuple(headers)))
        total = 0
        for p, recs in by_partition.items():
            for i in range(0, len(recs), PRODUCE_CHUNK):
                chunk = recs[i:i + PRODUCE_CHUNK]
                batch = build_batch(chunk, compression=_CODECS[compression])
                req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=30000,
                                     # name for Produce <= v12, topic id from v13
                                     topic_data=[TopicProduceData(name=topic, topic_id=meta.topic_id,
                                                                  partition_data=[
                                         PartitionProduceData(index=p, records=batch)])])
                if acks == 0:
                    await self.conn.send_no_response(req)
                else:
                    resp = await self.conn.send(req)
                    r = resp.responses[0].partition_responses[0]
                    _check(r.error_code, f"produce to {topic}-{p}", r.error_message)
                total += len(chunk)
        return total

    async def consume(self, topic: str, on_record: Callable, *, partition: int | None,
                      start: str | int, max_messages: int | None,
                      idle_timeout_ms: int | None,
                      positions: dict[int, int] | None = None,
                      on_progress: Callable[[dict[int, int]], Awaitable[None]] | None = None
                      ) -> int:
        """Fetch ``topic`` (or one ``partition``) from ``start`` (``earliest``, ``latest`` or
        an offset of the one partition) and call ``on_record(record, partition)`` for each
        record, until ``max_messages`` records, or until no record has arrived for
        ``idle_timeout_ms`` (None: never). ``positions`` (partition -> next offset, e.g. a
        group's committed offsets) wins over ``start`` for the partitions it names.
        ``on_progress(positions)`` is awaited after every fetch that delivered records and
        once at the end (a group consumer commits there)."""
        n_parts = await self._partition_count(topic)
        if partition is not None and not 0 <= partition < n_parts:
            raise AdminError(f"topic {topic} has no partition {partition} "
                             f"(it has {n_parts})")
        parts = [partition] if partition is not None else list(range(n_parts))
        known = {p: o for p, o in (positions or {}).items() if p in parts}
        rest = [p for p in parts if p not in known]
        if isinstance(start, int):
            pos = {p: start for p in rest}
        elif rest:
            pos = await self.list_offsets(topic, rest, -2 if start == "earliest" else -1)
        else:
            pos = {}
        pos.update(known)
        seen = 0
        idle_since = time.monotonic()

        async def progress() -> None:
            if on_progress is not None:
                await on_progress(dict(pos))

        while max_messages is None or seen < max_messages:
            req = FetchRequest(replica_id=-1, max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=1,
                               max_bytes=FETCH_MAX_BYTES, isolation_level=0, session_id=0,
                               session_epoch=-1, topics=[FetchTopic(topic=topic, partitions=[
                                   FetchPartition(partition=p, fetch_offset=pos[p],
                                                  partition_max_bytes=FETCH_MAX_BYTES)
                                   for p in parts])], forgotten_topics_data=[], rack_id="")
            resp = await self.conn.send(req, version=min(12, self.conn.version_for(1)))
            got = 0
            for t in resp.responses:
                for pd in t.partitions:
                    _check(pd.error_code, f"fetch {topic}-{pd.partition_index} at offset "
                                          f"{pos[pd.partition_index]}")
                    if not pd.records:
                        continue
                    for rec in iter_records(bytes(pd.records)):
                        if rec.offset < pos[pd.partition_index]:
                            continue
                        on_record(rec, pd.partition_index)
                        pos[pd.partition_index] = rec.offset + 1
                        got += 1
                        seen += 1
                        if max_messages is not None and seen >= max_messages:
                            await progress()
                            return seen
            if got:
                idle_since = time.monotonic()
                await progress()
            elif (idle_timeout_ms is not None
                  and (time.monotonic() - idle_since) * 1000 >= idle_timeout_ms):
                break
        await progress()
        return seen
