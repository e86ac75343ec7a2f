"""Broker and topic configuration, by Kafka's own names and semantics.

This module owns the table of every configuration key snakka understands: its Kafka name, type,
default, validation, and (for topic configs) the broker-level synonym that supplies the default.
A user's ``server.properties`` and their ``kafka-configs.sh`` knowledge carry over unchanged.

Values are kept as strings at the edges (files, DescribeConfigs, AlterConfigs) and parsed into
typed values on lookup, exactly as Kafka does, so DescribeConfigs can report the configured string
and its source.

snakka-specific keys are prefixed ``snakka.`` and documented in docs/configuration.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from snakka.limits import DEFAULT_MAX_UNCOMPRESSED_BYTES, INT32_MAX, INT64_MAX
from snakka.security.acl_authorizer import STANDARD_AUTHORIZER_CLASSES, parse_super_users


# Kafka's ConfigType ids as used by DescribeConfigs v3+.
class ConfigType(IntEnum):
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


# Kafka's DescribeConfigs ConfigSource ids.
class ConfigSource(IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


# Kafka's validators name these Integer.MAX_VALUE / Long.MAX_VALUE; defined in snakka.limits.
INT_MAX = INT32_MAX
LONG_MAX = INT64_MAX


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key."""

    def __init__(self, name: str, value: object, reason: str) -> None:
        # Kafka's ConfigException wording (the value unquoted): clients and operators compare
        # answers of the two brokers, and the reason says which bound or type failed.
        super().__init__(f"Invalid value {value} for configuration {name}: {reason}")
        self.name = name


def _parse_bool(name: str, s: str) -> bool:
    v = s.strip().lower()
    if v == "true":
        return True
    if v == "false":
        return False
    raise ConfigError(name, s, "Expected value to be either true or false")


def _parse_int(lo: int, hi: int) -> Callable[[str, str], int]:
    """An INT (``hi`` <= Integer.MAX_VALUE) or LONG config within [lo, hi], with Kafka's
    messages: a value its Java type cannot hold is "Not a number of type INT/LONG"
    (ConfigDef.parseType), one outside the range "Value must be at least lo" / "Value must be
    no more than hi" (ConfigDef.Range)."""
    java_type, type_max = ("INT", INT_MAX) if hi <= INT_MAX else ("LONG", LONG_MAX)

    def parse(name: str, s: str) -> int:
        try:
            v = int(s.strip())
        except ValueError:
            raise ConfigError(name, s, f"Not a number of type {java_type}") from None
        if not -type_max - 1 <= v <= type_max:
            raise ConfigError(name, s, f"Not a number of type {java_type}")
        # Kafka's Range names the parsed value (a double as Java prints it: 2.0).
        if v < lo:
            raise ConfigError(name, v, f"Value must be at least {lo}")
        if v > hi:
            raise ConfigError(name, v, f"Value must be no more than {hi}")
        return v

    return parse


def _parse_double(name: str, s: str) -> float:
    try:
        return float(s.strip())
    except ValueError:
        raise ConfigError(name, s, "Not a number of type DOUBLE") from None


def _double_in(lo: float, hi: float) -> Callable[[str, str], float]:
    def parse(name: str, s: str) -> float:
        v = _parse_double(name, s)
        if v < lo:
            raise ConfigError(name, v, f"Value must be at least {lo}")
        if v > hi:
            raise ConfigError(name, v, f"Value must be no more than {hi}")
        return v

    return parse


def _parse_str(name: str, s: str) -> str:
    return s.strip()


def _parse_list(name: str, s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]


def _parse_connections_per_ip_overrides(name: str, s: str) -> str:
    """Kafka's 'host:count,host:count' (split at the last ':', so IPv6 addresses work)."""
    for item in (x.strip() for x in s.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip():
            raise ConfigError(name, s, f"'{item}' is not host:count")
        try:
            n = int(count.strip())
        except ValueError:
            raise ConfigError(name, s, f"'{count.strip()}' in '{item}' is not an integer") from None
        if n < 0:
            raise ConfigError(name, s, f"the count in '{item}' is negative")
    return s


def parse_connections_per_ip_overrides(s: str) -> dict[str, int]:
    """max.connections.per.ip.overrides as {host: count} (validated by the config parser)."""
    out: dict[str, int] = {}
    for item in (x.strip() for x in s.split(",")):
        if item:
            host, _, count = item.rpartition(":")
            out[host.strip().strip("[]")] = int(count.strip())
    return out


def _one_of(*choices: str, case_insensitive: bool = False,
            message: str | None = None) -> Callable[[str, str], str]:
    def parse(name: str, s: str) -> str:
        v = s.strip()
        if case_insensitive:
            v = v.lower() if all(c == c.lower() for c in choices) else v
        if v not in choices:
            raise ConfigError(name, s, message or f"String must be one of: {', '.join(choices)}")
        return v

    return parse


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _parse_protocol_map(name: str, s: str) -> dict[str, str]:
    """Kafka's listener.security.protocol.map: NAME:PROTOCOL,... (names upper-cased)."""
    out: dict[str, str] = {}
    for item in _parse_list(name, s):
        listener, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or not listener.strip() or proto not in SECURITY_PROTOCOLS:
            raise ConfigError(name, s, f"Expected NAME:PROTOCOL with a protocol among "
                              f"{', '.join(SECURITY_PROTOCOLS)}, got {item!r}")
        out[listener.strip().upper()] = proto
    return out


def _parse_super_users_config(name: str, s: str) -> str:
    """``super.users``: 'Type:name;Type:name' (each must have a principal type)."""
    for p in parse_super_users(s):
        if ":" not in p or p.startswith(":"):
            raise ConfigError(name, s, f"'{p}' is not a principal (Type:name, e.g. User:admin)")
    return s.strip()


def _refuse_true(reason: str) -> Callable[[str, str], bool]:
    def parse(name: str, s: str) -> bool:
        if _parse_bool(name, s):
            raise ConfigError(name, s, reason)
        return False

    return parse


def _refuse_nonempty(reason: str) -> Callable[[str, str], str]:
    def parse(name: str, s: str) -> str:
        if s.strip():
            raise ConfigError(name, s, reason)
        return ""

    return parse


def _list_of(*choices: str) -> Callable[[str, str], list[str]]:
    def parse(name: str, s: str) -> list[str]:
        items = _parse_list(name, s)
        for it in items:
            if it not in choices:
                raise ConfigError(name, s, f"Each item must be one of: {', '.join(choices)}")
        return items

    return parse


def _parse_principal_mapping_rules(name: str, s: str) -> str:
    """Kafka's SslPrincipalMapper grammar, checked at start (security/ssl.py applies it)."""
    from snakka.security.ssl import SslPrincipalMapper

    try:
        SslPrincipalMapper.from_rules(s)
    except ValueError as e:
        raise ConfigError(name, s, str(e)) from None
    return s.strip()


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One configuration key: Kafka name, type, default string, parser, documentation."""

    name: str
    type: ConfigType
    default: str | None
    parse: Callable[[str, str], object]
    doc: str
    # For a topic config: the broker config that supplies its default (Kafka's "synonym").
    broker_synonym: str | None = None
    read_only: bool = False
    sensitive: bool = False

    def value(self, s: str | None) -> object:
        if s is None:
            return None
        return self.parse(self.name, s)


def _d(name, typ, default, parse, doc, **kw) -> ConfigDef:  # noqa: ANN001 - table helper
    return ConfigDef(name, typ, default, parse, doc, **kw)


_L = ConfigType.LONG
_I = ConfigType.INT
_S = ConfigType.STRING
_B = ConfigType.BOOLEAN
_LIST = ConfigType.LIST
_DBL = ConfigType.DOUBLE

_nonneg_long = _parse_int(0, LONG_MAX)
_long_m1 = _parse_int(-1, LONG_MAX)
_pos_int = _parse_int(1, INT_MAX)
_nonneg_int = _parse_int(0, INT_MAX)
_pos_long = _parse_int(1, LONG_MAX)
_any_int = _parse_int(-INT_MAX - 1, INT_MAX)
_any_long = _parse_int(-LONG_MAX - 1, LONG_MAX)


def _open_files_limit(name: str, s: str) -> int:
    v = _parse_int(-1, INT_MAX)(name, s)
    if v == 0:
        raise ConfigError(name, s, "Value must be -1 (derived from RLIMIT_NOFILE) or positive")
    return v

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# Topic-level configs (Kafka's TopicConfig), each with its broker-level synonym.
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        _d("cleanup.policy", _LIST, "delete", _list_of("delete", "compact"),
           "Retention policy: 'delete' (segments deleted by retention.ms/retention.bytes), 'compact' (the log cleaner keeps the latest record per key), or both ('compact,delete').",
           broker_synonym="log.cleanup.policy"),
        _d("compression.type", _S, "producer", _one_of(*COMPRESSION_TYPES),
           "Final compression of the topic's data; 'producer' keeps the producer's codec.",
           broker_synonym="compression.type"),
        _d("delete.retention.ms", _L, "86400000", _nonneg_long,
           "How long delete tombstones are retained for compacted topics.",
           broker_synonym="log.cleaner.delete.retention.ms"),
        _d("file.delete.delay.ms", _L, "60000", _nonneg_long,
           "Time to wait before deleting a file from the filesystem.",
           broker_synonym="log.segment.delete.delay.ms"),
        _d("flush.messages", _L, str(LONG_MAX), _parse_int(1, LONG_MAX),
           "fsync after this many messages; 1 = every acknowledged write is fsynced first (strict mode).",
           broker_synonym="log.flush.interval.messages"),
        _d("flush.ms", _L, str(LONG_MAX), _nonneg_long,
           "Maximum time data may stay un-fsynced.", broker_synonym="log.flush.interval.ms"),
        _d("index.interval.bytes", _I, "4096", _nonneg_int,
           "Bytes between offset index entries.", broker_synonym="log.index.interval.bytes"),
        _d("local.retention.bytes", _L, "-2", _parse_int(-2, LONG_MAX),
           "Local retention bytes for tiered topics (-2: same as retention.bytes).",
           broker_synonym="log.local.retention.bytes"),
        _d("local.retention.ms", _L, "-2", _parse_int(-2, LONG_MAX),
           "Local retention time for tiered topics (-2: same as retention.ms).",
           broker_synonym="log.local.retention.ms"),
        _d("max.compaction.lag.ms", _L, str(LONG_MAX), _pos_long,
           "Maximum time a message stays ineligible for compaction.",
           broker_synonym="log.cleaner.max.compaction.lag.ms"),
        _d("max.message.bytes", _I, "1048588", _nonneg_int,
           "Largest record batch size allowed.", broker_synonym="message.max.bytes"),
        _d("message.timestamp.after.max.ms", _L, "3600000", _nonneg_long,
           "Max allowed amount a record timestamp may be ahead of the broker time (CreateTime).",
           broker_synonym="log.message.timestamp.after.max.ms"),
        _d("message.timestamp.before.max.ms", _L, str(LONG_MAX), _nonneg_long,
           "Max allowed amount a record timestamp may be behind the broker time (CreateTime).",
           broker_synonym="log.message.timestamp.before.max.ms"),
        _d("message.timestamp.type", _S, "CreateTime", _one_of("CreateTime", "LogAppendTime"),
           "Whether record timestamps are the producer's (CreateTime) or the broker's append time.",
           broker_synonym="log.message.timestamp.type"),
        _d("min.cleanable.dirty.ratio", _DBL, "0.5", _double_in(0, 1),
           "Dirty ratio that triggers compaction.", broker_synonym="log.cleaner.min.cleanable.ratio"),
        _d("min.compaction.lag.ms", _L, "0", _nonneg_long,
           "Minimum time a message stays uncompacted.", broker_synonym="log.cleaner.min.compaction.lag.ms"),
        _d("min.insync.replicas", _I, "1", _pos_int,
           "Minimum in-sync replicas for acks=all; above 1 on a single broker, acks=all fails with NOT_ENOUGH_REPLICAS.",
           broker_synonym="min.insync.replicas"),
        _d("preallocate", _B, "false", _parse_bool,
           "Preallocate segment files (accepted, no effect on this platform).",
           broker_synonym="log.preallocate"),
        _d("remote.storage.enable", _B, "false", _parse_bool,
           "Tiered storage for this topic: closed segments are copied to remote storage and "
           "local.retention.* applies locally (needs remote.log.storage.system.enable=true; "
           "turning it off needs remote.log.copy.disable=true and "
           "remote.log.delete.on.disable=true, and deletes the remote data).",
           broker_synonym=None),
        _d("retention.bytes", _L, "-1", _long_m1,
           "Maximum size of a partition before old segments are deleted (-1: no limit).",
           broker_synonym="log.retention.bytes"),
        _d("retention.ms", _L, "604800000", _long_m1,
           "Maximum age of data before old segments are deleted (-1: no limit).",
           broker_synonym="log.retention.ms"),
        _d("segment.bytes", _I, "1073741824", _parse_int(14, INT_MAX),
           "Segment file size.", broker_synonym="log.segment.bytes"),
        _d("segment.index.bytes", _I, "10485760", _parse_int(4, INT_MAX),
           "Maximum size of an offset index file.", broker_synonym="log.index.size.max.bytes"),
        _d("segment.jitter.ms", _L, "0", _nonneg_long,
           "Maximum random jitter subtracted from segment.ms.", broker_synonym="log.roll.jitter.ms"),
        _d("segment.ms", _L, "604800000", _pos_long,
           "Time after which a segment is rolled even if not full.", broker_synonym="log.roll.ms"),
        _d("unclean.leader.election.enable", _B, "false", _parse_bool,
           "No effect on a single broker.", broker_synonym="unclean.leader.election.enable"),
        _d("compression.gzip.level", _I, "-1", _parse_int(-1, 9),
           "gzip level when the broker (re)compresses (compression.type=gzip).",
           broker_synonym="compression.gzip.level"),
        _d("compression.lz4.level", _I, "9", _parse_int(1, 17),
           "lz4 level when the broker (re)compresses.", broker_synonym="compression.lz4.level"),
        _d("compression.zstd.level", _I, "3", _parse_int(-131072, 22),
           "zstd level when the broker (re)compresses.", broker_synonym="compression.zstd.level"),
        _d("remote.log.copy.disable", _B, "false", _parse_bool,
           "Tiered storage: stop copying segments (remote data stays readable and is still "
           "deleted by retention)."),
        _d("remote.log.delete.on.disable", _B, "false", _parse_bool,
           "Tiered storage: with remote.storage.enable=false, delete the topic's remote data "
           "(required to turn tiered storage off, KIP-950)."),
        _d("leader.replication.throttled.replicas", _LIST, "", _parse_list,
           "Replication throttling (no effect on a single broker)."),
        _d("follower.replication.throttled.replicas", _LIST, "", _parse_list,
           "Replication throttling (no effect on a single broker)."),
    ]
}

# Broker-level configs. Topic-config synonyms come first; their defaults are the topic defaults.
_BROKER_LIST: list[ConfigDef] = [
    _d("node.id", _I, "1", _nonneg_int, "This broker's node id.", read_only=True),
    _d("broker.id", _I, None, _nonneg_int, "Alias of node.id (older configs).", read_only=True),
    _d("listeners", _LIST, "PLAINTEXT://localhost:9092", _parse_list,
       "Listeners: NAME://host:port. 'localhost' binds every loopback address it resolves to "
       "(127.0.0.1 and ::1); an empty host binds all interfaces.", read_only=True),
    _d("advertised.listeners", _LIST, None, _parse_list,
       "Addresses given to clients in Metadata; defaults to listeners.", read_only=True),
    _d("listener.security.protocol.map", _LIST,
       "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
       _parse_protocol_map,
       "Listener name to security protocol (Kafka's default). All four are served "
       "(docs/security.md): PLAINTEXT, SSL (security/ssl.py), SASL_PLAINTEXT and SASL_SSL "
       "(security/sasl/); a listener name with no protocol stops the broker at start.",
       read_only=True),
    # -- TLS (issue 14): Kafka's SslConfigs; each may be set per listener as
    # listener.name.<listener>.<config> (the prefixed key wins for that listener; see
    # listener_config and security/ssl.py). Read when the listeners start; the key and trust
    # store configs (LISTENER_RECONFIGURABLE_SSL_CONFIGS) may then be changed per listener and
    # broker at run time (security/ssl_reload.py), so they are not read-only.
    _d("ssl.keystore.type", _S, "JKS", _one_of("JKS", "PKCS12", "PEM", case_insensitive=False),
       "Key store format: PEM, PKCS12, or JKS (Kafka's default: a JKS-typed file in PKCS12 "
       "format is read; a real JKS file is refused with how to convert it).", read_only=False),
    _d("ssl.keystore.location", _S, None, _parse_str,
       "Key store file of an SSL listener (PEM: the private key and certificate chain).",
       read_only=False),
    _d("ssl.keystore.password", ConfigType.PASSWORD, None, _parse_str,
       "Password of a PKCS12 key store (not allowed with PEM).", read_only=False,
       sensitive=True),
    _d("ssl.key.password", ConfigType.PASSWORD, None, _parse_str,
       "Password of the private key (PEM: of an encrypted PKCS#8 key).", read_only=False,
       sensitive=True),
    _d("ssl.keystore.key", ConfigType.PASSWORD, None, _parse_str,
       "Inline PEM private key (with ssl.keystore.certificate.chain and "
       "ssl.keystore.type=PEM).", read_only=False, sensitive=True),
    _d("ssl.keystore.certificate.chain", _S, None, _parse_str,
       "Inline PEM certificate chain of ssl.keystore.key.", read_only=False),
    _d("ssl.truststore.type", _S, "JKS", _one_of("JKS", "PKCS12", "PEM"),
       "Trust store format: PEM, PKCS12, or JKS (a PKCS12 file).", read_only=False),
    _d("ssl.truststore.location", _S, None, _parse_str,
       "Trust store file: the CAs client certificates are checked against.", read_only=False),
    _d("ssl.truststore.password", ConfigType.PASSWORD, None, _parse_str,
       "Password of a PKCS12 trust store.", read_only=False, sensitive=True),
    _d("ssl.truststore.certificates", _S, None, _parse_str,
       "Inline PEM trusted certificates (ssl.truststore.type=PEM).", read_only=False),
    _d("ssl.client.auth", _S, "none", _one_of("none", "requested", "required",
                                              case_insensitive=True),
       "Client certificates: none, requested (checked when sent) or required (mTLS).",
       read_only=True),
    _d("ssl.enabled.protocols", _LIST, "TLSv1.2,TLSv1.3", _list_of("TLSv1.2", "TLSv1.3"),
       "TLS versions an SSL listener accepts.", read_only=True),
    _d("ssl.protocol", _S, "TLSv1.3", _one_of("TLS", "TLSv1.2", "TLSv1.3"),
       "Kafka's SSLContext protocol: TLSv1.2 caps the versions at 1.2.", read_only=True),
    _d("ssl.cipher.suites", _LIST, "", _parse_list,
       "TLS 1.2 cipher suites (IANA names as in Kafka, or OpenSSL names); empty: OpenSSL's "
       "defaults. TLS 1.3 suites are always enabled.", read_only=True),
    _d("ssl.endpoint.identification.algorithm", _S, "https", _parse_str,
       "Client side (the broker has no outgoing TLS connections); accepted for Kafka "
       "compatibility.", read_only=True),
    _d("ssl.principal.mapping.rules", _S, "DEFAULT", _parse_principal_mapping_rules,
       "How a client certificate's subject (RFC 2253) becomes the principal's name: "
       "RULE:pattern/replacement/[LU] rules and DEFAULT, as in Kafka.", read_only=True),
    _d("ssl.allow.dn.changes", _B, "false", _parse_bool,
       "Whether a dynamically reloaded key store may change the certificate's distinguished "
       "name (Kafka's BrokerSecurityConfigs; per listener with listener.name.<l>.).",
       read_only=True),
    _d("ssl.allow.san.changes", _B, "false", _parse_bool,
       "Whether a dynamically reloaded key store may drop subject alternative names of the "
       "certificate it replaces (Kafka's BrokerSecurityConfigs; per listener).",
       read_only=True),
    _d("snakka.ssl.handshake.timeout.ms", _L, "10000", _pos_long,
       "Longest a TLS handshake may take; a connection that has not completed it by then is "
       "closed with a log line (Kafka has no such config; without one a client could hold "
       "a connection slot by never finishing the handshake).", read_only=True),
    _d("log.dirs", _LIST, "./snakka-data", _parse_list,
       "Where partition logs live. One directory: several (JBOD) are refused at start.",
       read_only=True),
    _d("log.dir", _S, None, _parse_str, "Alias of log.dirs with one directory.", read_only=True),
    _d("num.partitions", _I, "1", _pos_int, "Default partitions for new topics."),
    _d("default.replication.factor", _I, "1", _pos_int, "Default replication factor (must be 1)."),
    # Kafka's dynamic replication throttles (DynamicConfig.Broker). One broker replicates
    # nothing, so they limit nothing here; they are accepted and described so that Kafka's
    # tools that set and clear them (kafka-reassign-partitions.sh --throttle / --verify) work.
    _d("leader.replication.throttled.rate", _L, str(LONG_MAX), _pos_long,
       "Replication throttle of leaders, bytes/s (no replication on one broker: no effect)."),
    _d("follower.replication.throttled.rate", _L, str(LONG_MAX), _pos_long,
       "Replication throttle of followers, bytes/s (no replication on one broker: no effect)."),
    _d("replica.alter.log.dirs.io.max.bytes.per.second", _L, str(LONG_MAX), _pos_long,
       "Throttle of moves between log dirs, bytes/s (one log dir: no effect)."),
    _d("auto.create.topics.enable", _B, "true", _parse_bool,
       "Create a topic on first Metadata request that names it."),
    _d("delete.topic.enable", _B, "true", _parse_bool, "Allow DeleteTopics."),
    _d("socket.request.max.bytes", _I, "104857600", _pos_int,
       "Largest request frame accepted; larger frames close the connection.", read_only=True),
    _d("quota.window.num", _I, "11", _pos_int,
       "The number of samples kept for client quotas (producer_byte_rate, consumer_byte_rate, "
       "request_percentage; docs/quotas.md).", read_only=True),
    _d("quota.window.size.seconds", _I, "1", _pos_int,
       "The time span of each client quota sample.", read_only=True),
    _d("controller.quota.window.num", _I, "11", _pos_int,
       "The number of samples kept for controller mutation quotas (controller_mutation_rate).",
       read_only=True),
    _d("controller.quota.window.size.seconds", _I, "1", _pos_int,
       "The time span of each controller mutation quota sample.", read_only=True),
    _d("socket.listen.backlog.size", _I, "1024", _pos_int,
       "The maximum number of pending connections on each listening socket (accepted by the "
       "kernel, not yet by the broker); Linux caps it at net.core.somaxconn. A connection "
       "arriving while it is full is dropped by the kernel and its client retries only after "
       "a SYN retransmission (1 s, then 3 s, ...). Kafka's default is 50, for an acceptor "
       "thread that does nothing else; snakka accepts on the event loop that also runs "
       "requests, so a burst of connections waits longer for accept and gets a larger "
       "default (docs/benchmarks.md, cost curves).", read_only=True),
    _d("max.connections", _I, "10000", _pos_int,
       "Maximum open client connections; new ones beyond it are closed at once (Kafka's default "
       "is unbounded and Kafka stops accepting at the bound; snakka bounds it and refuses). "
       "listener.name.<l>.max.connections bounds one listener's connections the same way "
       "(static; the broker-wide bound applies too).",
       read_only=True),
    _d("max.connections.per.ip", _I, str(INT_MAX), _nonneg_int,
       "Maximum open connections from one IP address; a new connection beyond it is closed at "
       "once (Kafka's default: unbounded). 0 is allowed only with "
       "max.connections.per.ip.overrides.", read_only=True),
    _d("max.connections.per.ip.overrides", _S, "", _parse_connections_per_ip_overrides,
       "Per-IP or per-hostname exceptions to max.connections.per.ip, e.g. "
       "'hostName:100,127.0.0.1:200' (a hostname applies to every address it resolves to at "
       "start-up).", read_only=True),
    _d("max.connection.creation.rate", _I, str(INT_MAX), _nonneg_int,
       "Maximum new connections accepted per second, broker-wide; per listener with "
       "listener.name.<l>.max.connection.creation.rate (which defaults to this value). Above "
       "it the acceptor waits before accepting the next connection (Kafka's KIP-612; measured "
       "as client quotas are, over quota.window.num x quota.window.size.seconds; the wait is "
       "at most one window). Dynamic (broker-wide value): a change applies from the next "
       "accept, and a plain listener that did not pace its accepts starts to.", read_only=True),
    _d("connections.max.idle.ms", _L, "600000", _nonneg_long,
       "Close connections idle longer than this (nothing read and no response bytes drained); "
       "a connection whose client stopped reading is aborted, its unsent responses dropped.",
       read_only=True),
    _d("socket.request.arrival.timeout.ms", _L, "60000", _pos_long,
       "Longest a started request may take to arrive completely (from the moment its first "
       "bytes are read until its last); a connection whose request is still incomplete after "
       "this is closed. Partial requests never count as activity for connections.max.idle.ms. "
       "snakka-specific.", read_only=True),
    _d("queued.max.requests", _I, "500", _pos_int,
       "Requests one connection may have in flight; reading from it pauses at this bound.",
       read_only=True),
    _d("queued.max.response.bytes", _L, "268435456", _pos_long,
       "Broker-wide bound on response bytes held in memory until the client reads them (the "
       "response-side counterpart of Kafka's queued.max.request.bytes). A Fetch reserves from "
       "it before reading from disk and gets less (at least the first whole batch) or waits "
       "when it is spent; a connection holding unread bytes while it is spent is not read "
       "from. snakka-specific.", read_only=True),
    _d("queued.max.response.bytes.per.connection", _L, "4194304", _pos_long,
       "Reading from a connection pauses while more than this many response bytes wait in its "
       "write buffer. snakka-specific.", read_only=True),
    _d("snakka.fetch.memory.max.bytes", _I, "8388608", _pos_int,
       "Record bytes one Fetch response may hold in memory where they cannot go from the "
       "segment files to the socket with sendfile (TLS listeners, which must encrypt them): "
       "such a response returns at most this much (still the first whole batch, as a smaller "
       "fetch.max.bytes would), so one response pins at most this much memory whatever the "
       "client's fetch.max.bytes. Plaintext listeners send record sets of 64 KiB or more with "
       "sendfile and are not capped. snakka-specific.", read_only=True),
    _d("snakka.fetch.response.target.bytes", _I, "31457280", _pos_int,
       "Record bytes one Fetch response holds at most, whatever the client's fetch.max.bytes "
       "(Kafka lets a broker return less than MaxBytes; the first whole batch still comes, as "
       "KIP-74 requires, even when it alone is larger). The default, 30 MiB, keeps responses "
       "below glibc's largest mmap threshold (32 MiB): librdkafka receives each response "
       "into a new buffer of its size, and above that threshold every such buffer is a fresh "
       "mmap whose every 4 KiB page faults and is zeroed, which made its receive thread the "
       "bottleneck of 50 MiB fetches (docs/benchmarks.md, \"Large consume: response size\"). "
       "Set it to fetch.max.bytes or more to answer up to the client's limit. "
       "snakka-specific.", read_only=True),
    _d("log.max.open.files", _I, "-1", _open_files_limit,
       "Segment files the broker keeps open at once: files are opened on first use and the "
       "least recently used are closed beyond this bound, so idle partitions hold no file "
       "descriptor and 10,000+ partitions run under the default ulimit -n of 1024 (Kafka keeps "
       "every segment open and needs a huge ulimit). -1: a quarter of the soft RLIMIT_NOFILE, at "
       "least 16, leaving the rest to connections. The bound is per process. Record sets waiting "
       "to be sent with sendfile (Fetch on plaintext listeners) hold a duplicate descriptor "
       "each and count in this bound too, taking at most half of it: beyond that (a slow reader "
       "of many partitions) record sets are read into memory instead, within "
       "queued.max.response.bytes. A broker left with "
       "fewer than 32 free descriptors after loading exits with one line instead of listening "
       "without being able to accept. snakka-specific.",
       read_only=True),
    # Kafka validates none of the three retention units: any negative value means no time
    # limit (broker_default_for_topic_config gives the topic retention.ms -1).
    _d("log.retention.hours", _I, "168", _any_int, "Retention in hours (negative: no limit)."),
    _d("log.retention.minutes", _I, None, _any_int,
       "Retention in minutes (negative: no limit)."),
    _d("log.roll.hours", _I, "168", _pos_int, "Segment roll time in hours."),
    _d("log.retention.check.interval.ms", _L, "300000", _pos_long,
       "How often retention is enforced.", read_only=True),
    # The log cleaner (Kafka's LogCleaner; snakka.storage.cleaner).
    _d("log.cleaner.enable", _B, "true", _parse_bool,
       "Run the log cleaner, which compacts topics with cleanup.policy=compact. Off, compacted "
       "topics (the internal ones included) grow without bound.", read_only=True),
    _d("log.cleaner.threads", _I, "1", _pos_int,
       "Cleaner threads. snakka runs one (the cleaner is bound by the interpreter lock, so "
       "more would only contend with the request threads); a higher value is accepted and "
       "logged.", read_only=True),
    _d("log.cleaner.dedupe.buffer.size", _L, "134217728", _parse_int(1 << 20, LONG_MAX),
       "Memory for the cleaner's offset map (key hash -> latest offset). One cleaning pass "
       "takes as many keys as fit; a log with more keys is cleaned over several passes.",
       read_only=True),
    _d("log.cleaner.io.buffer.load.factor", _DBL, "0.9", _double_in(0.01, 1.0),
       "How full the offset map may get, as a fraction of its capacity.", read_only=True),
    _d("log.cleaner.io.buffer.size", _I, "524288", _parse_int(512, INT_MAX),
       "Bytes the cleaner reads from a segment, and writes to the cleaned segment, at a time.",
       read_only=True),
    _d("log.cleaner.io.max.bytes.per.second", _DBL, "1.7976931348623157E308",
       _double_in(1.0, 1.7976931348623157e308),
       "Throttle: bytes per second the cleaner reads plus writes, at most.", read_only=True),
    _d("log.cleaner.backoff.ms", _L, "15000", _nonneg_long,
       "How long the cleaner sleeps when no log needs cleaning.", read_only=True),
    _d("log.flush.strict", _B, "false", _parse_bool,
       "Strict durability: an acks=all produce is answered only after its data is fsynced "
       "(concurrent producers share fsyncs). snakka-specific.", read_only=True),
    _d("log.flush.scheduler.interval.ms", _L, "1000", _pos_long,
       "How often the background group commit fsyncs dirty logs (snakka default: 1 s).",
       read_only=True),
    _d("log.flush.offset.checkpoint.interval.ms", _I, "60000", _pos_int,
       "How often the recovery-point checkpoint is written.", read_only=True),
    _d("log.flush.start.offset.checkpoint.interval.ms", _I, "60000", _pos_int,
       "How often the log-start-offset checkpoint is written.", read_only=True),
    _d("producer.id.expiration.ms", _I, "86400000", _pos_int,
       "Idle time after which a producer id's state is expired."),
    _d("max.incremental.fetch.session.cache.slots", _I, "1000", _nonneg_int,
       "Incremental fetch sessions (KIP-227) kept; 0 disables sessions.", read_only=True),
    _d("fetch.max.bytes", _I, "57671680", _parse_int(1024, INT_MAX),
       "Largest Fetch response the broker builds."),
    _d("snakka.message.max.uncompressed.bytes", _I, str(DEFAULT_MAX_UNCOMPRESSED_BYTES),
       _parse_int(1024, INT_MAX),
       "Largest size a produced compressed batch's records may decompress to. The broker "
       "decompresses each compressed batch once to check its records (as Kafka's LogValidator "
       "does) and stores it as it came; a batch that expands beyond this is refused with "
       "INVALID_RECORD, so a small 'decompression bomb' costs at most this much memory and "
       "time. snakka-specific (Kafka has no such bound).", read_only=True),
    # -- group coordinator (issue 3) --
    _d("group.min.session.timeout.ms", _I, "6000", _pos_int,
       "Smallest session timeout a classic group member may ask for."),
    _d("group.max.session.timeout.ms", _I, "1800000", _pos_int,
       "Largest session timeout a classic group member may ask for."),
    _d("group.initial.rebalance.delay.ms", _I, "3000", _nonneg_int,
       "How long a new classic group waits for more members before the first rebalance."),
    _d("group.max.size", _I, str(INT_MAX), _pos_int, "Maximum members of a classic group."),
    _d("offsets.retention.minutes", _I, "10080", _pos_int,
       "Committed offsets of groups without members expire after this long."),
    _d("offsets.retention.check.interval.ms", _L, "600000", _pos_long,
       "How often expired offsets are removed.", read_only=True),
    _d("offset.metadata.max.bytes", _I, "4096", _nonneg_int,
       "Largest metadata string stored with a committed offset."),
    _d("offsets.topic.num.partitions", _I, "50", _parse_int(1, 1000),
       "Partitions of __consumer_offsets (fixed once the topic exists).", read_only=True),
    _d("offsets.topic.segment.bytes", _I, "104857600", _pos_int,
       "segment.bytes of __consumer_offsets when it is created (kept smaller than other topics' "
       "so that the compacted log loads fast).", read_only=True),
    _d("group.consumer.session.timeout.ms", _I, "45000", _pos_int,
       "KIP-848 consumer group session timeout."),
    _d("group.consumer.min.session.timeout.ms", _I, "45000", _pos_int,
       "KIP-848: smallest allowed session timeout.", read_only=True),
    _d("group.consumer.max.session.timeout.ms", _I, "60000", _pos_int,
       "KIP-848: largest allowed session timeout.", read_only=True),
    _d("group.consumer.heartbeat.interval.ms", _I, "5000", _pos_int,
       "KIP-848 heartbeat interval given to members."),
    _d("group.consumer.min.heartbeat.interval.ms", _I, "5000", _pos_int,
       "KIP-848: smallest allowed heartbeat interval.", read_only=True),
    _d("group.consumer.max.heartbeat.interval.ms", _I, "15000", _pos_int,
       "KIP-848: largest allowed heartbeat interval.", read_only=True),
    _d("group.consumer.max.size", _I, str(INT_MAX), _pos_int,
       "Maximum members of a KIP-848 consumer group."),
    _d("group.consumer.migration.policy", _S, "bidirectional",
       _one_of("disabled", "upgrade", "downgrade", "bidirectional", case_insensitive=True),
       "KIP-848 online migration between classic and consumer groups: a non-empty classic "
       "group is upgraded when a consumer-protocol member joins it (upgrade), a consumer group "
       "whose last consumer-protocol member leaves is downgraded (downgrade).", read_only=True),
    _d("group.consumer.assignors", _LIST, "uniform,range", _list_of("uniform", "range"),
       "Server-side assignors; the first is the default.", read_only=True),
    # -- transaction coordinator (issue 11): Kafka's TransactionStateManagerConfig --
    _d("transaction.max.timeout.ms", _I, "900000", _pos_int,
       "Largest transaction timeout a transactional producer may ask for in InitProducerId; "
       "a larger one is refused with INVALID_TRANSACTION_TIMEOUT.", read_only=True),
    _d("transactional.id.expiration.ms", _I, "604800000", _pos_int,
       "A transactional id with no transaction in progress and no update for this long is "
       "expired (a tombstone is written to __transaction_state).", read_only=True),
    _d("transaction.state.log.num.partitions", _I, "50", _parse_int(1, 1000),
       "Partitions of __transaction_state (fixed once the topic exists).", read_only=True),
    _d("transaction.state.log.segment.bytes", _I, "104857600", _pos_int,
       "segment.bytes of __transaction_state when it is created (kept small so that the "
       "compacted log loads fast).", read_only=True),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", _I, "10000", _pos_int,
       "How often the coordinator aborts transactions open longer than their timeout.",
       read_only=True),
    _d("transaction.remove.expired.transaction.cleanup.interval.ms", _I, "3600000", _pos_int,
       "How often the coordinator removes expired transactional ids.", read_only=True),
    # -- share groups (KIP-932, issue 4): Kafka's GroupCoordinatorConfig / ShareGroupConfig --
    _d("group.share.session.timeout.ms", _I, "45000", _pos_int,
       "Share group session timeout: a member that sends no heartbeat for this long is removed "
       "and its acquired records are released. Overridable per group (share.session.timeout.ms)."),
    _d("group.share.min.session.timeout.ms", _I, "45000", _pos_int,
       "Smallest share.session.timeout.ms a group may be given.", read_only=True),
    _d("group.share.max.session.timeout.ms", _I, "60000", _pos_int,
       "Largest share.session.timeout.ms a group may be given.", read_only=True),
    _d("group.share.heartbeat.interval.ms", _I, "5000", _pos_int,
       "Heartbeat interval given to share group members. Overridable per group "
       "(share.heartbeat.interval.ms)."),
    _d("group.share.min.heartbeat.interval.ms", _I, "5000", _pos_int,
       "Smallest share.heartbeat.interval.ms a group may be given.", read_only=True),
    _d("group.share.max.heartbeat.interval.ms", _I, "15000", _pos_int,
       "Largest share.heartbeat.interval.ms a group may be given.", read_only=True),
    _d("group.share.max.size", _I, "200", _parse_int(1, 1000),
       "Maximum members of one share group; more get GROUP_MAX_SIZE_REACHED.", read_only=True),
    _d("group.share.assignors", _LIST, "simple",
       _list_of("simple", "org.apache.kafka.coordinator.group.assignor.SimpleAssignor"),
       "Share group assignor: only the built-in 'simple' assignor (also accepted by Kafka's "
       "class name).", read_only=True),
    _d("group.share.record.lock.duration.ms", _I, "30000", _parse_int(1000, 3600000),
       "How long a record acquired by a share consumer stays locked before it becomes available "
       "again. Overridable per group (share.record.lock.duration.ms)."),
    _d("group.share.min.record.lock.duration.ms", _I, "15000", _parse_int(1000, 30000),
       "Smallest share.record.lock.duration.ms a group may be given.", read_only=True),
    _d("group.share.max.record.lock.duration.ms", _I, "60000", _parse_int(30000, 3600000),
       "Largest share.record.lock.duration.ms a group may be given.", read_only=True),
    _d("group.share.delivery.count.limit", _I, "5", _parse_int(2, 10),
       "Delivery attempts after which a share-group record is archived (never delivered again). "
       "Overridable per group (share.delivery.count.limit)."),
    _d("group.share.min.delivery.count.limit", _I, "2", _parse_int(2, 5),
       "Smallest share.delivery.count.limit a group may be given.", read_only=True),
    _d("group.share.max.delivery.count.limit", _I, "10", _parse_int(5, 25),
       "Largest share.delivery.count.limit a group may be given.", read_only=True),
    _d("group.share.partition.max.record.locks", _I, "2000", _parse_int(100, 10000),
       "Record-lock cap: in-flight records (the window from the share-partition start offset "
       "to its end offset) per share-partition. A share-partition at the cap is not fetched; "
       "below it a ShareFetch acquires at most min(MaxRecords, cap - in-flight) records, "
       "rounded up to the end of the log batch in batch_optimized mode (exact in "
       "record_limit mode). Broker-wide, as in Kafka 4.2 (no group-level override)."),
    _d("group.share.max.share.sessions", _I, "2000", _pos_int,
       "Share sessions (ShareFetch sessions) this broker keeps; a new session beyond it gets "
       "SHARE_SESSION_LIMIT_REACHED.", read_only=True),
    _d("share.coordinator.state.topic.num.partitions", _I, "50", _parse_int(1, 1000),
       "Partitions of __share_group_state, where share-partition state is persisted (fixed once "
       "the topic exists; it is created on the first share-group write).", read_only=True),
    _d("share.coordinator.state.topic.segment.bytes", _I, "104857600", _pos_int,
       "segment.bytes of __share_group_state when it is created: records trimmed after a "
       "snapshot leave the disk when their segment is deleted, so a smaller segment frees "
       "space sooner at a low write rate.", read_only=True),
    _d("share.coordinator.snapshot.update.records.per.snapshot", _I, "500", _parse_int(0, 500),
       "Share-partition state updates (deltas) written between two snapshots of one "
       "share-partition.", read_only=True),
    _d("cluster.id", _S, None, _parse_str,
       "Cluster id; generated on first start and kept in meta.properties.", read_only=True),
    # -- Kafka configs that would switch on a feature snakka does not have: known, so that
    # setting them stops the broker at start instead of being ignored as unknown keys --
    # -- Tiered storage (KIP-405; docs/tiered-storage.md) --
    _d("remote.log.storage.system.enable", _B, "false", _parse_bool,
       "Tiered storage on this broker: the remote log manager, its metadata topic "
       "__remote_log_metadata and the remote storage backend (rsm.config.*) start. Topics "
       "then opt in with remote.storage.enable=true.", read_only=True),
    _d("remote.log.manager.task.interval.ms", _L, "30000", _pos_long,
       "How often the remote log manager looks for closed segments to copy and for remote "
       "segments to delete (retention), per tiered partition.", read_only=True),
    _d("remote.log.manager.task.retry.backoff.ms", _L, "500", _pos_long,
       "First wait before a failed copy or delete is tried again (doubles per failure).",
       read_only=True),
    _d("remote.log.manager.task.retry.backoff.max.ms", _L, "30000", _pos_long,
       "Longest wait between tries of a failed copy or delete (object store down).",
       read_only=True),
    _d("remote.log.manager.copier.thread.pool.size", _I, "10", _pos_int,
       "Threads that upload segments; at most one copy runs per partition (segments go up "
       "in offset order).", read_only=True),
    _d("remote.log.manager.expiration.thread.pool.size", _I, "10", _pos_int,
       "Threads that delete remote segments (retention, DeleteRecords, deleted topics).",
       read_only=True),
    _d("remote.log.manager.copy.max.bytes.per.second", _L, str(LONG_MAX), _pos_long,
       "Upload rate limit over all partitions (bytes/s). Dynamic: copies that start after a "
       "change are paced at the new rate.", read_only=True),
    _d("remote.log.manager.fetch.max.bytes.per.second", _L, str(LONG_MAX), _pos_long,
       "Rate of bytes read from remote storage for fetches, over all partitions (bytes/s; "
       "KIP-956). Measured over remote.log.manager.fetch.quota.window.num windows of "
       "remote.log.manager.fetch.quota.window.size.seconds; while above it, a fetch of a "
       "partition at an offset in remote storage gets no records and no error for that "
       "partition, as in Kafka (reads the reader's cache can answer are served). Dynamic.",
       read_only=True),
    _d("remote.log.manager.fetch.quota.window.num", _I, "11", _pos_int,
       "Samples the remote fetch rate is measured over.", read_only=True),
    _d("remote.log.manager.fetch.quota.window.size.seconds", _I, "1", _pos_int,
       "Length of one sample of the remote fetch rate, in seconds.", read_only=True),
    _d("remote.log.reader.threads", _I, "10", _pos_int,
       "Threads that read remote segments and indexes for fetches (off the event loop).",
       read_only=True),
    _d("remote.log.reader.max.pending.tasks", _I, "100", _pos_int,
       "Remote reads queued beyond the reader threads; a fetch that would queue more is "
       "answered without that partition's data and retries.", read_only=True),
    _d("remote.fetch.max.wait.ms", _I, "500", _pos_int,
       "Longest a fetch waits for remote data before it is answered without it.",
       read_only=True),
    _d("remote.list.offsets.request.timeout.ms", _I, "30000", _pos_int,
       "Longest a ListOffsets by timestamp waits for remote segments' indexes and data "
       "(then REQUEST_TIMED_OUT for that partition; a v10+ request's own timeout may be "
       "shorter).", read_only=True),
    _d("remote.log.index.file.cache.total.size.bytes", _L, "1073741824", _pos_long,
       "Memory for remote segments' indexes (offset, time, transaction) kept for reads.",
       read_only=True),
    _d("remote.log.metadata.custom.metadata.max.bytes", _I, "128", _nonneg_int,
       "Largest custom metadata a storage backend may attach to a remote segment; a copy "
       "whose metadata is larger is deleted and the partition's copying stops (logged).",
       read_only=True),
    _d("snakka.remote.log.reader.cache.bytes", _L, "67108864", _pos_long,
       "Memory for remote segment chunks read for fetches (LRU), with read-ahead of the "
       "next chunk for sequential readers.", read_only=True),
    _d("rlmm.config.remote.log.metadata.topic.num.partitions", _I, "50", _parse_int(1, 1000),
       "Partitions of __remote_log_metadata (fixed once the topic exists; it is created on "
       "the first remote copy).", read_only=True),
    _d("rlmm.config.remote.log.metadata.topic.retention.ms", _L, "-1", _long_m1,
       "Retention of __remote_log_metadata (-1: kept; the manager restates live segments "
       "and trims what they supersede).", read_only=True),
    _d("rsm.config.storage.backend", _S, "local", _one_of("local", "s3"),
       "Remote storage backend: 'local' (a directory: rsm.config.storage.root) or 's3' "
       "(any S3-compatible object store).", read_only=True),
    _d("rsm.config.storage.root", _S, "", _parse_str,
       "Directory of the local backend; empty: '<first log dir>-remote' beside the log "
       "dir.", read_only=True),
    _d("rsm.config.key.prefix", _S, "", _parse_str,
       "Prefix of every object key (share one bucket between clusters).", read_only=True),
    _d("rsm.config.chunk.size", _I, "4194304", _parse_int(65536, 1 << 30),
       "Remote segments are read, checksummed (CRC32C) and cached in chunks of this size.",
       read_only=True),
    _d("rsm.config.storage.s3.bucket.name", _S, "", _parse_str,
       "S3 bucket (backend s3).", read_only=True),
    _d("rsm.config.storage.s3.endpoint.url", _S, "", _parse_str,
       "S3 endpoint, e.g. http://127.0.0.1:9000 for MinIO; empty: AWS for the region.",
       read_only=True),
    _d("rsm.config.storage.s3.region", _S, "us-east-1", _parse_str, "S3 region.",
       read_only=True),
    _d("rsm.config.storage.s3.path.style.access.enabled", _B, "false", _parse_bool,
       "Path-style S3 URLs (MinIO, Ceph RGW, most non-AWS servers).", read_only=True),
    _d("rsm.config.storage.aws.access.key.id", _S, "", _parse_str,
       "S3 access key; empty: the AWS environment variables / credential chain.",
       read_only=True),
    _d("rsm.config.storage.aws.secret.access.key", ConfigType.PASSWORD, "", _parse_str,
       "S3 secret key; empty: the AWS environment variables / credential chain.",
       read_only=True, sensitive=True),
    _d("rsm.config.storage.s3.multipart.upload.part.size", _I, "26214400",
       _parse_int(5 << 20, 1 << 30),
       "Objects larger than this are uploaded in parts of this size (S3 multipart).",
       read_only=True),
    _d("rsm.config.storage.retry.max.attempts", _I, "5", _pos_int,
       "Tries of one object-store call before the copy or read fails (and the remote log "
       "manager backs off).", read_only=True),
    _d("rsm.config.storage.retry.backoff.ms", _L, "100", _pos_long,
       "First wait between tries of one object-store call (doubles per try).",
       read_only=True),
    _d("rsm.config.storage.retry.backoff.max.ms", _L, "10000", _pos_long,
       "Longest wait between two tries of one object-store call.", read_only=True),
    _d("rsm.config.storage.s3.multipart.upload.concurrency", _I, "2", _parse_int(1, 64),
       "Parts of one multipart upload sent at once.", read_only=True),
    _d("rsm.config.storage.s3.connect.timeout.ms", _L, "10000", _pos_long,
       "Longest wait for a connection to the S3 endpoint (then the try fails and is retried).",
       read_only=True),
    _d("rsm.config.storage.s3.request.timeout.ms", _L, "120000", _pos_long,
       "Longest one S3 request may take (a part of a multipart upload included).",
       read_only=True),
    # -- Metrics (issue 16: server/metrics.py, docs/metrics.md). Kafka has no such names (it
    # exposes JMX); these are snakka's. ``snakka serve`` turns the endpoint on at 9404 unless
    # metrics.port is set; the embedded broker leaves it off.
    _d("metrics.port", _I, "-1", _parse_int(-1, 65535),
       "Port of the Prometheus metrics endpoint (HTTP GET /metrics): -1 off (the default of "
       "the embedded broker; `snakka serve` uses 9404 unless set), 0 an ephemeral port. "
       "snakka-specific.", read_only=True),
    # KIP-714 client metrics (telemetry/, docs/metrics.md): served with the endpoint above.
    _d("telemetry.max.bytes", _I, "1048576", _pos_int,
       "The maximum size (after compression, if compression is used) of telemetry metrics "
       "pushed from a client to the broker (PushTelemetry beyond it: TELEMETRY_TOO_LARGE).",
       read_only=True),
    _d("snakka.client.metrics.retention.ms", _L, "600000", _pos_long,
       "How long the metrics a client pushed (KIP-714) stay on the metrics endpoint after its "
       "last push; a client that stopped pushing is then dropped with all its series. "
       "snakka-specific.", read_only=True),
    _d("snakka.client.metrics.max.series", _I, "20000", _pos_int,
       "The most client-metric series (KIP-714 pushes, over all clients) the metrics endpoint "
       "keeps; new series beyond it are dropped and counted "
       "(snakka_client_metrics_dropped_series_total). snakka-specific.", read_only=True),
    _d("metrics.host", _S, "localhost", _parse_str,
       "Address the metrics endpoint binds ('localhost': loopback only; empty: all "
       "interfaces). snakka-specific.", read_only=True),
    # -- Web console (issue 16: src/snakka/console, docs/console.md). snakka's names (Kafka
    # has no console); ``snakka serve`` turns it on at 9021 unless console.port is set, the
    # embedded broker leaves it off (as metrics.port).
    _d("console.port", _I, "-1", _parse_int(-1, 65535),
       "Port of the web console (HTTP): -1 off (the default of the embedded broker; `snakka "
       "serve` uses 9021 unless set), 0 an ephemeral port. snakka-specific.", read_only=True),
    _d("console.host", _S, "localhost", _parse_str,
       "Address the web console binds ('localhost': loopback only; empty: all interfaces). "
       "With a SASL listener the console asks for a SASL user's name and password (HTTP "
       "Basic: use TLS in front of it when it is reachable from other hosts). "
       "snakka-specific.", read_only=True),
    _d("console.read.only", _B, "false", _parse_bool,
       "Web console without actions: no producing, offset resets or record deletion (pages "
       "and the JSON API only). snakka-specific.", read_only=True),
    # -- Authorization (ACLs: security/acl_authorizer.py, docs/security.md) --------------
    _d("authorizer.class.name", _S, "", _one_of(
        "", *STANDARD_AUTHORIZER_CLASSES, message="Unknown authorizer (empty: none, every "
        "request is allowed; or org.apache.kafka.metadata.authorizer.StandardAuthorizer)"),
       "Authorizer: empty (none: every request is allowed, the ACL APIs answer "
       "SECURITY_DISABLED) or org.apache.kafka.metadata.authorizer.StandardAuthorizer "
       "(ACLs kept in the metadata log; snakka.security.StandardAuthorizer is the same). Any "
       "other class is refused at start.", read_only=True),
    _d("super.users", _S, "", _parse_super_users_config,
       "Principals allowed everything whatever the ACLs say, separated by ';' (e.g. "
       "User:admin;User:ANONYMOUS). Used by the StandardAuthorizer.", read_only=True),
    _d("allow.everyone.if.no.acl.found", _B, "false", _parse_bool,
       "With the StandardAuthorizer: whether an action on a resource that has no ACL at all "
       "is allowed (a resource with ACLs, none matching, is always denied).", read_only=True),
]

# -- SASL (issue 14) -------------------------------------------------------------------------
# Kafka's names. Per-listener forms (Kafka's ListenerName.saslMechanismConfigPrefix):
# ``listener.name.<listener>.sasl.enabled.mechanisms`` and
# ``listener.name.<listener>.<mechanism lower-case>.sasl.jaas.config`` override the global keys
# for one listener (read with BrokerConfig.listener_sasl_value). snakka.security.sasl builds
# the mechanisms from them.
SASL_MECHANISMS_SUPPORTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_LISTENER_SASL_KEY = re.compile(
    r"^listener\.name\.[A-Za-z0-9_]+\.(?:sasl\.enabled\.mechanisms|"
    r"(?:plain|scram-sha-256|scram-sha-512|oauthbearer)\.sasl\.jaas\.config|"
    r"(?:plain|scram-sha-256|scram-sha-512|oauthbearer)\.sasl\.server\.callback\.handler\.class"
    r"|oauthbearer\.sasl\.oauthbearer\.[a-z.]+)$")


def is_listener_sasl_key(name: str) -> bool:
    """A per-listener SASL override (``listener.name.<l>.sasl.enabled.mechanisms``, ...)."""
    return bool(_LISTENER_SASL_KEY.match(name))


_SASL_CONFIGS: list[ConfigDef] = [
    _d("sasl.enabled.mechanisms", _LIST, "GSSAPI", _parse_list,
       "SASL mechanisms a SASL listener offers (Kafka's default GSSAPI is refused at start: "
       "snakka serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER).", read_only=True),
    _d("sasl.mechanism.inter.broker.protocol", _S, "GSSAPI", _parse_str,
       "Accepted for compatibility (a single broker has no inter-broker connections).",
       read_only=True),
    _d("sasl.jaas.config", ConfigType.PASSWORD, None, _parse_str,
       "JAAS login module line used when no listener.name.<l>.<mechanism>.sasl.jaas.config "
       "is set (PLAIN users: user_<name>=\"<password>\").", read_only=True, sensitive=True),
    _d("connections.max.reauth.ms", _L, "0", _nonneg_long,
       "KIP-368: a SASL session's lifetime (0: sessions never expire). A connection whose "
       "session expired must re-authenticate before any other request.", read_only=True),
    _d("connection.failed.authentication.delay.ms", _I, "100", _nonneg_int,
       "How long the answer to a failed authentication (and the close) is delayed.",
       read_only=True),
    _d("sasl.oauthbearer.jwks.endpoint.url", _S, "", _parse_str,
       "JWKS (file://, http://, https://) that OAUTHBEARER tokens are verified against; empty: "
       "Kafka's unsecured JWS validator (development only).", read_only=True),
    _d("sasl.oauthbearer.jwks.endpoint.refresh.ms", _L, "3600000", _pos_long,
       "How often an http(s) JWKS is fetched again (in the background; a file:// JWKS is "
       "re-read when the file changes). A token whose kid is unknown also starts a fetch at "
       "once (at most one per key id a minute); that token is refused.", read_only=True),
    _d("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", _L, "100", _nonneg_long,
       "First wait before retrying a failed JWKS fetch; each retry doubles it.",
       read_only=True),
    _d("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", _L, "10000", _nonneg_long,
       "How long a failed JWKS fetch is retried in all (the keys already known stay in use).",
       read_only=True),
    _d("sasl.oauthbearer.expected.audience", _LIST, "", _parse_list,
       "Audiences a token's aud claim must contain one of (empty: not checked).",
       read_only=True),
    _d("sasl.oauthbearer.expected.issuer", _S, "", _parse_str,
       "The iss claim a token must have (empty: not checked).", read_only=True),
    _d("sasl.oauthbearer.sub.claim.name", _S, "sub", _parse_str,
       "The claim naming the principal.", read_only=True),
    _d("sasl.oauthbearer.scope.claim.name", _S, "scope", _parse_str,
       "The claim holding the token's scopes.", read_only=True),
    _d("sasl.oauthbearer.clock.skew.seconds", _I, "30", _nonneg_int,
       "Clock difference allowed when checking exp/iat/nbf.", read_only=True),
]
_BROKER_LIST += _SASL_CONFIGS
# -- end of SASL ---------------------------------------------------------------------------


# Broker synonyms of topic configs; their defaults are the topic defaults except where Kafka's
# broker default is expressed in another unit.
for _t in TOPIC_CONFIGS.values():
    if _t.broker_synonym and _t.broker_synonym not in {d.name for d in _BROKER_LIST}:
        _BROKER_LIST.append(
            ConfigDef(_t.broker_synonym, _t.type, _t.default,
                      _t.parse,
                      f"Default for topic config {_t.name}: {_t.doc}")
        )

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _BROKER_LIST}
# Kafka expresses the retention/roll defaults in hours; log.retention.ms/log.roll.ms are unset.
BROKER_CONFIGS["log.retention.ms"] = ConfigDef(
    "log.retention.ms", _L, None, _any_long,
    "Retention in ms (overrides minutes/hours; negative: no limit).")
BROKER_CONFIGS["log.roll.ms"] = ConfigDef(
    "log.roll.ms", _L, None, _pos_long, "Segment roll time in ms (overrides hours).")
BROKER_CONFIGS["log.flush.interval.ms"] = ConfigDef(
    "log.flush.interval.ms", _L, None, _nonneg_long,
    "Maximum time data may stay un-fsynced; defaults to log.flush.scheduler.interval.ms.")


def broker_default(name: str) -> object:
    """The parsed default of broker config ``name``. The table above is the one place a default
    is written: a core's own fallback values (``GroupConfig``, ``SharePartitionConfig``, the
    producer-state expiry) read it from here instead of repeating the number."""
    d = BROKER_CONFIGS[name]
    return d.value(d.default)


def broker_default_int(name: str) -> int:
    """:func:`broker_default` of an INT/LONG config (TypeError for any other type)."""
    v = broker_default(name)
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{name} has no integer default")
    return v

# Kafka 4.0's dynamic broker configs (DynamicBrokerConfig.AllDynamicConfigs, as its
# DescribeConfigs reports them with read_only=false, plus the broker quota rates of
# DynamicConfig.Broker). DescribeConfigs(BROKER) answers read_only from this set, and only these
# may be set on a BROKER resource; a SET of any other config Kafka (or snakka) knows is refused
# with INVALID_REQUEST "Cannot update these configs dynamically". Names neither knows are
# accepted and stored, as Kafka keeps custom configs for plugins.
KAFKA_DYNAMIC_BROKER_CONFIGS = frozenset({
    "background.threads", "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "listener.security.protocol.map", "listeners",
    "log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size", "log.cleaner.delete.retention.ms",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second", "log.cleaner.max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio", "log.cleaner.min.compaction.lag.ms", "log.cleaner.threads",
    "log.cleanup.policy", "log.flush.interval.messages", "log.flush.interval.ms",
    "log.index.interval.bytes", "log.index.size.max.bytes", "log.local.retention.bytes",
    "log.local.retention.ms", "log.message.timestamp.after.max.ms",
    "log.message.timestamp.before.max.ms", "log.message.timestamp.type", "log.preallocate",
    "log.retention.bytes", "log.retention.ms", "log.roll.jitter.ms", "log.roll.ms",
    "log.segment.bytes", "log.segment.delete.delay.ms", "max.connection.creation.rate",
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
    "message.max.bytes", "metric.reporters", "min.insync.replicas", "num.io.threads",
    "num.network.threads", "num.recovery.threads.per.data.dir", "num.replica.fetchers",
    "principal.builder.class", "producer.id.expiration.ms", "remote.fetch.max.wait.ms",
    "remote.list.offsets.request.timeout.ms", "remote.log.index.file.cache.total.size.bytes",
    "remote.log.manager.copier.thread.pool.size", "remote.log.manager.copy.max.bytes.per.second",
    "remote.log.manager.expiration.thread.pool.size",
    "remote.log.manager.fetch.max.bytes.per.second", "remote.log.reader.threads",
    "sasl.enabled.mechanisms", "sasl.jaas.config", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.kerberos.service.name", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.login.refresh.buffer.seconds",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.mechanism.inter.broker.protocol",
    "ssl.cipher.suites", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.endpoint.identification.algorithm", "ssl.engine.factory.class", "ssl.key.password",
    "ssl.keymanager.algorithm", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.type", "ssl.protocol",
    "ssl.provider", "ssl.secure.random.implementation", "ssl.trustmanager.algorithm",
    "ssl.truststore.certificates", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.type", "transaction.partition.verification.enable",
    "unclean.leader.election.enable",
    # DynamicConfig.Broker's quota configs (not KafkaConfig keys, so not described by Kafka)
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
})

# Kafka-dynamic configs snakka cannot apply at run time (it has no such thread pool, or its
# listeners, SASL and unprefixed SSL settings are fixed at start): a change is refused with
# INVALID_REQUEST, Kafka's code for a reconfiguration it cannot make, rather than stored
# without effect. docs/configuration.md lists them as a known gap.
UNAPPLIED_DYNAMIC_BROKER_CONFIGS = frozenset({
    "background.threads", "metric.reporters", "num.io.threads", "num.network.threads",
    "num.recovery.threads.per.data.dir", "num.replica.fetchers", "principal.builder.class",
    "transaction.partition.verification.enable", "listeners",
    "listener.security.protocol.map",
    # snakka runs one cleaner thread (storage/cleaner/manager.py)
    "log.cleaner.threads",
    # tiered storage's thread pools and index cache are built at start (remote/manager.py)
    "remote.log.index.file.cache.total.size.bytes",
    "remote.log.manager.copier.thread.pool.size",
    "remote.log.manager.expiration.thread.pool.size", "remote.log.reader.threads",
} | {n for n in KAFKA_DYNAMIC_BROKER_CONFIGS if n.startswith(("sasl.", "ssl."))})

# What IncrementalAlterConfigs / AlterConfigs on a BROKER resource really change at run time:
# the cluster-wide defaults of topic configs (applied to every partition log at once), the
# producer-id expiry, the replication throttles, the broker-wide connection limits
# (max.connections, max.connections.per.ip + overrides, max.connection.creation.rate: the
# broker's _ConnectionLimits pushes them to server/quotas.py and the listeners; per-listener
# ones stay static), the log cleaner's backoff, buffers
# and I/O rate (the broker's _CleanerReconfigure: LogCleaner.reconfigure), and
# remote.fetch.max.wait.ms / remote.list.offsets.request.timeout.ms (read per request).
# Per-listener SSL key and trust stores are separate (LISTENER_RECONFIGURABLE_SSL_CONFIGS).
DYNAMIC_BROKER_CONFIGS = KAFKA_DYNAMIC_BROKER_CONFIGS - UNAPPLIED_DYNAMIC_BROKER_CONFIGS

# Kafka's DynamicBrokerConfig.PerBrokerConfigs: settable on one broker's resource only, never as
# the cluster default (its listener and security configs, except the cluster-level connection
# limits).
PER_BROKER_DYNAMIC_CONFIGS = frozenset(
    {n for n in KAFKA_DYNAMIC_BROKER_CONFIGS if n.startswith(("sasl.", "ssl."))}
    | {"listeners", "advertised.listeners", "listener.security.protocol.map",
       "principal.builder.class"})


# Kafka 4.0's static broker configs that snakka does not define (its DescribeConfigs lists them
# read_only): a SET of one is refused as Kafka refuses it ("Cannot update these configs
# dynamically"), not stored as a custom config.
KAFKA_ONLY_STATIC_BROKER_CONFIGS = frozenset({
    "add.partitions.to.txn.retry.backoff.max.ms", "add.partitions.to.txn.retry.backoff.ms",
    "alter.config.policy.class.name", "alter.log.dirs.replication.quota.window.num",
    "alter.log.dirs.replication.quota.window.size.seconds", "auto.leader.rebalance.enable",
    "broker.heartbeat.interval.ms", "broker.rack", "broker.session.timeout.ms",
    "client.quota.callback.class", "controlled.shutdown.enable", "controller.listener.names",
    "controller.quorum.append.linger.ms", "controller.quorum.bootstrap.servers",
    "controller.quorum.election.backoff.max.ms", "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.timeout.ms", "controller.quorum.request.timeout.ms",
    "controller.quorum.retry.backoff.ms", "controller.quorum.voters",
    "controller.socket.timeout.ms", "create.topic.policy.class.name",
    "delegation.token.expiry.check.interval.ms", "delegation.token.expiry.time.ms",
    "delegation.token.max.lifetime.ms", "delegation.token.secret.key",
    "delete.records.purgatory.purge.interval.requests", "early.start.listeners",
    "fetch.purgatory.purge.interval.requests", "group.coordinator.append.linger.ms",
    "group.coordinator.rebalance.protocols", "group.coordinator.threads", "group.share.enable",
    "group.share.max.groups", "initial.broker.registration.timeout.ms",
    "inter.broker.listener.name", "kafka.metrics.polling.interval.secs",
    "kafka.metrics.reporters", "leader.imbalance.check.interval.seconds",
    "log.dir.failure.timeout.ms", "log.roll.jitter.hours", "max.request.partition.size.limit",
    "metadata.log.dir", "metadata.log.max.record.bytes.between.snapshots",
    "metadata.log.max.snapshot.interval.ms", "metadata.log.segment.bytes",
    "metadata.log.segment.ms", "metadata.max.idle.interval.ms", "metadata.max.retention.bytes",
    "metadata.max.retention.ms", "metrics.num.samples", "metrics.recording.level",
    "metrics.sample.window.ms", "num.replica.alter.log.dirs.threads",
    "offsets.commit.timeout.ms", "offsets.load.buffer.size", "offsets.topic.compression.codec",
    "offsets.topic.replication.factor", "offsets.topic.segment.bytes", "process.roles",
    "producer.purgatory.purge.interval.requests", "queued.max.request.bytes",
    "remote.log.manager.copy.quota.window.num",
    "remote.log.manager.copy.quota.window.size.seconds",
    "remote.log.manager.thread.pool.size", "remote.log.metadata.manager.class.name",
    "remote.log.metadata.manager.class.path", "remote.log.metadata.manager.impl.prefix",
    "remote.log.metadata.manager.listener.name", "remote.log.storage.manager.class.name",
    "remote.log.storage.manager.class.path", "remote.log.storage.manager.impl.prefix",
    "replica.fetch.backoff.ms", "replica.fetch.max.bytes", "replica.fetch.min.bytes",
    "replica.fetch.response.max.bytes", "replica.fetch.wait.max.ms",
    "replica.high.watermark.checkpoint.interval.ms", "replica.lag.time.max.ms",
    "replica.selector.class", "replica.socket.receive.buffer.bytes",
    "replica.socket.timeout.ms", "replication.quota.window.num",
    "replication.quota.window.size.seconds", "request.timeout.ms",
    "sasl.client.callback.handler.class", "sasl.login.callback.handler.class",
    "sasl.login.class", "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms",
    "sasl.login.retry.backoff.max.ms", "sasl.login.retry.backoff.ms",
    "sasl.mechanism.controller.protocol", "sasl.oauthbearer.token.endpoint.url",
    "sasl.server.callback.handler.class", "sasl.server.max.receive.size",
    "security.inter.broker.protocol", "security.providers",
    "share.coordinator.append.linger.ms", "share.coordinator.load.buffer.size",
    "share.coordinator.state.topic.compression.codec", "share.coordinator.state.topic.min.isr",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.segment.bytes", "share.coordinator.threads",
    "share.coordinator.write.timeout.ms", "share.fetch.purgatory.purge.interval.requests",
    "socket.connection.setup.timeout.max.ms", "socket.connection.setup.timeout.ms",
    "socket.listen.backlog.size", "socket.receive.buffer.bytes", "socket.send.buffer.bytes",
    "transaction.state.log.load.buffer.size", "transaction.state.log.min.isr",
    "transaction.state.log.replication.factor", "transaction.state.log.segment.bytes",
    "unstable.api.versions.enable",
})


def is_static_broker_config(name: str) -> bool:
    """A config Kafka (or snakka) defines and does not let change at run time."""
    return ((name in BROKER_CONFIGS or name in KAFKA_ONLY_STATIC_BROKER_CONFIGS)
            and name not in KAFKA_DYNAMIC_BROKER_CONFIGS
            and dynamic_listener_ssl_config(name) is None)


def ignored_dynamic_broker_config(name: str) -> bool:
    """A dynamic broker config (from the metadata log) the broker does not apply: one Kafka
    defines as static, e.g. ``num.partitions``, ``auto.create.topics.enable`` or
    ``fetch.max.bytes`` stored by an older snakka that let them change at run time.
    ConfigResolver skips it, as Kafka drops invalid dynamic configs
    (DynamicBrokerConfig.removeInvalidConfigs); the broker logs it at start."""
    return (name in BROKER_CONFIGS and name not in KAFKA_DYNAMIC_BROKER_CONFIGS
            and dynamic_listener_ssl_config(name) is None)


def apply_config_changes(before: Mapping[str, str], changes: Mapping[str, str | None],
                         replace: bool) -> dict[str, str]:
    """A resource's overrides after an alteration: ``changes`` maps a config to its new value
    or None (delete); ``replace`` (legacy AlterConfigs) drops every override not given."""
    after = {} if replace else dict(before)
    for k, v in changes.items():
        if v is None:
            after.pop(k, None)
        else:
            after[k] = v
    return after


# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: the key and trust store configs of a listener,
# changed at run time only per broker and per listener (``listener.name.<l>.<config>`` on the
# BROKER resource named by the node id; KIP-226). security/ssl_reload.py validates and applies.
LISTENER_RECONFIGURABLE_SSL_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
})


def dynamic_listener_ssl_config(key: str) -> tuple[str, str] | None:
    """``listener.name.ssl.ssl.keystore.location`` -> ("SSL", "ssl.keystore.location") when
    ``key`` is a per-listener reconfigurable SSL config, else None."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    listener, config = split_listener_key(key)
    if not listener or config not in LISTENER_RECONFIGURABLE_SSL_CONFIGS:
        return None
    return listener, config


# group config -> (broker config of its smallest allowed value, of its largest)
GROUP_CONFIG_BOUNDS: dict[str, tuple[str, str]] = {
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms",
                                 "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms",
                                    "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
    "share.delivery.count.limit": ("group.share.min.delivery.count.limit",
                                   "group.share.max.delivery.count.limit"),
}

# Kafka group configs snakka does not apply (yet); rejected with a message saying so instead of
# being stored without effect.
UNSUPPORTED_GROUP_CONFIGS = frozenset({
    "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms",
    "consumer.assignment.interval.ms", "consumer.assignor.offload.enable",
    "share.assignment.interval.ms", "share.assignor.offload.enable",
    "streams.session.timeout.ms", "streams.heartbeat.interval.ms",
    "streams.num.standby.replicas", "streams.initial.rebalance.delay.ms",
    "errors.deadletterqueue.topic.name", "errors.deadletterqueue.copy.record.enable",
})

_DURATION_RE = re.compile(
    r"^P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<s>\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def parse_iso_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Java's ``Duration.parse`` accepts it (PnDTnHnMn.nS, no
    negative values) in milliseconds; raises ValueError otherwise."""
    m = _DURATION_RE.match(text.strip())
    if not m or not any(m.group(k) for k in "dhms") or text.strip().upper().endswith("T"):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    secs = (float(m["d"] or 0) * 86400 + float(m["h"] or 0) * 3600 + float(m["m"] or 0) * 60
            + float(m["s"] or 0))
    return int(round(secs * 1000))


def parse_share_auto_offset_reset(name: str, s: str) -> str:
    """``latest`` | ``earliest`` | ``by_duration:<ISO-8601 duration>`` (Kafka's
    ShareGroupAutoOffsetResetStrategy: case-insensitive strategy, non-negative duration)."""
    v = s.strip()
    low = v.lower()
    if low in ("latest", "earliest"):
        return low
    if low.startswith("by_duration:"):
        dur = v.split(":", 1)[1].strip()
        if dur.startswith("-"):
            raise ConfigError(name, s, "Negative duration is not supported.")
        try:
            parse_iso_duration_ms(dur)
        except ValueError:
            raise ConfigError(name, s, "Unable to parse duration string. Use the ISO-8601 "
                              "format (PnDTnHnMn.nS).") from None
        return "by_duration:" + dur
    raise ConfigError(name, s, "Invalid value for share.auto.offset.reset: expected latest, "
                      "earliest or by_duration:<ISO-8601 duration>")


# Group-level dynamic configs (Kafka's GroupConfig; DescribeConfigs / IncrementalAlterConfigs
# on resource type GROUP). Each falls back to its broker synonym; the int ones must also lie
# within the broker's [min, max] bounds named in GROUP_CONFIG_BOUNDS.
GROUP_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        _d("share.session.timeout.ms", _I, "45000", _pos_int,
           "Share group session timeout.", broker_synonym="group.share.session.timeout.ms"),
        _d("share.heartbeat.interval.ms", _I, "5000", _pos_int,
           "Share group heartbeat interval.", broker_synonym="group.share.heartbeat.interval.ms"),
        _d("share.record.lock.duration.ms", _I, "30000", _parse_int(1000, INT_MAX),
           "Record acquisition lock duration of the share group.",
           broker_synonym="group.share.record.lock.duration.ms"),
        _d("share.delivery.count.limit", _I, "5", _parse_int(2, INT_MAX),
           "Delivery attempts after which a record of the share group is archived.",
           broker_synonym="group.share.delivery.count.limit"),
        _d("share.auto.offset.reset", _S, "latest", parse_share_auto_offset_reset,
           "Where a new share-partition starts: latest, earliest, or by_duration:<ISO-8601 "
           "duration> (the first record written at or after now minus the duration)."),
        _d("share.isolation.level", _S, "read_uncommitted",
           _one_of("read_committed", "read_uncommitted"),
           "read_committed delivers only committed transactional records."),
        _d("share.renew.acknowledge.enable", _B, "true", _parse_bool,
           "Whether share consumers of the group may renew acquisition locks (KIP-1222)."),
    ]
}


def validate_group_configs(changes: Mapping[str, str | None],
                           broker_value: Callable[[str], str | None],
                           current: Mapping[str, str]) -> None:
    """Raise ConfigError for an unknown, unsupported or out-of-range group config.

    ``broker_value`` supplies the broker's bounds and defaults; ``current`` the group's existing
    overrides (for the session-timeout > heartbeat-interval rule, checked on the result)."""
    for k, v in changes.items():
        d = GROUP_CONFIGS.get(k)
        if d is None:
            if k in UNSUPPORTED_GROUP_CONFIGS:
                raise ConfigError(k, v, "this group config is not supported by snakka "
                                  "(it would have no effect)")
            raise ConfigError(k, v, "Unknown group config name")
        if v is None:
            continue
        parsed = d.value(v)
        bounds = GROUP_CONFIG_BOUNDS.get(k)
        if bounds is not None:
            lo, hi = (int(broker_value(b) or BROKER_CONFIGS[b].default or 0) for b in bounds)
            if not lo <= int(parsed) <= hi:  # type: ignore[call-overload]
                raise ConfigError(k, v, f"{k} must be in the range {lo} to {hi} inclusive.")
    merged = dict(current)
    for k, v in changes.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    if "share.session.timeout.ms" in changes or "share.heartbeat.interval.ms" in changes:
        session = int(merged.get("share.session.timeout.ms")
                      or broker_value("group.share.session.timeout.ms") or 45000)
        heartbeat = int(merged.get("share.heartbeat.interval.ms")
                        or broker_value("group.share.heartbeat.interval.ms") or 5000)
        if session <= heartbeat:
            raise ConfigError("share.session.timeout.ms", session,
                              "share.session.timeout.ms must be greater than "
                              "share.heartbeat.interval.ms")


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties text (key=value or key: value, # and ! comments, trailing-backslash
    continuation lines) as a dict: server.properties, and the client configs of the CLI's
    --command-config."""
    props: dict[str, str] = {}
    cont = ""
    for raw in text.splitlines():
        line = cont + raw.strip()
        cont = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            cont = line[:-1]
            continue
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not m:
            props[line] = ""
            continue
        props[m[1]] = m[2]
    return props


# Per-listener overrides: listener.name.<listener name>.<config> (Kafka's ListenerName prefix).
LISTENER_PREFIX = "listener.name."
# Broker configs (besides every ssl.* one, security/ssl.py, and the SASL keys of
# is_listener_sasl_key) that snakka applies per listener when set as listener.name.<l>.<config>:
# the connection limits (server/quotas.py).
PER_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate"})


def split_listener_key(key: str) -> tuple[str, str]:
    """``listener.name.internal.ssl.keystore.location`` -> ("INTERNAL", "ssl.keystore.location")
    (listener names have no dots)."""
    name, _, config = key[len(LISTENER_PREFIX):].partition(".")
    return name.upper(), config


_LISTENER_RE = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str  # '' = all interfaces; IPv6 without brackets
    port: int

    @classmethod
    def parse(cls, s: str) -> Listener:
        m = _LISTENER_RE.match(s.strip())
        if not m:
            raise ConfigError("listeners", s, "Expected NAME://host:port")
        host = m["host"]
        if host.startswith("["):
            host = host[1:-1]
        port = int(m["port"])
        if not 0 <= port <= 65535:
            raise ConfigError("listeners", s, "Port out of range")
        return cls(m["name"].upper(), host, port)

    def __str__(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{h}:{self.port}"


@dataclass
class BrokerConfig:
    """The broker's static configuration (server.properties + command-line overrides).

    ``overrides`` holds what the user set; everything else is the default. Dynamic changes made
    through AlterConfigs live in the metadata log, not here (see metadata.ClusterMetadata).
    """

    overrides: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for k, v in list(self.overrides.items()):
            d = BROKER_CONFIGS.get(k)
            if d is None and k.startswith(LISTENER_PREFIX):
                d = BROKER_CONFIGS.get(split_listener_key(k)[1])  # listener.name.<l>.<config>
            if d is None:
                # Kafka logs unknown configs and carries on; so do we (see serve's log line).
                continue
            d.parse(k, v)  # validate now, naming the key as set (listener.name.<l>.* too)
        self.listeners  # noqa: B018 - validate listener syntax eagerly
        self._check_listener_security()
        if len(self.log_dirs) > 1:
            raise ConfigError("log.dirs", ",".join(self.log_dirs),
                              "snakka keeps every partition in one log directory; several "
                              "(JBOD) are not supported")
        if self.default_replication_factor != 1:
            raise ConfigError("default.replication.factor", self.default_replication_factor,
                              "a single snakka broker can only hold replication factor 1")
        self._check_share_group_bounds()
        if self.int("max.connections.per.ip") == 0 and not self.raw(
                "max.connections.per.ip.overrides"):
            raise ConfigError("max.connections.per.ip", 0, "max.connections.per.ip can be set to "
                              "zero only if max.connections.per.ip.overrides is set")

    def listener_security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener (Kafka: listener.security.protocol.map)."""
        mapping = self.get("listener.security.protocol.map")
        assert isinstance(mapping, dict)
        proto = mapping.get(listener_name.upper())
        if proto is None:
            raise ConfigError("listener.security.protocol.map", self.raw(
                "listener.security.protocol.map"), f"No security protocol defined for "
                f"listener {listener_name}")
        return proto

    def _check_listener_security(self) -> None:
        """Every listener has a security protocol (listener.security.protocol.map; all four
        are served: TLS in server/listener.py and security/ssl.py, SASL in security/sasl/), and
        every advertised listener is a listener."""
        for listener in self.listeners:
            self.listener_security_protocol(listener.name)  # raises for a name with none
        names = {listener.name for listener in self.listeners}
        for adv in (self.advertised_listeners if self.raw("advertised.listeners") else []):
            if adv.name not in names:
                raise ConfigError("advertised.listeners", self.raw("advertised.listeners"),
                                  f"advertised listener {adv.name} is not in listeners (Kafka: "
                                  "advertised listener names must be a subset of listeners)")

    def listener_raw(self, listener_name: str, name: str) -> str | None:
        """A config for one listener: ``listener.name.<listener>.<name>`` when set (Kafka's
        rule: the listener's override wins), else the broker-wide value."""
        prefixed = f"{LISTENER_PREFIX}{listener_name.lower()}.{name}"
        for k, v in self.overrides.items():
            if k.lower() == prefixed.lower() and k.startswith(LISTENER_PREFIX):
                return v
        if name in BROKER_CONFIGS:
            return self.raw(name)
        return self.overrides.get(name)

    def listener_sasl_value(self, listener_name: str, key: str,
                            mechanism: str | None = None) -> str | None:
        """A SASL setting of one listener: ``listener.name.<l>.[<mech>.]<key>``, else the
        broker-wide ``<key>`` (SASL block above)."""
        prefix = f"listener.name.{listener_name.lower()}."
        if mechanism is not None:
            prefix += mechanism.lower() + "."
        if prefix + key in self.overrides:
            return self.overrides[prefix + key]
        return self.raw(key) if key in BROKER_CONFIGS else None

    def _check_share_group_bounds(self) -> None:
        """Kafka refuses to start when a group.share.* default lies outside its own
        group.share.min.* / group.share.max.* bounds; so does snakka."""
        for group_name, (lo_key, hi_key) in GROUP_CONFIG_BOUNDS.items():
            key = GROUP_CONFIGS[group_name].broker_synonym
            assert key is not None
            lo, hi, v = self.int(lo_key), self.int(hi_key), self.int(key)
            if lo > hi:
                raise ConfigError(hi_key, hi, f"{hi_key} must be greater than or equal to "
                                  f"{lo_key}")
            if not lo <= v <= hi:
                raise ConfigError(key, v, f"{key} must be in the range {lo_key} ({lo}) to "
                                  f"{hi_key} ({hi})")
        if self.int("group.share.heartbeat.interval.ms") >= self.int(
                "group.share.session.timeout.ms"):
            raise ConfigError("group.share.heartbeat.interval.ms",
                              self.int("group.share.heartbeat.interval.ms"),
                              "group.share.heartbeat.interval.ms must be less than "
                              "group.share.session.timeout.ms")
        if self.int("group.share.max.share.sessions") < self.int("group.share.max.size"):
            raise ConfigError("group.share.max.share.sessions",
                              self.int("group.share.max.share.sessions"),
                              "group.share.max.share.sessions must be greater than or equal to "
                              "group.share.max.size")

    @classmethod
    def from_properties(cls, text: str, extra: Mapping[str, str] | None = None) -> BrokerConfig:
        """Parse Java-properties text (key=value or key: value, # and ! comments)."""
        props = parse_properties(text)
        if extra:
            props.update(extra)
        return cls(props)

    def unapplied_listener_keys(self) -> list[str]:
        """``listener.name.<l>.<config>`` keys of a broker config that snakka does not apply
        per listener (validated like the config; the broker-wide value is in force): what
        ``snakka serve`` warns about at start, since Kafka would honour some of them."""
        out = []
        for k in self.overrides:
            if not k.startswith(LISTENER_PREFIX) or is_listener_sasl_key(k):
                continue
            base = split_listener_key(k)[1]
            if base in BROKER_CONFIGS and base not in PER_LISTENER_CONFIGS \
                    and not base.startswith("ssl."):
                out.append(k)
        return sorted(out)

    def unknown_keys(self) -> list[str]:
        return sorted(k for k in self.overrides if k not in BROKER_CONFIGS
                      and not is_listener_sasl_key(k) and not (
                          k.startswith(LISTENER_PREFIX)
                          and split_listener_key(k)[1] in BROKER_CONFIGS))

    # -- typed access ----------------------------------------------------------------------
    def raw(self, name: str) -> str | None:
        if name in self.overrides:
            return self.overrides[name]
        return BROKER_CONFIGS[name].default

    def get(self, name: str) -> object:
        return BROKER_CONFIGS[name].value(self.raw(name))

    def source(self, name: str) -> ConfigSource:
        return ConfigSource.STATIC_BROKER_CONFIG if name in self.overrides else ConfigSource.DEFAULT_CONFIG

    @property
    def node_id(self) -> int:
        if "node.id" not in self.overrides and "broker.id" in self.overrides:
            return self.int("broker.id")
        return self.int("node.id")

    @property
    def listeners(self) -> list[Listener]:
        ls = [Listener.parse(s) for s in self.list("listeners")]
        if not ls:
            raise ConfigError("listeners", "", "at least one listener is required")
        names = [listener.name for listener in ls]
        if len(set(names)) != len(names):
            raise ConfigError("listeners", ",".join(map(str, ls)), "listener names must be unique")
        return ls

    @property
    def advertised_listeners(self) -> list[Listener]:
        if self.get("advertised.listeners") is None:
            return self.listeners
        adv = [Listener.parse(s) for s in self.list("advertised.listeners")]
        return adv

    @property
    def log_dirs(self) -> list[str]:
        if "log.dirs" not in self.overrides and "log.dir" in self.overrides:
            return [str(self.get("log.dir"))]
        return list(self.list("log.dirs"))

    @property
    def num_partitions(self) -> int:
        return self.int("num.partitions")

    @property
    def default_replication_factor(self) -> int:
        return self.int("default.replication.factor")

    def int(self, name: str) -> int:
        v = self.get(name)
        if isinstance(v, (int, float, str)):
            return int(v)
        raise TypeError(f"{name} is not a number: {v!r}")

    def list(self, name: str) -> list[str]:
        """A LIST config's value (TypeError if ``name`` is unset or not a list)."""
        v = self.get(name)
        if not isinstance(v, list):
            raise TypeError(f"{name} is not a list: {v!r}")
        return v

    def bool(self, name: str) -> bool:
        return bool(self.get(name))


def broker_default_for_topic_config(
    name: str, broker_value: Callable[[str], str | None]
) -> tuple[str | None, str | None]:
    """Resolve the broker-supplied default of a topic config.

    ``broker_value(key)`` returns the broker's configured string (static or dynamic) or None.
    Returns (value string, the broker key that supplied it) or (topic default, None).
    Kafka's unit fallbacks apply: retention.ms ← log.retention.ms | minutes | hours, and
    segment.ms ← log.roll.ms | log.roll.hours.
    """
    d = TOPIC_CONFIGS[name]
    if name == "retention.ms":
        for key, mult in (("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                          ("log.retention.hours", 3_600_000)):
            v = broker_value(key)
            if v is not None:
                n = int(v)
                return (str(n * mult) if n >= 0 else "-1"), key
        return d.default, None
    if name == "segment.ms":
        for key, mult in (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)):
            v = broker_value(key)
            if v is not None:
                return str(int(v) * mult), key
        return d.default, None
    if name == "flush.ms":
        for key in ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"):
            v = broker_value(key)
            if v is not None:
                return v, key
        return d.default, None
    if d.broker_synonym:
        v = broker_value(d.broker_synonym)
        if v is not None:
            return v, d.broker_synonym
    return d.default, None


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    """Raise ConfigError naming the first unknown or invalid topic config."""
    for k, v in configs.items():
        d = TOPIC_CONFIGS.get(k)
        if d is None:
            raise ConfigError(k, v, "Unknown topic config name")
        if v is None:
            continue
        d.value(v)


def topic_config_names() -> Iterable[str]:
    return TOPIC_CONFIGS.keys()
