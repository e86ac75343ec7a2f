"""Long-running JVM applications of the reference Kafka (Connect, MirrorMaker 2, Streams) as child
processes of a test: start with a properties file, wait for a condition, stop or SIGKILL.

Each `bin/*.sh` launcher ends in `exec java`, so the child's pid is the JVM's: ``kill()`` is a
real crash (SIGKILL to the JVM, no shutdown hook), ``stop()`` a clean one (SIGTERM runs the
application's shutdown hook: Connect commits offsets, Streams closes its tasks). The child runs
in its own session so a test that fails mid-way still leaves nothing behind (``close()`` in a
``finally``/fixture kills the group).

Waiting is polling with a short interval and a deadline: the conditions are the JVM's effects
on the broker or on files (a REST answer, a committed offset, a file's content), which no event
of ours announces. The deadlines are generous: this machine has 2 cores shared by other work.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from reference_kafka import reference_dir

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)

T = TypeVar("T")

# Small heaps and a C1-only JIT: the applications move little data, the machine has 2 cores.
JVM_ENV = {"KAFKA_HEAP_OPTS": "-Xmx256m",
           "KAFKA_JVM_PERFORMANCE_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"}


def free_port() -> int:
    """An ephemeral port nobody listens on now (for a REST listener the JVM binds itself)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_properties(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def rocksdb_jar() -> Path | None:
    """pyspark's rocksdbjni jar (the reference copy lacks RocksDB; KAFKA-FACTS), or None."""
    try:
        import pyspark
    except ImportError:
        return None
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("rocksdbjni-*.jar"))
    return jars[-1] if jars else None


def wait_for(what: str, check: Callable[[], T], timeout: float,
             app: JvmApp | None = None, interval: float = 0.25) -> T:
    """Poll ``check`` until it returns something truthy (and return that); fail with ``what`` and
    the tail of the application's log when the deadline passes or the application died."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if app is not None and app.proc is not None and app.proc.poll() is not None:
            raise AssertionError(f"{app.name} exited ({app.proc.returncode}) while waiting for "
                                 f"{what}:\n{app.log_tail()}")
        if time.monotonic() > deadline:
            tail = app.log_tail() if app is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{tail}")
        time.sleep(interval)


def partition_ends(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """``(high watermark, last stable offset)`` of one partition (ListOffsets latest, read
    uncommitted then read committed; -1 when the partition does not exist yet)."""
    async def go() -> tuple[int, int]:
        host, port = parse_bootstrap(bootstrap)
        async with KafkaConnection(host, port) as conn:
            ends = []
            for isolation in (0, 1):
                r = await conn.send(ListOffsetsRequest(
                    replica_id=-1, isolation_level=isolation, topics=[ListOffsetsTopic(
                        name=topic, partitions=[ListOffsetsPartition(partition_index=partition,
                                                                     timestamp=-1)])]))
                part = r.topics[0].partitions[0]
                ends.append(part.offset if part.error_code == 0 else -1)
            return ends[0], ends[1]
    return asyncio.run(go())


def open_transaction(ends: tuple[int, int]) -> bool:
    """After a first commit, a transaction holding records is open (the LSO below the HW)."""
    high_watermark, last_stable = ends
    return 0 < last_stable < high_watermark


class JvmApp:
    """One run of ``bin/<script> <args>``; its stdout+stderr go to ``log``."""

    def __init__(self, name: str, script: str, args: list[str], log_dir: Path,
                 extra_env: dict[str, str] | None = None) -> None:
        home = reference_dir()
        assert home is not None
        self.name = name
        self.cmd = ["bash", str(home / "bin" / script), *args]
        self.log_dir = log_dir
        self.env = {**os.environ, **JVM_ENV, "LOG_DIR": str(log_dir), **(extra_env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.log = log_dir / f"{name}.log"
        self.started_at = 0.0

    def start(self) -> JvmApp:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.runs += 1
        self.log = self.log_dir / f"{self.name}-{self.runs}.log"
        out = self.log.open("wb")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        out.close()
        return self

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (the JVM's shutdown hook runs) and wait for the exit."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the JVM (and anything in its session): a crash."""
        assert self.proc is not None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(30)

    def close(self) -> None:
        if self.proc is not None:
            self.kill()

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def error_lines(self, allowed: tuple[str, ...] = ()) -> list[str]:
        """The application's ERROR log lines (log4j's ``] ERROR `` level field), minus the
        ones containing an ``allowed`` fragment."""
        return [ln for ln in self.log_text().splitlines()
                if "] ERROR " in ln and not any(a in ln for a in allowed)]
