"""A scripted Kafka "broker" for client state-machine tests, built on snakka's generated codecs.

It answers ApiVersions, Metadata and FindCoordinator itself (one topic layout given by the
test, itself as coordinator and leader unless told otherwise) and hands ShareGroupHeartbeat,
ShareFetch and ShareAcknowledge to functions the test installs, so a test can script fencing,
session errors, leader moves and dropped connections exactly. Every decoded request is recorded
in ``requests`` as ``(api_key, version, request, connection number)``.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from snakka.protocol import decode_request, encode_response
from snakka.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from snakka.protocol.messages.find_coordinator_response import (
    Coordinator,
    FindCoordinatorResponse,
)
from snakka.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

VERSIONS = {18: (0, 3), 3: (0, 12), 10: (0, 6), 2: (1, 9), 76: (1, 1), 78: (1, 2), 79: (1, 2)}


@dataclass
class FakeCluster:
    """Topics (name -> (id, partition count)) and partition leaders shared by fake brokers."""

    topics: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    brokers: dict[int, FakeBroker] = field(default_factory=dict)
    coordinator: int = 1

    def add_topic(self, name: str, partitions: int, leader: int = 1) -> uuid.UUID:
        tid = uuid.uuid4()
        self.topics[name] = (tid, partitions)
        for p in range(partitions):
            self.leaders[(name, p)] = leader
        return tid


class FakeBroker:
    def __init__(self, cluster: FakeCluster, node_id: int = 1) -> None:
        self.cluster = cluster
        self.node_id = node_id
        cluster.brokers[node_id] = self
        self.handlers: dict[int, Callable[[Any, int, int], Any]] = {}
        self.requests: list[tuple[int, int, Any, int]] = []
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._conn_ids = 0
        self.received = asyncio.Event()

    async def start(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self) -> None:
        self.drop_connections()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def drop_connections(self) -> None:
        for w in list(self._writers.values()):
            w.close()
        self._writers.clear()

    def of(self, api_key: int) -> list[Any]:
        return [r[2] for r in self.requests if r[0] == api_key]

    async def wait_for(self, api_key: int, count: int, timeout: float = 10.0) -> list[Any]:
        async def go():
            while len(self.of(api_key)) < count:
                self.received.clear()
                await self.received.wait()
        await asyncio.wait_for(go(), timeout)
        return self.of(api_key)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conn_ids += 1
        conn = self._conn_ids
        self._writers[conn] = writer
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header, req, spec = decode_request(frame)
                key, version = header.request_api_key, header.request_api_version
                self.requests.append((key, version, req, conn))
                self.received.set()
                resp = await self._answer(key, version, req, conn)
                if resp is None:
                    continue  # scripted: no answer (the client must time out or close)
                writer.write(encode_response(header.correlation_id, key, version, resp))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # closed by either side, or the test's loop ended
        finally:
            self._writers.pop(conn, None)
            writer.close()

    async def _answer(self, key: int, version: int, req: Any, conn: int) -> Any:
        if key in self.handlers:
            out = self.handlers[key](req, version, conn)
            if asyncio.iscoroutine(out):
                out = await out
            return out
        if key == 18:
            return ApiVersionsResponse(error_code=0, api_keys=[
                ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in VERSIONS.items()])
        if key == 3:
            c = self.cluster
            topics = []
            for t in req.topics:
                if t.name not in c.topics:
                    topics.append(MetadataResponseTopic(error_code=3, name=t.name))
                    continue
                tid, n = c.topics[t.name]
                topics.append(MetadataResponseTopic(
                    error_code=0, name=t.name, topic_id=tid, partitions=[
                        MetadataResponsePartition(partition_index=p,
                                                  leader_id=c.leaders[(t.name, p)],
                                                  replica_nodes=[c.leaders[(t.name, p)]],
                                                  isr_nodes=[c.leaders[(t.name, p)]])
                        for p in range(n)]))
            return MetadataResponse(brokers=[
                MetadataResponseBroker(node_id=b.node_id, host="127.0.0.1", port=b.port)
                for b in c.brokers.values()], cluster_id="fake", controller_id=1, topics=topics)
        if key == 10:
            coord = self.cluster.brokers[self.cluster.coordinator]
            if version >= 4:
                return FindCoordinatorResponse(coordinators=[Coordinator(
                    key=req.coordinator_keys[0], node_id=coord.node_id, host="127.0.0.1",
                    port=coord.port)])
            return FindCoordinatorResponse(node_id=coord.node_id, host="127.0.0.1",
                                           port=coord.port)
        raise AssertionError(f"fake broker has no handler for API {key}")
