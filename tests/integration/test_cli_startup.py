"""``snakka serve`` start-up errors a user can cause, run as a real subprocess: each is one
clear line on stderr and a non-zero exit, never a traceback.

- a listener port in use names the address:port;
- a data dir that is a file says so;
- a second broker on a data dir in use stops at the dir's ``.lock`` before it opens (and
  recovers) ``__cluster_metadata-0``: the metadata log's bytes are left exactly as they were;
- a brand-new data dir is not "not shut down cleanly"; a killed broker's dir still is.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket

import pytest

from .helpers import SNAKKA, run
from .test_cli import _start_serve, _stop_serve

UNCLEAN = "was not shut down cleanly"


def serve_fails(*args: str) -> str:
    """Run ``snakka serve`` expecting it to fail at start-up; returns its stderr."""
    p = run([SNAKKA, "serve", *args], check=False, timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 1, (p.returncode, err)
    assert "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1, err
    return errors[0]


def test_port_in_use_names_the_address(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        line = serve_fails("--listeners", f"PLAINTEXT://127.0.0.1:{port}",
                           "--data-dir", str(tmp_path / "d"))
    assert line == (f"Error: cannot start: listener PLAINTEXT://127.0.0.1:{port}: cannot bind "
                    f"127.0.0.1:{port}: Address already in use"), line


def test_data_dir_that_is_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("not a directory")
    line = serve_fails("--listeners", "PLAINTEXT://127.0.0.1:0", "--data-dir", str(f))
    assert line == (f"Error: cannot start: log dir {f} is a file, not a directory "
                    "(log.dirs / --data-dir must name a directory)"), line


def test_locked_data_dir_is_one_line_and_the_metadata_log_is_untouched(tmp_path):
    """The lock comes first: a torn tail in the locked dir's metadata log (which the running
    broker would own) must not be recovered (truncated) by the broker that loses the lock."""
    data = tmp_path / "data"
    proc, _port, lines = _start_serve(str(data))
    assert _stop_serve(proc) == 0, lines[-20:]
    meta = data / "__cluster_metadata-0"
    seg = sorted(meta.glob("*.log"))[0]
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x30torn")  # a torn batch
    before = {p.name: p.read_bytes() for p in meta.iterdir()}
    # Hold the dir's lock as a running broker does.
    fd = os.open(data / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        line = serve_fails("--listeners", "PLAINTEXT://127.0.0.1:0", "--data-dir", str(data))
        assert line == (f"Error: cannot start: log dir {data} is locked by another process "
                        "(is a broker already running on it?)"), line
        assert {p.name: p.read_bytes() for p in meta.iterdir()} == before
    finally:
        os.close(fd)


def test_second_broker_on_a_running_brokers_dir(tmp_path):
    data = str(tmp_path / "data")
    proc, _port, lines = _start_serve(data)
    try:
        line = serve_fails("--listeners", "PLAINTEXT://127.0.0.1:0", "--data-dir", data)
        assert "is locked by another process" in line, line
    finally:
        assert _stop_serve(proc) == 0, lines[-20:]


@pytest.mark.timeout(120)
def test_new_data_dir_is_not_reported_unclean_but_a_killed_one_is(tmp_path):
    data = str(tmp_path / "fresh")
    proc, _port, lines = _start_serve(data)
    try:
        assert not [ln for ln in lines if UNCLEAN in ln], lines
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    proc, _port, lines = _start_serve(data)
    try:
        assert [ln for ln in lines if UNCLEAN in ln], lines
    finally:
        assert _stop_serve(proc) == 0
    proc, _port, lines = _start_serve(data)  # after a clean stop: clean
    try:
        assert not [ln for ln in lines if UNCLEAN in ln], lines
    finally:
        assert _stop_serve(proc) == 0
