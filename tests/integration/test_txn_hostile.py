"""Bad input to the transaction APIs (raw protocol): Kafka's error codes, no crash, no hang, and
the last stable offset never passes an open transaction.

The fixed cases complete test_transactions.py's: control batches from a client inside a
transaction (87); EndTxn / AddPartitionsToTxn / AddOffsetsToTxn with a wrong producer id
(INVALID_PRODUCER_ID_MAPPING), a wrong epoch (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH below
KIP-588's versions), an unknown or empty transactional id; InitProducerId with a timeout outside
(0, transaction.max.timeout.ms] (INVALID_TRANSACTION_TIMEOUT); AddOffsetsToTxn with an empty
group id (added like any other, as Kafka does); transactional.id.expiration.ms (an idle id is forgotten, one with an open
transaction is not).

The hypothesis test throws random sequences of InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, transactional Produce (right and wrong ids, epochs, partitions, control
batches) and EndTxn at one broker, from two TV1 producers and one Transactions V2 producer
(Produce v12 adds partitions implicitly, every EndTxn v5 bumps the epoch), with a client-side
model of what must hold: a transactional batch is accepted only from the current producer id
and epoch of its transactional id, for a partition added to its transaction (TV1); EndTxn ends
exactly the transactions that are open (a TV2 abort also succeeds without one); after every step ListOffsets read_committed (the LSO) is at
or below the first offset of every transaction the model knows to be open; at the end, with every
transaction aborted, no partition is blocked (LSO == high watermark).
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.protocol.errors import ErrorCode
from snakka.records import Record, build_batch
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, now_ms, raw_connect, run_async
from .txn_clients import list_offsets_async, raw_produce

TOPIC = "txn-hostile"
PARTITIONS = 3
MAX_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(config={"transaction.max.timeout.ms": str(MAX_TIMEOUT_MS)}) as b:
        ck_create_topic(b.bootstrap_servers, TOPIC, PARTITIONS)
        yield b


# -- raw requests ----------------------------------------------------------------------------
async def init_pid(conn, tid: str, timeout_ms: int = 30_000, version: int | None = None):
    from snakka.protocol.messages.init_producer_id_request import InitProducerIdRequest

    return await conn.send(InitProducerIdRequest(transactional_id=tid,
                                                 transaction_timeout_ms=timeout_ms),
                           version=version)


async def add_partitions(conn, tid: str, pid: int, epoch: int, partitions, *, version=3,
                         topic: str = TOPIC) -> dict[int, int]:
    from snakka.protocol.messages.add_partitions_to_txn_request import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
    )

    r = await conn.send(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
            AddPartitionsToTxnTopic(name=topic, partitions=list(partitions))]), version=version)
    return {p.partition_index: p.partition_error_code
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


async def add_offsets(conn, tid: str, pid: int, epoch: int, group: str, version=3) -> int:
    from snakka.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest

    r = await conn.send(AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid,
                                               producer_epoch=epoch, group_id=group),
                        version=version)
    return r.error_code


async def end_txn_response(conn, tid: str, pid: int, epoch: int, commit: bool, version=3):
    from snakka.protocol.messages.end_txn_request import EndTxnRequest

    return await conn.send(EndTxnRequest(transactional_id=tid, producer_id=pid,
                                         producer_epoch=epoch, committed=commit),
                           version=version)


async def end_txn(conn, tid: str, pid: int, epoch: int, commit: bool, version=3) -> int:
    return (await end_txn_response(conn, tid, pid, epoch, commit, version)).error_code


def batch(pid: int, epoch: int, seq: int, *, control: bool = False, n: int = 1) -> bytes:
    return build_batch([Record(timestamp=now_ms(), key=b"k", value=b"v%d" % i) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=True, is_control=control)


async def produce(conn, tid: str | None, batches: dict[int, bytes], version=9
                  ) -> dict[int, tuple[int, int]]:
    """partition -> (error code, base offset)."""
    out = await raw_produce(conn, TOPIC, batches, tid, version)
    return {p: (r.error_code, r.base_offset) for p, r in out.items()}


async def lso_hw(conn) -> dict[int, tuple[int, int]]:
    parts = list(range(PARTITIONS))
    lso = await list_offsets_async(conn, TOPIC, parts, 1)
    hw = await list_offsets_async(conn, TOPIC, parts, 0)
    return {p: (lso[p], hw[p]) for p in parts}


# -- fixed cases -----------------------------------------------------------------------------
def test_control_batches_from_a_transactional_producer_are_invalid_record(broker):
    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            init = await init_pid(conn, "ctl")
            pid, epoch = init.producer_id, init.producer_epoch
            assert await add_partitions(conn, "ctl", pid, epoch, [0, 1]) == {0: 0, 1: 0}
            before = await lso_hw(conn)
            # A COMMIT marker forged by the producer inside its own transaction: refused on
            # its partition, nothing written (the transaction stays open, the LSO where it was).
            got = await produce(conn, "ctl", {0: batch(pid, epoch, 0, control=True)})
            assert got[0][0] == ErrorCode.INVALID_RECORD
            got = await produce(conn, "ctl", {1: batch(pid, epoch, 0)})
            assert got[1][0] == ErrorCode.NONE  # sequence 0 still expected: nothing was taken
            after = await lso_hw(conn)
            assert after[0] == before[0]
            assert after[1][0] == before[1][0] == got[1][1] and after[1][1] == before[1][1] + 1
            assert await end_txn(conn, "ctl", pid, epoch, False) == ErrorCode.NONE
            assert all(lso == hw for lso, hw in (await lso_hw(conn)).values())
        finally:
            await conn.close()
    run_async(go())


def test_wrong_ids_and_epochs_get_kafkas_codes(broker):
    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            init = await init_pid(conn, "wrong")
            pid, epoch = init.producer_id, init.producer_epoch
            mapping = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            # Wrong producer id: AddPartitions, AddOffsets, EndTxn.
            assert await add_partitions(conn, "wrong", pid + 1000, epoch, [0]) == {0: mapping}
            assert await add_offsets(conn, "wrong", pid + 1000, epoch, "g") == mapping
            assert await end_txn(conn, "wrong", pid + 1000, epoch, True) == mapping
            # Unknown transactional id: the same.
            assert await add_partitions(conn, "never-inited", pid, epoch, [0]) == {0: mapping}
            assert await add_offsets(conn, "never-inited", pid, epoch, "g") == mapping
            assert await end_txn(conn, "never-inited", pid, epoch, False) == mapping
            # Wrong epoch: PRODUCER_FENCED from KIP-588's versions, INVALID_PRODUCER_EPOCH below.
            for bad in (epoch + 1, epoch - 1 if epoch else epoch + 7):
                assert await add_partitions(conn, "wrong", pid, bad, [0], version=2) == {
                    0: ErrorCode.PRODUCER_FENCED}
                assert await add_partitions(conn, "wrong", pid, bad, [0], version=1) == {
                    0: ErrorCode.INVALID_PRODUCER_EPOCH}
                assert await add_offsets(conn, "wrong", pid, bad, "g", version=2) == \
                    ErrorCode.PRODUCER_FENCED
                assert await add_offsets(conn, "wrong", pid, bad, "g", version=1) == \
                    ErrorCode.INVALID_PRODUCER_EPOCH
                assert await end_txn(conn, "wrong", pid, bad, False, version=2) == \
                    ErrorCode.PRODUCER_FENCED
                assert await end_txn(conn, "wrong", pid, bad, False, version=0) == \
                    ErrorCode.INVALID_PRODUCER_EPOCH
            # An empty transactional id: INVALID_REQUEST (Kafka's coordinator check).
            assert await end_txn(conn, "", pid, epoch, True) == ErrorCode.INVALID_REQUEST
            assert (await init_pid(conn, "")).error_code == ErrorCode.INVALID_REQUEST
            # None of it started a transaction: EndTxn has nothing to end.
            assert await end_txn(conn, "wrong", pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
            # Wrong producer ids in Produce: refused, nothing written.
            before = await lso_hw(conn)
            assert await add_partitions(conn, "wrong", pid, epoch, [2]) == {2: 0}
            got = await produce(conn, "wrong", {2: batch(pid + 1000, epoch, 0)})
            assert got[2][0] != ErrorCode.NONE
            got = await produce(conn, "wrong", {2: batch(pid, epoch + 1, 0)})
            assert got[2][0] != ErrorCode.NONE
            assert (await lso_hw(conn))[2] == before[2]
            assert await end_txn(conn, "wrong", pid, epoch, False) == ErrorCode.NONE
        finally:
            await conn.close()
    run_async(go())


@pytest.mark.parametrize("timeout_ms", [0, -1, MAX_TIMEOUT_MS + 1, 2**31 - 1])
def test_init_producer_id_with_a_timeout_out_of_range(broker, timeout_ms):
    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        try:
            r = await init_pid(conn, f"timeout-{timeout_ms}", timeout_ms)
            assert r.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT, r
            ok = await init_pid(conn, f"timeout-{timeout_ms}", MAX_TIMEOUT_MS)
            assert ok.error_code == ErrorCode.NONE, ok  # the limit itself is allowed
        finally:
            await conn.close()
    run_async(go())


@pytest.mark.parametrize("version", [0, 3, 4])
def test_add_offsets_with_an_empty_group_id(broker, version):
    """An empty group id is added like any other, as Kafka 4.0 does (checked against the
    reference broker: NONE, and the transaction then commits; was INVALID_REQUEST)."""
    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        tid = f"empty-group-{version}"
        try:
            init = await init_pid(conn, tid)
            pid, epoch = init.producer_id, init.producer_epoch
            assert await add_offsets(conn, tid, pid, epoch, "", version=version) == \
                ErrorCode.NONE
            assert await end_txn(conn, tid, pid, epoch, True) == ErrorCode.NONE
            # The producer goes on: another transaction, with records this time.
            assert await add_offsets(conn, tid, pid, epoch, "", version=version) == \
                ErrorCode.NONE
            assert await add_partitions(conn, tid, pid, epoch, [0]) == {0: 0}
            assert (await produce(conn, tid, {0: batch(pid, epoch, 0)}))[0][0] == 0
            assert await end_txn(conn, tid, pid, epoch, True) == ErrorCode.NONE
            assert all(lso == hw for lso, hw in (await lso_hw(conn)).values())
        finally:
            await conn.close()
    run_async(go())


# -- random sequences ------------------------------------------------------------------------
_examples = itertools.count()
STATS = {"accepted": 0}  # batches the random sequences got accepted (the test checks > 0)

# One step: (operation, transactional id index, variant, partitions mask, flag); the flag is the
# Produce version (9: INVALID_TXN_STATE, 11: TRANSACTION_ABORTABLE for a partition not added)
# or EndTxn's commit.
# Weighted towards the steps that open transactions and write into them.
# "write" is a well-behaved producer's AddPartitionsToTxn then Produce on the same partitions.
OPS = ("init", "add", "offsets", "produce", "write", "write", "end", "control")
steps = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 2), st.integers(0, 9),
                           st.integers(1, 7), st.booleans()), min_size=5, max_size=30)


TV2_WHO = 2  # transactional id index 2 is a Transactions V2 client (KIP-890 part 2)


class _Model:
    """What the client side knows: per transactional id its producer id and epoch, the
    partitions added to its open transaction, whether a transaction is open (partitions or a
    group added), its next sequence per partition and the first offset of its open transaction
    per partition."""

    def __init__(self) -> None:
        self.ids: dict[str, tuple[int, int]] = {}
        self.added: dict[str, set[int]] = {}
        self.ongoing: set[str] = set()
        self.seq: dict[tuple[str, int], int] = {}
        self.first: dict[str, dict[int, int]] = {}
        self.last_end: dict[str, bool] = {}  # commit or abort of the last completed EndTxn

    def ended(self, tid: str) -> None:
        self.added[tid] = set()
        self.first[tid] = {}
        self.ongoing.discard(tid)

    def started(self, tid: str) -> None:
        self.ongoing.add(tid)
        self.last_end.pop(tid, None)

    def new_epoch(self, tid: str, pid: int, epoch: int) -> None:
        self.ids[tid] = (pid, epoch)
        for p in range(PARTITIONS):  # a new epoch starts its sequences at 0
            self.seq.pop((tid, p), None)

    def open_firsts(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for firsts in self.first.values():
            for p, o in firsts.items():
                out[p] = min(o, out.get(p, o))
        return out


async def _step(conn, model: _Model, prefix: str, op: str, who: int, variant: int, mask: int,
                flag: bool) -> None:
    tid = f"{prefix}-{who}"
    tv2 = who == TV2_WHO
    known = model.ids.get(tid)
    pid, epoch = known if known else (1_000_000 + who, 0)
    if tv2 and op in ("write", "add"):
        op = "produce"  # a TV2 producer adds partitions by producing to them (Produce v12)
    if op == "write":
        await _step(conn, model, prefix, "add", who, variant, mask, flag)
        op = "produce"
    # variant: 0-7 right ids, 8 wrong epoch, 9 wrong producer id.
    if variant == 8:
        epoch += 1
    elif variant == 9:
        pid += 77
    right = known is not None and variant < 8
    parts = [p for p in range(PARTITIONS) if mask >> p & 1]
    if op == "init":
        timeout = MAX_TIMEOUT_MS if variant < 8 else (0 if variant == 8 else MAX_TIMEOUT_MS + 1)
        r = await init_pid(conn, tid, timeout)
        for _ in range(100):
            # An open transaction is being aborted (the fence): Kafka answers
            # CONCURRENT_TRANSACTIONS and the client retries, as the real clients do.
            if r.error_code != ErrorCode.CONCURRENT_TRANSACTIONS:
                break
            await asyncio.sleep(0.02)
            r = await init_pid(conn, tid, timeout)
        if variant < 8:
            assert r.error_code == ErrorCode.NONE, r
            model.new_epoch(tid, r.producer_id, r.producer_epoch)
            model.ended(tid)  # an open transaction of the previous epoch was aborted
            model.last_end.pop(tid, None)
        else:
            assert r.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT, r
    elif op == "add":
        got = await add_partitions(conn, tid, pid, epoch, parts)
        if right:
            assert set(got.values()) == {ErrorCode.NONE}, got
            model.added.setdefault(tid, set()).update(parts)
            model.started(tid)
        else:
            assert ErrorCode.NONE not in got.values(), got
    elif op == "offsets":
        err = await add_offsets(conn, tid, pid, epoch, f"group-{variant}",
                                version=4 if tv2 else 3)
        assert (err == ErrorCode.NONE) == right, err
        if right:
            model.started(tid)
    elif op in ("produce", "control"):
        control = op == "control"
        batches = {p: batch(pid, epoch, model.seq.get((tid, p), 0) if right else 0,
                            control=control, n=1 + variant % 2) for p in parts}
        got = await produce(conn, tid, batches, version=12 if tv2 else 9 if flag else 11)
        for p, (err, base) in got.items():
            ok = right and not control and (tv2 or p in model.added.get(tid, ()))
            if err == ErrorCode.NONE:
                assert ok, f"batch accepted: {op} {tid} right={right} partition {p} " \
                           f"added={model.added.get(tid)}"
                model.added.setdefault(tid, set()).add(p)
                model.started(tid)
                model.seq[(tid, p)] = model.seq.get((tid, p), 0) + 1 + variant % 2
                model.first.setdefault(tid, {}).setdefault(p, base)
                STATS["accepted"] += 1
            else:
                assert not ok, (op, tid, p, err)
                if tv2 and right:
                    # The implicit add happens before the batch is validated (as Kafka's
                    # leader adds, then appends): a refused control batch still started the
                    # transaction on its partition.
                    assert control and err == ErrorCode.INVALID_RECORD, (op, tid, p, err)
                    model.added.setdefault(tid, set()).add(p)
                    model.started(tid)
    elif op == "end":
        r = await end_txn_response(conn, tid, pid, epoch, flag, version=5 if tv2 else 3)
        err = r.error_code
        if right:
            # An open transaction ends; without one, only a TV2 abort succeeds (it fences).
            # TV1 answers a repeated EndTxn of the same kind after completion as a retry.
            can_end = tid in model.ongoing or (tv2 and not flag) or (
                not tv2 and model.last_end.get(tid) == flag)
            assert err == (ErrorCode.NONE if can_end else ErrorCode.INVALID_TXN_STATE), (
                tid, flag, err, tid in model.ongoing)
            if err == ErrorCode.NONE:
                model.ended(tid)
                model.last_end[tid] = flag
                if tv2:  # every TV2 EndTxn bumps the epoch: the client continues with it
                    assert (r.producer_id, r.producer_epoch) != (pid, epoch), r
                    model.new_epoch(tid, r.producer_id, r.producer_epoch)
        else:
            assert err in (ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.PRODUCER_FENCED), err


async def _check_lso(conn, model: _Model) -> None:
    now = await lso_hw(conn)
    STATS["blocked"] = STATS.get("blocked", 0) + sum(
        1 for p in model.open_firsts() if now[p][0] < now[p][1])
    for p, first in model.open_firsts().items():
        lso, hw = now[p]
        assert lso <= first < hw, f"partition {p}: LSO {lso} past an open transaction at {first}"
    for lso, hw in now.values():
        assert lso <= hw


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps)
def _random_txn_api_sequences(broker, seq):
    prefix = f"rand{next(_examples)}"

    async def go():
        conn = await raw_connect(broker.bootstrap_servers)
        model = _Model()
        try:
            for who in range(3):  # every id starts initialised (steps may re-init it)
                await _step(conn, model, prefix, "init", who, 0, 1, False)
            for step in seq:
                await _step(conn, model, prefix, *step)
                await _check_lso(conn, model)
            # Abort what is open: afterwards no partition is blocked.
            for tid, (pid, epoch) in model.ids.items():
                err = await end_txn(conn, tid, pid, epoch, False,
                                    version=5 if tid.endswith(f"-{TV2_WHO}") else 3)
                assert err in (ErrorCode.NONE, ErrorCode.INVALID_TXN_STATE), (tid, err)
                model.ended(tid)
            now = await lso_hw(conn)
            assert all(lso == hw for lso, hw in now.values()), (now, model.first)
        finally:
            # After a failure, fence what this example left open (a fresh InitProducerId aborts
            # it) so that the next examples do not fail on its blocked partitions.
            for tid in list(model.ids):
                if model.first.get(tid) or tid in model.ongoing:
                    await init_pid(conn, tid, MAX_TIMEOUT_MS)
            await conn.close()
    run_async(go(), timeout=60)


def test_random_txn_api_sequences(broker):
    """The model over random sequences, then proof that it was not vacuous: batches were
    accepted into open transactions and partitions were seen blocked behind them."""
    STATS.clear()
    STATS["accepted"] = 0
    _random_txn_api_sequences(broker)
    assert STATS["accepted"] > 20 and STATS.get("blocked", 0) > 20, STATS


def test_transactional_ids_expire_but_not_while_a_transaction_is_open():
    """transactional.id.expiration.ms: an idle id is forgotten (the next InitProducerId gets a
    new producer id; its old producer id is no longer known), an id with a transaction open
    is not (its timeout aborts it first)."""
    import time

    cfg = {"transactional.id.expiration.ms": "1000",
           "transaction.remove.expired.transaction.cleanup.interval.ms": "100"}

    async def go(bs):
        conn = await raw_connect(bs)
        try:
            idle = await init_pid(conn, "expiring", MAX_TIMEOUT_MS)
            busy = await init_pid(conn, "busy", MAX_TIMEOUT_MS)
            assert await add_partitions(conn, "busy", busy.producer_id, busy.producer_epoch,
                                        [0]) == {0: 0}
            busy_since = time.monotonic()
            deadline = time.monotonic() + 30
            while True:  # poll until the idle id is forgotten
                err = await end_txn(conn, "expiring", idle.producer_id, idle.producer_epoch,
                                    True)
                if err == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
                    break
                assert err == ErrorCode.INVALID_TXN_STATE, err
                assert time.monotonic() < deadline, "the idle transactional id never expired"
                await asyncio.sleep(0.1)
            again = await init_pid(conn, "expiring", MAX_TIMEOUT_MS)
            assert again.error_code == 0 and again.producer_id != idle.producer_id, again
            # The busy id outlives the expiration time (twice over, and many cleanup runs)
            # with its transaction still open: a negative, so it can only be waited out.
            await asyncio.sleep(max(0.0, busy_since + 2.0 - time.monotonic()))
            assert await end_txn(conn, "busy", busy.producer_id, busy.producer_epoch,
                                 True) == ErrorCode.NONE
        finally:
            await conn.close()

    with EmbeddedBroker(config=cfg) as b:
        ck_create_topic(b.bootstrap_servers, TOPIC, PARTITIONS)
        run_async(go(b.bootstrap_servers), timeout=60)
