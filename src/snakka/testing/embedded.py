"""EmbeddedBroker: start/stop/restart/kill a real snakka broker for tests (see package doc)."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from snakka.broker import Broker
    from snakka.security.authorizer import Authorizer

# How long start-up may take before the test fails instead of hanging.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
READY_PREFIX = "SNAKKA_READY "
METRICS_PREFIX = "SNAKKA_METRICS "  # printed before the ready line when metrics are on
# Ports tried at a first start that was asked for "any port" (see _port_below_ephemeral_range).
PORT_ATTEMPTS = 8


def _port_below_ephemeral_range() -> int:
    """A random port just below the kernel's ephemeral range, or 0 where the range is unknown.

    A broker that restarts must get its port back (clients' bootstrap strings name it). A port
    the kernel handed out as "any port" is in the ephemeral range, which every outgoing
    connection on the machine draws its local port from: while the broker is down, a client's
    connection (of any process) may take it and the restart fails with "Address already in
    use" (seen in CI). Below the range nothing is handed out implicitly."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    first = max(1024, low - 16384)
    if low - first < 1024:
        return 0
    return random.randrange(first, low)


def _address_in_use(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno == errno.EADDRINUSE:
        return True
    return "Address already in use" in str(e)  # a subprocess's start-up output


class EmbeddedBroker:
    def __init__(self, data_dir: str | None = None, *, config: Mapping[str, str] | None = None,
                 mode: Literal["thread", "subprocess"] = "thread", port: int = 0,
                 host: str = "localhost", log_level: str = "WARNING",
                 authorizer: Authorizer | None = None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="snakka-test-")
        self.mode = mode
        self.host = host
        self.log_level = log_level
        # metrics.port and console.port: off unless the test turns them on (``snakka serve``,
        # which the subprocess mode runs, would otherwise serve them on 9404 and 9021); "0"
        # picks an ephemeral port.
        self.config = {"listeners": f"PLAINTEXT://{host}:{port}", "log.dirs": self.data_dir,
                       "metrics.port": "-1", "console.port": "-1",
                       **(dict(config) if config else {})}
        self.port: int | None = None
        self.metrics_port: int | None = None  # the metrics endpoint's port, when it is on
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._broker: Broker | None = None
        self._proc: subprocess.Popen | None = None
        self._stdout_thread: threading.Thread | None = None
        self.output: list[str] = []
        # Thread mode only: an Authorizer object for the broker's requests (tests of the
        # handlers' authorization checks); None allows everything.
        if authorizer is not None and mode != "thread":
            raise ValueError("an injected authorizer needs mode='thread'")
        self.authorizer = authorizer

    # -- public API ----------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise RuntimeError("broker is not running")
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{h}:{self.port}"

    @property
    def metrics_url(self) -> str:
        """The Prometheus endpoint (``config={"metrics.port": "0"}`` turns it on)."""
        if self.metrics_port is None:
            raise RuntimeError("the metrics endpoint is off (set metrics.port)")
        return f"http://localhost:{self.metrics_port}/metrics"

    @property
    def console_url(self) -> str:
        """The web console (``config={"console.port": "0"}`` turns it on; thread mode)."""
        console = self._broker.console if self._broker is not None else None
        if console is None:
            raise RuntimeError("the web console is off (set console.port; thread mode)")
        return console.url

    @property
    def broker(self):
        """The in-process Broker object (thread mode only), for white-box assertions."""
        return self._broker

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> EmbeddedBroker:
        listeners = self.config["listeners"]
        if self.port is None and "," not in listeners and listeners.endswith(":0"):
            self._start_on_a_restartable_port(listeners[:-2])
        elif self.mode == "thread":
            self._start_thread()
        else:
            self._start_subprocess()
        # Later restarts reuse the same port so clients' bootstrap strings stay valid.
        self.config["listeners"] = self.config["listeners"].rsplit(":", 1)[0] + f":{self.port}"
        if self.metrics_port is not None and self.config.get("metrics.port") == "0":
            self.config["metrics.port"] = str(self.metrics_port)  # the same scrape URL too
        return self

    def _start_on_a_restartable_port(self, prefix: str) -> None:
        """The first start of a broker asked for any port: on one below the ephemeral range
        (restarts reuse it), another one if it is taken, else as asked."""
        for _ in range(PORT_ATTEMPTS):
            port = _port_below_ephemeral_range()
            if port == 0:
                break
            self.config["listeners"] = f"{prefix}:{port}"
            try:
                if self.mode == "thread":
                    self._start_thread()
                else:
                    self._start_subprocess()
                return
            except (OSError, RuntimeError) as e:
                if not _address_in_use(e):
                    raise
                self.output.clear()
        self.config["listeners"] = f"{prefix}:0"
        if self.mode == "thread":
            self._start_thread()
        else:
            self._start_subprocess()

    def stop(self) -> None:
        if self.mode == "thread":
            self._stop_thread()
        else:
            self._stop_subprocess(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the broker process (subprocess mode): a crash, no clean shutdown."""
        if self.mode != "subprocess":
            raise RuntimeError("kill() needs mode='subprocess'")
        self._stop_subprocess(signal.SIGKILL)

    def restart(self) -> EmbeddedBroker:
        self.stop()
        return self.start()

    def close(self) -> None:
        if self._thread is not None or self._proc is not None:
            self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            # tiered storage's default local backend lives beside the data dir
            # (rsm.config.storage.root empty: '<log dir>-remote')
            shutil.rmtree(self.data_dir.rstrip(os.sep) + "-remote", ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- thread mode ---------------------------------------------------------------------
    def _start_thread(self) -> None:
        from snakka.broker import Broker
        from snakka.config import BrokerConfig

        started = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            loop: asyncio.AbstractEventLoop
            try:
                import uvloop
                loop = uvloop.new_event_loop()
            except ImportError:  # pragma: no cover - uvloop is a dependency
                loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                broker = self._broker = Broker(BrokerConfig(dict(self.config)),
                                               authorizer=self.authorizer)
                loop.run_until_complete(broker.start())
                self.port = broker.bound_port
                if broker.metrics_server is not None:
                    self.metrics_port = broker.metrics_server.port
            except BaseException as e:
                error.append(e)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(broker.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="snakka-embedded", daemon=True)
        self._thread.start()
        if not started.wait(START_TIMEOUT_S):
            raise TimeoutError("embedded broker did not start")
        if error:
            self._thread.join()
            self._thread = None
            raise error[0]

    def _stop_thread(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT_S)
        self._thread = None
        self._broker = None

    # -- subprocess mode -----------------------------------------------------------------
    def _start_subprocess(self) -> None:
        cmd = [sys.executable, "-m", "snakka", "serve", "--ready-line",
               "--log-level", self.log_level]
        for k, v in self.config.items():
            cmd += ["--override", f"{k}={v}"]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, bufsize=1, start_new_session=True)
        ready = threading.Event()
        port: list[int] = []
        proc = self._proc

        def drain() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.output.append(line.rstrip("\n"))
                if line.startswith(METRICS_PREFIX):
                    self.metrics_port = int(line[len(METRICS_PREFIX):].split("=", 1)[1])
                if line.startswith(READY_PREFIX) and not ready.is_set():
                    fields = dict(kv.split("=", 1) for kv in line[len(READY_PREFIX):].split())
                    port.append(int(fields["port"]))
                    ready.set()
            ready.set()  # process ended

        self._stdout_thread = threading.Thread(target=drain, daemon=True)
        self._stdout_thread.start()
        if not ready.wait(START_TIMEOUT_S) or not port:
            self._stop_subprocess(signal.SIGKILL)
            raise RuntimeError("snakka subprocess failed to start:\n" + "\n".join(self.output[-40:]))
        self.port = port[0]

    def _stop_subprocess(self, sig: int) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._stdout_thread is not None:
            self._stdout_thread.join(5)
        self._proc = None
