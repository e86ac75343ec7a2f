"""File descriptors (issue 9 item 13): a broker under a low RLIMIT_NOFILE serves thousands of
partitions, because segment files are opened lazily and kept in a bounded pool
(``log.max.open.files``); and start-up fails loudly or serves, never "started" and silent.

The broker runs as a subprocess whose RLIMIT_NOFILE (soft and hard) is lowered before exec, so
the broker cannot raise it back."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading

import pytest

from .helpers import ck_admin, ck_consume, ck_create_topic

START_TIMEOUT_S = 120


class LimitedBroker:
    """``snakka serve`` in a subprocess with RLIMIT_NOFILE = ``nofile``."""

    def __init__(self, data_dir: str, nofile: int, **config: str) -> None:
        cmd = [sys.executable, "-m", "snakka", "serve", "--ready-line", "--data-dir", data_dir,
               "--listeners", "PLAINTEXT://localhost:0"]
        for k, v in config.items():
            cmd += ["-o", f"{k}={v}"]
        self.output: list[str] = []
        self.port = 0

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1, preexec_fn=limit,
                                     start_new_session=True)
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line.rstrip("\n"))
            if line.startswith("SNAKKA_READY port="):
                self.port = int(line.split("=", 1)[1])
                self._ready.set()
        self._ready.set()  # the process ended

    def wait_ready_or_exit(self, timeout: float = START_TIMEOUT_S) -> bool:
        """True once the broker says it is ready; False if it exited first."""
        assert self._ready.wait(timeout), "broker neither became ready nor exited:\n" + \
            "\n".join(self.output[-20:])
        return self.port != 0

    @property
    def bootstrap(self) -> str:
        return f"localhost:{self.port}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM: clean shutdown. SIGKILL: a crash (and a quick end: a clean shutdown fsyncs
        every partition, which for thousands of them takes a while on a busy disk)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._reader.join(5)


def produce_one_per_partition(bootstrap: str, topic: str, partitions: range) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    errors: list = []
    for i in partitions:
        p.produce(topic, value=f"v{i}".encode(), partition=i,
                  on_delivery=lambda err, _m: errors.append(err) if err else None)
        p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:3]


def metadata_partitions(bootstrap: str, topic: str) -> int:
    md = ck_admin(bootstrap).list_topics(topic, timeout=30)
    t = md.topics[topic]
    assert t.error is None, t.error
    return len(t.partitions)


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "data")


def test_thousands_of_partitions_under_a_low_fd_limit(data_dir):
    """3,000 partitions with RLIMIT_NOFILE 256 (Kafka would need one descriptor per segment
    and index): create, produce to all (strict: acknowledged = on disk), crash, recover every
    partition under the same limit, read."""
    n = 3000
    broker = LimitedBroker(data_dir, 256, **{"log.flush.strict": "true"})
    try:
        assert broker.wait_ready_or_exit(), "\n".join(broker.output[-20:])
        ck_create_topic(broker.bootstrap, "wide", n)
        produce_one_per_partition(broker.bootstrap, "wide", range(n))
        assert metadata_partitions(broker.bootstrap, "wide") == n
    finally:
        broker.stop(signal.SIGKILL)

    broker = LimitedBroker(data_dir, 256)
    try:
        assert broker.wait_ready_or_exit(), "\n".join(broker.output[-20:])
        assert metadata_partitions(broker.bootstrap, "wide") == n
        sample = [0, 1, 977, n - 1]
        got = ck_consume(broker.bootstrap, "wide", sample, len(sample))
        assert sorted(m.value for m in got) == sorted(f"v{i}".encode() for i in sample)
    finally:
        broker.stop(signal.SIGKILL)


def test_start_up_serves_or_fails_loudly_near_the_fd_limit(data_dir):
    """An existing data dir with about as many partitions as the fd limit allows: the broker
    either serves or exits non-zero with one line; never ready-but-silent (before the file pool,
    300 partitions under RLIMIT_NOFILE 316 started and then could not accept a connection)."""
    n = 300
    broker = LimitedBroker(data_dir, 4096)
    try:
        assert broker.wait_ready_or_exit()
        ck_create_topic(broker.bootstrap, "many", n)
    finally:
        broker.stop(signal.SIGKILL)

    for headroom in (8, 12, 16, 20):
        broker = LimitedBroker(data_dir, n + headroom)
        try:
            if broker.wait_ready_or_exit():
                assert metadata_partitions(broker.bootstrap, "many") == n, headroom
            else:
                assert broker.proc.wait(30) != 0
                out = "\n".join(broker.output)
                assert "Traceback" not in out, out
                assert sum("cannot start" in line for line in broker.output) == 1, out
        finally:
            broker.stop(signal.SIGKILL)


def test_start_up_without_enough_descriptors_exits_with_one_line(data_dir):
    broker = LimitedBroker(data_dir, 40)
    try:
        ready = broker.wait_ready_or_exit()
        assert not ready, "started with 40 descriptors"
        assert broker.proc.wait(30) != 0
        out = "\n".join(broker.output)
        assert "Traceback" not in out, out
        errors = [line for line in broker.output if "cannot start" in line]
        assert len(errors) == 1, out
        assert "RLIMIT_NOFILE" in errors[0] or "descriptors" in errors[0], errors[0]
    finally:
        broker.stop()
