"""Progress displays of the long CLI verbs (``produce``, ``consume -n``, ``pipeline generate``,
``groups reset-offsets``), run in-process with click's CliRunner against an embedded broker.

A bar is drawn on stderr only when stderr is a terminal (forced here by handing the verbs a
rich Console with ``force_terminal=True``) and ``--quiet`` is not given; under CliRunner stderr
is not a terminal, which stands for pipes and CI: no bar, no control characters. Records
still go to stdout, whole.
"""

from __future__ import annotations

import io

import pytest
from click.testing import CliRunner
from rich.console import Console

from snakka import cli
from snakka.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def terminal(monkeypatch) -> io.StringIO:
    """What the verbs would draw on a terminal stderr."""
    screen = io.StringIO()
    monkeypatch.setattr(cli, "_progress_console", lambda: Console(
        file=screen, force_terminal=True, width=120, color_system=None))
    return screen


def invoke(*args: str, input: str | None = None):
    result = CliRunner().invoke(cli.main, list(args), input=input)
    assert result.exit_code == 0, (result.output, result.stderr)
    return result


def lines(n: int) -> str:
    return "".join(f"line-{i}\n" for i in range(n))


def test_produce_and_consume_draw_bars_on_a_terminal(broker, terminal):
    bs = broker.bootstrap_servers
    r = invoke("produce", "prog-a", "-b", bs, input=lines(2500))
    assert "Produced 2500 record(s) to prog-a." in r.stderr
    drawn = terminal.getvalue()
    assert "Producing to prog-a" in drawn and "2500/2500" in drawn
    terminal.truncate(0)
    terminal.seek(0)
    r = invoke("consume", "prog-a", "--from-beginning", "-n", "300", "-b", bs)
    assert len(r.stdout.splitlines()) == 300  # records untouched on stdout
    assert all(ln.startswith("line-") for ln in r.stdout.splitlines())
    drawn = terminal.getvalue()
    assert "Consuming prog-a" in drawn and "300/300" in drawn


def test_quiet_and_unknown_counts_draw_nothing(broker, terminal):
    bs = broker.bootstrap_servers
    invoke("produce", "prog-b", "-b", bs, "--quiet", input=lines(200))
    invoke("consume", "prog-b", "--from-beginning", "-n", "200", "-q", "-b", bs)
    # Without -n the number of records to come is unknown: no bar either.
    invoke("consume", "prog-b", "--from-beginning", "--timeout-ms", "500", "-b", bs)
    assert terminal.getvalue() == ""


def test_no_bars_or_control_characters_when_stderr_is_not_a_terminal(broker):
    bs = broker.bootstrap_servers
    r = invoke("produce", "prog-c", "-b", bs, input=lines(2000))
    r2 = invoke("consume", "prog-c", "--from-beginning", "-n", "2000", "-b", bs)
    for out in (r.stderr, r2.stderr):
        assert "\x1b[" not in out and "━" not in out
    assert r.stderr.strip() == "Produced 2000 record(s) to prog-c."
    assert r2.stderr.strip() == "Processed 2000 record(s)."
    assert len(r2.stdout.splitlines()) == 2000


def test_pipeline_generate_and_reset_offsets_show_progress(broker, terminal):
    bs = broker.bootstrap_servers
    r = invoke("pipeline", "generate", "--topic", "prog-gen", "-n", "3000", "-b", bs)
    assert "Produced 3000 events to prog-gen" in r.stderr
    drawn = terminal.getvalue()
    assert "Generating prog-gen" in drawn and "3000/3000" in drawn and "events" in drawn
    invoke("consume", "prog-gen", "--from-beginning", "-n", "10", "-g", "prog-group", "-q",
           "-b", bs)  # the group exists once it has committed offsets
    terminal.truncate(0)
    terminal.seek(0)
    r = invoke("groups", "reset-offsets", "prog-group", "--topic", "prog-gen", "--to-latest",
               "--execute", "-b", bs)
    assert "Offsets committed." in r.stderr
    assert len(r.stdout.splitlines()) == 3  # one row per partition
    assert "Resetting offsets of prog-group on prog-gen" in terminal.getvalue()
