"""The ``snakka`` command line, run as a real subprocess (.venv/bin/snakka, python -m snakka).

- ``topics create/list/describe/delete`` against an embedded broker, asserting the output;
- ``produce`` from stdin (keys, headers, partitioning like Kafka's default partitioner) and
  ``consume --from-beginning -n N``, cross-checked with confluent-kafka and kcat;
- ``serve`` starts on an ephemeral port, prints its ready line, answers ``kcat -L``, keeps its
  data across a restart and exits cleanly on SIGTERM;
- errors are clean messages with a non-zero exit, not tracebacks;
- issue 9: ``consume`` applies its documented idle timeout, ``--group`` commits and resumes,
  piped tables are tab-separated and whole, share groups' configs and offsets are managed
  from the CLI, and the pipeline verbs name the missing spark extra or Java in one line.
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
    # Piped stdout: a header line, then tab-separated rows.
    rows = [ln.split("\t") for ln in desc.splitlines()[1:]]
    assert rows[0] == ["partition", "leader", "replicas", "log start", "log end", "records"]
    body = rows[1:]
    assert [c[0] for c in body] == ["0", "1", "2"], desc
    assert body[1][3:] == ["0", "7", "7"], desc  # log start, log end, records
    assert body[0][3:] == ["0", "0", "0"], desc
    out = cli("topics", "delete", "orders", "-b", bs).stdout.decode()
    assert out.strip() == "Deleted topic orders."
    assert cli("topics", "list", "-b", bs).stdout.decode().split() == ["events"]
    # Describing a missing topic is an error (as kafka-topics.sh): one line, exit 1; the
    # topics that exist are still described.
    p = cli("topics", "describe", "events", "orders", "-b", bs, check=False)
    assert p.returncode == 1, p
    assert p.stderr.decode().splitlines() == ["Error: topic orders: UNKNOWN_TOPIC_OR_PARTITION"]
    assert p.stdout.decode().startswith("events  id "), p.stdout


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


# -- issue 9: consume's idle timeout, piped tables, share groups, clean errors ----------------
def test_consume_history_without_n_stops_after_its_default_idle_timeout(snakka_broker):
    """--from-beginning (or --offset) without -n stops once no record arrived for 5 s, as its
    --help says; --timeout-ms overrides it and -1 means wait forever."""
    bs = snakka_broker.bootstrap_servers
    cli("topics", "create", "hist", "-p", "2", "-b", bs)
    cli("produce", "hist", "-b", bs, input=b"a\nb\nc\n")
    out = cli("consume", "hist", "--from-beginning", "-b", bs, timeout=60)
    assert sorted(out.stdout.decode().split()) == ["a", "b", "c"]
    assert b"Processed 3 record(s)." in out.stderr
    out = cli("consume", "hist", "-p", "0", "--offset", "0", "-b", bs, timeout=60)
    assert out.returncode == 0 and b"record(s)." in out.stderr
    out = cli("consume", "hist", "--from-beginning", "--timeout-ms", "700", "-b", bs, timeout=60)
    assert sorted(out.stdout.decode().split()) == ["a", "b", "c"]
    # Tailing (latest, no -n) and --timeout-ms -1 wait until interrupted.
    for args in (["hist"], ["hist", "--from-beginning", "--timeout-ms", "-1"]):
        with pytest.raises(subprocess.TimeoutExpired):
            cli("consume", *args, "-b", bs, timeout=7)


def test_consume_with_a_group_commits_and_resumes(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    cli("topics", "create", "resume", "-p", "3", "-b", bs)
    cli("produce", "resume", "-k", ":", "-b", bs,
        input=b"".join(b"k%d:v%d\n" % (i, i) for i in range(6)))
    out = cli("consume", "resume", "--from-beginning", "-g", "g1", "--timeout-ms", "1000",
              "-b", bs)
    assert sorted(out.stdout.decode().split()) == [f"v{i}" for i in range(6)]
    # The group committed every partition's position: describe shows no lag.
    desc = cli("groups", "describe", "g1", "-b", bs).stdout.decode().splitlines()
    rows = [ln.split("\t") for ln in desc[2:]]
    assert sorted((r[0], r[1], r[4]) for r in rows) == [("resume", str(p), "0")
                                                       for p in range(3)], desc
    assert sum(int(r[2]) for r in rows) == 6, desc
    # A second run resumes at the committed offsets: only what was produced since.
    cli("produce", "resume", "-b", bs, input=b"later\n")
    out = cli("consume", "resume", "--from-beginning", "-g", "g1", "-n", "1", "-b", bs)
    assert out.stdout.decode().split() == ["later"]
    out = cli("consume", "resume", "--from-beginning", "-g", "g1", "--timeout-ms", "600",
              "-b", bs)
    assert out.stdout == b"", out.stdout


def test_piped_tables_are_not_truncated(snakka_broker):
    """With stdout piped and no COLUMNS, tables are tab-separated lines with every cell whole
    (rich truncated them to 80 columns: ``consumer…``)."""
    bs = snakka_broker.bootstrap_servers
    topic = "a-rather-long-topic-name-" + "x" * 60
    cli("topics", "create", topic, "-p", "2", "-b", bs)
    cli("produce", topic, "-b", bs, input=b"one\ntwo\n")
    cli("consume", topic, "--from-beginning", "-g", "wide-group", "-n", "2", "-b", bs)
    env = {k: v for k, v in ENV.items() if k != "COLUMNS"}
    desc = run([SNAKKA, "groups", "describe", "wide-group", "-b", bs], env=env).stdout.decode()
    lines = desc.splitlines()
    assert lines[1].split("\t") == ["topic", "partition", "current-offset", "log-end-offset",
                                    "lag", "consumer-id", "host", "client-id"], desc
    assert [ln.split("\t")[0] for ln in lines[2:]] == [topic, topic], desc
    assert "…" not in desc
    desc = run([SNAKKA, "topics", "describe", topic, "-b", bs], env=env).stdout.decode()
    assert desc.splitlines()[0].startswith(topic + "  id "), desc
    assert "…" not in desc and len(desc.splitlines()) == 4, desc


def _share_consume(bs: str, group: str, topic: str, want: int) -> list[bytes]:
    from snakka.client import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    got: list[bytes] = []

    def poll() -> bool:
        for r in c.poll(0.5):
            got.append(r.value)
            c.acknowledge(r)
        return len(got) >= want

    try:
        c.subscribe([topic])
        wait_until(poll, 30, f"{want} records of {topic}")
        c.commit_sync()
    finally:
        c.close()
    return got


def _start_offsets(bs: str, group: str) -> dict[int, tuple[str, str]]:
    lines = cli("groups", "describe", group, "-b", bs).stdout.decode().splitlines()
    assert lines[0].startswith(f"{group}  type share  state "), lines
    assert lines[1].split("\t")[2] == "start-offset", lines
    return {int(r[1]): (r[2], r[4]) for r in (ln.split("\t") for ln in lines[2:])}


@pytest.mark.timeout(180)
def test_share_group_configs_and_reset_offsets_from_the_cli(snakka_broker):
    """What kafka-configs.sh --entity-type groups and kafka-share-groups.sh --reset-offsets
    give: set/describe/delete a share group's configs before the group exists, reset its start
    offsets (refused while it has members), list and delete it."""
    bs = snakka_broker.bootstrap_servers
    cli("topics", "create", "jobs", "-p", "1", "-b", bs)
    cli("produce", "jobs", "-b", bs, input=b"j0\nj1\nj2\n")
    out = cli("groups", "configs", "workers", "--set", "share.auto.offset.reset=earliest",
              "--set", "share.record.lock.duration.ms=15000", "-b", bs)
    assert b"Updated configs of group workers." in out.stderr
    configs = {r[0]: r[1:] for r in (ln.split("\t") for ln in out.stdout.decode().splitlines())}
    assert configs["config"] == ["value", "source"]
    assert configs["share.auto.offset.reset"] == ["earliest", "group"], configs
    assert configs["share.record.lock.duration.ms"] == ["15000", "group"], configs
    assert configs["share.delivery.count.limit"] == ["5", "default"], configs
    out = cli("groups", "configs", "workers", "--delete", "share.record.lock.duration.ms",
              "-b", bs).stdout.decode()
    assert "share.record.lock.duration.ms\t30000\tdefault" in out, out
    bad = cli("groups", "configs", "workers", "--set", "share.auto.offset.reset=sometimes",
              "-b", bs, check=False)
    assert bad.returncode == 1 and b"INVALID_CONFIG" in bad.stderr, bad.stderr
    assert len(bad.stderr.decode().splitlines()) == 1, bad.stderr

    # The config took effect: the group starts at the beginning.
    assert sorted(_share_consume(bs, "workers", "jobs", 3)) == [b"j0", b"j1", b"j2"]
    assert "workers\tshare\tEmpty" in cli("groups", "list", "-b", bs).stdout.decode()
    assert _start_offsets(bs, "workers") == {0: ("3", "0")}

    plan = cli("groups", "reset-offsets", "workers", "--topic", "jobs", "--to-earliest",
               "-b", bs)
    assert plan.stdout.decode().splitlines() == ["jobs\t0\t3\t0"]
    assert b"Dry run" in plan.stderr
    assert _start_offsets(bs, "workers") == {0: ("3", "0")}  # a dry run changes nothing
    cli("groups", "reset-offsets", "workers", "--topic", "jobs", "--to-earliest", "--execute",
        "-b", bs)
    assert _start_offsets(bs, "workers") == {0: ("0", "3")}
    cli("groups", "reset-offsets", "workers", "--topic", "jobs:0", "--shift-by", "2",
        "--execute", "-b", bs)
    assert _start_offsets(bs, "workers") == {0: ("2", "1")}
    # Redelivered from the new start offset.
    assert _share_consume(bs, "workers", "jobs", 1) == [b"j2"]

    # Refused while the group has a member, as Kafka requires an empty group.
    from snakka.client import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "workers"})
    try:
        c.subscribe(["jobs"])
        c.poll(0.5)
        wait_until(lambda: "members 1" in cli("groups", "describe", "workers", "-b", bs)
                   .stdout.decode(), 30, "the member to join")
        p = cli("groups", "reset-offsets", "workers", "--topic", "jobs", "--to-earliest",
                "--execute", "-b", bs, check=False)
        assert p.returncode == 1 and b"active member" in p.stderr, p.stderr
    finally:
        c.close()
    cli("groups", "delete", "workers", "-b", bs)
    assert "workers" not in cli("groups", "list", "-b", bs).stdout.decode()


def test_user_errors_are_one_line_and_non_zero(snakka_broker):
    bs = snakka_broker.bootstrap_servers
    cli("topics", "create", "e", "-p", "2", "-b", bs)
    cases = [
        (["consume", "e", "-p", "9", "-b", bs], "has no partition 9"),
        (["consume", "e", "-p", "0", "--offset", "99", "-b", bs], "OFFSET_OUT_OF_RANGE"),
        (["groups", "describe", "nobody", "-b", bs], "GROUP_ID_NOT_FOUND"),
        (["groups", "delete", "nobody", "-b", bs], "GROUP_ID_NOT_FOUND"),
        (["groups", "reset-offsets", "g", "--topic", "e:x", "--to-earliest", "-b", bs],
         "TOPIC:0,1,2"),
        (["topics", "list", "-b", "nohost"], "expected HOST:PORT"),
    ]
    for args, needle in cases:
        p = cli(*args, check=False)
        err = p.stderr.decode()
        assert p.returncode != 0, (args, p)
        assert needle in err and "Traceback" not in err, (args, err)
        assert [ln for ln in err.splitlines() if ln.startswith("Error: ")], (args, err)


def test_pipeline_verbs_without_the_spark_extra_say_how_to_install_it():
    # pyspark made unimportable in the CLI's own process, as when the extra is not installed.
    code = ("import sys; sys.modules['pyspark'] = None; from snakka.cli import main; "
            "main(prog_name='snakka')")
    for verb in ("demo", "stream", "check"):
        p = run([sys.executable, "-c", code, "pipeline", verb], check=False, timeout=60)
        err = p.stderr.decode()
        assert p.returncode == 1, (verb, p)
        assert err.splitlines() == ["Error: the Spark pipeline needs the spark extra (pyspark "
                                    "is not installed): pip install 'snakka[spark]'"], err


def test_pipeline_demo_without_java_says_so(tmp_path):
    pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java on it
    p = subprocess.run([sys.executable, "-m", "snakka", "pipeline", "demo"], env=env,
                       capture_output=True, timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 1 and len(err.splitlines()) == 1, err
    assert "Java 17+ runtime" in err, err


def test_defaults_promised_by_help_are_the_ones_applied():
    """Every default a --help text names is the value used (consume's timeout is checked by
    behaviour above; these are the serve shortcuts and the admin verbs' broker)."""
    from snakka.cli import DEFAULT_BOOTSTRAP, serve
    from snakka.config import BrokerConfig

    cfg = BrokerConfig.from_properties("", {})
    helps = {p.name: p.help for p in serve.params}
    assert f"(default {cfg.get('listeners')[0]})" in helps["listeners"], helps
    assert f"(default {cfg.get('log.dirs')[0]})" in helps["data_dir"], helps
    text = " ".join(run([SNAKKA, "topics", "list", "--help"], env=ENV).stdout.decode().split())
    assert f"[default: {DEFAULT_BOOTSTRAP}]" in text, text
    assert cfg.get("listeners")[0].endswith(DEFAULT_BOOTSTRAP)
