"""The embedded broker and pytest fixtures that users' own test suites rely on."""

from __future__ import annotations

import os

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition


def _roundtrip(bootstrap: str, topic: str, n: int = 10, expect: int | None = None) -> list[bytes]:
    """Produce n records, then read the partition from the start until ``expect`` records."""
    expect = n if expect is None else expect
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, b"m%d" % i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fixture-test",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    for _ in range(100):
        got += [m.value() for m in c.consume(expect, timeout=0.2) if not m.error()]
        if len(got) >= expect:
            break
    c.close()
    return got


def test_snakka_broker_fixture(snakka_broker):
    host, port = snakka_broker.bootstrap_servers.rsplit(":", 1)
    assert host == "localhost" and int(port) > 0
    assert _roundtrip(snakka_broker.bootstrap_servers, "fx") == [b"m%d" % i for i in range(10)]


def test_factory_subprocess_restart_and_kill(snakka_broker_factory):
    b = snakka_broker_factory(mode="subprocess", config={"log.retention.ms": "-1"})
    assert b.pid and os.path.exists(f"/proc/{b.pid}")
    assert len(_roundtrip(b.bootstrap_servers, "sub")) == 10
    port = b.port
    b.kill()
    b.start()  # same data dir, same port: clients' bootstrap strings stay valid
    assert b.port == port
    got = _roundtrip(b.bootstrap_servers, "sub", 5, expect=15)
    # data written before the kill is kept, and new writes follow it
    assert got == [b"m%d" % i for i in range(10)] + [b"m%d" % i for i in range(5)]


def test_thread_mode_gives_the_broker_object(snakka_broker_factory):
    b = snakka_broker_factory(config={"num.partitions": "3"})
    assert b.broker is not None and b.broker.config.num_partitions == 3
    data_dir = b.data_dir
    b.close()
    assert not os.path.exists(data_dir)  # temporary data is cleaned up


def test_pytest_rewrites_only_the_plugin_not_the_broker():
    """pytest marks a plugin's whole package for assertion rewriting; the plugin limits it to
    itself. Rewritten broker modules cost import time in users' runs and, imported lazily on
    the embedded broker's thread, raced the main thread in ``ast.parse`` (CPython 3.11's
    "AST constructor recursion depth mismatch", a CI failure)."""
    import importlib
    import sys

    from _pytest.assertion.rewrite import AssertionRewritingHook

    hooks = [f for f in sys.meta_path if isinstance(f, AssertionRewritingHook)]
    assert hooks, "pytest's assertion rewriting hook is installed in this run"
    from snakka.testing import pytest_plugin

    assert "snakka" not in hooks[0]._must_rewrite
    # pytest 9.2 marks an editable install's package (the plugin then narrows it to itself);
    # earlier versions do not see it and mark nothing of snakka
    if pytest_plugin.REWRITE_LIMITED:
        assert "snakka.testing.pytest_plugin" in hooks[0]._must_rewrite
    for name in ("snakka.broker", "snakka.protocol.messages.read_share_group_state_request",
                 "snakka.handlers.fetch"):
        mod = importlib.import_module(name)
        assert not isinstance(mod.__spec__.loader, AssertionRewritingHook), name


def test_close_removes_the_default_tiered_storage_directory(snakka_broker_factory):
    """The local backend's default root is '<log dir>-remote' (beside the log dir, so that a
    Kafka broker could open the log dir as it is); the embedded broker's temporary dirs both
    go at close."""
    import time

    from confluent_kafka.admin import AdminClient, NewTopic

    b = snakka_broker_factory(config={"remote.log.storage.system.enable": "true",
                                      "remote.log.manager.task.interval.ms": "100",
                                      "log.flush.scheduler.interval.ms": "100"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    admin.create_topics([NewTopic(
        "tiered", 1, 1, config={"remote.storage.enable": "true", "segment.bytes": "1024"})]
    )["tiered"].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap_servers, "batch.num.messages": 20})
    for i in range(1000):  # batches of 20 small records: many 1 KiB segments
        p.produce("tiered", b"m%d" % i)
    assert p.flush(30) == 0
    remote_root = b.data_dir + "-remote"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
            f.endswith(".manifest") for _, _, fs in os.walk(remote_root) for f in fs):
        time.sleep(0.1)
    assert any(f.endswith(".manifest") for _, _, fs in os.walk(remote_root) for f in fs)
    b.close()
    assert not os.path.exists(b.data_dir) and not os.path.exists(remote_root)


def test_any_port_is_one_a_restart_gets_back(monkeypatch):
    """A broker asked for any port binds one below the kernel's ephemeral range, where no
    outgoing connection takes it while the broker restarts (a CI restart failed with "Address
    already in use"); a taken candidate is passed over, in both modes."""
    import socket

    import snakka.testing.embedded as embedded
    from snakka.testing import EmbeddedBroker

    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    b = EmbeddedBroker(host="127.0.0.1")
    try:
        b.start()
        assert b.port is not None and b.port < low
        first = b.port
        b.restart()
        assert b.port == first
    finally:
        b.close()

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        for mode in ("thread", "subprocess"):
            with socket.socket() as probe:  # a free port to be given after the busy one
                probe.bind(("127.0.0.1", 0))
                free = probe.getsockname()[1]
            candidates = iter([busy, free])
            monkeypatch.setattr(embedded, "_port_below_ephemeral_range",
                                lambda c=candidates: next(c))
            b = EmbeddedBroker(host="127.0.0.1", mode=mode)
            try:
                b.start()
                assert b.port == free, mode
            finally:
                b.close()


def test_a_start_that_cannot_bind_leaves_no_thread_behind():
    """A broker whose listener cannot bind gives back everything it started: no thread of
    its (log cleaner, flusher, stray removal) outlives the failed start, whose loop is gone
    (the log cleaner's did: its next pass failed on the closed loop)."""
    import socket
    import threading

    import pytest

    from snakka.testing import EmbeddedBroker

    before = set(threading.enumerate())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        b = EmbeddedBroker(host="127.0.0.1", port=taken.getsockname()[1])
        try:
            with pytest.raises(OSError, match="Address already in use"):
                b.start()
        finally:
            b.close()
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert left == []
