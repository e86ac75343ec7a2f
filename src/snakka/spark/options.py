"""Option parsing for the ``snakka`` Spark data source, with Spark's Kafka connector rules.

What this module owns
    Turning the user's (case-insensitive, string-valued) options into small, picklable,
    validated settings objects: :class:`ClientSettings` (how to reach the cluster),
    :class:`ReadSettings` (what to read) and :class:`WriteSettings` (where to write). Every
    mistake raises :class:`SnakkaSparkOptionError` naming the option, on the driver, before a
    task starts: that is where Spark's own Kafka connector fails too, and a message there
    beats a stack trace from an executor.

Rules (the same as Spark's Kafka connector, see docs/spark.md for the table)
    * exactly one of ``subscribe`` / ``subscribePattern`` / ``assign``;
    * ``startingOffsets``: ``earliest`` | ``latest`` | JSON ``{"topic":{"0":23,"1":-2}}``
      (-2 = earliest, -1 = latest); batch queries may not start at ``latest``;
    * ``endingOffsets`` (batch only): ``latest`` | JSON; never ``earliest`` / -2;
    * ``startingTimestamp`` beats ``startingOffsetsByTimestamp`` beats ``startingOffsets``
      (the same precedence for the ending side in batch queries);
    * ``kafka.*`` options are Kafka client configs; the ones snakka's protocol client has
      no use for are refused by name rather than silently ignored;
    * security (``kafka.security.protocol``, ``kafka.ssl.*``, ``kafka.sasl.*``): checked
      whole on the driver by building the TLS context and the SASL config once
      (:func:`security_configs`), so a wrong value, an unreadable trust store, a real JKS
      file or GSSAPI fails there, naming the option. The validated configs travel to the
      executors inside :class:`ClientSettings` (as Spark's connector ships its options), where
      each client builds its own context from the same names: file paths must be readable on
      every executor too.

Offset specs are plain tuples/dicts (no classes) so that they pickle small and compare
simply: ``("earliest",)``, ``("latest",)``, ``("offsets", {(topic, partition): offset})``,
``("timestamp", ms)``, ``("timestamps", {(topic, partition): ms})``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The name users pass to ``spark.read.format(...)``; re-exported by ``snakka.spark``. It lives in
# this leaf module so the source can name itself without importing its own package.
FORMAT_NAME = "snakka"

EARLIEST = -2  # Kafka's ListOffsets sentinel, and Spark's JSON marker for "earliest"
LATEST = -1

TopicPartition = tuple[str, int]
OffsetSpec = tuple  # see module docstring

# Documented defaults (docs/spark.md, "Timeouts").
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_FETCH_MAX_WAIT_MS = 500
# One task fetches one partition, so a fetch's whole budget goes to that partition: larger
# than the Java consumer's 1 MiB per-partition default, for fewer round trips.
DEFAULT_MAX_PARTITION_FETCH_BYTES = 8 * 1024 * 1024
DEFAULT_FETCH_MAX_BYTES = 50 * 1024 * 1024
DEFAULT_BATCH_SIZE = 1024 * 1024  # bytes of records per produced batch (before compression)
DEFAULT_MAX_REQUEST_SIZE = 8 * 1024 * 1024
# The Java producer's transaction.timeout.ms default; the broker caps it at
# transaction.max.timeout.ms (15 min by default).
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000

SOURCE_OPTIONS = {
    "subscribe", "subscribepattern", "assign",
    "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp",
    "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger", "minpartitions", "maxrecordsperpartition",
    "failondataloss", "includeheaders",
    # Accepted for compatibility with Spark's connector; see docs/spark.md.
    "kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms",
    "groupidprefix",
}
# Spark hands a streaming sink its query options too. ``transactionalIdPrefix`` turns on
# the exactly-once (transactional) sink, see snakka.spark.writer.
SINK_OPTIONS = {"topic", "includeheaders", "checkpointlocation", "transactionalidprefix"}

# kafka.* consumer configs that mean something to snakka's fetcher.
KAFKA_CONSUMER_CONFIGS = {
    "bootstrap.servers", "client.id", "request.timeout.ms", "default.api.timeout.ms",
    "socket.connection.setup.timeout.ms", "fetch.max.bytes", "max.partition.fetch.bytes",
    "fetch.max.wait.ms", "fetch.min.bytes", "isolation.level", "check.crcs",
    # No effect: the connector never joins a consumer group (offsets live in Spark's
    # checkpoint, as with Spark's own connector). Accepted so existing jobs run unchanged.
    "group.id", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.records",
}
KAFKA_PRODUCER_CONFIGS = {
    "bootstrap.servers", "client.id", "request.timeout.ms", "delivery.timeout.ms",
    "socket.connection.setup.timeout.ms", "acks", "compression.type", "batch.size",
    "linger.ms", "max.request.size", "enable.idempotence", "retries",
    "key.serializer", "value.serializer", "transaction.timeout.ms",
}
# Spark's connector refuses these for sources (the connector manages them itself).
SPARK_FORBIDDEN_SOURCE_CONFIGS = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are always returned as binary; cast or deserialize them in Spark",
    "value.deserializer": "values are always returned as binary; cast or deserialize them in Spark",
    "enable.auto.commit": "offsets are tracked in Spark's checkpoint, never committed to Kafka",
    "interceptor.classes": "consumer interceptors are not supported",
}
SPARK_FORBIDDEN_SINK_CONFIGS = {
    "key.serializer": "keys are always written as binary; convert the 'key' column instead",
    "value.serializer": "values are always written as binary; convert the 'value' column instead",
    "transactional.id": "set the sink option 'transactionalIdPrefix' instead: every write "
                        "task gets its own transactional id (docs/spark.md)",
}
COMPRESSION_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# Client security configs (source and sink alike), the names snakka's client reads
# (snakka.client.connection / snakka.client.sasl): Kafka's Java names, which Spark's connector
# passes through, and librdkafka's PEM file and SASL user names for convenience.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KAFKA_SSL_CLIENT_CONFIGS = {
    "ssl.protocol", "ssl.enabled.protocols", "ssl.cipher.suites",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.endpoint.identification.algorithm",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",  # librdkafka
}
KAFKA_SASL_CLIENT_CONFIGS = {
    "sasl.mechanism", "sasl.jaas.config",
    "sasl.username", "sasl.password",  # librdkafka
    "sasl.oauthbearer.token",  # snakka: a ready OAUTHBEARER token
}
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# sasl.jaas.config login modules (Kafka's) and the mechanisms they can log in with: PLAIN
# and SCRAM both read username/password (Java's client callback handler takes them from
# either module); OAUTHBEARER needs its own module (the unsecured token's options).
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN", "SCRAM"),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("PLAIN", "SCRAM"),
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": ("OAUTHBEARER",),
}
# Security configs that exist in Kafka's clients but need what a Python client does not have
# (Kerberos, Java classes, Java's key managers): refused with the reason.
_UNSUPPORTED_SECURITY = {
    "sasl.kerberos.": "Kerberos (GSSAPI) is not supported by snakka's client",
    "sasl.login.callback.handler.class": "Java callback handlers cannot run in snakka's "
                                         "Python client (for OAUTHBEARER give a token: "
                                         "kafka.sasl.oauthbearer.token)",
    "sasl.client.callback.handler.class": "Java callback handlers cannot run in snakka's "
                                          "Python client",
    "sasl.login.class": "Java login classes cannot run in snakka's Python client",
    "sasl.oauthbearer.token.endpoint.url": "fetching OAuth tokens is not supported; give a "
                                           "token with kafka.sasl.oauthbearer.token",
    "ssl.engine.factory.class": "Java SSL engine factories cannot run in snakka's Python "
                                "client (TLS is OpenSSL through Python's ssl module)",
    "ssl.provider": "TLS is OpenSSL through Python's ssl module; Java security providers "
                    "do not apply",
    "ssl.keymanager.algorithm": "TLS is OpenSSL through Python's ssl module; Java key "
                                "managers do not apply",
    "ssl.trustmanager.algorithm": "TLS is OpenSSL through Python's ssl module; Java trust "
                                  "managers do not apply",
    "ssl.secure.random.implementation": "TLS is OpenSSL through Python's ssl module",
}


class SnakkaSparkOptionError(ValueError):
    """An option of the ``snakka`` data source is unknown, malformed or conflicting."""


@dataclass(frozen=True)
class ClientSettings:
    """How executors and the driver reach the cluster (picklable)."""

    bootstrap_servers: tuple[tuple[str, int], ...]
    client_id: str = "snakka-spark"
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    connect_timeout_ms: int = 10_000
    fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    max_partition_fetch_bytes: int = DEFAULT_MAX_PARTITION_FETCH_BYTES
    isolation_level: int = 0  # 0 read_uncommitted, 1 read_committed
    check_crcs: bool = True
    # Validated client security configs (Kafka names without "kafka.", see
    # security_configs); passwords inside, hence never in a repr or a log line.
    security: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def security_protocol(self) -> str:
        return dict(self.security).get("security.protocol", "PLAINTEXT")


@dataclass(frozen=True)
class ReadSettings:
    client: ClientSettings
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] | None = None
    starting: OffsetSpec = ("earliest",)
    ending: OffsetSpec = ("latest",)
    timestamp_strategy_latest: bool = False  # startingOffsetsByTimestampStrategy=latest
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000

    def describe_subscription(self) -> str:
        if self.subscribe is not None:
            return f"subscribe={','.join(self.subscribe)}"
        if self.subscribe_pattern is not None:
            return f"subscribePattern={self.subscribe_pattern}"
        return f"assign={self.assign}"


@dataclass(frozen=True)
class WriteSettings:
    client: ClientSettings
    topic: str | None = None
    acks: int = -1
    compression: int = 0
    batch_size: int = DEFAULT_BATCH_SIZE
    max_request_size: int = DEFAULT_MAX_REQUEST_SIZE
    idempotent: bool = True
    retries: int = 5
    extra: dict[str, str] = field(default_factory=dict)
    # The exactly-once sink (snakka.spark.writer): each task's transactional id is
    # "<prefix>-<query id>-<task partition id>"; None = at-least-once.
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS


# ------------------------------------------------------------------------------ helpers


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bool(opts: dict[str, str], name: str, display: str, default: bool) -> bool:
    if name not in opts:
        return default
    v = opts[name].strip().lower()
    if v not in ("true", "false"):
        raise SnakkaSparkOptionError(f"option '{display}' must be 'true' or 'false', got {opts[name]!r}")
    return v == "true"


def _int(opts: dict[str, str], name: str, display: str, *, minimum: int | None = None,
         default: int | None = None) -> int | None:
    if name not in opts:
        return default
    try:
        v = int(opts[name].strip())
    except ValueError:
        raise SnakkaSparkOptionError(
            f"option '{display}' must be an integer, got {opts[name]!r}") from None
    if minimum is not None and v < minimum:
        raise SnakkaSparkOptionError(f"option '{display}' must be >= {minimum}, got {v}")
    return v


def parse_bootstrap_servers(value: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):
            host, sep, port = item[1:].partition("]:")
        else:
            host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise SnakkaSparkOptionError(
                f"option 'kafka.bootstrap.servers' must be a list of host:port, got {value!r}")
        out.append((host, int(port)))
    if not out:
        raise SnakkaSparkOptionError("option 'kafka.bootstrap.servers' is empty")
    return tuple(out)


def _kafka_configs(opts: dict[str, str], allowed: set[str], forbidden: dict[str, str],
                   side: str) -> dict[str, str]:
    configs = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    for name in configs:
        if name in forbidden:
            raise SnakkaSparkOptionError(
                f"Kafka option 'kafka.{name}' is not supported by the {side}: {forbidden[name]}")
        if name == "security.protocol" or name.startswith(("ssl.", "sasl.")):
            continue  # security_configs checks them
        if name not in allowed:
            raise SnakkaSparkOptionError(
                f"Kafka option 'kafka.{name}' is not supported by snakka's Spark {side} "
                f"(supported: {', '.join('kafka.' + n for n in sorted(allowed))})")
    if "bootstrap.servers" not in configs:
        raise SnakkaSparkOptionError("option 'kafka.bootstrap.servers' must be specified")
    return configs


def security_configs(configs: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The security part of ``configs`` (Kafka client config names, without ``kafka.``),
    checked by building what every connection will use: the TLS context (which reads the key
    and trust stores) and the SASL config. Raises :class:`SnakkaSparkOptionError` naming the
    ``kafka.`` option. The result is what executors rebuild their contexts from."""
    from snakka.client.connection import client_ssl_context
    from snakka.client.sasl import SaslClientConfig
    from snakka.util.jaas import JaasConfigError, single_entry
    from snakka.util.tls import TlsConfigError

    sec: dict[str, str] = {}
    for name, value in configs.items():
        if name != "security.protocol" and not name.startswith(("ssl.", "sasl.")):
            continue
        for prefix, reason in _UNSUPPORTED_SECURITY.items():
            if name == prefix or (prefix.endswith(".") and name.startswith(prefix)):
                raise SnakkaSparkOptionError(
                    f"Kafka option 'kafka.{name}' is not supported: {reason}")
        if name != "security.protocol" and name not in KAFKA_SSL_CLIENT_CONFIGS \
                and name not in KAFKA_SASL_CLIENT_CONFIGS:
            raise SnakkaSparkOptionError(
                f"Kafka option 'kafka.{name}' is not supported by snakka's Spark connector "
                "(supported security options: kafka.security.protocol, "
                + ", ".join("kafka." + n for n in sorted(KAFKA_SSL_CLIENT_CONFIGS
                                                        | KAFKA_SASL_CLIENT_CONFIGS)) + ")")
        sec[name] = value
    proto = sec.get("security.protocol", "PLAINTEXT").strip().upper()
    if proto not in SECURITY_PROTOCOLS:
        raise SnakkaSparkOptionError(
            f"option 'kafka.security.protocol' must be one of {', '.join(SECURITY_PROTOCOLS)}, "
            f"got {sec['security.protocol']!r}")
    if "security.protocol" in sec:
        sec["security.protocol"] = proto
    tls_names = [n for n in sec if n.startswith("ssl.")]
    sasl_names = [n for n in sec if n.startswith("sasl.")]
    # Kafka's clients ignore ssl.* on a PLAINTEXT connection without a word; a secured
    # cluster's options with the protocol forgotten would then fail later and obscurely.
    if tls_names and proto not in ("SSL", "SASL_SSL"):
        raise SnakkaSparkOptionError(
            f"option 'kafka.{tls_names[0]}' needs 'kafka.security.protocol' = SSL or SASL_SSL "
            f"(it is {proto})")
    if sasl_names and not proto.startswith("SASL_"):
        raise SnakkaSparkOptionError(
            f"option 'kafka.{sasl_names[0]}' needs 'kafka.security.protocol' = SASL_PLAINTEXT "
            f"or SASL_SSL (it is {proto})")
    if proto.startswith("SASL_"):
        mechanism = sec.get("sasl.mechanism", "").strip().upper()
        if not mechanism or mechanism == "GSSAPI":
            raise SnakkaSparkOptionError(
                "option 'kafka.sasl.mechanism' "
                + ("is not set, and Kafka's default" if not mechanism else "=")
                + " GSSAPI (Kerberos) is not supported by snakka's client: set one of "
                + ", ".join(SASL_MECHANISMS))
        if mechanism not in SASL_MECHANISMS:
            raise SnakkaSparkOptionError(
                f"option 'kafka.sasl.mechanism' must be one of {', '.join(SASL_MECHANISMS)}, "
                f"got {sec['sasl.mechanism']!r}")
        sec["sasl.mechanism"] = mechanism
        if sec.get("sasl.jaas.config"):
            try:
                module = single_entry(sec["sasl.jaas.config"]).login_module
            except JaasConfigError as e:
                raise SnakkaSparkOptionError(
                    f"option 'kafka.sasl.jaas.config' is not valid JAAS: {e}") from None
            family = "SCRAM" if mechanism.startswith("SCRAM") else mechanism
            if module.endswith("Krb5LoginModule"):
                raise SnakkaSparkOptionError(
                    f"option 'kafka.sasl.jaas.config': {module} (Kerberos) is not supported")
            if module not in _LOGIN_MODULES:
                raise SnakkaSparkOptionError(
                    f"option 'kafka.sasl.jaas.config': login module {module} is not "
                    f"supported (one of {', '.join(_LOGIN_MODULES)})")
            if family not in _LOGIN_MODULES[module]:
                raise SnakkaSparkOptionError(
                    f"option 'kafka.sasl.jaas.config': {module.rsplit('.', 1)[-1]} cannot "
                    f"log in with kafka.sasl.mechanism={mechanism}")
        try:
            SaslClientConfig.from_config(sec)
        except ValueError as e:
            raise SnakkaSparkOptionError(
                f"options 'kafka.sasl.*' are incomplete or invalid: {e}") from None
    try:
        client_ssl_context(sec)
    except TlsConfigError as e:
        raise SnakkaSparkOptionError(
            f"option 'kafka.{e.name}' is invalid: {e.reason}") from None
    return tuple(sorted(sec.items()))


def _client_settings(configs: dict[str, str]) -> ClientSettings:
    c = {f"kafka.{k}": v for k, v in configs.items()}

    def num(name: str, default: int, minimum: int = 0) -> int:
        v = _int(c, f"kafka.{name}", f"kafka.{name}", minimum=minimum, default=default)
        assert v is not None
        return v

    iso = configs.get("isolation.level", "read_uncommitted").strip().lower()
    if iso not in ("read_uncommitted", "read_committed"):
        raise SnakkaSparkOptionError(
            "option 'kafka.isolation.level' must be read_uncommitted or read_committed, "
            f"got {configs['isolation.level']!r}")
    timeout = num("request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS, 1)
    return ClientSettings(
        bootstrap_servers=parse_bootstrap_servers(configs["bootstrap.servers"]),
        client_id=configs.get("client.id", "snakka-spark"),
        request_timeout_ms=timeout,
        connect_timeout_ms=num("socket.connection.setup.timeout.ms", min(10_000, timeout), 1),
        fetch_max_wait_ms=num("fetch.max.wait.ms", DEFAULT_FETCH_MAX_WAIT_MS),
        fetch_max_bytes=num("fetch.max.bytes", DEFAULT_FETCH_MAX_BYTES, 1),
        max_partition_fetch_bytes=num("max.partition.fetch.bytes",
                                      DEFAULT_MAX_PARTITION_FETCH_BYTES, 1),
        isolation_level=1 if iso == "read_committed" else 0,
        check_crcs=_bool({"c": configs.get("check.crcs", "true")}, "c", "kafka.check.crcs", True),
        security=security_configs(configs),
    )


_JSON_EXAMPLE_OFFSETS = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'


def _parse_partition_json(value: str, display: str, example: str) -> dict[TopicPartition, int]:
    try:
        data = json.loads(value)
    except ValueError as e:
        raise SnakkaSparkOptionError(
            f"option '{display}' is not valid JSON ({e}); expected e.g. {example}") from None
    if not isinstance(data, dict) or not data:
        raise SnakkaSparkOptionError(
            f"option '{display}' must be a non-empty JSON object like {example}, got {value!r}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise SnakkaSparkOptionError(
                f"option '{display}': topic {topic!r} must map partition numbers to values, "
                f"like {example}; got {parts!r}")
        for p, off in parts.items():
            try:
                pi = int(p)
            except ValueError:
                raise SnakkaSparkOptionError(
                    f"option '{display}': partition {p!r} of topic {topic!r} is not a number"
                ) from None
            if pi < 0 or isinstance(off, bool) or not isinstance(off, int):
                raise SnakkaSparkOptionError(
                    f"option '{display}': {topic}-{p} must have an integer value, got {off!r}")
            out[(topic, pi)] = off
    return out


def _parse_assign(value: str) -> tuple[TopicPartition, ...]:
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    try:
        data = json.loads(value)
    except ValueError as e:
        raise SnakkaSparkOptionError(
            f"option 'assign' is not valid JSON ({e}); expected e.g. {example}") from None
    if not isinstance(data, dict) or not data:
        raise SnakkaSparkOptionError(
            f"option 'assign' must be a non-empty JSON object like {example}, got {value!r}")
    out: list[tuple[str, int]] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise SnakkaSparkOptionError(
                f"option 'assign': topic {topic!r} must map to a list of partition numbers, "
                f"like {example}; got {parts!r}")
        out.extend((topic, p) for p in parts)
    if not out:
        raise SnakkaSparkOptionError(f"option 'assign' names no partitions: {value!r}")
    return tuple(sorted(set(out)))


def _offset_spec(opts: dict[str, str], side: str, default: OffsetSpec) -> OffsetSpec:
    """The starting or ending spec, with Spark's precedence: timestamp for all partitions,
    then timestamps per partition, then offsets."""
    ts_name, by_ts_name, off_name = f"{side}timestamp", f"{side}offsetsbytimestamp", f"{side}offsets"
    disp_ts = f"{side}Timestamp"
    if ts_name in opts:
        return ("timestamp", _int(opts, ts_name, disp_ts, minimum=0))
    if by_ts_name in opts:
        m = _parse_partition_json(opts[by_ts_name], f"{side}OffsetsByTimestamp",
                                  '{"topicA":{"0":1700000000000,"1":1700000000000}}')
        for tp, ts in m.items():
            if ts < 0:
                raise SnakkaSparkOptionError(
                    f"option '{side}OffsetsByTimestamp': timestamp for {tp[0]}-{tp[1]} must be "
                    f">= 0, got {ts}")
        return ("timestamps", m)
    if off_name in opts:
        v = opts[off_name].strip()
        if v.lower() in ("earliest", "latest"):
            return (v.lower(),)
        m = _parse_partition_json(v, f"{side}Offsets", _JSON_EXAMPLE_OFFSETS)
        for tp, off in m.items():
            if off < EARLIEST:
                raise SnakkaSparkOptionError(
                    f"option '{side}Offsets': offset {off} for {tp[0]}-{tp[1]} is invalid "
                    "(use an offset >= 0, -2 for earliest or -1 for latest)")
        return ("offsets", m)
    return default


def _validate_names(opts: dict[str, str], allowed: set[str], what: str) -> None:
    for k in opts:
        if k.startswith("kafka.") or k in allowed:
            continue
        raise SnakkaSparkOptionError(
            f"unknown option '{k}' for the snakka {what} (option names are case-insensitive; "
            "see docs/spark.md for the supported options)")


# ------------------------------------------------------------------------------ public


def parse_read_options(options: Mapping[str, Any], *, streaming: bool) -> ReadSettings:
    """Validate source options; raises :class:`SnakkaSparkOptionError` naming the option."""
    opts = _lower(options)
    _validate_names(opts, SOURCE_OPTIONS, "source")
    client = _client_settings(
        _kafka_configs(opts, KAFKA_CONSUMER_CONFIGS, SPARK_FORBIDDEN_SOURCE_CONFIGS, "source"))

    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if not strategies:
        raise SnakkaSparkOptionError(
            "one of the options 'subscribe', 'subscribePattern' or 'assign' must be specified")
    if len(strategies) > 1:
        raise SnakkaSparkOptionError(
            "only one of the options 'subscribe', 'subscribePattern' or 'assign' can be "
            f"specified, got {', '.join(strategies)}")
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise SnakkaSparkOptionError(
                f"option 'subscribe' names no topics: {opts['subscribe']!r}")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise SnakkaSparkOptionError("option 'subscribePattern' is empty")
        try:
            re.compile(pattern)
        except re.error as e:
            raise SnakkaSparkOptionError(
                f"option 'subscribePattern' is not a valid regular expression: {e}") from None
    else:
        assign = _parse_assign(opts["assign"])

    starting = _offset_spec(opts, "starting", ("latest",) if streaming else ("earliest",))
    ending: OffsetSpec = ("latest",)
    if streaming:
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if name in opts:
                raise SnakkaSparkOptionError(
                    f"option '{name}' is not valid for streaming queries (a stream has no end)")
    else:
        if starting == ("latest",):
            raise SnakkaSparkOptionError(
                "option 'startingOffsets' cannot be 'latest' for batch queries")
        if starting[0] == "offsets":
            for tp, off in starting[1].items():
                if off == LATEST:
                    raise SnakkaSparkOptionError(
                        f"option 'startingOffsets': {tp[0]}-{tp[1]} cannot start at latest "
                        "(-1) in a batch query")
        ending = _offset_spec(opts, "ending", ("latest",))
        if ending == ("earliest",):
            raise SnakkaSparkOptionError(
                "option 'endingOffsets' cannot be 'earliest' for batch queries")
        if ending[0] == "offsets":
            for tp, off in ending[1].items():
                if off == EARLIEST:
                    raise SnakkaSparkOptionError(
                        f"option 'endingOffsets': {tp[0]}-{tp[1]} cannot end at earliest (-2)")
    for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        if assign is not None and spec[0] in ("offsets", "timestamps"):
            extra = set(spec[1]) - set(assign)
            if extra:
                raise SnakkaSparkOptionError(
                    f"option '{name}' names partitions that 'assign' does not: "
                    + ", ".join(f"{t}-{p}" for t, p in sorted(extra)))

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SnakkaSparkOptionError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {opts['startingoffsetsbytimestampstrategy']!r}")
    return ReadSettings(
        client=client,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        timestamp_strategy_latest=strategy == "latest",
        max_offsets_per_trigger=_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger",
                                     minimum=1),
        min_partitions=_int(opts, "minpartitions", "minPartitions", minimum=1),
        max_records_per_partition=_int(opts, "maxrecordsperpartition",
                                       "maxRecordsPerPartition", minimum=1),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        poll_timeout_ms=_int(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs",
                             minimum=1, default=120_000) or 120_000,
    )


def include_headers(options: Mapping[str, Any]) -> bool:
    opts = _lower(options)
    return _bool(opts, "includeheaders", "includeHeaders", False)


def parse_write_options(options: Mapping[str, Any]) -> WriteSettings:
    """Validate sink options; raises :class:`SnakkaSparkOptionError` naming the option."""
    opts = _lower(options)
    _validate_names(opts, SINK_OPTIONS, "sink")
    configs = _kafka_configs(opts, KAFKA_PRODUCER_CONFIGS, SPARK_FORBIDDEN_SINK_CONFIGS, "sink")
    client = _client_settings({k: v for k, v in configs.items()
                               if k in ("bootstrap.servers", "client.id", "request.timeout.ms",
                                        "socket.connection.setup.timeout.ms",
                                        "security.protocol")
                               or k.startswith(("ssl.", "sasl."))})
    c = {f"kafka.{k}": v for k, v in configs.items()}
    acks_raw = configs.get("acks", "all").strip().lower()
    if acks_raw not in ("all", "-1", "0", "1"):
        raise SnakkaSparkOptionError(f"option 'kafka.acks' must be all, -1, 0 or 1, got {acks_raw!r}")
    acks = -1 if acks_raw == "all" else int(acks_raw)
    codec = configs.get("compression.type", "none").strip().lower()
    if codec not in COMPRESSION_CODECS:
        raise SnakkaSparkOptionError(
            f"option 'kafka.compression.type' must be one of {', '.join(COMPRESSION_CODECS)}, "
            f"got {codec!r}")
    idempotent = _bool(c, "kafka.enable.idempotence", "kafka.enable.idempotence", True)
    if idempotent and acks != -1:
        if "enable.idempotence" in configs:
            raise SnakkaSparkOptionError(
                "option 'kafka.enable.idempotence' = true requires 'kafka.acks' = all")
        idempotent = False  # the Java producer turns implicit idempotence off the same way
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise SnakkaSparkOptionError("option 'topic' is empty")
    prefix = opts.get("transactionalidprefix")
    if prefix is not None:
        prefix = prefix.strip()
        if not prefix:
            raise SnakkaSparkOptionError("option 'transactionalIdPrefix' is empty")
        if not idempotent:
            raise SnakkaSparkOptionError(
                "option 'transactionalIdPrefix' (transactions) needs an idempotent producer: "
                "'kafka.acks' = all and 'kafka.enable.idempotence' = true (the defaults)")
    elif "transaction.timeout.ms" in configs:
        raise SnakkaSparkOptionError(
            "option 'kafka.transaction.timeout.ms' needs 'transactionalIdPrefix' (without it "
            "the sink writes no transactions)")
    return WriteSettings(
        client=client,
        topic=topic.strip() if topic else None,
        acks=acks,
        compression=COMPRESSION_CODECS[codec],
        batch_size=_int(c, "kafka.batch.size", "kafka.batch.size", minimum=1,
                        default=DEFAULT_BATCH_SIZE) or DEFAULT_BATCH_SIZE,
        max_request_size=_int(c, "kafka.max.request.size", "kafka.max.request.size", minimum=1024,
                              default=DEFAULT_MAX_REQUEST_SIZE) or DEFAULT_MAX_REQUEST_SIZE,
        idempotent=idempotent,
        retries=_int(c, "kafka.retries", "kafka.retries", minimum=0, default=5) or 0,
        transactional_id_prefix=prefix,
        transaction_timeout_ms=_int(c, "kafka.transaction.timeout.ms",
                                    "kafka.transaction.timeout.ms", minimum=1,
                                    default=DEFAULT_TRANSACTION_TIMEOUT_MS)
        or DEFAULT_TRANSACTION_TIMEOUT_MS,
    )
