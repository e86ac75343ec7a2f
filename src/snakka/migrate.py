"""Moving from snakka to Apache Kafka (issue 17): what ``snakka migrate`` writes and checks.

What this module owns
    * :func:`check_data_dir`: whether a stopped snakka data directory is one Kafka 4.0 can run
      on as it is: not locked by a running broker, shut down cleanly, a KRaft
      ``meta.properties``, the metadata log and the internal topics in Kafka's record formats
      (not snakka's former JSON records), every partition directory with Kafka's files. It
      returns a :class:`CheckReport`; nothing is changed.
    * :func:`kafka_server_properties`: the Kafka 4.0 ``server.properties`` that starts a
      combined broker+controller on that directory as the same node of the same cluster
      (node id and cluster id from ``meta.properties``), with the broker configs the snakka
      broker ran with carried over (snakka uses Kafka's names) and the ones Kafka does not
      know listed, commented out, with the reason.
    * :func:`mirror_maker_properties`: a MirrorMaker 2 (``connect-mirror-maker.sh``)
      properties file for the online path: snakka mirrored to a Kafka cluster with the same
      topic names (IdentityReplicationPolicy) and consumer-group offsets translated and
      written to the target.

    The command-line verbs are in :mod:`snakka.cli` (``snakka migrate ...``); the steps
    around them in docs/migrating.md.

Why detection by first byte
    snakka's former internal-topic records were JSON: a key is a JSON array (``[``), a metadata
    record's value a JSON object (``{``). Kafka's keys start with an int16 version (first byte
    0 for every version in use) and KRaft's values with a varint frame version (0 or 1), so one
    byte tells the formats apart without decoding either.

Threading: plain functions over files; no broker, no network.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from snakka.records.batch import CONTROL_MASK, RecordValidationError
from snakka.records.record import Record, batch_records, iter_batches
from snakka.storage.checkpoint import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    read_meta_properties,
    read_partition_metadata,
)
from snakka.storage.loader import snapshot_offsets
from snakka.storage.local_log import parse_partition_dir_name
from snakka.storage.manager import (
    CLEAN_SHUTDOWN_FILE,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from snakka.txn.producer_state import LEGACY_SNAPSHOT_VERSION, SNAPSHOT_VERSION

METADATA_DIR = "__cluster_metadata-0"
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state")
CONTROLLER_LISTENER_NAME = "CONTROLLER"
DEFAULT_CONTROLLER_PORT = 9093
DEFAULT_LISTENERS = "PLAINTEXT://localhost:9092"
# Kafka's own default listener.security.protocol.map, plus the controller's listener.
DEFAULT_PROTOCOL_MAP = ("CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
                        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL")
# KRaft control record type of a VotersRecord (KIP-853, a dynamic quorum's voter set).
KRAFT_VOTERS_CONTROL_TYPE = 6

# Broker configs of snakka's table that Kafka 4.0 does not know (each checked against the
# 4.0.0 jars), or whose meaning there is not snakka's: never copied into server.properties.
SNAKKA_ONLY_CONFIGS = frozenset({
    "log.flush.strict", "log.max.open.files", "metrics.port", "metrics.host",
    "queued.max.response.bytes", "queued.max.response.bytes.per.connection",
    "socket.request.arrival.timeout.ms", "group.share.assignors",
    "group.share.max.delivery.count.limit", "group.share.min.delivery.count.limit",
    "group.share.max.share.sessions",
})
# snakka's own keys, and its built-in tiered-storage plugin's (Kafka needs an RSM plugin of
# its own: docs/migrating.md).
SNAKKA_ONLY_PREFIXES = ("snakka.", "rsm.config.", "rlmm.config.")
# Written by kafka_server_properties itself (from meta.properties, the data dir, the options);
# cluster.id lives in meta.properties for Kafka.
_DERIVED = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map",
                      "log.dirs", "log.dir", "node.id", "broker.id", "cluster.id",
                      "process.roles", "controller.listener.names",
                      "controller.quorum.voters", "controller.quorum.bootstrap.servers",
                      "inter.broker.listener.name"})
# A single node: every internal topic Kafka may still have to create has one replica.
_SINGLE_NODE = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}
# Internal topic -> the broker config that must equal its partition count (coordinators hash
# group and transactional ids over it).
_PARTITION_COUNT_CONFIGS = {
    "__consumer_offsets": "offsets.topic.num.partitions",
    "__transaction_state": "transaction.state.log.num.partitions",
    "__share_group_state": "share.coordinator.state.topic.num.partitions",
}


class MigrateError(Exception):
    """The data directory cannot be used for what was asked (message for the operator)."""


# ---------------------------------------------------------------- check


@dataclass
class CheckReport:
    """What :func:`check_data_dir` found: ``errors`` block handing the dir to Kafka,
    ``warnings`` do not (Kafka copes, with a cost the message names)."""

    data_dir: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    partitions: int = 0
    internal_partitions: dict[str, int] = field(default_factory=dict)
    node_id: str | None = None
    cluster_id: str | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def is_locked(data_dir: str) -> bool:
    """Whether a process holds the dir's ``.lock`` (a snakka or Kafka broker running on it)."""
    path = os.path.join(data_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _segment_records(path: str, *, include_control: bool = False) -> Iterator[tuple[bool, Record]]:
    """(is_control, record) of every record of one ``.log`` or KRaft ``.checkpoint`` file."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m, memoryview(m) as mv:
            for h, pos in iter_batches(mv, verify_crc=False):
                control = bool(h.attributes & CONTROL_MASK)
                if control and not include_control:
                    continue
                for rec in batch_records(mv, pos, h):
                    yield control, rec


def _data_files(part_dir: str, suffixes: tuple[str, ...] = (".log",)) -> list[str]:
    return sorted(os.path.join(part_dir, n) for n in os.listdir(part_dir) if n.endswith(suffixes))


def metadata_quorum_is_dynamic(data_dir: str) -> bool:
    """Whether the metadata log holds a VotersRecord (a KIP-853 dynamic quorum, as Kafka 4.0's
    ``kafka-storage.sh format --standalone`` writes): Kafka must then be given
    ``controller.quorum.bootstrap.servers``, else ``controller.quorum.voters``."""
    mdir = os.path.join(data_dir, METADATA_DIR)
    if not os.path.isdir(mdir):
        return False
    for path in _data_files(mdir, (".checkpoint", ".log")):
        try:
            for control, rec in _segment_records(path, include_control=True):
                if control and rec.key is not None and len(rec.key) >= 4 and \
                        int.from_bytes(rec.key[2:4], "big") == KRAFT_VOTERS_CONTROL_TYPE:
                    return True
        except (RecordValidationError, OSError, ValueError):
            continue
    return False


def check_data_dir(data_dir: str) -> CheckReport:
    """Check a stopped snakka data dir against what Kafka 4.0 needs (module docstring)."""
    d = os.path.abspath(data_dir)
    report = CheckReport(d)
    err, warn = report.errors.append, report.warnings.append
    if not os.path.isdir(d):
        err(f"{d} is not a directory")
        return report
    if is_locked(d):
        err("a broker is running on it (its .lock is held): stop snakka first")
    meta = read_meta_properties(d)
    if meta is None:
        err("no meta.properties: not a snakka or Kafka data directory")
    else:
        report.node_id, report.cluster_id = meta.get("node.id"), meta.get("cluster.id")
        if meta.get("version") != "1" or not report.node_id or not report.cluster_id:
            err("meta.properties is not KRaft's version 1 with node.id and cluster.id")
        if not meta.get("directory.id"):
            warn("meta.properties has no directory.id (Kafka 4.0 adds one at start-up)")
    if not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)):
        warn(f"no {CLEAN_SHUTDOWN_FILE}: the broker was not shut down cleanly; Kafka will "
             "recover every log at start-up (start snakka and stop it cleanly to avoid it)")
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                 REPLICATION_OFFSET_CHECKPOINT):
        if not os.path.exists(os.path.join(d, name)):
            warn(f"no {name} (written at a clean shutdown by this snakka version)")
    _check_metadata_log(d, report)
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if name == METADATA_DIR or not os.path.isdir(path):
            continue
        if name.endswith(("-delete", "-future", "-stray")):
            continue  # Kafka's own kinds of directory (a deletion in progress, ...)
        try:
            topic, _partition = parse_partition_dir_name(name)
        except ValueError:
            err(f"{name}: not a <topic>-<partition> directory (Kafka refuses a log dir "
                "holding one: move it away)")
            continue
        report.partitions += 1
        _check_partition(path, name, report)
        if topic in INTERNAL_TOPICS:
            report.internal_partitions[topic] = report.internal_partitions.get(topic, 0) + 1
            _check_internal_records(path, name, report)
    return report


def _check_metadata_log(d: str, report: CheckReport) -> None:
    mdir = os.path.join(d, METADATA_DIR)
    if not os.path.isdir(mdir):
        report.errors.append(f"no {METADATA_DIR}: the cluster metadata log is missing")
        return
    json_records = 0
    for path in _data_files(mdir, (".log", ".checkpoint")):
        try:
            for _control, rec in _segment_records(path):
                if rec.value and rec.value[:1] == b"{":
                    json_records += 1
        except (RecordValidationError, OSError) as exc:
            report.errors.append(f"{METADATA_DIR}: {os.path.basename(path)} unreadable: {exc}")
    if json_records:
        report.errors.append(
            f"{METADATA_DIR}: {json_records} metadata records are snakka's JSON, not KRaft "
            "records: start this snakka version on the directory once and stop it, which "
            "rewrites them")


def _check_partition(path: str, name: str, report: CheckReport) -> None:
    if read_partition_metadata(path) is None:
        report.errors.append(f"{name}: no readable partition.metadata (version 0, topic_id)")
    if not os.path.exists(os.path.join(path, LEADER_EPOCH_CHECKPOINT_FILE)):
        report.warnings.append(f"{name}: no {LEADER_EPOCH_CHECKPOINT_FILE} (Kafka starts the "
                               "partition's epoch cache empty)")
    for off in snapshot_offsets(path):
        snap = os.path.join(path, f"{off:020d}.snapshot")
        with open(snap, "rb") as f:
            head = f.read(2)
        version = int.from_bytes(head, "big", signed=True) if len(head) == 2 else None
        if version == LEGACY_SNAPSHOT_VERSION:
            report.warnings.append(
                f"{name}: {os.path.basename(snap)} is snakka's former producer snapshot "
                "format: Kafka deletes it and rebuilds producer state from the log (start "
                "and stop this snakka version once to rewrite it)")
        elif version != SNAPSHOT_VERSION:
            report.warnings.append(f"{name}: {os.path.basename(snap)} is not a producer "
                                   "snapshot Kafka reads (it will be deleted)")


def _check_internal_records(path: str, name: str, report: CheckReport) -> None:
    json_keys = 0
    for seg in _data_files(path):
        try:
            for _control, rec in _segment_records(seg):
                if rec.key and rec.key[:1] == b"[":
                    json_keys += 1
        except (RecordValidationError, OSError) as exc:
            report.errors.append(f"{name}: {os.path.basename(seg)} unreadable: {exc}")
    if json_keys:
        report.errors.append(
            f"{name}: {json_keys} records are snakka's JSON records, not Kafka's: start this "
            "snakka version on the directory once and stop it, which restates them")


def next_steps(report: CheckReport, out: str = "server.properties") -> list[str]:
    """What the operator does after a check (docs/migrating.md has the whole path)."""
    d = report.data_dir
    if not report.ok:
        return ["Fix the errors above, then run `snakka migrate check` again."]
    return [
        f"snakka migrate kafka-config --data-dir {d} --out {out}"
        "   (add --log-dirs NEW_PATH if you copy the directory)",
        f"copy {d} to the Kafka host (rsync -a), keeping it stopped meanwhile",
        f"bin/kafka-server-start.sh {out}",
        "verify: kafka-topics.sh --describe, kafka-consumer-groups.sh --describe --all-groups, "
        "kafka-get-offsets.sh: the same topics, end offsets and committed offsets as before",
    ]


# ---------------------------------------------------------------- kafka-config


@dataclass
class KafkaConfig:
    """The Kafka ``server.properties`` :func:`kafka_server_properties` made."""

    properties: dict[str, str]
    dropped: dict[str, str]  # snakka-only configs not carried over, with their values
    notes: list[str]

    def render(self) -> str:
        lines = [
            "# Apache Kafka 4.0 server.properties written by `snakka migrate kafka-config`:",
            "# a combined broker+controller on the snakka data directory, as the same node of",
            "# the same cluster (node.id here, cluster.id in the directory's meta.properties).",
        ]
        lines += [f"# {n}" for n in self.notes]
        lines += [f"{k}={v}" for k, v in self.properties.items()]
        if self.dropped:
            lines.append("")
            lines.append("# snakka-only configs, not carried over (Kafka does not know them):")
            lines += [f"# {k}={v}" for k, v in sorted(self.dropped.items())]
        return "\n".join(lines) + "\n"


_LISTENER = re.compile(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:/]*):(\d+)$")


def _parse_listeners(text: str) -> list[tuple[str, str, int]]:
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        m = _LISTENER.match(item)
        if m is None:
            raise MigrateError(f"listener {item!r} is not NAME://HOST:PORT")
        out.append((m.group(1).upper(), m.group(2), int(m.group(3))))
    if not out:
        raise MigrateError("no listener given")
    return out


def kafka_server_properties(
    data_dir: str,
    snakka_config: Mapping[str, str] | None = None,
    *,
    listeners: str | None = None,
    controller_listener: str | None = None,
    log_dirs: str | None = None,
    quorum: str = "auto",
) -> KafkaConfig:
    """Kafka 4.0's ``server.properties`` for the snakka data dir ``data_dir`` (module doc).

    ``snakka_config``: the broker configs the snakka broker ran with (its server.properties
    and overrides; Kafka's names). ``listeners``: the client listeners (default snakka's).
    ``controller_listener``: ``CONTROLLER://host:port`` (default the first listener's host,
    port 9093). ``log_dirs``: where the directory will be on the Kafka host (default where it
    is). ``quorum``: ``static`` (controller.quorum.voters), ``dynamic``
    (controller.quorum.bootstrap.servers) or ``auto``: dynamic if the metadata log holds a
    voter set."""
    d = os.path.abspath(data_dir)
    meta = read_meta_properties(d)
    if meta is None or not meta.get("node.id"):
        raise MigrateError(f"{d} has no meta.properties with a node.id: not a data directory")
    node_id = meta["node.id"]
    cfg = dict(snakka_config or {})
    client = _parse_listeners(listeners or cfg.get("listeners") or DEFAULT_LISTENERS)
    if any(name == CONTROLLER_LISTENER_NAME for name, _h, _p in client):
        raise MigrateError(f"listener name {CONTROLLER_LISTENER_NAME} is the controller's")
    c_host = client[0][1] or "localhost"
    if c_host in ("0.0.0.0", "[::]"):
        c_host = "localhost"
    if controller_listener:
        (c_name, c_host, c_port), *_rest = _parse_listeners(controller_listener)
        if c_name != CONTROLLER_LISTENER_NAME or _rest:
            raise MigrateError(f"--controller-listener must be {CONTROLLER_LISTENER_NAME}://"
                               "HOST:PORT")
    else:
        c_port = DEFAULT_CONTROLLER_PORT
    if any(p == c_port and h == c_host for _n, h, p in client):
        raise MigrateError(f"the controller listener's port {c_port} is a client listener's")
    if quorum not in ("auto", "static", "dynamic"):
        raise MigrateError(f"quorum must be auto, static or dynamic, not {quorum!r}")
    dynamic = metadata_quorum_is_dynamic(d) if quorum == "auto" else quorum == "dynamic"
    controller = f"{CONTROLLER_LISTENER_NAME}://{c_host}:{c_port}"
    client_text = ",".join(f"{n}://{h}:{p}" for n, h, p in client)
    advertised = cfg.get("advertised.listeners") or ",".join(
        f"{n}://{h if h not in ('', '0.0.0.0', '[::]') else c_host}:{p}" for n, h, p in client)

    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.listener.names": CONTROLLER_LISTENER_NAME,
        "listeners": f"{client_text},{controller}",
        "advertised.listeners": f"{advertised},{controller}",
        "inter.broker.listener.name": client[0][0],
    }
    protocol_map = cfg.get("listener.security.protocol.map")
    props["listener.security.protocol.map"] = (
        f"{CONTROLLER_LISTENER_NAME}:PLAINTEXT,{protocol_map}" if protocol_map
        else DEFAULT_PROTOCOL_MAP)
    if dynamic:
        props["controller.quorum.bootstrap.servers"] = f"{c_host}:{c_port}"
    else:
        props["controller.quorum.voters"] = f"{node_id}@{c_host}:{c_port}"
    props["log.dirs"] = log_dirs or d
    props.update(_SINGLE_NODE)

    notes = [f"quorum: {'dynamic (KIP-853 voter set in the metadata log)' if dynamic else 'static'}"]
    # Coordinators hash ids over the internal topics' partition counts: Kafka must use the
    # counts the directory has, whatever the configs said.
    counts: dict[str, int] = {}
    for name in os.listdir(d):
        topic, _, part = name.rpartition("-")
        if topic in _PARTITION_COUNT_CONFIGS and part.isdigit():
            counts[topic] = counts.get(topic, 0) + 1
    for topic, key in _PARTITION_COUNT_CONFIGS.items():
        if topic in counts:
            props[key] = str(counts[topic])
            if key in cfg and cfg[key] != str(counts[topic]):
                notes.append(f"{key}: the directory's {counts[topic]} partitions, not the "
                             f"configured {cfg[key]}")
    if "__share_group_state" in counts:
        # Share groups (KIP-932) are early access in Kafka 4.0: off unless both are set.
        props["group.share.enable"] = "true"
        props["unstable.api.versions.enable"] = "true"
        notes.append("share groups are early access in Kafka 4.0 (group.share.enable)")

    dropped = {}
    for key, value in cfg.items():
        if key in _DERIVED or key in props:
            continue
        if key in SNAKKA_ONLY_CONFIGS or key.startswith(SNAKKA_ONLY_PREFIXES):
            dropped[key] = value
            continue
        props[key] = value
    if any(k.startswith(("rsm.config.", "remote.log.")) for k in cfg):
        notes.append("tiered storage: Kafka needs its own RemoteStorageManager plugin "
                     "(remote.log.storage.manager.class.name); see docs/migrating.md")
    return KafkaConfig(props, dropped, notes)


# ---------------------------------------------------------------- mirror-config


def mirror_maker_properties(
    source: str,
    target: str,
    *,
    source_alias: str = "snakka",
    target_alias: str = "kafka",
    topics: str = ".*",
    groups: str = ".*",
    replication_factor: int = 3,
    interval_seconds: int = 5,
) -> dict[str, str]:
    """MirrorMaker 2 properties mirroring ``source`` (snakka) to ``target`` (Kafka) one way.

    Topic names stay the same (IdentityReplicationPolicy), so producers and consumers move to
    the target without renaming anything. Offset syncs are wanted for every record
    (``offset.lag.max=0``), so a group's committed offset translates as finely as MM2 allows
    (it maps an upstream offset through the newest sync at or below it);
    MirrorCheckpointConnector writes the translated offsets to the target's groups
    (``sync.group.offsets.enabled``) every ``interval_seconds``, for groups with no active
    member on the target. The Connect worker's ``offset.flush.interval.ms`` is set to the same
    interval: MM2 keeps at most 10 offset syncs in flight and holds back the newest one of each
    partition beyond that until the task's next offset commit (Kafka's default: 60 s), and that
    sync is the one that translates a group committed at the end of a partition (the cut-over)
    exactly.
    ``replication_factor`` is the target's, for mirrored topics and MM2's own topics, which
    all live on the target."""
    if replication_factor < 1:
        raise MigrateError("the replication factor must be at least 1")
    s, t = source_alias, target_alias
    if s == t:
        raise MigrateError("the source and target aliases must differ")
    iv, rf = str(interval_seconds), str(replication_factor)
    props = {
        "clusters": f"{s}, {t}",
        f"{s}.bootstrap.servers": source,
        f"{t}.bootstrap.servers": target,
        f"{s}->{t}.enabled": "true",
        f"{t}->{s}.enabled": "false",
        f"{s}->{t}.topics": topics,
        f"{s}->{t}.groups": groups,
        # Same topic names on the target (Kafka 3.0+); with it MM2 cannot tell mirrored from
        # local topics, so mirroring back (t->s) must stay off.
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": iv,
        "emit.checkpoints.enabled": "true",
        "emit.checkpoints.interval.seconds": iv,
        "emit.heartbeats.interval.seconds": iv,
        "refresh.topics.interval.seconds": iv,
        "refresh.groups.interval.seconds": iv,
        "offset.lag.max": "0",
        # A worker config: MM2's dedicated mode takes it from the target cluster's prefix
        # (MirrorMakerConfig.workerConfig), not from the top level.
        f"{t}.offset.flush.interval.ms": str(interval_seconds * 1000),
        "sync.topic.configs.enabled": "true",
        "sync.topic.acls.enabled": "true",
        "tasks.max": "4",
        # Everything of MM2's own lives on the target: the offset syncs (KIP-716), and no
        # heartbeats flow back into snakka (which would take a second Connect herder storing
        # its state there). MM2 then only reads from snakka.
        "offset-syncs.topic.location": "target",
        f"{t}->{s}.emit.heartbeats.enabled": "false",
        "replication.factor": rf,
        "checkpoints.topic.replication.factor": rf,
        "heartbeats.topic.replication.factor": rf,
        "offset-syncs.topic.replication.factor": rf,
        "offset.storage.replication.factor": rf,
        "status.storage.replication.factor": rf,
        "config.storage.replication.factor": rf,
        # Keep what the source's consumers see: only committed transactional records.
        f"{s}.consumer.isolation.level": "read_committed",
    }
    return props


def render_properties(props: Mapping[str, str], header: str = "") -> str:
    lines = [f"# {h}" for h in header.splitlines()] if header else []
    lines += [f"{k}={v}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


__all__ = [
    "CheckReport",
    "KafkaConfig",
    "MigrateError",
    "check_data_dir",
    "is_locked",
    "kafka_server_properties",
    "metadata_quorum_is_dynamic",
    "mirror_maker_properties",
    "next_steps",
    "render_properties",
]
