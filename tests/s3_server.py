"""A loopback S3 server for tests: moto's server mode in the test process, with outages.

Fixtures (registered in tests/conftest.py through ``pytest_plugins``):

- ``s3_server`` (session): one :class:`LoopbackS3Server` per pytest process (so one per
  xdist worker), on 127.0.0.1 and an ephemeral port, stopped at the end of the session.
- ``s3_bucket`` (function): a fresh bucket on it, as the ``rsm.config.*`` broker configs of
  backend ``s3`` (a dict: ``{**s3_bucket}`` into a broker's config, or
  ``create_remote_storage(s3_bucket)``). Each test gets its own bucket, so tests never see
  each other's objects; the server is brought back up if a test left it down.

Outages: ``s3_server.down()`` closes the listening socket AND every open connection (a
request in flight fails as it would against a dead server, rather than being completed),
``s3_server.up()`` listens again on the same port. Faults: ``s3_server.inject_errors(match,
count, status)`` answers the next ``count`` matching requests with an error (503 SlowDown by
default) instead of serving them; ``s3_server.requests`` lists every request seen. Objects survive: moto
keeps them in this process's memory, not in the server.

Why moto's server rather than its in-process mock: the broker under test may be a child
process, and the S3 client (obstore) is Rust code that never goes through Python's HTTP
stack; both need a real socket. Why our own werkzeug server around moto's WSGI app rather than
``ThreadedMotoServer``: its ``stop()`` closes the listening socket but lets the connections
open at that moment finish their requests; ``down()`` here resets them too, so a request in
flight when the outage starts fails as against a crashed server.
"""

from __future__ import annotations

import logging
import socket
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import pytest

ACCESS_KEY = "snakka-test-key"
SECRET_KEY = "snakka-test-secret"
REGION = "us-east-1"


class LoopbackS3Server:
    def __init__(self, host: str = "127.0.0.1") -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            create_backend_app,
        )

        self.host = host
        self.port = 0
        self._moto = DomainDispatcherApplication(create_backend_app)
        self._faults: list[tuple[Callable[[str, str], bool], int, list[int]]] = []
        # (method, path?query) of the latest requests, for tests that look at what was sent
        self.requests: deque[tuple[str, str]] = deque(maxlen=10_000)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def is_up(self) -> bool:
        return self._server is not None

    def up(self) -> None:
        """Listen (again, on the same port after the first time)."""
        from moto.moto_server.werkzeug_app import MotoRequestHandler
        from werkzeug.serving import ThreadedWSGIServer

        if self._server is not None:
            return
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
        owner = self

        class _Server(ThreadedWSGIServer):
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, Any]:
                conn, addr = super().get_request()
                with owner._lock:
                    owner._connections.add(conn)
                return conn, addr

            def shutdown_request(self, request: Any) -> None:
                with owner._lock:
                    owner._connections.discard(request)
                super().shutdown_request(request)

        self._server = _Server(self.host, self.port, self._app, handler=MotoRequestHandler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"s3-server-{self.port}", daemon=True)
        self._thread.start()

    def inject_errors(self, match: Callable[[str, str], bool], count: int = 1,
                      status: int = 503) -> None:
        """Answer the next ``count`` requests for which ``match(method, path?query)`` holds
        with ``status`` (503 SlowDown: S3's throttling) instead of serving them."""
        with self._lock:
            self._faults.append((match, status, [count]))

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        method = environ["REQUEST_METHOD"]
        target = environ.get("PATH_INFO", "") + "?" + environ.get("QUERY_STRING", "")
        with self._lock:
            self.requests.append((method, target))
            fault = next((f for f in self._faults if f[2][0] > 0 and f[0](method, target)),
                         None)
            if fault is not None:
                fault[2][0] -= 1
        if fault is None:
            return self._moto(environ, start_response)
        stream = environ.get("wsgi.input")
        if stream is not None:  # read the body, as a server that answers does
            stream.read(int(environ.get("CONTENT_LENGTH") or 0))
        body = b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"
        start_response(f"{fault[1]} Injected", [("Content-Type", "application/xml"),
                                                 ("Content-Length", str(len(body)))])
        return [body]

    def down(self) -> None:
        """Stop answering: the port refuses connections, open ones (requests in flight) are
        reset."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns, self._connections = self._connections, set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        assert self._thread is not None
        self._thread.join(10)
        self._server = None

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint_url, region_name=REGION,
                     aws_access_key_id=ACCESS_KEY,
                     aws_secret_access_key=SECRET_KEY).create_bucket(Bucket=name)

    def remove_bucket(self, name: str) -> None:
        """Delete ``name`` and every object in it."""
        client = self.s3_client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
        for upload in client.list_multipart_uploads(Bucket=name).get("Uploads", []):
            client.abort_multipart_upload(Bucket=name, Key=upload["Key"],
                                          UploadId=upload["UploadId"])
        client.delete_bucket(Bucket=name)

    def s3_client(self) -> Any:
        """A boto3 client on this server (what tests use to look at or damage objects)."""
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                            config=Config(s3={"addressing_style": "path"}))

    def rsm_configs(self, bucket: str) -> dict[str, object]:
        """The rsm.config.* broker configs of backend s3 for ``bucket`` on this server."""
        return {
            "rsm.config.storage.backend": "s3",
            "rsm.config.storage.s3.bucket.name": bucket,
            "rsm.config.storage.s3.endpoint.url": self.endpoint_url,
            "rsm.config.storage.s3.region": REGION,
            "rsm.config.storage.s3.path.style.access.enabled": True,
            "rsm.config.storage.aws.access.key.id": ACCESS_KEY,
            "rsm.config.storage.aws.secret.access.key": SECRET_KEY,
        }


def moto_skip_reason() -> str | None:
    try:
        import boto3  # noqa: F401
        import moto.moto_server.werkzeug_app  # noqa: F401
    except ImportError as exc:
        return f"the loopback S3 server needs moto[s3] with flask and flask-cors (the test extra): {exc}"
    return None


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LoopbackS3Server]:
    reason = moto_skip_reason()
    if reason:
        pytest.skip(reason)
    server = LoopbackS3Server()
    server.up()
    try:
        yield server
    finally:
        server.down()


@pytest.fixture
def s3_bucket(s3_server: LoopbackS3Server) -> Iterator[dict[str, object]]:
    """A fresh bucket's rsm.config.* configs (see the module doc); emptied and removed after
    the test (moto holds objects in this process's memory and temporary files)."""
    s3_server.up()  # a test that failed while the server was down must not break the next
    name = f"snakka-{uuid.uuid4().hex[:16]}"
    s3_server.create_bucket(name)
    yield s3_server.rsm_configs(name)
    s3_server.up()
    s3_server.remove_bucket(name)
