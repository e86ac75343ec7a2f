"""Error responses for failed requests (Kafka's ``AbstractRequest.getErrorResponse``).

What this module owns
    Turning "the handler for this request raised" into the response Kafka would send: every
    error-code field of the response set (``error_code``, and the like of ShareFetch's
    ``acknowledge_error_code``, so failed acknowledgements never read as successful), per
    topic / partition / group / resource as the
    request listed them, so the client learns what failed and retries or reports it, instead of
    seeing its connection dropped. The connection (``server/connection.py``) calls
    :func:`error_response`; nothing else here knows about sockets.

How the shape is derived
    Kafka hand-writes ``getErrorResponse`` for every request type. We derive it from the
    generated classes instead: each generated class lists its attributes (``__slots__``) and
    which of them hold structs or arrays of structs (``STRUCT_FIELDS``, emitted by
    ``tools/gen_protocol.py``). :func:`mirror` walks the response class and fills it from the
    request: a response array of structs is built with one element per element of the request
    array of the same name (or the only unpaired struct array when names differ, as in Produce's
    ``topic_data`` -> ``responses``), scalars are copied from request fields of the same name or
    a known alias (``partition_index`` <- ``partition`` / ``index``), an array of plain ids in the
    request (OffsetFetch v0-7's ``partition_indexes``) becomes one struct per id, and every
    ``error_code`` / ``error_message`` is set. A handler module may define
    ``error_response(request, version, code, message)`` where this cannot be derived; the
    connection prefers it.

Mapping exceptions to codes (:func:`error_code_for`)
    * :class:`~snakka.protocol.errors.KafkaError` and exceptions carrying ``error_code``: their
      code.
    * ``OSError`` with a storage errno (``STORAGE_ERRNOS``: ENOSPC, EIO, EMFILE, ENFILE, EROFS,
      EDQUOT, ...): the disk or the process's file table failed us: ``KAFKA_STORAGE_ERROR`` (56), retriable, as Kafka answers for a
      failed log directory. For coordinator APIs (groups, offsets, share-group state) Kafka's
      ``CoordinatorOperationExceptionHelper`` turns a storage error into ``NOT_COORDINATOR``
      (16): the client looks the coordinator up again and retries.
    * anything else: ``UNKNOWN_SERVER_ERROR`` (-1), with the traceback in the debug log.
"""

from __future__ import annotations

import errno
import importlib
from typing import Any

from snakka.protocol.apis import api_spec
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.primitives import ProtocolStruct

__all__ = ["COORDINATOR_APIS", "STORAGE_ERRNOS", "error_code_for", "error_response", "mirror"]

# APIs answered by a coordinator (group coordinator, share coordinator, transaction
# coordinator): a storage failure there means "this coordinator cannot write", which Kafka
# reports as NOT_COORDINATOR so that clients find the coordinator again and retry.
COORDINATOR_APIS = frozenset({
    8,   # OffsetCommit
    9,   # OffsetFetch
    11,  # JoinGroup
    12,  # Heartbeat
    13,  # LeaveGroup
    14,  # SyncGroup
    15,  # DescribeGroups
    16,  # ListGroups
    22,  # InitProducerId (transactional)
    24,  # AddPartitionsToTxn
    25,  # AddOffsetsToTxn
    26,  # EndTxn
    28,  # TxnOffsetCommit
    42,  # DeleteGroups
    47,  # OffsetDelete
    68,  # ConsumerGroupHeartbeat
    69,  # ConsumerGroupDescribe
    76,  # ShareGroupHeartbeat
    77,  # ShareGroupDescribe
    90,  # DescribeShareGroupOffsets
    91,  # AlterShareGroupOffsets
    92,  # DeleteShareGroupOffsets
})

# OSError numbers that mean "the log directory failed us" (full, read-only, broken, out of
# descriptors, files gone or unreadable): KAFKA_STORAGE_ERROR. Other OSErrors (a socket error, a
# timeout) are not storage failures and answer UNKNOWN_SERVER_ERROR.
STORAGE_ERRNOS = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EMFILE, errno.ENFILE, errno.EFBIG,
    errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.ESTALE,
    errno.ENOMEM,
})

# Scalar fields whose name differs between a request and its response.
_ALIASES: dict[str, tuple[str, ...]] = {
    "partition_index": ("partition", "index", "partition_id"),
    "partition": ("partition_index", "index"),
    "index": ("partition_index", "partition"),
    "name": ("topic", "topic_name", "resource_name"),
    "topic": ("name", "topic_name"),
    "topic_name": ("name", "topic"),
    "resource_name": ("name",),
    "group_id": ("group",),
}
# ShareFetch's acknowledge_error_code too: a failed request must not look like successful acks.
_MESSAGE_FIELDS = frozenset({"error_message", "acknowledge_error_message"})
_ID_FIELDS = ("partition_index", "index", "partition", "name", "group_id", "topic", "key",
              "transactional_id")


def error_code_for(exc: BaseException, api_key: int) -> ErrorCode:
    """The Kafka error code a failed request gets for ``exc`` (module doc)."""
    if isinstance(exc, KafkaError):
        return exc.code
    code = getattr(exc, "error_code", None)
    if isinstance(code, int) and code:
        mapped = ErrorCode.from_code(code)
    elif isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
        mapped = ErrorCode.KAFKA_STORAGE_ERROR
    else:
        return ErrorCode.UNKNOWN_SERVER_ERROR
    if mapped == ErrorCode.KAFKA_STORAGE_ERROR and api_key in COORDINATOR_APIS:
        return ErrorCode.NOT_COORDINATOR
    return mapped


def _resolve(cls: type[ProtocolStruct], name: str) -> type[ProtocolStruct]:
    found: type[ProtocolStruct] = getattr(importlib.import_module(cls.__module__), name)
    return found


def _lookup(src: Any, attr: str) -> tuple[bool, Any]:
    if src is None:
        return False, None
    names = (attr, *_ALIASES.get(attr, ()))
    slots = getattr(type(src), "__slots__", ())
    for n in names:
        if n in slots:
            return True, getattr(src, n)
    return False, None


def _struct_lists(obj: Any) -> dict[str, list[Any]]:
    """Request attributes that hold arrays of structs (None lists skipped)."""
    out: dict[str, list[Any]] = {}
    for attr in getattr(type(obj), "STRUCT_FIELDS", {}):
        v = getattr(obj, attr, None)
        if isinstance(v, list):
            out[attr] = v
    return out


def _id_lists(obj: Any) -> dict[str, list[Any]]:
    """Request attributes that are arrays of plain ids (int or str), e.g. partition_indexes."""
    out: dict[str, list[Any]] = {}
    if obj is None:
        return out
    structs = getattr(type(obj), "STRUCT_FIELDS", {})
    for attr in getattr(type(obj), "__slots__", ()):
        if attr in structs:
            continue
        v = getattr(obj, attr, None)
        if isinstance(v, list) and v and all(isinstance(x, (int, str)) and not isinstance(x, bool)
                                             for x in v):
            out[attr] = v
    return out


def mirror(resp_cls: type[ProtocolStruct], src: Any, code: int, message: str | None) -> Any:
    """An instance of ``resp_cls`` shaped like ``src`` (a request struct, a plain id, or None)
    with every error field set (module doc)."""
    obj = resp_cls()
    structs: dict[str, str] = getattr(resp_cls, "STRUCT_FIELDS", {})
    src_structs = _struct_lists(src) if src is not None and not isinstance(src, (int, str)) else {}
    src_ids = (_id_lists(src) if src is not None and not isinstance(src, (int, str)) else {})
    used: set[str] = set()
    id_set = False
    # Pair response struct arrays with request arrays: same name first, then by elimination.
    pairs: dict[str, list[Any] | None] = {}
    for attr in structs:
        if attr in src_structs:
            pairs[attr] = src_structs[attr]
            used.add(attr)
    unpaired_resp = [a for a in structs
                     if a not in pairs and isinstance(getattr(obj, a), list)
                     and _carries_errors(_resolve(resp_cls, structs[a]))]
    unpaired_req = [a for a in src_structs if a not in used and src_structs[a]]
    if len(unpaired_resp) == 1 and unpaired_req:
        # The request's first remaining array is the one it asks about (Fetch's ``topics``
        # before ``forgotten_topics_data``).
        pairs[unpaired_resp[0]] = src_structs[unpaired_req[0]]
    elif len(unpaired_resp) == 1 and not unpaired_req and len(src_ids) == 1:
        pairs[unpaired_resp[0]] = next(iter(src_ids.values()))
    for attr in resp_cls.__slots__:
        if attr.endswith("error_code"):  # error_code, acknowledge_error_code, ...: all of them
            setattr(obj, attr, int(code))
            continue
        if attr in _MESSAGE_FIELDS:
            if message is not None:
                setattr(obj, attr, message)
            continue
        if attr in structs:
            elem_cls = _resolve(resp_cls, structs[attr])
            current = getattr(obj, attr)
            if isinstance(current, list):
                items = pairs.get(attr)
                if items is not None:
                    setattr(obj, attr, [mirror(elem_cls, it, code, message) for it in items])
            elif current is not None:  # a single nested struct (e.g. a ``Throttle``)
                setattr(obj, attr, mirror(elem_cls, None, code, message))
            continue
        if attr == "records" and getattr(obj, attr) is None:
            # Kafka answers empty records (MemoryRecords.EMPTY), never null: librdkafka reads
            # a null as MessageSetSize -1 and fails the whole response ("Protocol parse
            # failure").
            setattr(obj, attr, b"")
            continue
        if isinstance(src, (int, str)):  # an element made from a plain id: its first id field
            if (not id_set and attr in _ID_FIELDS
                    and isinstance(getattr(obj, attr), type(src))):
                setattr(obj, attr, src)
                id_set = True
            continue
        found, value = _lookup(src, attr)
        if found and value is not None and not isinstance(value, list) and _same_kind(
                getattr(obj, attr), value):
            setattr(obj, attr, value)
    return obj


_CARRIES: dict[type[ProtocolStruct], bool] = {}


def _carries_errors(cls: type[ProtocolStruct]) -> bool:
    """Whether ``cls`` or a struct below it has an ``error_code`` (lists such as Produce's
    ``node_endpoints`` do not, and are not paired with request arrays)."""
    known = _CARRIES.get(cls)
    if known is None:
        _CARRIES[cls] = False  # recursion guard
        known = "error_code" in cls.__slots__ or any(
            _carries_errors(_resolve(cls, name))
            for name in getattr(cls, "STRUCT_FIELDS", {}).values())
        _CARRIES[cls] = known
    return known


def _same_kind(default: Any, value: Any) -> bool:
    if default is None:
        return isinstance(value, (int, str, bytes))
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    return type(default) is type(value)


def error_response(api_key: int, version: int, request: Any, code: int,
                   message: str | None = None, handler_module: Any = None) -> Any:
    """The response to ``request`` (API ``api_key`` at ``version``) that reports ``code`` for
    everything it asked about. ``handler_module.error_response`` wins when defined."""
    override = getattr(handler_module, "error_response", None)
    if override is not None:
        return override(request, version, code, message)
    spec = api_spec(api_key)
    if spec is None:
        raise ValueError(f"unknown API key {api_key}")
    return mirror(spec.response_class, request, code, message)
