"""Rebalance latency, step by step, snakka against the reference Apache Kafka 4.0 (issue 15).

    .venv/bin/python bench/bench_rebalance.py                        # 3 rounds, both brokers
    .venv/bin/python bench/bench_rebalance.py --rounds 1 --members 4 --protocols cooperative
    .venv/bin/python bench/bench_rebalance.py --snakka-only --json-out runs.jsonl
    .venv/bin/python bench/bench_rebalance.py --burst --session-timeout 45000   # see below

The sequence (same on both brokers, one fresh group per protocol, topic of ``--partitions``
(12) partitions): members join one by one up to ``--members`` (6) ("add k": member k
subscribes to a stable group of k-1), then the middle member is SIGKILLed without leaving
("kill": the session-timeout path), then members close() one by one down to one ("close k":
a LeaveGroup / leave heartbeat). ``--burst``: all members subscribe at once, the middle one
is killed, all but one close at once. A step's time runs from the action (subscribe() called,
the kill, close() called) to the moment the live members' assignments -- as their assign/revoke
callbacks saw them -- are complete (every partition), disjoint, and balanced (each member owns
floor or ceil of partitions/members); the state must then hold for ``SETTLE_S`` without another
callback, otherwise the step goes on to the later moment.

Every member is its own process (multiprocessing "spawn") with one confluent-kafka
(librdkafka) Consumer serving its callbacks in a ``poll(POLL_S)`` loop; the consumer is created
(and connected) before the step starts, so a step does not time process start or imports.
Callback times are CLOCK_MONOTONIC, comparable across processes.

Protocols (``--protocols``):

* ``cooperative``: classic protocol, ``partition.assignment.strategy=cooperative-sticky``;
* ``range``: classic protocol, ``range`` (eager: every member revokes everything);
* ``consumer``: KIP-848, ``group.protocol=consumer`` (server-side ``uniform`` assignor).

Client settings are librdkafka's defaults (heartbeat.interval.ms 3000, max.poll.interval.ms
300000 = the classic rebalance timeout) except ``session.timeout.ms=10000``
(``--session-timeout``; librdkafka's default is 45000) so the kill step takes ~10 s instead of
45. Broker settings, the same on both (kafka-ref.sh's ``group.initial.rebalance.delay.ms=0``;
``--initial-delay 3000`` for Kafka's own default): ``group.consumer.session.timeout.ms`` =
``--session-timeout`` and its minimum lowered to match (KIP-848's kill step); everything else is each broker's default (``group.consumer.heartbeat.interval.ms``
5000).

Brokers alternate per round (snakka Kafka, Kafka snakka, ...: ``common.round_order``): snakka is
``python -m snakka serve`` (bench/common.py), Kafka is kafka-ref.sh (bench/compare_kafka.py's
KafkaBroker, 1 GB heap). Without the reference or ``java`` only snakka runs.

Output: one JSON line per step and run, then a markdown table per protocol: the median (and
range) of every step over the rounds on each broker.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from common import emit, machine_info, round_order  # noqa: E402

TOPIC = "bench-rebalance"
SETTLE_S = 1.0          # a complete assignment must hold this long without another callback
STEP_TIMEOUT_S = 180.0
POLL_S = 0.02           # each member's poll() timeout: callbacks are served within this
SESSION_TIMEOUT_MS = 10_000
PROTOCOLS = {
    "cooperative": {"partition.assignment.strategy": "cooperative-sticky"},
    "range": {"partition.assignment.strategy": "range"},
    "consumer": {"group.protocol": "consumer"},
}
INCREMENTAL = {"cooperative", "consumer"}   # callbacks carry the change, not the whole set


def broker_config(initial_delay_ms: int, session_timeout_ms: int) -> dict[str, str]:
    return {
        "group.initial.rebalance.delay.ms": str(initial_delay_ms),
        "group.consumer.session.timeout.ms": str(session_timeout_ms),
        "group.consumer.min.session.timeout.ms": str(session_timeout_ms),
    }


# -- one member, in its own process ----------------------------------------------------------
def member_main(idx: int, bootstrap: str, group: str, protocol: str, session_timeout_ms: int,
                cmd_q: Any, ev_q: Any) -> None:
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            **PROTOCOLS[protocol]}
    if protocol != "consumer":   # KIP-848 takes the session timeout from the broker
        conf["session.timeout.ms"] = session_timeout_ms
    c = Consumer(conf)
    c.list_topics(TOPIC, timeout=30)   # connected before the step starts
    owned: set[int] = set()
    incremental = protocol in INCREMENTAL

    def report() -> None:
        ev_q.put((idx, time.monotonic(), sorted(owned)))

    def on_assign(_c: Any, parts: list[Any]) -> None:
        if not incremental:
            owned.clear()
        owned.update(p.partition for p in parts)
        report()

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        if incremental:
            owned.difference_update(p.partition for p in parts)
        else:
            owned.clear()
        report()

    ev_q.put((idx, time.monotonic(), "ready"))
    if cmd_q.get() != "go":
        c.close()
        return
    c.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    while True:
        c.poll(POLL_S)
        try:
            cmd = cmd_q.get_nowait()
        except queue_mod.Empty:
            continue
        if cmd == "close":
            c.close()
            return


# -- the sequence ---------------------------------------------------------------------------
def target_ok(live: dict[int, set[int]], partitions: int) -> bool:
    """Complete, disjoint, balanced: what every assignor here ends with on one topic."""
    if not live:
        return False
    total = sum(len(s) for s in live.values())
    union = set().union(*live.values())
    lo, hi = partitions // len(live), -(-partitions // len(live))
    return (total == partitions and union == set(range(partitions))
            and all(lo <= len(s) <= hi for s in live.values()))


class Group:
    def __init__(self, ctx: Any, bootstrap: str, group: str, protocol: str, members: int,
                 partitions: int, session_timeout_ms: int) -> None:
        self.partitions = partitions
        self.ev_q = ctx.Queue()
        self.cmd_qs = [ctx.Queue() for _ in range(members)]
        self.procs = [ctx.Process(target=member_main, daemon=True,
                                  args=(i, bootstrap, group, protocol, session_timeout_ms,
                                        self.cmd_qs[i], self.ev_q))
                      for i in range(members)]
        for p in self.procs:
            p.start()
        self.owned: dict[int, set[int]] = {}
        self.live: set[int] = set()
        ready = 0
        deadline = time.monotonic() + 120
        while ready < members:
            idx, _t, what = self.ev_q.get(timeout=max(1.0, deadline - time.monotonic()))
            if what == "ready":
                ready += 1

    def _apply(self, ev: tuple[int, float, Any]) -> None:
        idx, _t, what = ev
        if what != "ready":
            self.owned[idx] = set(what)

    def step(self, action: str, idxs: list[int]) -> float:
        """Do ``action`` to members ``idxs`` (at once); seconds until the live members'
        assignment is the final one (see the module docstring)."""
        while True:   # anything left over from the step before
            try:
                self._apply(self.ev_q.get_nowait())
            except queue_mod.Empty:
                break
        t0 = time.monotonic()
        for idx in idxs:
            if action == "add":
                self.live.add(idx)
                self.owned[idx] = set()
                self.cmd_qs[idx].put("go")
            elif action == "close":
                self.live.discard(idx)
                self.cmd_qs[idx].put("close")
            elif action == "kill":
                self.live.discard(idx)
                os.kill(self.procs[idx].pid, signal.SIGKILL)
        done_at: float | None = None
        deadline = t0 + STEP_TIMEOUT_S
        while True:
            now = time.monotonic()
            if done_at is not None and now - done_at >= SETTLE_S:
                return done_at - t0
            if now > deadline:
                raise TimeoutError(f"{action} {idxs}: no final assignment after "
                                   f"{STEP_TIMEOUT_S} s: {self.view()}")
            wait = SETTLE_S - (now - done_at) if done_at is not None else 0.5
            try:
                ev = self.ev_q.get(timeout=max(0.01, wait))
            except queue_mod.Empty:
                continue
            self._apply(ev)
            if ev[0] not in self.live:
                continue
            ok = target_ok({i: self.owned.get(i, set()) for i in self.live}, self.partitions)
            done_at = (ev[1] if done_at is None else done_at) if ok else None

    def view(self) -> dict[int, list[int]]:
        return {i: sorted(self.owned.get(i, set())) for i in sorted(self.live)}

    def close(self) -> None:
        for i, p in enumerate(self.procs):
            if p.is_alive():
                self.cmd_qs[i].put("close")
        for p in self.procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)


def sequence(members: int, burst: bool) -> list[tuple[str, list[int]]]:
    """One by one: add each, kill the middle one, close the others one by one down to one.
    ``burst``: all join at once, then the middle one is killed, then all but one close at once
    (members that start and stop together, as an application's instances do)."""
    kill = members // 2
    rest = [i for i in reversed(range(1, members)) if i != kill]
    if burst:
        return [("add", list(range(members))), ("kill", [kill])] + (
            [("close", rest)] if rest else [])
    return ([("add", [i]) for i in range(members)] + [("kill", [kill])]
            + [("close", [i]) for i in rest])


def step_label(action: str, idxs: list[int], members_after: int) -> str:
    return f"{action}{' ' + str(len(idxs)) + ' at once' if len(idxs) > 1 else ''} -> {members_after}"


def run_protocol(ctx: Any, bootstrap: str, protocol: str, args: argparse.Namespace,
                 round_no: int, broker: str, out: Any) -> None:
    group = f"rb-{protocol}-{round_no}"
    g = Group(ctx, bootstrap, group, protocol, args.members, args.partitions,
              args.session_timeout)
    try:
        for n, (action, idxs) in enumerate(sequence(args.members, args.burst)):
            secs = g.step(action, idxs)
            emit({"type": "rebalance-step", "broker": broker, "protocol": protocol,
                  "round": round_no, "step_no": n,
                  "step": step_label(action, idxs, len(g.live)),
                  "seconds": round(secs, 3), "assignment": g.view(),
                  "load1": os.getloadavg()[0]}, out)
    finally:
        g.close()


def create_topic(bootstrap: str, partitions: int) -> None:
    """The topic, and a first FindCoordinator answered: Kafka creates __consumer_offsets on the
    first one (COORDINATOR_NOT_AVAILABLE meanwhile, ~3 s), which is not a rebalance cost."""
    from compare_kafka import create_topics
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    create_topics(bootstrap, {TOPIC: partitions})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rb-warm-up"})
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                c.committed([TopicPartition(TOPIC, 0)], timeout=30)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def start_broker(kind: str, args: argparse.Namespace) -> Any:
    """A fresh broker of ``kind`` with :func:`broker_config`; started and stopped by the parent
    process, which never loads librdkafka (a client process that dies cannot leak a JVM)."""
    import compare_kafka

    compare_kafka.SNAKKA_CONFIG = broker_config(args.initial_delay, args.session_timeout)
    if kind == "snakka":
        return compare_kafka.SnakkaBroker()
    from reference_kafka import ReferenceKafka

    orig = ReferenceKafka.__init__

    def init(self: Any, extra_config: Any = None) -> None:
        orig(self, broker_config(args.initial_delay, args.session_timeout))

    ReferenceKafka.__init__ = init  # type: ignore[method-assign]
    try:
        return compare_kafka.KafkaBroker("-Xmx1G -Xms1G")
    finally:
        ReferenceKafka.__init__ = orig  # type: ignore[method-assign]


def client_worker(kind: str, bootstrap: str, args: argparse.Namespace, round_no: int,
                  json_path: str) -> None:
    """Every protocol's sequence against one broker, in a child process: librdkafka (the admin
    client creating the topic) stays out of the parent."""
    ctx = mp.get_context("spawn")
    with open(json_path, "a") as out:
        create_topic(bootstrap, args.partitions)
        for protocol in args.protocols:
            run_protocol(ctx, bootstrap, protocol, args, round_no, kind, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--members", type=int, default=6)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--protocols", default="cooperative,range,consumer")
    ap.add_argument("--initial-delay", type=int, default=0,
                    help="group.initial.rebalance.delay.ms on both brokers (Kafka's default 3000)")
    ap.add_argument("--burst", action="store_true",
                    help="members join together and leave together (see sequence())")
    ap.add_argument("--session-timeout", type=int, default=SESSION_TIMEOUT_MS,
                    help="session.timeout.ms of the classic members (librdkafka's default 45000)")
    ap.add_argument("--snakka-only", action="store_true")
    ap.add_argument("--kafka-only", action="store_true")
    ap.add_argument("--json-out")
    ap.add_argument("--markdown-out")
    args = ap.parse_args()
    args.protocols = [p for p in args.protocols.split(",") if p]
    from reference_kafka import skip_reason

    sides = ["snakka", "kafka"]
    if args.snakka_only:
        sides = ["snakka"]
    elif args.kafka_only:
        sides = ["kafka"]
    elif (why := skip_reason()) is not None:
        print(f"# Kafka skipped: {why}", file=sys.stderr)
        sides = ["snakka"]
    emit({"type": "rebalance-header", **machine_info(), "load": os.getloadavg(),
          "members": args.members, "partitions": args.partitions,
          "initial_delay_ms": args.initial_delay, "protocols": args.protocols})
    results: list[dict[str, Any]] = []
    json_path = args.json_out
    if json_path is None:
        import tempfile

        json_path = tempfile.mktemp(prefix="bench-rebalance-", suffix=".jsonl")
    ctx = mp.get_context("spawn")
    for r in range(1, args.rounds + 1):
        for kind in round_order(sides, r):
            b = start_broker(kind, args)
            try:
                p = ctx.Process(target=client_worker, args=(kind, b.bootstrap, args, r, json_path))
                p.start()
                p.join()
                if p.exitcode != 0:
                    print(f"# round {r} {kind}: client worker failed ({p.exitcode})",
                          file=sys.stderr)
            finally:
                b.close()
    import json

    with open(json_path) as f:
        for line in f:
            d = json.loads(line)
            if d.get("type") == "rebalance-step":
                results.append(d)
    md = table(results, sides, args)
    print(md)
    if args.markdown_out:
        Path(args.markdown_out).write_text(md)


def table(results: list[dict[str, Any]], sides: list[str], args: argparse.Namespace) -> str:
    lines: list[str] = []
    for protocol in args.protocols:
        lines += ["", f"**{protocol}** ({args.members} members, {args.partitions} partitions, "
                  f"group.initial.rebalance.delay.ms={args.initial_delay}): seconds, median "
                  "[min-max] of the rounds", ""]
        lines.append("| step | " + " | ".join(sides) + (" | snakka / Kafka |" if len(sides) == 2
                                                        else ""))
        lines.append("|---" * (len(sides) + 1 + (len(sides) == 2)) + "|")
        steps = sorted({(d["step_no"], d["step"]) for d in results if d["protocol"] == protocol})
        for no, name in steps:
            cells, meds = [], []
            for s in sides:
                v = sorted(d["seconds"] for d in results if d["protocol"] == protocol
                           and d["broker"] == s and d["step_no"] == no)
                if v:
                    m = statistics.median(v)
                    meds.append(m)
                    cells.append(f"{m:.2f} [{v[0]:.2f}-{v[-1]:.2f}]")
                else:
                    meds.append(float("nan"))
                    cells.append("n/a")
            ratio = ""
            if len(sides) == 2:
                sn, ka = meds[sides.index("snakka")], meds[sides.index("kafka")]
                ratio = f" {sn / ka:.2f} |" if ka and ka == ka and sn == sn else " n/a |"
            lines.append(f"| {name} | " + " | ".join(cells) + " |" + ratio)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
