"""Session-wide fixtures: the one reference Apache Kafka broker a test run shares.

``reference_kafka`` starts a Kafka 4.0 broker (tests/reference_kafka.py) the first time a test
asks for it and stops it when the session ends, so a run pays the 7-25 s start-up once, and a
run that selects no such test pays nothing. Where the reference distribution or ``java`` is
missing (a user's clone), every test using it is skipped with the one reason skip_reason() gives.
Tests that use it must not depend on the broker being empty: name topics and groups uniquely.

``no_broker_errors`` fails a test during which an in-process broker logged an ERROR (or an
exception) behind the clients' backs: a request the broker fails internally can still look fine
to a client. Test directories with in-process brokers make it autouse.

Parallel runs (pytest-xdist, ``make test`` runs ``-n 4 --dist loadgroup``): most tests are
spread one by one over the workers; tests that share something expensive per process are kept
on one worker by an ``xdist_group`` mark added here (tests/xdist_groups.py: every test using
``reference_kafka`` and every Spark test), and a run where xdist would ignore the marks stops.

``SNAKKA_REFERENCE_KAFKA=host:port`` points the fixture at a reference broker you already run
(``kafka-ref.sh start``), which saves its start-up on every run while you iterate.

The ``fast`` marker (``make test-fast`` = ``pytest -m fast``): the cores and unit tests, which
run inside the pytest process with no broker, no child process, no real client and no Spark, in
well under a minute. Which tests are fast is decided here, by where they live (``FAST_TESTS``,
minus ``NOT_FAST``), so a test file never has to remember to mark itself; what makes a test fast
is checked while it runs: a ``fast`` test that starts a child process (a broker subprocess, a
JVM, a CLI) or an in-process snakka ``Broker`` (an ``EmbeddedBroker`` included) fails, in every
run (``make test`` too), with a message naming what it started. A ``-m fast`` run prints its
wall time against the budget at the end.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference_kafka as _ref  # noqa: E402  (tests/ is not a package)
import xdist_groups as _groups  # noqa: E402
from hypothesis import settings as _hypothesis_settings  # noqa: E402
from s3_server import s3_bucket, s3_server  # noqa: E402, F401  (the loopback S3 fixtures)

# No per-example deadline for any property test: a deadline is a timing assertion, and on a
# loaded 2-core machine one slow example (a GC pause, a busy neighbour) failed a test whose
# property held (tests/records/test_batch.py under -n 3). Performance lives in bench/.
_hypothesis_settings.register_profile("snakka", deadline=None)
_hypothesis_settings.load_profile("snakka")

_TESTS = Path(__file__).resolve().parent


# What ``make test-fast`` runs: paths under tests/ (a directory, a file, or a test's node id
# below tests/). The directories hold the cores (sans-I/O state machines with a fake clock),
# storage on a temporary directory, the codecs, and the client's state machines against an
# in-process scripted broker (tests/client/fake_broker.py: loopback sockets, no snakka broker).
FAST_TESTS = (
    "unit",
    "records",
    "protocol",
    "groups",
    "share",
    "storage",
    "replica",
    "client",
    "txn",
    "server/test_response_memory.py",
    # Tiered storage's cores and managers over fakes (issue 12): no broker, no child process.
    "remote/test_manager.py",
    "remote/test_metadata_cache.py",
    "remote/test_metadata_serde.py",
    "remote/test_reader.py",
    # The sans-I/O connection core, dispatch, authentication and authorizer (issue 10, h10-server).
    "server/test_channel.py",
    "server/test_connection_shell.py",
    "server/test_dispatch.py",
    "server/test_api_declarations.py",
    "server/test_authentication.py",
    "server/test_authorizer.py",
    "spark/test_decode.py",
    "spark/test_options.py",
    "spark/test_pipeline_model.py",
    "test_import_graph.py",
    "test_bench_compare.py",
)

# Tests inside FAST_TESTS that are not fast, each with what makes it slow. The run-time guard
# below names a test that belongs here.
NOT_FAST = {
    "groups/test_coordinator_persistence.py": "an in-process broker, restarted",
    "groups/test_share_coordinator.py": "an in-process broker, restarted",
    "groups/test_txn_offsets_coordinator.py": "an in-process broker, restarted",
    "share/test_manager.py": "the share-partition shell on a started Broker",
    "protocol/test_captured_client_frames.py": "real clients against an in-process broker",
    "protocol/test_kafka_python_differential.py": "a real client's codecs (kafka-python)",
    "protocol/test_fuzz.py": "a fuzzing sweep over every request type (~11 CPU-s)",
    "protocol/test_generated_current.py::test_check_cli_exit_code": "runs the generator's CLI",
    "unit/test_config_resolution.py::test_configuration_doc_is_current":
        "runs tools/gen_config_docs.py --check",
    "server/test_api_declarations.py::test_api_versions_answers_are_byte_identical_to_before":
        "an in-process broker answering on a socket",
    "server/test_api_declarations.py::"
    "test_api_versions_v3_finalizes_transaction_version_2_as_kafka_4_0":
        "an in-process broker answering on a socket",
    "spark/test_options.py::test_readers_and_partitions_pickle_without_connections":
        "an in-process broker (spark_broker)",
    "remote/test_storage.py": "a loopback S3 server, retries with real waits",
}

# A -m fast run longer than this prints a warning and its slowest tests (never a failure:
# timings depend on the machine).
FAST_BUDGET_S = 60.0


def _tests_path(item: pytest.Item) -> str:
    """The item's node id relative to tests/ ("share/test_partition.py::test_x[1]")."""
    rel = Path(str(item.path)).resolve().relative_to(_TESTS).as_posix()
    sep = item.nodeid.find("::")
    return rel + (item.nodeid[sep:] if sep >= 0 else "")


def _matches(path: str, entry: str) -> bool:
    return path == entry or path.startswith((entry + "/", entry + "::", entry + "["))


def is_fast(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to ``make test-fast`` (FAST_TESTS minus NOT_FAST and ``slow``)."""
    try:
        path = _tests_path(item)
    except ValueError:  # not under tests/ (a pytester run elsewhere)
        return False
    return (any(_matches(path, e) for e in FAST_TESTS)
            and not any(_matches(path, e) for e in NOT_FAST)
            and item.get_closest_marker("slow") is None)


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "fast: a core or unit test (make test-fast); set by tests/conftest.py")
    config._snakka_started = time.monotonic()  # type: ignore[attr-defined]


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """With exactly ``-m fast``, skip importing test files that cannot hold a fast test (the
    real-client and Spark modules take seconds to import). A shortcut only: the marker decides."""
    if config.getoption("markexpr", "") != "fast":
        return None
    try:
        rel = Path(collection_path).resolve().relative_to(_TESTS).as_posix()
    except ValueError:
        return None
    if rel == ".":
        return None
    if rel in NOT_FAST:  # a whole file that is not fast
        return True
    inside = any(_matches(rel, e) for e in FAST_TESTS)
    above = any(e.startswith(rel + "/") for e in FAST_TESTS)
    return None if inside or above else True


# tryfirst: the groups must be marked before xdist's own hook reads the marks (tests/xdist_groups.py)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    _groups.mark_groups(items)
    fast = False
    for item in items:
        if is_fast(item):
            item.add_marker(pytest.mark.fast)
            fast = True
    if fast:
        _GUARD.install()


# A second implementation of the hook in this file: pytest only reads names starting "pytest_".
@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems__check_groups(config, items) -> None:
    """After xdist has named each grouped test's group in its node id (or failed to)."""
    _groups.check_groups(config, items)


class FastGuard:
    """Records what a running ``fast`` test starts that a fast test must not: a child process
    (Python's audit events: subprocess, fork, exec, spawn, system) or a snakka ``Broker``
    (its ``start`` is wrapped once per session). Only the setup and call phases are watched:
    a teardown may stop a session fixture of another test (the reference Kafka runs a stop
    script), and background threads' work outside a fast test's phases is not attributed."""

    CHILD_PROCESS_EVENTS = frozenset({
        "subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
        "os.forkpty",
    })

    def __init__(self) -> None:
        self.item: str | None = None  # node id of the fast test being watched
        self.found: list[str] = []
        self._installed = False

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        sys.addaudithook(self._audit)
        try:
            from snakka.broker import Broker
        except ImportError:  # a broken import fails the tests that use it, not the guard
            return
        start = Broker.start

        @functools.wraps(start)
        def guarded_start(broker, *args, **kwargs):
            self.record("started an in-process snakka Broker (Broker.start)")
            return start(broker, *args, **kwargs)

        Broker.start = guarded_start  # type: ignore[method-assign]

    def record(self, what: str) -> None:
        if self.item is not None:
            self.found.append(what)

    def _audit(self, event: str, args: tuple) -> None:
        # Called for every audited operation in the process: keep the common case one test.
        if self.item is None or event not in self.CHILD_PROCESS_EVENTS:
            return
        self.found.append(f"started a child process ({event} {repr(args[:2])[:200]})")

    def watch(self, item: pytest.Item):
        if item.get_closest_marker("fast") is None:
            yield
            return
        self.item = item.nodeid
        try:
            yield
        finally:
            self.item = None

    def take(self) -> list[str]:
        found, self.found = self.found, []
        return found


_GUARD = FastGuard()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _groups.fail_if_group_lost(item)
    yield from _GUARD.watch(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _GUARD.watch(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown":
        return
    found = _GUARD.take()
    if not found:
        return
    report = outcome.get_result()
    lines = "\n".join(f"  - {what}" for what in dict.fromkeys(found))
    message = (f"{item.nodeid} is a fast test (make test-fast; FAST_TESTS in tests/conftest.py) "
               f"but it:\n{lines}\nFast tests run in-process without brokers, child processes, "
               f"real clients or Spark: list it in NOT_FAST in tests/conftest.py with the "
               f"reason, or test the core without the broker.")
    if report.passed:
        report.outcome = "failed"
        report.longrepr = message
    else:
        report.sections.append(("fast-test guard", message))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """After ``-m fast``: the run's wall time against FAST_BUDGET_S, and the slowest fast tests
    when it is over."""
    if config.getoption("markexpr", "") != "fast":
        return
    wall = time.monotonic() - config._snakka_started
    durations: dict[str, float] = {}
    for key in ("passed", "failed", "error"):
        for rep in terminalreporter.stats.get(key, ()):
            if getattr(rep, "nodeid", None):
                durations[rep.nodeid] = durations.get(rep.nodeid, 0.0) + rep.duration
    if not durations:  # --collect-only, or nothing selected
        return
    tr = terminalreporter
    tr.write_sep("-", "make test-fast budget")
    tr.write_line(f"{len(durations)} fast tests, {wall:.1f} s wall, "
                  f"{sum(durations.values()):.1f} s in tests; budget {FAST_BUDGET_S:.0f} s")
    if wall > FAST_BUDGET_S:
        tr.write_line("OVER BUDGET: the slowest fast tests (make them cheaper, or move them to "
                      "NOT_FAST in tests/conftest.py):", yellow=True)
        for nodeid, d in sorted(durations.items(), key=lambda kv: -kv[1])[:8]:
            tr.write_line(f"  {d:6.2f} s  {nodeid}")


@pytest.fixture(scope="session")
def reference_kafka() -> Iterator[_ref.ReferenceKafka | _ref.RunningKafka]:
    reason = _ref.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    running = os.environ.get("SNAKKA_REFERENCE_KAFKA")
    if running:
        yield _ref.RunningKafka(running)
        return
    broker = _ref.ReferenceKafka()
    try:
        broker.start()
        _ref.wait_group_coordinator(broker.bootstrap_servers)
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def no_broker_errors(caplog):
    yield
    bad = [r for r in caplog.get_records("call")
           if r.name.startswith("snakka") and (r.levelno >= logging.ERROR or r.exc_info)]
    if bad:
        lines = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in bad[:10])
        pytest.fail(f"the broker logged {len(bad)} error(s) during the test:\n{lines}",
                    pytrace=False)
