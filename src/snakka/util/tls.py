"""TLS contexts from Kafka's ``ssl.*`` configs: the part the broker and our clients share.

What it owns: turning one resolved set of Kafka SSL configs (``ssl.keystore.*``,
``ssl.truststore.*``, ``ssl.client.auth``, ``ssl.enabled.protocols``, ``ssl.cipher.suites``,
``ssl.endpoint.identification.algorithm``) into an :class:`ssl.SSLContext`, server side or client
side, with Kafka's rules for what may be combined. It reads the key and trust stores (files or
inline PEM) and nothing else: no sockets. The broker resolves per-listener overrides first
(security/ssl.py); the client passes its own config (client/connection.py). A bad config raises
:class:`TlsConfigError` naming the config, never a bare ``ssl.SSLError``.

Store types (Kafka's ``ssl.keystore.type`` / ``ssl.truststore.type``):

- ``PEM``: a file holding the private key and the certificate chain (keystore), or CA
  certificates (truststore); or the same inline (``ssl.keystore.key`` +
  ``ssl.keystore.certificate.chain``, ``ssl.truststore.certificates``). As in Kafka, a PEM
  keystore takes ``ssl.key.password`` only, never ``ssl.keystore.password``.
- ``PKCS12``: read with the ``cryptography`` library (``pip install cryptography``).
- ``JKS`` (Kafka's default type): Java's JKS loader also opens PKCS12 files (keytool writes
  PKCS12 since Java 9), and so do we; a real JKS file is refused with a message saying how to
  convert it.

Python's ``ssl`` module loads a certificate chain only from a file, so a key that did not come
from a PEM file (PKCS12, inline PEM) is written for the duration of one ``load_cert_chain`` call
to a private temporary file, its key encrypted with a random one-time password.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["TlsConfigError", "TlsSettings", "server_context", "client_context",
           "KAFKA_SSL_DEFAULTS", "SSL_CONFIG_NAMES"]

# Kafka's defaults for the ssl.* configs both sides share (Kafka 4.0's SslConfigs).
KAFKA_SSL_DEFAULTS: dict[str, str | None] = {
    "ssl.protocol": "TLSv1.3",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.cipher.suites": "",
    "ssl.keystore.type": "JKS",
    "ssl.keystore.location": None,
    "ssl.keystore.password": None,
    "ssl.key.password": None,
    "ssl.keystore.key": None,
    "ssl.keystore.certificate.chain": None,
    "ssl.truststore.type": "JKS",
    "ssl.truststore.location": None,
    "ssl.truststore.password": None,
    "ssl.truststore.certificates": None,
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.client.auth": "none",
}
SSL_CONFIG_NAMES = tuple(KAFKA_SSL_DEFAULTS)

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_SSL_PROTOCOLS = ("TLS", "TLSv1.2", "TLSv1.3")
_JKS_MAGIC = b"\xfe\xed\xfe\xed"


class TlsConfigError(ValueError):
    """An ``ssl.*`` config is invalid or its store cannot be read; ``name`` is the config."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"Invalid value for configuration {name}: {reason}")
        self.name = name
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """One side's resolved ``ssl.*`` configs (Kafka names; unset = Kafka's default)."""

    configs: Mapping[str, str | None]

    def get(self, name: str) -> str | None:
        v = self.configs.get(name)
        if v is None:
            return KAFKA_SSL_DEFAULTS.get(name)
        v = str(v).strip()
        return v if v != "" or name == "ssl.endpoint.identification.algorithm" else None

    def list(self, name: str) -> list[str]:
        v = self.get(name)
        return [p.strip() for p in (v or "").split(",") if p.strip()]


# -- contexts ------------------------------------------------------------------------------
def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The broker side of a listener: its key store, the client-auth mode and trust."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, settings)
    _ciphers(ctx, settings)
    if not _load_keystore(ctx, settings):
        raise TlsConfigError("ssl.keystore.location", "an SSL listener needs a key store "
                             "(ssl.keystore.location, or ssl.keystore.key with "
                             "ssl.keystore.certificate.chain)")
    auth = (settings.get("ssl.client.auth") or "none").lower()
    if auth not in ("none", "requested", "required"):
        raise TlsConfigError("ssl.client.auth", f"{auth!r}: must be none, requested or required")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[auth]
    if auth != "none" and not _load_truststore(ctx, settings):
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Java: the JDK's default trust
    return ctx


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client's context: trust (default CAs when no truststore), an optional key store for
    mTLS, and host name checking unless ``ssl.endpoint.identification.algorithm`` is empty."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, settings)
    _ciphers(ctx, settings)
    if not _load_truststore(ctx, settings):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_keystore(ctx, settings)
    algo = (settings.get("ssl.endpoint.identification.algorithm") or "").strip().lower()
    if algo not in ("", "https"):
        raise TlsConfigError("ssl.endpoint.identification.algorithm",
                             f"{algo!r}: must be https or empty")
    ctx.check_hostname = algo == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _versions(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    proto = settings.get("ssl.protocol") or "TLSv1.3"
    if proto not in _SSL_PROTOCOLS:
        raise TlsConfigError("ssl.protocol", f"{proto!r}: supported are "
                             f"{', '.join(_SSL_PROTOCOLS)}")
    enabled = settings.list("ssl.enabled.protocols") or ["TLSv1.2", "TLSv1.3"]
    for p in enabled:
        if p not in _PROTOCOLS:
            raise TlsConfigError("ssl.enabled.protocols", f"{p!r} is not supported (TLSv1.2 "
                                 "and TLSv1.3 are)")
    if proto == "TLSv1.2" and "TLSv1.3" in enabled:
        enabled = [p for p in enabled if p != "TLSv1.3"]  # Java: the context's highest version
        if not enabled:
            raise TlsConfigError("ssl.enabled.protocols", "no enabled protocol is allowed by "
                                 "ssl.protocol=TLSv1.2")
    versions = sorted(_PROTOCOLS[p] for p in enabled)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]


def _ciphers(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    """``ssl.cipher.suites``: Kafka lists IANA names (TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384);
    OpenSSL names are accepted too. TLS 1.3 suites cannot be restricted through Python's ssl
    module and are left enabled."""
    names = settings.list("ssl.cipher.suites")
    if not names:
        return
    openssl = [n for n in (_openssl_cipher_name(s) for s in names) if n]
    if not openssl:
        return  # only TLS 1.3 suites
    try:
        ctx.set_ciphers(":".join(openssl))
    except ssl.SSLError:
        raise TlsConfigError("ssl.cipher.suites", f"no cipher suite of {', '.join(names)} is "
                             "available") from None


_TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                 "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                 "TLS_AES_128_CCM_8_SHA256")


def _openssl_cipher_name(name: str) -> str | None:
    """IANA (Java) suite name -> OpenSSL's; None for a TLS 1.3 suite; others unchanged."""
    if name in _TLS13_SUITES:
        return None
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, cipher = name[4:].partition("_WITH_")
    kx_part = "" if kx == "RSA" else kx.replace("_", "-")
    parts = cipher.split("_")
    # AES_256_GCM_SHA384 -> AES256-GCM-SHA384; AES_128_CBC_SHA -> AES128-SHA
    out: list[str] = []
    i = 0
    while i < len(parts):
        p = parts[i]
        if p in ("AES", "CAMELLIA", "ARIA") and i + 1 < len(parts) and parts[i + 1].isdigit():
            out.append(p + parts[i + 1])
            i += 2
            continue
        if p == "CBC":
            i += 1
            continue
        out.append(p)
        i += 1
    if out and out[-1] == "SHA256" and "CHACHA20" in out:
        out.pop()  # ECDHE-RSA-CHACHA20-POLY1305
    return "-".join(([kx_part] if kx_part else []) + out)


# -- key store -----------------------------------------------------------------------------
def _load_keystore(ctx: ssl.SSLContext, settings: TlsSettings) -> bool:
    """Load the key store into ``ctx``; False when none is configured."""
    location = settings.get("ssl.keystore.location")
    inline_key = settings.get("ssl.keystore.key")
    inline_chain = settings.get("ssl.keystore.certificate.chain")
    key_password = settings.get("ssl.key.password")
    store_password = settings.get("ssl.keystore.password")
    ktype = (settings.get("ssl.keystore.type") or "JKS").upper()
    if inline_key or inline_chain:
        if location:
            raise TlsConfigError("ssl.keystore.key", "cannot be set together with "
                                 "ssl.keystore.location")
        if not (inline_key and inline_chain):
            raise TlsConfigError("ssl.keystore.key" if not inline_key else
                                 "ssl.keystore.certificate.chain",
                                 "ssl.keystore.key and ssl.keystore.certificate.chain must "
                                 "both be set")
        if ktype != "PEM":
            raise TlsConfigError("ssl.keystore.type", f"{ktype}: inline keys "
                                 "(ssl.keystore.key) need ssl.keystore.type=PEM")
        _no_store_password_with_pem(store_password)
        pem = _pem_text(inline_chain) + "\n" + _pem_text(inline_key) + "\n"
        _load_chain_from_pem(ctx, pem.encode(), key_password, "ssl.keystore.key")
        return True
    if not location:
        return False
    data = _read(location, "ssl.keystore.location")
    if ktype == "PEM":
        _no_store_password_with_pem(store_password)
        try:
            ctx.load_cert_chain(location, password=_password_cb(key_password))
        except (ssl.SSLError, ValueError) as e:
            raise TlsConfigError("ssl.keystore.location", f"{location}: not a PEM key store "
                                 f"with a private key and its certificate chain, or wrong "
                                 f"ssl.key.password ({_reason(e)})") from None
        return True
    if ktype in ("PKCS12", "JKS"):
        if data[:4] == _JKS_MAGIC:
            raise TlsConfigError("ssl.keystore.location", f"{location} is a JKS key store, "
                                 "which snakka cannot read: convert it with keytool "
                                 "-importkeystore -deststoretype PKCS12, or use PEM")
        p12_pem, one_time = _pkcs12_to_pem(data, store_password, "ssl.keystore.location",
                                           location, key_password)
        _load_chain_from_pem(ctx, p12_pem, one_time, "ssl.keystore.location")
        return True
    raise TlsConfigError("ssl.keystore.type", f"{ktype}: supported are PEM, PKCS12 (and JKS "
                         "files in PKCS12 format)")


def _no_store_password_with_pem(store_password: str | None) -> None:
    if store_password:
        raise TlsConfigError("ssl.keystore.password", "SSL key store password cannot be "
                             "specified with PEM format, only key password may be specified")


def _pem_text(value: str) -> str:
    # Java properties files often carry PEM on one line with literal "\n" escapes removed by
    # the parser; accept PEM whose line breaks became spaces too.
    v = value.strip()
    if "\n" not in v and "-----BEGIN" in v:
        import re

        def fix(m: re.Match[str]) -> str:
            body = m.group(2).replace(" ", "\n")
            return f"{m.group(1)}\n{body}\n{m.group(3)}"

        v = re.sub(r"(-----BEGIN [A-Z0-9 ]+-----)\s*(.*?)\s*(-----END [A-Z0-9 ]+-----)",
                   fix, v)
    return v


def _load_chain_from_pem(ctx: ssl.SSLContext, pem: bytes, password: str | None,
                         config: str) -> None:
    """load_cert_chain from bytes, through a private temporary file."""
    fd, path = tempfile.mkstemp(prefix="snakka-tls-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path, password=_password_cb(password))
    except (ssl.SSLError, ValueError) as e:
        raise TlsConfigError(config, f"the key or certificate chain cannot be used "
                             f"({_reason(e)})") from None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _password_cb(password: str | None):  # noqa: ANN202 - ssl's callback type
    # A callback instead of the string: with no password, OpenSSL would prompt on the terminal
    # for an encrypted key; the callback answers "" and the load fails instead.
    return lambda: (password or "")


def _pkcs12_to_pem(data: bytes, password: str | None, config: str, location: str,
                   key_password: str | None) -> tuple[bytes, str]:
    """The PKCS12 store as PEM (key, certificate, chain), its key re-encrypted with a fresh
    one-time password (returned with it): the key is never on disk in clear."""
    pkcs12, serialization = _cryptography(config)
    pw = password.encode() if password else None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, pw)
    except ValueError as e:
        if key_password and key_password != password:
            try:
                key, cert, extra = pkcs12.load_key_and_certificates(data, key_password.encode())
            except ValueError:
                raise TlsConfigError(config, f"{location}: not a PKCS12 key store, or wrong "
                                     f"ssl.keystore.password ({e})") from None
        else:
            raise TlsConfigError(config, f"{location}: not a PKCS12 key store, or wrong "
                                 f"ssl.keystore.password ({e})") from None
    if key is None or cert is None:
        raise TlsConfigError(config, f"{location}: the PKCS12 key store has no private key "
                             "entry with a certificate")
    one_time = secrets.token_hex(16)
    out = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.BestAvailableEncryption(one_time.encode()))
    out += cert.public_bytes(serialization.Encoding.PEM)
    for c in extra or ():
        out += c.public_bytes(serialization.Encoding.PEM)
    return out, one_time


# -- trust store ---------------------------------------------------------------------------
def _load_truststore(ctx: ssl.SSLContext, settings: TlsSettings) -> bool:
    location = settings.get("ssl.truststore.location")
    inline = settings.get("ssl.truststore.certificates")
    ttype = (settings.get("ssl.truststore.type") or "JKS").upper()
    password = settings.get("ssl.truststore.password")
    if inline:
        if location:
            raise TlsConfigError("ssl.truststore.certificates", "cannot be set together with "
                                 "ssl.truststore.location")
        if ttype != "PEM":
            raise TlsConfigError("ssl.truststore.type", f"{ttype}: inline certificates "
                                 "(ssl.truststore.certificates) need ssl.truststore.type=PEM")
        _load_cadata(ctx, _pem_text(inline), "ssl.truststore.certificates")
        return True
    if not location:
        return False
    data = _read(location, "ssl.truststore.location")
    if ttype == "PEM":
        if password:
            raise TlsConfigError("ssl.truststore.password", "SSL trust store password cannot "
                                 "be specified for PEM format")
        _load_cadata(ctx, data.decode("ascii", "replace"), "ssl.truststore.location")
        return True
    if ttype in ("PKCS12", "JKS"):
        if data[:4] == _JKS_MAGIC:
            raise TlsConfigError("ssl.truststore.location", f"{location} is a JKS trust store, "
                                 "which snakka cannot read: convert it with keytool "
                                 "-importkeystore -deststoretype PKCS12, or use PEM")
        pkcs12, serialization = _cryptography("ssl.truststore.location")
        try:
            key, cert, extra = pkcs12.load_key_and_certificates(
                data, password.encode() if password else None)
        except ValueError as e:
            raise TlsConfigError("ssl.truststore.location", f"{location}: not a PKCS12 trust "
                                 f"store, or wrong ssl.truststore.password ({e})") from None
        certs = ([cert] if cert is not None else []) + list(extra or ())
        if not certs:
            raise TlsConfigError("ssl.truststore.location", f"{location}: no certificate")
        _load_cadata(ctx, "".join(c.public_bytes(serialization.Encoding.PEM).decode()
                                  for c in certs), "ssl.truststore.location")
        return True
    raise TlsConfigError("ssl.truststore.type", f"{ttype}: supported are PEM, PKCS12 (and JKS "
                         "files in PKCS12 format)")


def _load_cadata(ctx: ssl.SSLContext, pem: str, config: str) -> None:
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise TlsConfigError(config, "no PEM certificate found")
    try:
        ctx.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as e:
        raise TlsConfigError(config, f"the certificates cannot be loaded ({_reason(e)})") \
            from None


# -- helpers -------------------------------------------------------------------------------
def _read(path: str, config: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsConfigError(config, f"{path}: {e.strerror or e}") from None


def _cryptography(config: str):  # noqa: ANN202 - optional modules
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise TlsConfigError(config, "PKCS12 stores need the 'cryptography' package "
                             "(pip install cryptography), or use PEM") from None
    return pkcs12, serialization


def _reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError) and e.reason:
        return str(e.reason)
    return str(e) or type(e).__name__
