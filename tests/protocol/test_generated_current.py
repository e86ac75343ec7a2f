"""The committed generated codecs must match what tools/gen_protocol.py produces."""

from __future__ import annotations

import subprocess
import sys

from .conftest import GEN_PATH, ROOT, SCHEMAS, gen_module, requires_schemas


@requires_schemas
def test_generated_output_is_current():
    assert gen_module().main(["--check", "--schemas", str(SCHEMAS)]) == 0


@requires_schemas
def test_check_cli_exit_code():
    proc = subprocess.run(
        [sys.executable, str(GEN_PATH), "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
