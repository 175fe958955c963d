"""Faults on the local backend with a real daemon process: kill -9 in the middle of a resize,
restart, and every job still ends Succeeded, no two groups of one job ever ran at once and no
checkpointed step was lost."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[1] / "unit" / "local"
sys.path.insert(0, str(KIT))

from local_kit import counter_spec  # noqa: E402

from adl.local.client import LocalBackend, daemon_pid, start_daemon, stop_daemon  # noqa: E402
from adl.local.processes import GroupPaths, group_alive, read_pidfile  # noqa: E402
from adl.models import Phase, RestartCause  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.slow


def _start(home: Path) -> int:
    return start_daemon(
        home,
        slots=4,
        round_s=0.5,
        extra_args=["--tick-s", "0.05", "--backoff-s", "0.2", "--policy", "local_kit:FilePolicy"],
    )


def _intervals(home: Path, name: str) -> list[tuple[int, float, float]]:
    """(group, started, ended) of every group of a job, from the shims' own records."""
    paths = GroupPaths.for_job(home, "default", name)
    out = []
    for g in paths.recorded_groups():
        res = json.loads(paths.result(g).read_text())
        started = res.get("started")
        if started is None:  # killed before it could record: bounded by the plan's mtime
            started = paths.plan(g).stat().st_mtime
        out.append((g, float(started), float(res["ended"])))
    return out


@pytest.mark.parametrize("kill_in", [Phase.RESTARTING, Phase.STARTING])
def test_kill9_daemon_mid_resize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_in) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(KIT), os.environ.get("PYTHONPATH", "")]))
    (home).mkdir()
    (home / "policy.json").write_text(json.dumps({"a": 1, "b": 1}))
    pid = _start(home)
    backend = LocalBackend(home, autostart=False)
    try:
        args = ("--steps", "80", "--step-s", "0.05", "--stop-s", "1.0")
        backend.submit("a", "default", counter_spec(*args, hi=3))
        backend.submit("b", "default", counter_spec(*args, hi=3))
        ck = home / "jobs/default/a/checkpoint/state.json"
        wait_for(lambda: ck.exists() and backend.get("a", "default").status.phase == Phase.RUNNING)
        (home / "policy.json").write_text(json.dumps({"a": 3, "b": 1}))
        wait_for(lambda: backend.get("a", "default").status.phase == kill_in, every=0.01)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: daemon_pid(home) is None, timeout=10)
        _start(home)
        wait_for(
            lambda: all(v.status.phase == Phase.SUCCEEDED for v in backend.list()), timeout=120
        )
        for name in ("a", "b"):
            spans = sorted(_intervals(home, name))
            for (g1, _, end1), (g2, start2, _) in itertools.pairwise(spans):
                assert start2 >= end1 - 0.05, f"{name}: group {g2} started before {g1} ended"
            log = (home / f"jobs/default/{name}/logs/r0.log").read_text()
            stops = [int(s) for s in re.findall(r"stopped group=\d+ rank=0 step=(\d+)", log)]
            starts = [
                int(s) for s in re.findall(r"start group=\d+ rank=0 world=\d+ step=(\d+)", log)
            ]
            assert starts[0] == 0
            assert starts[1:] == stops, f"{name}: resumed at {starts}, stopped at {stops}"
            assert "done group=" in log and json.loads(
                (home / f"jobs/default/{name}/checkpoint/state.json").read_text()
            ) == {"step": 80}
        a = backend.get("a", "default").status
        assert a.restart_count(RestartCause.RESIZE) == 1
        assert a.restart_count(RestartCause.FAILURE) == 0
        log_a = (home / "jobs/default/a/logs/r0.log").read_text()
        worlds = re.findall(r"start group=\d+ rank=0 world=(\d+)", log_a)
        assert worlds[-1] == "3" and a.replicas == 0  # ran last on 3; finished, holds none
    finally:
        backend.close()
        stop_daemon(home)
        for p in (home / "jobs").glob("*/*/groups/g*.pid"):
            proc = read_pidfile(p)
            if proc is not None and group_alive(proc):
                os.killpg(proc.pid, signal.SIGKILL)
