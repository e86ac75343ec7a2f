"""Kafka magic-v2 record batches as bytes.

* :mod:`.batch`: the 61-byte header, produce-time validation, in-place offset
  assignment. The hot path: per batch, never per record.
* :mod:`.walk`: the produce-time record walk (C extension ``_recordwalk`` with a
  pure-Python twin): a batch's records must be what its header claims.
* :mod:`.compression`: gzip / snappy (raw and xerial) / lz4 frame / zstd via cramjam,
  unbounded for tools and bounded for validation.
* :mod:`.record`: record-level decode and a batch builder, for tools, tests,
  coordinators and Spark; never on the produce/fetch hot path.

Error codes are plain ints (Kafka's numbering), compatible with
``snakka.protocol.errors.ErrorCode``.
"""

from .batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchHeader,
    BatchInfo,
    RecordValidationError,
    assign_offsets,
    increment_sequence,
    parse_header,
    validate_batches,
)
from .compression import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CompressionError,
    compress,
    decompress,
)
from .record import (
    Record,
    batch_records,
    build_batch,
    decode_varint,
    encode_varint,
    iter_batches,
    iter_records,
)

__all__ = [
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "NO_TIMESTAMP",
    "BatchHeader",
    "BatchInfo",
    "CompressionError",
    "Record",
    "RecordValidationError",
    "assign_offsets",
    "batch_records",
    "build_batch",
    "compress",
    "decode_varint",
    "decompress",
    "encode_varint",
    "increment_sequence",
    "iter_batches",
    "iter_records",
    "parse_header",
    "validate_batches",
]
