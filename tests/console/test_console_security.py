"""The console behind the broker's security: HTTP Basic against the SASL users (PLAIN JAAS users
and SCRAM credentials) when the broker has a SASL listener, and the broker's ACLs deciding what
each user sees and may do (the same handlers as a Kafka client's requests)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from console.support import JAAS, STANDARD, Http, act
from snakka.testing import EmbeddedBroker


def sec(user: str, password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password}


@pytest.fixture(scope="module")
def secure() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={
            "listeners": "SASL_PLAINTEXT://localhost:0", "console.port": "0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "sasl.jaas.config": JAAS,
            "authorizer.class.name": STANDARD, "super.users": "User:admin",
            "connection.failed.authentication.delay.ms": "20"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers,
                             **sec("admin", "admin-secret")})
        for f in admin.create_topics([NewTopic("public", 1, 1),
                                      NewTopic("secret", 1, 1)]).values():
            f.result(timeout=30)
        for f in admin.create_acls([
                AclBinding(ResourceType.TOPIC, "public", ResourcePatternType.LITERAL,
                           "User:alice", "*", op, AclPermissionType.ALLOW)
                for op in (AclOperation.DESCRIBE, AclOperation.READ)]).values():
            f.result(timeout=30)
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                b"carol-secret")]).values():
            f.result(timeout=30)
        yield b


def test_credentials_are_required(secure):
    url = secure.console_url
    status, headers, _ = Http(url).get("/")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic ")
    assert Http(url).get("/api/topics")[0] == 401
    assert Http(url, "alice", "wrong").get("/")[0] == 401
    assert Http(url, "nobody", "x").get("/")[0] == 401
    assert Http(url, "carol", "wrong").get("/")[0] == 401  # SCRAM user, wrong password
    assert Http(url).get("/static/console.css")[0] == 200  # assets need no credentials


def test_each_user_sees_what_the_acls_allow(secure):
    url = secure.console_url
    admin = Http(url, "admin", "admin-secret")
    assert {"public", "secret"} <= {t["name"] for t in admin.json("/api/topics")["topics"]}
    assert admin.json("/api/overview")["principal"] == "User:admin"
    alice = Http(url, "alice", "alice-secret")
    assert [t["name"] for t in alice.json("/api/topics")["topics"]] == ["public"]
    assert alice.get("/topics/secret")[0] == 404
    assert alice.get("/api/topics/secret/messages")[0] == 404
    assert "secret" not in alice.page("/topics")
    carol = Http(url, "carol", "carol-secret")  # a SCRAM-SHA-512 user without ACLs
    assert carol.json("/api/topics")["topics"] == []
    assert carol.json("/api/overview")["principal"] == "User:carol"


def test_actions_are_authorized_as_the_user(secure):
    url = secure.console_url
    alice = Http(url, "alice", "alice-secret")
    page = alice.page("/topics/public")
    assert "You may not WRITE to this topic" in page
    status, headers, _ = alice.post("/topics/public/produce", {"value": "from alice"})
    assert status == 303
    assert "TOPIC_AUTHORIZATION_FAILED" in alice.page(headers["Location"]) or \
        "not authorized" in alice.page(headers["Location"]).lower()
    admin = Http(url, "admin", "admin-secret")
    status, headers, _ = admin.post("/topics/public/produce", {"value": "from admin"})
    assert "produced to partition 0 at offset 0" in admin.page(headers["Location"])
    # alice may READ public: she browses the record admin wrote.
    msgs = alice.json("/api/topics/public/messages?from=oldest")["messages"]
    assert [m["value"]["text"] for m in msgs] == ["from admin"]
    # Another user's form token is not hers.
    token = admin.csrf("/topics/public")
    assert alice.request("POST", "/topics/public/produce", {"csrf": token, "value": "x"})[0] \
        == 403


def test_broker_configs_need_describe_configs_and_alter_configs_on_the_cluster(secure):
    """The broker configs page as the topic pages treat their ACLs: without DESCRIBE_CONFIGS
    on the cluster the broker's refusal replaces the tables; without ALTER_CONFIGS the form
    says the broker will refuse, and it does; each ACL granted (with confluent-kafka) opens
    one more thing."""
    url, bs = secure.console_url, secure.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs, **sec("admin", "admin-secret")})
    node = str(Http(url, "admin", "admin-secret").json("/api/broker")["node_id"])
    res = ConfigResource(ConfigResource.Type.BROKER, node)

    def retention() -> str | None:
        return admin.describe_configs([res])[res].result(timeout=30)["log.retention.ms"].value

    carol = Http(url, "carol", "carol-secret")  # SCRAM-SHA-512, no ACLs yet
    page = carol.page("/broker")
    assert 'id="broker-error"' in page and "CLUSTER_AUTHORIZATION_FAILED" in page
    assert 'data-config="' not in page
    assert "You may not ALTER_CONFIGS on the cluster" in page
    d = carol.json("/api/broker")
    assert d["error"].startswith("CLUSTER_AUTHORIZATION_FAILED")
    assert d["configs"] == [] and d["defaults"] == [] and d["can_alter"] is False
    form = {"scope": "default", "key": "log.retention.ms", "value": "1000"}
    msg = act(carol, "/broker/config", form, "/broker")
    assert msg.startswith("CLUSTER_AUTHORIZATION_FAILED"), msg
    assert retention() is None

    def grant(op: AclOperation) -> None:
        for f in admin.create_acls([AclBinding(
                ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                "User:carol", "*", op, AclPermissionType.ALLOW)]).values():
            f.result(timeout=30)

    grant(AclOperation.DESCRIBE_CONFIGS)
    page = carol.page("/broker")
    assert 'id="broker-error"' not in page and 'data-config="log.retention.ms"' in page
    assert "You may not ALTER_CONFIGS on the cluster" in page
    msg = act(carol, "/broker/config", form, "/broker")
    assert msg.startswith("CLUSTER_AUTHORIZATION_FAILED"), msg
    assert retention() is None
    grant(AclOperation.ALTER_CONFIGS)
    assert "You may not ALTER_CONFIGS" not in carol.page("/broker")
    assert act(carol, "/broker/config", form, "/broker") == \
        "set log.retention.ms=1000 for the cluster-wide default"
    assert retention() == "1000"
    assert act(carol, "/broker/config", {**form, "op": "delete"}, "/broker") == \
        "removed log.retention.ms of the cluster-wide default"
    assert retention() is None
    # A sensitive config (the JAAS line holds the PLAIN passwords) is listed, never its value.
    jaas = next(c for c in carol.json("/api/broker")["configs"]
                if c["name"] == "sasl.jaas.config")
    assert jaas["sensitive"] is True and jaas["value"] is None and jaas["source"] == \
        "STATIC_BROKER_CONFIG" and all(s["value"] is None for s in jaas["synonyms"])
    page = carol.page("/broker")
    assert re.search(r'data-config="sasl.jaas.config"><td>sasl.jaas.config</td>'
                     r'<td class="v">\(sensitive\)</td>', page)
    for raw in (page.encode(), carol.get("/api/broker")[2]):
        assert b"admin-secret" not in raw and b"alice-secret" not in raw
    # alice (PLAIN, topic ACLs only) is refused as carol was.
    assert Http(url, "alice", "alice-secret").json("/api/broker")["error"].startswith(
        "CLUSTER_AUTHORIZATION_FAILED")
