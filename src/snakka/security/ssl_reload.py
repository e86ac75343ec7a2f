"""Certificate reload without restart: Kafka's dynamic per-listener SSL configs (KIP-226).

What it owns: the TLS context each SSL / SASL_SSL listener serves *after* start, and changing it
when an (Incremental)AlterConfigs on this broker's BROKER resource sets a per-listener key or
trust store config (``listener.name.<l>.ssl.keystore.location`` and the other
``LISTENER_RECONFIGURABLE_SSL_CONFIGS`` of config.py, Kafka's
``SslConfigs.RECONFIGURABLE_CONFIGS``).

Kafka's rules (SslFactory.createNewSslEngineFactory, DynamicBrokerConfig), followed here:

- The new stores are loaded completely before anything changes; a store that cannot be read, a
  key that does not match its certificate, a wrong password -> the request fails and the old
  context stays. Kafka's broker answers that ConfigException as INVALID_REQUEST
  (ConfigAdminManager, KAFKA-13609), and so does snakka.
- The new key store's certificates must keep the old ones' distinguished names (compared as
  RFC 2253 names, case-insensitively) and subject alternative names (the new set must contain
  the old one), unless ``ssl.allow.dn.changes`` / ``ssl.allow.san.changes`` (per listener) are
  true; the number of entries must match too. A listener without a trust store cannot gain one.
- The same configs again rebuild the context only when a store file changed on disk (Kafka's
  ``shouldBeRebuilt``: the file's modification time): ``kafka-configs.sh --alter
  --add-config listener.name.ssl.ssl.keystore.location=/same/path`` after overwriting the file
  reloads it. Unlike Kafka (which validates such a reload only after answering, then logs the
  failure), snakka validates it before answering, so a bad file is refused to the caller.

Connections already open keep their TLS session (an SSLContext change does not touch them); the
next handshake uses the new context. The applied values live in the metadata log like every
dynamic broker config (the controller's record), so a restart starts with them
(:meth:`SslReconfiguration.initial`). Passwords are never logged.

The I/O is reading the stores; the listeners (server/listener.py) read ``target.tls`` at each
accept, so swapping that attribute is the whole switch.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from snakka.config import (
    BROKER_CONFIGS,
    LISTENER_PREFIX,
    BrokerConfig,
    apply_config_changes,
    dynamic_listener_ssl_config,
    split_listener_key,
)
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.security.ssl import ListenerTls, listener_prefix, listener_ssl_settings, rfc2253_name
from snakka.util.tls import TlsConfigError, TlsSettings

__all__ = ["SslReconfiguration", "TlsTarget", "KeystoreEntry", "keystore_entries",
           "ensure_compatible"]

log = logging.getLogger("snakka.security")

Raw = Callable[[str], "str | None"]


class TlsTarget(Protocol):
    """What serves a listener's TLS: the context it uses for the next handshake."""

    tls: ListenerTls | None


@dataclass(frozen=True, slots=True)
class KeystoreEntry:
    """Kafka's SslFactory.CertificateEntries: a key store entry's certificate identity."""

    alias: str
    dn: str
    sans: frozenset[tuple[str, str]]
    serial: int


@dataclass(frozen=True, slots=True)
class _Loaded:
    """A listener's TLS as built, with what decides whether it must be rebuilt."""

    tls: ListenerTls
    settings: Mapping[str, str | None]
    stamps: tuple[tuple[str, int, int] | None, ...]  # (path, mtime_ns, size) of the stores
    entries: tuple[KeystoreEntry, ...]
    has_truststore: bool


_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)


def _first_certificate(settings: TlsSettings) -> bytes | None:
    """DER of the key store's own certificate (the first of its chain), None without one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    chain = settings.get("ssl.keystore.certificate.chain")
    location = settings.get("ssl.keystore.location")
    ktype = (settings.get("ssl.keystore.type") or "JKS").upper()
    if chain:
        data = chain.encode()
    elif location:
        with open(location, "rb") as f:
            data = f.read()
        if ktype != "PEM":
            for pw in (settings.get("ssl.keystore.password"), settings.get("ssl.key.password")):
                try:
                    _key, cert, _extra = pkcs12.load_key_and_certificates(
                        data, pw.encode() if pw else None)
                except ValueError:
                    continue
                return None if cert is None else cert.public_bytes(
                    serialization.Encoding.DER)
            return None
    else:
        return None
    m = _PEM_CERT.search(data)
    if m is None:
        return None
    text = m.group(0)
    if b"\n" not in text.strip():  # one-line PEM from a properties file
        body = text[len(b"-----BEGIN CERTIFICATE-----"):-len(b"-----END CERTIFICATE-----")]
        text = (b"-----BEGIN CERTIFICATE-----\n" + body.strip().replace(b" ", b"\n")
                + b"\n-----END CERTIFICATE-----\n")
    return x509.load_pem_x509_certificate(text).public_bytes(serialization.Encoding.DER)


def keystore_entries(settings: TlsSettings) -> tuple[KeystoreEntry, ...]:
    """The key store's entries as Kafka compares them (one: snakka's PEM and PKCS12 stores
    hold one private key entry, Kafka's PEM store one alias)."""
    from cryptography import x509

    der = _first_certificate(settings)
    if der is None:
        return ()
    cert = x509.load_der_x509_certificate(der)
    sans: set[tuple[str, str]] = set()
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        ext = None
    for gn in ext or ():
        sans.add((type(gn).__name__, str(gn.value)))
    return (KeystoreEntry("kafka", rfc2253_name(der), frozenset(sans), cert.serial_number),)


def ensure_compatible(new: tuple[KeystoreEntry, ...], old: tuple[KeystoreEntry, ...], *,
                      allow_dn_changes: bool, allow_san_changes: bool) -> None:
    """Kafka's CertificateEntries.ensureCompatible; ValueError with Kafka's message."""
    checks = [] if allow_dn_changes else ["dn"]
    if not allow_san_changes:
        checks.append("san")
    for check in checks:
        if len(new) != len(old):
            raise ValueError(f"Keystore entries do not match, existing store contains "
                             f"{len(old)} entries, new store contains {len(new)} entries")
        for n, o in zip(new, old, strict=True):
            if check == "dn" and n.dn.lower() != o.dn.lower():
                raise ValueError("Keystore DistinguishedName does not match:  existing="
                                 f"{{alias={o.alias}, DN={o.dn}}}, new={{alias={n.alias}, "
                                 f"DN={n.dn}}}")
            if check == "san" and not o.sans <= n.sans:
                raise ValueError("Keystore SubjectAltNames do not match:  existing="
                                 f"{{alias={o.alias}, SAN={_sans(o.sans)}}}, new="
                                 f"{{alias={n.alias}, SAN={_sans(n.sans)}}}")


def _sans(sans: frozenset[tuple[str, str]]) -> str:
    return "[" + ", ".join(f"{t}:{v}" for t, v in sorted(sans)) + "]"


def _stamp(path: str | None) -> tuple[str, int, int] | None:
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return (path, -1, -1)
    return (path, st.st_mtime_ns, st.st_size)


def _bool(raw: Raw, listener: str, name: str) -> bool:
    v = raw(listener_prefix(listener) + name)
    if v is None:
        v = raw(name)
    return (v or "false").strip().lower() == "true"


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """New contexts, validated, to install once the change is durable."""

    contexts: tuple[tuple[str, _Loaded], ...]


class SslReconfiguration:
    """The SSL listeners' current TLS, and its changes through dynamic broker configs."""

    def __init__(self, config: BrokerConfig, node_id: int,
                 dynamic_overrides: Callable[[], Mapping[str, str]]) -> None:
        self._config = config
        self._node = str(node_id)
        self._dynamic = dynamic_overrides  # this broker's dynamic BROKER configs (metadata)
        self._timeout_ms = config.int("snakka.ssl.handshake.timeout.ms")
        self._loaded: dict[str, _Loaded] = {}
        self._targets: dict[str, TlsTarget] = {}

    # -- start -------------------------------------------------------------------------------
    def _static(self, key: str) -> str | None:
        if key.startswith(LISTENER_PREFIX):
            listener, name = split_listener_key(key)
            prefixed = listener_prefix(listener) + name
            for k, v in self._config.overrides.items():
                if k.lower() == prefixed.lower():
                    return v
            return None
        if key in BROKER_CONFIGS:
            return self._config.raw(key)
        return self._config.overrides.get(key)

    def _raw(self, node_overrides: Mapping[str, str]) -> Raw:
        def raw(key: str) -> str | None:
            v = node_overrides.get(key)
            return v if v is not None else self._static(key)
        return raw

    def _load(self, raw: Raw, listener: str) -> _Loaded:
        settings, _origin = listener_ssl_settings(raw, listener)
        tls = ListenerTls.for_listener(raw, listener, self._timeout_ms)
        try:
            entries = keystore_entries(settings)
        except (OSError, ValueError) as e:
            raise TlsConfigError("ssl.keystore.location",
                                 f"the key store's certificate cannot be read ({e})") from None
        return _Loaded(tls, dict(settings.configs),
                       (_stamp(settings.get("ssl.keystore.location")),
                        _stamp(settings.get("ssl.truststore.location"))),
                       entries, bool(settings.get("ssl.truststore.location")
                                     or settings.get("ssl.truststore.certificates")))

    def initial(self, static_tls: Mapping[str, ListenerTls]) -> dict[str, ListenerTls]:
        """The contexts the listeners start with: the static ones (already built and checked
        at start), rebuilt with this broker's dynamic SSL configs from the metadata log where
        there are any. A dynamic config that no longer loads is logged and the static context
        is served (Kafka logs a failed dynamic update and keeps the previous configuration)."""
        dynamic = self._dynamic()
        touched = {lc[0] for k in dynamic if (lc := dynamic_listener_ssl_config(k))}
        out: dict[str, ListenerTls] = {}
        for listener, tls in static_tls.items():
            raw = self._raw(dynamic if listener in touched else {})
            try:
                loaded = self._load(raw, listener)
            except (TlsConfigError, ValueError, OSError) as e:
                if listener not in touched:
                    raise
                log.error("listener %s: the dynamic SSL configs in the metadata log cannot be "
                          "used (%s); serving the static ones from server.properties",
                          listener, e)
                loaded = self._load(self._raw({}), listener)
            if listener not in touched:
                loaded = _Loaded(tls, loaded.settings, loaded.stamps, loaded.entries,
                                 loaded.has_truststore)
            self._loaded[listener] = loaded
            out[listener] = loaded.tls
        return out

    def register(self, listener: str, target: TlsTarget) -> None:
        """The listener server whose ``tls`` a reconfiguration replaces."""
        self._targets[listener] = target

    def current(self, listener: str) -> ListenerTls | None:
        loaded = self._loaded.get(listener)
        return None if loaded is None else loaded.tls

    # -- AlterConfigs ------------------------------------------------------------------------
    def prepare(self, resource_name: str, changes: Mapping[str, str | None], *,
                replace: bool = False) -> ReloadPlan | None:
        """Validate a BROKER resource change's effect on the SSL listeners and build their new
        contexts (not installed yet); None when no listener's TLS changes. KafkaError
        INVALID_REQUEST (Kafka's answer) when a new store cannot be used."""
        before = dict(self._dynamic()) if resource_name == self._node else {}
        after = apply_config_changes(before, changes, replace)
        keys = [k for k in set(changes) | (set(before) if replace else set())
                if dynamic_listener_ssl_config(k) is not None]
        if not keys:
            return None
        listeners: set[str] = set()
        for k in keys:
            listener, name = split_listener_key(k)
            if k != listener_prefix(listener) + name:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"{k}: the listener name in a listener.name.<listener>. "
                                 "prefix is lower-case, as in Kafka")
            if listener not in self._loaded:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"{k}: broker {self._node} has no SSL or SASL_SSL listener "
                                 f"named {listener}")
            listeners.add(listener)
        raw = self._raw(after)
        plan: list[tuple[str, _Loaded]] = []
        for listener in sorted(listeners):
            old = self._loaded[listener]
            settings, _origin = listener_ssl_settings(raw, listener)
            stamps = (_stamp(settings.get("ssl.keystore.location")),
                      _stamp(settings.get("ssl.truststore.location")))
            if dict(settings.configs) == old.settings and stamps == old.stamps:
                continue  # Kafka's shouldBeRebuilt: same configs, files unchanged
            try:
                new = self._load(raw, listener)
                if old.has_truststore is False and new.has_truststore:
                    raise ValueError("Cannot add SSL truststore to an existing listener for "
                                     "which no truststore was configured.")
                ensure_compatible(new.entries, old.entries,
                                  allow_dn_changes=_bool(raw, listener, "ssl.allow.dn.changes"),
                                  allow_san_changes=_bool(raw, listener, "ssl.allow.san.changes"))
            except (TlsConfigError, ValueError, OSError) as e:
                log.info("listener %s: dynamic SSL config update refused: %s", listener, e)
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Invalid dynamic configuration: Validation of dynamic config "
                                 f"update of SSLFactory failed: {e}") from None
            plan.append((listener, new))
        return ReloadPlan(tuple(plan)) if plan else None

    def apply(self, plan: ReloadPlan) -> None:
        """Install validated contexts (after the change is durable): the next handshake on each
        listener uses its new certificate; open connections keep theirs."""
        for listener, loaded in plan.contexts:
            self._loaded[listener] = loaded
            target = self._targets.get(listener)
            if target is not None:
                target.tls = loaded.tls
            entry = loaded.entries[0] if loaded.entries else None
            log.info("listener %s: reloaded SSL key store %s (certificate %s, serial %x)",
                     listener, loaded.settings.get("ssl.keystore.location") or "(inline PEM)",
                     entry.dn if entry else "?", entry.serial if entry else 0)

