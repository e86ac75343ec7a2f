"""The README's "Using it" section, run as written, in order, so it cannot drift.

The fenced ``sh`` and ``python`` blocks between "## Using it" and the next "## " heading are
parsed from README.md and run against a real ``snakka serve`` (what ``make serve`` starts), on
an ephemeral port instead of 9092, from a fresh working directory. The only rewrites are the
ones a fresh clone differs by: ``localhost:9092`` becomes the broker's address and
``.venv/bin/snakka`` the console script of the interpreter running the tests (and the CLI's
default broker, via ``SNAKKA_BOOTSTRAP``). Every command
must exit 0 and print what the README promises (records, a group's offsets and lag).

The Spark snippet runs in its own test (it starts a JVM): as a new user would, with no
``PYSPARK_PYTHON`` set and a ``python3`` on PATH that lacks snakka.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import SNAKKA
from .test_cli import _start_serve, _stop_serve

README = Path(__file__).resolve().parents[2] / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def readme_blocks(section: str = "Using it") -> list[tuple[str, str]]:
    """(language, code) of every fenced block of a README section, in order."""
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.index("\n## ", start + 1)
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(text[start:end])]


def _localize(code: str, bootstrap: str) -> str:
    return code.replace("localhost:9092", bootstrap).replace(".venv/bin/snakka", SNAKKA)


def _run_block(lang: str, code: str, cwd: Path, env: dict, timeout: float) -> list[tuple]:
    """Run one block; returns (command, stdout, stderr) per command (one per sh line)."""
    out = []
    if lang == "sh":
        for line in code.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            p = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=cwd, env=env,
                               capture_output=True, text=True, timeout=timeout)
            assert p.returncode == 0, f"README command failed ({p.returncode}): {line}\n" \
                                      f"stdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-3000:]}"
            out.append((line, p.stdout, p.stderr))
    elif lang == "python":
        p = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=timeout)
        assert p.returncode == 0, f"README snippet failed ({p.returncode}):\n{code}\n" \
                                  f"stdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-3000:]}"
        out.append((code, p.stdout, p.stderr))
    else:
        raise AssertionError(f"README block without sh/python language tag: {code[:80]!r}")
    return out


def _is_spark(code: str) -> bool:
    return "pyspark" in code


def test_readme_blocks_are_tagged_and_use_the_cli():
    blocks = readme_blocks()
    assert {lang for lang, _ in blocks} == {"sh", "python"}, blocks
    sh = "\n".join(code for lang, code in blocks if lang == "sh")
    # The steps the issue was about are still there.
    assert "groups describe my-group" in sh and "--group my-group" in sh
    assert "share.auto.offset.reset=earliest" in sh


@pytest.mark.timeout(300)
def test_readme_using_it_runs_in_order(tmp_path):
    proc, port, lines = _start_serve(str(tmp_path / "snakka-data"))
    bs = f"localhost:{port}"
    # The CLI's default broker (localhost:9092) is the test broker (-b's environment variable).
    env = {**os.environ, "NO_COLOR": "1", "SNAKKA_BOOTSTRAP": bs}
    results: dict[str, tuple[str, str]] = {}
    try:
        for lang, code in readme_blocks():
            if _is_spark(code):
                continue  # test_readme_spark_snippet
            for cmd, stdout, stderr in _run_block(lang, _localize(code, bs), tmp_path, env,
                                                  timeout=120):
                results[cmd] = (stdout, stderr)
    finally:
        assert _stop_serve(proc) == 0, lines[-20:]
    assert not [ln for ln in lines if "Traceback" in ln or " ERROR " in ln], lines

    def out(fragment: str) -> str:
        hits = [v[0] for k, v in results.items() if fragment in k]
        assert len(hits) == 1, (fragment, list(results))
        return hits[0]

    assert f"localhost:{port}" in out("-L")
    assert sorted(out("-n 2 --print-key").splitlines()) == ["k1\thello", "k2\tworld"]
    # The group consumer read what was there (the Producer snippet adds a third record later)
    # and committed it: describe shows the group's offsets with no lag at that point.
    assert sorted(out("--group my-group").split()) == ["hello", "world"]
    rows = [ln.split("\t") for ln in out("groups describe my-group").splitlines()]
    assert rows[1][:5] == ["topic", "partition", "current-offset", "log-end-offset", "lag"], rows
    body = rows[2:]
    assert len(body) == 3 and {r[0] for r in body} == {"orders"}, rows
    assert sum(int(r[2]) for r in body) == 2 and all(r[4] == "0" for r in body), rows
    # The share consumer snippet printed both jobs (the group config made it start at the
    # beginning), and the group's start offset is past them until the reset moves it back.
    assert "b'job-1'" in out("ShareConsumer") and "b'job-2'" in out("ShareConsumer")
    share_rows = [ln.split("\t") for ln in out("groups describe workers").splitlines()]
    assert share_rows[2][:5] == ["jobs", "0", "2", "2", "0"], share_rows
    reset = out("reset-offsets workers").splitlines()
    assert reset == ["jobs\t0\t2\t0"], reset


def test_readme_configuration_serve_commands_start(tmp_path):
    """The Configuration section's ``serve`` lines start a broker as written (on an ephemeral
    loopback port and a temporary data dir instead of 9092 and ./snakka-data)."""
    blocks = readme_blocks("Configuration")
    lines = [ln.split("#")[0].split() for lang, code in blocks if lang == "sh"
             for ln in code.splitlines() if ln.strip()]
    assert len(lines) == 2 and all(ln[:2] == [".venv/bin/snakka", "serve"] for ln in lines)
    for i, words in enumerate(lines):
        # --listeners and --data-dir win over the -o overrides of the same configs.
        proc, port, out = _start_serve(str(tmp_path / f"d{i}"), *words[2:],
                                       "--listeners", "PLAINTEXT://localhost:0")
        assert port != 9092
        assert _stop_serve(proc) == 0, out[-20:]


def _fake_python3_dir(tmp_path: Path) -> Path:
    """A PATH entry whose ``python3`` has no snakka: what a new user's PATH usually gives
    Spark's Python workers when PYSPARK_PYTHON is not set."""
    d = tmp_path / "bin"
    d.mkdir()
    f = d / "python3"
    f.write_text("#!/bin/sh\necho \"python3 without snakka\" >&2\nexit 1\n")
    f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return d


@pytest.mark.timeout(400)
def test_readme_spark_snippet_works_without_pyspark_python(tmp_path, snakka_broker):
    pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")
    import shutil

    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("Spark needs java, and none is installed")
    from confluent_kafka import Producer

    spark_blocks = [code for lang, code in readme_blocks() if lang == "python" and _is_spark(code)]
    assert len(spark_blocks) == 1, spark_blocks
    bs = snakka_broker.bootstrap_servers
    p = Producer({"bootstrap.servers": bs})
    for i in range(3):
        p.produce("orders", key=b"k%d" % i, value=b"spark-%d" % i)
    assert p.flush(10) == 0
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PATH"] = f"{_fake_python3_dir(tmp_path)}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    (_, stdout, _), = _run_block("python", _localize(spark_blocks[0], bs), tmp_path, env,
                                 timeout=360)
    for i in range(3):
        assert f"spark-{i}" in stdout, stdout
