"""File descriptors (issue 9 item 13): a broker under a low RLIMIT_NOFILE serves thousands of
partitions, because segment files are opened lazily and kept in a bounded pool
(``log.max.open.files``); and start-up fails loudly or serves, never "started" and silent; and
record sets waiting for a slow reader count in that bound too.

The broker runs as a subprocess whose RLIMIT_NOFILE (soft and hard) is lowered before exec, so
the broker cannot raise it back."""

from __future__ import annotations

import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading

import pytest
from server.rawsock import recv_frame  # tests/ is on sys.path

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


# -- a slow reader of many partitions (record sets waiting for sendfile) ---------------------

SLOW_PARTITIONS = 48
SLOW_RECORDS = 40  # per partition, 4 KiB each: ~160 KiB per partition, sent with sendfile
SLOW_CONNECTIONS = 4
SLOW_FETCHES = 2  # pipelined per connection, none read until the end
OPEN_FILES = 32  # log.max.open.files: regions may take half of it


def topic_log_fds(pid: int, topic: str) -> int:
    """Descriptors the broker holds on the ``.log`` files of ``topic`` (pooled segment files
    and the duplicates of record sets waiting to be sent)."""
    n = 0
    fd_dir = f"/proc/{pid}/fd"
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except FileNotFoundError:  # closed meanwhile
            continue
        if f"/{topic}-" in target and target.endswith(".log"):
            n += 1
    return n


def slow_reader_fetch(topic: str) -> bytes:
    from snakka.protocol import encode_request
    from snakka.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic

    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20,
                       isolation_level=0, session_id=0, session_epoch=-1,
                       topics=[FetchTopic(topic=topic, partitions=[
                           FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                           for p in range(SLOW_PARTITIONS)])],
                       forgotten_topics_data=[], rack_id="")
    return b"".join(encode_request(corr, "slow-reader", 12, req)
                    for corr in range(1, SLOW_FETCHES + 1))


def batch_offsets(records: bytes) -> list[int]:
    """The offsets in a record set, each batch's CRC checked."""
    from snakka.util.crc32c import crc32c

    offsets: list[int] = []
    pos = 0
    while pos < len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        end = pos + 12 + length
        assert end <= len(records), "a partial batch"
        (crc,) = struct.unpack_from(">I", records, pos + 17)
        assert crc32c(records[pos + 21:end]) == crc
        (last_delta,) = struct.unpack_from(">i", records, pos + 23)
        offsets.extend(range(base, base + last_delta + 1))
        pos = end
    return offsets


def test_slow_reader_of_many_partitions_holds_bounded_descriptors(data_dir):
    """Connections that send Fetch requests for many partitions and never read made the broker
    hold one descriptor per record set waiting for sendfile, outside log.max.open.files. Now
    the segment files and those descriptors together stay within log.max.open.files (the
    record sets beyond its half are read into memory), confluent-kafka clients produce and
    consume meanwhile, and the slow reader gets every record once it reads."""
    from confluent_kafka import Producer

    from snakka.protocol.messages.fetch_response import FetchResponse

    from .helpers import wait_until

    broker = LimitedBroker(data_dir, 1024, **{"log.max.open.files": str(OPEN_FILES)})
    socks: list[socket.socket] = []
    stop = threading.Event()
    peak = [0]
    try:
        assert broker.wait_ready_or_exit(), "\n".join(broker.output[-20:])
        pid = broker.proc.pid
        ck_create_topic(broker.bootstrap, "slow", SLOW_PARTITIONS)
        ck_create_topic(broker.bootstrap, "side", 2)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all"})
        for part in range(SLOW_PARTITIONS):
            for i in range(SLOW_RECORDS):
                p.produce("slow", value=bytes([i]) * 4096, key=f"{part}-{i}".encode(),
                          partition=part)
            p.poll(0)
        assert p.flush(60) == 0

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], topic_log_fds(pid, "slow"))
                stop.wait(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        payload = slow_reader_fetch("slow")
        for _ in range(SLOW_CONNECTIONS):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that does not
            s.connect(("localhost", broker.port))
            s.sendall(payload)
            socks.append(s)
        # The slow readers' record sets hold their share of the bound ...
        wait_until(lambda: topic_log_fds(pid, "slow") >= OPEN_FILES // 2, 60,
                   "the slow readers' record sets to hold descriptors")
        # ... while other clients are served: produce and consume another topic, and read
        # all of the slow readers' topic (its record sets now mostly go through memory).
        for i in range(200):
            p.produce("side", value=f"s{i}".encode(), partition=i % 2)
        assert p.flush(60) == 0
        side = ck_consume(broker.bootstrap, "side", [0, 1], 200)
        assert sorted(m.value for m in side) == sorted(f"s{i}".encode() for i in range(200))
        slow = ck_consume(broker.bootstrap, "slow", range(SLOW_PARTITIONS),
                          SLOW_PARTITIONS * SLOW_RECORDS)
        assert len(slow) == SLOW_PARTITIONS * SLOW_RECORDS
        assert {(m.partition, m.offset) for m in slow} == {
            (part, i) for part in range(SLOW_PARTITIONS) for i in range(SLOW_RECORDS)}
        stop.set()
        sampler.join()
        # Pooled files plus regions: log.max.open.files, plus at most the two files a read on
        # the event loop and a flush thread may pin while the pool is full.
        assert OPEN_FILES // 2 <= peak[0] <= OPEN_FILES + 2, peak[0]

        # The slow readers read now: every response complete, every record there, the same
        # bytes whether they went out with sendfile or from memory.
        record_sets: dict[int, set[bytes]] = {}
        for s in socks:
            for corr in range(1, SLOW_FETCHES + 1):
                frame = recv_frame(s)
                assert struct.unpack_from(">i", frame)[0] == corr
                resp = FetchResponse.decode(frame[5:], 12)
                assert resp.error_code == 0
                parts = resp.responses[0].partitions
                assert len(parts) == SLOW_PARTITIONS
                for pd in parts:
                    assert pd.error_code == 0
                    records = bytes(pd.records)
                    assert batch_offsets(records) == list(range(SLOW_RECORDS))
                    record_sets.setdefault(pd.partition_index, set()).add(records)
        assert sorted(record_sets) == list(range(SLOW_PARTITIONS))
        assert all(len(v) == 1 for v in record_sets.values())
        assert broker.proc.poll() is None
    finally:
        stop.set()
        for s in socks:
            s.close()
        broker.stop(signal.SIGKILL)
