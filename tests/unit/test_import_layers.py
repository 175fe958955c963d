"""The import-linter contracts of pyproject.toml hold: the layers (cli > local | operator >
controller | api | jobs_api > sched > models), no layered package imports the torch-using
in-job library, nothing in the scheduler but the simulator imports the simulator, and nothing
but users imports the framework integrations."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
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
    # every contract of pyproject.toml was run (a config typo would silently check fewer)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert len(declared["contracts"]) >= 4  # layers, in-job library, simulator, integrations
    assert proc.stdout.count(" KEPT") == len(declared["contracts"]), proc.stdout
