"""Record-batch compression codecs, as Kafka clients write them (via ``cramjam``).

What this module owns
    ``compress(codec, data)`` / ``decompress(codec, data)`` for the codec ids of the
    batch attributes: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

Wire formats, and why
    * gzip: a standard gzip member (Java's GZIPOutputStream, librdkafka, kafka-python).
    * snappy: two framings exist in the wild. librdkafka (confluent-kafka, kcat) sends
      *raw* snappy; the Java client sends the *xerial* block stream: the 16-byte header
      ``\\x82SNAPPY\\x00`` + int32 version + int32 compat, then blocks of
      ``int32 length + raw snappy``. ``decompress`` detects the xerial magic (only the
      first 8 bytes: some producers write version/compat little-endian) and accepts
      both. ``compress`` writes xerial by default, which every client reads (xerial's
      Java reader also accepts raw, but older kafka-python needs the framing it knows).
    * lz4: the LZ4 *frame* format with independent blocks (Kafka's
      KafkaLZ4BlockInputStream does not support linked blocks) and no content checksum.
    * zstd: a standard zstd frame; frames without a content size (streaming writers such
      as zstd-jni) are accepted.

The broker stores batches as the producer compressed them. ``decompress`` serves tools, tests,
recompression and Spark; ``decompress_bounded`` serves produce-time validation, which reads
every record of a compressed batch (as Kafka's LogValidator does) and must not let a small
batch expand without limit.

Threading
    Pure functions. cramjam releases the GIL while (de)compressing, so large payloads may
    be handed to a worker thread.
"""

from __future__ import annotations

import struct
import threading

import cramjam

# The codec ids of a batch's attributes (bits 0-2; 5..7 are unassigned): their one home, which
# batch.py and record.py import (this module imports nothing of the package, so no cycle).
COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # what the xerial library and the Java client use
_INT32 = struct.Struct(">i")

CODEC_NAMES = {
    COMPRESSION_NONE: "none",
    COMPRESSION_GZIP: "gzip",
    COMPRESSION_SNAPPY: "snappy",
    COMPRESSION_LZ4: "lz4",
    COMPRESSION_ZSTD: "zstd",
}


class CompressionError(ValueError):
    """Data could not be (de)compressed with the given codec."""


Buffer = bytes | bytearray | memoryview


def compress(codec: int, data: Buffer, *, xerial: bool = True) -> bytes:
    """Compress ``data`` as a Kafka client would for ``codec``.

    ``xerial`` selects the snappy framing (True: Java client's xerial blocks; False: raw
    snappy, as librdkafka writes)."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        if not xerial:
            return bytes(cramjam.snappy.compress_raw(data))
        return _xerial_compress(data)
    if codec == COMPRESSION_LZ4:
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        # cramjam's lz4 Compressor takes only bytes (the other codecs take any buffer).
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CompressionError(f"unknown compression codec id {codec}")


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress a batch's records section; raises :class:`CompressionError` on bad
    input (never a codec library's own exception type)."""
    try:
        if codec == COMPRESSION_NONE:
            return bytes(data)
        if codec == COMPRESSION_GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == COMPRESSION_SNAPPY:
            if bytes(data[:8]) == XERIAL_MAGIC and len(data) >= 16:
                return _xerial_decompress(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CompressionError:
        raise
    except Exception as exc:  # cramjam.DecompressionError, struct.error, ...
        name = CODEC_NAMES.get(codec, str(codec))
        raise CompressionError(f"cannot decompress {name} data: {exc}") from exc
    raise CompressionError(f"unknown compression codec id {codec}")


_SCRATCH_MIN = 1 << 20  # first scratch buffer: 1 MiB
_SCRATCH_KEEP = 8 << 20  # a scratch buffer grown beyond this is dropped after use
_scratch = threading.local()


def decompress_bounded(codec: int, data: Buffer, max_bytes: int) -> memoryview:
    """Decompress like :func:`decompress`, but never produce more than ``max_bytes``.

    Returns a read-only view that is valid until the next call in the same thread: the
    output goes into a per-thread scratch buffer that is reused (produce-time validation only
    reads the records; the batch is stored as compressed), so the steady state allocates
    nothing. The codecs write into the bounded buffer (cramjam's ``decompress_into`` stops
    when it is full); a buffer too small is doubled up to ``max_bytes`` and decompression
    retried, so a decompression bomb costs at most ``max_bytes`` of memory and the time to
    fill it. Raises :class:`CompressionError` for bad data or output above the bound."""
    if codec == COMPRESSION_NONE:
        if len(data) > max_bytes:
            raise CompressionError(f"records exceed {max_bytes} bytes")
        return memoryview(bytes(data))
    name = CODEC_NAMES.get(codec)
    if name is None:
        raise CompressionError(f"unknown compression codec id {codec}")
    try:
        if codec == COMPRESSION_SNAPPY:
            return memoryview(_snappy_bounded(data, max_bytes))
        module = {COMPRESSION_GZIP: cramjam.gzip, COMPRESSION_LZ4: cramjam.lz4,
                  COMPRESSION_ZSTD: cramjam.zstd}[codec]
        out: bytearray | None = getattr(_scratch, "buf", None)
        if out is None or len(out) > max_bytes:
            out = bytearray(min(max_bytes, _SCRATCH_MIN))
        while True:
            try:
                n = module.decompress_into(data, out)
            except cramjam.DecompressionError as exc:
                # cramjam reports a full output buffer this way; anything else is bad data.
                if "failed to write whole buffer" not in str(exc):
                    raise
                if len(out) >= max_bytes:
                    raise CompressionError(
                        f"{name} records decompress to more than {max_bytes} bytes") from None
                out = bytearray(min(max_bytes, len(out) * 2))
                continue
            if n == len(out) and len(out) < max_bytes:
                # Exactly full: the data may have been cut at the buffer's end. Retry larger.
                out = bytearray(min(max_bytes, len(out) * 2))
                continue
            _scratch.buf = out if len(out) <= _SCRATCH_KEEP else None
            return memoryview(out).toreadonly()[:n]
    except CompressionError:
        raise
    except Exception as exc:  # cramjam.DecompressionError, struct.error, ...
        raise CompressionError(f"cannot decompress {name} data: {exc}") from exc


def _snappy_bounded(data: Buffer, max_bytes: int) -> bytes:
    """Snappy in either framing (see module docstring); raw snappy states its length up front,
    and so does each xerial block, so the bound is checked before anything is decompressed."""
    if bytes(data[:8]) == XERIAL_MAGIC and len(data) >= 16:
        return _xerial_decompress(data, max_bytes)
    if cramjam.snappy.decompress_raw_len(data) > max_bytes:
        raise CompressionError(f"snappy records decompress to more than {max_bytes} bytes")
    return bytes(cramjam.snappy.decompress_raw(data))


def _xerial_compress(data: Buffer) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    with memoryview(data) as mv:
        for start in range(0, len(mv), XERIAL_BLOCK_SIZE):
            block = cramjam.snappy.compress_raw(mv[start : start + XERIAL_BLOCK_SIZE])
            out += _INT32.pack(len(block))
            out += block
    return bytes(out)


def _xerial_decompress(data: Buffer, max_bytes: int | None = None) -> bytes:
    """The xerial block stream; with ``max_bytes``, output beyond it is refused before the
    block that would exceed it is decompressed."""
    out = bytearray()
    with memoryview(data) as mv:
        pos = 16
        end = len(mv)
        while pos < end:
            if end - pos < 4:
                raise CompressionError("truncated xerial snappy block length")
            (length,) = _INT32.unpack_from(mv, pos)
            pos += 4
            if length < 0 or pos + length > end:
                raise CompressionError(f"xerial snappy block of {length} bytes overruns data")
            block = mv[pos : pos + length]
            if max_bytes is not None and \
                    len(out) + cramjam.snappy.decompress_raw_len(block) > max_bytes:
                raise CompressionError(f"snappy records decompress to more than {max_bytes} bytes")
            out += cramjam.snappy.decompress_raw(block)
            pos += length
    return bytes(out)
