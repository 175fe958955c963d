"""The local launcher and the worker environment it hands out (torch-free worker commands)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adl.cli.main import app
from adl.client_lib.env import read_worker_env
from adl.client_lib.launch import Launcher, exit_code, main, worker_env, worst
from tests.waiting import ROOT

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
        "import os, signal, sys\nif os.environ['ADL_RANK'] == '0':\n    sys.exit(3)\n"
        "signal.pause()  # until the stop\n"
    )
    start = time.monotonic()
    code = Launcher([sys.executable, "-c", script], 2, grace_s=30).run()
    assert code == 3
    assert time.monotonic() - start < 30  # the sleeping peer got SIGTERM, not the grace period


def test_a_worker_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    ready = tmp_path / "ignoring"
    script = (
        "import os, signal, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.waiting import wait_for\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if os.environ['ADL_RANK'] == '0':\n"
        # stop only once the peer ignores SIGTERM (else it may die of it before that)
        f"    wait_for(lambda: os.path.exists({str(ready)!r}))\n"
        "    sys.exit(143)\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "while True:\n"
        "    signal.pause()  # SIGTERM ignored: only SIGKILL ends this\n"
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


#: prints one line to each stream, naming its rank
# one write per line: two ranks share the terminal or pipe, and an unbuffered print() of
# several parts (PYTHONUNBUFFERED) could interleave with the other rank's mid-line
SPEAK = (
    "import os, sys; r = os.environ['ADL_RANK']; "
    "sys.stdout.write(f'hello from {r}\\n'); sys.stdout.flush(); "
    "sys.stderr.write(f'warn from {r}\\n')"
)


def test_printed_output_is_prefixed_by_rank(capfd: pytest.CaptureFixture[str]) -> None:
    assert Launcher([sys.executable, "-c", SPEAK], 2, prefix=True).run() == 0
    out, err = capfd.readouterr()
    assert sorted(out.splitlines()) == ["[rank0]: hello from 0", "[rank1]: hello from 1"]
    assert sorted(err.splitlines()) == ["[rank0]: warn from 0", "[rank1]: warn from 1"]


def test_output_read_by_a_program_is_left_as_written(capfd: pytest.CaptureFixture[str]) -> None:
    """Not a terminal (a pipe, a file): no prefix unless asked, so ``adl launch ... | jq``
    reads the workers' own lines."""
    assert Launcher([sys.executable, "-c", SPEAK], 2).run() == 0
    out, _ = capfd.readouterr()
    assert sorted(out.splitlines()) == ["hello from 0", "hello from 1"]


def test_the_prefix_is_the_default_on_a_terminal(tmp_path: Path) -> None:
    import pty

    main_fd, child_fd = pty.openpty()
    driver = (
        "import sys; from adl.client_lib.launch import main; "
        f"sys.exit(main(['--nproc', '2', '--', sys.executable, '-c', {SPEAK!r}]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", driver],
        stdout=child_fd,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])},
    )
    os.close(child_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 4096)
        except OSError:  # EIO: every writer of the terminal has exited
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    assert proc.wait(timeout=60) == 0
    lines = b"".join(chunks).decode().replace("\r\n", "\n").splitlines()
    assert sorted(lines) == ["[rank0]: hello from 0", "[rank1]: hello from 1"]


def test_log_dir_writes_one_file_per_rank_and_nothing_to_the_terminal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    assert main(["--nproc", "2", "--log-dir", str(logs), "--", sys.executable, "-c", SPEAK]) == 0
    for r in range(2):
        lines = (logs / f"rank{r}.log").read_text().splitlines()
        assert sorted(lines) == [f"hello from {r}", f"warn from {r}"]  # not prefixed
    assert capfd.readouterr() == ("", "")


def test_tee_prints_and_logs(tmp_path: Path) -> None:
    argv = ["launch", "--nproc", "2", "--log-dir", str(tmp_path), "--tee", "--prefix"]
    result = CliRunner().invoke(app, [*argv, "--", sys.executable, "-c", SPEAK])
    assert result.exit_code == 0, result.output
    assert "[rank1]: hello from 1" in result.output
    assert "hello from 1" in (tmp_path / "rank1.log").read_text()


def test_tee_without_log_dir_is_refused() -> None:
    result = CliRunner().invoke(app, ["launch", "--tee", "--", sys.executable, "-c", "0"])
    assert result.exit_code != 0 and "--tee needs --log-dir" in result.output


def test_workers_get_the_torchrun_variables(tmp_path: Path) -> None:
    dump_all = (
        "import json, os, sys; "
        "open(os.path.join(sys.argv[1], 'rank' + os.environ['RANK']), 'w')"
        ".write(json.dumps(dict(os.environ)))"
    )
    code = Launcher(
        [sys.executable, "-c", dump_all, str(tmp_path)], 2, num_nodes=2, node_rank=1
    ).run()
    assert code == 0
    envs = _dumped(tmp_path)
    assert [(e["RANK"], e["LOCAL_RANK"]) for e in envs] == [("2", "0"), ("3", "1")]
    for e in envs:
        assert (e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) == ("4", "2")
        assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == ("127.0.0.1", e["ADL_MASTER_PORT"])


def test_a_worker_that_stopped_on_its_own_stops_the_others(tmp_path: Path) -> None:
    """A rank exiting 143 by itself (its checkpoint watchdog fired) ends the group, as in the
    local daemon's shim: the launcher's code is 143, not a failure."""
    script = (
        "import os, signal, sys\n"
        "if os.environ['ADL_RANK'] == '0':\n"
        "    sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
        "signal.pause()\n"
    )
    start = time.monotonic()
    assert Launcher([sys.executable, "-c", script], 2, grace_s=30).run() == 143
    assert time.monotonic() - start < 30


def test_in_a_pod_the_ranks_come_from_the_pods_environment() -> None:
    """A Kubernetes pod running several replicas runs ``launch --nproc N``; the controller put
    the environment of the pod's first replica in it. Each process must get its own place in
    the whole group (not a world of N on 127.0.0.1, which would split the job in pods)."""
    from adl.controller.env import WorkerSite
    from adl.controller.env import worker_env as replica_env

    alloc = ["a", "a", "b", "b", "b"]
    site = WorkerSite("job-g3-0.job.ns.svc", 29500, "/ckpt")
    pod_env = {"PATH": "/bin", **replica_env("ns/job", 3, alloc, 2, site)}  # pod 1: ranks 2-4
    specs = Launcher(["train"], 3, base_env=pod_env).ranks()
    for local, spec in enumerate(specs):
        # each process's env is what the controller would give that replica on its own
        assert spec.rank == 2 + local
        assert spec.env == {"PATH": "/bin", **replica_env("ns/job", 3, alloc, 2 + local, site)}
    with pytest.raises(ValueError, match=r"--nproc 2, .* runs 3 replicas"):
        Launcher(["train"], 2, base_env=pod_env)
