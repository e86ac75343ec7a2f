"""Fixtures of the security tests: the session's TLS material (tests/security/certs.py) and the
guard that fails a test whose in-process broker logged an ERROR (as in tests/integration)."""

from __future__ import annotations

import pytest

from .certs import TlsMaterial, make_material


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    """A CA, the broker's certificate (localhost, 127.0.0.1, ::1) and client certificates."""
    return make_material(tmp_path_factory.mktemp("tls"))


@pytest.fixture(autouse=True)
def _guard_broker_errors(no_broker_errors):
    yield
