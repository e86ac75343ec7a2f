"""Run one scenario against the reference Kafka and against snakka; compare response shapes.

A scenario is ``async def scenario(p: Peer)``: it sends requests with ``await p.ask(label,
request)`` (encoded with snakka's generated codecs, over snakka.client.connection, which is a
plain protocol client) and may use earlier answers to build later requests (member ids, the
broker's node id). ``run_both`` runs it on both brokers at once; ``assert_same_shape`` compares
every labelled response with shape.shape() and fails with one line per differing field path,
minus the documented exceptions ``{path glob: reason}``. An exception that matches nothing fails
too, so the list cannot outlive the difference it excuses.

Versions: ``p.ask`` uses the highest version both brokers (and snakka's codecs) support unless the
scenario passes one; tests pass lower versions that common clients use for the fields that are
nullable only in some versions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.apis import api_spec
from snakka.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreateTopicsRequest,
)
from snakka.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from snakka.protocol.messages.metadata_request import MetadataRequest

from .shape import diff, shape

# How long a scenario may wait for a broker to become ready for something (a new topic's
# leader, the group coordinator's first load): Kafka does these asynchronously.
READY_TIMEOUT_S = 60.0
# Errors a broker gives while it is getting ready; `until` resends on them.
RETRIABLE = {5, 6, 14, 15, 16, 3}  # LEADER_NOT_AVAILABLE, NOT_LEADER, COORDINATOR_*, UNKNOWN_TOPIC


class Peer:
    """One broker under comparison, as a scenario sees it."""

    def __init__(self, name: str, bootstrap: str, versions: dict[int, int],
                 config: Mapping[str, str] | None = None,
                 client_id: str = "snakka-differential") -> None:
        self.name = name
        self.client_id = client_id  # the request header's: client quotas are keyed by it
        self.config = dict(config or {})  # client security configs (SASL), as KafkaConnection
        self.bootstrap = bootstrap
        self.common_versions = versions
        self.responses: dict[str, Any] = {}
        self.conn: KafkaConnection | None = None
        self.node_id = -1

    async def open(self) -> Peer:
        self.conn = await self.connect()
        md = await self.send(MetadataRequest(topics=[]), version=12)
        self.node_id = md.brokers[0].node_id
        return self

    async def connect(self) -> KafkaConnection:
        """A new connection with the peer's client id and configs (a muted connection's
        quota-sharing sibling, for instance); the caller closes it."""
        host, port = parse_bootstrap(self.bootstrap)
        return await KafkaConnection(host, port, client_id=self.client_id,
                                     config=self.config).connect()

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    def version(self, api_key: int) -> int:
        return self.common_versions[api_key]

    async def send(self, request: Any, version: int | None = None,
                   conn: KafkaConnection | None = None) -> Any:
        """On ``conn`` (one of :meth:`connect`'s) or the peer's own connection."""
        conn = conn or self.conn
        assert conn is not None
        if version is None:
            version = self.version(request.API_KEY)
        return await conn.send(request, version=version)

    async def ask(self, label: str, request: Any, version: int | None = None,
                  conn: KafkaConnection | None = None) -> Any:
        """Send, record the answer under ``label`` for comparison, return it."""
        assert label not in self.responses, f"label {label!r} used twice"
        resp = await self.send(request, version, conn)
        self.responses[label] = resp
        return resp

    async def until(self, label: str | None, make: Callable[[], Any],
                    ready: Callable[[Any], bool], version: int | None = None) -> Any:
        """Resend ``make()`` until ``ready(response)`` (bounded); record the last answer.

        Polling is the only way to see a remote broker finish background work (Kafka creates a
        topic's leader and loads a group coordinator asynchronously)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            resp = await self.send(make(), version)
            if ready(resp):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: not ready after {READY_TIMEOUT_S}s: {resp!r}")
            await asyncio.sleep(0.1)
        if label is not None:
            assert label not in self.responses, f"label {label!r} used twice"
            self.responses[label] = resp
        return resp

    async def create_topic(self, name: str, partitions: int = 1,
                           configs: list | None = None) -> None:
        """Create a topic (not compared) and wait until every partition has a leader."""
        resp = await self.send(CreateTopicsRequest(
            topics=[CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                                   assignments=[], configs=configs or [])],
            timeout_ms=30000, validate_only=False), version=min(7, self.version(19)))
        assert resp.topics[0].error_code == 0, (self.name, resp)
        await self.wait_topic(name, partitions)

    async def wait_topic(self, name: str, partitions: int) -> None:
        """Until every partition serves reads (Kafka's Metadata names a leader a moment before
        the leader answers Produce and Fetch; ListOffsets goes through the same check)."""
        def ready(resp) -> bool:
            ps = resp.topics[0].partitions
            return len(ps) == partitions and all(p.error_code == 0 for p in ps)
        await self.until(None, lambda: ListOffsetsRequest(replica_id=-1, topics=[
            ListOffsetsTopic(name=name, partitions=[
                ListOffsetsPartition(partition_index=i, timestamp=-1)
                for i in range(partitions)])]), ready, version=min(7, self.version(2)))

    async def ask_ready(self, label: str, request: Any, version: int | None = None) -> Any:
        """``ask``, resending while the top-level error is one a broker gives while it loads
        (COORDINATOR_LOAD_IN_PROGRESS and friends), as clients do."""
        return await self.until(label, lambda: request,
                                lambda r: getattr(r, "error_code", 0) not in RETRIABLE, version)


def common_versions(kafka_keys: dict[int, tuple[int, int]],
                    snakka_keys: dict[int, tuple[int, int]]) -> dict[int, int]:
    """API key -> the highest version both brokers and snakka's stable codecs support."""
    out = {}
    for key, (klo, khi) in kafka_keys.items():
        if key not in snakka_keys:
            continue
        slo, shi = snakka_keys[key]
        spec = api_spec(key)
        if spec is None:
            continue
        hi = min(khi, shi, spec.max_stable_version)
        if hi >= max(klo, slo, spec.min_version):
            out[key] = hi
    return out


async def _run(peer: Peer, scenario: Callable[[Peer], Awaitable[None]]) -> Peer:
    await peer.open()
    try:
        await scenario(peer)
    finally:
        await peer.close()
    return peer


def run_both(brokers: tuple[str, str], versions: dict[int, int],
             scenario: Callable[[Peer], Awaitable[None]],
             config: Mapping[str, str] | None = None,
             client_id: str = "snakka-differential") -> tuple[Peer, Peer]:
    """``config``: the client configs of both connections (``security.protocol``, ``sasl.*``:
    a scenario run as an authenticated principal); ``client_id``: their request headers'
    (a scenario under a client quota)."""
    kafka = Peer("kafka", brokers[0], versions, config, client_id)
    snakka = Peer("snakka", brokers[1], versions, config, client_id)

    async def main() -> None:
        await asyncio.gather(_run(kafka, scenario), _run(snakka, scenario))

    asyncio.run(main())
    return kafka, snakka


def assert_same_shape(kafka: Peer, snakka: Peer, exceptions: dict[str, str] | None = None
                      ) -> None:
    """Every labelled response has the same shape on both brokers, but for ``exceptions``
    (``{path glob: one-line reason}``, paths prefixed by the label: ``"fetch.responses*"``)."""
    exceptions = exceptions or {}
    assert kafka.responses.keys() == snakka.responses.keys()
    lines, used = [], set()
    for label in kafka.responses:
        got, hit = diff(shape(kafka.responses[label], label), shape(snakka.responses[label], label),
                        exceptions)
        lines += got
        used |= hit
    stale = sorted(set(exceptions) - used)
    msg = []
    if lines:
        msg.append("responses differ from the reference Kafka:\n  " + "\n  ".join(lines))
    if stale:
        msg.append("exceptions that no longer match anything: " + ", ".join(stale))
    assert not msg, "\n".join(msg)
