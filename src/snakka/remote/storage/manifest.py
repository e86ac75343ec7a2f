"""The manifest of one remote segment: what was uploaded, and the checksums reads verify.

A remote segment is several objects (the log, its offset/time/transaction indexes, the
producer snapshot, the leader-epoch checkpoint) plus this manifest, written LAST: it is the
commit point of a copy. An object without its manifest is the debris of a copy that never
finished (the remote log manager deletes it by the segment's metadata); a manifest names only
objects that were completely uploaded before it.

Every file is checksummed in chunks of ``chunk_size`` bytes (``rsm.config.chunk.size`` when it
was written; a later change of that config leaves old manifests readable): a read of a byte
range fetches the whole chunks it touches and verifies each with CRC32C, so a flipped bit in
object storage is an error (:class:`RemoteChecksumError`), never data handed to a consumer.

Binary and versioned (big-endian), compact (4 bytes per chunk: 1 KiB for a 1 GiB segment in
4 MiB chunks)::

    magic  b"SKRM"
    version            u8   (1)
    chunk_size         u32
    file_count         u8
    per file:  kind u8 (FileKind) | size u64 | ceil(size / chunk_size) x crc32c u32
    crc32c             u32  of every byte before it

The segment's custom metadata (stored with its RemoteLogSegmentMetadata in
``__remote_log_metadata``) is ``version u8 (1) | crc32c u32`` of the manifest, so a reader
can tell the manifest it fetched is the one the copy committed.

Pure code: no I/O; the storage manager reads and writes the bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum

from snakka.remote.storage.errors import RemoteChecksumError, RemoteStorageError
from snakka.remote.types import IndexType
from snakka.util.crc32c import crc32c as _crc32c

MAGIC = b"SKRM"
VERSION = 1
CUSTOM_METADATA_VERSION = 1

_HEADER = struct.Struct(">4sBIB")
_FILE = struct.Struct(">BQ")
_U32 = struct.Struct(">I")
_CUSTOM = struct.Struct(">BI")


class FileKind(IntEnum):
    """The files of one remote segment; the ids are stored in manifests, never reuse one."""

    LOG = 0
    OFFSET_INDEX = 1
    TIME_INDEX = 2
    TRANSACTION_INDEX = 3
    PRODUCER_SNAPSHOT = 4
    LEADER_EPOCH_CHECKPOINT = 5

    @property
    def suffix(self) -> str:
        """The object key's suffix (Kafka's file suffixes, as in a local log dir)."""
        return _SUFFIX[self]


_SUFFIX: dict[FileKind, str] = {
    FileKind.LOG: "log",
    FileKind.OFFSET_INDEX: "index",
    FileKind.TIME_INDEX: "timeindex",
    FileKind.TRANSACTION_INDEX: "txnindex",
    FileKind.PRODUCER_SNAPSHOT: "snapshot",
    FileKind.LEADER_EPOCH_CHECKPOINT: "leader_epoch_checkpoint",
}

MANIFEST_SUFFIX = "manifest"

FILE_KIND_OF_INDEX: dict[IndexType, FileKind] = {
    IndexType.OFFSET: FileKind.OFFSET_INDEX,
    IndexType.TIMESTAMP: FileKind.TIME_INDEX,
    IndexType.TRANSACTION: FileKind.TRANSACTION_INDEX,
    IndexType.PRODUCER_SNAPSHOT: FileKind.PRODUCER_SNAPSHOT,
    IndexType.LEADER_EPOCH: FileKind.LEADER_EPOCH_CHECKPOINT,
}


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return int(_crc32c(data))


def chunk_crcs(data: bytes | bytearray | memoryview, chunk_size: int) -> tuple[int, ...]:
    """The CRC32C of each ``chunk_size`` piece of ``data`` (the last may be shorter)."""
    view = memoryview(data)
    return tuple(crc32c(view[i:i + chunk_size]) for i in range(0, len(view), chunk_size))


@dataclass(frozen=True, slots=True)
class FileEntry:
    size: int
    crcs: tuple[int, ...]  # one per chunk

    def verify(self, kind: FileKind, first_chunk: int, data: bytes | memoryview,
               chunk_size: int) -> None:
        """Check ``data``, the whole chunks from ``first_chunk`` on, against the manifest."""
        view = memoryview(data)
        for i, pos in enumerate(range(0, len(view), chunk_size)):
            chunk = first_chunk + i
            if chunk >= len(self.crcs) or crc32c(view[pos:pos + chunk_size]) != self.crcs[chunk]:
                raise RemoteChecksumError(
                    f"{kind.suffix}: chunk {chunk} (bytes {chunk * chunk_size}.."
                    f"{chunk * chunk_size + len(view[pos:pos + chunk_size])}) fails its CRC32C")


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    chunk_size: int
    files: Mapping[FileKind, FileEntry]

    def encode(self) -> bytes:
        parts = [_HEADER.pack(MAGIC, VERSION, self.chunk_size, len(self.files))]
        for kind in sorted(self.files):
            entry = self.files[kind]
            parts.append(_FILE.pack(kind, entry.size))
            parts.append(struct.pack(f">{len(entry.crcs)}I", *entry.crcs))
        body = b"".join(parts)
        return body + _U32.pack(crc32c(body))

    @classmethod
    def decode(cls, data: bytes | memoryview) -> SegmentManifest:
        """Parse a stored manifest; RemoteChecksumError when its own CRC fails,
        RemoteStorageError when it is not a manifest this code can read."""
        buf = bytes(data)
        if len(buf) < _HEADER.size + _U32.size or buf[:4] != MAGIC:
            raise RemoteStorageError("not a remote segment manifest")
        (stored,) = _U32.unpack_from(buf, len(buf) - _U32.size)
        if crc32c(memoryview(buf)[:-_U32.size]) != stored:
            raise RemoteChecksumError("the segment manifest fails its CRC32C")
        _, version, chunk_size, count = _HEADER.unpack_from(buf)
        if version != VERSION:
            raise RemoteStorageError(
                f"segment manifest version {version}: this snakka reads version {VERSION}")
        if chunk_size <= 0:
            raise RemoteStorageError(f"segment manifest with chunk size {chunk_size}")
        pos = _HEADER.size
        files: dict[FileKind, FileEntry] = {}
        try:
            for _ in range(count):
                kind_id, size = _FILE.unpack_from(buf, pos)
                pos += _FILE.size
                n = -(-size // chunk_size)
                if pos + 4 * n > len(buf) - _U32.size:
                    raise RemoteStorageError("truncated segment manifest")
                crcs = struct.unpack_from(f">{n}I", buf, pos)
                pos += 4 * n
                files[FileKind(kind_id)] = FileEntry(size, crcs)
        except (struct.error, ValueError) as exc:
            raise RemoteStorageError(f"malformed segment manifest: {exc}") from exc
        if pos != len(buf) - _U32.size:
            raise RemoteStorageError("segment manifest with trailing bytes")
        return cls(chunk_size, files)


def custom_metadata(manifest_bytes: bytes) -> bytes:
    """The custom metadata a copy returns: ``version u8 | crc32c u32`` of its manifest."""
    return _CUSTOM.pack(CUSTOM_METADATA_VERSION, crc32c(manifest_bytes))


def check_custom_metadata(custom: bytes | None, manifest_bytes: bytes) -> None:
    """RemoteChecksumError when ``custom`` (a segment's custom metadata, None for a copy whose
    metadata has none) names another manifest than ``manifest_bytes``; custom metadata of an
    unknown version is not checked (a newer writer's)."""
    if not custom or len(custom) != _CUSTOM.size or custom[0] != CUSTOM_METADATA_VERSION:
        return
    _, expected = _CUSTOM.unpack(custom)
    if crc32c(manifest_bytes) != expected:
        raise RemoteChecksumError(
            "the segment manifest is not the one its copy committed (custom metadata CRC32C)")
