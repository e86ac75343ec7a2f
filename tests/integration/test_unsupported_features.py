"""Features that do not exist fail fast and clearly, never silently (issue 9 item 7).

- Configs that imply an absent feature stop `snakka serve` at once with one line naming the
  config (a TLS/SASL listener, broker-level compaction, several log dirs, tiered storage, an
  authorizer); the dynamic broker config `log.cleanup.policy=compact` is INVALID_CONFIG.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from snakka.protocol.errors import ErrorCode
from snakka.testing import EmbeddedBroker

from .helpers import SNAKKA, ck_create_topic, raw_connect, run_async

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
    ("listeners=SSL://localhost:0", "SSL://localhost:0"),
    ("listeners=SASL_SSL://localhost:0", "SASL_SSL://localhost:0"),
    ("listeners=SASL_PLAINTEXT://localhost:0", "SASL_PLAINTEXT://localhost:0"),
    ("listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT", "PLAINTEXT://localhost:0"),
    ("log.cleanup.policy=compact", "log.cleanup.policy"),
    ("log.dirs={tmp}/a,{tmp}/b", "log.dirs"),
    ("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
     "authorizer.class.name"),
])
def test_serve_refuses_a_config_for_an_absent_feature_in_one_line(tmp_path, override, names):
    """Before: an SSL or SASL listener served plaintext, compaction was reported as every
    topic's policy, extra log dirs and the other keys were silently ignored."""
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


def test_dynamic_broker_compaction_policy_is_invalid_config():
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    from snakka.protocol.messages.incremental_alter_configs_request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )

    with EmbeddedBroker() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        res = ConfigResource(ResourceType.BROKER, str(b.broker.node_id), incremental_configs=[
            ConfigEntry("log.cleanup.policy", "compact",
                        incremental_operation=AlterConfigOpType.SET)])
        fut = admin.incremental_alter_configs([res])[res]
        with pytest.raises(Exception) as ei:
            fut.result(timeout=20)
        err = ei.value.args[0]
        assert err.code() == ErrorCode.INVALID_CONFIG, err
        assert "compaction" in err.str(), err

        async def cluster_default():  # the "" entity (kafka-configs.sh --entity-default)
            conn = await raw_connect(b.bootstrap_servers)
            try:
                r = await conn.send(IncrementalAlterConfigsRequest(resources=[
                    AlterConfigsResource(resource_type=4, resource_name="", configs=[
                        AlterableConfig(name="log.cleanup.policy", config_operation=0,
                                        value="delete,compact")])]))
                return r.responses[0]
            finally:
                await conn.close()

        r = run_async(cluster_default())
        assert r.error_code == ErrorCode.INVALID_CONFIG and "compaction" in r.error_message, r
        # The topics' policy is still what it is: delete.
        ck_create_topic(b.bootstrap_servers, "t", 1)
        t = ConfigResource(ResourceType.TOPIC, "t")
        cfg = admin.describe_configs([t])[t].result(timeout=20)
        assert cfg["cleanup.policy"].value == "delete"
