"""Kafka's JAAS configuration syntax (``sasl.jaas.config``), parsed: the broker's SASL
configuration (security/sasl/config.py) and our clients' (client/sasl.py) read the same lines.

``<LoginModuleClass> <required|requisite|sufficient|optional> key="value" key2=value2;``: one
login module per entry, as Kafka's ``JaasConfig`` accepts it (quoted values may contain
spaces and ``\\"`` escapes; an unquoted value ends at whitespace or ``;``). PLAIN's users are its
``user_<name>`` options (Kafka's ``PlainServerCallbackHandler``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["JaasConfigError", "JaasEntry", "parse_jaas_config", "plain_users", "single_entry"]

_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:(?P<key>[^\s=;"]+)\s*=\s*(?:"(?P<q>(?:[^"\\]|\\.)*)"'
                    r'|(?P<u>[^\s;"]+))|(?P<semi>;))', re.S)


class JaasConfigError(ValueError):
    pass


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every login-module entry of ``text`` (JaasConfigError if malformed)."""
    entries: list[JaasEntry] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n:
            break
        m = re.compile(r"([A-Za-z_$][\w$.]*)\s+(\w+)").match(text, pos)
        if not m:
            raise JaasConfigError(f"expected '<LoginModule> <flag>' at {text[pos:pos + 30]!r}")
        module, flag = m[1], m[2].lower()
        if flag not in _FLAGS:
            raise JaasConfigError(f"invalid control flag {m[2]!r} (one of {', '.join(_FLAGS)})")
        pos = m.end()
        options: dict[str, str] = {}
        while True:
            t = _TOKEN.match(text, pos)
            if not t:
                raise JaasConfigError(f"expected key=value or ';' at {text[pos:pos + 30]!r}")
            pos = t.end()
            if t["semi"]:
                break
            value = t["q"] if t["q"] is not None else t["u"]
            if t["q"] is not None:
                value = re.sub(r"\\(.)", r"\1", value)
            options[t["key"]] = value
        entries.append(JaasEntry(module, flag, options))
    if not entries:
        raise JaasConfigError("no login module")
    return entries


def single_entry(text: str) -> JaasEntry:
    """Kafka's rule for ``sasl.jaas.config``: exactly one login module."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasConfigError(f"must contain exactly one login module, found {len(entries)}")
    return entries[0]


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """PLAIN's users: the ``user_<name>="<password>"`` options."""
    return {k[len("user_"):]: v for k, v in entry.options.items()
            if k.startswith("user_") and len(k) > len("user_")}
