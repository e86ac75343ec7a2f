"""The Prometheus metrics endpoint (issue 16, docs/metrics.md), driven by real clients.

* confluent-kafka produces N records of known size and a group consumes them: bytes in/out,
  messages in, requests per API, connections per listener and the group's lag (before the
  commit: what was produced; after: 0) read back from /metrics;
* the whole page parses with prometheus-client's own text parser (validates the format);
* a share group's in-flight counts while records are acquired (snakka's ShareConsumer);
* concurrent scrapes while producing: every record is acknowledged and counted;
* docs/grafana-dashboard.json is valid JSON and every metric it queries is on the endpoint;
* off by default in the embedded broker; two brokers in one process keep their own registry;
* ``snakka serve --log-format json`` writes one JSON object per line;
* ``snakka serve`` imports prometheus-client at the first scrape, not at start-up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from snakka.client.share_admin import ShareAdmin
from snakka.client.share_consumer import ShareConsumer
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, run_async, scrape, wait_until

pytestmark = pytest.mark.timeout(120)

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
N = 500
VALUE = 200


def sample(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    return sum(v for (n, lv), v in samples.items()
               if n == name and set(labels.items()) <= set(lv))


@pytest.fixture
def broker():
    with EmbeddedBroker(config={"metrics.port": "0", "num.partitions": "1"}) as b:
        yield b


def produce(bs: str, topic: str, n: int, **cfg) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, **cfg})
    for i in range(n):
        p.produce(topic, value=b"v" * VALUE, partition=0)
        if i % 100 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def test_counts_after_produce_and_group_consume(broker):
    bs, url = broker.bootstrap_servers, broker.metrics_url
    ck_create_topic(bs, "m1", 1)
    produce(bs, "m1", N)
    s = scrape(url)
    messages = sample(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="m1")
    assert messages == N
    bytes_in = sample(s, "kafka_server_brokertopicmetrics_bytesin_total", topic="m1")
    # Record batches: the values plus the batch/record framing (< 40 bytes per small record).
    assert N * VALUE < bytes_in < N * (VALUE + 40)
    assert total(s, "kafka_network_requestmetrics_requests_total", request="Produce") >= 1
    assert total(s, "kafka_network_requestmetrics_requests_total", request="CreateTopics") == 1
    assert total(s, "kafka_network_requestmetrics_totaltime_seconds_count",
                 request="Produce") == total(s, "kafka_network_requestmetrics_requests_total",
                                             request="Produce")
    assert sample(s, "kafka_log_log_logendoffset", topic="m1", partition="0") == N
    assert sample(s, "kafka_log_log_size", topic="m1", partition="0") == bytes_in
    assert sample(s, "kafka_log_log_numlogsegments", topic="m1", partition="0") == 1
    assert sample(s, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert sample(s, "kafka_server_brokertopicmetrics_bytesout_total", topic="m1") == 0

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "g1", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe(["m1"])
        got = 0
        while got < N:
            for m in c.consume(num_messages=1000, timeout=1):
                assert m.error() is None, m.error()
                got += 1
        s = scrape(url)
        assert sample(s, "kafka_server_brokertopicmetrics_bytesout_total", topic="m1") >= \
            bytes_in  # a batch may be fetched twice (a fetch racing the commit), never less
        assert total(s, "kafka_network_requestmetrics_requests_total", request="Fetch") >= 1
        assert total(s, "kafka_network_requestmetrics_requests_total", request="JoinGroup",
                     ) + total(s, "kafka_network_requestmetrics_requests_total",
                               request="ConsumerGroupHeartbeat") >= 1
        assert sample(s, "kafka_server_socketservermetrics_connection_count",
                      listener="PLAINTEXT") >= 2  # the consumer's bootstrap + coordinator
        # Half committed: lag is what is left.
        c.commit(offsets=[TopicPartition("m1", 0, N // 2)], asynchronous=False)
        s = scrape(url)
        lv = {"consumergroup": "g1", "topic": "m1", "partition": "0"}
        assert sample(s, "kafka_consumergroup_current_offset", **lv) == N // 2
        assert sample(s, "kafka_consumergroup_lag", **lv) == N - N // 2
        c.commit(offsets=[TopicPartition("m1", 0, N)], asynchronous=False)
        s = scrape(url)
        assert sample(s, "kafka_consumergroup_lag", **lv) == 0
    finally:
        c.close()
    # Errors per code: a Produce to an internal topic is refused per partition.
    produce_errors = total(s, "kafka_network_requestmetrics_errors_total", request="Produce")
    assert produce_errors == 0
    assert sample(s, "kafka_server_coordinator_load_time_seconds", coordinator="group") >= 0
    assert ("kafka_server_coordinator_load_time_seconds",
            (("coordinator", "share"),)) in s
    assert total(s, "snakka_event_loop_lag_seconds_count") >= 0


def test_error_codes_are_counted(broker):
    """A Produce the broker refuses (a record above the topic's max.message.bytes) counts its
    partition's error code and a failed produce, and no bytes in."""
    from confluent_kafka import Producer

    bs = broker.bootstrap_servers
    ck_create_topic(bs, "m-small", 1, {"max.message.bytes": "1000"})
    p = Producer({"bootstrap.servers": bs, "message.timeout.ms": 5000, "retries": 0})
    failures = []
    p.produce("m-small", value=b"x" * 5000, partition=0,
              on_delivery=lambda err, _m: failures.append(err))
    p.flush(10)
    assert failures and failures[0] is not None
    s = scrape(broker.metrics_url)
    assert sample(s, "kafka_network_requestmetrics_errors_total", request="Produce",
                  error="MESSAGE_TOO_LARGE") >= 1
    assert sample(s, "kafka_server_brokertopicmetrics_failedproducerequests_total",
                  topic="m-small") >= 1
    assert sample(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="m-small") == 0
    assert sample(s, "kafka_server_brokertopicmetrics_bytesin_total", topic="m-small") == 0


def test_share_group_in_flight(broker):
    bs, url = broker.bootstrap_servers, broker.metrics_url
    ck_create_topic(bs, "ms", 1)
    produce(bs, "ms", 20)

    async def earliest():
        async with ShareAdmin(bs) as a:
            await a.alter_group_configs("sg", {"share.auto.offset.reset": "earliest"})
    run_async(earliest(), timeout=30)
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "sg",
                       "share.acknowledgement.mode": "explicit", "fetch.max.wait.ms": 200})
    try:
        c.subscribe(["ms"])
        got = []
        wait_until(lambda: got.extend(c.poll(1.0)) or len(got) >= 20, 30, "20 records acquired")
        s = scrape(url)
        lv = {"group": "sg", "topic": "ms", "partition": "0"}
        assert sample(s, "snakka_share_partition_records", state="acquired", **lv) == len(got)
        assert sample(s, "kafka_server_sharepartitionmetrics_inflightmessagecount", **lv) == 20
        for r in got:
            c.acknowledge(r)
        c.commit_sync()
        s = scrape(url)
        assert sample(s, "snakka_share_partition_records", state="acquired", **lv) == 0
    finally:
        c.close()


def test_concurrent_scrapes_do_not_stall_produce(broker):
    bs, url = broker.bootstrap_servers, broker.metrics_url
    ck_create_topic(bs, "mc", 1)
    stop = threading.Event()
    errors: list[BaseException] = []
    pages = [0]

    def scraper() -> None:
        while not stop.is_set():
            try:
                text = urllib.request.urlopen(url, timeout=10).read().decode()
                list(text_string_to_metric_families(text))
                pages[0] += 1
            except urllib.error.HTTPError as e:
                if e.code != 503:  # more than METRICS_MAX_CONCURRENT_SCRAPES at once
                    errors.append(e)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

    threads = [threading.Thread(target=scraper) for _ in range(6)]
    for t in threads:
        t.start()
    try:
        produce(bs, "mc", 2000)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[:3]
    assert pages[0] > 0
    s = scrape(url)
    assert sample(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="mc") == 2000


def test_bad_http_requests(broker):
    base = f"http://localhost:{broker.metrics_port}"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(base + "/nope", timeout=10)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(base + "/metrics", data=b"x"), timeout=10)
    assert e.value.code == 405
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(
            base + "/metrics", headers={"X-Big": "a" * 10000}), timeout=10)
    assert e.value.code == 431
    assert scrape(broker.metrics_url)  # still serving


def test_dashboard_queries_only_served_metrics(broker):
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        text = r.read().decode()
    # Every family is on the page even without samples yet (a fresh broker has no lag):
    # the names a query may use are its samples' names by type.
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                "gauge": ("",)}
    served = set()
    for fam in text_string_to_metric_families(text):
        served |= {fam.name + suffix for suffix in suffixes[fam.type]}
    names = set()
    for expr in exprs:
        names |= {n for n in re.findall(r"\b((?:kafka|snakka)_[a-z0-9_]+)", expr)}
    assert names
    missing = names - served
    assert not missing, missing


def test_off_by_default_and_one_registry_per_broker():
    with EmbeddedBroker() as b:
        assert b.metrics_port is None and b.broker.metrics_server is None
    with EmbeddedBroker(config={"metrics.port": "0"}) as a, \
            EmbeddedBroker(config={"metrics.port": "0"}) as b:
        ck_create_topic(a.bootstrap_servers, "only-a", 1)
        produce(a.bootstrap_servers, "only-a", 10)
        sa, sb = scrape(a.metrics_url), scrape(b.metrics_url)
        assert sample(sa, "kafka_server_brokertopicmetrics_messagesin_total", topic="only-a") == 10
        assert total(sb, "kafka_server_brokertopicmetrics_messagesin_total") == 0


def test_embedded_subprocess_mode():
    with EmbeddedBroker(mode="subprocess", config={"metrics.port": "0"}) as b:
        assert b.metrics_port is not None
        assert ("kafka_server_replicamanager_partitioncount", ()) in scrape(b.metrics_url)


def test_serve_json_logs_and_metrics(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakka", "serve", "--ready-line", "--log-format", "json",
         "--listeners", "PLAINTEXT://localhost:0", "--data-dir", str(tmp_path / "d"),
         "-o", "metrics.port=0", "-o", "no.such.config=1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)
    try:
        assert proc.stdout is not None
        metrics = proc.stdout.readline()
        assert metrics.startswith("SNAKKA_METRICS port="), metrics
        assert proc.stdout.readline().startswith("SNAKKA_READY port=")
        s = scrape(f"http://localhost:{metrics.split('=', 1)[1].strip()}/metrics")
        assert ("kafka_server_replicamanager_underminisrpartitioncount", ()) in s
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines
    records = [json.loads(ln) for ln in lines]  # every line is one JSON object
    for r in records:
        assert {"time", "level", "logger", "message"} <= set(r), r
    messages = [r["message"] for r in records]
    assert any("unknown config no.such.config ignored" in m for m in messages), messages
    assert any(m.startswith("Prometheus metrics at http://localhost:") for m in messages)
    assert any("stopped cleanly" in m for m in messages), messages


def test_prometheus_client_is_imported_by_the_first_scrape(tmp_path):
    """``snakka serve`` with metrics on starts without importing prometheus-client (nor
    urllib.request, which only OAUTHBEARER's JWKS fetch needs); the first scrape imports it
    and is answered (``python -X importtime`` writes each import to stderr as it happens)."""
    imports = tmp_path / "importtime.txt"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(imports, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "snakka", "serve", "--ready-line",
             "--listeners", "PLAINTEXT://localhost:0", "--data-dir", str(tmp_path / "d"),
             "-o", "metrics.port=0", "-o", "console.port=-1"],
            stdout=subprocess.PIPE, stderr=err, text=True, env=env, start_new_session=True)
        try:
            assert proc.stdout is not None
            metrics = proc.stdout.readline()
            assert metrics.startswith("SNAKKA_METRICS port="), metrics
            assert proc.stdout.readline().startswith("SNAKKA_READY port=")

            def imported() -> set[str]:
                return {ln.rsplit("|", 1)[1].strip() for ln in imports.read_text().splitlines()
                        if ln.startswith("import time:") and ln.count("|") == 2}

            at_ready = imported()
            assert "snakka.broker" in at_ready  # the file does hold the start-up's imports
            assert not {"prometheus_client", "urllib.request"} & at_ready
            s = scrape(f"http://localhost:{metrics.split('=', 1)[1].strip()}/metrics")
            assert ("kafka_server_replicamanager_partitioncount", ()) in s
            assert "prometheus_client" in imported()
        finally:
            proc.terminate()
            proc.communicate(timeout=30)


def test_json_log_lines_carry_the_exception():
    import logging

    from snakka.util.jsonlog import JsonFormatter

    fmt = JsonFormatter()
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        rec = logging.getLogger("snakka.x").makeRecord(
            "snakka.x", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info())
    line = fmt.format(rec)
    assert "\n" not in line
    out = json.loads(line)
    assert out["level"] == "ERROR" and out["logger"] == "snakka.x"
    assert out["message"] == "failed here"
    assert "ValueError: boom" in out["exception"] and out["time"].endswith("Z")
