"""Features that do not exist fail fast and clearly, never silently (issue 9 item 7).

- Configs that imply an absent feature stop `snakka serve` at once with one line naming the
  config (a TLS/SASL listener, several log dirs, an authorizer). Compaction (issue 13) and
  tiered storage (issue 12) exist now and are accepted.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from snakka.protocol.errors import ErrorCode

from .helpers import SNAKKA

try:  # the reference Kafka's Java tools (tests/reference_kafka.py; absent in a user's clone)
    from reference_kafka import run_tool, skip_reason
except ImportError:  # pragma: no cover
    run_tool = None

    def skip_reason() -> str:
        return "tests/reference_kafka.py is not present"

TXN_AUTH_FAILED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)  # 53
FAST = 10.0  # seconds: "promptly", with a generous margin for a loaded 2-core machine


# -- configs that imply an absent feature ---------------------------------------------------
@pytest.mark.parametrize("override, names", [
    # an SSL listener is served (docs/security.md), but not without a key store
    ("listeners=SSL://localhost:0", "ssl.keystore.location"),
    # SASL exists (issue 14), Kerberos does not: Kafka's default sasl.enabled.mechanisms=GSSAPI
    ("listeners=SASL_SSL://localhost:0", "GSSAPI"),
    ("listeners=SASL_PLAINTEXT://localhost:0", "GSSAPI"),
    ("listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT", "GSSAPI"),
    ("log.dirs={tmp}/a,{tmp}/b", "log.dirs"),
    ("authorizer.class.name=kafka.security.authorizer.AclAuthorizer", "authorizer.class.name"),
])
def test_serve_refuses_a_config_for_an_absent_feature_in_one_line(tmp_path, override, names):
    """Before: an SSL or SASL listener served plaintext, extra log dirs and the other keys were silently ignored."""
    args = [SNAKKA, "serve", "--ready-line"]
    if not override.startswith("log.dirs="):  # --data-dir would win over -o log.dirs
        args += ["--data-dir", str(tmp_path / "data")]
    if not override.startswith("listeners="):
        args += ["-o", "listeners=PLAINTEXT://localhost:0"]
    args += ["-o", override.format(tmp=tmp_path)]
    t0 = time.monotonic()
    r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "SNAKKA_READY" not in out and "Traceback" not in out, out
    errors = [ln for ln in out.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and names in errors[0], out
    assert time.monotonic() - t0 < 30


