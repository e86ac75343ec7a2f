"""Fetched Kafka record batches straight into Arrow, in the Kafka source's schema.

What this module owns
    The Spark schema of the Kafka source (:func:`kafka_schema`), its exact Arrow form
    (:func:`arrow_schema`: binary key/value, string topic, int32 partition and
    timestampType, int64 offset, ``timestamp[us, UTC]``, optional headers), and
    :class:`ArrowBatchBuilder`, which walks the v2 record batches of a Fetch response and
    appends their records to column buffers that become one ``pyarrow.RecordBatch``.

Performance
    The per-record work (varints, slicing keys/values/headers) happens in
    ``snakka.spark._fastdecode`` (a small C extension built by ``pip install``) which writes
    Arrow's own buffer layout: little-endian offsets, validity bytes and concatenated data.
    Python does per-batch work only: header parse, CRC32C (C), decompression (cramjam,
    releases the GIL), transaction filtering. Without a C compiler the pure-Python decoder
    :func:`decode_records_py` fills the same buffers (same results, slower); set
    ``SNAKKA_SPARK_PURE_PYTHON=1`` to force it.

Buffers (bytearrays, in this order; ``*_ends`` start with a 0 so they are Arrow offsets)
    offsets i64 | timestamps i64 (µs) | timestampType i32 | key valid u8 | key ends i32 |
    key data | value valid u8 | value ends i32 | value data | header ends i32 (per record,
    cumulative header count) | header key ends i32 | header key data | header value
    valid u8 | header value ends i32 | header value data
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from snakka.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    parse_header,
)
from snakka.records.compression import CompressionError, decompress
from snakka.records.record import batch_records
from snakka.util.crc32c import crc32c

try:  # the C decoder is optional: a machine without a compiler still gets a working source
    if os.environ.get("SNAKKA_SPARK_PURE_PYTHON"):
        raise ImportError("pure Python decoding forced")
    from snakka.spark._fastdecode import decode_records as _decode_records_ext

    _decode_records_c: Callable[..., int] | None = _decode_records_ext
except ImportError:  # pragma: no cover - depends on the build
    _decode_records_c = None

N_BUFFERS = 15
_I32_ZERO = b"\x00\x00\x00\x00"
_ENDS = (4, 7, 9, 10, 13)  # buffers holding Arrow offsets (start with a 0)


class CorruptRecordError(RuntimeError):
    """Fetched data is not valid Kafka v2 record batches (CRC mismatch, bad varints...)."""


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (same names, types and nullability)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` for :func:`kafka_schema`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


def decode_records_py(bufs: list[bytearray], data: bytes | memoryview, count: int, base_offset: int,
                      base_ts: int, ts_override: int, ts_type: int, lo: int, hi: int,
                      with_headers: bool) -> int:
    """Pure-Python twin of the C ``decode_records``: append the records of one batch's
    (decompressed) records section whose offsets are in [lo, hi). Returns how many were
    appended; raises ValueError on malformed data."""
    (offs, tss, tst, kvalid, kends, kdata, vvalid, vends, vdata,
     hends, hkends, hkdata, hvvalid, hvends, hvdata) = bufs
    o_l: list[int] = []
    t_l: list[int] = []
    kv_l = bytearray()
    ke_l: list[int] = []
    vv_l = bytearray()
    ve_l: list[int] = []
    he_l: list[int] = []
    kpos = len(kdata)
    vpos = len(vdata)
    hcount = struct.unpack_from("<i", hends, len(hends) - 4)[0]
    pos = 0
    end = len(data)

    def varint(p: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            if p >= end:
                raise ValueError("varint runs past the end of the batch")
            b = data[p]
            p += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1), p
            shift += 7
            if shift > 63:
                raise ValueError("varint is longer than 10 bytes")

    for _ in range(count):
        length, pos = varint(pos)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise ValueError(f"record length {length} overruns the batch")
        pos += 1  # attributes
        ts_delta, pos = varint(pos)
        off_delta, pos = varint(pos)
        offset = base_offset + off_delta
        keep = lo <= offset < hi
        klen, pos = varint(pos)
        kstart = pos
        if klen > 0:
            pos += klen
        vlen, pos = varint(pos)
        vstart = pos
        if vlen > 0:
            pos += vlen
        nh, pos = varint(pos)
        if pos > rec_end or nh < 0:
            raise ValueError("record fields overrun the record")
        if keep:
            o_l.append(offset)
            t_l.append((ts_override if ts_override >= 0 else base_ts + ts_delta) * 1000)
            if klen >= 0:
                kdata += data[kstart:kstart + klen]
                kpos += klen
                kv_l.append(1)
            else:
                kv_l.append(0)
            ke_l.append(kpos)
            if vlen >= 0:
                vdata += data[vstart:vstart + vlen]
                vpos += vlen
                vv_l.append(1)
            else:
                vv_l.append(0)
            ve_l.append(vpos)
        for _h in range(nh):
            hklen, pos = varint(pos)
            if hklen < 0:
                raise ValueError("null header key")
            hk = data[pos:pos + hklen]
            pos += hklen
            hvlen, pos = varint(pos)
            hv = data[pos:pos + max(hvlen, 0)]
            pos += max(hvlen, 0)
            if keep and with_headers:
                bytes(hk).decode("utf-8")  # header keys are UTF-8 strings in Kafka
                hkdata += hk
                hkends += struct.pack("<i", len(hkdata))
                hvvalid.append(1 if hvlen >= 0 else 0)
                hvdata += hv
                hvends += struct.pack("<i", len(hvdata))
                hcount += 1
        if pos != rec_end:
            raise ValueError(f"record declares {length} bytes but its fields use "
                             f"{pos - rec_end + length}")
        if keep and with_headers:
            he_l.append(hcount)
    if pos != end:
        raise ValueError(f"{end - pos} bytes left after {count} records")
    n = len(o_l)
    offs += array("q", o_l).tobytes()
    tss += array("q", t_l).tobytes()
    tst += array("i", [ts_type] * n).tobytes()
    kvalid += kv_l
    kends += array("i", ke_l).tobytes()
    vvalid += vv_l
    vends += array("i", ve_l).tobytes()
    if with_headers:
        hends += array("i", he_l).tobytes()
    return n


_decode = _decode_records_c or decode_records_py
USING_C_DECODER = _decode_records_c is not None

_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 = ABORT, 1 = COMMIT)


class ArrowBatchBuilder:
    """Accumulates the records of one topic-partition and emits Arrow record batches."""

    def __init__(self, topic: str, partition: int, include_headers: bool, *,
                 check_crcs: bool = True, read_committed: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.check_crcs = check_crcs
        self.read_committed = read_committed
        self.schema = arrow_schema(include_headers)
        self._decode = _decode
        self._reset()

    def _reset(self) -> None:
        self.bufs = [bytearray() for _ in range(N_BUFFERS)]
        for i in _ENDS:
            self.bufs[i] += _I32_ZERO

    @property
    def num_rows(self) -> int:
        return len(self.bufs[0]) // 8

    @property
    def num_bytes(self) -> int:
        return len(self.bufs[5]) + len(self.bufs[8]) + len(self.bufs[14]) + 40 * self.num_rows

    def add_fetched(self, records: memoryview | bytes, lo: int, hi: int,
                    aborted: list | None = None) -> tuple[int, int]:
        """Decode every complete batch of a Fetch response's records, keeping offsets in
        [lo, hi). Returns ``(next_offset, appended)``: the offset after the last complete
        batch seen (``lo`` if none), to continue fetching from, and the rows added."""
        buf = records
        total = len(buf)
        pos = 0
        next_offset = lo
        appended = 0
        aborted_pids: set[int] = set()
        pending = sorted(((a.first_offset, a.producer_id) for a in aborted or ()), reverse=True)
        with memoryview(buf) as mv:
            while total - pos >= HEADER_SIZE:
                h = parse_header(mv, pos)
                size = h.batch_length + LOG_OVERHEAD
                if h.magic != MAGIC_V2:
                    raise CorruptRecordError(
                        f"{self.topic}-{self.partition}: record batch at offset {h.base_offset} "
                        f"has magic {h.magic}; only message format v2 (Kafka >= 0.11) is supported")
                if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                    raise CorruptRecordError(
                        f"{self.topic}-{self.partition}: record batch at offset {h.base_offset} "
                        f"has an invalid length {h.batch_length}")
                if pos + size > total:
                    break  # a partial batch at the end of a fetch: fetch it again from here
                start = pos
                pos += size
                if h.base_offset >= hi:
                    break
                next_offset = max(next_offset, h.base_offset + h.last_offset_delta + 1)
                if self.read_committed:
                    while pending and pending[-1][0] <= h.base_offset + h.last_offset_delta:
                        aborted_pids.add(pending.pop()[1])
                attrs = h.attributes
                below = h.base_offset + h.last_offset_delta < lo
                if below and not (attrs & CONTROL_MASK and self.read_committed):
                    continue
                if self.check_crcs and crc32c(mv[start + ATTRIBUTES_OFFSET:start + size]) != h.crc:
                    raise CorruptRecordError(
                        f"{self.topic}-{self.partition}: record batch at offset {h.base_offset} "
                        "fails its CRC32C check")
                if attrs & CONTROL_MASK:
                    # An ABORT marker ends the aborted transaction of its producer (even below
                    # lo: later batches of that producer belong to a new transaction).
                    if self.read_committed and h.producer_id in aborted_pids:
                        for rec in batch_records(mv, start, h):
                            if rec.key and len(rec.key) >= 4 \
                                    and _CONTROL_KEY.unpack_from(rec.key)[1] == 0:
                                aborted_pids.discard(h.producer_id)
                    continue
                if self.read_committed and attrs & TRANSACTIONAL_MASK \
                        and h.producer_id in aborted_pids:
                    continue
                codec = attrs & COMPRESSION_MASK
                section = mv[start + HEADER_SIZE:start + size]
                try:
                    data = section if codec == 0 else decompress(codec, section)
                except CompressionError as e:
                    raise CorruptRecordError(
                        f"{self.topic}-{self.partition}: batch at offset {h.base_offset}: {e}"
                    ) from None
                log_append = attrs & TIMESTAMP_TYPE_MASK
                try:
                    appended += self._decode(
                        self.bufs, data, h.records_count, h.base_offset, h.base_timestamp,
                        h.max_timestamp if log_append else -1, 1 if log_append else 0,
                        lo, hi, self.include_headers)
                except (ValueError, UnicodeDecodeError, IndexError) as e:
                    raise CorruptRecordError(
                        f"{self.topic}-{self.partition}: malformed record in batch at offset "
                        f"{h.base_offset}: {e}") from None
                finally:
                    section.release()
        return next_offset, appended

    def flush(self) -> pa.RecordBatch | None:
        """The accumulated rows as one RecordBatch (None if empty); the builder is reset."""
        n = self.num_rows
        if n == 0:
            return None
        (offs, tss, tst, kvalid, kends, kdata, vvalid, vends, vdata,
         hends, hkends, hkdata, hvvalid, hvends, hvdata) = self.bufs
        self._reset()
        s = self.schema
        cols = [
            _binary(s.field("key").type, n, kvalid, kends, kdata),
            _binary(s.field("value").type, n, vvalid, vends, vdata),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.array(np.full(n, self.partition, dtype=np.int32)),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offs)]),
            pa.Array.from_buffers(s.field("timestamp").type, n, [None, pa.py_buffer(tss)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(tst)]),
        ]
        if self.include_headers:
            m = len(hkends) // 4 - 1
            list_type = s.field("headers").type
            struct_type = list_type.value_type
            keys = pa.Array.from_buffers(pa.string(), m, [None, pa.py_buffer(hkends),
                                                          pa.py_buffer(hkdata)])
            values = _binary(pa.binary(), m, hvvalid, hvends, hvdata)
            structs = pa.StructArray.from_arrays([keys, values], fields=list(struct_type))
            cols.append(pa.ListArray.from_arrays(
                pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(hends)]),
                structs, type=list_type))
        return pa.RecordBatch.from_arrays(cols, schema=s)


def _binary(typ: pa.DataType, n: int, valid: bytearray, ends: bytearray,
            data: bytearray) -> pa.Array:
    v = np.frombuffer(valid, dtype=np.uint8)
    nulls = n - int(np.count_nonzero(v))
    bitmap = None
    if nulls:
        bitmap = pa.py_buffer(np.packbits(v, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(ends), pa.py_buffer(data)],
                                 null_count=nulls)
