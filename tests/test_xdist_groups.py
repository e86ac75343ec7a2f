"""tests/xdist_groups.py: the tests that share a reference Kafka (or Spark) really run on one
pytest-xdist worker under ``make test``'s ``-n 4 --dist loadgroup``.

A throw-away test tree whose conftest wires tests/xdist_groups.py in exactly as tests/conftest.py
does runs in a child pytest with four workers; each test writes down its worker. Before the fix
the mark was added after xdist had read it and the eight "reference" tests ran on all four
workers (four reference Kafkas in CI); with pytest 9.2 xdist's rename of the node id is lost.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _tree(tmp_path: Path, conftest_extra: str = "") -> Path:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import sys
        import pytest
        sys.path.insert(0, {str(TESTS)!r})
        import xdist_groups as _groups

        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(config, items):
            _groups.mark_groups(items)

        @pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
        def pytest_collection_modifyitems__check(config, items):
            _groups.check_groups(config, items)

        def pytest_runtest_setup(item):
            _groups.fail_if_group_lost(item)

        @pytest.fixture(scope="session")
        def reference_kafka():
            return "one per worker"
    """) + conftest_extra)
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent("""
        import os
        from pathlib import Path
        import pytest

        OUT = Path(__file__).parent / "out"

        def _note(kind, i):
            OUT.mkdir(exist_ok=True)
            (OUT / f"{kind}-{i}").write_text(os.environ["PYTEST_XDIST_WORKER"])

        @pytest.mark.parametrize("i", range(8))
        def test_uses_reference(reference_kafka, i):
            _note("ref", i)

        @pytest.mark.parametrize("i", range(8))
        def test_free(i):
            _note("free", i)
    """))
    return tmp_path


def _run(tree: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "4", "--dist", "loadgroup", "-q",
         "-p", "no:cacheprovider", "-p", "no:randomly", str(tree)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120)


def _workers(tree: Path, kind: str) -> set[str]:
    return {p.read_text() for p in (tree / "out").glob(f"{kind}-*")}


@pytest.mark.timeout(180)
def test_tests_using_the_reference_kafka_share_one_worker(tmp_path):
    tree = _tree(tmp_path)
    r = _run(tree)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(list((tree / "out").glob("ref-*"))) == 8
    assert len(_workers(tree, "ref")) == 1, _workers(tree, "ref")


@pytest.mark.timeout(180)
def test_a_run_where_xdist_ignores_the_groups_fails_them_with_the_reason(tmp_path):
    # What pytest 9.2 does to xdist 3.8: the group never reaches the node id. Simulated by a
    # plain hook of the conftest, which pluggy calls after xdist's (registered later) and
    # before the trylast check, taking the "@group" back off.
    tree = _tree(tmp_path, conftest_extra=textwrap.dedent("""
        @pytest.hookimpl(specname="pytest_collection_modifyitems")
        def pytest_collection_modifyitems__strip(config, items):
            for item in items:
                item._nodeid = item.nodeid.split("@")[0]
    """))
    r = _run(tree)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "ignored this test's xdist_group" in out, out
    assert "8 passed, 8 errors" in out, out
    assert not list((tree / "out").glob("ref-*")), "grouped tests ran although the groups were lost"
