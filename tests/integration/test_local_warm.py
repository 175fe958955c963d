"""Warm starts: which commands can be forked, ranks forked with their own environment, working
directory, log and exit code, and the daemon's warm shim lifecycle."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest
from local_kit import FixedPolicy, counter_spec

from adl.local import processes as P
from adl.local.warm import fork_rank, script_of
from adl.models import Phase
from tests.waiting import wait_for

PY = sys.executable


def test_script_of_accepts_this_interpreter_on_a_script_or_module() -> None:
    assert script_of([PY, "train.py", "--lr", "1"]) == ("path", "train.py", ["--lr", "1"], False)
    assert script_of([PY, "-u", "train.py"]) == ("path", "train.py", [], True)
    assert script_of([PY, "-m", "pkg.train", "-x"]) == ("module", "pkg.train", ["-x"], False)
    assert script_of([PY, "-c", "print(1)"]) is None
    assert script_of([PY]) is None
    assert script_of(["/usr/bin/env", "python", "train.py"]) is None
    assert script_of([]) is None


def test_script_of_finds_the_command_as_the_jobs_exec_would(tmp_path: Path) -> None:
    here, name = os.path.split(PY)
    path = os.pathsep.join(["/nonexistent", here])
    assert script_of([name, "train.py"], path) == ("path", "train.py", [], False)
    assert script_of([name, "train.py"], "/nonexistent") is None  # not on the job's PATH
    # a relative path is found from the job's working directory, not the daemon's
    parent, env_bin = os.path.split(here)
    relative = os.path.join(env_bin, name)
    assert script_of([relative, "-m", "m"], "", parent) == ("module", "m", [], False)
    assert script_of([relative, "-m", "m"], "", "/") is None


def test_another_environments_python_is_not_this_interpreter(tmp_path: Path) -> None:
    """Every virtual environment's python links to the same base interpreter; a job that runs
    another environment's must not be forked inside the daemon's."""
    other = tmp_path / "other-venv" / "bin"
    other.mkdir(parents=True)
    (other / "python").symlink_to(os.path.realpath(PY))
    assert script_of(["python", "train.py"], str(other)) is None
    assert script_of([str(other / "python"), "train.py"]) is None


def test_a_bare_python_job_is_resized_from_a_warm_shim(daemon_factory, backend, home) -> None:  # type: ignore[no-untyped-def]
    policy = FixedPolicy()
    policy.replicas["a"] = 1
    d = daemon_factory(policy)
    spec = counter_spec("--steps", "100", "--step-s", "0.05", hi=2)
    spec.template["spec"]["containers"][0]["command"][0] = "python"  # found on the job's PATH
    backend.submit("a", "default", spec)
    ck = home / "jobs/default/a/checkpoint/state.json"
    wait_for(lambda: ck.exists() and backend.get("a", "default").status.phase == Phase.RUNNING)
    wait_for(lambda: "default/a" in d.groups._warm, timeout=10)
    policy.replicas["a"] = 2
    d._round_due = True
    wait_for(lambda: backend.get("a", "default").status.phase == Phase.SUCCEEDED, timeout=60)
    log = (home / "jobs/default/a/logs/r0.log").read_text()
    assert "start group=2 rank=0 world=2" in log
    assert "warm=1" in log.split("=== group 2")[1]


def _fork(tmp_path: Path, body: str, *args: str, env: dict[str, str] | None = None) -> tuple:  # type: ignore[type-arg]
    script = tmp_path / "job.py"
    script.write_text(body)
    log = tmp_path / "rank.log"
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    proc = fork_rank([PY, str(script), *args], env or {"ONLY": "this"}, str(work), str(log))
    assert proc is not None
    code = proc.wait()
    return code, log.read_text() if log.exists() else ""


def test_a_forked_rank_runs_the_script_as_main_with_its_env_cwd_and_log(tmp_path: Path) -> None:
    body = (
        "import os, sys\n"
        "print('main' if __name__ == '__main__' else 'imported', sys.argv[1:], os.getcwd(),"
        " dict(os.environ), sys.path[0], flush=True)\n"
    )
    code, out = _fork(tmp_path, body, "--a", "1")
    assert code == 0
    assert "main ['--a', '1']" in out
    assert str(tmp_path / "work") in out
    assert "{'ONLY': 'this'}" in out  # exactly the rank's environment
    assert out.rstrip().endswith(str(tmp_path))  # sys.path[0] is the script's folder


@pytest.mark.parametrize(
    ("body", "code", "text"),
    [
        ("import sys; sys.exit(3)", 3, ""),
        ("raise SystemExit(143)", 143, ""),
        ("import sys; sys.exit('bad config')", 1, "bad config"),
        ("raise RuntimeError('boom')", 1, "RuntimeError: boom"),
        ("import atexit; atexit.register(lambda: print('bye', flush=True))", 0, "bye"),
        (
            "import threading\n"
            # finishes only once the main thread has (the interpreter's shutdown has begun)
            "def late(): threading.main_thread().join(); print('thread done', flush=True)\n"
            "threading.Thread(target=late).start()",
            0,
            "thread done",  # non-daemon threads are joined before exit
        ),
    ],
)
def test_exit_codes_and_output_match_a_normal_interpreter(
    tmp_path: Path, body: str, code: int, text: str
) -> None:
    got, out = _fork(tmp_path, body)
    assert got == code
    assert text in out


def test_sigterm_reaches_the_forked_rank(tmp_path: Path) -> None:
    script = tmp_path / "sleep.py"
    script.write_text("import signal\nprint('up', flush=True)\nsignal.pause()\n")
    log = tmp_path / "r.log"
    proc = fork_rank([PY, str(script)], {}, None, str(log))
    assert proc is not None
    wait_for(lambda: log.exists() and "up" in log.read_text(), timeout=10)
    proc.terminate()
    assert proc.wait() == -signal.SIGTERM


def test_without_prewarm_groups_start_fresh(daemon_factory, backend, home) -> None:  # type: ignore[no-untyped-def]
    policy = FixedPolicy()
    policy.replicas["a"] = 1
    d = daemon_factory(policy)
    d.s.prewarm = False
    backend.submit("a", "default", counter_spec("--steps", "60", "--step-s", "0.05", hi=2))
    ck = home / "jobs/default/a/checkpoint/state.json"
    wait_for(lambda: ck.exists() and backend.get("a", "default").status.phase == Phase.RUNNING)
    policy.replicas["a"] = 2
    d._round_due = True
    wait_for(lambda: backend.get("a", "default").status.phase == Phase.SUCCEEDED, timeout=60)
    log = (home / "jobs/default/a/logs/r0.log").read_text()
    assert "start group=2 rank=0 world=2" in log
    assert "warm=1" not in log
    assert not (home / "jobs/default/a/groups/warm.shim.log").exists()


def test_a_warm_shim_is_dropped_when_its_job_goes_away(tmp_path: Path) -> None:
    paths = P.GroupPaths(tmp_path / "job")
    proc, popen = P.prewarm(paths, dict(os.environ), None)
    try:
        assert paths.warm_shims() == [paths.warm_pid(proc.pid)] and P.alive(proc)
        _wait_until_catches_sigterm(popen.pid)  # the shim is running, not still starting
        P.drop_warm(paths)
        assert popen.wait(timeout=10) == -signal.SIGKILL
        assert paths.warm_shims() == []
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()


def test_a_group_stopped_before_its_ranks_started_is_recorded_as_stopped(tmp_path: Path) -> None:
    """SIGTERM reaching a warm shim that was handed a plan but is still importing: the ranks
    count as stopped (-15), like a cold shim's, not as a dead shim."""
    import json

    from adl.local.warm import _record_stopped

    result = tmp_path / "g3.result.json"
    plan = tmp_path / "g3.plan.json"
    plan.write_text(json.dumps({"result": str(result), "ranks": [{"rank": 0}, {"rank": 1}]}))
    go = tmp_path / "warm-1.go"
    go.write_text(str(plan))
    _record_stopped(go)
    assert json.loads(result.read_text())["codes"] == [-signal.SIGTERM] * 2


def test_a_stop_during_preload_is_remembered_not_raised_into_the_library() -> None:
    """Raised inside a library's import, the stop could be swallowed (a bare ``except:``; under
    load 6 of 30 shims signalled 0.35-0.39 s into the preload then sat out their wait) or abort
    the process (raised through C++: ``terminate called ...``). It is remembered and checked
    between imports instead."""
    from adl.local.warm import _StopOnTerm, _Stopped

    stop = _StopOnTerm()
    stop.check()  # nothing requested yet
    stop(signal.SIGTERM, None)  # no exception into the module being imported
    with pytest.raises(_Stopped):
        stop.check()


def test_a_stop_while_waiting_interrupts_at_once_and_is_no_exception() -> None:
    from adl.local.warm import _StopOnTerm, _Stopped

    stop = _StopOnTerm()
    stop.interrupt = True
    with pytest.raises(_Stopped), contextlib.suppress(Exception):
        stop(signal.SIGTERM, None)


def _wait_until_catches_sigterm(pid: int, timeout_s: float = 60.0) -> None:
    """A loaded machine may take seconds to start Python. A SIGTERM before the handler is in
    kills the shim by the default action (also quiet, but exit -15); test the handled path."""

    def catches() -> bool:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(
            next(ln for ln in status.splitlines() if ln.startswith("SigCgt:")).split()[1], 16
        )
        return bool(caught & (1 << (signal.SIGTERM - 1)))

    wait_for(catches, timeout_s, "the warm shim installed its SIGTERM handler")


def test_an_idle_warm_shim_leaves_quietly_on_sigterm(tmp_path: Path) -> None:
    paths = P.GroupPaths(tmp_path / "job")
    _, popen = P.prewarm(paths, dict(os.environ), None)
    try:
        _wait_until_catches_sigterm(popen.pid)
        # in the middle of preloading torch: its library is being loaded
        maps = Path(f"/proc/{popen.pid}/maps")
        wait_for(lambda: "libtorch" in maps.read_text(), 60, "torch being imported")
        popen.send_signal(signal.SIGTERM)
        assert popen.wait(timeout=60) == 0
        assert not list((tmp_path / "job" / "groups").glob("*.result.json"))
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()


def test_gpu_groups_start_cold(daemon_factory, home) -> None:  # type: ignore[no-untyped-def]
    d = daemon_factory(FixedPolicy())
    d.s.gpus = 1
    rec = d.store.add_job("default", "g", counter_spec(hi=2))
    d.groups.prewarm(rec)
    assert d.groups._warm == {}
    assert not list(home.glob("jobs/default/g/groups/warm-*"))
