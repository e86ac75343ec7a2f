"""TLS for the broker's listeners: per-listener SSL configs, contexts, and mTLS principals.

What it owns:

- **Per-listener configs** (Kafka's rule): for a listener named ``INTERNAL``,
  ``listener.name.internal.ssl.keystore.location`` wins over ``ssl.keystore.location``; each
  ``ssl.*`` config is resolved on its own. :func:`listener_ssl_settings` does it;
  :func:`server_ssl_context` builds the listener's ``ssl.SSLContext`` (util/tls.py, shared with
  the client) and turns any problem into one ``ConfigError`` naming the config as the user
  wrote it (the prefixed name when the override was wrong).
- **Principals of TLS connections** (Kafka's ``DefaultKafkaPrincipalBuilder`` for SSL): a client
  certificate's subject, as Java's ``X500Principal.getName()`` prints it (RFC 2253,
  :func:`rfc2253_name`), mapped by ``ssl.principal.mapping.rules``
  (:class:`SslPrincipalMapper`, Kafka's semantics exactly) -> ``User:<name>``; no certificate ->
  ``User:ANONYMOUS``.

Sans-I/O apart from reading the key and trust stores. The listener (server/listener.py) runs the
handshake and calls :func:`principal_from_certificate` with the peer's DER certificate.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable

from snakka.security.principal import ANONYMOUS, KafkaPrincipal
from snakka.util.tls import SSL_CONFIG_NAMES, TlsConfigError, TlsSettings, server_context

__all__ = ["SslPrincipalMapper", "NoMatchingRule", "ListenerTls", "listener_ssl_settings",
           "server_ssl_context", "rfc2253_name", "principal_from_certificate",
           "listener_prefix", "LISTENER_SSL_CONFIGS"]

# The configs a listener may override with listener.name.<name>.<config> (Kafka: every SSL
# config is reconfigurable per listener), plus the principal mapping rules.
LISTENER_SSL_CONFIGS = SSL_CONFIG_NAMES + ("ssl.principal.mapping.rules",)


def listener_prefix(listener_name: str) -> str:
    """Kafka's ``ListenerName.configPrefix``: ``listener.name.<name lower-cased>.``"""
    return f"listener.name.{listener_name.lower()}."


def _resolve(raw: Callable[[str], str | None], listener_name: str,
             name: str) -> tuple[str | None, str]:
    """(value, the config name it came from): the listener's override wins."""
    prefixed = listener_prefix(listener_name) + name
    v = raw(prefixed)
    if v is not None:
        return v, prefixed
    return raw(name), name


def listener_ssl_settings(raw: Callable[[str], str | None],
                          listener_name: str) -> tuple[TlsSettings, dict[str, str]]:
    """The listener's resolved ssl.* configs, and for each the config name that set it.

    ``raw(name)`` is the broker's configured string for ``name`` (None when unset; the
    defaults of util/tls.py apply)."""
    values: dict[str, str | None] = {}
    origin: dict[str, str] = {}
    for name in SSL_CONFIG_NAMES:
        values[name], origin[name] = _resolve(raw, listener_name, name)
    return TlsSettings(values), origin


def server_ssl_context(raw: Callable[[str], str | None], listener_name: str) -> ssl.SSLContext:
    """The SSLContext of one listener. A bad config raises :class:`TlsConfigError` (a
    ValueError) naming the config as the user set it: the listener-prefixed name when the
    listener's override is the one at fault."""
    settings, origin = listener_ssl_settings(raw, listener_name)
    try:
        return server_context(settings)
    except TlsConfigError as e:
        raise TlsConfigError(origin.get(e.name, e.name),
                             f"{e.reason} (listener {listener_name})") from None


# -- ssl.principal.mapping.rules -----------------------------------------------------------
# Kafka's SslPrincipalMapper grammar: DEFAULT, or RULE:pattern/replacement/[LU] with '\'
# escaping '/' inside pattern and replacement; rules separated by commas.
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule of ssl.principal.mapping.rules applies to a name (authentication fails)."""


class _Rule:
    __slots__ = ("is_default", "pattern", "replacement", "to_lower", "to_upper")

    def __init__(self, pattern: str | None = None, replacement: str | None = None,
                 to_lower: bool = False, to_upper: bool = False) -> None:
        self.is_default = pattern is None
        self.pattern = None if pattern is None else re.compile(pattern)
        self.replacement = replacement or ""
        self.to_lower, self.to_upper = to_lower, to_upper

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        result = None
        m = self.pattern.fullmatch(dn)
        if m:
            groups = self.pattern.groups
            replacement = _escape_literal_back_references(self.replacement, groups)
            result = self.pattern.sub(lambda mm: _java_replacement(mm, replacement), dn)
        if self.to_lower and result is not None:
            result = result.lower()
        elif self.to_upper and result is not None:
            result = result.upper()
        return result

    def __repr__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        assert self.pattern is not None
        s = f"RULE:{self.pattern.pattern}/{self.replacement}"
        return s + ("/L" if self.to_lower else "/U" if self.to_upper else "")


def _escape_literal_back_references(value: str, groups: int) -> str:
    """Kafka's rule: a ``$n`` naming a group the pattern does not have is literal text (``$12``
    with 3 groups is group 1 then "2"; ``$4`` with 3 groups is "$4"). As in Kafka, positions
    come from the original replacement."""
    if groups == 0:
        return value
    original = value
    for m in _BACK_REFERENCE.finditer(original):
        num = m.group(1)
        if num.startswith("0"):
            continue
        idx = int(num)
        while idx > groups and idx >= 10:
            idx //= 10
        if idx > groups:
            start = m.start(1)
            value = value[:start - 1] + "\\" + value[start - 1:]
    return value


def _java_replacement(m: re.Match[str], replacement: str) -> str:
    """Java's ``Matcher.appendReplacement``: ``\\x`` is x, ``$n`` group n (greedy while the
    number names a group), ``${name}`` a named group."""
    out: list[str] = []
    i, n = 0, len(replacement)
    groups = m.re.groups
    while i < n:
        c = replacement[i]
        if c == "\\":
            i += 1
            if i >= n:
                raise ValueError("character to be escaped is missing")
            out.append(replacement[i])
            i += 1
        elif c == "$":
            i += 1
            if i >= n:
                raise ValueError("Illegal group reference: group index is missing")
            if replacement[i] == "{":
                end = replacement.find("}", i)
                if end < 0:
                    raise ValueError("named capturing group is missing trailing '}'")
                out.append(m.group(replacement[i + 1:end]) or "")
                i = end + 1
                continue
            if not replacement[i].isdigit():
                raise ValueError("Illegal group reference")
            ref = int(replacement[i])
            if ref > groups:
                raise ValueError(f"No group {ref}")
            i += 1
            while i < n and replacement[i].isdigit():
                nxt = ref * 10 + int(replacement[i])
                if nxt > groups:
                    break
                ref = nxt
                i += 1
            out.append(m.group(ref) or "")
        else:
            out.append(c)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """Kafka's ``SslPrincipalMapper``: the first rule that applies names the principal."""

    def __init__(self, rules: list[_Rule]) -> None:
        self.rules = rules

    @classmethod
    def from_rules(cls, text: str | None) -> SslPrincipalMapper:
        """Parse ``ssl.principal.mapping.rules``; ValueError for an invalid rule."""
        raw = ["DEFAULT"] if text is None else [
            m.group(1) for m in _RULE_SPLITTER.finditer(text.strip())]
        rules: list[_Rule] = []
        for rule in raw:
            m = _RULE_PARSER.match(rule)
            if m is None:
                raise ValueError(f"Invalid rule: {rule}")
            if len(rule) != m.end():
                raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: "
                                 f"`{rule[m.end():]}`")
            if m.group(1) is not None:
                rules.append(_Rule())
            elif m.group(2) is not None:
                try:
                    rules.append(_Rule(m.group(2), m.group(4), m.group(6) == "L",
                                       m.group(6) == "U"))
                except re.error as e:
                    raise ValueError(f"Invalid rule: {rule} ({e})") from None
            # an empty rule is ignored
        return cls(rules)

    def get_name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self.rules}")

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = {self.rules})"


# -- RFC 2253 names as Java prints them ----------------------------------------------------
# Java's X500Principal.getName() (RFC 2253): these keywords by name, every other attribute as
# its OID with the value's DER encoding in hex (#...).
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
    "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}


def _escape_rfc2253(value: str) -> str:
    out: list[str] = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;':
            out.append("\\" + ch)
        elif (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    b = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(b)]) + b


def rfc2253_name(der_certificate: bytes) -> str:
    """The certificate's subject as Java's ``X500Principal.getName()`` prints it: RDNs from
    last to first, ``CN=alice,OU=eng,O=Example,C=NO``. Needs the ``cryptography`` package."""
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der_certificate)
    parts: list[str] = []
    for rdn in reversed(list(cert.subject.rdns)):
        avas = []
        for attr in rdn:
            oid = attr.oid.dotted_string
            keyword = _RFC2253_KEYWORDS.get(oid)
            value = attr.value if isinstance(attr.value, str) else bytes(attr.value).decode(
                "latin-1")
            if keyword is not None:
                avas.append(f"{keyword}={_escape_rfc2253(value)}")
            else:
                raw = value.encode("utf-8")
                asn1_type = getattr(attr, "_type", None)  # the value's ASN.1 string type
                tag = int(asn1_type.value) if asn1_type is not None else 0x0C  # UTF8String
                avas.append(f"{oid}=#{(bytes([tag]) + _der_length(len(raw)) + raw).hex()}")
        parts.append("+".join(avas))
    return ",".join(parts)


def principal_from_certificate(der_certificate: bytes | None,
                               mapper: SslPrincipalMapper) -> KafkaPrincipal:
    """Kafka's principal of an SSL connection: ``User:ANONYMOUS`` without a client certificate,
    else ``User:`` + the mapped subject name (NoMatchingRule when no rule applies)."""
    if not der_certificate:
        return ANONYMOUS
    return KafkaPrincipal("User", mapper.get_name(rfc2253_name(der_certificate)))


class ListenerTls:
    """What an SSL (or SASL_SSL) listener's connections need for TLS: the context, the bound
    on the handshake (``snakka.ssl.handshake.timeout.ms``) and the principal mapping rules."""

    __slots__ = ("context", "handshake_timeout_s", "mapper")

    def __init__(self, context: ssl.SSLContext, handshake_timeout_s: float,
                 mapper: SslPrincipalMapper) -> None:
        self.context = context
        self.handshake_timeout_s = handshake_timeout_s
        self.mapper = mapper

    @classmethod
    def for_listener(cls, raw: Callable[[str], str | None], listener_name: str,
                     handshake_timeout_ms: int) -> ListenerTls:
        """Build from the broker's configs (``raw``: configured string or None, per
        :func:`listener_ssl_settings`); TlsConfigError names a bad config."""
        context = server_ssl_context(raw, listener_name)
        rules, origin = _resolve(raw, listener_name, "ssl.principal.mapping.rules")
        try:
            mapper = SslPrincipalMapper.from_rules(rules)
        except ValueError as e:
            raise TlsConfigError(origin, str(e)) from None
        return cls(context, handshake_timeout_ms / 1000, mapper)
