"""The console's administration against in-process brokers, cross-checked with real clients:
an ACL created in the console is what confluent-kafka's describe_acls lists (and one deleted
there is gone), a SCRAM user created in the console logs in with confluent-kafka over
SASL_PLAINTEXT SCRAM-SHA-256, a topic created in the console has the partitions and configs
confluent-kafka reads; a user without ALTER on the cluster sees the broker's refusal; read-only
mode refuses every administration POST; user-controlled names are escaped."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)
from integration.helpers import wait_until

from console.support import JAAS, PASSWORDS, STANDARD, Http, act, create_topic, notice
from snakka.testing import EmbeddedBroker


def plain(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


@pytest.fixture(scope="module")
def secure() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={
            "listeners": "SASL_PLAINTEXT://localhost:0", "console.port": "0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.jaas.config": JAAS, "authorizer.class.name": STANDARD,
            "super.users": "User:admin",
            "connection.failed.authentication.delay.ms": "20"}) as b:
        yield b


def _acls(bs: str, principal: str) -> set[tuple]:
    admin = AdminClient({"bootstrap.servers": bs, **plain("admin")})
    found = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(timeout=30)
    return {(b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host,
             b.operation.name, b.permission_type.name) for b in found}


def test_acl_created_and_deleted_in_the_console(secure):
    bs = secure.bootstrap_servers
    admin = Http(secure.console_url, "admin", "admin-secret")
    assert 'id="acl-create-form"' in admin.page("/acls")
    msg = act(admin, "/acls/create", {
        "principal": "User:bob", "permission_type": "ALLOW", "operation": "WRITE",
        "host": "*", "resource_type": "TOPIC", "resource_name": "payments-",
        "pattern_type": "PREFIXED"}, "/acls")
    assert msg.startswith("created ACL: ALLOW User:bob WRITE"), msg
    act(admin, "/acls/create", {
        "principal": "User:bob", "operation": "READ", "resource_type": "GROUP",
        "resource_name": "bob-group"}, "/acls")
    expected = {("TOPIC", "payments-", "PREFIXED", "User:bob", "*", "WRITE", "ALLOW"),
                ("GROUP", "bob-group", "LITERAL", "User:bob", "*", "READ", "ALLOW")}
    assert _acls(bs, "User:bob") == expected  # confluent-kafka's describe_acls
    # The console's list and its filters.
    listed = admin.json("/api/acls?principal=User:bob")["acls"]
    assert {tuple(a[k] for k in ("resource_type", "resource_name", "pattern_type",
                                 "principal", "host", "operation", "permission_type"))
            for a in listed} == expected
    only_topics = admin.json("/api/acls?principal=User:bob&resource_type=TOPIC")["acls"]
    assert [a["resource_name"] for a in only_topics] == ["payments-"]
    match = admin.json("/api/acls?resource_type=TOPIC&resource_name=payments-eu"
                       "&pattern_type=MATCH")["acls"]
    assert [(a["principal"], a["pattern_type"]) for a in match] == [("User:bob", "PREFIXED")]
    page = admin.page("/acls?principal=User%3Abob")
    assert page.count('<tr class="acl"') == 2
    # Delete one (the row's form carries the exact binding).
    msg = act(admin, "/acls/delete", {
        "principal": "User:bob", "permission_type": "ALLOW", "operation": "READ",
        "host": "*", "resource_type": "GROUP", "resource_name": "bob-group",
        "pattern_type": "LITERAL"}, "/acls")
    assert msg.startswith("deleted ACL"), msg
    assert _acls(bs, "User:bob") == {
        ("TOPIC", "payments-", "PREFIXED", "User:bob", "*", "WRITE", "ALLOW")}
    msg = act(admin, "/acls/delete", {
        "principal": "User:bob", "operation": "READ", "resource_type": "GROUP",
        "resource_name": "bob-group"}, "/acls")
    assert msg.startswith("no such ACL"), msg
    # The delete form removes one binding: a filter matching many is refused.
    msg = act(admin, "/acls/delete", {
        "principal": "User:bob", "operation": "ANY", "resource_type": "ANY",
        "resource_name": "payments-", "pattern_type": "MATCH"}, "/acls")
    assert "names it exactly" in msg
    assert len(_acls(bs, "User:bob")) == 1
    # A form Kafka could not parse is refused by the console, not sent.
    msg = act(admin, "/acls/create", {"principal": "User:bob", "operation": "NOPE",
                                      "resource_type": "TOPIC", "resource_name": "x"}, "/acls")
    assert "unknown AclOperation 'NOPE'" in msg
    msg = act(admin, "/acls/create", {"principal": "bob", "operation": "READ",
                                      "resource_type": "TOPIC", "resource_name": "x"}, "/acls")
    assert "Type:name" in msg
    assert _acls(bs, "bob") == set()


def test_a_user_without_alter_on_the_cluster_sees_the_refusal(secure):
    bs = secure.bootstrap_servers
    alice = Http(secure.console_url, "alice", "alice-secret")
    page = alice.page("/acls")
    # DescribeAcls needs DESCRIBE on the cluster: the broker's error is shown, not a crash.
    assert 'id="acl-error"' in page and "CLUSTER_AUTHORIZATION_FAILED" in page
    assert "You may not ALTER the cluster" in page
    assert alice.json("/api/acls")["error"].startswith("CLUSTER_AUTHORIZATION_FAILED")
    msg = act(alice, "/acls/create", {"principal": "User:alice", "operation": "ALL",
                                      "resource_type": "TOPIC", "resource_name": "*"}, "/acls")
    assert msg.startswith("CLUSTER_AUTHORIZATION_FAILED"), msg
    assert _acls(bs, "User:alice") == set()
    users = alice.page("/users")
    assert "CLUSTER_AUTHORIZATION_FAILED" in users
    assert '<tr class="plain-user">' not in users  # the JAAS users are not listed to her
    msg = act(alice, "/users/upsert", {"user": "mallory", "mechanism": "SCRAM-SHA-256",
                                       "password": "pw"}, "/users")
    assert msg.startswith("CLUSTER_AUTHORIZATION_FAILED"), msg
    assert "mallory" not in Http(secure.console_url, "admin", "admin-secret").page("/users")
    msg = act(alice, "/topics/create", {"name": "alices-topic"}, "/topics")
    assert msg.startswith("TOPIC_AUTHORIZATION_FAILED"), msg
    assert alice.json("/api/quotas")["error"].startswith("CLUSTER_AUTHORIZATION_FAILED")
    msg = act(alice, "/quotas/alter", {"entity_type": "user", "entity_name": "alice",
                                       "key": "producer_byte_rate", "value": "1"}, "/quotas")
    assert msg.startswith("CLUSTER_AUTHORIZATION_FAILED"), msg


def test_topic_administration_is_authorized_per_topic(secure):
    bs = secure.bootstrap_servers
    admin = Http(secure.console_url, "admin", "admin-secret")
    alice = Http(secure.console_url, "alice", "alice-secret")
    assert act(admin, "/topics/create", {"name": "ledger", "partitions": "1"}, "/topics") == \
        "created topic ledger with 1 partition(s)"
    act(admin, "/acls/create", {"principal": "User:alice", "operation": "DESCRIBE",
                                "resource_type": "TOPIC", "resource_name": "ledger"}, "/acls")
    page = "/topics/ledger"
    for path, form in (("/topics/ledger/config", {"key": "retention.ms", "value": "1"}),
                       ("/topics/ledger/partitions", {"count": "3"}),
                       ("/topics/ledger/delete", {"confirm": "ledger"})):
        msg = act(alice, path, form, page)
        assert msg.startswith("TOPIC_AUTHORIZATION_FAILED"), (path, msg)
    cadmin = AdminClient({"bootstrap.servers": bs, **plain("admin")})
    assert len(cadmin.list_topics(timeout=30).topics["ledger"].partitions) == 1
    res = ConfigResource(ConfigResource.Type.TOPIC, "ledger")
    assert cadmin.describe_configs([res])[res].result(timeout=30)["retention.ms"].value == \
        "604800000"  # unchanged: Kafka's default

    bs = secure.bootstrap_servers
    admin = Http(secure.console_url, "admin", "admin-secret")
    password = "dave-s3cret-pw"
    msg = act(admin, "/users/upsert", {"user": "dave", "mechanism": "SCRAM-SHA-256",
                                       "password": password, "iterations": "8192"}, "/users")
    assert msg == "set the SCRAM-SHA-256 credential of dave (8192 iterations)"
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "dave", "sasl.password": password}
    md = AdminClient({"bootstrap.servers": bs, **sasl}).list_topics(timeout=30)
    # Authenticated: the broker answered Metadata (a failed login raises instead).
    assert md.cluster_id == admin.json("/api/overview")["cluster_id"] and md.brokers
    errors: list = []
    wrong = AdminClient({"bootstrap.servers": bs, **sasl, "sasl.password": "not-it",
                         "error_cb": errors.append})
    wait_until(lambda: wrong.poll(0.2) is not None and errors, 30, "the login's failure")
    assert errors[0].code() == KafkaError._AUTHENTICATION
    # confluent-kafka's describe_user_scram_credentials sees what the console shows.
    cadmin = AdminClient({"bootstrap.servers": bs, **plain("admin")})
    desc = cadmin.describe_user_scram_credentials(["dave"])["dave"].result(timeout=30)
    assert [(i.mechanism.name, i.iterations) for i in desc.scram_credential_infos] == \
        [("SCRAM_SHA_256", 8192)]
    users = admin.json("/api/users")
    dave = next(u for u in users["scram"] if u["user"] == "dave")
    assert dave["credentials"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]
    raw = admin.get("/api/users")[2]
    assert b"salt" not in raw and b"key" not in raw and password.encode() not in raw
    assert password not in admin.page("/users")
    # The PLAIN users of the JAAS line, by name only.
    assert sorted(users["plain"]) == ["admin", "alice"]
    page = admin.page("/users")
    assert '<tr class="plain-user"><td>alice</td></tr>' in page
    assert "alice-secret" not in page and "admin-secret" not in page
    # The console itself now accepts dave's password.
    assert Http(secure.console_url, "dave", password).json("/api/overview")["principal"] == \
        "User:dave"
    # A second mechanism, then deletion of the first.
    act(admin, "/users/upsert", {"user": "dave", "mechanism": "SCRAM-SHA-512",
                                 "password": password}, "/users")
    assert admin.page("/users").count('<tr class="scram-user" data-user="dave">') == 2
    msg = act(admin, "/users/delete", {"user": "dave", "mechanism": "SCRAM-SHA-256"}, "/users")
    assert msg == "deleted the SCRAM-SHA-256 credential of dave"
    desc = cadmin.describe_user_scram_credentials(["dave"])["dave"].result(timeout=30)
    assert [i.mechanism.name for i in desc.scram_credential_infos] == ["SCRAM_SHA_512"]
    # The broker's own validation: iterations out of Kafka's range.
    msg = act(admin, "/users/upsert", {"user": "erin", "mechanism": "SCRAM-SHA-256",
                                       "password": "x", "iterations": "100"}, "/users")
    assert msg.startswith("UNACCEPTABLE_CREDENTIAL"), msg


def test_create_configure_grow_and_delete_a_topic(console_broker, http):
    bs = console_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    assert 'id="topic-create-form"' in http.page("/topics")
    status, headers, _ = http.post("/topics/create", {
        "name": "invoices", "partitions": "4",
        "configs": "retention.ms=86400000\r\ncleanup.policy=compact\r\n"}, page="/topics")
    assert status == 303 and headers["Location"].startswith("/topics/invoices?notice=")
    assert notice(http, headers["Location"]) == "created topic invoices with 4 partition(s)"
    md = admin.list_topics(timeout=30)
    assert len(md.topics["invoices"].partitions) == 4

    def configs() -> dict[str, str]:
        res = ConfigResource(ConfigResource.Type.TOPIC, "invoices")
        entries = admin.describe_configs([res])[res].result(timeout=30)
        return {k: v.value for k, v in entries.items()}

    assert configs()["retention.ms"] == "86400000"
    assert configs()["cleanup.policy"] == "compact"
    # Same name again: the broker's error.
    msg = act(http, "/topics/create", {"name": "invoices"}, "/topics")
    assert msg.startswith("TOPIC_ALREADY_EXISTS"), msg
    # Configs: SET, DELETE, and the broker's validation.
    assert act(http, "/topics/invoices/config", {"key": "retention.ms", "value": "3600000",
                                                 "op": "set"}, "/topics/invoices") == \
        "set retention.ms=3600000"
    assert configs()["retention.ms"] == "3600000"
    assert act(http, "/topics/invoices/config", {"key": "cleanup.policy", "op": "delete"},
               "/topics/invoices") == "removed the override of cleanup.policy"
    assert configs()["cleanup.policy"] == "delete"
    msg = act(http, "/topics/invoices/config", {"key": "retention.ms", "value": "soon",
                                                "op": "set"}, "/topics/invoices")
    assert msg.startswith("INVALID_CONFIG"), msg
    # Partitions.
    assert act(http, "/topics/invoices/partitions", {"count": "6"}, "/topics/invoices") == \
        "invoices now has 6 partitions"
    assert len(admin.list_topics(timeout=30).topics["invoices"].partitions) == 6
    msg = act(http, "/topics/invoices/partitions", {"count": "2"}, "/topics/invoices")
    assert msg.startswith("INVALID_PARTITIONS"), msg
    # Deletion needs the typed name.
    msg = act(http, "/topics/invoices/delete", {"confirm": "invoice"}, "/topics/invoices")
    assert "type the topic's name" in msg
    assert "invoices" in admin.list_topics(timeout=30).topics
    status, headers, _ = http.post("/topics/invoices/delete", {"confirm": "invoices"})
    assert headers["Location"].startswith("/topics?notice=")
    assert notice(http, headers["Location"]) == "deleted topic invoices"
    assert "invoices" not in admin.list_topics(timeout=30).topics
    # Form errors answer 400 before any request.
    token = http.csrf("/topics")
    assert http.request("POST", "/topics/create", {"csrf": token, "name": "x",
                                                   "configs": "nonsense"})[0] == 400
    assert http.request("POST", "/topics/create", {"csrf": token, "name": "x",
                                                   "partitions": "many"})[0] == 400
    # Without an authorizer the ACL APIs answer SECURITY_DISABLED: shown as the broker says.
    assert "SECURITY_DISABLED" in http.page("/acls")


def test_client_quotas(console_broker, http):
    msg = act(http, "/quotas/alter", {"entity_type": "user", "entity_name": "batch",
                                      "key": "producer_byte_rate", "value": "1048576"},
              "/quotas")
    assert msg == "set producer_byte_rate=1048576 for user batch"
    act(http, "/quotas/alter", {"entity_type": "client-id", "entity_name": "",
                                "key": "request_percentage", "value": "50"}, "/quotas")
    rows = http.json("/api/quotas")["quotas"]
    assert {(json.dumps(r["entity"], sort_keys=True), r["key"], r["value"]) for r in rows} == {
        ('{"user": "batch"}', "producer_byte_rate", 1048576.0),
        ('{"client-id": null}', "request_percentage", 50.0)}
    page = http.page("/quotas")
    assert "client-id=&lt;default&gt;" in page and page.count('<tr class="quota">') == 2
    assert "1,048,576 (1.0 MiB/s)" in page
    act(http, "/quotas/alter", {"entity_type": "user", "entity_name": "batch",
                                "key": "producer_byte_rate", "remove": "1"}, "/quotas")
    assert [r["key"] for r in http.json("/api/quotas")["quotas"]] == ["request_percentage"]
    msg = act(http, "/quotas/alter", {"entity_type": "user", "entity_name": "x",
                                      "key": "no_such_quota", "value": "1"}, "/quotas")
    assert msg.startswith("INVALID_REQUEST"), msg


def test_read_only_refuses_administration():
    with EmbeddedBroker(config={"console.port": "0", "console.read.only": "true"}) as b:
        bs = b.bootstrap_servers
        create_topic(bs, "kept", 1)
        http = Http(b.console_url)
        for path in ("/topics", "/topics/kept", "/acls", "/users", "/quotas", "/broker"):
            page = http.page(path)
            assert '<form method="post"' not in page, path
        for path, form in (("/topics/create", {"name": "new"}),
                           ("/topics/kept/delete", {"confirm": "kept"}),
                           ("/topics/kept/config", {"key": "retention.ms", "value": "1"}),
                           ("/topics/kept/partitions", {"count": "3"}),
                           ("/acls/create", {"principal": "User:x", "operation": "READ",
                                             "resource_type": "TOPIC", "resource_name": "x"}),
                           ("/acls/delete", {}),
                           ("/users/upsert", {"user": "x", "mechanism": "SCRAM-SHA-256",
                                              "password": "p"}),
                           ("/users/delete", {"user": "x", "mechanism": "SCRAM-SHA-256"}),
                           ("/quotas/alter", {"entity_type": "user", "key": "a", "value": "1"}),
                           ("/broker/config", {"scope": "default", "key": "log.retention.ms",
                                               "value": "1"})):
            status, _h, body = http.request("POST", path, form)
            assert status == 403 and b"read-only" in body, path
        md = AdminClient({"bootstrap.servers": bs}).list_topics(timeout=30)
        assert "new" not in md.topics and len(md.topics["kept"].partitions) == 1
        assert http.json("/api/users")["scram"] == []
        # The broker configs are still shown; no dynamic default was set.
        assert 'data-config="log.retention.ms"' in http.page("/broker")
        assert http.json("/api/broker")["defaults"] == []


def test_user_controlled_admin_names_are_escaped(secure):
    admin = Http(secure.console_url, "admin", "admin-secret")
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    act(admin, "/acls/create", {"principal": f"User:{evil}", "operation": "READ",
                                "resource_type": "GROUP", "resource_name": evil}, "/acls")
    act(admin, "/users/upsert", {"user": evil, "mechanism": "SCRAM-SHA-512",
                                 "password": "pw"}, "/users")
    act(admin, "/quotas/alter", {"entity_type": "user", "entity_name": evil,
                                 "key": "consumer_byte_rate", "value": "5"}, "/quotas")
    cadmin = AdminClient({"bootstrap.servers": secure.bootstrap_servers, **plain("admin")})
    desc = cadmin.describe_user_scram_credentials([evil])[evil].result(timeout=30)
    assert [i.mechanism.name for i in desc.scram_credential_infos] == ["SCRAM_SHA_512"]
    for path in ("/acls", "/users", "/quotas"):
        page = admin.page(path)
        assert "<script>alert" not in page and "<img src=x" not in page, path
        assert html.escape(evil, quote=True) in page, path
    # The notice repeats the name: escaped as well.
    status, headers, _ = admin.post("/users/delete", {"user": evil,
                                                      "mechanism": "SCRAM-SHA-512"},
                                    page="/users")
    page = admin.page(headers["Location"])
    assert "<script>alert" not in page and html.escape(evil, quote=True) in page
    with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND|does not exist"):
        cadmin.describe_user_scram_credentials([evil])[evil].result(timeout=30)


def test_quotas_agree_with_kafka_configs_sh(console_broker, http):
    """Apache Kafka 4.0's kafka-configs.sh (the Java admin client) lists the quota the console
    set, and the console lists the one kafka-configs.sh set."""
    from reference_kafka import run_tool, skip_reason

    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    bs = console_broker.bootstrap_servers
    act(http, "/quotas/alter", {"entity_type": "user", "entity_name": "reporting",
                                "key": "consumer_byte_rate", "value": "2048"}, "/quotas")
    r = run_tool("kafka-configs.sh", "--bootstrap-server", bs, "--describe",
                 "--entity-type", "users", "--entity-name", "reporting")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "consumer_byte_rate=2048.0" in r.stdout, r.stdout
    r = run_tool("kafka-configs.sh", "--bootstrap-server", bs, "--alter", "--entity-type",
                 "clients", "--entity-name", "etl", "--add-config", "request_percentage=25")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = http.json("/api/quotas")["quotas"]
    assert {"entity": {"client-id": "etl"}, "key": "request_percentage", "value": 25.0} in rows
