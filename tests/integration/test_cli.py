"""The ``snakka`` command line, run as a real subprocess (.venv/bin/snakka, python -m snakka).

- ``topics create/list/describe/delete`` against an embedded broker, asserting the output;
- ``produce`` from stdin (keys, headers, partitioning like Kafka's default partitioner) and
  ``consume --from-beginning -n N``, cross-checked with confluent-kafka and kcat;
- ``serve`` starts on an ephemeral port, prints its ready line, answers ``kcat -L``, keeps its
  data across a restart and exits cleanly on SIGTERM;
- errors are clean messages with a non-zero exit, not tracebacks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from .helpers import (
    KCAT,
    SNAKKA,
    ck_consume,
    ck_create_topic,
    ck_end_offsets,
    free_port,
    run,
    wait_until,
)

ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


def cli(*args: str, input: bytes | None = None, check: bool = True, timeout: float = 60):
    return run([SNAKKA, *args], input=input, env=ENV, check=check, timeout=timeout)


def test_topics_create_list_describe_delete(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    out = cli("topics", "create", "orders", "-p", "3", "--config", "retention.ms=3600000",
              "-b", bs).stdout.decode()
    assert out.startswith("Created topic orders (id "), out
    cli("topics", "create", "events", "-b", bs)  # broker default partitions
    listed = cli("topics", "list", "-b", bs).stdout.decode().split()
    assert listed == ["events", "orders"], listed
    # Data so that describe has offsets to show.
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs})
    for i in range(7):
        p.produce("orders", value=b"v%d" % i, partition=1)
    assert p.flush(10) == 0
    desc = cli("topics", "describe", "orders", "-b", bs).stdout.decode()
    assert "orders" in desc and "partitions 3" in desc, desc
    assert "retention.ms=3600000" in desc, desc
    rows = [ln.split("│") for ln in desc.splitlines() if ln.count("│") >= 6]
    cells = [[c.strip() for c in r[1:-1]] for r in rows]
    body = [c for c in cells if c and c[0].isdigit()]
    assert [c[0] for c in body] == ["0", "1", "2"], desc
    assert body[1][3:] == ["0", "7", "7"], desc  # log start, log end, records
    assert body[0][3:] == ["0", "0", "0"], desc
    out = cli("topics", "delete", "orders", "-b", bs).stdout.decode()
    assert out.strip() == "Deleted topic orders."
    assert cli("topics", "list", "-b", bs).stdout.decode().split() == ["events"]
    # Describing a missing topic reports it, without a traceback.
    p = cli("topics", "describe", "orders", "-b", bs, check=False)
    text = (p.stdout + p.stderr).decode()
    assert "UNKNOWN_TOPIC_OR_PARTITION" in text and "Traceback" not in text, text


def test_cli_errors_are_clean(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    cli("topics", "create", "dup", "-p", "1", "-b", bs)
    p = cli("topics", "create", "dup", "-p", "1", "-b", bs, check=False)
    assert p.returncode != 0
    assert b"TOPIC_ALREADY_EXISTS" in p.stderr and b"Traceback" not in p.stderr, p.stderr
    p = cli("topics", "create", "bad", "-p", "1", "--config", "retention.ms=never", "-b", bs,
            check=False)
    assert p.returncode != 0 and b"INVALID_CONFIG" in p.stderr, p.stderr
    p = cli("topics", "list", "-b", f"127.0.0.1:{free_port()}", check=False)
    assert p.returncode != 0
    assert b"cannot reach the broker" in p.stderr and b"Traceback" not in p.stderr, p.stderr


def test_produce_from_stdin_and_consume(snakka_broker):
    from kafka.partitioner.default import murmur2

    bs = snakka_broker.bootstrap_servers
    cli("topics", "create", "lines", "-p", "3", "-b", bs)
    lines = [f"k{i % 5}:value {i} with spaces: and a colon" for i in range(30)]
    p = cli("produce", "lines", "-k", ":", "-H", "src=cli", "-H", "team=core", "-b", bs,
            input=("\n".join(lines) + "\n").encode())
    assert b"Produced 30 record(s) to lines." in p.stderr, p.stderr
    # Keyed records land where Kafka's default (murmur2) partitioner puts them, in order.
    got = ck_consume(bs, "lines", range(3), 30)
    assert len(got) == 30
    for g in got:
        assert g.partition == (murmur2(g.key) & 0x7FFFFFFF) % 3, (g.key, g.partition)
        assert g.headers == (("src", b"cli"), ("team", b"core"))
    by_key: dict[bytes, list[bytes]] = {}
    for g in sorted(got, key=lambda g: (g.partition, g.offset)):
        by_key.setdefault(g.key, []).append(g.value)
    for k, vals in by_key.items():
        want = [ln.split(":", 1)[1].encode() for ln in lines if ln.startswith(k.decode() + ":")]
        assert vals == want
    # consume --from-beginning -n N prints N records and stops.
    out = cli("consume", "lines", "--from-beginning", "-n", "30", "--print-key", "-b", bs)
    printed = out.stdout.decode().splitlines()
    assert len(printed) == 30
    assert sorted(printed) == sorted(ln.replace(":", "\t", 1) for ln in lines)
    assert b"Processed 30 record(s)." in out.stderr
    # One partition from an offset, with offsets and headers.
    p1 = [g for g in got if g.partition == 1]
    out = cli("consume", "lines", "-p", "1", "--offset", "1", "-n", str(len(p1) - 1),
              "--print-offset", "--print-headers", "-b", bs).stdout.decode().splitlines()
    assert out == [f"1:{g.offset}\tsrc=cli,team=core\t{g.value.decode()}" for g in p1[1:]]


def test_produce_unkeyed_round_robin_and_kcat_reads_it(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    cli("topics", "create", "plain", "-p", "2", "-b", bs)
    cli("produce", "plain", "--compression", "zstd", "-b", bs,
        input=b"".join(b"line %d\n" % i for i in range(10)))
    assert sum(hi for _, hi in ck_end_offsets(bs, "plain", range(2)).values()) == 10
    out = run([KCAT, "-b", bs, "-C", "-t", "plain", "-o", "beginning", "-e", "-J", "-q"])
    msgs = [json.loads(ln) for ln in out.stdout.decode().splitlines()]
    assert sorted(m["payload"] for m in msgs) == sorted(f"line {i}" for i in range(10))
    assert {m["partition"] for m in msgs} == {0, 1}, "unkeyed lines should spread"
    assert all(m["key"] is None for m in msgs)


def test_consume_cli_reads_what_a_real_client_wrote(snakka_broker):
    from confluent_kafka import Producer

    bs = snakka_broker.bootstrap_servers
    ck_create_topic(bs, "mixed", 1)
    p = Producer({"bootstrap.servers": bs, "compression.codec": "lz4"})
    p.produce("mixed", key=b"k", value=b"text")
    p.produce("mixed", key=None, value=b"\xff\x00binary")
    p.produce("mixed", key=b"t", value=None)
    assert p.flush(10) == 0
    out = cli("consume", "mixed", "--from-beginning", "-n", "3", "--print-key", "-b", bs)
    assert out.stdout.decode().splitlines() == ["k\ttext", "null\tff0062696e617279", "t\tnull"]


def _start_serve(data_dir: str, *extra: str) -> tuple[subprocess.Popen, int, list[str]]:
    proc = subprocess.Popen([SNAKKA, "serve", "-o", "listeners=PLAINTEXT://localhost:0",
                             "--data-dir", data_dir, "--ready-line", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    port: list[int] = []

    def drain():
        for ln in proc.stdout:
            lines.append(ln.rstrip("\n"))
            if ln.startswith("SNAKKA_READY port="):
                port.append(int(ln.split("=", 1)[1]))

    threading.Thread(target=drain, daemon=True).start()
    try:
        wait_until(lambda: port or proc.poll() is not None, 30, "the SNAKKA_READY line")
    except AssertionError:
        proc.kill()
        raise
    assert port, f"serve exited early ({proc.returncode}): {lines[-20:]}"
    return proc, port[0], lines


def _stop_serve(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError("snakka serve ignored SIGTERM") from None
    return proc.returncode


@pytest.mark.timeout(120)
def test_serve_answers_kcat_and_keeps_data(tmp_path):
    data = str(tmp_path / "data")
    proc, port, lines = _start_serve(data, "-o", "num.partitions=2")
    try:
        bs = f"localhost:{port}"
        md = json.loads(run([KCAT, "-b", bs, "-L", "-J", "-m", "10"]).stdout)
        assert [b["name"] for b in md["brokers"]] == [f"localhost:{port}"]
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bs})
        p.produce("kept", value=b"one", partition=0)  # auto-created with 2 partitions
        p.produce("kept", value=b"two", partition=1)
        assert p.flush(10) == 0
        assert sum(hi for _, hi in ck_end_offsets(bs, "kept", range(2)).values()) == 2
    finally:
        rc = _stop_serve(proc)
    assert rc == 0, lines[-20:]
    assert not [ln for ln in lines if "Traceback" in ln], lines
    proc, port, lines = _start_serve(data)
    try:
        bs = f"localhost:{port}"
        md = json.loads(run([KCAT, "-b", bs, "-L", "-J", "-t", "kept", "-m", "10"]).stdout)
        assert len(md["topics"][0]["partitions"]) == 2
        out = cli("consume", "kept", "--from-beginning", "-n", "2", "-b", bs)
        assert sorted(out.stdout.decode().split()) == ["one", "two"]
    finally:
        assert _stop_serve(proc) == 0


def test_python_dash_m_snakka_and_version():
    out = run([sys.executable, "-m", "snakka", "--version"]).stdout.decode()
    assert "snakka" in out and "0." in out
    out = run([sys.executable, "-m", "snakka", "--help"]).stdout.decode()
    for verb in ("serve", "topics", "produce", "consume"):
        assert verb in out


def test_serve_rejects_bad_config(tmp_path):
    p = run([SNAKKA, "serve", "-o", "num.partitions=zero", "--data-dir", str(tmp_path)],
            check=False, timeout=30)
    assert p.returncode != 0
    assert b"num.partitions" in p.stderr and b"Traceback" not in p.stderr, p.stderr
