"""``snakka.spark.register``: a local session's Python workers run an interpreter that has
snakka (README issue 9 item 4: ``ModuleNotFoundError: No module named 'snakka'`` deep in a task
traceback when PYSPARK_PYTHON was not set). A fake session stands in for Spark: what matters is
the ``pythonExec`` the source is registered with (PySpark captures it at registration) and the
one-line error for a chosen interpreter that cannot run the source. The real end-to-end run is
tests/integration/test_readme.py's Spark snippet."""

from __future__ import annotations

import stat
import sys

import pytest

import snakka.spark
from snakka.spark import SparkSetupError


class _Context:
    def __init__(self, master: str, python_exec: str) -> None:
        self.master = master
        self.pythonExec = python_exec


class _Registry:
    def __init__(self, sc: _Context) -> None:
        self.sc = sc
        self.registered: list[tuple[type, str]] = []

    def register(self, cls: type) -> None:
        self.registered.append((cls, self.sc.pythonExec))


class _Session:
    def __init__(self, master: str, python_exec: str = "python3") -> None:
        self.sparkContext = _Context(master, python_exec)
        self.dataSource = _Registry(self.sparkContext)


def test_local_session_without_pyspark_python_uses_this_interpreter(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    s = _Session("local[*]")
    snakka.spark.register(s)
    assert s.dataSource.registered == [(snakka.spark.SnakkaDataSource, sys.executable)]


def test_cluster_session_is_left_to_the_user(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    s = _Session("spark://host:7077")
    snakka.spark.register(s)
    assert s.dataSource.registered[0][1] == "python3"


def test_chosen_interpreter_that_cannot_import_snakka_fails_in_one_line(monkeypatch, tmp_path):
    fake = tmp_path / "python-without-snakka"
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'snakka'\" >&2\n"
                    "exit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PYSPARK_PYTHON", str(fake))
    s = _Session("local[2]", str(fake))
    with pytest.raises(SparkSetupError) as e:
        snakka.spark.register(s)
    msg = str(e.value)
    assert "\n" not in msg and str(fake) in msg and "No module named 'snakka'" in msg, msg
    assert "install snakka[spark] there, or unset PYSPARK_PYTHON" in msg, msg
    assert s.dataSource.registered == []


def test_chosen_interpreter_that_works_is_kept(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    s = _Session("local[2]", sys.executable)
    snakka.spark.register(s)
    assert s.dataSource.registered[0][1] == sys.executable
