"""The reference Apache Kafka 4.0 broker and its Java tools, for differential and JVM tests.

`../shared/kafka-reference` (beside the project root) holds a Kafka 4.0 binary distribution and
`bin/kafka-ref.sh`, which runs a single-node KRaft broker. A user's clone has no `../shared`, and
a machine may have no `java`: everything here skips the calling test with one clear reason then.

The API is small on purpose:
- ``reference_dir()``: the distribution's directory, or None;
- ``skip_reason()``: why the reference cannot be used here, or None;
- ``ReferenceKafka``: start/stop one reference broker on a free port (7-25 s to start, ~1 GB);
  the session-scoped fixture ``reference_kafka`` in tests/conftest.py shares one per run;
- ``run_tool(name, *args)``: run a `bin/*.sh` tool (kafka-topics.sh, ...) against any broker,
  with a timeout, returning the completed process (stdout/stderr as text).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KAFKA_REFERENCE = ROOT.parent / "shared" / "kafka-reference"
KAFKA_HOME = KAFKA_REFERENCE / "kafka_2.13-4.0.0"
KAFKA_REF_SH = KAFKA_REFERENCE / "bin" / "kafka-ref.sh"


def reference_dir() -> Path | None:
    return KAFKA_HOME if KAFKA_HOME.is_dir() and KAFKA_REF_SH.is_file() else None


def skip_reason() -> str | None:
    if reference_dir() is None:
        return f"reference Apache Kafka not found at {KAFKA_REFERENCE} (only in the team's checkout)"
    if shutil.which("java") is None:
        return "no `java` on PATH (make test installs Debian's openjdk-17-jre-headless)"
    return None


def _free_port_pair() -> int:
    """A port P with P+1 also free (kafka-ref.sh puts its controller on P+1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        try:
            with socket.socket() as s2:
                s2.bind(("127.0.0.1", p + 1))
        except OSError:
            continue
        return p
    raise RuntimeError("no free port pair")


class ReferenceKafka:
    """One reference Kafka 4.0 broker (KRaft, broker+controller) on 127.0.0.1:<free port>.

    ``extra_config``: server.properties lines, or a function of the client port that returns
    them (for listeners of its own: kafka-ref.sh puts the controller on port + 1). A port taken
    by another process between choosing it and binding it (the suite runs many brokers at
    once) makes :meth:`start` choose again, in a fresh data directory, up to
    ``START_ATTEMPTS`` times."""

    START_ATTEMPTS = 3

    def __init__(self, extra_config: Mapping[str, str] | Callable[[int], Mapping[str, str]]
                 | None = None) -> None:
        self._extra_config = extra_config or {}
        self._choose_port()

    def _choose_port(self) -> None:
        self.port = _free_port_pair()
        self.dir = tempfile.mkdtemp(prefix="kafka-ref-")
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        cfg = self._extra_config
        self.extra: dict[str, str] = dict(cfg(self.port) if callable(cfg) else cfg)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(KREF_PORT=str(self.port), KREF_DIR=self.dir,
                   KREF_EXTRA="\n".join(f"{k}={v}" for k, v in self.extra.items()))
        return env

    def start(self, timeout: float = 180) -> ReferenceKafka:
        for attempt in range(self.START_ATTEMPTS):
            r = subprocess.run(["bash", str(KAFKA_REF_SH), "start"], env=self._env(),
                               capture_output=True, text=True, timeout=timeout)
            if r.returncode == 0:
                return self
            out = f"{r.stdout}{r.stderr}"
            log = Path(self.dir) / "kafka.out"
            bind_failed = "BindException" in out or (
                log.exists() and "BindException" in log.read_text(errors="replace"))
            if not bind_failed or attempt == self.START_ATTEMPTS - 1:
                raise RuntimeError(f"reference Kafka did not start: {out}")
            self.stop()
            self._choose_port()
        raise AssertionError("unreachable")

    def stop(self) -> None:
        subprocess.run(["bash", str(KAFKA_REF_SH), "stop"], env=self._env(),
                       capture_output=True, text=True, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)


class KafkaOnDir(ReferenceKafka):
    """A reference Kafka started on a copy of ``source`` (a data directory, e.g. a stopped
    snakka's) instead of a freshly formatted one (kafka-ref.sh formats only a directory without
    meta.properties). It runs as a single combined node with a static quorum on port + 1, node.id
    1 as in snakka's meta.properties (docs/data-directory.md); ``source=None`` starts a fresh one
    with the same shape, whose directory :meth:`stop_keeping_data` hands over."""

    def __init__(self, source: str | None,
                 extra_config: Mapping[str, str] | Callable[[int], Mapping[str, str]]
                 | None = None) -> None:
        self.source = source

        def config(port: int) -> dict[str, str]:
            extra = extra_config(port) if callable(extra_config) else extra_config
            return {**({"controller.quorum.voters": f"1@127.0.0.1:{port + 1}"} if source else {}),
                    **(extra or {})}

        super().__init__(config)

    def _choose_port(self) -> None:
        super()._choose_port()
        if self.source is not None:
            shutil.copytree(self.source, os.path.join(self.dir, "kraft-logs"))

    def stop_keeping_data(self) -> str:
        """Stop the JVM and return its data directory (left in place until :meth:`stop`)."""
        subprocess.run(["bash", str(KAFKA_REF_SH), "stop"], env=self._env(),
                       capture_output=True, text=True, timeout=120)
        return os.path.join(self.dir, "kraft-logs")


class RunningKafka:
    """A reference broker started outside the test run (``SNAKKA_REFERENCE_KAFKA=host:port``)."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.port = int(bootstrap_servers.rsplit(":", 1)[1])

    def stop(self) -> None:  # not ours to stop
        pass


# Kafka's answers while a coordinator's partition of __consumer_offsets is created or loaded.
_COORDINATOR_NOT_READY = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR


def wait_group_coordinator(bootstrap_servers: str, timeout: float = 120.0) -> float:
    """Until a fresh Kafka's group coordinator answers: its first FindCoordinator creates
    ``__consumer_offsets`` (50 partitions) and, until they are loaded, every group request gets
    COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR. On a loaded machine that took longer than a
    client's 30 s wait (a KafkaJS consume in CI), so the shared reference broker is made ready
    once, as a long-running cluster is. The seconds it took; AssertionError after ``timeout``."""
    import asyncio
    import time

    from snakka.client.connection import KafkaConnection, parse_bootstrap
    from snakka.protocol.messages.describe_groups_request import DescribeGroupsRequest
    from snakka.protocol.messages.find_coordinator_request import FindCoordinatorRequest

    group = "snakka-tests-coordinator-probe"

    async def ready() -> bool:
        host, port = parse_bootstrap(bootstrap_servers)
        async with KafkaConnection(host, port) as conn:
            found = await conn.send(FindCoordinatorRequest(key=group, key_type=0,
                                                           coordinator_keys=[group]))
            codes = ([c.error_code for c in found.coordinators] if found.coordinators
                     else [found.error_code])
            if set(codes) & _COORDINATOR_NOT_READY:
                return False
            described = await conn.send(DescribeGroupsRequest(groups=[group]))
            return described.groups[0].error_code not in _COORDINATOR_NOT_READY

    start = time.monotonic()
    while not asyncio.run(ready()):
        waited = time.monotonic() - start
        assert waited < timeout, (
            f"the reference Kafka at {bootstrap_servers} has no group coordinator after "
            f"{waited:.0f} s")
        time.sleep(0.2)
    return time.monotonic() - start


def run_tool(name: str, *args: str, timeout: float = 120,
             input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``bin/<name>`` of the reference distribution (e.g. "kafka-topics.sh")."""
    home = reference_dir()
    assert home is not None, skip_reason()
    tool = home / "bin" / name
    env = dict(os.environ)
    # Small heaps and no JIT warm-up tiers: the tools are short-lived on a 2-core machine.
    env.setdefault("KAFKA_HEAP_OPTS", "-Xmx256m")
    env.setdefault("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
    env["LOG_DIR"] = tempfile.gettempdir()
    return subprocess.run(["bash", str(tool), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, input=input)
