"""The worker contract module: one definition of each name, importable by anything."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import adl
from adl import contract as C


def test_contract_imports_nothing_from_adl_and_no_third_party_module() -> None:
    # It sits under everything (the shim imports it before torch): only the standard library.
    tree = ast.parse(Path(C.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_contract_loads_without_torch_or_pydantic() -> None:
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "sys.modules['pydantic'] = None\n"
        "import adl.contract, adl.supervisor\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_exit_codes_are_shell_style() -> None:
    assert C.EXIT_STOPPED == 143 == C.exit_code(-15)
    assert C.exit_code(-9) == C.EXIT_KILLED == 137
    assert C.exit_code(3) == 3
    assert {0, 143} == C.CLEAN_EXITS


def test_torch_env_mirrors_the_adl_variables_present() -> None:
    adl_env = {C.ENV_RANK: "3", C.ENV_WORLD_SIZE: "4", C.ENV_MASTER_ADDR: "h", "OTHER": "x"}
    assert C.torch_env(adl_env) == {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "h"}
    assert set(C.TORCH_ENV_VARS) == {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }


def test_job_key_round_trips_and_refuses_malformed_keys() -> None:
    key = C.JobKey.parse("ml/bert")
    assert (key.namespace, key.name) == ("ml", "bert") and str(key) == "ml/bert"
    assert key == C.JobKey("ml", "bert") and hash(key) == hash(C.JobKey("ml", "bert"))
    assert {key: 1}[C.JobKey.parse(str(key))] == 1
    for bad in ("bert", "/bert", "ml/", "a/b/c", ""):
        with pytest.raises(ValueError, match="namespace/name"):
            C.JobKey.parse(bad)
    with pytest.raises(ValueError):
        C.JobKey("", "x")
    with pytest.raises(AttributeError):
        key.name = "other"  # type: ignore[misc]


def test_no_module_defines_the_contract_values_again() -> None:
    """The values live only in adl.contract: a second ``= 143`` or ``"adl.dev/..."`` literal
    elsewhere is the duplication this module removed."""
    root = Path(adl.__file__).parent
    # daemon.py is being rewritten by the lead: only its import and the (0, 143) constant were
    # changed here, this read of the port is left for after that merge
    pending = {"local/daemon.py: 'ADL_MASTER_PORT'"}
    offenders = []
    for path in root.rglob("*.py"):
        if path.name == "contract.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and (
                node.value == 143
                or (isinstance(node.value, str) and node.value.startswith("adl.dev"))
                or (isinstance(node.value, str) and node.value in C.WORKER_ENV_VARS)
            ):
                where = f"{path.relative_to(root)}: {node.value!r}"
                if where not in pending:
                    offenders.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    assert offenders == []
