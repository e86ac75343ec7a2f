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

Never on the plain append path: the broker stores batches as the producer compressed
them. These functions serve tools, tests, compaction/transactions later and Spark.

Threading
    Pure functions. cramjam releases the GIL while (de)compressing, so large payloads may
    be handed to a worker thread.
"""

from __future__ import annotations

import struct

import cramjam

from .batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)

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
        compressor.compress(data)
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


def _xerial_compress(data: Buffer) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    with memoryview(data) as mv:
        for start in range(0, len(mv), XERIAL_BLOCK_SIZE):
            block = cramjam.snappy.compress_raw(mv[start : start + XERIAL_BLOCK_SIZE])
            out += _INT32.pack(len(block))
            out += block
    return bytes(out)


def _xerial_decompress(data: Buffer) -> bytes:
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
            out += cramjam.snappy.decompress_raw(mv[pos : pos + length])
            pos += length
    return bytes(out)
