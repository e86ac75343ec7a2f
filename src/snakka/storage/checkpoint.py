"""Small files Kafka keeps in a log dir, in Kafka's formats.

* offset checkpoints (``recovery-point-offset-checkpoint``,
  ``log-start-offset-checkpoint``, ``replication-offset-checkpoint``,
  ``cleaner-offset-checkpoint``)::

      0                      <- version
      2                      <- number of entries
      my-topic 0 1234        <- topic partition offset
      other 3 0

  Kafka's reader takes an empty file (as its cleaner creates ``cleaner-offset-checkpoint``)
  for no entries.

* ``leader-epoch-checkpoint`` in each partition dir: the same layout with ``<epoch>
  <start offset>`` lines (Kafka's LeaderEpochCheckpointFile).

* ``partition.metadata`` in each partition dir (no newline after the last line, as
  Kafka's PartitionMetadata.encode)::

      version: 0
      topic_id: <topic id, base64url without padding, as Kafka's Uuid.toString()>

* ``meta.properties`` in the log dir (KRaft, version 1): ``node.id``,
  ``directory.id``, ``version``, ``cluster.id`` as Java properties.

Writes are atomic (temp file, fsync, rename, fsync of the directory), so a crash leaves
either the old or the new file. The exception is a file written into a partition directory
this process has just made (``new=True``, a topic's creation): there is no old file to keep,
so it is written in place (one create, no temp file, rename or read-back); a crash may leave
it empty, which its reader takes as missing, and start-up rewrites it (the metadata log, not
these files, is the authority on a partition's existence and topic id). Reading a damaged
checkpoint logs a warning and yields nothing, which makes the broker fall back to full
recovery: slower, never wrong.

Threading: plain functions; callers serialise writes of the same file.
"""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid

log = logging.getLogger("snakka.storage")

CHECKPOINT_VERSION = 0


def _atomic_write(path: str, data: bytes, *, sync: bool = True) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if not sync:
        return
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_new_file(path: str, data: bytes) -> None:
    """Create ``path`` (which must not exist: O_EXCL) holding ``data``, without fsync: for a
    directory made moments ago (see the module docstring)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def fsync_file(path: str) -> None:
    """fsync a file written earlier without it; a missing file is nothing to do."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_offset_checkpoint(path: str, offsets: dict[tuple[str, int], int], *,
                            sync: bool = True) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    for (topic, partition), offset in sorted(offsets.items()):
        lines.append(f"{topic} {partition} {offset}")
    _atomic_write(path, ("\n".join(lines) + "\n").encode(), sync=sync)


def read_offset_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """Entries of an offset checkpoint; {} if missing, empty (as Kafka creates
    ``cleaner-offset-checkpoint``) or malformed (logged)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read checkpoint %s: %s", path, exc)
        return {}
    if not lines:
        return {}
    try:
        version = int(lines[0])
        if version != CHECKPOINT_VERSION:
            raise ValueError(f"unsupported version {version}")
        count = int(lines[1])
        out: dict[tuple[str, int], int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split(" ")
            out[(topic, int(partition))] = int(offset)
        if len(out) != count:
            raise ValueError(f"expected {count} entries, found {len(out)}")
        return out
    except (ValueError, IndexError) as exc:
        log.warning("ignoring malformed checkpoint %s: %s", path, exc)
        return {}


LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"


def leader_epoch_checkpoint_bytes(entries: list[tuple[int, int]]) -> bytes:
    """``leader-epoch-checkpoint``'s content: (epoch, start offset) entries, oldest first."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{epoch} {start}" for epoch, start in entries]
    return ("\n".join(lines) + "\n").encode()


def write_leader_epoch_checkpoint(partition_dir: str, entries: list[tuple[int, int]], *,
                                  sync: bool = True, new: bool = False) -> bool:
    """Write ``leader-epoch-checkpoint`` unless it already holds ``entries``; returns whether
    it wrote. ``new``: the directory was just made and holds no such file (written in place,
    without fsync; module docstring)."""
    path = os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT_FILE)
    data = leader_epoch_checkpoint_bytes(entries)
    if new:
        write_new_file(path, data)
        return True
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    except OSError:
        pass
    _atomic_write(path, data, sync=sync)
    return True


def read_leader_epoch_checkpoint(partition_dir: str) -> list[tuple[int, int]] | None:
    """The (epoch, start offset) entries of a partition's ``leader-epoch-checkpoint``; None if
    it is missing or malformed (logged)."""
    path = os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None
    try:
        if int(lines[0]) != CHECKPOINT_VERSION:
            raise ValueError(f"unsupported version {lines[0]}")
        count = int(lines[1])
        out = []
        for line in lines[2 : 2 + count]:
            epoch, start = line.split(" ")
            out.append((int(epoch), int(start)))
        if len(out) != count:
            raise ValueError(f"expected {count} entries, found {len(out)}")
        return out
    except (ValueError, IndexError) as exc:
        log.warning("ignoring malformed %s: %s", path, exc)
        return None


# ---------------------------------------------------------------- topic ids


def topic_id_to_str(topic_id: uuid.UUID | bytes | str) -> str:
    """Kafka's ``Uuid.toString()``: base64url of the 16 bytes, no padding."""
    if isinstance(topic_id, str):
        return topic_id
    raw = topic_id.bytes if isinstance(topic_id, uuid.UUID) else bytes(topic_id)
    if len(raw) != 16:
        raise ValueError("a topic id is 16 bytes")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return uuid.UUID(bytes=raw)


PARTITION_METADATA_FILE = "partition.metadata"


def write_partition_metadata(partition_dir: str, topic_id: uuid.UUID | bytes | str, *,
                             sync: bool = True, new: bool = False) -> None:
    """Write ``partition.metadata``. ``sync=False`` skips the two fsyncs: the broker does so
    because the metadata log, not this file, is the authority on topic ids, and start-up
    rewrites a partition.metadata that a crash left missing or empty. ``new``: the directory
    was just made and holds no such file (written in place, without fsync)."""
    text = f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}"
    path = os.path.join(partition_dir, PARTITION_METADATA_FILE)
    if new:
        write_new_file(path, text.encode())
    else:
        _atomic_write(path, text.encode(), sync=sync)


def read_partition_metadata(partition_dir: str) -> str | None:
    """The topic id string of a partition dir, or None."""
    path = os.path.join(partition_dir, PARTITION_METADATA_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            fields = dict(
                line.split(": ", 1) for line in f.read().splitlines() if ": " in line
            )
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None
    if fields.get("version") != "0":
        log.warning("unsupported %s version %r", path, fields.get("version"))
        return None
    return fields.get("topic_id")


# ---------------------------------------------------------------- meta.properties

META_PROPERTIES_FILE = "meta.properties"


def read_meta_properties(log_dir: str) -> dict[str, str] | None:
    path = os.path.join(log_dir, META_PROPERTIES_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")) or "=" not in line:
            continue
        key, value = line.split("=", 1)
        props[key.strip()] = value.strip()
    return props


def write_meta_properties(
    log_dir: str, *, cluster_id: str, node_id: int, directory_id: str | None = None
) -> dict[str, str]:
    """Write a KRaft (version 1) ``meta.properties``; returns its properties."""
    props = {
        "node.id": str(node_id),
        "directory.id": directory_id or topic_id_to_str(uuid.uuid4()),
        "version": "1",
        "cluster.id": cluster_id,
    }
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    body = "#\n#" + stamp + "\n" + "".join(f"{k}={v}\n" for k, v in props.items())
    os.makedirs(log_dir, exist_ok=True)
    _atomic_write(os.path.join(log_dir, META_PROPERTIES_FILE), body.encode())
    return props


def ensure_meta_properties(log_dir: str, *, cluster_id: str, node_id: int) -> dict[str, str]:
    """Create ``meta.properties`` if absent; if present, check it belongs to this
    cluster and node (Kafka refuses to start otherwise): ``ValueError`` on mismatch."""
    props = read_meta_properties(log_dir)
    if props is None:
        return write_meta_properties(log_dir, cluster_id=cluster_id, node_id=node_id)
    if props.get("cluster.id") != cluster_id:
        raise ValueError(
            f"log dir {log_dir} belongs to cluster {props.get('cluster.id')!r}, "
            f"not {cluster_id!r} (meta.properties)"
        )
    if props.get("node.id") != str(node_id):
        raise ValueError(
            f"log dir {log_dir} belongs to node {props.get('node.id')!r}, not {node_id} "
            "(meta.properties)"
        )
    return props
