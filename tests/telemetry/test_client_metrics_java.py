"""KIP-714 with Apache Kafka 4.0's own tools against snakka: ``kafka-client-metrics.sh``
manages the subscriptions (``--alter --generate-name/--name`` with ``--metrics``,
``--interval``, ``--match``; ``--describe``; ``--list``; ``--delete``), and the Java producer
(``kafka-console-producer.sh``, ``enable.metrics.push`` on by default) pushes its metrics,
which appear on snakka's Prometheus endpoint. Skipped, with the reason, where the reference
distribution or java is absent.
"""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest
from integration.helpers import wait_until  # tests/ is on sys.path
from reference_kafka import reference_dir, skip_reason

from snakka.testing import EmbeddedBroker
from telemetry.test_client_metrics import scrape

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))]

RUN = uuid.uuid4().hex[:6]


def tool(*args: str) -> str:
    from reference_kafka import run_tool

    r = run_tool("kafka-client-metrics.sh", *args)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Exception" not in out and "Error while" not in out, out
    return r.stdout


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(str(tmp_path / "data"), host="127.0.0.1",
                        config={"metrics.port": "0"}) as b:
        yield b


def test_kafka_client_metrics_tool_and_java_producer_push(broker):
    bs, url = broker.bootstrap_servers, broker.metrics_url
    out = tool("--bootstrap-server", bs, "--alter", "--generate-name",
               "--metrics", "org.apache.kafka.producer.", "--interval", "500",
               "--match", f"client_id=java-{RUN}")
    m = re.search(r"Altered client metrics config for (\S+)\.", out)
    assert m, out
    generated = m.group(1)
    name = f"java-sub-{RUN}"
    out = tool("--bootstrap-server", bs, "--alter", "--name", name,
               "--metrics", "org.apache.kafka.producer.record,org.apache.kafka.producer.node",
               "--interval", "1000")
    assert f"Altered client metrics config for {name}." in out
    out = tool("--bootstrap-server", bs, "--describe", "--name", generated)
    assert f"Client metrics configs for {generated} are:" in out, out
    assert "  metrics=org.apache.kafka.producer." in out and "  interval.ms=500" in out
    assert f"  match=client_id=java-{RUN}" in out
    listed = tool("--bootstrap-server", bs, "--list").split()
    assert sorted(listed) == sorted([generated, name])

    home = reference_dir()
    assert home is not None
    producer = subprocess.Popen(
        ["bash", str(home / "bin" / "kafka-console-producer.sh"), "--bootstrap-server", bs,
         "--topic", f"java-telemetry-{RUN}", "--producer-property", f"client.id=java-{RUN}"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        text=True, env={**__import__("os").environ, "KAFKA_HEAP_OPTS": "-Xmx256m"})
    try:
        assert producer.stdin is not None
        producer.stdin.write("hello\n")
        producer.stdin.flush()

        def pushed():
            s = scrape(url)
            mine = {n: dict(lv) for (n, lv), _v in s.items()
                    if n.startswith("snakka_client_org_apache_kafka_producer_")
                    and ("client_id", f"java-{RUN}") in lv}
            return mine or None

        mine = wait_until(pushed, 90, "the Java producer's pushed metrics", interval=0.5)
    finally:
        if producer.stdin is not None:
            producer.stdin.close()
        try:
            producer.wait(30)
        except subprocess.TimeoutExpired:
            producer.kill()
            producer.wait()
    # Both subscriptions match: the union of their prefixes, so only producer metrics.
    assert all(lv["client_instance_id"] for lv in mine.values())
    assert len({lv["client_instance_id"] for lv in mine.values()}) == 1

    out = tool("--bootstrap-server", bs, "--delete", "--name", generated)
    assert f"Deleted client metrics config for {generated}." in out
    assert tool("--bootstrap-server", bs, "--list").split() == [name]
