"""The console's broker configs page (``/broker``) against an in-process broker, cross-checked
with confluent-kafka's AdminClient: the page lists this broker's configs with the sources and
read-only flags describe_configs reports for the BROKER resource; a config SET in the console
as the cluster-wide default or for this broker is what describe_configs then shows (value and
DYNAMIC_* source, and the topics' effective retention follows); DELETE returns to the next
source; a config the broker cannot change at run time is refused with the broker's own answer
(the same error confluent-kafka gets); user-controlled text is escaped. Read-only mode and
ACLs: test_console_admin.py and test_console_security.py. Apache Kafka 4.0's kafka-configs.sh
agrees both ways (skipped without the reference distribution)."""

from __future__ import annotations

import html
import re

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from console.support import Http, act, create_topic


def _node(http: Http) -> str:
    return str(http.json("/api/broker")["node_id"])


def _describe(bs: str, name: str) -> dict[str, tuple[str | None, str, bool]]:
    """confluent-kafka's describe_configs of the BROKER resource ``name`` (a node id: it cannot
    name the cluster default entity, kafka-configs.sh can): config -> (value, source,
    read-only)."""
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ConfigResource.Type.BROKER, name)
    entries = admin.describe_configs([res])[res].result(timeout=30)
    return {k: (v.value, ConfigSource(v.source).name, v.is_read_only) for k, v in entries.items()}


def _alter(bs: str, name: str, key: str, value: str) -> KafkaException | None:
    """The same SET through confluent-kafka's incremental_alter_configs: its refusal, or None."""
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    try:
        admin.incremental_alter_configs([res])[res].result(timeout=30)
    except KafkaException as e:
        return e
    return None


def test_the_page_lists_the_broker_configs_with_their_sources(console_broker, http):
    bs = console_broker.bootstrap_servers
    d = http.json("/api/broker")
    node = str(d["node_id"])
    assert d["error"] is None and d["defaults"] == [] and d["can_alter"] is True
    rows = {c["name"]: c for c in d["configs"]}
    # Every config, value, source and read-only flag as confluent-kafka's describe_configs.
    described = _describe(bs, node)
    assert {n: (c["value"], c["source"], c["read_only"]) for n, c in rows.items()} == described
    assert rows["log.retention.ms"]["source"] == "DEFAULT_CONFIG"
    assert rows["log.retention.ms"]["dynamic"] is True
    assert rows["num.partitions"]["value"] == "3"  # the fixture's static config
    assert rows["num.partitions"]["source"] == "STATIC_BROKER_CONFIG"
    assert rows["num.partitions"]["dynamic"] is False  # static in Kafka 4.0 too
    assert rows["log.dirs"]["dynamic"] is False and rows["node.id"]["dynamic"] is False
    page = http.page("/broker")
    assert '<a href="/broker" class="active" id="nav-broker">' in page
    assert re.search(r'<tr class="set" data-config="num.partitions"><td>num.partitions</td>'
                     r'<td class="v">3</td><td>STATIC_BROKER_CONFIG</td><td>no</td></tr>',
                     page)
    assert re.search(r'data-config="log.retention.ms">.*?<td>DEFAULT_CONFIG</td><td>yes</td>',
                     page)
    assert "no cluster-wide dynamic defaults set" in page
    assert 'id="broker-config-form"' in page
    # The form offers the dynamic configs only.
    offered = set(re.findall(r'<option value="([^"]+)">', page.split(
        'id="broker-config-names"')[1].split("</datalist>")[0]))
    assert offered == {n for n, c in rows.items() if c["dynamic"]}
    assert "log.dirs" not in offered
    # The filter: a name substring, dynamic ones only.
    page = http.page("/broker?name=retention&dynamic=1")
    shown = re.findall(r'<tr class="(?:set|default)" data-config="([^"]+)"', page)
    assert "log.retention.ms" in shown
    assert all("retention" in n and rows[n]["dynamic"] for n in shown), shown


def test_set_and_delete_as_the_cluster_default_and_for_this_broker(console_broker, http):
    bs = console_broker.bootstrap_servers
    node = _node(http)
    create_topic(bs, "audit", 1)  # no retention.ms of its own: the broker's value applies
    topic = ConfigResource(ConfigResource.Type.TOPIC, "audit")
    admin = AdminClient({"bootstrap.servers": bs})

    def topic_retention() -> tuple[str, str]:
        e = admin.describe_configs([topic])[topic].result(timeout=30)["retention.ms"]
        return e.value, ConfigSource(e.source).name

    msg = act(http, "/broker/config", {"scope": "default", "key": "log.retention.ms",
                                       "value": "3600000", "op": "set"}, "/broker")
    assert msg == "set log.retention.ms=3600000 for the cluster-wide default"
    assert _describe(bs, node)["log.retention.ms"][:2] == ("3600000",
                                                           "DYNAMIC_DEFAULT_BROKER_CONFIG")
    assert topic_retention() == ("3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    d = http.json("/api/broker")
    assert [(c["name"], c["value"], c["source"]) for c in d["defaults"]] == [
        ("log.retention.ms", "3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG")]
    assert '<tr class="default-config" data-config="log.retention.ms">' in http.page("/broker")

    msg = act(http, "/broker/config", {"scope": "broker", "key": "log.retention.ms",
                                       "value": "7200000", "op": "set"}, "/broker")
    assert msg == f"set log.retention.ms=7200000 for broker {node}"
    assert _describe(bs, node)["log.retention.ms"][:2] == ("7200000", "DYNAMIC_BROKER_CONFIG")
    assert topic_retention() == ("7200000", "DYNAMIC_BROKER_CONFIG")
    row = next(c for c in http.json("/api/broker")["configs"]
               if c["name"] == "log.retention.ms")
    assert (row["value"], row["source"]) == ("7200000", "DYNAMIC_BROKER_CONFIG")
    # The page says which value the per-broker one shadows.
    assert "over DYNAMIC_DEFAULT_BROKER_CONFIG log.retention.ms=3600000" in http.page("/broker")

    # DELETE: per broker back to the cluster default, then the default back to Kafka's.
    msg = act(http, "/broker/config", {"scope": "broker", "key": "log.retention.ms",
                                       "op": "delete"}, "/broker")
    assert msg == f"removed log.retention.ms of broker {node}"
    assert _describe(bs, node)["log.retention.ms"][:2] == ("3600000",
                                                           "DYNAMIC_DEFAULT_BROKER_CONFIG")
    act(http, "/broker/config", {"scope": "default", "key": "log.retention.ms",
                                 "op": "delete"}, "/broker")
    assert _describe(bs, node)["log.retention.ms"][:2] == (None, "DEFAULT_CONFIG")
    assert topic_retention() == ("604800000", "DEFAULT_CONFIG")
    assert http.json("/api/broker")["defaults"] == []


@pytest.mark.parametrize("scope", ["broker", "default"])
def test_a_static_config_is_refused_with_the_brokers_answer(console_broker, http, scope):
    bs = console_broker.bootstrap_servers
    node = _node(http)
    before = _describe(bs, node)["log.dirs"]
    msg = act(http, "/broker/config", {"scope": scope, "key": "log.dirs", "value": "/tmp/x",
                                       "op": "set"}, "/broker")
    # What the broker answers a Kafka client for the same change, word for word (on this
    # broker's resource: confluent-kafka cannot name the default entity; the broker validates
    # both alike).
    err = _alter(bs, node, "log.dirs", "/tmp/x")
    assert err is not None
    assert msg == f"{err.args[0].name()}: {err.args[0].str()}"
    assert "Cannot update these configs dynamically" in msg
    assert _describe(bs, node)["log.dirs"] == before
    # A bad value of a dynamic config: the broker's validation, likewise.
    msg = act(http, "/broker/config", {"scope": scope, "key": "log.retention.ms",
                                       "value": "soon", "op": "set"}, "/broker")
    err = _alter(bs, node, "log.retention.ms", "soon")
    assert err is not None and msg == f"{err.args[0].name()}: {err.args[0].str()}"
    assert _describe(bs, node)["log.retention.ms"][:2] == (None, "DEFAULT_CONFIG")


def test_broker_form_errors_and_escaping(console_broker, http):
    token = http.csrf("/broker")
    assert http.request("POST", "/broker/config", {"csrf": token, "scope": "default",
                                                   "key": "num.partitions", "op": "add"})[0] \
        == 400
    msg = act(http, "/broker/config", {"scope": "everywhere", "key": "num.partitions",
                                       "value": "2"}, "/broker")
    assert msg == "scope is one of broker, default"
    # Without the form token: refused before anything is sent.
    assert http.request("POST", "/broker/config", {"scope": "default", "key": "num.partitions",
                                                   "value": "2"})[0] == 403
    assert http.json("/api/broker")["defaults"] == []
    evil = '<script>alert("x")</script>'
    page = http.page("/broker?name=" + evil.replace("<", "%3C").replace(">", "%3E")
                     .replace('"', "%22").replace("(", "%28").replace(")", "%29"))
    assert "<script>alert" not in page and html.escape(evil, quote=True) in page
    # The broker's refusal names the key: the notice escapes it.
    status, headers, _ = http.post("/broker/config", {"scope": "default", "key": evil,
                                                      "value": "1"}, page="/broker")
    assert status == 303
    page = http.page(headers["Location"])
    assert "<script>alert" not in page and html.escape(evil, quote=True) in page
    assert 'id="notice"' not in http.page("/broker")  # a notice is shown once


def test_broker_defaults_agree_with_kafka_configs_sh(console_broker, http):
    """Apache Kafka 4.0's kafka-configs.sh (the Java admin client) lists the cluster-wide
    default the console set, and the console lists the per-broker value it set."""
    from reference_kafka import run_tool, skip_reason

    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    bs = console_broker.bootstrap_servers
    node = _node(http)
    act(http, "/broker/config", {"scope": "default", "key": "log.retention.ms",
                                 "value": "5400000"}, "/broker")
    r = run_tool("kafka-configs.sh", "--bootstrap-server", bs, "--describe",
                 "--entity-type", "brokers", "--entity-default")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "log.retention.ms=5400000" in r.stdout, r.stdout
    assert "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=5400000" in r.stdout, r.stdout
    r = run_tool("kafka-configs.sh", "--bootstrap-server", bs, "--alter", "--entity-type",
                 "brokers", "--entity-name", node, "--add-config", "log.roll.ms=600000")
    assert r.returncode == 0, r.stdout + r.stderr
    row = next(c for c in http.json("/api/broker")["configs"] if c["name"] == "log.roll.ms")
    assert (row["value"], row["source"]) == ("600000", "DYNAMIC_BROKER_CONFIG")
