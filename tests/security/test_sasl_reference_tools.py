"""The reference Kafka's ``kafka-configs.sh`` manages SCRAM users on snakka over a SASL
listener (``--command-config`` with a PLAIN admin), and a user it created logs in with SCRAM.
Skipped with the reason when ../shared/kafka-reference or java is absent."""

from __future__ import annotations

import pytest

from snakka.testing import EmbeddedBroker

reference_kafka = pytest.importorskip("reference_kafka",
                                      reason="tests/reference_kafka.py is not present")
if reference_kafka.skip_reason():
    pytest.skip(reference_kafka.skip_reason(), allow_module_level=True)

pytestmark = pytest.mark.usefixtures("no_broker_errors")

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')


@pytest.mark.timeout(300)
def test_kafka_configs_sh_adds_describes_and_deletes_scram_users(tmp_path):
    from confluent_kafka import Producer

    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                     'required username="admin" password="admin-secret";\n')
    with EmbeddedBroker(config={"listeners": "SASL_PLAINTEXT://localhost:0",
                                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                                "sasl.jaas.config": PLAIN_JAAS}) as b:
        bs = b.bootstrap_servers
        common = ["--bootstrap-server", bs, "--command-config", str(props),
                  "--entity-type", "users", "--entity-name", "alice"]
        tool = reference_kafka.run_tool(
            "kafka-configs.sh", "--alter", "--add-config",
            "SCRAM-SHA-512=[iterations=8192,password=alice-secret]", *common)
        assert tool.returncode == 0, tool.stderr
        # --describe asks DescribeClientQuotas and DescribeUserScramCredentials.
        tool = reference_kafka.run_tool("kafka-configs.sh", "--describe", *common)
        assert tool.returncode == 0, tool.stderr
        assert "SCRAM-SHA-512=iterations=8192" in tool.stdout, tool.stdout
        cred = b.broker.metadata.scram.users["alice"]
        assert [(m.mechanism_name, c.iterations) for m, c in cred.items()] == [
            ("SCRAM-SHA-512", 8192)]

        p = Producer({"bootstrap.servers": bs, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                      "sasl.password": "alice-secret"})
        p.produce("made-by-alice", b"hello")
        assert p.flush(30) == 0

        tool = reference_kafka.run_tool("kafka-configs.sh", "--alter", "--delete-config",
                                        "SCRAM-SHA-512", *common)
        assert tool.returncode == 0, tool.stderr
        assert "alice" not in b.broker.metadata.scram.users
