"""The web console's HTTP endpoints against an in-process broker: pages and the JSON API show
what the broker holds (written and read with confluent-kafka), actions go through the Kafka
APIs (their results checked with confluent-kafka), read-only mode, escaping, HTTP hygiene."""

from __future__ import annotations

import html
import json
import socket
from urllib.parse import quote

import pytest
from confluent_kafka import Consumer
from integration.helpers import wait_until

from console.support import Http, committed, consume, create_topic, produce, watermarks
from snakka.testing import EmbeddedBroker


def test_pages_and_api_match_the_broker(console_broker, http):
    bs = console_broker.bootstrap_servers
    create_topic(bs, "orders", 3, {"retention.ms": "3600000"})
    produce(bs, "orders", 60)
    consume(bs, "orders", "billing", 60)
    marks = watermarks(bs, "orders", 3)
    assert sum(hi for _lo, hi in marks.values()) == 60

    topics = {t["name"]: t for t in http.json("/api/topics")["topics"]}
    assert topics["orders"]["partitions"] == 3
    assert topics["orders"]["messages"] == 60
    assert topics["orders"]["retention_ms"] == 3600000
    detail = http.json("/api/topics/orders")
    assert {p["partition"]: (p["log_start_offset"], p["high_watermark"])
            for p in detail["partitions"]} == marks
    assert sum(p["size_bytes"] for p in detail["partitions"]) == topics["orders"]["size_bytes"]
    configs = {c["name"]: c for c in detail["configs"]}
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["default"]

    group = http.json("/api/groups/billing")
    assert group["state"] == "Empty" and group["members"] == []
    assert {r["partition"]: r["committed_offset"] for r in group["offsets"]} == \
        committed(bs, "billing", "orders", 3)
    assert group["total_lag"] == 0
    ov = http.json("/api/overview")
    assert ov["topics"] >= 1 and ov["partitions"] >= 3 and ov["messages"] >= 60
    assert ov["groups"]["classic"] == 1  # librdkafka's classic protocol
    assert ov["principal"] == "User:ANONYMOUS"

    # The HTML pages carry the same numbers.
    page = http.page("/topics/orders")
    for p, (_lo, hi) in marks.items():
        assert f'<tr data-partition="{p}">' in page and f'<td class="n hw">{hi:,}</td>' in page
    assert 'data-topic="orders"' in http.page("/topics")
    assert 'data-group="billing"' in http.page("/groups")
    gpage = http.page("/groups/billing")
    assert '<dd id="group-state">Empty</dd>' in gpage and 'id="reset-form"' in gpage
    assert 'id="chart-bytes"' in http.page("/")


def test_lag_of_a_group_with_unread_records(console_broker, http):
    bs = console_broker.bootstrap_servers
    create_topic(bs, "lagging", 1)
    produce(bs, "lagging", 10)
    consume(bs, "lagging", "slow", 10)
    produce(bs, "lagging", 7)
    g = http.json("/api/groups/slow")
    assert g["offsets"] == [{"topic": "lagging", "partition": 0, "committed_offset": 10,
                             "high_watermark": 17, "lag": 7, "member_id": None}]
    assert '<td class="n lag">7</td>' in http.page("/groups/slow")


def test_message_browser(console_broker, http):
    bs = console_broker.bootstrap_servers
    create_topic(bs, "browse", 1)
    produce(bs, "browse", 30)
    newest = http.json("/api/topics/browse/messages?partition=0&limit=5")
    assert [m["offset"] for m in newest["messages"]] == [25, 26, 27, 28, 29]
    oldest = http.json("/api/topics/browse/messages?partition=0&from=oldest&limit=3")
    first = oldest["messages"][0]
    assert first["offset"] == 0 and first["key"]["text"] == "key-0"
    assert json.loads(first["value"]["text"]) == {"order": 0, "item": "thing-0", "amount": 0.0}
    assert '"order": 0' in first["value"]["json"]  # pretty-printed
    assert [(h["key"], h["value"]["text"]) for h in first["headers"]] == \
        [("source", "tests"), ("seq", "0")]
    page = http.json("/api/topics/browse/messages?partition=0&from=offset&offset=10&limit=4")
    assert [m["offset"] for m in page["messages"]] == [10, 11, 12, 13]
    assert page["next_offset"] == 14
    ts = page["messages"][2]["timestamp"]
    by_time = http.json(f"/api/topics/browse/messages?partition=0&from=timestamp&timestamp={ts}")
    assert by_time["messages"][0]["timestamp"] >= ts
    assert by_time["messages"][0]["offset"] <= 12
    html_page = http.page("/topics/browse/messages?partition=0&from=offset&offset=10&limit=4")
    assert html_page.count('<tr class="msg"') == 4 and 'id="next-page"' in html_page
    assert http.get("/api/topics/browse/messages?partition=5")[0] == 400
    assert http.get("/api/topics/browse/messages?from=offset&offset=x")[0] == 400
    assert http.get("/api/topics/nope/messages")[0] == 404


def test_produce_a_test_message(console_broker, http):
    bs = console_broker.bootstrap_servers
    create_topic(bs, "manual", 2)
    status, headers, _ = http.post("/topics/manual/produce", {
        "partition": "1", "key": "k1", "value": '{"hello": "world"}',
        "headers": "trace=abc\nempty"})
    assert status == 303, _
    notice = http.page(headers["Location"])
    assert "produced to partition 1 at offset 0" in notice
    c = Consumer({"bootstrap.servers": bs, "group.id": "check", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["manual"])
        msg = wait_until(lambda: (lambda m: m if m is not None and not m.error() else None)(
            c.poll(0.5)), 30, "the console's record")
    finally:
        c.close()
    assert (msg.partition(), msg.key(), msg.value()) == (1, b"k1", b'{"hello": "world"}')
    assert msg.headers() == [("trace", b"abc"), ("empty", None)]
    # A notice is shown once (post/redirect/get).
    assert "produced to partition" not in http.page(headers["Location"])


def test_actions_need_the_form_token_and_same_origin(console_broker, http):
    bs = console_broker.bootstrap_servers
    create_topic(bs, "guarded", 1)
    assert http.request("POST", "/topics/guarded/produce", {"value": "x"})[0] == 403
    token = http.csrf("/topics/guarded")
    assert http.request("POST", "/topics/guarded/produce", {"csrf": token, "value": "x"},
                        headers={"Sec-Fetch-Site": "cross-site"})[0] == 403
    assert http.request("POST", "/topics/guarded/produce", {"csrf": token, "value": "x"},
                        headers={"Origin": "http://evil.example"})[0] == 403
    assert watermarks(bs, "guarded", 1) == {0: (0, 0)}
    assert http.request("POST", "/topics/guarded/produce", {"csrf": token, "value": "x"})[0] == 303
    assert watermarks(bs, "guarded", 1) == {0: (0, 1)}


def test_reset_offsets_of_an_empty_group(console_broker, http):
    bs = console_broker.bootstrap_servers
    create_topic(bs, "replay", 2)
    produce(bs, "replay", 20)
    consume(bs, "replay", "replayers", 20)
    before = committed(bs, "replayers", "replay", 2)
    assert sum(before.values()) == 20
    status, headers, _ = http.post("/groups/replayers/reset",
                                   {"topic": "", "strategy": "to-earliest", "value": ""})
    assert status == 303
    assert "reset 2 partition(s) to-earliest" in http.page(headers["Location"])
    assert committed(bs, "replayers", "replay", 2) == {0: 0, 1: 0}
    status, _, _ = http.post("/groups/replayers/reset",
                             {"topic": "replay", "strategy": "to-offset", "value": "3"})
    assert committed(bs, "replayers", "replay", 2) == {0: 3, 1: 3}
    http.post("/groups/replayers/reset", {"topic": "replay", "strategy": "to-latest",
                                          "value": ""})
    assert committed(bs, "replayers", "replay", 2) == before
    assert http.request("POST", "/groups/replayers/reset", {
        "csrf": http.csrf("/groups/replayers"), "strategy": "to-offset", "value": "-4"})[0] == 400


def test_reset_refused_while_the_group_has_members(console_broker, http):
    bs = console_broker.bootstrap_servers
    create_topic(bs, "busy", 1)
    produce(bs, "busy", 5)
    consume(bs, "busy", "busy-group", 5)
    token = http.csrf("/groups/busy-group")
    c = Consumer({"bootstrap.servers": bs, "group.id": "busy-group",
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["busy"])
        wait_until(lambda: c.poll(0.2) is None and c.assignment(), 30, "an assignment")
        g = http.json("/api/groups/busy-group")
        assert len(g["members"]) == 1 and not g["can_reset"]
        assert g["offsets"][0]["member_id"] == g["members"][0]["member_id"]
        assert 'id="reset-form"' not in http.page("/groups/busy-group")
        status, headers, _ = http.request("POST", "/groups/busy-group/reset", {
            "csrf": token, "strategy": "to-earliest", "topic": ""})
        assert status == 303
        assert "active members" in http.page(headers["Location"])
    finally:
        c.close()
    assert committed(bs, "busy-group", "busy", 1) == {0: 5}


def test_delete_records(console_broker, http):
    bs = console_broker.bootstrap_servers
    create_topic(bs, "trim", 1)
    produce(bs, "trim", 10)
    status, headers, _ = http.post("/topics/trim/delete-records",
                                   {"partition": "0", "offset": "4"})
    assert status == 303
    assert "now starts at offset 4" in http.page(headers["Location"])
    assert watermarks(bs, "trim", 1) == {0: (4, 10)}


def test_read_only_mode():
    with EmbeddedBroker(config={"console.port": "0", "console.read.only": "true"}) as b:
        bs = b.bootstrap_servers
        create_topic(bs, "ro", 1)
        produce(bs, "ro", 3)
        consume(bs, "ro", "ro-group", 3)
        http = Http(b.console_url)
        page = http.page("/topics/ro")
        assert 'id="read-only"' in page and "<form method=\"post\"" not in page
        assert "<form method=\"post\"" not in http.page("/groups/ro-group")
        for path in ("/topics/ro/produce", "/topics/ro/delete-records", "/groups/ro-group/reset"):
            status, _h, body = http.request("POST", path, {"partition": "0", "offset": "1",
                                                          "strategy": "to-earliest"})
            assert status == 403 and b"read-only" in body, path
        assert watermarks(bs, "ro", 1) == {0: (0, 3)}
        assert http.json("/api/overview")["read_only"] is True


def test_user_controlled_text_is_escaped(console_broker, http):
    """Group ids, keys, values and headers reach the page escaped (topic names cannot hold
    markup: Kafka's legal characters are [a-zA-Z0-9._-])."""
    bs = console_broker.bootstrap_servers
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    create_topic(bs, "xss", 1)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs})
    p.produce("xss", key=evil.encode(), value=evil.encode(), headers=[(evil, evil.encode())])
    p.flush(30)
    consume(bs, "xss", evil, 1)
    gpath = "/groups/" + quote(evil, safe="")
    for path in ("/topics/xss/messages?from=oldest", "/groups", gpath):
        page = http.page(path)
        assert "<script>alert" not in page and "<img src=x" not in page, path
        assert html.escape(evil, quote=True) in page, path
    assert http.json("/api/groups/" + quote(evil, safe=""))["group_id"] == evil
    # Scripts only from the console itself, whatever a page holds.
    _s, headers, _b = http.get("/")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"


def test_http_hygiene(console_broker, http):
    assert http.get("/no/such/page")[0] == 404
    assert http.get("/api/nothing")[0] == 404
    assert http.get("/topics/does-not-exist")[0] == 404
    assert http.request("DELETE", "/")[0] == 405
    assert http.get("/", headers={"Host": "attacker.example"})[0] == 421  # DNS rebinding
    s, h, body = http.get("/static/console.js")
    assert s == 200 and h["Content-Type"].startswith("text/javascript") and b"fetch(" in body
    port = console_broker.broker.console.port
    with socket.create_connection(("localhost", port), timeout=10) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")
    with socket.create_connection(("localhost", port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 431")
    with socket.create_connection(("localhost", port), timeout=10) as sock:
        # Keep-alive: two requests on one connection.
        sock.sendall(b"GET /api/topics HTTP/1.1\r\nHost: localhost\r\n\r\n" * 2)
        data = b""
        while data.count(b"HTTP/1.1 200") < 2:
            chunk = sock.recv(65536)
            assert chunk
            data += chunk


def test_console_stops_with_the_broker():
    b = EmbeddedBroker(config={"console.port": "0"}).start()
    try:
        port = b.broker.console.port
        assert Http(b.console_url).get("/")[0] == 200
    finally:
        b.close()
    with pytest.raises(OSError):
        socket.create_connection(("localhost", port), timeout=5).close()
