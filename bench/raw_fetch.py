"""A minimal raw Fetch loop: how fast a broker serves large record sets to a client that is not
the bottleneck (issue 15, "large consume": who limits confluent-kafka's consume MB/s?).

    .venv/bin/python bench/raw_fetch.py --bootstrap localhost:9092 --topic t --records 10000

One connection, Fetch v11 (non-flexible, no fetch session: session id 0, epoch -1, i.e. a full
fetch every time, as a consumer without KIP-227 does) for one partition, sequential: the next
Fetch is sent as soon as the previous response is fully received, from the offset after its
last whole batch. The response is received with ``recv_into`` into one preallocated buffer (the
one copy any client must make: kernel -> user), and only the headers are parsed: the response
and partition headers, then each batch's 12-byte prefix and its ``lastOffsetDelta`` / record
count (the records themselves are not decoded, no CRC is checked). So the client's CPU per
byte is about a memcpy, and the MB/s it reaches is what the broker (and the kernel's loopback)
deliver.

``--fresh-buffer`` receives each response into a new buffer of its size instead, as librdkafka
does (it allocates one per response): above glibc's largest mmap threshold (32 MiB) that is a
fresh mapping whose every page faults and is zeroed, the cost that bounds confluent-kafka's
consume (docs/benchmarks.md "Large consume: who limits").

Per fetch it records three instants: request sent, first byte of the response received,
response complete; ``first_byte - sent`` is the broker's time to answer (read + header), and
``complete - first_byte`` the transfer. The pure parts (request encoding, response header and
batch walk) are tested in tests/test_bench_compare_kafka.py.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import struct
import time
from dataclasses import dataclass

FETCH_KEY = 1
FETCH_VERSION = 11            # the last non-flexible version: fixed-width headers
MiB = 1024 * 1024
DEFAULT_MAX_BYTES = 50 * MiB  # bench_produce_consume.consume's fetch.max.bytes
DEFAULT_MAX_WAIT_MS = 100     # its fetch.wait.max.ms
BATCH_PREFIX = 12             # baseOffset int64 + batchLength int32
BATCH_HEADER = 61             # v2 batch header; lastOffsetDelta at 23, record count at 57


def encode_fetch(correlation_id: int, client_id: str, topic: str, partition: int,
                 offset: int, max_bytes: int, max_wait_ms: int = DEFAULT_MAX_WAIT_MS,
                 min_bytes: int = 1) -> bytes:
    """A size-prefixed Fetch v11 request for one partition (request header v1)."""
    cid, t = client_id.encode(), topic.encode()
    body = b"".join((
        struct.pack(">hhih", FETCH_KEY, FETCH_VERSION, correlation_id, len(cid)), cid,
        # replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level (read_uncommitted),
        # session_id 0 + epoch -1: no fetch session (a full fetch each time)
        struct.pack(">iiiibii", -1, max_wait_ms, min_bytes, max_bytes, 0, 0, -1),
        struct.pack(">ih", 1, len(t)), t,
        # one partition: index, current_leader_epoch, fetch_offset, log_start_offset,
        # partition_max_bytes
        struct.pack(">iiiqqi", 1, partition, -1, offset, -1, max_bytes),
        struct.pack(">ih", 0, 0),   # no forgotten topics; rack_id ""
    ))
    return struct.pack(">i", len(body)) + body


@dataclass(frozen=True)
class FetchHead:
    """The parsed headers of a one-partition Fetch v11 response."""

    correlation_id: int
    error_code: int            # the response's
    partition_error: int
    high_watermark: int
    records_start: int         # where the record set begins in the buffer
    records_length: int        # -1: null


def parse_fetch_head(buf: memoryview | bytes, size: int) -> FetchHead:
    """The headers of a Fetch v11 response of ``size`` bytes (without its size prefix) for one
    topic and partition. Raises ValueError on anything else."""
    corr, _throttle, err, _session, n_topics = struct.unpack_from(">iihii", buf, 0)
    if n_topics != 1:
        raise ValueError(f"expected one topic in the response, got {n_topics} (error {err})")
    (tlen,) = struct.unpack_from(">h", buf, 18)
    pos = 20 + tlen
    n_parts, _idx, perr, hw, _lso, _lstart, n_aborted = struct.unpack_from(">iihqqqi", buf, pos)
    if n_parts != 1:
        raise ValueError(f"expected one partition in the response, got {n_parts}")
    pos += 4 + 4 + 2 + 24 + 4 + max(0, n_aborted) * 16
    _preferred, rlen = struct.unpack_from(">ii", buf, pos)
    pos += 8
    if rlen > 0 and pos + rlen > size:
        raise ValueError(f"record set of {rlen} bytes at {pos} overruns a {size}-byte response")
    return FetchHead(corr, err, perr, hw, pos, rlen)


def walk_batches(buf: memoryview | bytes, start: int, length: int) -> tuple[int, int, int]:
    """Walk the whole batches of a record set: (offset after the last whole batch or -1 when
    there is none, record count, bytes of whole batches). A truncated batch at the end (Kafka
    returns the bytes up to its limit) is not counted."""
    end = start + length
    pos = start
    next_offset, records = -1, 0
    unpack = struct.unpack_from
    while pos + BATCH_HEADER <= end:
        base, blen = unpack(">qi", buf, pos)
        if pos + BATCH_PREFIX + blen > end:
            break
        (delta,) = unpack(">i", buf, pos + 23)
        (count,) = unpack(">i", buf, pos + 57)
        next_offset = base + delta + 1
        records += count
        pos += BATCH_PREFIX + blen
    return next_offset, records, pos - start


def _recv_into(sock: socket.socket, view: memoryview, n: int) -> None:
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n])
        if k == 0:
            raise ConnectionError("the broker closed the connection")
        got += k


def raw_consume(bootstrap: str, topic: str, partition: int, records: int,
                max_bytes: int = DEFAULT_MAX_BYTES, timeout_s: float = 600.0,
                client_id: str = "raw-fetch", fresh_buffer: bool = False) -> dict:
    """Fetch ``records`` records from offset 0 of one partition as fast as the broker serves
    them: MB/s of whole batches (sent -> last response complete) and per-fetch timings.
    ``fresh_buffer``: a new buffer per response (module docstring)."""
    host, port = bootstrap.rsplit(":", 1)
    buf = bytearray(max_bytes + MiB)   # the largest response: max_bytes of records + headers
    view = memoryview(buf)
    size_buf = bytearray(4)
    size_view = memoryview(size_buf)
    offset, got, nbytes, corr = 0, 0, 0, 0
    fetches: list[tuple[float, float, float, int]] = []   # sent, first byte, complete, bytes
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        deadline = time.monotonic() + timeout_s
        t0 = time.perf_counter()
        while got < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"raw fetch: {got} of {records} records in {timeout_s} s")
            corr += 1
            sent = time.perf_counter()
            sock.sendall(encode_fetch(corr, client_id, topic, partition, offset, max_bytes))
            _recv_into(sock, size_view, 4)
            first = time.perf_counter()
            (size,) = struct.unpack(">i", size_buf)
            if size > max_bytes + MiB:  # (not len(buf): a fresh buffer is the last size)
                raise ValueError(f"a {size}-byte response exceeds the {max_bytes + MiB}-byte "
                                 "buffer")
            if fresh_buffer:
                view.release()
                buf = bytearray(size)
                view = memoryview(buf)
            _recv_into(sock, view, size)
            done = time.perf_counter()
            head = parse_fetch_head(view, size)
            if head.correlation_id != corr or head.error_code or head.partition_error:
                raise RuntimeError(f"fetch answered {head}")
            nxt, n, b = walk_batches(view, head.records_start, max(0, head.records_length))
            if nxt > offset:
                offset = nxt
                got += n
                nbytes += b
            fetches.append((sent, first, done, b))
        elapsed = time.perf_counter() - t0
    waits = sorted((f - s) * 1e3 for s, f, _, _ in fetches)
    transfers = sorted((d - f) * 1e3 for _, f, d, _ in fetches)
    return {"raw_records": got, "raw_fetches": len(fetches), "raw_s": round(elapsed, 3),
            "raw_mb_s": round(nbytes / MiB / elapsed, 1),
            "raw_first_byte_ms_median": round(waits[len(waits) // 2], 2),
            "raw_first_byte_ms_max": round(waits[-1], 2),
            "raw_transfer_ms_median": round(transfers[len(transfers) // 2], 2),
            "raw_first_byte_share": round(sum(waits) / 1e3 / elapsed, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partition", type=int, default=0)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES)
    ap.add_argument("--fresh-buffer", action="store_true",
                    help="a new buffer per response, as librdkafka allocates (module docstring)")
    args = ap.parse_args()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    out = raw_consume(args.bootstrap, args.topic, args.partition, args.records, args.max_bytes,
                      fresh_buffer=args.fresh_buffer)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out.update(client_user_s=round(r1.ru_utime - r0.ru_utime, 2),
               client_sys_s=round(r1.ru_stime - r0.ru_stime, 2),
               client_minor_faults=r1.ru_minflt - r0.ru_minflt)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
