"""Low-level Kafka wire primitives shared by every generated codec.

The generated modules under ``snakka.protocol.messages`` contain straight-line
per-version code; everything variable-length (varints, strings, bytes, record
sets, array lengths, tagged-field sections) is delegated to the small helpers
here so the hot loops stay short and all bounds checks live in one place.
This module also owns :class:`ProtocolStruct`, the common base class of every
generated message/struct class (version dispatch, error wrapping, repr).

Conventions (the generated code relies on them):

* Readers take ``(buf, pos)`` where ``buf`` is a ``memoryview`` of unsigned
  bytes and return ``(value, new_pos)``.  They raise :class:`DecodeError` for
  malformed input; IndexError/struct.error/UnicodeDecodeError escaping from a
  reader are converted to DecodeError by :meth:`ProtocolStruct.read`.
* Writers take ``(out, value)`` and append to the ``bytearray`` ``out``.
* "compact" means the flexible-version encoding (unsigned varint length + 1,
  0 = null); the classic encoding uses int16 (strings) or int32 (bytes,
  records, arrays) lengths with -1 = null.
* Record sets are returned as zero-copy ``memoryview`` slices of the input.
  They keep the input buffer alive (and a ``bytearray`` input cannot be
  resized while they exist).

The varint/varlong (zigzag) helpers are also meant for the record-batch layer.
"""

from __future__ import annotations

import base64 as _base64
import os
import struct as _struct
import uuid as _uuid

from .errors import DecodeError

TYPE_CHECKING = False
if TYPE_CHECKING:  # keep `typing` out of the import path (startup time)
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeAlias

    #: What a record set or BYTES field may be written from.
    BytesLike: TypeAlias = bytes | bytearray | memoryview

__all__ = [
    "UNSET",
    "ZERO_UUID",
    "DecodeError",
    "ProtocolStruct",
    "read_uvarint",
    "write_uvarint",
    "read_varint",
    "write_varint",
    "read_varlong",
    "write_varlong",
    "size_of_uvarint",
    "uuid_from_bytes",
    "uuid_to_base64",
    "base64_to_uuid",
    "random_uuid",
    "skip_tagged_fields",
]

ZERO_UUID = _uuid.UUID(int=0)


class _Unset:
    """Marker for "argument not given" where None is a meaningful (null) value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"

    def __reduce__(self) -> str:
        return "UNSET"


UNSET = _Unset()

_I16 = _struct.Struct(">h")
_I32 = _struct.Struct(">i")
_unpack_i16 = _I16.unpack_from
_unpack_i32 = _I32.unpack_from
_pack_i16 = _I16.pack
_pack_i32 = _I32.pack
_NULL16 = b"\xff\xff"
_NULL32 = b"\xff\xff\xff\xff"
_MAX_STRING = 0x7FFF


# --------------------------------------------------------------------------- uuid


def _uuid_from_bytes_slow(b: bytes) -> _uuid.UUID:
    return _uuid.UUID(bytes=bytes(b))


def _make_fast_uuid() -> Callable[[bytes], _uuid.UUID]:
    # uuid.UUID(bytes=...) validates and is ~1 us; building the (immutable,
    # slotted) instance directly is ~3x faster.  Verify once, else fall back.
    new = object.__new__
    setattr_ = object.__setattr__
    from_bytes = int.from_bytes
    cls = _uuid.UUID
    unknown = _uuid.SafeUUID.unknown

    def uuid_from_bytes(b: bytes) -> _uuid.UUID:
        u = new(cls)
        setattr_(u, "int", from_bytes(b, "big"))
        setattr_(u, "is_safe", unknown)
        return u

    try:
        probe = bytes(range(16))
        if uuid_from_bytes(probe) == _uuid.UUID(bytes=probe) and str(uuid_from_bytes(probe)) == str(
            _uuid.UUID(bytes=probe)
        ):
            return uuid_from_bytes
    except Exception:  # pragma: no cover - depends on the uuid implementation
        pass
    return _uuid_from_bytes_slow  # pragma: no cover


uuid_from_bytes = _make_fast_uuid()


# Kafka's textual form of a Uuid (topic ids, cluster ids, member ids): what clients, tools and
# the broker print and parse, so both sides of the protocol share this one definition.
def uuid_to_base64(u: _uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: url-safe base64 of the 16 bytes, no padding."""
    return _base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def base64_to_uuid(s: str) -> _uuid.UUID:
    """Kafka's ``Uuid.fromString()``. Raises ``ValueError`` (``binascii.Error`` is one) for text
    that is not the base64 of 16 bytes."""
    return _uuid.UUID(bytes=_base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))


def random_uuid() -> _uuid.UUID:
    """Kafka's ``Uuid.randomUuid()``: random, never the zero or metadata-topic id (0 and 1), and
    never one whose text starts with '-' (it would read as a command-line option)."""
    while True:
        u = _uuid.uuid4()
        if u.int > 1 and not uuid_to_base64(u).startswith("-"):
            return u


# ----------------------------------------------------------------------- varints


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint of at most 5 bytes (Kafka's readUnsignedVarint)."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint is longer than 5 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0x80:
        if value < 0:
            raise ValueError(f"negative unsigned varint {value}")
        out.append(value)
        return
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def size_of_uvarint(value: int) -> int:
    n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


def _read_unsigned_long_varint(buf: memoryview, pos: int, max_shift: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > max_shift:
            raise DecodeError("varint is too long")


def read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Zigzag-encoded signed 32-bit varint (record headers, record fields)."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    v, pos = _read_unsigned_long_varint(buf, pos, 28)
    return (v >> 1) ^ -(v & 1), pos


def read_varlong(buf: memoryview, pos: int) -> tuple[int, int]:
    """Zigzag-encoded signed 64-bit varint."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    v, pos = _read_unsigned_long_varint(buf, pos, 63)
    return (v >> 1) ^ -(v & 1), pos


def write_varint(out: bytearray, value: int) -> None:
    write_uvarint(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    write_uvarint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# ------------------------------------------------------------------ length words


def _too_long(n: int, pos: int, buf: memoryview) -> DecodeError:
    return DecodeError(f"length {n} at offset {pos} exceeds the {len(buf) - pos} remaining bytes")


def read_array_len(buf: memoryview, pos: int) -> tuple[int, int]:
    """int32 element count of a non-nullable classic array."""
    (n,) = _unpack_i32(buf, pos)
    pos += 4
    if n < 0:
        raise DecodeError("non-nullable array is null")
    if n > len(buf) - pos:
        raise _too_long(n, pos, buf)
    return n, pos


def read_nullable_array_len(buf: memoryview, pos: int) -> tuple[int, int]:
    """int32 element count, -1 for a null array."""
    (n,) = _unpack_i32(buf, pos)
    pos += 4
    if n < 0:
        if n == -1:
            return -1, pos
        raise DecodeError(f"negative array length {n}")
    if n > len(buf) - pos:
        raise _too_long(n, pos, buf)
    return n, pos


def read_compact_array_len(buf: memoryview, pos: int) -> tuple[int, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise DecodeError("non-nullable array is null")
    n -= 1
    if n > len(buf) - pos:
        raise _too_long(n, pos, buf)
    return n, pos


def read_compact_nullable_array_len(buf: memoryview, pos: int) -> tuple[int, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    n -= 1
    if n > len(buf) - pos:
        raise _too_long(n, pos, buf)
    return n, pos


# ----------------------------------------------------------------------- strings


def read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    (n,) = _unpack_i16(buf, pos)
    pos += 2
    if n < 0:
        raise DecodeError(
            "non-nullable string is null" if n == -1 else f"negative string length {n}"
        )
    end = pos + n
    if end > len(buf):
        raise _too_long(n, pos, buf)
    return str(buf[pos:end], "utf-8"), end


def read_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    (n,) = _unpack_i16(buf, pos)
    pos += 2
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"negative string length {n}")
    end = pos + n
    if end > len(buf):
        raise _too_long(n, pos, buf)
    return str(buf[pos:end], "utf-8"), end


def read_compact_string(buf: memoryview, pos: int) -> tuple[str, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise DecodeError("non-nullable string is null")
    end = pos + n - 1
    if end > len(buf):
        raise _too_long(n - 1, pos, buf)
    return str(buf[pos:end], "utf-8"), end


def read_compact_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise _too_long(n - 1, pos, buf)
    return str(buf[pos:end], "utf-8"), end


def _encode_str(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > _MAX_STRING:
        raise ValueError(f"string of {len(b)} bytes exceeds the Kafka limit of 32767")
    return b


def write_string(out: bytearray, s: str) -> None:
    if s is None:
        raise ValueError("non-nullable string field is None")
    b = s.encode("utf-8")
    out += _pack_i16(len(b))  # struct.error (-> ValueError) beyond 32767
    out += b


def write_nullable_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out += _NULL16
        return
    b = s.encode("utf-8")
    out += _pack_i16(len(b))
    out += b


def write_compact_string(out: bytearray, s: str) -> None:
    if s is None:
        raise ValueError("non-nullable string field is None")
    b = _encode_str(s)
    n = len(b) + 1
    if n < 0x80:
        out.append(n)
    else:
        write_uvarint(out, n)
    out += b


def write_compact_nullable_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out.append(0)
        return
    b = _encode_str(s)
    n = len(b) + 1
    if n < 0x80:
        out.append(n)
    else:
        write_uvarint(out, n)
    out += b


# ------------------------------------------------------------- bytes and records


def read_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    (n,) = _unpack_i32(buf, pos)
    pos += 4
    if n < 0:
        raise DecodeError("non-nullable bytes field is null" if n == -1 else f"negative length {n}")
    end = pos + n
    if end > len(buf):
        raise _too_long(n, pos, buf)
    return bytes(buf[pos:end]), end


def read_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    (n,) = _unpack_i32(buf, pos)
    pos += 4
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"negative length {n}")
    end = pos + n
    if end > len(buf):
        raise _too_long(n, pos, buf)
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise DecodeError("non-nullable bytes field is null")
    end = pos + n - 1
    if end > len(buf):
        raise _too_long(n - 1, pos, buf)
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise _too_long(n - 1, pos, buf)
    return bytes(buf[pos:end]), end


def read_records(buf: memoryview, pos: int) -> tuple[memoryview, int]:
    (n,) = _unpack_i32(buf, pos)
    pos += 4
    if n < 0:
        raise DecodeError(
            "non-nullable records field is null" if n == -1 else f"negative length {n}"
        )
    end = pos + n
    if end > len(buf):
        raise _too_long(n, pos, buf)
    return buf[pos:end], end


def read_nullable_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    (n,) = _unpack_i32(buf, pos)
    pos += 4
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"negative length {n}")
    end = pos + n
    if end > len(buf):
        raise _too_long(n, pos, buf)
    return buf[pos:end], end


def read_compact_records(buf: memoryview, pos: int) -> tuple[memoryview, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise DecodeError("non-nullable records field is null")
    end = pos + n - 1
    if end > len(buf):
        raise _too_long(n - 1, pos, buf)
    return buf[pos:end], end


def read_compact_nullable_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise _too_long(n - 1, pos, buf)
    return buf[pos:end], end


def write_bytes(out: bytearray, b: BytesLike) -> None:
    if b is None:
        raise ValueError("non-nullable bytes field is None")
    out += _pack_i32(len(b))
    out += b


def write_nullable_bytes(out: bytearray, b: BytesLike | None) -> None:
    if b is None:
        out += _NULL32
        return
    out += _pack_i32(len(b))
    out += b


def write_compact_bytes(out: bytearray, b: BytesLike) -> None:
    if b is None:
        raise ValueError("non-nullable bytes field is None")
    n = len(b) + 1
    if n < 0x80:
        out.append(n)
    else:
        write_uvarint(out, n)
    out += b


def write_compact_nullable_bytes(out: bytearray, b: BytesLike | None) -> None:
    if b is None:
        out.append(0)
        return
    n = len(b) + 1
    if n < 0x80:
        out.append(n)
    else:
        write_uvarint(out, n)
    out += b


class FileRegion:
    """``length`` bytes of an open file from ``position``: a record set served from a log
    segment without reading it into memory (Kafka's ``FileRecords`` slice).

    It owns ``fd``, a duplicate of the segment's descriptor: the region stays readable when
    retention deletes or the file pool closes the segment file while the response waits to be
    sent (Kafka keeps the channel of a deleted segment open the same way). Whoever sends it
    calls :meth:`close` (the connection, once sent or dropped); ``__del__`` is the backstop.
    ``next_offset`` is the offset after its last batch (read_committed's upper bound for
    aborted transactions, known to the log read that made the region).

    Only a :class:`ScatterBuffer` carries a region as a chunk (the connection sends it with
    ``sendfile``); any other output reads it into memory (:meth:`read_all`)."""

    __slots__ = ("fd", "position", "length", "next_offset")

    def __init__(self, fd: int, position: int, length: int, next_offset: int = -1) -> None:
        self.fd = fd
        self.position = position
        self.length = length
        self.next_offset = next_offset

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return self.length > 0

    def read_all(self) -> bytes:
        """The region's bytes, read into memory (the path for outputs that cannot send it)."""
        data = os.pread(self.fd, self.length, self.position)
        while len(data) < self.length:
            more = os.pread(self.fd, self.length - len(data), self.position + len(data))
            if not more:
                raise EOFError(f"file region truncated: {len(data)} of {self.length} bytes")
            data += more
        return data

    def __getitem__(self, item: slice) -> bytes:
        """Small reads of the region (batch headers: metrics, tests), from the file."""
        start, stop, step = item.indices(self.length)
        assert step == 1, item
        return os.pread(self.fd, max(0, stop - start), self.position + start)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, length={self.length})"


def _nbytes(b: BytesLike | FileRegion) -> int:
    return b.nbytes if type(b) is memoryview else len(b)


# Record sets at least this large are not copied into a ScatterBuffer (see below).
ZERO_COPY_MIN_BYTES = 64 * 1024


class ScatterBuffer(bytearray):
    """An output buffer that keeps large record sets by reference instead of copying them.

    A Fetch response is mostly stored log bytes. Writing them into the response buffer would
    copy every byte once more and hold two copies in memory; with a ScatterBuffer the records
    writers below append only the length prefix and remember the record set as a separate
    chunk at that position. ``pieces()`` gives the buffer and the chunks in wire order, for
    ``transport.writelines``. A plain bytearray ``out`` behaves as before (copies).
    """

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[tuple[int, BytesLike | FileRegion]] = []  # (position in self, bytes-like)

    def add_chunk(self, data: BytesLike | FileRegion) -> None:
        self.chunks.append((len(self), data))

    def total_length(self) -> int:
        return len(self) + sum(_nbytes(d) for _, d in self.chunks)

    def pieces(self) -> list[BytesLike | FileRegion]:
        if not self.chunks:
            return [self]
        view = memoryview(self)
        out: list[BytesLike | FileRegion] = []
        prev = 0
        for pos, data in self.chunks:
            if pos > prev:
                out.append(view[prev:pos])
            out.append(data)
            prev = pos
        if prev < len(self):
            out.append(view[prev:])
        return out


def _put_records(out: bytearray, b: BytesLike | FileRegion, n: int) -> None:
    if isinstance(b, FileRegion):
        if type(out) is ScatterBuffer:
            out.add_chunk(b)  # sent with sendfile (server/connection.py)
        else:
            out += b.read_all()
            b.close()
    elif n >= ZERO_COPY_MIN_BYTES and type(out) is ScatterBuffer:
        out.add_chunk(b)
    else:
        out += b


def write_records(out: bytearray, b: BytesLike | None) -> None:
    """Non-nullable records: None is written as an empty record set."""
    if b is None:
        out += _pack_i32(0)
        return
    n = _nbytes(b)
    out += _pack_i32(n)
    _put_records(out, b, n)


def write_nullable_records(out: bytearray, b: BytesLike | None) -> None:
    if b is None:
        out += _NULL32
        return
    n = _nbytes(b)
    out += _pack_i32(n)
    _put_records(out, b, n)


def write_compact_records(out: bytearray, b: BytesLike | None) -> None:
    """Non-nullable records: None is written as an empty record set."""
    if b is None:
        out.append(1)
        return
    n = _nbytes(b)
    write_uvarint(out, n + 1)
    _put_records(out, b, n)


def write_compact_nullable_records(out: bytearray, b: BytesLike | None) -> None:
    if b is None:
        out.append(0)
        return
    n = _nbytes(b)
    write_uvarint(out, n + 1)
    _put_records(out, b, n)


# ----------------------------------------------------------- arrays of primitives


def read_fixed_array(buf: memoryview, pos: int, n: int, code: str, width: int
                     ) -> tuple[list[Any], int]:
    """``n`` big-endian values of struct format ``code`` (``width`` bytes each)."""
    if n == 0:
        return [], pos
    return list(_struct.unpack_from(f">{n}{code}", buf, pos)), pos + n * width


def write_fixed_array(out: bytearray, values: list[Any], code: str) -> None:
    if values:
        out += _struct.pack(f">{len(values)}{code}", *values)


def read_uuid_array(buf: memoryview, pos: int, n: int) -> tuple[list[_uuid.UUID], int]:
    end = pos + 16 * n
    if end > len(buf):
        raise _too_long(16 * n, pos, buf)
    raw = bytes(buf[pos:end])
    return [uuid_from_bytes(raw[i : i + 16]) for i in range(0, 16 * n, 16)], end


def write_uuid_array(out: bytearray, values: list[_uuid.UUID]) -> None:
    for u in values:
        out += u.bytes


def read_string_array(buf: memoryview, pos: int, n: int) -> tuple[list[str], int]:
    res: list[str] = []
    for _ in range(n):
        s, pos = read_string(buf, pos)
        res.append(s)
    return res, pos


def read_compact_string_array(buf: memoryview, pos: int, n: int) -> tuple[list[str], int]:
    res: list[str] = []
    for _ in range(n):
        s, pos = read_compact_string(buf, pos)
        res.append(s)
    return res, pos


def write_string_array(out: bytearray, values: list[str]) -> None:
    for s in values:
        write_string(out, s)


def write_compact_string_array(out: bytearray, values: list[str]) -> None:
    for s in values:
        write_compact_string(out, s)


def read_bytes_array(buf: memoryview, pos: int, n: int) -> tuple[list[bytes], int]:
    res: list[bytes] = []
    for _ in range(n):
        s, pos = read_bytes(buf, pos)
        res.append(s)
    return res, pos


def read_compact_bytes_array(buf: memoryview, pos: int, n: int) -> tuple[list[bytes], int]:
    res: list[bytes] = []
    for _ in range(n):
        s, pos = read_compact_bytes(buf, pos)
        res.append(s)
    return res, pos


def write_bytes_array(out: bytearray, values: list[bytes]) -> None:
    for b in values:
        write_bytes(out, b)


def write_compact_bytes_array(out: bytearray, values: list[bytes]) -> None:
    for b in values:
        write_compact_bytes(out, b)


# ----------------------------------------------------------------- tagged fields


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """Skip a tagged-field section (count, then tag/size/data triples)."""
    n, pos = read_uvarint(buf, pos)
    for _ in range(n):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise DecodeError("tagged field overruns the buffer")
    return pos


def tagged_field_end(buf: memoryview, pos: int, size: int) -> int:
    end = pos + size
    if end > len(buf):
        raise DecodeError("tagged field overruns the buffer")
    return end


def null_error(what: str) -> DecodeError:
    return DecodeError(f"non-nullable field {what} is null")


# ------------------------------------------------------------------ base classes


# Exceptions a reader can raise on malformed input (DecodeError is a ValueError).
_DECODE_ERRORS = (IndexError, _struct.error, ValueError, TypeError, OverflowError, MemoryError)


def _bad_version(cls: type[ProtocolStruct], version: object) -> DecodeError:
    lo, hi = cls.VALID_VERSIONS
    return DecodeError(f"{cls.__name__}: unsupported version {version!r} (supported {lo}-{hi})")


def _decode_error(cls: type[ProtocolStruct], version: object, e: Exception) -> DecodeError:
    if isinstance(e, DecodeError):
        return DecodeError(f"malformed {cls.__name__} v{version}: {e}")
    return DecodeError(f"malformed {cls.__name__} v{version}: {type(e).__name__}: {e}")


def _short_repr(v: Any) -> str:
    if type(v) is memoryview:
        return f"<{v.nbytes} bytes>"
    return repr(v)


class ProtocolStruct:
    """Base of every generated message and struct class.

    Subclasses provide ``__slots__``, ``__init__``, ``__eq__`` and the per-version
    reader/writer tables ``_READERS``/``_WRITERS`` (version -> function).
    """

    __slots__: ClassVar[tuple[str, ...]] = ()
    NAME: ClassVar[str] = ""
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, -1)
    FLEXIBLE_MIN: ClassVar[int | None] = None
    _READERS: ClassVar[dict[int, Callable[[memoryview, int], tuple[Any, int]]]] = {}
    _WRITERS: ClassVar[dict[int, Callable[[Any, bytearray], None]]] = {}

    def encode(self, version: int) -> bytes:
        """The encoding of this object at ``version`` (raises ValueError if unsupported)."""
        out = bytearray()
        self.write(out, version)
        return bytes(out)

    def write(self, out: bytearray, version: int) -> None:
        """Append the encoding at ``version`` to ``out``.

        On error ``out`` may hold a partial encoding.
        """
        w = self._WRITERS.get(version)
        if w is None:
            lo, hi = self.VALID_VERSIONS
            raise ValueError(
                f"{type(self).__name__}: unsupported version {version!r} (supported {lo}-{hi})"
            )
        try:
            w(self, out)
        except (_struct.error, TypeError, AttributeError, OverflowError) as e:
            raise ValueError(f"cannot encode {type(self).__name__} v{version}: {e}") from e

    @classmethod
    def decode(cls, buf: BytesLike, version: int) -> Any:
        """Decode one object from the start of ``buf``; trailing bytes are ignored."""
        r = cls._READERS.get(version)
        if r is None:
            raise _bad_version(cls, version)
        if type(buf) is not memoryview:
            buf = memoryview(buf)
        elif buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        try:
            return r(buf, 0)[0]
        except _DECODE_ERRORS as e:
            raise _decode_error(cls, version, e) from e

    @classmethod
    def read(cls, buf: BytesLike, pos: int, version: int) -> tuple[Any, int]:
        """Decode one object at ``buf[pos:]``; returns ``(obj, new_pos)``."""
        r = cls._READERS.get(version)
        if r is None:
            raise _bad_version(cls, version)
        if type(buf) is not memoryview:
            buf = memoryview(buf)
        elif buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        if pos < 0:
            raise DecodeError(f"negative offset {pos}")
        try:
            return r(buf, pos)
        except _DECODE_ERRORS as e:
            raise _decode_error(cls, version, e) from e

    def __repr__(self) -> str:
        fields = ", ".join(f"{a}={_short_repr(getattr(self, a))}" for a in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict/list view (for logging, debugging and tests)."""
        return {a: _plain(getattr(self, a)) for a in self.__slots__}


def _plain(v: Any) -> Any:
    if isinstance(v, ProtocolStruct):
        return v.to_dict()
    if type(v) is list:
        return [_plain(x) for x in v]
    if type(v) is memoryview:
        return bytes(v)
    return v


def version_table(*runs: tuple[int, int, Any]) -> dict[int, Any]:
    """Expand ``(first, last, fn)`` runs into the ``{version: fn}`` dispatch dict."""
    table: dict[int, Any] = {}
    for lo, hi, fn in runs:
        for v in range(lo, hi + 1):
            table[v] = fn
    return table
