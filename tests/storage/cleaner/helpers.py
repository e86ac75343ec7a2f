"""Building small logs of v2 batches and running one cleaning pass over them, for the filter tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from snakka.records import Record, build_batch, parse_header
from snakka.records.batch import set_base_offset
from snakka.records.control import build_control_batch
from snakka.storage.cleaner import (
    CleanContext,
    CleanedTxns,
    FilteredBatch,
    OffsetMap,
    add_batch_to_offset_map,
    filter_batch,
)
from snakka.storage.index import AbortedTxn

KV = tuple[bytes | None, bytes | None]


def batch(kvs: Sequence[KV], base: int, *, codec: int = 0, ts0: int = 1000, pid: int = -1,
          epoch: int = -1, seq: int = -1, txn: bool = False, lat: bool = False,
          headers: bool = True) -> bytes:
    recs = [Record(timestamp=ts0 + 10 * i, key=k, value=v,
                   headers=[("hk", b"h-%d" % (base + i)), ("n", None)] if headers else [])
            for i, (k, v) in enumerate(kvs)]
    return build_batch(recs, base_offset=base, compression=codec, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=txn,
                       timestamp_type=1 if lat else 0, partition_leader_epoch=4)


def marker(base: int, pid: int, *, commit: bool, epoch: int = 0, ts: int = 2000) -> bytes:
    b = bytearray(build_control_batch(pid, epoch, commit, 1, ts))
    set_base_offset(b, 0, base)
    return bytes(b)


def clean(log: Sequence[bytes], now: int, *, retention: int = 100,
          producer_last: Mapping[int, int] | None = None, aborted: Iterable[AbortedTxn] = (),
          memory: int = 1 << 20, load_factor: float = 0.9, start_offset: int = 0,
          ) -> tuple[list[FilteredBatch], list[bytes], CleanedTxns]:
    """One pass as Kafka's cleaner makes it: map every batch, then filter every batch."""
    aborted = list(aborted)
    m = OffsetMap(memory, load_factor)
    map_txns = CleanedTxns(aborted)
    for b in log:
        if add_batch_to_offset_map(m, b, 0, parse_header(b), map_txns, start_offset):
            break
    txns = CleanedTxns(aborted)
    ctx = CleanContext(m, now, retention, txns, producer_last or {})
    results = [filter_batch(b, 0, parse_header(b), ctx, last_batch_of_round=i == len(log) - 1)
               for i, b in enumerate(log)]
    out = [bytes(r.data) for r in results if r.data is not None]
    return results, out, txns
