"""The local launcher and the worker environment it hands out (torch-free worker commands)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adl.cli.main import app
from adl.client_lib.env import read_worker_env
from adl.client_lib.launch import Launcher, exit_code, main, worker_env, worst

DUMP = (
    "import json, os, sys; "
    "env = {k: v for k, v in os.environ.items() if k.startswith('ADL_')}; "
    "open(os.path.join(sys.argv[1], 'rank' + env['ADL_RANK']), 'w').write(json.dumps(env))"
)


def _dumped(directory: Path) -> list[dict[str, str]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("rank*"))]


def test_worker_env_follows_the_contract_and_parses_back() -> None:
    env = worker_env(
        {"PATH": "/bin"},
        rank=3,
        local_rank=1,
        nproc=2,
        world_size=4,
        num_nodes=2,
        master_addr="10.0.0.1",
        master_port=2345,
        checkpoint_dir="/ckpt",
        job="ns/j",
    )
    assert env["PATH"] == "/bin" and env["ADL_GROUP"] == "0"
    parsed = read_worker_env(env)
    assert (parsed.rank, parsed.world_size, parsed.local_rank, parsed.local_world_size) == (
        3,
        4,
        1,
        2,
    )
    assert (parsed.num_nodes, parsed.master_addr, parsed.master_port) == (2, "10.0.0.1", 2345)
    assert str(parsed.checkpoint_dir) == "/ckpt" and parsed.job == "ns/j"
    assert read_worker_env({}).standalone


@pytest.mark.parametrize(
    "environ",
    [
        {"ADL_WORLD_SIZE": "2", "ADL_RANK": "2", "ADL_MASTER_PORT": "1"},
        {"ADL_WORLD_SIZE": "2", "ADL_RANK": "0"},  # no master port
        {"ADL_WORLD_SIZE": "x"},
        {"ADL_WORLD_SIZE": "2", "ADL_RANK": "0", "ADL_MASTER_PORT": "1", "ADL_NUM_NODES": "3"},
    ],
)
def test_inconsistent_environments_are_refused(environ: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        read_worker_env(environ)


def test_exit_codes() -> None:
    assert exit_code(-15) == 143 and exit_code(3) == 3
    assert worst([0, 0]) == 0
    assert worst([0, 143]) == 143
    assert worst([143, 1, 2]) == 1


def test_launcher_starts_n_ranked_workers(tmp_path: Path) -> None:
    code = Launcher(
        [sys.executable, "-c", DUMP, str(tmp_path)], 3, checkpoint_dir="/ckpt", job="ns/j"
    ).run()
    assert code == 0
    envs = _dumped(tmp_path)
    assert [e["ADL_RANK"] for e in envs] == ["0", "1", "2"]
    assert {e["ADL_WORLD_SIZE"] for e in envs} == {"3"}
    assert len({e["ADL_MASTER_PORT"] for e in envs}) == 1
    assert {e["ADL_CHECKPOINT_DIR"] for e in envs} == {"/ckpt"}


def test_a_failed_worker_stops_the_others(tmp_path: Path) -> None:
    script = (
        "import os, sys, time\nif os.environ['ADL_RANK'] == '0':\n    sys.exit(3)\ntime.sleep(60)\n"
    )
    start = time.monotonic()
    code = Launcher([sys.executable, "-c", script], 2, grace_s=30).run()
    assert code == 3
    assert time.monotonic() - start < 30  # the sleeping peer got SIGTERM, not the grace period


def test_a_worker_ignoring_sigterm_is_killed_after_the_grace_period() -> None:
    script = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if os.environ['ADL_RANK'] == '0':\n"
        "    sys.exit(143)\n"
        "time.sleep(60)\n"
    )
    start = time.monotonic()
    # The peer had to be killed: that counts as a failure (137), not a clean preemption.
    assert Launcher([sys.executable, "-c", script], 2, grace_s=1).run() == 137
    assert time.monotonic() - start < 30


def test_module_entry_point(tmp_path: Path) -> None:
    assert main(["--nproc", "2", "--", sys.executable, "-c", DUMP, str(tmp_path)]) == 0
    assert len(_dumped(tmp_path)) == 2


def test_adl_launch_command(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "launch",
            "--nproc",
            "2",
            "--job",
            "ns/j",
            "--",
            sys.executable,
            "-c",
            DUMP,
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    envs = _dumped(tmp_path)
    assert [e["ADL_RANK"] for e in envs] == ["0", "1"]
    assert {e["ADL_JOB"] for e in envs} == {"ns/j"}


@pytest.mark.parametrize(
    ("command", "code", "reason"),
    [("/nonexistent/bin", 127, "No such file"), ("{tmp}/data.txt", 126, "Permission denied")],
)
def test_a_command_that_cannot_start_is_one_line_and_the_shells_code(
    command: str, code: int, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "data.txt").write_text("not a program")  # not executable
    command = command.format(tmp=tmp_path)
    assert Launcher([command], 2).run() == code
    err = capsys.readouterr().err
    assert f"error: cannot start {command!r}: {reason}" in err
    assert "Traceback" not in err
