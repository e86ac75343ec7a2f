"""Consumer-group harness for the ``test_groups_*`` suites (no tests in this module).

Every group member is a real, unmodified client (kafka-python, confluent-kafka, aiokafka) in its
**own process**, polling in a loop; the test process only watches. Why processes and not
threads: a member has to be killable the way a crashed consumer dies, with no LeaveGroup and no
heartbeat after the kill. librdkafka keeps heartbeating from its own threads while the
application stops polling (until ``max.poll.interval.ms``), and kafka-python 3 / aiokafka run
heartbeats on an internal event loop; stopping those from outside relies on private attributes
and is racy. SIGKILL of a process is exact and the same for all three clients. A process per
member also keeps the clients' GIL away from the in-process (thread-mode) broker, whose ERROR
logs the integration conftest checks.

The member process (``python test_groups_harness.py CONFIG_JSON``) prints one JSON object per
line on stdout:

* ``{"ev": "assigned", "parts": [...], "t": T, "member": ID, "gen": G}`` from the client's
  assign callback. ``parts`` are the partitions *added*: the whole assignment under the eager
  protocol (after a revoke of everything), the increment under cooperative / KIP-848.
  ``gen`` is the classic generation where the client exposes it (kafka-python, aiokafka), else
  null.
* ``{"ev": "revoked", "parts": [...], "t": T, "lost": bool}`` from the revoke / lost callback.
* ``{"ev": "batch", "id": N, "t": T, "recs": [[partition, offset, value], ...]}`` after each
  non-empty poll, then ``{"ev": "commit", "id": N, "ok": [partitions]}`` once the member has
  committed that batch synchronously (offset = last + 1 per partition); ``ok`` are the
  partitions whose commit the broker acknowledged. (Reported in that order so that a member
  killed right after a commit has still reported what it consumed.)
* ``{"ev": "error", "msg": ...}`` for client errors, ``{"ev": "closed", "t": T}`` at the end.

``T`` is ``time.monotonic()``, which on Linux is one clock for all processes: together with
causality (a member's revoke happens before it rejoins, and a new owner is assigned only after
every member rejoined) this orders events across members. On stdin the member accepts
``close`` (close the consumer the normal way, then exit). Partitions are ints, or
"topic:partition" strings when a member subscribes to several topics (``topic="a,b"``).

Client quirk worked around here: kafka-python 3.0.12 can lose a rebalance for good (see
``_run_kafka_python``); its members wait for their coordinator's metadata snapshot before the
first poll. Post-mortems: ``SNAKKA_GROUP_TEST_DEBUG=DIR`` turns on the clients' debug logs
(librdkafka ``debug=cgrp``) and keeps each member's stderr in DIR.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

if __package__:  # imported by the tests (not when run as the member process)
    from .helpers import wait_until

HARNESS = os.path.abspath(__file__)

# Broker configs the group tests start from: no initial rebalance delay (Kafka's 3 s default
# would slow every test), and short session timeouts allowed for the expiry tests.
GROUP_BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "3000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
}
CLASSIC_CLIENTS = ["kafka-python", "confluent-kafka", "aiokafka"]


# =============================================================================================
# The member process
# =============================================================================================
class _Out:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches = 0

    def __call__(self, ev: str, **kw) -> None:
        line = json.dumps({"ev": ev, **kw})
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def batch(self, recs: list) -> int:
        """Report polled records *before* committing them (a member killed between its
        commit and a later report would otherwise hide records it consumed)."""
        self._batches += 1
        self("batch", id=self._batches, t=time.monotonic(), recs=recs)
        return self._batches


def _stdin_commands() -> queue.Queue:
    q: queue.Queue = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            q.put(line.strip())
        q.put("close")  # the test process went away: leave like a normal shutdown

    threading.Thread(target=read, daemon=True).start()
    return q


def _closing(cmds: queue.Queue) -> bool:
    try:
        return cmds.get_nowait() == "close"
    except queue.Empty:
        return False


def _value(v: bytes | None) -> str | None:
    return None if v is None else v.decode("utf-8", "replace")


def _keyer(cfg: dict):
    """Partitions are reported as ints for one topic, as "topic:partition" for several."""
    topics = cfg["topic"].split(",")
    if len(topics) == 1:
        return topics, lambda topic, partition: partition
    return topics, lambda topic, partition: f"{topic}:{partition}"


def _run_confluent(cfg: dict, out: _Out, cmds: queue.Queue) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {
        "bootstrap.servers": cfg["bootstrap"],
        "group.id": cfg["group"],
        "client.id": cfg["name"],
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
        "fetch.queue.backoff.ms": 0,
    }
    if cfg.get("group_protocol") == "consumer":  # KIP-848: the broker owns timeouts/assignment
        conf["group.protocol"] = "consumer"
        if cfg.get("remote_assignor"):
            conf["group.remote.assignor"] = cfg["remote_assignor"]
    else:
        conf["session.timeout.ms"] = cfg["session_timeout_ms"]
        conf["heartbeat.interval.ms"] = cfg["heartbeat_interval_ms"]
        conf["max.poll.interval.ms"] = cfg["max_poll_interval_ms"]
        if cfg.get("assignor"):
            conf["partition.assignment.strategy"] = cfg["assignor"]
    if cfg.get("instance_id"):
        conf["group.instance.id"] = cfg["instance_id"]
    conf.update(cfg.get("extra") or {})
    c = Consumer(conf)
    topics, key = _keyer(cfg)

    def keys(parts):
        return sorted(key(p.topic, p.partition) for p in parts)

    def on_assign(consumer, parts):
        out("assigned", parts=keys(parts), t=time.monotonic(), member=consumer.memberid(),
            gen=None)

    def on_revoke(consumer, parts):
        out("revoked", parts=keys(parts), t=time.monotonic(), lost=False)

    def on_lost(consumer, parts):
        out("revoked", parts=keys(parts), t=time.monotonic(), lost=True)

    c.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    out("started", pid=os.getpid())
    while not _closing(cmds):
        msgs = c.consume(num_messages=cfg["max_batch"], timeout=0.1)
        recs, last = [], {}
        for m in msgs:
            if m.error():
                out("error", msg=str(m.error()))
                continue
            recs.append([key(m.topic(), m.partition()), m.offset(), _value(m.value())])
            last[(m.topic(), m.partition())] = m.offset()
        if not recs:
            continue
        batch = out.batch(recs)
        ok: list = []
        try:
            res = c.commit(offsets=[TopicPartition(topic, p, o + 1)
                                    for (topic, p), o in sorted(last.items())],
                           asynchronous=False)
            ok = keys(tp for tp in res if tp.error is None)
        except KafkaException as e:
            out("error", msg=f"commit: {e}")
        out("commit", id=batch, ok=ok)
    c.close()


def _kafka_python_assignor(name: str):
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    return {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
            "sticky": StickyPartitionAssignor,
            "cooperative-sticky": CooperativeStickyAssignor}[name]


def _run_kafka_python(cfg: dict, out: _Out, cmds: queue.Queue) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.errors import KafkaError

    kw = {}
    if cfg.get("assignor"):
        kw["partition_assignment_strategy"] = [_kafka_python_assignor(cfg["assignor"])]
    c = KafkaConsumer(bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"],
                      client_id=cfg["name"], enable_auto_commit=False,
                      auto_offset_reset="earliest", fetch_max_wait_ms=100,
                      session_timeout_ms=cfg["session_timeout_ms"],
                      heartbeat_interval_ms=cfg["heartbeat_interval_ms"],
                      max_poll_interval_ms=cfg["max_poll_interval_ms"],
                      group_instance_id=cfg.get("instance_id"), **kw)

    topics, key = _keyer(cfg)

    def keys(tps):
        return sorted(key(tp.topic, tp.partition) for tp in tps)

    def ident():
        g = c._coordinator._generation  # private: kafka-python has no public accessor
        return g.member_id, g.generation_id

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned):
            member, gen = ident()
            out("assigned", parts=keys(assigned), t=time.monotonic(), member=member, gen=gen)

        def on_partitions_revoked(self, revoked):
            out("revoked", parts=keys(revoked), t=time.monotonic(), lost=False)

        def on_partitions_lost(self, lost):
            out("revoked", parts=keys(lost), t=time.monotonic(), lost=True)

    c.subscribe(topics, listener=Listener())
    # Workaround for a kafka-python 3.0.12 bug (the broker answers correctly): a leader whose
    # rejoin was triggered by a metadata change (its assignment snapshot differs from the
    # metadata snapshot) loses that rebalance if poll() times out while the JoinGroup/SyncGroup
    # is in flight: computing the assignment updates the snapshot, need_rejoin() turns False,
    # and the finished join task is never awaited again (no assignment, heartbeats stay
    # disabled, the session expires). A member that joins before its coordinator has a
    # metadata snapshot of the subscribed topics always takes that path once. So: wait until it
    # has one (private attribute: kafka-python has no public way to ask).
    deadline = time.monotonic() + 60  # generous: a loaded CI machine
    while not all(c._coordinator._metadata_snapshot.get(t) for t in topics):
        if time.monotonic() > deadline:
            raise SystemExit(f"no metadata snapshot for {topics}")
        time.sleep(0.02)
    out("started", pid=os.getpid())
    while not _closing(cmds):
        polled = c.poll(timeout_ms=100, max_records=cfg["max_batch"])
        recs = [[key(tp.topic, tp.partition), m.offset, _value(m.value)]
                for tp, ms in polled.items() for m in ms]
        if not recs:
            continue
        batch = out.batch(recs)
        offsets = {TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(ms[-1].offset + 1,
                                                                              "", -1)
                   for tp, ms in polled.items() if ms}
        ok: list = []
        try:
            c.commit(offsets)
            ok = keys(offsets)
        except KafkaError as e:
            out("error", msg=f"commit: {e!r}")
        out("commit", id=batch, ok=ok)
    c.close()


async def _run_aiokafka(cfg: dict, out: _Out, cmds: queue.Queue) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from aiokafka.errors import KafkaError

    kw = {}
    if cfg.get("assignor"):
        kw["partition_assignment_strategy"] = ({
            "range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
            "sticky": StickyPartitionAssignor}[cfg["assignor"]],)
    c = AIOKafkaConsumer(bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"],
                         client_id=cfg["name"], enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_wait_ms=100,
                         session_timeout_ms=cfg["session_timeout_ms"],
                         heartbeat_interval_ms=cfg["heartbeat_interval_ms"],
                         max_poll_interval_ms=cfg["max_poll_interval_ms"],
                         group_instance_id=cfg.get("instance_id"), **kw)

    topics, key = _keyer(cfg)

    def keys(tps):
        return sorted(key(tp.topic, tp.partition) for tp in tps)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned):
            co = c._coordinator  # private: aiokafka has no public accessor
            out("assigned", parts=keys(assigned), t=time.monotonic(), member=co.member_id,
                gen=co.generation)

        def on_partitions_revoked(self, revoked):
            out("revoked", parts=keys(revoked), t=time.monotonic(), lost=False)

    c.subscribe(topics, listener=Listener())
    await c.start()
    out("started", pid=os.getpid())
    try:
        while not _closing(cmds):
            polled = await c.getmany(timeout_ms=100, max_records=cfg["max_batch"])
            recs = [[key(tp.topic, tp.partition), m.offset, _value(m.value)]
                    for tp, ms in polled.items() for m in ms]
            if not recs:
                continue
            batch = out.batch(recs)
            offsets = {TopicPartition(tp.topic, tp.partition): ms[-1].offset + 1
                       for tp, ms in polled.items() if ms}
            ok: list = []
            try:
                await c.commit(offsets)
                ok = keys(offsets)
            except KafkaError as e:
                out("error", msg=f"commit: {e!r}")
            out("commit", id=batch, ok=ok)
    finally:
        await c.stop()


def member_main(cfg: dict) -> None:
    if os.environ.get("SNAKKA_GROUP_TEST_DEBUG"):  # client logs on the member's stderr
        import logging

        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                            format="%(asctime)s %(name)s %(message)s")
        cfg.setdefault("extra", {})
        if cfg["client"] == "confluent-kafka":
            cfg["extra"]["debug"] = "cgrp"
    out = _Out()
    cmds = _stdin_commands()
    if cfg["client"] == "confluent-kafka":
        _run_confluent(cfg, out, cmds)
    elif cfg["client"] == "kafka-python":
        _run_kafka_python(cfg, out, cmds)
    elif cfg["client"] == "aiokafka":
        import asyncio

        asyncio.run(_run_aiokafka(cfg, out, cmds))
    else:
        raise SystemExit(f"unknown client {cfg['client']}")
    out("closed", t=time.monotonic())


# =============================================================================================
# The test side
# =============================================================================================
@dataclass
class Delivery:
    member: str
    t: float
    partition: int | str  # "topic:partition" when a member reads several topics
    offset: int
    value: str | None
    committed: bool  # the broker acknowledged this batch's commit for this partition


@dataclass
class Member:
    """One group member process and what it reported (see the module doc)."""

    client: str
    bootstrap: str
    group: str
    topic: str
    name: str
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 300
    max_poll_interval_ms: int = 30000
    assignor: str | None = None
    instance_id: str | None = None
    group_protocol: str = "classic"
    remote_assignor: str | None = None
    max_batch: int = 20
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.events: list[dict] = []
        self.owned: set[int] = set()
        self.intervals: list[tuple[int, float, float | None]] = []  # closed (p, start, end)
        self._open: dict[int, float] = {}
        self.deliveries: list[Delivery] = []
        self._batches: dict[int, list[Delivery]] = {}  # reported, commit not yet reported
        self.member_id: str | None = None
        self.generation: int | None = None
        self.errors: list[str] = []
        self.ended_at: float | None = None  # close or kill time
        debug_dir = os.environ.get("SNAKKA_GROUP_TEST_DEBUG")
        if debug_dir and os.path.isdir(debug_dir):  # keep the members' logs for a post-mortem
            self._stderr = open(os.path.join(debug_dir, f"{self.group}-{self.name}-"
                                             f"{time.monotonic_ns()}.log"), "w+b")
        else:
            self._stderr = tempfile.TemporaryFile()
        self._reader: threading.Thread | None = None

    # -- process -------------------------------------------------------------------------
    def start(self) -> Member:
        cfg = {k: getattr(self, k) for k in (
            "client", "bootstrap", "group", "topic", "name", "session_timeout_ms",
            "heartbeat_interval_ms", "max_poll_interval_ms", "assignor", "instance_id",
            "group_protocol", "remote_assignor", "max_batch", "extra")}
        self.proc = subprocess.Popen([sys.executable, HARNESS, json.dumps(cfg)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, name=f"member-{self.name}",
                                        daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self._apply(ev)

    def _apply(self, ev: dict) -> None:
        self.events.append(ev)
        kind = ev["ev"]
        if kind == "assigned":
            self.member_id = ev.get("member") or self.member_id
            self.generation = ev.get("gen")
            for p in ev["parts"]:
                self.owned.add(p)
                self._open.setdefault(p, ev["t"])
        elif kind == "revoked":
            for p in ev["parts"]:
                self.owned.discard(p)
                start = self._open.pop(p, None)
                if start is not None:
                    self.intervals.append((p, start, ev["t"]))
        elif kind == "batch":
            batch = [Delivery(self.name, ev["t"], p, o, v, False) for p, o, v in ev["recs"]]
            self._batches[ev["id"]] = batch
            self.deliveries += batch
        elif kind == "commit":
            ok = set(ev["ok"])
            for d in self._batches.pop(ev["id"]):
                d.committed = d.partition in ok
        elif kind == "error":
            self.errors.append(ev["msg"])
        elif kind == "closed":
            self._end(ev["t"])

    def _end(self, t: float) -> None:
        self.ended_at = t
        for p, start in self._open.items():
            self.intervals.append((p, start, t))
        self._open.clear()
        self.owned = set()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.ended_at is None

    def close(self, timeout: float = 30) -> None:
        """Close the consumer normally (LeaveGroup for dynamic members) and wait for the exit."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write("close\n")
        self.proc.stdin.flush()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"member {self.name} did not close within {timeout}s\n"
                                 f"{self.stderr_tail()}") from None
        if self._reader is not None:
            self._reader.join(5)
        assert self.proc.returncode == 0, (
            f"member {self.name} exited {self.proc.returncode}\n{self.stderr_tail()}")
        assert self.ended_at is not None, f"member {self.name} exited without closing"

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no more heartbeats (the kernel closes the sockets)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        t = time.monotonic()
        self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)
        with self.lock:
            if self.ended_at is None:
                self._end(t)

    def stop_quietly(self) -> None:
        """Teardown: make sure the process is gone, whatever state the test left it in."""
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
        self._stderr.close()

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            self._stderr.seek(0)
            data = self._stderr.read().decode("utf-8", "replace")
        except (ValueError, OSError):
            return ""
        return f"--- stderr of {self.name} ---\n{data[-n:]}"

    def snapshot(self) -> dict:
        with self.lock:
            return {"owned": set(self.owned), "n_events": len(self.events),
                    "member": self.member_id, "gen": self.generation,
                    "delivered": len(self.deliveries)}

    def events_since(self, n: int) -> list[dict]:
        with self.lock:
            return [e for e in self.events[n:]
                    if e["ev"] in ("assigned", "revoked") and e["parts"]]

    def describe(self) -> str:
        with self.lock:
            rb = [(e["ev"][0], e["parts"], e.get("gen")) for e in self.events
                  if e["ev"] in ("assigned", "revoked")]
            return (f"{self.name}: alive={self.alive} owned={sorted(self.owned)} "
                    f"member={self.member_id} gen={self.generation} "
                    f"delivered={len(self.deliveries)} errors={self.errors[-3:]} "
                    f"rebalance events={rb[-8:]}")


class Members:
    """The members a test started (teardown kills whatever is still running)."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, **defaults) -> None:
        self.client, self.bootstrap, self.group, self.topic = client, bootstrap, group, topic
        self.defaults = defaults
        self.all: list[Member] = []
        # Extra condition for wait_shared (e.g. the broker's view of a KIP-848 group).
        self.settled_check = None

    def start(self, name: str, **kw) -> Member:
        m = Member(kw.pop("client", self.client), self.bootstrap, self.group, self.topic, name,
                   **{**self.defaults, **kw})
        self.all.append(m.start())
        return m

    @property
    def alive(self) -> list[Member]:
        return [m for m in self.all if m.alive]

    def describe(self) -> str:
        return "\n".join(m.describe() for m in self.all)

    def stderr(self) -> str:
        return "\n".join(m.stderr_tail(1500) for m in self.all)

    def stop_all(self) -> None:
        for m in self.all:
            m.stop_quietly()

    def crashed(self) -> list[Member]:
        """Members whose process exited without being closed or killed by the test."""
        return [m for m in self.all
                if m.proc is not None and m.proc.poll() is not None and m.ended_at is None]

    def wait(self, pred, timeout: float, what: str):
        def check():
            if self.crashed():
                raise AssertionError(f"member process(es) {[m.name for m in self.crashed()]} "
                                     f"died while waiting for {what}")
            return pred()

        try:
            return wait_until(check, timeout, what, interval=0.05)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.describe()}\n{self.stderr()}") from None

    def wait_shared(self, members: list[Member], n_partitions: int | set, timeout: float = 45,
                    what: str = "") -> dict[str, set]:
        """Wait until ``members`` together own every partition exactly once, each at least one.

        Under the eager protocol this can only hold once every member has its assignment of
        the same generation (a member that still holds an old assignment has not revoked yet,
        so the new member cannot have synced); under the cooperative protocol the moving
        partitions are unowned between the two rounds, so coverage fails until the last step.
        KIP-848 reconciles member by member, so coverage can hold half-way (a member already
        got one of its new partitions while another still holds one it must give up): its
        tests add ``settled_check`` (the broker's view: every member at its target).
        ``n_partitions`` is a count (one topic) or the set of "topic:partition" keys.
        """
        universe = (set(range(n_partitions)) if isinstance(n_partitions, int)
                    else set(n_partitions))

        def shared():
            snap = {m.name: m.snapshot()["owned"] for m in members}
            if any(not m.alive for m in members) or any(not s for s in snap.values()):
                return None
            counts = defaultdict(int)
            for s in snap.values():
                for p in s:
                    counts[p] += 1
            if set(counts) != universe or any(c != 1 for c in counts.values()):
                return None
            if self.settled_check is not None and not self.settled_check(snap):
                return None
            return snap

        return self.wait(shared, timeout, what or f"{len(members)} members to share "
                         f"{len(universe)} partitions")

    def deliveries(self) -> list[Delivery]:
        out: list[Delivery] = []
        for m in self.all:
            with m.lock:
                out += m.deliveries
        return out

    def wait_delivered(self, produced: dict[tuple[int, int], str], timeout: float = 60) -> None:
        def done():
            got = {(d.partition, d.offset) for d in self.deliveries()}
            return set(produced) <= got

        try:
            self.wait(done, timeout, f"all {len(produced)} produced records to be consumed")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.missing_report(produced)}") from None

    def missing_report(self, produced: dict[tuple[int, int], str]) -> str:
        """Per partition: the offsets never consumed, and who consumed it last (for a stuck
        partition: where its consumer stopped)."""
        got: dict = defaultdict(list)
        for d in self.deliveries():
            got[d.partition].append(d)
        lines = []
        for p in sorted({p for p, _ in produced}, key=str):
            want = sorted(o for q, o in produced if q == p)
            have = {d.offset for d in got[p]}
            miss = [o for o in want if o not in have]
            if not miss:
                continue
            last = max(got[p], key=lambda d: d.t, default=None)
            lines.append(f"partition {p}: {len(miss)} of {len(want)} never consumed "
                         f"(offsets {miss[0]}..{miss[-1]}); last consumed "
                         f"{(last.member, last.offset, round(last.t, 3)) if last else None}")
        return "\n".join(lines)


def check_deliveries(deliveries: list[Delivery], produced: dict[tuple[int, int], str]) -> None:
    """Every produced record was consumed, with the value produced at its offset, and a record
    is consumed again only if its earlier consumption was never committed (the uncommitted
    tail of a batch whose commit failed, or of a killed member). Nothing unknown appears."""
    by_rec: dict[tuple[int, int], list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_rec[(d.partition, d.offset)].append(d)
    problems = []
    missing = sorted(set(produced) - set(by_rec))
    if missing:
        problems.append(f"{len(missing)} records never consumed, e.g. {missing[:10]}")
    unknown = sorted(set(by_rec) - set(produced))
    if unknown:
        problems.append(f"{len(unknown)} consumed records were not produced by this test, "
                        f"e.g. {unknown[:10]}")
    for rec, ds in sorted(by_rec.items()):
        if rec in produced and any(d.value != produced[rec] for d in ds):
            problems.append(f"record {rec}: consumed values {[d.value for d in ds]} != "
                            f"produced {produced[rec]!r}")
        ds.sort(key=lambda d: d.t)
        for d in ds[:-1]:
            if d.committed:
                problems.append(
                    f"record {rec} consumed again after a committed consumption: "
                    f"{[(x.member, round(x.t, 3), x.committed) for x in ds]}")
                break
        if len(problems) > 15:
            break
    assert not problems, "\n".join(problems)


def check_no_overlap(members: list[Member]) -> None:
    """No partition was ever owned by two members at the same time (ownership intervals from
    the assign/revoke callbacks; a killed member's ownership ends when it was killed)."""
    per_part: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for m in members:
        with m.lock:
            ivs = list(m.intervals) + [(p, s, float("inf")) for p, s in m._open.items()]
        for p, s, e in ivs:
            per_part[p].append((s, e, m.name))
    problems = []
    for p, ivs in sorted(per_part.items()):
        ivs.sort()
        for i, (s1, e1, n1) in enumerate(ivs):
            for s2, e2, n2 in ivs[i + 1:]:
                if s2 < e1 and n1 != n2:
                    problems.append(f"partition {p}: owned by {n1} [{s1:.3f}, {e1:.3f}] and "
                                    f"by {n2} [{s2:.3f}, {e2:.3f}]")
    assert not problems, "partitions owned by two members at once:\n" + "\n".join(problems)


class Feeder:
    """Produces numbered records round-robin over the partitions from a background thread
    (a steady trickle, so rebalances happen while records flow). ``produced`` maps
    (partition, offset) from the delivery reports to the value."""

    def __init__(self, bootstrap: str, topic: str, n_partitions: int, tag: str,
                 per_tick: int = 6, tick_s: float = 0.05) -> None:
        from confluent_kafka import Producer

        self.topic, self.n, self.tag = topic, n_partitions, tag
        self.per_tick, self.tick_s = per_tick, tick_s
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        self.produced: dict[tuple[int, int], str] = {}
        self.failed: list[str] = []
        self.seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _cb(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.produced[(msg.partition(), msg.offset())] = msg.value().decode()

    def burst(self, n: int) -> None:
        """Produce ``n`` records now and wait for their acknowledgements."""
        for _ in range(n):
            self._one()
        assert self.p.flush(30) == 0, "producer did not drain"
        assert not self.failed, self.failed[:5]

    def _one(self) -> None:
        i = self.seq
        self.seq += 1
        self.p.produce(self.topic, value=f"{self.tag}-{i}".encode(), partition=i % self.n,
                       on_delivery=self._cb)

    def start(self) -> Feeder:
        def run() -> None:
            while not self._stop.wait(self.tick_s):
                for _ in range(self.per_tick):
                    self._one()
                self.p.poll(0)

        self._thread = threading.Thread(target=run, name="feeder", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[tuple[int, int], str]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(10)
            self._thread = None
        assert self.p.flush(30) == 0, "producer did not drain"
        assert not self.failed, self.failed[:5]
        return dict(self.produced)


# =============================================================================================
# Scenarios shared by the classic and KIP-848 suites
# =============================================================================================
def revoked_since(m: Member, mark: int) -> set[int]:
    return {p for e in m.events_since(mark) if e["ev"] == "revoked" for p in e["parts"]}


def membership_scenario(ms: Members, feeder: Feeder, n_partitions: int, *,
                        incremental: bool, with_four=None) -> dict[str, dict[str, set[int]]]:
    """3 members share the partitions; a 4th joins; one is SIGKILLed and its partitions move
    once its session expires; one closes normally (leaves) and its partitions move. Records
    flow all along and are checked at the end. ``incremental`` (cooperative / KIP-848): a
    partition that stays with its owner is never revoked. ``with_four(owned)`` runs while the
    4 members are stable. Returns the assignment after each step."""
    steps: dict[str, dict[str, set[int]]] = {}
    a, b, c = ms.start("a"), ms.start("b"), ms.start("c")
    steps["three"] = ms.wait_shared([a, b, c], n_partitions)
    assert sorted(len(s) for s in steps["three"].values()) == [2, 2, 2], steps

    marks = {m.name: m.snapshot()["n_events"] for m in (a, b, c)}
    d = ms.start("d")
    steps["four"] = ms.wait_shared([a, b, c, d], n_partitions,
                                   what="the 4th member to get partitions")
    assert sorted(len(s) for s in steps["four"].values()) == [1, 1, 2, 2], steps
    if incremental:
        for m in (a, b, c):
            kept = steps["three"][m.name] & steps["four"][m.name]
            assert not kept & revoked_since(m, marks[m.name]), (
                f"{m.name} kept {sorted(kept)} but had {sorted(revoked_since(m, marks[m.name]))}"
                " revoked")
    if with_four is not None:
        with_four(steps["four"])

    # Killed without leaving: the others get its partitions only when its session expires.
    b.kill()
    steps["killed"] = ms.wait_shared([a, c, d], n_partitions, timeout=60,
                                     what="b's partitions to move after its session timeout")
    assert sorted(len(s) for s in steps["killed"].values()) == [2, 2, 2], steps

    # A normal close leaves the group: the partitions move without waiting for a timeout.
    c.close()
    steps["left"] = ms.wait_shared([a, d], n_partitions, what="c's partitions to move after it left")
    assert sorted(len(s) for s in steps["left"].values()) == [3, 3], steps

    produced = feeder.stop()
    ms.wait_delivered(produced)
    check_deliveries(ms.deliveries(), produced)
    check_no_overlap(ms.all)
    return steps


def committed_offsets(bootstrap: str, group: str, topic: str, n_partitions: int
                      ) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch through librdkafka, without joining)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        res = c.committed([TopicPartition(topic, p) for p in range(n_partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in res}
    finally:
        c.close()


def restart_scenario(broker, ms: Members, feeder: Feeder, n_partitions: int) -> None:
    """Committed offsets survive broker restarts: one while 3 members consume and commit (they
    reconnect and carry on), one with the group empty; then 2 new members start exactly at the
    committed offsets, and no committed record is ever consumed again."""
    bs = broker.bootstrap_servers
    feeder.burst(600)
    first = [ms.start(n) for n in ("a", "b", "c")]
    ms.wait_shared(first, n_partitions)
    feeder.start()
    ms.wait(lambda: len(ms.deliveries()) >= 300, 60, "300 records consumed")

    broker.restart()
    restarted = time.monotonic()
    ms.wait(lambda: sum(dl.t > restarted and dl.committed for dl in ms.deliveries()) >= 60, 60,
            "consumption and commits to continue after the broker restart")
    produced = feeder.stop()
    ms.wait_delivered(produced)
    for m in first:
        m.close()
    before = committed_offsets(bs, ms.group, ms.topic, n_partitions)
    assert all(off > 0 for off in before.values()), before

    broker.restart()
    assert committed_offsets(bs, ms.group, ms.topic, n_partitions) == before
    feeder.burst(120)
    produced = dict(feeder.produced)
    second = [ms.start(n) for n in ("d", "e")]
    ms.wait_delivered(produced)
    first_offsets: dict[int, int] = {}
    for dl in sorted((dl for m in second for dl in m.deliveries), key=lambda x: x.t):
        first_offsets.setdefault(dl.partition, dl.offset)
    assert first_offsets == before, (
        f"new members started at {first_offsets}, committed offsets were {before}")
    check_deliveries(ms.deliveries(), produced)
    check_no_overlap(ms.all)


if __name__ == "__main__":
    member_main(json.loads(sys.argv[1]))
