"""Helpers of the web console's tests and screenshots: an HTTP client for the console, and
sample data written and read with confluent-kafka (a real client)."""

from __future__ import annotations

import base64
import html
import json
import re
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# A SASL/PLAIN broker's users and the authorizer the console security tests run with.
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")


class Http:
    """GET/POST against one console, optionally with Basic credentials. No redirects followed
    (the tests look at them)."""

    def __init__(self, base: str, user: str | None = None, password: str | None = None) -> None:
        self.base = base.rstrip("/")
        self.auth = None
        if user is not None:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.auth = f"Basic {token}"

    def request(self, method: str, path: str, data: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        body = urlencode(data).encode() if data is not None else None
        req = urllib.request.Request(self.base + path, data=body, method=method)
        if self.auth:
            req.add_header("Authorization", self.auth)
        if body is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        for k, v in (headers or {}).items():
            req.add_header(k, v)

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *a: Any, **k: Any) -> None:
                return None

        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(req, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def get(self, path: str, **kw: Any) -> tuple[int, dict[str, str], bytes]:
        return self.request("GET", path, **kw)

    def page(self, path: str) -> str:
        status, _h, body = self.get(path)
        assert status == 200, (path, status, body[:500])
        return body.decode()

    def json(self, path: str) -> Any:
        status, h, body = self.get(path)
        assert status == 200, (path, status, body[:500])
        assert h["Content-Type"] == "application/json"
        return json.loads(body)

    def csrf(self, path: str) -> str:
        m = re.search(r'name="csrf" value="([0-9a-f]+)"', self.page(path))
        assert m, f"no form token on {path}"
        return m.group(1)

    def post(self, path: str, form: dict[str, str], *, page: str | None = None
             ) -> tuple[int, dict[str, str], bytes]:
        """POST ``form`` with the token of ``page`` (the page the form is on)."""
        token = self.csrf(page or path.rsplit("/", 1)[0])
        return self.request("POST", path, {"csrf": token, **form})


def notice(http: Http, location: str) -> str:
    """The notice (an action's result) on the page at ``location``."""
    m = re.search(r'<div class="notice (ok|error)" id="notice" role="status">([^<]*)</div>',
                  http.page(location))
    assert m, f"no notice on {location}"
    return html.unescape(m.group(2))


def act(http: Http, path: str, form: dict[str, str], page: str) -> str:
    """POST a console form (with ``page``'s token); the notice shown after the redirect."""
    status, headers, body = http.post(path, form, page=page)
    assert status == 303, (status, body[:300])
    return notice(http, headers["Location"])


def create_topic(bs: str, name: str, partitions: int = 3, config: dict[str, str] | None = None
                 ) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        f.result(timeout=30)


def produce(bs: str, topic: str, n: int, *, prefix: str = "") -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=f"{prefix}key-{i}".encode(),
                  value=json.dumps({"order": i, "item": f"{prefix}thing-{i % 7}",
                                    "amount": round(i * 1.25, 2)}).encode(),
                  headers=[("source", b"tests"), ("seq", str(i).encode())])
    assert p.flush(30) == 0


def consume(bs: str, topic: str, group: str, n: int) -> None:
    """Read ``n`` records of ``topic`` in ``group`` and commit; the group is then empty."""
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < n:
            assert time.monotonic() < deadline, f"consumed {got}/{n}"
            m = c.poll(1)
            if m is not None and not m.error():
                got += 1
        c.commit(asynchronous=False)
    finally:
        c.close()


def committed(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def watermarks(bs: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "watermarks"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                for p in range(partitions)}
    finally:
        c.close()
