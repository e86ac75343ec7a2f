"""Fixtures of the web console's tests: a broker with the console on, HTTP helpers, sample data
written and consumed with confluent-kafka (a real client), and the browser (browser_support)."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from snakka.testing import EmbeddedBroker


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


@pytest.fixture
def console_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={"console.port": "0", "num.partitions": "3"}) as b:
        yield b


@pytest.fixture
def http(console_broker: EmbeddedBroker) -> Http:
    return Http(console_broker.console_url)
