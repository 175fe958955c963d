"""The import-linter contracts of pyproject.toml hold: the layers (cli > local | operator >
controller | api | jobs_api > sched > models), no layered package imports the torch-using
in-job library, and nothing in the scheduler but the simulator imports the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_are_kept() -> None:
    pytest.importorskip("importlinter")
    # A child process with this tree first on the path: the contracts are checked against
    # this checkout, not whichever adl the environment has installed.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import importlinter.cli as c; raise SystemExit(c.lint_imports(no_cache=True))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BROKEN" not in proc.stdout
    # every contract was run (a config typo would silently check fewer)
    assert proc.stdout.count(" KEPT") == 3, proc.stdout
