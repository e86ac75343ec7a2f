"""The shape of a decoded response: what a client reads, without the values that may differ.

``shape(response)`` walks a generated protocol object (decoded from the wire, so a nullable field
the broker sent as null is ``None`` and an empty list is ``[]``) and returns ``{path: class}`` for
every field: ``null`` / ``[]`` / ``[+]`` for lists, ``null`` / ``""`` / ``str`` for strings,
``null`` / ``empty`` / ``bytes`` for record sets, ``zero`` / ``uuid`` for UUIDs, the value for
booleans and error codes, and for other integers the value when it is a negative sentinel
(-1 "unknown", -2 ...) and ``0`` / ``+`` otherwise.

Values that legitimately differ between two brokers (node ids, hosts, ports, cluster ids,
timestamps, throttle times, member ids' contents) are left out here, by field name, so no test
needs a special case for them. Elements of a list of structs are keyed by their name or
partition index when they have one (brokers may order them differently); elements without one are matched by their own shape,
so their order does not matter either.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

from snakka.protocol.primitives import ProtocolStruct

# Fields whose values differ between any two brokers; their presence still counts.
IGNORED_VALUES = frozenset({
    "throttle_time_ms", "node_id", "host", "port", "cluster_id", "controller_id", "leader_id",
    "coordinator_id", "broker_id", "broker_epoch", "session_id", "producer_id",
    "log_dir", "total_bytes", "usable_bytes", "partition_size", "size",
    "log_append_time_ms", "timestamp", "max_timestamp", "first_timestamp",
    "current_state_timestamp", "generation_id", "member_epoch", "group_epoch",
    "assignment_epoch", "heartbeat_interval_ms", "session_timeout_ms", "rebalance_timeout_ms",
    "cluster_authorized_operations", "topic_authorized_operations",
    "authorized_operations", "finalized_features_epoch", "max_version", "min_version",
    "max_version_level", "min_version_level", "zk_migration_ready",
})
# List elements are keyed by the first of these fields they have (never by an id).
KEY_FIELDS = ("name", "topic_name", "topic", "partition_index", "partition", "index", "api_key",
              "group_id", "resource_name", "config_name", "key", "coordinator_key")


def _scalar(name: str, v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        if name == "error_code" or name.endswith("_error_code"):
            return str(v)
        if v < 0:
            return str(v)
        return "0" if v == 0 else "+"
    if isinstance(v, str):
        return '""' if v == "" else "str"
    if isinstance(v, uuid.UUID):
        return "zero" if v.int == 0 else "uuid"
    if isinstance(v, bytes | bytearray | memoryview):
        return "empty" if len(v) == 0 else "bytes"
    if isinstance(v, float):
        return "0" if v == 0 else "+"
    return type(v).__name__


def _key(e: ProtocolStruct) -> str | None:
    for k in KEY_FIELDS:
        v = getattr(e, k, None)
        if isinstance(v, str | int) and not isinstance(v, bool) and k not in IGNORED_VALUES:
            return repr(v) if isinstance(v, str) else str(v)
    return None


def shape(obj, path: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    _walk(obj, path, out)
    return out


def _walk(obj, path: str, out: dict[str, str]) -> None:
    for name in obj.__slots__:
        try:
            v = getattr(obj, name)
        except AttributeError:  # not a field of the version the object was decoded at
            continue
        p = f"{path}.{name}" if path else name
        if isinstance(v, ProtocolStruct):
            out[p] = "{}"
            _walk(v, p, out)
        elif isinstance(v, list):
            out[p] = "[+]" if v else "[]"
            structs = [e for e in v if isinstance(e, ProtocolStruct)]
            keyed = [(k, e) for e in structs if (k := _key(e)) is not None]
            # Elements without a name are matched by their own shape, in sorted order, so
            # the order a broker lists them in does not matter.
            unkeyed = sorted(tuple(sorted(shape(e).items())) for e in structs if _key(e) is None)
            for k, e in keyed:
                _walk(e, f"{p}[{k}]", out)
            for n, sub in enumerate(unkeyed):
                out.update({f"{p}[~{n}].{q}": c for q, c in sub})
        elif name in IGNORED_VALUES:
            out[p] = "null" if v is None else "set"
        else:
            out[p] = _scalar(name, v)


def _glob(pattern: str) -> re.Pattern:
    """An exception path where only ``*`` is a wildcard (brackets are literal list keys)."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def diff(kafka: dict[str, str], snakka: dict[str, str],
         exceptions: Iterable[str] = ()) -> tuple[list[str], set[str]]:
    """Lines for every path whose class differs (or that one side lacks), minus those matching
    an exception glob; and the set of exception globs that matched something."""
    lines, used = [], set()
    for p in sorted(kafka.keys() | snakka.keys()):
        k, s = kafka.get(p, "<absent>"), snakka.get(p, "<absent>")
        if k == s:
            continue
        hit = [e for e in exceptions if _glob(e).fullmatch(p)]
        if hit:
            used.update(hit)
            continue
        lines.append(f"{p}: kafka={k} snakka={s}")
    return lines, used
