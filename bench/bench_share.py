"""Share-group throughput: records/s acknowledged by 1, 4 and 16 share consumers.

    .venv/bin/python bench/bench_share.py                        # snakka + confluent, 1/4/16
    .venv/bin/python bench/bench_share.py --clients snakka --consumers 1,4 --records 50000
    .venv/bin/python bench/bench_share.py --quick                # smoke run, 10x fewer records
    .venv/bin/python bench/bench_share.py --decode-micro --repeat 5   # consumer CPU µs/record
    .venv/bin/python bench/bench_share.py --clients raw --consumers 16 --records 2000000
    .venv/bin/python bench/bench_share.py --clients raw,confluent --consumers 16 \
        --brokers before=/tmp/share-base/src,after=src --repeat 3      # same-run A/B

For every (client, consumer count) case:

* a fresh broker subprocess (``python -m snakka serve``, bench/common.py) with
  ``group.share.heartbeat.interval.ms`` = 500 (bounds lowered) so members spread quickly;
* a topic with ``--partitions`` partitions (default 4) holding ``--records`` records of
  ``--value-size`` bytes (produced with confluent-kafka before the clock starts) and
  ``share.auto.offset.reset=earliest`` on the group;
* N consumers, each in its own process (spawned and imported before the clock), in implicit
  acknowledgement mode: ``poll`` in a loop (the previous poll's records are accepted on the
  next poll; an empty poll commits), ``max.poll.records`` 500;
* or (``--clients raw``) N share members of bench/share_raw.py spread over ``--raw-processes``
  processes (connected before the clock): ShareGroupHeartbeat + ShareFetch with the previous
  response's AcquiredRecords piggy-backed as ACCEPT batches, nothing decoded, so the client
  costs a fraction of the broker's CPU per record and the broker is what is measured;
* the clock starts when the consumers are told to subscribe and stops when the broker reports
  every record acknowledged (DescribeShareGroupOffsets: each partition's start offset at the log
  end, asked every 20 ms). Joining the group is inside the measurement, as it is for a real
  fleet that starts up.

Reported per case: records/s acknowledged (all records / elapsed), the steady rate (records
acknowledged after the first acknowledgement was seen / time since then: joining and the first
fetch excluded), elapsed seconds, broker CPU seconds and the consumer processes' CPU seconds
(from /proc, same interval),
records the consumers saw more than once (redeliveries after releases) and records delivered
with a delivery count above 1; broker CPU-s per million records and, for the raw client, broker
CPU-µs per request (ShareFetch + ShareAcknowledge). Output: one JSON object per line, then a
table.

``--repeat N`` runs N rounds, each running every case once (the table shows medians).
``--brokers label=SRC,label=SRC`` runs each case against brokers started with ``PYTHONPATH=SRC``
(e.g. a ``git archive`` of an older commit with its C extension built), alternating the order
round by round (A B, B A, ...) so a load that drifts favours neither; the clients always run
this tree's code.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BrokerProcess,
    PySpy,
    emit,
    machine_info,
    proc_cpu_seconds,
    round_order,
    summarize_collapsed,
)

TOPIC, GROUP = "bench-share", "bench-share-group"
BROKER_CONFIG = {
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "500",
}


# -- consumer processes ------------------------------------------------------------------------
def _worker(kind: str, bootstrap: str, go, stop, out) -> None:
    """One share consumer: wait for ``go``, consume until ``stop``; report counts."""
    if kind == "snakka":
        from snakka.client.share_consumer import ShareConsumer

        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                           "client.id": "bench"})

        def poll():
            return [(r.partition, r.offset, r.delivery_count) for r in c.poll(0.1)]
    else:
        from confluent_kafka import ShareConsumer as CkShareConsumer

        c = CkShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                             "client.id": "bench"})

        def poll():
            return [(m.partition(), m.offset(), m.delivery_count()) for m in c.poll(0.1)
                    if m.error() is None]
    go.wait()
    c.subscribe([TOPIC])
    seen: list[tuple[int, int]] = []
    redelivered = 0
    while not stop.is_set():
        batch = poll()
        if not batch:
            c.commit_sync(5)  # accept the last batch now (implicit mode)
            continue
        seen.extend((p, o) for p, o, _dc in batch)
        redelivered += sum(1 for _p, _o, dc in batch if dc and dc > 1)
    c.close()
    out.put({"seen": seen, "redelivered": redelivered})


def _raw_worker(bootstrap: str, members: int, ready, go, stop, out) -> None:
    """``members`` raw share members (bench/share_raw.py) in this process: connect, report
    ready, join on ``go``, fetch and acknowledge until ``stop``; report their counts."""
    import threading

    from share_raw import run_members

    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run

    async def main() -> list:
        loop = asyncio.get_running_loop()
        started, go_evt, stop_evt = asyncio.Event(), asyncio.Event(), asyncio.Event()

        def relay(mp_event, evt) -> None:  # a multiprocessing event -> an asyncio one
            mp_event.wait()
            loop.call_soon_threadsafe(evt.set)

        for mp_event, evt in ((go, go_evt), (stop, stop_evt)):
            threading.Thread(target=relay, args=(mp_event, evt), daemon=True).start()
        task = asyncio.ensure_future(run_members(bootstrap, GROUP, [TOPIC], members, stop_evt,
                                                 started, go=go_evt, keep_ranges=True))
        await asyncio.wait([task, asyncio.ensure_future(started.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
        ready.put(os.getpid())
        return await task

    stats = runner(main())
    out.put({"seen_ranges": [r for s in stats for r in s.ranges],
             "redelivered": sum(s.redelivered for s in stats),
             "acknowledged": sum(s.acknowledged for s in stats),
             "ack_refused": sum(s.ack_refused + s.ack_unanswered for s in stats),
             "requests": sum(s.fetches + s.acknowledges for s in stats)})


def _range_duplicates(ranges: list[tuple[int, int, int]]) -> int:
    """Offsets covered more than once by (partition, first, last) ranges."""
    dup = 0
    last_end: dict[int, int] = {}
    for p, first, last in sorted(ranges):
        end = last_end.get(p, -1)
        if first <= end:
            dup += min(end, last) - first + 1
        last_end[p] = max(end, last)
    return dup


# -- broker-side helpers -----------------------------------------------------------------------
async def _setup(bootstrap: str, partitions: int) -> None:
    from snakka.client.share_admin import ShareAdmin

    async with ShareAdmin(bootstrap) as a:
        await a.create_topic(TOPIC, partitions, 1)
        await a.alter_group_configs(GROUP, {"share.auto.offset.reset": "earliest"})


def _produce(bootstrap: str, records: int, value_size: int, partitions: int,
             batch_records: int = 0) -> None:
    """``batch_records`` 0: linger 20 ms, batches of up to 1 MB (their record count depends
    on how fast this process produces, i.e. on the machine's load); N > 0: log batches of
    exactly N records (``batch.num.messages``, a linger long enough to fill them)."""
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
            "queue.buffering.max.messages": records + 1}
    if batch_records > 0:
        conf |= {"linger.ms": 1000, "batch.num.messages": batch_records,
                 "batch.size": 100_000_000}
    p = Producer(conf)
    value = b"x" * value_size
    for i in range(records):
        p.produce(TOPIC, value=value, partition=i % partitions)
    assert p.flush(120) == 0


async def _wait_acknowledged(bootstrap: str, records: int, partitions: int,
                             timeout: float, broker_pid: int | None = None
                             ) -> tuple[float, int, float, float, int]:
    """Watch the share-partition start offsets until each is at its log end, or ``timeout``
    seconds. Returns ``(t_first, acked_first, t_end, cpu_first, acked)``: ``perf_counter()``
    when acknowledgements were first seen, how many records they covered and the broker's CPU
    seconds then, ``perf_counter()`` at the end and the records acknowledged by then (all of
    them unless the time ran out)."""
    from snakka.client.admin import AdminError
    from snakka.client.share_admin import ShareAdmin

    target = {p: records // partitions + (1 if p < records % partitions else 0)
              for p in range(partitions)}
    t_first, acked_first, cpu_first = 0.0, 0, 0.0
    async with ShareAdmin(bootstrap) as a:
        t0 = time.perf_counter()
        while True:
            try:
                offs = await a.describe_share_group_offsets(
                    GROUP, {TOPIC: list(range(partitions))})
            except AdminError as e:  # the group exists once its first member joined
                if "GROUP_ID_NOT_FOUND" not in str(e):
                    raise
                offs = {}
            now = time.perf_counter()
            acked = sum(max(0, o.start_offset) for o in offs.values())
            if acked and not t_first:
                t_first, acked_first, cpu_first = now, acked, _cpu(broker_pid)
            if all(offs.get((TOPIC, p)) is not None and offs[(TOPIC, p)].start_offset >= end
                   for p, end in target.items()):
                return t_first, acked_first, now, cpu_first, records
            if now - t0 > timeout:  # reported as a run that timed out, with what it did
                return t_first, acked_first, now, cpu_first, acked
            await asyncio.sleep(0.02)


def _cpu(pid: int | None) -> float:
    try:
        return proc_cpu_seconds(pid) if pid else 0.0
    except OSError:  # exited
        return 0.0


@contextlib.contextmanager
def _broker_env(src: str | None):
    """``PYTHONPATH=src`` for the broker subprocess started inside (the clients spawned after
    it run this tree's code)."""
    saved = os.environ.get("PYTHONPATH")
    if src:
        os.environ["PYTHONPATH"] = str(Path(src).resolve())
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def run_case(kind: str, consumers: int, args, broker_label: str = "",
             broker_src: str | None = None) -> dict:
    """One run. ``args``: this script's options (compare_kafka.py passes a namespace with
    only partitions, records, value_size and timeout; the rest default)."""
    py_spy = getattr(args, "py_spy", None)
    batch_records = getattr(args, "batch_records", 0)
    raw_processes = getattr(args, "raw_processes", 2)
    ctx = mp.get_context("spawn")
    with contextlib.ExitStack() as stack:
        with _broker_env(broker_src):
            broker = stack.enter_context(BrokerProcess(BROKER_CONFIG))
        asyncio.run(_setup(broker.bootstrap, args.partitions))
        _produce(broker.bootstrap, args.records, args.value_size, args.partitions,
                 batch_records)
        go, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        if kind == "raw":
            nproc = max(1, min(raw_processes, consumers))
            ready = ctx.Queue()
            procs = [ctx.Process(target=_raw_worker,
                                 args=(broker.bootstrap, consumers // nproc
                                       + (1 if i < consumers % nproc else 0), ready, go, stop,
                                       out), daemon=True) for i in range(nproc)]
            for p in procs:
                p.start()
            for _ in procs:  # every member connected
                ready.get(timeout=60)
        else:
            procs = [ctx.Process(target=_worker, args=(kind, broker.bootstrap, go, stop, out),
                                 daemon=True) for _ in range(consumers)]
            for p in procs:
                p.start()
            time.sleep(2.0 + 0.15 * consumers)  # let every process import and connect
        cpu0 = broker.cpu_seconds()
        ccpu0 = sum(_cpu(p.pid) for p in procs)
        prof_out = (Path(py_spy) / f"broker-{kind}-{consumers}-{time.time_ns()}.txt"
                    if py_spy else None)
        spy = PySpy(broker.pid, prof_out) if prof_out else contextlib.nullcontext()
        with spy:
            t_go = time.perf_counter()
            go.set()
            t_first, acked_first, t_end, cpu_first, acked = asyncio.run(_wait_acknowledged(
                broker.bootstrap, args.records, args.partitions, args.timeout, broker.pid))
        elapsed = t_end - t_go
        cpu_end = broker.cpu_seconds()
        cpu = cpu_end - cpu0
        steady_cpu = cpu_end - cpu_first
        client_cpu = sum(_cpu(p.pid) for p in procs) - ccpu0
        stop.set()
        reports = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    if kind == "raw":
        delivered = sum(len_ranges(r["seen_ranges"]) for r in reports)
        duplicates = _range_duplicates([x for r in reports for x in r["seen_ranges"]])
        requests = sum(r["requests"] for r in reports)
        extra = {"processes": len(procs),
                 "acknowledged_by_clients": sum(r["acknowledged"] for r in reports),
                 "ack_refused": sum(r["ack_refused"] for r in reports),
                 "requests": requests,
                 "records_per_request": round(acked / max(1, requests)),
                 "broker_cpu_us_per_request": round(cpu / max(1, requests) * 1e6, 1)}
    else:
        delivered = sum(len(r["seen"]) for r in reports)
        duplicates = delivered - len({x for r in reports for x in r["seen"]})
        extra = {}
    return {"type": "run", "broker": broker_label, "client": kind, "consumers": consumers,
            "partitions": args.partitions, "records": args.records,
            "value_size": args.value_size, "elapsed_s": round(elapsed, 3),
            "records_per_s": round(acked / elapsed),
            # after the first acknowledgement: joining and the first fetch excluded
            "steady_records_per_s": round((acked - acked_first)
                                          / max(1e-6, t_end - t_first)),
            **({"timed_out": True, "acknowledged": acked} if acked < args.records else {}),
            "first_ack_s": round(t_first - t_go, 3),
            "broker_cpu_s": round(cpu, 2),
            "broker_cpu_s_per_m": round(cpu / max(1, acked) * 1e6, 3),
            # after the first acknowledgement (joining excluded: the first heartbeat of a
            # fresh broker creates __consumer_offsets and __share_group_state)
            "steady_broker_cpu_s_per_m": round(steady_cpu / max(1, acked - acked_first)
                                               * 1e6, 3),
            # all consumer processes together, same interval (the machine has os.cpu_count())
            "clients_cpu_s": round(client_cpu, 2),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            **({"py_spy": str(prof_out), "py_spy_top": summarize_collapsed(prof_out, 15)}
               if prof_out else {}),
            "delivered": delivered,
            # records processed more than once across the group (after a release/redelivery)
            "duplicates": duplicates,
            "redelivered": sum(r["redelivered"] for r in reports), **extra}


def len_ranges(ranges: list[tuple[int, int, int]]) -> int:
    return sum(last - first + 1 for _p, first, last in ranges)


def decode_micro(args) -> dict:
    """CPU µs per record of the share consumer's client-side work, no broker: per ShareFetch
    response of one partition (``--records`` records of ``--value-size`` bytes, batches of
    500 as ``max.poll.records`` 500 fetches, acquired as one range) ``add_fetched`` (decode the
    batches, keep the acquired offsets), ``take`` (hand them to ``poll``) and ``ack``
    (implicit acceptance + draining the acknowledgements for the next request). CPU time of
    this process (``time.process_time``), best of ``--repeat`` runs: on a loaded machine the
    wall time mostly measures the other load."""
    import uuid

    from snakka.client import share_acks
    from snakka.client.share_acks import InFlightRecords
    from snakka.records import Record, build_batch

    per_batch, n_batches = 500, max(1, args.records // 500)
    value, ts = b"x" * args.value_size, 1_700_000_000_000
    batches = [build_batch([Record(i, ts + i, None, value)
                            for i in range(b * per_batch, (b + 1) * per_batch)],
                           base_offset=b * per_batch) for b in range(n_batches)]
    total = per_batch * n_batches
    key = (uuid.uuid4(), 0, 1)
    best = {"add_fetched": float("inf"), "take": float("inf"), "ack": float("inf")}
    for _ in range(max(1, args.repeat)):
        f = InFlightRecords()
        t = dict.fromkeys(best, 0.0)
        for b, data in enumerate(batches):
            lo = b * per_batch
            t0 = time.process_time()
            f.add_fetched(key, TOPIC, [(lo, lo + per_batch - 1, 1)], data)
            t1 = time.process_time()
            assert len(f.take(per_batch)) == per_batch
            t2 = time.process_time()
            f.accept_unacked()
            f.drain(1)
            t3 = time.process_time()
            t["add_fetched"] += t1 - t0
            t["take"] += t2 - t1
            t["ack"] += t3 - t2
        for k, v in t.items():
            best[k] = min(best[k], v / total * 1e6)
    return {"type": "decode-micro", "decoder": getattr(share_acks, "DECODER", "python"), "records": total,
            "value_size": args.value_size,
            "cpu_us_per_record": round(sum(best.values()), 3),
            **{f"{k}_us": round(v, 3) for k, v in best.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="snakka,confluent",
                    help="snakka, confluent, raw (bench/share_raw.py members), comma-separated")
    ap.add_argument("--raw-processes", type=int, default=2,
                    help="processes the raw client's members are spread over")
    ap.add_argument("--brokers", metavar="LABEL=SRC,...",
                    help="run every case against each broker tree (PYTHONPATH=SRC), alternating")
    ap.add_argument("--consumers", default="1,4,16")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--batch-records", type=int, default=0,
                    help="records per produced log batch (0: linger 20 ms, up to 1 MB)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--quick", action="store_true", help="10x fewer records")
    ap.add_argument("--decode-micro", action="store_true",
                    help="no broker: CPU µs/record of snakka's consumer-side decode, take, ack")
    ap.add_argument("--py-spy", metavar="DIR",
                    help="record the broker with py-spy while the clock runs (collapsed stacks)")
    args = ap.parse_args()
    if args.quick:
        args.records //= 10
    if args.py_spy:
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    emit({"type": "machine", **machine_info()})
    if args.decode_micro:
        emit(decode_micro(args))
        return
    brokers: list[tuple[str, str | None]] = [("", None)]
    if args.brokers:
        brokers = [(b.split("=", 1)[0], b.split("=", 1)[1]) for b in args.brokers.split(",")]
    cases = [(kind, int(n)) for kind in args.clients.split(",")
             for n in args.consumers.split(",")]
    runs: dict[tuple[str, str, int], list[dict]] = {}
    # Round r runs every case once against every broker, the brokers in A B / B A order.
    for rnd in range(1, max(1, args.repeat) + 1):
        for kind, n in cases:
            for label, src in round_order(brokers, rnd):
                r = run_case(kind, n, args, label, src)
                emit(r)
                runs.setdefault((label, kind, n), []).append(r)
    print(f"\n{'broker':<8} {'client':<10} {'consumers':>9} {'records/s':>10} {'steady/s':>10} "
          f"{'elapsed s':>9} {'broker CPU s/M':>14} {'clients CPU s':>13} "
          f"{'redelivered':>11} {'duplicates':>10}")
    for (label, kind, n), rs in runs.items():
        med = statistics.median
        print(f"{label:<8} {kind:<10} {n:>9} {med(r['records_per_s'] for r in rs):>10,.0f} "
              f"{med(r['steady_records_per_s'] for r in rs):>10,.0f} "
              f"{med(r['elapsed_s'] for r in rs):>9.2f} "
              f"{med(r['broker_cpu_s_per_m'] for r in rs):>14.3f} "
              f"{med(r['clients_cpu_s'] for r in rs):>13.2f} "
              f"{max(r['redelivered'] for r in rs):>11} {max(r['duplicates'] for r in rs):>10}")

if __name__ == "__main__":
    main()
