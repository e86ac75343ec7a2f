"""The ``fast`` selection of tests/conftest.py (``make test-fast``) keeps itself honest.

A throw-away test tree with a copy of tests/conftest.py is run by pytest in a child process:
a test in a fast directory that starts a child process or an in-process snakka broker fails
(in a full run too) with a message naming what it started; a test listed in NOT_FAST, or living
outside FAST_TESTS, may do both; ``-m fast`` selects only the fast ones and does not even import
the other test files.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

GUARDED = '''
import subprocess
import sys

def test_pure():
    assert sum(range(4)) == 6

def test_child_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_embedded_broker():
    from snakka.testing import EmbeddedBroker
    with EmbeddedBroker(host="127.0.0.1"):
        pass

def test_listed():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''

SLOW = '''
import subprocess
import sys

def test_slow_may_spawn():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    tests = tmp_path / "tests"
    (tests / "unit").mkdir(parents=True)
    (tests / "integration").mkdir()
    conftest = (TESTS / "conftest.py").read_text()
    conftest += '\nNOT_FAST["unit/test_guarded.py::test_listed"] = "spawns (listed)"\n'
    (tests / "conftest.py").write_text(conftest)
    shutil.copy(TESTS / "reference_kafka.py", tests / "reference_kafka.py")
    shutil.copy(TESTS / "s3_server.py", tests / "s3_server.py")  # conftest imports these
    shutil.copy(TESTS / "xdist_groups.py", tests / "xdist_groups.py")
    (tests / "unit" / "test_guarded.py").write_text(GUARDED)
    (tests / "integration" / "test_slow.py").write_text(SLOW)
    return tmp_path


def _run(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-o", "addopts=", *args],
        cwd=tree, capture_output=True, text=True, timeout=120)


def _outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test name -> (outcome, failure message) from a JUnit XML report."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        out[case.get("name")] = (("failed", failure.get("message", "") + (failure.text or ""))
                                 if failure is not None else ("passed", ""))
    return out


def test_a_fast_test_that_starts_a_process_or_a_broker_fails(tree: Path) -> None:
    r = _run(tree, f"--junitxml={tree / 'all.xml'}")
    outcomes = _outcomes(tree / "all.xml")
    assert set(outcomes) == {"test_pure", "test_child_process", "test_embedded_broker",
                             "test_listed", "test_slow_may_spawn"}, r.stdout + r.stderr
    assert outcomes["test_pure"][0] == "passed"
    assert outcomes["test_listed"][0] == "passed"
    assert outcomes["test_slow_may_spawn"][0] == "passed"
    outcome, message = outcomes["test_child_process"]
    assert outcome == "failed" and "started a child process (subprocess.Popen" in message
    assert "NOT_FAST in tests/conftest.py" in message
    outcome, message = outcomes["test_embedded_broker"]
    assert outcome == "failed" and "started an in-process snakka Broker" in message
    assert r.returncode == 1


def test_dash_m_fast_selects_only_fast_tests_and_reports_the_budget(tree: Path) -> None:
    r = _run(tree, "-m", "fast", f"--junitxml={tree / 'fast.xml'}")
    outcomes = _outcomes(tree / "fast.xml")
    # test_listed is deselected; tests/integration is not even collected.
    assert set(outcomes) == {"test_pure", "test_child_process", "test_embedded_broker"}
    assert "1 deselected" in r.stdout, r.stdout
    assert "make test-fast budget" in r.stdout
    assert "3 fast tests" in r.stdout
