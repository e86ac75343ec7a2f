"""The ``snakka`` CLI against the reference Apache Kafka 4.0 broker, judged by Kafka's own tools.

The CLI speaks only the public protocol, so what it does to Kafka must be what Kafka's tools
see: ``consume --group`` commits offsets Kafka accepts (generation -1, no member: the group is
created empty) and ``kafka-consumer-groups.sh`` shows them; ``groups configs --set`` writes a
group config ``kafka-configs.sh --entity-type groups`` reads back; the history read stops on its
idle timeout; a missing topic is an error (exit 1), as ``kafka-topics.sh --describe`` makes it.
Skipped with the reason when the reference distribution or java is absent.
"""

from __future__ import annotations

import pytest

from .helpers import SNAKKA, run

reference_kafka = pytest.importorskip("reference_kafka",
                                      reason="tests/reference_kafka.py is not present")
if reference_kafka.skip_reason():
    pytest.skip(reference_kafka.skip_reason(), allow_module_level=True)

ENV = {"NO_COLOR": "1", "TERM": "dumb"}


@pytest.fixture(scope="module")
def kafka():
    k = reference_kafka.ReferenceKafka().start()
    try:
        yield k
    finally:
        k.stop()


def cli(*args: str, input: bytes | None = None, check: bool = True):
    return run([SNAKKA, *args], input=input, env=ENV, check=check, timeout=120)


@pytest.mark.timeout(400)
def test_cli_against_kafka_as_kafkas_tools_see_it(kafka):
    bs = kafka.bootstrap_servers
    cli("topics", "create", "clitopic", "-p", "2", "-b", bs)
    cli("produce", "clitopic", "-k", ":", "-b", bs, input=b"a:1\nb:2\nc:3\n")
    out = cli("consume", "clitopic", "--from-beginning", "-g", "cli-group", "-b", bs)
    assert sorted(out.stdout.decode().split()) == ["1", "2", "3"]

    tool = reference_kafka.run_tool("kafka-consumer-groups.sh", "--bootstrap-server", bs,
                                    "--describe", "--group", "cli-group")
    assert tool.returncode == 0, tool.stderr
    rows = [ln.split() for ln in tool.stdout.splitlines() if ln.startswith("cli-group ")]
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    assert sorted((r[1], r[2], r[5]) for r in rows) == [("clitopic", "0", "0"),
                                                        ("clitopic", "1", "0")], tool.stdout
    assert sum(int(r[3]) for r in rows) == 3, tool.stdout

    out = cli("groups", "configs", "cli-group", "--set", "consumer.session.timeout.ms=50000",
              "-b", bs).stdout.decode()
    assert "consumer.session.timeout.ms\t50000\tgroup" in out, out
    tool = reference_kafka.run_tool("kafka-configs.sh", "--bootstrap-server", bs,
                                    "--entity-type", "groups", "--entity-name", "cli-group",
                                    "--describe")
    assert tool.returncode == 0, tool.stderr
    assert "consumer.session.timeout.ms=50000" in tool.stdout, tool.stdout

    p = cli("topics", "describe", "nosuch", "-b", bs, check=False)
    assert p.returncode == 1
    assert p.stderr.decode().splitlines() == ["Error: topic nosuch: UNKNOWN_TOPIC_OR_PARTITION"]
