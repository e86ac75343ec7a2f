"""Which tests share a pytest-xdist worker, and the check that the sharing really happens.

``make test`` runs ``pytest -n 4 --dist loadgroup``: tests are spread one by one over the
workers, except those with an ``xdist_group`` mark, which xdist sends to one worker per group
name. Tests that share something expensive per process get a group here, by what they use
rather than by a mark each file must remember:

- every test using the ``reference_kafka`` fixture (one JVM broker per worker, ~1 GB and a
  share of 2 cores: four of them at once starve each other and the tests' own clients);
- every Spark test (one SparkSession per worker; two on 2 cores starve each other's Python
  workers).

Two ways this silently stopped working, both found in CI (a KafkaJS consume against a reference
Kafka that four workers had each started got no assignment in 30 s):

- the mark must be added *before* xdist's worker renames each grouped test's node id to
  ``<id>@<group>`` in its own ``pytest_collection_modifyitems`` (a plain hook that pluggy calls
  before a conftest's), so :func:`mark_groups` runs from a ``tryfirst`` hook;
- xdist (3.8) groups by renaming ``item._nodeid``; pytest 9.2 keeps the id elsewhere and the
  rename is lost, so every group is scattered (pyproject pins pytest below 9.2).

:func:`check_groups` runs last in each worker's collection, and every grouped test that kept its
plain node id fails in its setup with the reason, so neither can come back unnoticed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

REFERENCE_GROUP = "reference-kafka"
SPARK_GROUP = "spark"


def group_of(item: pytest.Item) -> str | None:
    """The xdist group this test joins by what it uses, or None."""
    if "reference_kafka" in getattr(item, "fixturenames", ()):
        return REFERENCE_GROUP
    if (TESTS / "spark") in Path(str(item.path)).parents:
        return SPARK_GROUP
    return None


def mark_groups(items: list[pytest.Item]) -> None:
    for item in items:
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _loadgroup(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "loadgroup", False))


_LOST = pytest.StashKey[str]()


def check_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker of a ``--dist loadgroup`` run: every test with an ``xdist_group`` mark
    must carry its group in its node id by now (that is all the scheduler sees). One that does
    not is failed in its setup by :func:`fail_if_group_lost`, with the reason, before its
    fixtures start (a worker that stopped the session instead would only show the controller's
    internal error, without the reason)."""
    if not _loadgroup(config) or not hasattr(config, "workerinput"):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
            item.stash[_LOST] = (
                f"pytest-xdist ignored this test's xdist_group: the tests of its group would "
                f"run on every worker, each starting its own reference Kafka or Spark. pytest "
                f"{pytest.__version__} with this pytest-xdist does not keep xdist's group in "
                f"the node id; install the versions pyproject.toml's test extra allows "
                f"(see tests/xdist_groups.py).")


def fail_if_group_lost(item: pytest.Item) -> None:
    reason = item.stash.get(_LOST, None)
    if reason is not None:
        pytest.fail(reason, pytrace=False)
