"""The web console's pure parts (no broker): escaping in the pages, value decoding, the
throughput history, HTTP Basic against PLAIN and SCRAM credentials, form tokens."""

from __future__ import annotations

import asyncio
import base64

from snakka.console import pages
from snakka.console.auth import ConsoleAuthenticator, CsrfTokens
from snakka.console.data import CONSOLE_VALUE_PREVIEW_BYTES, decode_bytes
from snakka.console.throughput import ThroughputHistory, Totals
from snakka.security.principal import ANONYMOUS, KafkaPrincipal
from snakka.util.scram import ScramMechanism, make_credential

EVIL = '<script>alert("x")</script>\'&'


def test_escape_and_url_segment():
    assert pages.e(EVIL) == "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#x27;&amp;"
    assert pages.u("a/b c") == "a%2Fb%20c"
    html = pages.groups({"groups": [{"group_id": EVIL, "type": "classic", "state": "Empty"}]},
                        False)
    assert "<script>" not in html and pages.e(EVIL) in html


def test_decode_bytes():
    assert decode_bytes(None) is None
    j = decode_bytes(b'{"a": [1, 2]}')
    assert j is not None and j["json"] == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    b = decode_bytes(b"\xff\x00")
    assert b == {"size": 2, "truncated": False, "encoding": "base64", "text": "/wA="}
    big = decode_bytes(b"x" * (CONSOLE_VALUE_PREVIEW_BYTES + 5))
    assert big is not None and big["truncated"] and len(big["text"]) == \
        CONSOLE_VALUE_PREVIEW_BYTES


def _totals(b: int, m: int, o: int, r: int) -> Totals:
    return Totals(b, m, o, r, {"t": (b, m)})


def test_throughput_rates():
    h = ThroughputHistory(samples=3)
    h.sample(10.0, _totals(0, 0, 0, 0))
    assert h.latest() is None
    h.sample(12.0, _totals(2000, 20, 500, 8))
    assert h.latest() == {"bytes_in": 1000.0, "messages_in": 10.0, "bytes_out": 250.0,
                          "requests": 4.0}
    assert h.topic_rates() == {"t": {"bytes_in": 1000.0, "messages_in": 10.0}}
    for i in range(3, 8):
        h.sample(10.0 + 2 * i, _totals(2000, 20, 500, 8))
    s = h.series(wall_now_ms=1_000_000, mono_now_s=24.0)
    assert len(s["points"]) == 3  # bounded
    assert s["points"][-1] == [1_000_000, 0.0, 0.0, 0.0, 0.0]
    assert s["points"][0][0] == 996_000  # two samples of 2 s earlier


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_plain_and_scram():
    cred = make_credential(ScramMechanism.SCRAM_SHA_256, "carol-pw", 4096)
    lookups: list[str] = []

    def lookup(user: str, mech: ScramMechanism):
        lookups.append(user)
        return cred if (user, mech) == ("carol", ScramMechanism.SCRAM_SHA_256) else None

    auth = ConsoleAuthenticator(True, {"alice": "alice-pw"}, [ScramMechanism.SCRAM_SHA_256],
                                lookup)

    async def run():
        assert await auth.authenticate(_basic("alice", "alice-pw")) == \
            KafkaPrincipal("User", "alice")
        assert await auth.authenticate(_basic("alice", "nope")) is None
        assert await auth.authenticate(_basic("carol", "carol-pw")) == \
            KafkaPrincipal("User", "carol")
        assert await auth.authenticate(_basic("carol", "wrong")) is None
        assert await auth.authenticate(None) is None
        assert await auth.authenticate("Basic !!!") is None
        assert await auth.authenticate("Bearer x") is None
        off = ConsoleAuthenticator(False, {}, [], None)
        assert await off.authenticate(None) == ANONYMOUS

    asyncio.run(run())


def test_csrf_tokens():
    t = CsrfTokens(b"k" * 32)
    alice, bob = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")
    assert t.valid(alice, t.token(alice))
    assert not t.valid(bob, t.token(alice))
    assert not t.valid(alice, None) and not t.valid(alice, "")
    assert not CsrfTokens(b"j" * 32).valid(alice, t.token(alice))


def test_acl_form_parses_kafka_names_and_refuses_what_kafka_cannot_parse():
    from snakka.console.admin import AclForm
    from snakka.protocol.acls import AclOperation, PatternType, ResourceType

    a = AclForm({"principal": "User:bob", "operation": "describe-configs",
                 "resource_type": "topic", "resource_name": "orders"})
    assert a.problem is None
    assert (a.operation, a.resource_type, a.pattern_type, a.host) == \
        (AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, PatternType.LITERAL, "*")
    cluster = AclForm({"principal": "User:ops", "operation": "ALTER",
                       "resource_type": "CLUSTER"})
    assert cluster.problem is None and cluster.resource_name == "kafka-cluster"
    # UNKNOWN (0) would make the broker's handler close the connection: refused here.
    assert "UNKNOWN" in (AclForm({"principal": "User:x", "operation": "UNKNOWN",
                                  "resource_type": "TOPIC", "resource_name": "t"}).problem
                         or "")
    assert "Type:name" in (AclForm({"principal": "bob", "operation": "READ",
                                    "resource_type": "TOPIC", "resource_name": "t"}).problem
                           or "")
    assert AclForm({"principal": "User:x", "operation": "READ",
                    "resource_type": "TOPIC"}).problem is not None  # no name
    flt = AclForm({}, as_filter=True)
    assert flt.problem is None and flt.binding() == {
        "resource_type": "ANY", "resource_name": None, "pattern_type": "ANY",
        "principal": None, "host": None, "operation": "ANY", "permission_type": "ANY"}


def test_admin_pages_escape_and_hide_forms_when_read_only():
    from snakka.console import admin_pages

    acl = {"resource_type": "GROUP", "resource_name": EVIL, "pattern_type": "LITERAL",
           "principal": f"User:{EVIL}", "host": "*", "operation": "READ",
           "permission_type": "ALLOW"}
    d = {"filter": {**acl, "resource_name": EVIL, "principal": EVIL}, "acls": [acl],
         "error": None, "can_alter": False}
    html = admin_pages.acls(d, csrf="t", read_only=False)
    assert "<script>" not in html and pages.e(EVIL) in html
    assert "You may not ALTER the cluster" in html and 'id="acl-create-form"' in html
    assert "<form method=\"post\"" not in admin_pages.acls(d, csrf="t", read_only=True)
    users = {"scram": [{"user": EVIL, "error": None, "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 4096}]}], "error": None,
        "plain": [EVIL], "can_alter": True, "mechanisms": ["SCRAM-SHA-256"],
        "min_iterations": 4096, "max_iterations": 16384}
    html = admin_pages.users(users, csrf="t", read_only=False)
    assert "<script>" not in html and html.count(pages.e(EVIL)) >= 3
    quotas = {"quotas": [{"entity": {"user": EVIL}, "key": "producer_byte_rate",
                          "value": 2097152.0}], "error": None, "can_alter": True,
              "entity_types": ["user"]}
    html = admin_pages.quotas(quotas, csrf="t", read_only=False)
    assert "<script>" not in html and "2,097,152 (2.0 MiB/s)" in html
    assert admin_pages.quota_value("request_percentage", 12.5) == "12.5"
    assert admin_pages.topics_admin(csrf="t", read_only=True) == ""
