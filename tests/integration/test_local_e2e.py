"""The whole loop on one machine, end to end: a real daemon process, real workers running the
demo job (torch, gloo across processes), real HTTP hints from the workers to the daemon's API,
the scheduler growing a job from those hints, and every job finishing with a falling loss."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from adl.cli.cmd_demo import run_demo
from adl.local.client import start_daemon
from adl.local.processes import group_alive, read_pidfile
from adl.local.store import Store

pytestmark = pytest.mark.slow


def test_demo_loop_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    jobs = (
        ("grower", "compute", 1200, 1, 4, 0.0),
        ("late", "small", 400, 1, 2, 20.0),
    )
    try:
        # By default a new job starts on up to a node (bootstrap_replicas), here all 4 slots,
        # before it has reported anything. Growth past what a job has measured needs its own
        # report, so the daemon (run_demo uses the one already serving) starts jobs on one
        # replica: growing the grower proves the hints path.
        start_daemon(home, slots=4, round_s=1.0, extra_args=["--policy-knob=bootstrap_replicas=1"])
        # At least 10 ms a step: on a fast, quiet machine the grower would otherwise finish its
        # 1200 steps in a few seconds, before it has reported hints and been grown.
        rows = run_demo(
            home,
            slots=4,
            round_s=1.0,
            timeout_s=400,
            jobs=jobs,
            live=True,
            worker_args=("--step-sleep", "0.01"),
        )
    finally:  # the daemon is stopped by run_demo; workers of a timed-out run are not
        for pid_file in home.glob("jobs/*/*/groups/g*.pid"):
            proc = read_pidfile(pid_file)
            if proc is not None and group_alive(proc):
                os.killpg(proc.pid, signal.SIGKILL)
    # the live table's last frame, printed to a pipe, ends its line (what follows starts anew)
    out = capsys.readouterr().out
    assert "grower" in out and out.endswith("\n"), out[-200:]
    by = {r.name: r for r in rows}
    assert set(by) == {"grower", "late"}
    for r in rows:
        assert r.phase == "Succeeded", r
        assert r.first_loss is not None and r.last_loss is not None
        assert r.last_loss < r.first_loss, r
    # the scheduler only grows a job past 1 replica after the job profiled itself and reported
    # it over HTTP: growth proves the hints path works
    assert by["grower"].max_replicas_seen >= 2 and by["grower"].grew
    store = Store(home / "state.db")
    try:
        for rec in store.jobs():
            assert rec.hints is not None and rec.hints.perf_params is not None
            assert rec.hints.max_profiled_replicas >= 1
    finally:
        store.close()
