"""Running KafkaJS (tests/clients/kafkajs/run.js) from pytest: the skip reason when node or the
npm packages are missing, and one call that feeds a JSON spec and returns the JSON result.

``make test`` installs the packages (``npm ci`` in tests/clients/kafkajs, pinned by its
package-lock.json) when npm is on the machine; without node every KafkaJS test skips with the
one reason :func:`skip_reason` gives, as the reference-Kafka tests do without Java.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

DIR = Path(__file__).resolve().parent / "kafkajs"
SCRIPT = DIR / "run.js"

# A KafkaJS run that takes longer than this is hung, not slow: every subcommand bounds its own
# waits well below it (spec.timeoutMs, 30 s by default).
RUN_TIMEOUT_S = 120.0


def node() -> str | None:
    return shutil.which("node")


def skip_reason() -> str | None:
    """Why KafkaJS tests cannot run here, or None when they can."""
    if node() is None:
        return "node is not installed (KafkaJS tests need node >= 14 and `make test`'s npm ci)"
    if not (DIR / "node_modules" / "kafkajs" / "package.json").exists():
        return ("KafkaJS is not installed: run `npm ci` in tests/clients/kafkajs "
                "(`make test` does when npm is available)")
    return None


def kafkajs_version() -> str:
    return json.loads((DIR / "node_modules" / "kafkajs" / "package.json").read_text())["version"]


def run(command: str, spec: dict[str, Any], *, check: bool = True) -> dict[str, Any]:
    """``node run.js <command>`` with ``spec`` on stdin; its JSON result.

    ``check`` fails on a script that ended in an uncaught error (exit 1), showing its stderr."""
    node_bin = node()
    assert node_bin is not None, skip_reason()
    proc = subprocess.run([node_bin, str(SCRIPT), command], input=json.dumps(spec),
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=DIR)
    lines = proc.stdout.strip().splitlines()
    assert lines, f"run.js {command} printed nothing (exit {proc.returncode}): {proc.stderr[-3000:]}"
    out: dict[str, Any] = json.loads(lines[-1])
    if check:
        assert proc.returncode == 0, f"run.js {command} failed: {out} {proc.stderr[-3000:]}"
    return out
